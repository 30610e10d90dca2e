"""Argument validation shared by the pure transforms.

Every check raises ``ValueError`` whose message names the argument and the value received, the
convention of the whole library (``head_dim must be even, got 63``). Checks run on static Python
values and on array *shapes* only, so they are free under ``jax.jit``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import jax.numpy as jnp
import numpy as np


def check_positive_int(name: str, value: Any) -> int:
  """Returns ``value`` if it is an integer >= 1, else raises ``ValueError``."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
    raise ValueError(f"{name} must be a positive integer, got {value!r}")
  return int(value)


def check_nonnegative_int(name: str, value: Any) -> int:
  """Returns ``value`` if it is an integer >= 0, else raises ``ValueError``."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
    raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
  return int(value)


def check_even(name: str, value: int) -> int:
  """Returns ``value`` if it is a positive even integer, else raises ``ValueError``."""
  check_positive_int(name, value)
  if value % 2:
    raise ValueError(f"{name} must be even, got {value}")
  return int(value)


def check_positive_float(name: str, value: Any) -> float:
  """Returns ``float(value)`` if it is a finite number > 0, else raises ``ValueError``."""
  try:
    as_float = float(value)
  except (TypeError, ValueError):
    raise ValueError(f"{name} must be a positive number, got {value!r}") from None
  if isinstance(value, bool) or not math.isfinite(as_float) or as_float <= 0:
    raise ValueError(f"{name} must be a positive finite number, got {value!r}")
  return as_float


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
  """Returns ``value`` if it is one of ``choices``, else raises ``ValueError`` listing them."""
  if value not in choices:
    raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
  return value


def check_integer_array(name: str, x: Any) -> jnp.ndarray:
  """Returns ``x`` as a jax array, raising ``ValueError`` unless its dtype is an integer."""
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.integer):
    raise ValueError(
        f"{name} must be an integer array (int32 positions keep angles exact), got dtype"
        f" {x.dtype}")
  return x


def check_min_rank(name: str, x: Any, rank: int, axes: str) -> None:
  """Raises ``ValueError`` unless ``x.ndim >= rank``; ``axes`` names the expected layout."""
  if jnp.ndim(x) < rank:
    raise ValueError(f"{name} must have shape {axes} (rank >= {rank}), got shape {jnp.shape(x)}")
