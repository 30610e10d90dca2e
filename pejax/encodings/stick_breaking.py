"""Stick-breaking attention: attention weights by breaking a stick from the query backwards.

Axes: B batch, Lq / Lk query / key length, H query heads, K key/value heads (G = H // K), D head
dim, Dv value dim, C block size.

Instead of a softmax over the keys, each key j takes a fraction ``beta_ij = sigmoid(z_ij)``
(``z_ij = q_i . k_j / sqrt(D)``) of what the keys between it and the query left over:

  A_ij = beta_ij * prod_{j < l < i} (1 - beta_il)
       = exp( log sigmoid(z_ij) + sum_{j < l < i} log sigmoid(-z_il) ),

so the nearest keys are served first and the weights of a row sum to at most 1. No positional
encoding is needed: the order of the keys enters through the product (a recency bias that the
model can override with large logits). As in the reference implementation, a query does not
attend to its own key by default (``attend_current=False``; with ``True`` its own key comes first
in the product), masked keys (other segments, padding, a window) neither take a share nor break
the stick, and the remainder ``1 - sum_j A_ij`` goes to the query token's own value
(``remainder="value"``, the reference's ``o + rem * v``) or nowhere (``"none"``).

:func:`stick_breaking_attention` computes it densely (``[Lq, Lk]`` weights, any mask, queries at
any slots: KV-cache decoding) or, over a full causal sequence, blockwise: each query block walks
the key blocks from its own back to the first, carrying each row's sum of ``log sigmoid(-z)``
over the keys already passed (the suffix of the product), so memory is O(L) with gradients (each
walk under ``jax.checkpoint``). All in log space and float32; no running max is needed since every
log weight is <= 0.

References:
  Tan, Shen, Yang, Courville and Panda 2024, "Scaling Stick-Breaking Attention: An Efficient
  Implementation and In-depth Study", arXiv 2410.17980 (ICLR 2025); reference implementation
  shawntan/stickbreaking-attention (``stickbreaking_attention/sb_ref.py``).
"""

from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings import query_blocks
from pejax.encodings.masked_logit import MASKED

Array = jax.Array

REMAINDERS = ("value", "none")
_HIGHEST = jax.lax.Precision.HIGHEST


def stick_breaking_log_weights(logits: Array, mask: Array) -> Array:
  """Log stick-breaking weights ``log A_ij`` of rows of scaled logits.

  Args:
    logits: float ``[..., Lq, Lk]`` scaled logits ``z``, keys in text order.
    mask: bool, broadcastable to ``logits``: which keys the row may attend to (already strictly
      before the query unless its own key is meant to take part).

  Returns:
    float32 ``[..., Lq, Lk]``: ``log sigmoid(z_ij) + sum over visible l > j of log sigmoid(-z_il)``
    where visible, ``-1e30`` elsewhere (a weight of exactly 0, with no infinity in the program).

  References:
    Tan et al. 2024, arXiv 2410.17980.
  """
  logits = jnp.asarray(logits, jnp.float32)
  mask = jnp.broadcast_to(mask, logits.shape)
  log_remain = jnp.where(mask, jax.nn.log_sigmoid(-logits), 0.0)
  after = jax.lax.cumsum(log_remain, axis=logits.ndim - 1, reverse=True) - log_remain
  return jnp.where(mask, jax.nn.log_sigmoid(logits) + after, MASKED)


def _check(q, k, v, remainder):
  arrays = []
  for name, x in (("q", q), ("k", k), ("v", v)):
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
      raise ValueError(f"{name} must be a float array, got dtype {x.dtype}")
    if x.ndim != 4:
      raise ValueError(f"{name} must have shape [B, L, heads, dim], got {x.shape}")
    arrays.append(x)
  q, k, v = arrays
  if k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1]:
    raise ValueError(f"q [B, Lq, H, D], k [B, Lk, K, D] and v [B, Lk, K, Dv] do not agree: "
                     f"{q.shape}, {k.shape}, {v.shape}")
  if q.shape[2] % k.shape[2]:
    raise ValueError(f"q's heads ({q.shape[2]}) must be a multiple of k's ({k.shape[2]})")
  arg_checks.check_choice("remainder", remainder, REMAINDERS)
  return q, k, v


