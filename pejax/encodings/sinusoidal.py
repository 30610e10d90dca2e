"""Fixed sinusoidal absolute position encoding (Vaswani et al., 2017).

Axes: N number of positions, L length, D model (embedding) dim.

Column layout is the paper's, interleaved: for k = 0 .. D/2 - 1 and wave number
w_k = base^(-2k / D),

  PE[i, 2k]     = sin(i * w_k)
  PE[i, 2k + 1] = cos(i * w_k)

Because every (sin, cos) column pair is a point on a circle of angle i * w_k, shifting the position
by k is a fixed block-diagonal rotation: PE(i + k) = M_k PE(i), with M_k independent of i.

The Transformer multiplies the token embeddings by sqrt(D) before adding this table; that scaling
belongs to the caller::

  x = token_embed(tokens) * jnp.sqrt(d_model).astype(dtype)   # optional, as in the paper
  x = x + sinusoidal_embedding(positions, d_model, dtype=x.dtype)

Angles are computed in float32 from integer positions (exact for |position| < 2^24) whatever the
requested output dtype, and cast only at the end.

References:
  Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762, section 3.5.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks


def _inv_freq(dim: int, *, base: float = 10000.0) -> jnp.ndarray:
  """Returns the wave numbers w_k = base^(-2k / dim), k = 0 .. dim/2 - 1.

  Args:
    dim: Even embedding dim D >= 2.
    base: Wavelength base (> 1); the longest wavelength is about 2 * pi * base.

  Returns:
    `[D / 2]` float32 (computed in float64, rounded once).
  """
  dim = arg_checks.check_even("dim", dim)
  base = arg_checks.check_positive_float("base", base)
  if base <= 1.0:
    raise ValueError(f"base must be > 1, got {base!r}")
  exponents = np.arange(0, dim, 2, dtype=np.float64) / dim
  return jnp.asarray(base ** -exponents, dtype=jnp.float32)


def sinusoidal_embedding(
    positions: Any,
    dim: int,
    *,
    base: float = 10000.0,
    dtype: Any = jnp.float32,
) -> jnp.ndarray:
  """Sinusoidal encodings of explicit integer positions.

  Positions may be any integer array (offsets for KV-cache decoding, restarts for packed
  sequences, randomized positions); negative positions are valid and follow the same formula.

  Args:
    positions: `[..., L]` integer positions (any shape; any leading batch dims).
    dim: Even embedding dim D >= 2.
    base: Wavelength base (> 1).
    dtype: Output dtype; the angles are float32 regardless.

  Returns:
    `[..., L, D]` array of `dtype`: column 2k = sin(p * w_k), column 2k + 1 = cos(p * w_k).

  Raises:
    ValueError: if `positions` is not an integer array, `dim` is not an even integer >= 2, or
      `base` is not a finite number > 1.
  """
  positions = arg_checks.check_integer_array("positions", positions)
  inv_freq = _inv_freq(dim, base=base)
  return _embed(positions, inv_freq, jnp.dtype(dtype))


@functools.partial(jax.jit, static_argnums=(2,))
def _embed(positions: jnp.ndarray, inv_freq: jnp.ndarray, dtype: Any) -> jnp.ndarray:
  """Validated `[...]` int positions, `[D/2]` float32 wave numbers -> `[..., D]` of `dtype`."""
  inv_freq = jnp.reshape(inv_freq, (1,) * positions.ndim + inv_freq.shape)
  angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [..., L, D/2] float32
  table = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)  # [..., L, D/2, 2]
  return jnp.reshape(table, positions.shape + (2 * inv_freq.shape[-1],)).astype(dtype)


def sinusoidal_table(
    num_positions: int,
    dim: int,
    *,
    base: float = 10000.0,
    dtype: Any = jnp.float32,
) -> jnp.ndarray:
  """The sinusoidal table for positions 0 .. N - 1.

  Example (the paper's scaled embedding)::

    table = sinusoidal_table(max_len, d_model)
    x = token_embed(tokens) * jnp.sqrt(d_model) + table[:seq_len]

  Args:
    num_positions: Number of rows N >= 1.
    dim: Even embedding dim D >= 2.
    base: Wavelength base (> 1).
    dtype: Output dtype; the angles are float32 regardless.

  Returns:
    `[N, D]` array of `dtype`; row i equals `sinusoidal_embedding(i, D)`.

  Raises:
    ValueError: on `num_positions < 1` and the errors of `sinusoidal_embedding`.
  """
  num_positions = arg_checks.check_positive_int("num_positions", num_positions)
  if num_positions > 2 ** 31:
    raise ValueError(f"num_positions must be <= 2**31 (int32 positions), got {num_positions}")
  positions = jnp.arange(num_positions, dtype=jnp.int32)
  return sinusoidal_embedding(positions, dim, base=base, dtype=dtype)
