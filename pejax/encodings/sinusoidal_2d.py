"""Fixed 2-D (and N-D) sinusoidal position encodings for patch grids (MAE / MoCo v3 style).

Axes: N number of patches, A number of grid axes, D embedding dim.

The channels are split into A equal blocks; block a is the 1-D Vaswani sinusoid
(:func:`pejax.encodings.sinusoidal.sinusoidal_embedding`, interleaved sin/cos, wave numbers
``base^(-2k / (D/A))``) of the position along axis a. For an image (A = 2, positions
``(row, column)``) the first half of the channels encodes the row and the second half the
column, so ``PE(r, c) . PE(r', c')`` is a sum of a function of ``r - r'`` and one of ``c - c'``.

Relation to MAE's ``get_2d_sincos_pos_embed``: the frequencies are the same, but MAE puts the
*column* in the first half (its ``meshgrid(grid_w, grid_h)`` is w-first) and lays each half out
as ``[sin ..., cos ...]`` blocks instead of interleaved pairs: a fixed channel permutation, which
a learned model does not notice.

Integer positions go through ``sinusoidal_embedding`` exactly. Float32 positions (an
interpolated grid, :func:`pejax.encodings.position_grids.grid_positions` with ``scale``) use
the same formula in float32 (``sinusoidal_embedding`` accepts integers only).

References:
  Vaswani et al., "Attention Is All You Need", 2017, arXiv:1706.03762.
  Chen, Xie, He, "An Empirical Study of Training Self-Supervised Vision Transformers" (MoCo v3),
    2021, arXiv:2104.02057.
  He et al., "Masked Autoencoders Are Scalable Vision Learners", 2021, arXiv:2111.06377.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks
from pejax.encodings import position_grids
from pejax.encodings import sinusoidal


def _real_position_embedding(positions: jax.Array, dim: int, base: float) -> jax.Array:
  """The Vaswani sinusoid of float32 positions ``[..., N]`` -> ``[..., N, dim]`` float32."""
  exponents = np.arange(0, dim, 2, dtype=np.float64) / dim
  inv_freq = jnp.asarray(base ** -exponents, jnp.float32).reshape((1,) * positions.ndim + (-1,))
  angles = positions[..., None] * inv_freq
  table = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)
  return table.reshape(positions.shape + (dim,))


def sinusoidal_nd_embedding(positions: Any, dim: int, *, base: float = 10000.0,
                            dtype: Any = jnp.float32) -> jax.Array:
  """A-D sinusoidal encoding: channel block a is the 1-D sinusoid of position axis a.

  Args:
    positions: ``[..., N, A]`` integer grid positions (or float32 for an interpolated grid).
    dim: D, divisible by 2 * A (each block is an even-width 1-D sinusoid).
    base: wavelength base (> 1) of every block.
    dtype: output dtype; angles are float32 regardless.

  Returns:
    ``[..., N, D]`` of ``dtype``; ``out[..., a * D/A:(a + 1) * D/A] ==
    sinusoidal_embedding(positions[..., a], D / A)``.

  Raises:
    ValueError: naming ``positions`` (rank < 2, low-precision float dtype) or ``dim`` (not a
      multiple of 2 * A).

  References:
    Vaswani et al. 2017, arXiv:1706.03762; He et al. 2021 (MAE), arXiv:2111.06377.
  """
  positions = position_grids.check_grid_positions(positions)
  num_axes = positions.shape[-1]
  dim = arg_checks.check_positive_int("dim", dim)
  if num_axes < 1 or dim % (2 * num_axes):
    raise ValueError(
        f"dim must be a multiple of 2 * num_axes = {2 * num_axes} (an even block per axis), "
        f"got {dim}")
  block = dim // num_axes
  if jnp.issubdtype(positions.dtype, jnp.integer):
    parts = [sinusoidal.sinusoidal_embedding(positions[..., a], block, base=base)
             for a in range(num_axes)]
  else:
    base = arg_checks.check_positive_float("base", base)
    if base <= 1.0:
      raise ValueError(f"base must be > 1, got {base!r}")
    parts = [_real_position_embedding(positions[..., a], block, base) for a in range(num_axes)]
  return jnp.concatenate(parts, axis=-1).astype(dtype)


def sinusoidal_2d_embedding(positions: Any, dim: int, *, base: float = 10000.0,
                            dtype: Any = jnp.float32) -> jax.Array:
  """2-D sinusoidal encoding: first half of the channels the row, second half the column.

  Args:
    positions: ``[..., N, 2]`` (row, column) integer positions (float32 for an interpolated
      grid), e.g. :func:`pejax.encodings.position_grids.image_positions`.
    dim: D, a multiple of 4.
    base: wavelength base (> 1).
    dtype: output dtype.

  Returns:
    ``[..., N, D]`` of ``dtype``.

  Raises:
    ValueError: naming ``positions`` if the last axis is not 2, or ``dim``.

  References:
    Chen et al. 2021 (MoCo v3), arXiv:2104.02057; He et al. 2021 (MAE), arXiv:2111.06377.
  """
  positions = position_grids.check_grid_positions(positions, num_axes=2)
  return sinusoidal_nd_embedding(positions, dim, base=base, dtype=dtype)


def sinusoidal_2d_table(height: int, width: int, dim: int, *, base: float = 10000.0,
                        dtype: Any = jnp.float32) -> jax.Array:
  """The ``[height * width, D]`` 2-D sinusoidal table of a patch grid, row-major.

  Args:
    height: patch rows.
    width: patch columns.
    dim: D, a multiple of 4.
    base: wavelength base (> 1).
    dtype: output dtype.

  Returns:
    ``[H * W, D]``; row ``r * W + c`` encodes patch ``(r, c)``.
  """
  return sinusoidal_2d_embedding(position_grids.image_positions(height, width), dim, base=base,
                                 dtype=dtype)