def stick_breaking_attention(q: Array, k: Array, v: Array, *, mask: Optional[Array] = None,
                             q_slots: Optional[Array] = None,
                             segment_ids: Optional[Array] = None,
                             attend_current: bool = False, remainder: str = "value",
                             block_size: Optional[int] = None,
                             scale: Optional[float] = None) -> Array:
  """Stick-breaking attention, dense or (full causal sequence) blockwise.

  Args:
    q: float ``[B, Lq, H, D]`` queries.
    k: float ``[B, Lk, K, D]`` keys (K divides H), in text order.
    v: float ``[B, Lk, K, Dv]`` values.
    mask: optional bool ``[B | 1, 1 | H, Lq, Lk]``: the pairs that may take part (causality by
      slot, padding, segments, windows), for queries at ``q_slots``; its diagonal (a query's own
      slot) is dropped unless ``attend_current``. Omitted: one full causal sequence per row
      (``Lq == Lk``), with ``segment_ids``.
    q_slots: int ``[Lq]`` slot of each query among the keys (with ``mask``; default
      ``0 .. Lq - 1``): where its own key and value sit.
    segment_ids: optional int ``[B, L]`` (packed sequences) when ``mask`` is omitted.
    attend_current: whether a query's own key takes part (first in its product).
    remainder: ``"value"``: the weight ``1 - sum_j A_ij`` goes to the query's own value (the
      reference); ``"none"``: it is dropped.
    block_size: ``None`` computes the ``[Lq, Lk]`` weights; an int C computes a full sequence
      blockwise in blocks of C (O(L) memory; needs ``mask`` omitted).
    scale: logit scale, ``1 / sqrt(D)`` when omitted.

  Returns:
    ``[B, Lq, H, Dv]`` in ``q.dtype``.

  Raises:
    ValueError: naming the argument, for non-float or mismatched inputs, an unknown
      ``remainder``, ``block_size`` with a ``mask``, or bad ``q_slots`` / ``segment_ids``.

  References:
    Tan et al. 2024, arXiv 2410.17980.
  """
  out_dtype = jnp.asarray(q).dtype
  q, k, v = _check(q, k, v, remainder)
  if not isinstance(attend_current, bool):
    raise ValueError(f"attend_current must be a bool, got {attend_current!r}")
  batch, q_len, heads, dim = q.shape
  k_len = k.shape[1]
  scale = 1.0 / math.sqrt(dim) if scale is None else float(scale)
  if mask is None:
    if q_len != k_len:
      raise ValueError(f"without a mask the queries must be the keys (Lq == Lk), got Lq={q_len} "
                       f"and Lk={k_len}")
    if q_slots is not None:
      raise ValueError("q_slots needs a mask (without one the queries sit at slots 0 .. L - 1)")
    if segment_ids is not None:
      segment_ids = arg_checks.check_integer_array("segment_ids", segment_ids)
      if segment_ids.shape != (batch, q_len):
        raise ValueError(f"segment_ids must have shape {(batch, q_len)}, got "
                         f"{segment_ids.shape}")
  elif segment_ids is not None:
    raise ValueError("segment_ids is for a full sequence without a mask; put the segments in "
                     "the mask")
  if block_size is not None:
    arg_checks.check_positive_int("block_size", block_size)
    if mask is not None:
      raise ValueError("block_size (blockwise) needs a full sequence: omit the mask")
  group = heads // k.shape[2]
  qf = q.astype(jnp.float32)
  kf = jnp.repeat(k.astype(jnp.float32), group, axis=2)
  vf = jnp.repeat(v.astype(jnp.float32), group, axis=2)
  if block_size is not None:
    out = _blockwise(qf, kf, vf, segment_ids, attend_current, remainder, block_size, scale)
    return out.astype(out_dtype)
  if mask is None:
    slots = jnp.arange(q_len, dtype=jnp.int32)
    mask = (slots[None, :] <= slots[:, None])[None, None]
    if segment_ids is not None:
      mask = mask & (segment_ids[:, None, :, None] == segment_ids[:, None, None, :])
    q_slots = slots
  else:
    mask = jnp.asarray(mask)
    if mask.dtype != jnp.bool_ or mask.ndim != 4 or mask.shape[-2:] != (q_len, k_len):
      raise ValueError(f"mask must be a bool [B | 1, 1 | H, {q_len}, {k_len}] array, got "
                       f"{mask.dtype} {mask.shape}")
    q_slots = (jnp.arange(q_len, dtype=jnp.int32) if q_slots is None else
               arg_checks.check_integer_array("q_slots", q_slots))
    if q_slots.shape != (q_len,):
      raise ValueError(f"q_slots must have shape ({q_len},), got {q_slots.shape}")
  own = (jnp.arange(k_len, dtype=jnp.int32)[None, :] == q_slots[:, None])[None, None]
  if not attend_current:
    mask = mask & ~own
  logits = jnp.einsum("bihd,bjhd->bhij", qf, kf, precision=_HIGHEST) * scale
  weights = jnp.exp(stick_breaking_log_weights(logits, mask))  # [B, H, Lq, Lk]
  out = jnp.einsum("bhij,bjhd->bihd", weights, vf, precision=_HIGHEST)
  if remainder == "value":
    rest = 1.0 - jnp.sum(weights, axis=-1)  # [B, H, Lq]
    own_value = jnp.take(vf, jnp.clip(q_slots, 0, k_len - 1), axis=1)  # [B, Lq, H, Dv]
    out = out + jnp.swapaxes(rest, 1, 2)[..., None] * own_value
  return out.astype(out_dtype)


