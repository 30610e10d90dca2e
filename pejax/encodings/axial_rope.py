"""Axial rotary position embedding for 2-D / 3-D grids (images, videos).

Axes: N number of tokens, H heads, D head dim, A number of grid axes (2: row, column; 3: frame,
row, column), R rotated dims (``sum(split) <= D``), P = R / 2 rotated channel pairs.

The rotated head dims are split across the grid axes (``split``, default as equal as possible
with every part even). Axis a drives ``split[a] / 2`` channel pairs with its own 1-D RoPE
frequencies over its sub-dimension, ``inv_freq_a[i] = base^(-2i / split[a])``; the per-axis
angles are concatenated (axis 0 first) into one ``[..., N, P]`` angle array and applied by
:func:`pejax.encodings.rope.rotate_with_angles`. The score ``q_n . k_m`` then depends on
positions only through the per-axis offsets ``pos_n - pos_m`` (a sum over axes of 1-D RoPE
terms), which is what makes it translation-invariant on the grid.

With ``layout="half"`` the pair i is channels ``(i, i + P)``, so an axis' sub-dimension is two
channel blocks; with ``"interleaved"`` it is one contiguous block. Both are the same encoding up
to a channel permutation.

Positions are ``[..., N, A]``: integers (exact, through :func:`pejax.encodings.rope.rope_angles`)
or float32 (an interpolated grid from :func:`pejax.encodings.position_grids.grid_positions` with
``scale``; angles ``position * inv_freq`` in float32 by elementwise broadcast, as ``rope_angles``
computes them, which accepts integers only).

References:
  Heo, Park, Han, Yun, "Rotary Position Embedding for Vision Transformer", ECCV 2024,
    arXiv:2403.13298 (RoPE-Axial).
  Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021,
    arXiv:2104.09864.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings import position_grids
from pejax.encodings import rope


def axial_split(head_dim: int, num_axes: int, *, split: Sequence[int] | None = None
                ) -> tuple[int, ...]:
  """Rotated head dims per grid axis.

  Args:
    head_dim: D (even).
    num_axes: A >= 1.
    split: optional A positive even ints with ``sum(split) <= D`` (dims past the sum pass
      through unrotated). Default: all D dims, as equal as possible in whole pairs (the first
      ``(D/2) % A`` axes get one extra pair), e.g. D = 64, A = 3 -> (22, 22, 20).

  Returns:
    Tuple of A even ints.

  Raises:
    ValueError: naming ``head_dim``, ``num_axes`` or ``split``.
  """
  head_dim = arg_checks.check_even("head_dim", head_dim)
  num_axes = arg_checks.check_positive_int("num_axes", num_axes)
  if split is None:
    pairs = head_dim // 2
    if pairs < num_axes:
      raise ValueError(
          f"head_dim must give every axis at least one channel pair (head_dim >= 2 * num_axes ="
          f" {2 * num_axes}), got {head_dim}")
    base, extra = divmod(pairs, num_axes)
    return tuple(2 * (base + (1 if a < extra else 0)) for a in range(num_axes))
  split = tuple(split)
  if len(split) != num_axes:
    raise ValueError(f"split must have one entry per axis ({num_axes}), got {split!r}")
  for part in split:
    if isinstance(part, bool) or not isinstance(part, int) or part < 2 or part % 2:
      raise ValueError(f"split must contain positive even ints, got {split!r}")
  if sum(split) > head_dim:
    raise ValueError(f"split must sum to at most head_dim ({head_dim}), got {split!r}")
  return split


def axial_inv_freqs(head_dim: int, *, num_axes: int, split: Sequence[int] | None = None,
                    base: float = 10000.0) -> tuple[jax.Array, ...]:
  """Per-axis 1-D RoPE inverse frequencies over each axis' sub-dimension.

  Args:
    head_dim: D (even).
    num_axes: A.
    split: rotated dims per axis (see :func:`axial_split`).
    base: RoPE base theta of every axis (Heo et al. use 100 for ViTs on 14x14 grids).

  Returns:
    Tuple of A float32 arrays ``[split[a] / 2]`` with ``inv_freq_a[i] = base^(-2i / split[a])``
    (:func:`pejax.encodings.rope.rope_inv_freq` of a ``split[a]``-dim config).
  """
  parts = axial_split(head_dim, num_axes, split=split)
  return tuple(rope.rope_inv_freq(rope.RopeConfig(d, base=base))[0] for d in parts)


def axial_rope_angles(positions: Any, inv_freqs: Sequence[jax.Array]) -> jax.Array:
  """Concatenated per-axis RoPE angles.

  Args:
    positions: ``[..., N, A]`` integer (or float32) grid positions.
    inv_freqs: A float32 arrays ``[P_a]`` (:func:`axial_inv_freqs`).

  Returns:
    float32 ``[..., N, P]`` with ``P = sum_a P_a``; block a is ``positions[..., a] * inv_freqs[a]``.

  Raises:
    ValueError: naming ``positions`` or ``inv_freqs`` on shape or dtype mismatch.
  """
  positions = position_grids.check_grid_positions(positions)
  inv_freqs = tuple(inv_freqs)
  if positions.shape[-1] != len(inv_freqs):
    raise ValueError(
        f"inv_freqs must have one entry per position axis ({positions.shape[-1]}), got "
        f"{len(inv_freqs)}")
  parts = []
  for a, inv_freq in enumerate(inv_freqs):
    if jnp.issubdtype(positions.dtype, jnp.integer):
      parts.append(rope.rope_angles(positions[..., a], inv_freq))
    else:
      inv_freq = jnp.asarray(inv_freq, jnp.float32)
      if inv_freq.ndim != 1:
        raise ValueError(f"inv_freqs entries must be 1-D, got shape {inv_freq.shape}")
      parts.append(positions[..., a, None] *
                   inv_freq.reshape((1,) * (positions.ndim - 1) + inv_freq.shape))
  return jnp.concatenate(parts, axis=-1)


def apply_axial_rope(x: jax.Array, positions: Any, *, base: float = 10000.0,
                     split: Sequence[int] | None = None, layout: str = "half",
                     attention_factor: float = 1.0) -> jax.Array:
  """Applies axial 2-D / 3-D RoPE to queries or keys.

  Args:
    x: ``[..., N, H, D]`` queries or keys.
    positions: ``[..., N, A]`` grid positions (integer, or float32 for an interpolated grid);
      leading axes broadcast against ``x``. A = 2 for (row, column), 3 for (frame, row, column).
    base: RoPE base theta of every axis.
    split: rotated dims per axis (default: equal, see :func:`axial_split`); the head dims past
      ``sum(split)`` pass through.
    layout: ``"half"`` or ``"interleaved"`` (see :mod:`pejax.encodings.rope`).
    attention_factor: multiplies cos and sin (logits scale by its square). Finite and > 0: a concrete bad value
      raises ``ValueError``, a traced one (under ``jax.jit``) makes the output NaN.

  Returns:
    ``[..., N, H, D]`` in ``x.dtype``.

  Raises:
    ValueError: naming ``x``, ``positions``, ``split``, ``base`` or ``layout``.

  References:
    Heo et al. 2024, arXiv:2403.13298.
  """
  arg_checks.check_min_rank("x", x, 3, "[..., N, H, D]")
  arg_checks.check_min_rank("positions", positions, 2, "[..., N, A]")
  num_axes = jnp.shape(positions)[-1]
  inv_freqs = axial_inv_freqs(x.shape[-1], num_axes=num_axes, split=split, base=base)
  angles = axial_rope_angles(positions, inv_freqs)
  return rope.rotate_with_angles(x, angles, layout=layout, attention_factor=attention_factor)
