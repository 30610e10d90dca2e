"""Multimodal rotary position embedding (M-RoPE, Qwen2-VL): position ids and rotation.

Axes: L sequence length, H heads, D head dim, P = R / 2 rotated channel pairs, S number of
position axes (3: temporal, height, width).

A multimodal sequence mixes text tokens and blocks of image / video patches. M-RoPE gives every
token S = 3 position ids ``(t, h, w)``:

* a text token has the same index on all three axes, one more than the previous token's
  largest id; so a text-only sequence is ordinary 1-D RoPE;
* an image / video block with (LLM-level) grid ``(T, H, W)`` placed after text whose next
  index is ``s`` gets ``(s + t_idx, s + h_idx, s + w_idx)`` in row-major patch order;
* the text after a block resumes at ``max id so far + 1``.

This is the original Qwen2-VL ``get_rope_index`` (also Qwen2.5-VL, which additionally spaces
temporal ids by ``time_interval = second_per_grid_t * tokens_per_second``). Note that Hugging
Face ``transformers`` 5.x advances the text index after a block by ``max(H, W)`` instead of
``max id + 1 - s``; the two agree for images (T = 1) and differ for videos with
``T > max(H, W)`` or a temporal interval != 1.

The rotation: the P frequency pairs of a standard 1-D RoPE over the whole rotated dim
(``inv_freq`` from :func:`pejax.encodings.rope.rope_inv_freq`) are cut into consecutive
sections ``mrope_section`` (e.g. ``[16, 24, 24]`` for head_dim 128); pair p in section a is
rotated by ``position_ids[a] * inv_freq[p]``. The angles go through
:func:`pejax.encodings.rope.rotate_with_angles` (Qwen2-VL uses the ``"half"`` layout).

References:
  Wang et al., "Qwen2-VL: Enhancing Vision-Language Model's Perception of the World at Any
    Resolution", 2024, arXiv:2409.12191.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks
from pejax.encodings import rope

Segment = Union[int, Sequence[int]]


def _check_segment(index: int, segment: Segment) -> tuple[str, tuple[int, ...]]:
  if isinstance(segment, (int, np.integer)) and not isinstance(segment, bool):
    if segment < 1:
      raise ValueError(
          f"segments[{index}] must be a positive text length or a (t, h, w) grid, got {segment}")
    return "text", (int(segment),)
  if isinstance(segment, (tuple, list)) and len(segment) in (2, 3):
    grid = tuple(segment) if len(segment) == 3 else (1,) + tuple(segment)
    if all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 1
           for s in grid):
      return "vision", tuple(int(s) for s in grid)
  raise ValueError(
      f"segments[{index}] must be a positive int (text tokens) or a (t, h, w) / (h, w) tuple "
      f"of positive ints (image or video grid), got {segment!r}")


def mrope_position_ids(segments: Sequence[Segment], *, time_interval: float = 1.0
                       ) -> jax.Array:
  """``[3, L]`` (temporal, height, width) M-RoPE position ids of one multimodal sequence.

  Example: ``mrope_position_ids([2, (1, 2, 3), 2])`` (2 text tokens, a 2x3-patch image, 2 text
  tokens) gives t = [0 1 | 2 2 2 2 2 2 | 5 6], h = [0 1 | 2 2 2 3 3 3 | 5 6],
  w = [0 1 | 2 3 4 2 3 4 | 5 6].

  Args:
    segments: in sequence order, an int n for n text tokens, or a tuple ``(t, h, w)`` (or
      ``(h, w)`` = ``(1, h, w)``) for a vision block of ``t * h * w`` tokens (the grid as the
      language model sees it, i.e. after any spatial patch merging).
    time_interval: temporal id spacing (Qwen2.5-VL's ``second_per_grid_t * tokens_per_second``;
      1 for Qwen2-VL); temporal index ``i`` becomes ``int(i * time_interval)``.

  Returns:
    int32 ``[3, L]`` with ``L`` the total number of tokens. The next text token's position
    (for decoding) is ``ids.max() + 1``.

  Raises:
    ValueError: naming ``segments`` (empty, or an entry that is not a positive length / grid)
      or ``time_interval``.

  References:
    Wang et al. 2024 (Qwen2-VL), arXiv:2409.12191.
  """
  interval = arg_checks.check_positive_float("time_interval", time_interval)
  if isinstance(segments, (int, np.integer)) or not isinstance(segments, (tuple, list)):
    raise ValueError(f"segments must be a list of text lengths / grids, got {segments!r}")
  if not segments:
    raise ValueError("segments must not be empty, got []")
  pieces = []
  next_id = 0
  for i, segment in enumerate(segments):
    kind, sizes = _check_segment(i, segment)
    if kind == "text":
      ids = np.broadcast_to(np.arange(sizes[0], dtype=np.int64) + next_id, (3, sizes[0]))
    else:
      t, h, w = sizes
      t_idx = np.floor(np.arange(t, dtype=np.float64) * interval).astype(np.int64)
      grid = np.meshgrid(t_idx, np.arange(h), np.arange(w), indexing="ij")
      ids = np.stack([g.reshape(-1) for g in grid]) + next_id
    pieces.append(ids)
    next_id = int(ids.max()) + 1
  ids = np.concatenate(pieces, axis=1)
  if ids.max() > np.iinfo(np.int32).max:
    raise ValueError(f"segments give position ids beyond int32, max {ids.max()}")
  return jnp.asarray(ids, jnp.int32)


def _check_sections(mrope_section: Sequence[int], num_axes: int, num_pairs: int) -> tuple[int, ...]:
  if isinstance(mrope_section, (int, np.integer)) or not isinstance(mrope_section, (tuple, list)):
    raise ValueError(f"mrope_section must be a sequence of ints, got {mrope_section!r}")
  sections = tuple(mrope_section)
  if len(sections) != num_axes:
    raise ValueError(
        f"mrope_section must have one entry per position axis ({num_axes}), got {sections!r}")
  for s in sections:
    if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
      raise ValueError(f"mrope_section must contain non-negative ints, got {sections!r}")
  if sum(sections) != num_pairs:
    raise ValueError(
        f"mrope_section must sum to the number of frequency pairs len(inv_freq) = {num_pairs} "
        f"(rotary_dim / 2), got {sections!r} (sum {sum(sections)})")
  return tuple(int(s) for s in sections)


def mrope_angles(position_ids: Any, inv_freq: jax.Array, *, mrope_section: Sequence[int]
                 ) -> jax.Array:
  """M-RoPE angles: pair p in section a rotates by ``position_ids[a] * inv_freq[p]``.

  Args:
    position_ids: int ``[S, ..., L]`` (S = 3 for Qwen2-VL: temporal, height, width).
    inv_freq: float32 ``[P]`` 1-D RoPE inverse frequencies over the whole rotated dim.
    mrope_section: S non-negative ints summing to P, e.g. ``(16, 24, 24)`` for P = 64.

  Returns:
    float32 ``[..., L, P]``; equals ``rope_angles(position_ids[0], inv_freq)`` when all S rows
    are equal (text only).

  Raises:
    ValueError: naming ``position_ids``, ``inv_freq`` or ``mrope_section``.
  """
  position_ids = arg_checks.check_integer_array("position_ids", position_ids)
  arg_checks.check_min_rank("position_ids", position_ids, 2, "[S, ..., L]")
  inv_freq = jnp.asarray(inv_freq)
  if inv_freq.ndim != 1:
    raise ValueError(f"inv_freq must be 1-D [P], got shape {inv_freq.shape}")
  sections = _check_sections(mrope_section, position_ids.shape[0], inv_freq.shape[0])
  parts = []
  start = 0
  for axis, size in enumerate(sections):
    if size:
      parts.append(rope.rope_angles(position_ids[axis], inv_freq[start:start + size]))
    start += size
  return jnp.concatenate(parts, axis=-1)


def apply_mrope(x: jax.Array, position_ids: Any, inv_freq: jax.Array, *,
                mrope_section: Sequence[int], layout: str = "half",
                attention_factor: float = 1.0) -> jax.Array:
  """Applies M-RoPE to queries or keys.

  Args:
    x: ``[..., L, H, D]`` queries or keys.
    position_ids: int ``[S, ..., L]`` (from :func:`mrope_position_ids`, stacked / padded per
      batch row as needed); the ``...`` axes broadcast against ``x``'s leading axes.
    inv_freq: float32 ``[P]`` from :func:`pejax.encodings.rope.rope_inv_freq`.
    mrope_section: S ints summing to P (``[16, 24, 24]`` for Qwen2-VL, head_dim 128).
    layout: ``"half"`` (Qwen2-VL / HF) or ``"interleaved"``.
    attention_factor: multiplies cos and sin. Finite and > 0: a concrete bad value
      raises ``ValueError``, a traced one (under ``jax.jit``) makes the output NaN.

  Returns:
    ``[..., L, H, D]`` in ``x.dtype``; with equal rows in ``position_ids`` this is exactly
    ``apply_rope(x, position_ids[0], inv_freq, layout=layout)``.

  References:
    Wang et al. 2024 (Qwen2-VL), arXiv:2409.12191.
  """
  angles = mrope_angles(position_ids, inv_freq, mrope_section=mrope_section)
  return rope.rotate_with_angles(x, angles, layout=layout, attention_factor=attention_factor)