def _blockwise(q, k, v, segment_ids, attend_current, remainder, block_size, scale):
  """Full causal sequence in blocks: float32 ``[B, L, H, Dv]``."""
  layout = query_blocks.QueryBlocks.of(q.shape[0], q.shape[1], block_size)
  blocks, size = layout.blocks, layout.size
  qb, kb, vb = layout.split(q), layout.split(k), layout.split(v)
  seg = layout.segments(segment_ids)
  index = jnp.arange(size)
  causal = (index[None, :] <= index[:, None]) if attend_current else (
      index[None, :] < index[:, None])

  def one_query_block(n):
    q_n = jax.lax.dynamic_index_in_dim(qb, n, axis=2, keepdims=False)  # [B, H, C, D]
    q_seg = jax.lax.dynamic_index_in_dim(seg, n, axis=1, keepdims=False)  # [B, C]
    init = (jnp.zeros(q_n.shape[:3] + (vb.shape[-1],), jnp.float32),  # weighted values
            jnp.zeros(q_n.shape[:3], jnp.float32),  # sum of weights
            jnp.zeros(q_n.shape[:3], jnp.float32))  # sum of log(1 - beta) of later keys

    def walk(carry, d):
      j = n - d

      def visit(carry):
        acc, total, later = carry
        k_j = jax.lax.dynamic_index_in_dim(kb, j, axis=2, keepdims=False)
        v_j = jax.lax.dynamic_index_in_dim(vb, j, axis=2, keepdims=False)
        k_seg = jax.lax.dynamic_index_in_dim(seg, j, axis=1, keepdims=False)
        mask = (q_seg[:, :, None] == k_seg[:, None, :]) & ((d > 0) | causal)[None]
        mask = mask[:, None]  # [B, 1, C, C]
        z = jnp.einsum("bhad,bhcd->bhac", q_n, k_j, precision=_HIGHEST) * scale
        log_weights = stick_breaking_log_weights(z, mask) + later[..., None]
        weights = jnp.exp(log_weights)
        acc = acc + jnp.einsum("bhac,bhcd->bhad", weights, v_j, precision=_HIGHEST)
        total = total + jnp.sum(weights, axis=-1)
        later = later + jnp.sum(jnp.where(mask, jax.nn.log_sigmoid(-z), 0.0), axis=-1)
        return acc, total, later

      return jax.lax.cond(j >= 0, visit, lambda carry: carry, carry), None

    (acc, total, _), _ = jax.lax.scan(walk, init, jnp.arange(blocks))
    if remainder == "value":
      own = jax.lax.dynamic_index_in_dim(vb, n, axis=2, keepdims=False)  # [B, H, C, Dv]
      acc = acc + (1.0 - total)[..., None] * own
    return acc  # [B, H, C, Dv]

  return layout.map(one_query_block)
