"""p-RoPE: keep the highest fraction p of RoPE frequencies, rotate the rest by zero.

Axes: L length, H heads, D head dim, F = D / 2 frequencies (one per rotated channel pair).

RoPE's frequencies ``theta_i = base ** (-2 i / D)`` run from 1 (pair 0, fastest) down to nearly 0.
Barbero et al. find that the lowest frequencies act as "semantic" channels that drift over long
distances, and propose p-RoPE: keep the ``floor(p * D / 2)`` highest frequencies unchanged and set
the others to exactly zero, so those pairs are never rotated (a NoPE sub-space inside each head).
``p = 1`` is RoPE, ``p = 0`` is NoPE.

This is *not* partial rotary (``rotary_dim = p * D``): partial rotary re-spreads its frequencies
over ``base ** (-2 i / (p D))`` and so keeps the slow ones, while p-RoPE keeps the spectrum of
full-width RoPE and truncates its slow end. The count ``floor(p * D / 2)`` and the exponent over
the full D match Gemma 4's "proportional" RoPE (its global layers use p = 0.25).

References:
  Barbero et al. 2024, "Round and Round We Go! What makes Rotary Positional Encodings useful?",
  arXiv 2410.06205.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks
from pejax.encodings.rope import RopeConfig
from pejax.encodings.rope import rope_inv_freq

Array = jax.Array

DEFAULT_P = 0.25  # One of the two fractions Barbero et al. report (0.25, 0.75); Gemma 4's value.


def _check_p(p: Any) -> float:
  try:
    value = float(p)
  except (TypeError, ValueError):
    raise ValueError(f"p must be a number in [0, 1], got {p!r}") from None
  if isinstance(p, bool) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
    raise ValueError(f"p must be a number in [0, 1], got {p!r}")
  return value


def p_rope_num_kept(num_frequencies: int, *, p: float = DEFAULT_P) -> int:
  """How many of the highest frequencies p-RoPE keeps: ``floor(p * F)``.

  A tolerance of 1e-9 absorbs float error in ``p * F`` (``0.3 * 10`` is 2.9999999999999996).

  Args:
    num_frequencies: F, the number of RoPE frequencies (``rotary_dim // 2``).
    p: kept fraction in ``[0, 1]``.

  Returns:
    An int in ``[0, F]``.
  """
  num_frequencies = arg_checks.check_positive_int("num_frequencies", num_frequencies)
  return min(num_frequencies, int(math.floor(_check_p(p) * num_frequencies + 1e-9)))


def p_rope_mask(num_frequencies: int, *, p: float = DEFAULT_P) -> Array:
  """The p-RoPE frequency mask: True for the kept (highest) frequencies.

  Args:
    num_frequencies: F, the number of RoPE frequencies (``rotary_dim // 2``), ordered from the
      highest (index 0) to the lowest as :func:`pejax.encodings.rope_inv_freq` returns them.
    p: kept fraction in ``[0, 1]``.

  Returns:
    bool ``[F]``: the first ``floor(p * F)`` entries True, the rest False.

  References:
    Barbero et al. 2024, arXiv 2410.06205.
  """
  kept = p_rope_num_kept(num_frequencies, p=p)
  return jnp.asarray(np.arange(num_frequencies) < kept)


def p_rope_inv_freq(head_dim: int, *, p: float = DEFAULT_P, base: float = 10000.0) -> Array:
  """Inverse frequencies of p-RoPE: RoPE's, with the lowest ``1 - p`` fraction set to zero.

  Pass the result to :func:`pejax.encodings.apply_rope`; a zero frequency rotates its pair by 0.

  Args:
    head_dim: D (even); all D channels take part, F = D / 2 frequencies.
    p: kept fraction in ``[0, 1]`` (1 is RoPE, 0 is NoPE).
    base: RoPE base theta (10000).

  Returns:
    float32 ``[D // 2]``: ``base ** (-2 i / D)`` for ``i < floor(p * D / 2)``, else 0.

  References:
    Barbero et al. 2024, arXiv 2410.06205.
  """
  inv_freq, _ = rope_inv_freq(RopeConfig(head_dim, base=base))
  mask = p_rope_mask(head_dim // 2, p=p)
  return jnp.where(mask, inv_freq, jnp.zeros_like(inv_freq))
