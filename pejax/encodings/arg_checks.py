"""Argument validation shared by the pure transforms.

Every check raises ``ValueError`` whose message names the argument and the value received, the
convention of the whole library (``head_dim must be even, got 63``). Checks run on static Python
values and on array *shapes* only, so they are free under ``jax.jit``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import jax
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


def check_base(name: str, value: Any) -> float:
  """A wavelength base (RoPE, sinusoids): a finite float greater than 1.

  Args:
    name: the argument's name, for the message.
    value: the value received.

  Returns:
    ``value`` as a float.

  Raises:
    ValueError: naming ``name`` and the value if it is not a finite number > 1.
  """
  value = check_positive_float(name, value)
  if value <= 1.0:
    raise ValueError(f"{name} must be greater than 1, got {value}")
  return value


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
  """Returns ``value`` if it is one of ``choices``, else raises ``ValueError`` listing them."""
  if value not in choices:
    raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
  return value


_INT32 = np.iinfo(np.int32)


def check_integer_array(name: str, x: Any) -> jnp.ndarray:
  """Returns ``x`` as a jax array, raising ``ValueError`` unless its dtype is an integer.

  Concrete values of a dtype wider than int32 (int64, uint32, uint64, Python ints) must fit in
  int32: JAX (without x64) would otherwise wrap ``2**40`` to ``0`` silently when converting.
  Traced values are already int32 / narrower, or uint32 (whose consumers here convert to float
  or clip, never wrap).
  """
  if not isinstance(x, jax.core.Tracer):
    host = x if isinstance(x, jax.Array) else np.asarray(x)
    if not np.issubdtype(host.dtype, np.integer):
      raise ValueError(
          f"{name} must be an integer array (int32 positions keep angles exact), got dtype"
          f" {host.dtype}")
    info = np.iinfo(host.dtype)
    if (info.min < _INT32.min or info.max > _INT32.max) and np.size(host):
      low, high = int(host.min()), int(host.max())
      if low < _INT32.min or high > _INT32.max:
        raise ValueError(
            f"{name} must fit in int32 [{_INT32.min}, {_INT32.max}], got min {low} and max "
            f"{high}")
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


def check_query_key_positions(q_positions: Any, k_positions: Any
                              ) -> tuple[jnp.ndarray, jnp.ndarray, tuple[int, ...]]:
  """Validates ``[..., Lq]`` / ``[..., Lk]`` integer positions of a relative-position bias.

  Returns:
    ``(q_positions, k_positions, batch_shape)`` with ``batch_shape`` the broadcast of their
    leading dims.

  Raises:
    ValueError: for non-integer dtypes, rank 0, or leading dims that do not broadcast.
  """
  q_positions = check_integer_array("q_positions", q_positions)
  k_positions = check_integer_array("k_positions", k_positions)
  check_min_rank("q_positions", q_positions, 1, "[..., Lq]")
  check_min_rank("k_positions", k_positions, 1, "[..., Lk]")
  try:
    batch_shape = np.broadcast_shapes(q_positions.shape[:-1], k_positions.shape[:-1])
  except ValueError:
    raise ValueError(
        "q_positions and k_positions must have broadcastable leading dims, got shapes"
        f" {q_positions.shape} and {k_positions.shape}") from None
  return q_positions, k_positions, batch_shape
