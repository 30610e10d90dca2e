"""PaTH attention, blockwise: causal softmax attention over PaTH logits in O(L) memory.

Axes: B batch, L length, H query heads, K key/value heads (G = H // K), D head dim, Dv value dim,
C block (chunk) size, N = ceil(L / C) blocks.

:func:`path_attention` computes ``softmax(A / sqrt(D), causal) v`` with PaTH's logits
``A_ij = q_i^T H_i ... H_{j+1} k_j`` (:mod:`pejax.encodings.path`) without the ``[L, L]`` logits:
each query block walks back over the key blocks, from its own to the first, with an online
softmax (Milakov & Gimelshein 2018), carrying its queries through each block's transforms in the
compact WY form ``I - W^T T W``. What is kept per block is linear in L: the WY factors T
(``[N, C, C]``), the queries carried through their own block's start and the keys carried to
their block's end (``[N, C, D]`` each), the intra-block logits (``[N, C, C]``). Each query block's
walk runs under ``jax.checkpoint``, so autodiff keeps one block's walk at a time (``O(N C D)``)
and recomputes it in the backward pass: memory O(L (C + D)) with gradients, time O(L^2 D) (each
query block also visits the blocks above the diagonal, skipped by ``lax.cond``).

The same numbers as :func:`~pejax.encodings.path.path_logits` followed by a masked softmax (to
float32 rounding); packed sequences by ``segment_ids``.

References:
  Yang et al. 2025, "PaTH Attention: Position Encoding via Accumulating Householder
  Transformations", arXiv 2505.16381 (the blockwise algorithm, here in pure JAX).
  Milakov & Gimelshein 2018, "Online normalizer calculation for softmax", arXiv 1805.02867.
"""

from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings import query_blocks
from pejax.encodings.masked_logit import MASKED
from pejax.encodings.path import _check_inputs, _expand_heads, _mm, chunk_wy_factor, path_logits

Array = jax.Array


