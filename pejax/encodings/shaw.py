"""Relative position representations of Shaw et al. (2018): clipped distances, key term as a bias.

Axes: B batch, H heads, D head dim, Lq query length, Lk key length; `...` any leading batch dims.

Shaw et al. give every query-key pair (i, j) learned vectors a^K_ij = w^K_{clip(j - i, k)} and
a^V_ij = w^V_{clip(j - i, k)}, clip(x, k) = max(-k, min(k, x)), so 2k + 1 vectors per layer,
shared by the heads. The key term changes the attention logits to

  e_ij = q_i . (k_j + a^K_ij) / sqrt(D) = q_i . k_j / sqrt(D) + q_i . w^K_{clip(j - i, k)} / sqrt(D),

the second term being a content-aware bias: a bias that depends on the query vector. It is
computed without materializing a `[Lq, Lk, D]` tensor (the paper's "efficient implementation"):
first the `[Lq, 2k + 1]` products of each query with the table, then a gather by relative index.
Section 3.3 shares the table across heads (one `[2k + 1, D]` table per layer); a per-head table
`[H, 2k + 1, D]` is accepted too. The value term (a^V_ij added to v_j in the weighted sum) is not
implemented here: in the paper's ablation (table 4) the key term alone carries most of the gain.

The default clipping distance is k = 16, the value of the paper's experiments (its table 3 shows
little change in BLEU for any k >= 2).

References:
  Shaw, Uszkoreit and Vaswani, "Self-Attention with Relative Position Representations", NAACL
  2018, arXiv:1803.02155, sections 3.1-3.3.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks

SHAW_MAX_DISTANCE = 16  # The clipping distance k of the paper's experiments.

# Beyond this the clipping distance would make 2k + 1 overflow int32 index arithmetic.
_MAX_CLIP = 2 ** 29


def check_max_distance(max_distance: Any) -> int:
  """``max_distance`` as an int in ``[0, 2**29]``, else ``ValueError`` naming it.

  Args:
    max_distance: the clipping distance k.

  Returns:
    ``int(max_distance)``.
  """
  max_distance = arg_checks.check_nonnegative_int("max_distance", max_distance)
  if max_distance > _MAX_CLIP:
    raise ValueError(f"max_distance must be <= {_MAX_CLIP}, got {max_distance}")
  return max_distance


def shaw_relative_index(
    q_positions: Any,
    k_positions: Any,
    *,
    max_distance: int = SHAW_MAX_DISTANCE,
) -> jnp.ndarray:
  """Row of the relative-position table for every query-key pair: clip(j - i, k) + k.

  Exact for every pair of int32 positions (also where j - i itself overflows int32): offsets
  that are certainly beyond the clipping distance are decided in float32, the others are formed
  exactly by integer subtraction.

  Args:
    q_positions: `[..., Lq]` integer query positions i.
    k_positions: `[..., Lk]` integer key positions j; leading dims must broadcast with
      `q_positions`'.
    max_distance: Clipping distance k >= 0 (the paper's 16); the table has 2k + 1 rows.

  Returns:
    `[..., Lq, Lk]` int32 indices in [0, 2k]: k for j == i, 0 for keys k or more before the
    query, 2k for keys k or more after it.

  Raises:
    ValueError: if positions are not integer arrays of rank >= 1 or their leading dims do not
      broadcast, or `max_distance` is not an integer in [0, 2^29].

  References:
    Shaw et al. 2018, "Self-Attention with Relative Position Representations", arXiv:1803.02155.
  """
  q_positions, k_positions, _ = arg_checks.check_query_key_positions(q_positions, k_positions)
  return _relative_index(q_positions, k_positions, check_max_distance(max_distance))


@functools.partial(jax.jit, static_argnums=(2,))
def _relative_index(q_positions: jnp.ndarray, k_positions: jnp.ndarray,
                    max_distance: int) -> jnp.ndarray:
  """Validated `[..., Lq]`, `[..., Lk]` -> `[..., Lq, Lk]` int32 in [0, 2 max_distance]."""
  batch_shape = np.broadcast_shapes(q_positions.shape[:-1], k_positions.shape[:-1])
  q = jnp.broadcast_to(q_positions, batch_shape + q_positions.shape[-1:])[..., :, None]
  k = jnp.broadcast_to(k_positions, batch_shape + k_positions.shape[-1:])[..., None, :]
  # float32 positions below 2^32 are within 2^8 of the true value: an offset whose float32
  # estimate is within max_distance + 2^10 of 0 is truly below 2^31 in magnitude, so the int32
  # difference (modulo 2^32, exact for uint32 inputs too) is its exact value.
  coarse = k.astype(jnp.float32) - q.astype(jnp.float32)
  exact = k.astype(jnp.int32) - q.astype(jnp.int32)
  margin = float(max_distance + 2 ** 10)
  offset = jnp.where(coarse > margin, max_distance,
                     jnp.where(coarse < -margin, -max_distance,
                               jnp.clip(exact, -max_distance, max_distance)))
  return (offset + max_distance).astype(jnp.int32)


def shaw_query_scores(q: Any, table: Any) -> jnp.ndarray:
  """Products of every query with every relative key representation: q_i . w^K_r / sqrt(D).

  This is the first half of the paper's efficient implementation (section 3.3): `[Lq, 2k + 1]`
  numbers per head instead of a `[Lq, Lk, D]` tensor. Taken in float32 at the highest matmul
  precision. :func:`shaw_bias_from_scores` then gathers them by relative index.

  Args:
    q: `[B, L, H, D]` queries (the same that multiply the keys).
    table: `[2k + 1, D]` relative key representations w^K_{-k} .. w^K_{k} shared by the heads
      (the paper's section 3.3), or `[H, 2k + 1, D]`, one table per head.

  Returns:
    `[B, L, H, 2k + 1]` float32 scores (token axis 1, as per-token query features).

  Raises:
    ValueError: if `q` is not rank 4 or `table` is not `[2k + 1, D]` / `[H, 2k + 1, D]` with an
      odd row count, the head dim of `q` (and its head count).

  References:
    Shaw et al. 2018, "Self-Attention with Relative Position Representations", arXiv:1803.02155,
    eq. (4) and section 3.3.
  """
  q, table = jnp.asarray(q), jnp.asarray(table)
  if q.ndim != 4:
    raise ValueError(f"q must have shape [B, Lq, H, D], got shape {q.shape}")
  per_head = table.ndim == 3
  if (table.ndim not in (2, 3) or table.shape[-2] % 2 != 1 or table.shape[-1] != q.shape[-1]
      or (per_head and table.shape[0] != q.shape[2])):
    raise ValueError(
        f"table must have shape [2k + 1, D] or [H, 2k + 1, D] with D = {q.shape[-1]} and "
        f"H = {q.shape[2]} (from q), got shape {table.shape}")
  check_max_distance((table.shape[-2] - 1) // 2)
  return _query_scores(q, table)


@jax.jit
def _query_scores(q: jnp.ndarray, table: jnp.ndarray) -> jnp.ndarray:
  """Validated `[B, L, H, D]`, `[(H,) 2k + 1, D]` -> `[B, L, H, 2k + 1]` float32."""
  equation = "blhd,hrd->blhr" if table.ndim == 3 else "blhd,rd->blhr"
  scores = jnp.einsum(equation, q.astype(jnp.float32), table.astype(jnp.float32),
                      precision=jax.lax.Precision.HIGHEST)
  return scores / jnp.float32(math.sqrt(q.shape[-1]))


def shaw_bias_from_scores(
    scores: Any,
    q_positions: Any,
    k_positions: Any,
) -> jnp.ndarray:
  """Gathers :func:`shaw_query_scores` by relative index: bias[b, h, i, j] = scores[b, i, h, r].

  r = clip(j - i, k) + k with k = (scores.shape[-1] - 1) / 2 (see :func:`shaw_relative_index`);
  the index is always in range, so the gather never clamps.

  Args:
    scores: `[B, Lq, H, 2k + 1]` query scores of the rows to compute.
    q_positions: `[B | 1, Lq]` integer query positions i.
    k_positions: `[B | 1, Lk]` integer key positions j.

  Returns:
    `[B, H, Lq, Lk]` float32 bias, to add to the scaled logits q . k / sqrt(D).

  Raises:
    ValueError: if `scores` is not rank 4 with an odd last dim, the positions are not rank-2
      integer arrays whose batch broadcasts with the scores', or `q_positions` does not have Lq
      entries.

  References:
    Shaw et al. 2018, "Self-Attention with Relative Position Representations", arXiv:1803.02155.
  """
  scores = jnp.asarray(scores)
  if scores.ndim != 4 or scores.shape[-1] % 2 != 1:
    raise ValueError(f"scores must have shape [B, Lq, H, 2k + 1], got shape {scores.shape}")
  q_positions, k_positions, batch_shape = arg_checks.check_query_key_positions(
      q_positions, k_positions)
  for name, positions in (("q_positions", q_positions), ("k_positions", k_positions)):
    if positions.ndim != 2:
      raise ValueError(f"{name} must have shape [B | 1, L], got shape {positions.shape}")
  if q_positions.shape[-1] != scores.shape[1]:
    raise ValueError(
        f"q_positions must have Lq = {scores.shape[1]} entries (the queries' axis 1), got "
        f"shape {q_positions.shape}")
  try:
    np.broadcast_shapes(batch_shape, scores.shape[:1])
  except ValueError:
    raise ValueError(
        f"the batch of the positions {batch_shape} must broadcast with the queries' batch "
        f"{scores.shape[:1]}") from None
  max_distance = check_max_distance((scores.shape[-1] - 1) // 2)
  return _gather(scores, q_positions, k_positions, max_distance)


@functools.partial(jax.jit, static_argnums=(3,))
def _gather(scores: jnp.ndarray, q_positions: jnp.ndarray, k_positions: jnp.ndarray,
            max_distance: int) -> jnp.ndarray:
  """Validated `[B, Lq, H, 2k + 1]`, positions -> `[B, H, Lq, Lk]` float32."""
  scores = jnp.swapaxes(scores.astype(jnp.float32), 1, 2)  # [B, H, Lq, 2k + 1]
  index = _relative_index(q_positions, k_positions, max_distance)  # [B | 1, Lq, Lk]
  if index.shape[0] == 1:  # Positions shared by the batch: one [Lq, Lk] index, no broadcast.
    rows = jnp.arange(index.shape[1], dtype=jnp.int32)[:, None]
    return scores[:, :, rows, index[0]]
  batch = max(scores.shape[0], index.shape[0])
  num_heads, lq, lk = scores.shape[1], index.shape[1], index.shape[2]
  index = jnp.broadcast_to(index[:, None], (batch, num_heads, lq, lk))
  scores = jnp.broadcast_to(scores, (batch,) + scores.shape[1:])
  return jnp.take_along_axis(scores, index, axis=-1)


def shaw_key_bias(
    q: Any,
    table: Any,
    q_positions: Any,
    k_positions: Any,
) -> jnp.ndarray:
  """The key term of Shaw et al. as an additive logit bias: q_i . w^K_{clip(j - i, k)} / sqrt(D).

  :func:`shaw_query_scores` followed by :func:`shaw_bias_from_scores`; the clipping distance is
  read from the table: `table.shape[-2] == 2k + 1`.

  Args:
    q: `[B, Lq, H, D]` queries (the same that multiply the keys).
    table: `[2k + 1, D]` relative key representations w^K_{-k} .. w^K_{k} shared by the heads
      (the paper's section 3.3), or `[H, 2k + 1, D]`, one table per head.
    q_positions: `[B | 1, Lq]` integer query positions i.
    k_positions: `[B | 1, Lk]` integer key positions j.

  Returns:
    `[B, H, Lq, Lk]` float32 bias, to add to the scaled logits q . k / sqrt(D).

  Raises:
    ValueError: the errors of :func:`shaw_query_scores` and :func:`shaw_bias_from_scores`.

  References:
    Shaw et al. 2018, "Self-Attention with Relative Position Representations", arXiv:1803.02155,
    eq. (4) and section 3.3.
  """
  return shaw_bias_from_scores(shaw_query_scores(q, table), q_positions, k_positions)
