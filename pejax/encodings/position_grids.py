"""Patch position grids for images and videos, and their resolution changes.

Axes: N number of patches (tokens), A number of grid axes (2 for an image: row, column;
3 for a video: frame, row, column), D feature dim.

A Vision Transformer flattens its patch grid in row-major order (the last axis varies fastest),
so token ``n`` of an ``(h, w)`` image sits at ``(n // w, n % w)``. Every N-D encoding in
``pejax.encodings`` (:mod:`sinusoidal_2d`, :mod:`axial_rope`, :mod:`rope_mixed`) takes the
positions as an explicit ``[..., N, A]`` array built here, so that a model evaluated on a
larger grid than it was trained on, or on a crop, only changes this array.

Resolution change, two common choices:

* extrapolation: integer positions of the larger grid (``grid_positions((8, 8))``); relative
  encodings (RoPE) see new, larger offsets;
* interpolation: the larger grid squeezed into the training range
  (``grid_positions((8, 8), scale=interpolation_scale((4, 4), (8, 8)))`` gives float32 positions
  ``0, 0.5, ..., 3.5``), the N-D analogue of RoPE position interpolation; for a *learned* table
  the equivalent is :func:`resize_grid_table` (bilinear resize of the table, as ViT / DeiT do
  when fine-tuning at a higher resolution).
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks


def _check_grid(name: str, grid_shape: Sequence[int]) -> tuple[int, ...]:
  if isinstance(grid_shape, (int, np.integer)) or not isinstance(grid_shape, (tuple, list)):
    raise ValueError(f"{name} must be a tuple of positive ints like (h, w), got {grid_shape!r}")
  if not grid_shape:
    raise ValueError(f"{name} must have at least one axis, got {grid_shape!r}")
  for size in grid_shape:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
      raise ValueError(f"{name} must contain positive integers, got {grid_shape!r}")
  return tuple(int(s) for s in grid_shape)


def _check_scale(scale, num_axes: int) -> tuple[float, ...]:
  if isinstance(scale, (tuple, list)):
    if len(scale) != num_axes:
      raise ValueError(f"scale must have one entry per grid axis ({num_axes}), got {scale!r}")
    return tuple(arg_checks.check_positive_float("scale", s) for s in scale)
  return (arg_checks.check_positive_float("scale", scale),) * num_axes


def check_grid_positions(positions: Any, *, num_axes: int | None = None) -> jax.Array:
  """Validates ``[..., N, A]`` grid positions for the N-D encodings and returns them.

  Integer positions are returned unchanged (angles are exact from integers); float positions
  (an interpolated grid) must be float32 or wider and are returned as float32 (bf16 / f16
  positions give wrong angles, the pitfall of low-precision positions).

  Args:
    positions: ``[..., N, A]`` integer or float32 array.
    num_axes: if given, the required A.

  Returns:
    The positions as a jax array (integer dtype kept, floats as float32).

  Raises:
    ValueError: naming ``positions`` for rank < 2, a wrong A, a low-precision dtype or
      (concrete) integers outside int32, which JAX would otherwise wrap silently.
  """
  if not isinstance(positions, jax.Array):  # NumPy / lists: int64 must fit in int32.
    host = np.asarray(positions)
    if np.issubdtype(host.dtype, np.integer):
      positions = arg_checks.check_integer_array("positions", host)
  positions = jnp.asarray(positions)
  arg_checks.check_min_rank("positions", positions, 2, "[..., N, A]")
  if num_axes is not None and positions.shape[-1] != num_axes:
    raise ValueError(
        f"positions must have shape [..., N, {num_axes}] (one column per grid axis), got shape "
        f"{positions.shape}")
  if positions.shape[-1] < 1:
    raise ValueError(f"positions must have at least one grid axis, got shape {positions.shape}")
  if jnp.issubdtype(positions.dtype, jnp.integer):
    return positions
  if jnp.issubdtype(positions.dtype, jnp.floating) and jnp.finfo(positions.dtype).bits >= 32:
    return positions.astype(jnp.float32)
  raise ValueError(
      "positions must be integer (exact) or float32 (interpolated grid), got dtype "
      f"{positions.dtype}")


def grid_positions(grid_shape: Sequence[int], *, scale: float | Sequence[float] | None = None
                   ) -> jax.Array:
  """Positions of every cell of an A-D grid, row-major (last axis fastest).

  Args:
    grid_shape: ``(s_0, ..., s_{A-1})`` positive ints, e.g. ``(h, w)`` or ``(t, h, w)``.
    scale: optional positive float (all axes) or one per axis; position ``i`` along axis ``a``
      becomes ``i * scale[a]`` (see :func:`interpolation_scale`).

  Returns:
    ``[N, A]`` with ``N = prod(grid_shape)``: int32 indices, or float32 ``index * scale`` when
    ``scale`` is given.

  Raises:
    ValueError: naming ``grid_shape`` or ``scale`` for non-positive sizes or factors.
  """
  grid_shape = _check_grid("grid_shape", grid_shape)
  mesh = np.meshgrid(*[np.arange(s, dtype=np.int32) for s in grid_shape], indexing="ij")
  positions = np.stack([m.reshape(-1) for m in mesh], axis=-1)
  if scale is None:
    return jnp.asarray(positions, jnp.int32)
  factors = np.asarray(_check_scale(scale, len(grid_shape)), np.float32)
  return jnp.asarray(positions.astype(np.float32) * factors[None, :], jnp.float32)


def image_positions(height: int, width: int, *, scale: float | Sequence[float] | None = None
                    ) -> jax.Array:
  """``[height * width, 2]`` (row, column) positions of an image patch grid, row-major.

  Args:
    height: patch rows.
    width: patch columns.
    scale: optional factor(s), see :func:`grid_positions`.

  Returns:
    ``[H * W, 2]`` int32 (float32 with ``scale``).
  """
  arg_checks.check_positive_int("height", height)
  arg_checks.check_positive_int("width", width)
  return grid_positions((height, width), scale=scale)


def video_positions(frames: int, height: int, width: int, *,
                    scale: float | Sequence[float] | None = None) -> jax.Array:
  """``[frames * height * width, 3]`` (frame, row, column) positions of a video patch grid.

  Args:
    frames: temporal patches T.
    height: patch rows.
    width: patch columns.
    scale: optional factor(s), see :func:`grid_positions`.

  Returns:
    ``[T * H * W, 3]`` int32 (float32 with ``scale``), frame-major then row-major.
  """
  arg_checks.check_positive_int("frames", frames)
  arg_checks.check_positive_int("height", height)
  arg_checks.check_positive_int("width", width)
  return grid_positions((frames, height, width), scale=scale)


def interpolation_scale(train_grid: Sequence[int], new_grid: Sequence[int]) -> tuple[float, ...]:
  """Per-axis factors ``train / new`` that squeeze a new grid into the training range.

  With these factors the positions of the new grid span ``[0, train)`` along each axis, as RoPE
  position interpolation (``LinearScaling``) does for a longer sequence.

  Args:
    train_grid: grid shape seen in training, e.g. ``(4, 4)``.
    new_grid: grid shape at evaluation, same number of axes, e.g. ``(8, 8)``.

  Returns:
    Tuple of A floats, e.g. ``(0.5, 0.5)``.
  """
  train_grid = _check_grid("train_grid", train_grid)
  new_grid = _check_grid("new_grid", new_grid)
  if len(train_grid) != len(new_grid):
    raise ValueError(
        f"new_grid must have as many axes as train_grid ({len(train_grid)}), got {new_grid!r}")
  return tuple(t / n for t, n in zip(train_grid, new_grid))


def resize_grid_table(table: jax.Array, old_grid: Sequence[int], new_grid: Sequence[int], *,
                      method: str = "bilinear") -> jax.Array:
  """Resizes a per-patch table (e.g. a learned position embedding) to a new grid.

  The ``[N_old, D]`` table is viewed as an image of shape ``old_grid + (D,)`` and resized with
  ``jax.image.resize`` (half-pixel centres, like ``torch.nn.functional.interpolate`` with
  ``align_corners=False`` used by DeiT / MAE ``interpolate_pos_embed``).

  Args:
    table: ``[..., N_old, D]`` with ``N_old = prod(old_grid)``.
    old_grid: grid the table was trained for, e.g. ``(4, 4)``.
    new_grid: target grid with the same number of axes, e.g. ``(8, 8)``.
    method: ``jax.image.resize`` method: ``"nearest"``, ``"linear"``/``"bilinear"``,
      ``"cubic"``/``"bicubic"`` ...

  Returns:
    ``[..., prod(new_grid), D]`` in the table's dtype.
  """
  old_grid = _check_grid("old_grid", old_grid)
  new_grid = _check_grid("new_grid", new_grid)
  if len(old_grid) != len(new_grid):
    raise ValueError(
        f"new_grid must have as many axes as old_grid ({len(old_grid)}), got {new_grid!r}")
  arg_checks.check_min_rank("table", table, 2, "[..., N, D]")
  table = jnp.asarray(table)
  if table.shape[-2] != int(np.prod(old_grid)):
    raise ValueError(
        f"table must have prod(old_grid) = {int(np.prod(old_grid))} rows for old_grid "
        f"{old_grid}, got shape {table.shape}")
  lead, dim = table.shape[:-2], table.shape[-1]
  image = table.reshape(lead + old_grid + (dim,))
  resized = jax.image.resize(image, lead + new_grid + (dim,), method=method)
  return resized.reshape(lead + (int(np.prod(new_grid)), dim)).astype(table.dtype)