def path_attention(q: Array, k: Array, v: Array, w: Array, beta: Array, *,
                   block_size: int = 64, segment_ids: Optional[Array] = None,
                   scale: Optional[float] = None, dense: bool = False) -> Array:
  """Causal PaTH attention of one sequence per row, blockwise (O(L) memory, differentiable).

  ``dense=True`` computes the same numbers from the whole ``[L, L]`` logits
  (:func:`~pejax.encodings.path.path_logits` in chunks of ``block_size``, then a masked softmax):
  O(L^2) memory, fewer sequential steps.

  Args:
    q: float ``[B, L, H, D]`` queries.
    k: float ``[B, L, K, D]`` keys (K divides H).
    v: float ``[B, L, K, Dv]`` values.
    w: float ``[B, L, K, D]`` unit vectors of the tokens' transforms.
    beta: float ``[B, L, K]`` strengths of the transforms.
    block_size: C, tokens per block (the length is padded to a multiple).
    segment_ids: optional int ``[B, L]``: packed sequences; a query sees keys of its segment.
    scale: logit scale, ``1 / sqrt(D)`` when omitted.
    dense: the whole-logits form instead of the blockwise one.

  Returns:
    ``[B, L, H, Dv]`` in ``q.dtype``.

  Raises:
    ValueError: naming the argument, for non-float inputs, mismatched shapes, a bad
      ``block_size`` or ``segment_ids`` of the wrong shape.

  References:
    Yang et al. 2025, arXiv 2505.16381.
  """
  arg_checks.check_positive_int("block_size", block_size)
  out_dtype = jnp.asarray(q).dtype
  q, k, w, beta = _check_inputs(q, k, w, beta)
  v = jnp.asarray(v)
  if q.ndim != 4:
    raise ValueError(f"q must have shape [B, L, H, D], got {q.shape}")
  if v.ndim != 4 or v.shape[:3] != k.shape[:3]:
    raise ValueError(f"v must have shape [B, L, K, Dv] with [B, L, K] = {k.shape[:3]}, got "
                     f"{v.shape}")
  if q.shape[:2] != k.shape[:2]:
    raise ValueError(f"q and k must have the same [B, L], got shapes {q.shape} and {k.shape}")
  batch, length, heads, dim = q.shape
  if segment_ids is not None:
    segment_ids = arg_checks.check_integer_array("segment_ids", segment_ids)
    if segment_ids.shape != (batch, length):
      raise ValueError(f"segment_ids must have shape {(batch, length)}, got {segment_ids.shape}")
  scale = 1.0 / math.sqrt(dim) if scale is None else float(scale)
  v = v.astype(jnp.float32)
  if dense:
    logits = path_logits(q, k, w, beta, chunk_size=block_size) * scale  # [B, H, L, L]
    mask = jnp.tril(jnp.ones((length, length), bool))[None, None]
    if segment_ids is not None:
      mask = mask & (segment_ids[:, None, :, None] == segment_ids[:, None, None, :])
    probs = jax.nn.softmax(jnp.where(mask, logits, MASKED), axis=-1)
    out = _mm("bhij,bjhd->bihd", probs, _expand_heads(v, heads, 2))
    return out.astype(out_dtype)
  k, w, v = (_expand_heads(x, heads, 2) for x in (k, w, v))
  beta = _expand_heads(beta, heads, 2)
  layout = query_blocks.QueryBlocks.of(batch, length, block_size)
  blocks, size = layout.blocks, layout.size
  qb, kb, wb, vb = (layout.split(x) for x in (q, k, w, v))  # [B, H, N, C, D]
  bb = layout.split(beta[..., None])[..., 0]  # [B, H, N, C]
  seg = layout.segments(segment_ids)

  t = chunk_wy_factor(wb, bb)  # [B, H, N, C, C]
  lower = jnp.tril(jnp.ones((size, size), bool)).reshape((1, 1, 1, size, size))
  zq = jnp.where(lower, _mm("...ad,...md->...am", qb, wb), 0.0)
  zk = jnp.where(~lower, _mm("...bd,...nd->...bn", kb, wb), 0.0)
  intra = (_mm("...ad,...bd->...ab", qb, kb) - _mm("...am,...nm,...bn->...ab", zq, t, zk))
  q_moved = qb - _mm("...am,...nm,...nd->...ad", zq, t, wb)
  k_moved = kb - _mm("...bn,...nm,...md->...bd", zk, t, wb)
  causal = lower[0, 0, 0]  # [C, C]

  def softmax_step(stats, logits, values, mask):
    # logits [B, H, C, C'], values [B, H, C', Dv], mask [B, 1, C, C'].
    row_max, norm, acc = stats
    logits = jnp.where(mask, logits * scale, MASKED)
    new_max = jnp.maximum(row_max, jnp.max(logits, axis=-1))
    correction = jnp.exp(row_max - new_max)
    p = jnp.where(mask, jnp.exp(logits - new_max[..., None]), 0.0)
    norm = norm * correction + jnp.sum(p, axis=-1)
    acc = acc * correction[..., None] + _mm("...ab,...bd->...ad", p, values)
    return new_max, norm, acc

  def one_query_block(n):
    q_seg = jax.lax.dynamic_index_in_dim(seg, n, axis=1, keepdims=False)  # [B, C]
    take = lambda x: jax.lax.dynamic_index_in_dim(x, n, axis=2, keepdims=False)
    stats = (jnp.full((batch, heads, size), MASKED, jnp.float32),
             jnp.zeros((batch, heads, size), jnp.float32),
             jnp.zeros((batch, heads, size, vb.shape[-1]), jnp.float32))
    same = (q_seg[:, :, None] == q_seg[:, None, :]) & causal[None]
    stats = softmax_step(stats, take(intra), take(vb), same[:, None])

    # The key blocks n - 1, n - 2, ..., 0 as the walk's inputs (gathered once per query block, so
    # the backward pass scatters their cotangents once, not one full-size update per step);
    # steps past block 0 wrap around and are skipped.
    distance = jnp.arange(1, blocks)
    order = jnp.mod(n - distance, blocks)
    gather = lambda x, axis: jnp.moveaxis(jnp.take(x, order, axis=axis), axis, 0)
    inputs = (distance <= n, gather(k_moved, 2), gather(vb, 2), gather(wb, 2), gather(t, 2),
              gather(seg, 1))

    def walk(carry, step):
      valid, keys, values, w_j, t_j, k_seg = step

      def visit(carry):
        u, stats = carry
        mask = (q_seg[:, :, None] == k_seg[:, None, :])[:, None]
        stats = softmax_step(stats, _mm("...ad,...bd->...ab", u, keys), values, mask)
        u = u - _mm("...am,...nm,...nd->...ad", _mm("...ad,...md->...am", u, w_j), t_j, w_j)
        return u, stats

      return jax.lax.cond(valid, visit, lambda carry: carry, carry), None

    if blocks > 1:
      (_, stats), _ = jax.lax.scan(walk, (take(q_moved), stats), inputs)
    _, norm, acc = stats
    return acc / norm[..., None]  # [B, H, C, Dv]

  return layout.map(one_query_block, prevent_cse=False).astype(out_dtype)
