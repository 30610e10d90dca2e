"""The algebra every attention schedule shares: tile logits, the online softmax step, its VJP.

Axes: b batch rows of the tile, lq / lk query / key rows of the tile, H query heads, K key/value
heads (GQA), G = H // K query heads per key/value head, D head dim, Dv value head dim.

A *tile* is any ``[lq, lk]`` block of the attention matrix: a causal query chunk of the dense
schedule (:mod:`pejax.nn.attention.dense`, one tile per chunk) or a ``[bq, bk]`` tile of the
blockwise schedule (:mod:`pejax.nn.attention.blockwise`, an online softmax over key tiles). The
schedules differ only in which tiles they visit and how they loop; the numbers of a tile come
from the functions below, written once:

* :func:`tile_logits`: float32 ``q . k`` (scaled), plus the PE bias, masked to :data:`MASKED`.
* :func:`init_stats` / :func:`softmax_step` / :func:`finish`: the online softmax (running row
  max ``m``, normalizer ``l``, unnormalized output). One step over a whole row is the ordinary
  softmax: a row that sees no key gets ``m = MASKED`` and, without a ``probs_mask``, uniform
  weights (the dense convention), or zero weights with one (the blockwise convention for padding).
* :func:`softmax_delta` / :func:`tile_grads` / :func:`bias_grad`: the recomputing backward pass
  of FlashAttention: ``p = exp(s - m) / l``, ``dv = p^T do``, ``dp = do v^T``,
  ``ds = p * (dp - rowsum(do * o))``, ``dq = ds k``, ``dk = ds^T q``, and the bias gradient
  ``ds`` (summed over the batch with a dot when the bias is shared by the batch: XLA:CPU runs a
  reduce over the leading axis as a slow reduce fusion, a product with a ones vector as a dot).

References:
  Milakov & Gimelshein 2018, "Online normalizer calculation for softmax", arXiv 1805.02867.
  Dao et al. 2022, "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness",
  arXiv 2205.14135.
  Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning",
  arXiv 2307.08691.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from pejax.encodings import masked_logit

Array = jax.Array

# Finite stand-in for -inf: exp(MASKED - m) is 0 for any row that sees a key, and a row that sees
# none keeps finite statistics (exp(m_old - m_new) never sees inf - inf).
MASKED = masked_logit.MASKED


class SoftmaxStats(NamedTuple):
  """Running state of the online softmax of one tile row block.

  Attributes:
    row_max: float32 ``[b, K, G, lq]`` running max of the logits.
    norm: float32 ``[b, K, G, lq]`` running sum of ``exp(logit - row_max)``.
    out: float32 ``[b, K, G, lq, Dv]`` running unnormalized ``sum(exp(logit - row_max) v)``.
  """
  row_max: Array
  norm: Array
  out: Array


def tile_logits(q: Array, k: Array, *, scale: Optional[float], bias: Optional[Array],
                mask: Optional[Array]) -> Array:
  """Float32 logits of one tile: ``q . k * scale + bias``, masked pairs set to :data:`MASKED`.

  Args:
    q: ``[b, lq, K, G, D]`` queries (grouped by key/value head).
    k: ``[b, lk, K, D]`` keys.
    scale: factor of ``q . k`` (``None``: the queries are already scaled).
    bias: optional float ``[b | 1, H, lq, lk]`` added in float32 (``H = K * G``, head ``h = k * G
      + g``).
    mask: optional bool ``[b | 1, 1, lq, lk]``, ``True`` where the pair takes part.

  Returns:
    float32 ``[b, K, G, lq, lk]``.
  """
  kv_heads, groups = q.shape[2], q.shape[3]
  logits = jnp.einsum("bqkgd,bskd->bkgqs", q, k, preferred_element_type=jnp.float32)
  if scale is not None:
    logits = logits * jnp.float32(scale)
  if bias is not None:
    bias = bias.astype(jnp.float32)
    logits = logits + bias.reshape((bias.shape[0], kv_heads, groups) + bias.shape[2:])
  if mask is not None:
    logits = jnp.where(mask[:, :, None], logits, MASKED)
  return logits


def init_stats(batch: int, kv_heads: int, groups: int, queries: int,
               value_dim: int) -> SoftmaxStats:
  """Online-softmax state before any key: max :data:`MASKED`, normalizer and output 0.

  Args:
    batch: b.
    kv_heads: K.
    groups: G.
    queries: lq.
    value_dim: Dv.

  Returns:
    :class:`SoftmaxStats` of float32 zeros (and ``MASKED`` maxima).
  """
  shape = (batch, kv_heads, groups, queries)
  return SoftmaxStats(jnp.full(shape, MASKED, jnp.float32), jnp.zeros(shape, jnp.float32),
                      jnp.zeros(shape + (value_dim,), jnp.float32))


def softmax_step(stats: SoftmaxStats, logits: Array, v: Array,
                 probs_mask: Optional[Array] = None) -> SoftmaxStats:
  """Folds one tile of logits and its values into the online softmax state.

  Args:
    stats: the state so far (:func:`init_stats` before the first tile).
    logits: float32 ``[b, K, G, lq, lk]`` from :func:`tile_logits`.
    v: ``[b, lk, K, Dv]`` values of the tile's keys.
    probs_mask: optional bool ``[b | 1, 1, lq, lk]``; masked pairs get weight exactly 0 even in a
      row that sees no key (without it such a row's weights are uniform).

  Returns:
    The updated :class:`SoftmaxStats`.
  """
  new_max = jnp.maximum(stats.row_max, jnp.max(logits, axis=-1))
  probs = jnp.exp(logits - new_max[..., None])
  if probs_mask is not None:
    probs = jnp.where(probs_mask[:, :, None], probs, 0.0)
  correction = jnp.exp(stats.row_max - new_max)
  norm = stats.norm * correction + jnp.sum(probs, axis=-1)
  out = stats.out * correction[..., None] + jnp.einsum(
      "bkgqs,bskd->bkgqd", probs.astype(v.dtype), v, preferred_element_type=jnp.float32)
  return SoftmaxStats(new_max, norm, out)


def finish(stats: SoftmaxStats) -> Array:
  """The normalized output ``out / norm`` (float32 ``[b, lq, K, G, Dv]``); rows with ``norm = 0``
  (no key seen, with a ``probs_mask``) give 0.

  Args:
    stats: the state after the last tile.

  Returns:
    float32 ``[b, lq, K, G, Dv]``.
  """
  out = stats.out / jnp.where(stats.norm > 0, stats.norm, 1.0)[..., None]
  return jnp.moveaxis(out, 3, 1)


def softmax_delta(dout: Array, out: Array) -> Array:
  """``rowsum(dout * out)`` (= ``rowsum(p * dp)``), the softmax gradient's per-row correction.

  Args:
    dout: ``[..., lq, K, G, Dv]`` output cotangent.
    out: ``[..., lq, K, G, Dv]`` forward output.

  Returns:
    float32 ``[..., K, G, lq]``.
  """
  return jnp.einsum("...qkgd,...qkgd->...kgq", dout.astype(jnp.float32), out.astype(jnp.float32))


def inverse_norm(norm: Array) -> Array:
  """``1 / norm``, with 1 where ``norm == 0`` (rows that saw no key).

  Args:
    norm: float32 ``[..., lq]`` softmax normalizers.

  Returns:
    float32, the shape of ``norm``.
  """
  return 1.0 / jnp.where(norm > 0, norm, 1.0)


def tile_grads(q: Array, k: Array, v: Array, dout: Array, logits: Array, row_max: Array,
               inv_norm: Array, delta: Array, *, scale: float,
               probs_mask: Optional[Array] = None) -> tuple[Array, Array, Array, Array]:
  """Gradients of one tile from its recomputed probabilities (FlashAttention's backward pass).

  A row that saw no key at all (``row_max == MASKED``) has weights that do not depend on its
  logits: its logit gradient is 0.

  Args:
    q: ``[b, lq, K, G, D]`` queries as :func:`tile_logits` took them.
    k: ``[b, lk, K, D]`` keys.
    v: ``[b, lk, K, Dv]`` values.
    dout: float32 ``[b, lq, K, G, Dv]`` output cotangent of the tile's query rows.
    logits: float32 ``[b, K, G, lq, lk]`` recomputed by :func:`tile_logits`.
    row_max: float32 ``[b, K, G, lq]`` final row max of the forward pass.
    inv_norm: float32 ``[b, K, G, lq]``, :func:`inverse_norm` of the final normalizer.
    delta: float32 ``[b, K, G, lq]`` from :func:`softmax_delta`.
    scale: the factor :func:`tile_logits` applied (1 for prescaled queries).
    probs_mask: the ``probs_mask`` the forward step used, if any.

  Returns:
    float32 ``(dq [b, lq, K, G, D], dk [b, lk, K, D], dv [b, lk, K, Dv], dlogits [b, K, G, lq,
    lk])``; ``dlogits`` is the gradient of the biased logits (= of the bias).
  """
  probs = jnp.exp(logits - row_max[..., None]) * inv_norm[..., None]
  if probs_mask is not None:
    probs = jnp.where(probs_mask[:, :, None], probs, 0.0)
  dv = jnp.einsum("bkgqs,bqkgd->bskd", probs, dout)
  dprobs = jnp.einsum("bqkgd,bskd->bkgqs", dout, v, preferred_element_type=jnp.float32)
  seen = row_max[..., None] > MASKED / 2
  dlogits = jnp.where(seen, probs * (dprobs - delta[..., None]), 0.0)
  dscaled = dlogits * jnp.float32(scale)
  dq = jnp.einsum("bkgqs,bskd->bqkgd", dscaled, k, preferred_element_type=jnp.float32)
  dk = jnp.einsum("bkgqs,bqkgd->bskd", dscaled, q, preferred_element_type=jnp.float32)
  return dq, dk, dv, dlogits


def bias_grad(dlogits: Array, *, shared: bool) -> Array:
  """The bias gradient of a tile: ``dlogits`` as ``[b, H, lq, lk]``, batch-summed if ``shared``.

  Args:
    dlogits: float32 ``[b, K, G, lq, lk]`` from :func:`tile_grads`.
    shared: the bias is ``[1, H, lq, lk]``, shared by the ``b`` rows: the rows are summed as a
      product with a ones vector (a dot on XLA:CPU, not a reduce fusion).

  Returns:
    float32 ``[1 if shared else b, H, lq, lk]``.
  """
  b, kv_heads, groups = dlogits.shape[:3]
  d = dlogits.reshape((b, kv_heads * groups) + dlogits.shape[3:])
  if shared and b > 1:
    return jnp.einsum("b...,b->...", d, jnp.ones((b,), jnp.float32))[None]
  return d
