"""The dense schedule: query chunks (one tile each) with a flash-style gradient, batch groups.

Axes: B batch, Lq query length, Lk key length, H query heads, K key/value heads (GQA, H % K == 0),
G = H // K query heads per key/value head, D head dim, g rows per batch group.

Private kernel behind :func:`pejax.nn.attention.attention`. The numbers are those of the textbook
formula ``softmax(q k^T / sqrt(D) + bias, masked) v`` with float32 logits; each chunk's logits,
softmax and gradient come from the shared tile algebra of :mod:`pejax.nn.attention.core` (one
online-softmax step over the chunk's whole key range). What differs from leaving it to autodiff
is where the time and memory go:

* **Query chunks.** The caller passes static ``(start, end, key_end)`` chunks: a causal
  full-sequence call splits the queries so that chunk ``i`` only sees keys ``[0, key_end_i)``,
  and the tiles above the diagonal are never computed (:func:`pejax.nn.attention.dense.causal_chunks`).
* **Batch groups.** The batch is processed ``g`` rows at a time (``lax.map`` / ``lax.scan``),
  with ``g`` chosen so that one chunk's ``[g, H, Lq_chunk, Lk]`` float32 logits stay around 1 MiB:
  the logits, probabilities and their gradients are then produced and consumed while they are
  still in the CPU cache instead of streaming ``[B, H, L, L]`` arrays through memory several
  times. Measured on 2 CPU cores (B=16, L=256, 4 heads of 32, causal): forward 22 -> 13 ms.
  A CPU trick: the dispatch (:mod:`pejax.nn.attention.dispatch`) turns it off on other backends.
* **Custom gradient** (``jax.custom_vjp``). The residuals are ``q, k, v``, the output and the
  softmax statistics (row max ``m`` and normalizer ``l``, ``[B, K, G, Lq]``), never the
  ``[B, H, Lq, Lk]`` probabilities: memory O(L), not O(L^2). The backward pass recomputes each
  chunk's probabilities ``p = exp(s - m) / l`` and applies the softmax gradient in one pass,
  ``ds = p * (dp - rowsum(dout * out))`` (Dao et al. 2022). Forward + backward: 65 -> 40 ms, as
  fast as PyTorch's fused CPU ``scaled_dot_product_attention`` on the same shapes
  (``benchmarks/results/attention_vs_torch*.md``).

Masked (query, key) pairs get the finite logit ``-1e30``, so a query that sees no key at all
averages the values uniformly instead of producing NaN (with zero gradient for its logits).

References:
  Dao et al. 2022, "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness",
  arXiv 2205.14135 (the recomputing backward pass).
  Milakov & Gimelshein 2018, "Online normalizer calculation for softmax", arXiv 1805.02867.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from pejax.nn.attention import core
from pejax.nn.attention.dispatch import AttentionCall, Kernel, register_kernel
from pejax.nn.attention.mask import attention_mask, chunk_id_arguments

Array = jax.Array

# Target size of one chunk's float32 logits for a batch group: 2**18 elements = 1 MiB.
_GROUP_ELEMENTS = 2 ** 18


class _Static(NamedTuple):
  """Hashable trace-time configuration (``nondiff_argnums`` of the custom VJP)."""
  causal: bool
  chunks: tuple[tuple[int, int, int], ...]  # (query start, query end, key end)
  group: int  # batch rows per group
  window: Optional[int] = None  # sliding window (None: global)


def group_size(batch: int, heads: int, chunk_queries: int, keys: int) -> int:
  """Largest divisor ``g`` of ``batch`` whose ``[g, heads, chunk_queries, keys]`` logits fit 1 MiB.

  Args:
    batch: B.
    heads: H (query heads).
    chunk_queries: rows of the largest query chunk.
    keys: keys of that chunk.

  Returns:
    ``g`` in ``[1, batch]``, ``batch % g == 0`` (1 when a single row already exceeds the target).
  """
  per_row = max(1, heads * chunk_queries * keys)
  best = 1
  for g in range(1, batch + 1):
    if batch % g == 0 and g * per_row <= _GROUP_ELEMENTS:
      best = g
  return best


def dense_attention(
    q: Array,
    k: Array,
    v: Array,
    *,
    bias: Optional[Array],
    q_slots: Array,
    k_slots: Array,
    causal: bool,
    chunks: tuple[tuple[int, int, int], ...],
    kv_length: Optional[Array] = None,
    q_segment_ids: Optional[Array] = None,
    k_segment_ids: Optional[Array] = None,
    window: Optional[int] = None,
    batch_groups: bool = True,
    q_chunk_ids: Optional[Array] = None,
    k_chunk_ids: Optional[Array] = None,
) -> Array:
  """Softmax attention of ``q`` over ``k, v`` with float32 logits; see the module docstring.

  Args:
    q: ``[B, Lq, H, D]``.
    k: ``[B, Lk, K, D]``.
    v: ``[B, Lk, K, Dv]`` (``Dv`` may differ from ``D``).
    bias: ``None`` or float ``[B | 1, H, Lq, Lk]`` added to the scaled logits (differentiable; a
      ``[1, ...]`` bias shared by the batch receives the batch-summed gradient).
    q_slots: int ``[Lq]`` slot of each query (causality compares slots).
    k_slots: int ``[Lk]`` slot of each key.
    causal: mask keys at later slots than the query.
    chunks: static ``(start, end, key_end)`` triples covering ``[0, Lq)`` in order; queries
      ``[start, end)`` attend to keys ``[0, key_end)`` only, which must include every key they may
      see (``((0, Lq, Lk),)`` for no chunking).
    kv_length: optional int scalar; keys at slots ``>= kv_length`` are masked.
    q_segment_ids: optional int ``[B, Lq]`` (packed sequences), with ``k_segment_ids``.
    k_segment_ids: optional int ``[B, Lk]``.
    window: optional sliding window W (keys at slots ``> q_slot - W``).
    batch_groups: process the batch in cache-sized groups (a CPU optimization; ``False``: the
      whole batch at once, what an accelerator wants).
    q_chunk_ids: optional int ``[B | 1, Lq]`` chunk of each query (chunked local attention,
      :func:`pejax.nn.attention.mask.chunk_ids`), with ``k_chunk_ids``.
    k_chunk_ids: optional int ``[B | 1, Lk]``.

  Returns:
    ``[B, Lq, H, Dv]`` in ``q.dtype``.
  """
  batch, q_len, heads, _ = q.shape
  chunks = tuple(tuple(int(x) for x in c) for c in chunks)
  starts = [c[0] for c in chunks]
  ends = [c[1] for c in chunks]
  if (not chunks or starts[0] != 0 or ends[-1] != q_len or starts[1:] != ends[:-1]
      or any(not 0 <= start < end for start, end, _ in chunks)
      or any(not 0 < key_end <= k.shape[1] for _, _, key_end in chunks)):
    raise ValueError(
        f"chunks must be (start, end, key_end) triples covering [0, {q_len}) in order with "
        f"0 < key_end <= {k.shape[1]}, got {chunks}")
  if bias is not None and (bias.ndim != 4 or bias.shape[0] not in (1, batch)
                           or bias.shape[1:] != (heads, q_len, k.shape[1])):
    raise ValueError(
        f"bias must have shape [1 or {batch}, {heads}, {q_len}, {k.shape[1]}], got {bias.shape}")
  largest = max(chunks, key=lambda c: (c[1] - c[0]) * c[2])
  group = (group_size(batch, heads, largest[1] - largest[0], largest[2]) if batch_groups
           else batch)
  static = _Static(causal=bool(causal), chunks=tuple(chunks), group=group,
                   window=None if window is None else int(window))
  if bias is not None:
    bias = bias.astype(jnp.float32)
  if (q_chunk_ids is None) != (k_chunk_ids is None):
    raise ValueError("q_chunk_ids and k_chunk_ids must be given together")
  if q_chunk_ids is not None:  # Per batch row, like segment ids (the batch groups split them).
    q_chunk_ids = jnp.broadcast_to(q_chunk_ids, (batch, q_len)).astype(jnp.int32)
    k_chunk_ids = jnp.broadcast_to(k_chunk_ids, (batch, k.shape[1])).astype(jnp.int32)
  return _attend(static, q, k, v, bias, q_slots, k_slots, kv_length, q_segment_ids,
                 k_segment_ids, q_chunk_ids, k_chunk_ids)


# --------------------------------------------------------------------------------------------
# One batch group: each chunk is one tile of the shared core (pejax.nn.attention.core).


def _chunk_logits(static: _Static, q_g, k, bias, q_slots, k_slots, kv_length, q_seg, k_seg,
                  q_chk, k_chk, start: int, end: int, key_end: int) -> Array:
  """Scaled, biased, masked float32 logits ``[g, K, G, end - start, key_end]`` of one chunk."""
  mask = attention_mask(
      q_slots[start:end], k_slots[:key_end], causal=static.causal, kv_length=kv_length,
      q_segment_ids=None if q_seg is None else q_seg[:, start:end],
      k_segment_ids=None if k_seg is None else k_seg[:, :key_end], window=static.window,
      q_chunk_ids=None if q_chk is None else q_chk[:, start:end],
      k_chunk_ids=None if k_chk is None else k_chk[:, :key_end])
  return core.tile_logits(
      q_g[:, start:end], k[:, :key_end], scale=1.0 / math.sqrt(q_g.shape[-1]),
      bias=None if bias is None else bias[:, :, start:end, :key_end], mask=mask)


def _grouped(q: Array, kv_heads: int) -> Array:
  """``[g, Lq, H, D] -> [g, Lq, K, G, D]``."""
  g, q_len, heads, head_dim = q.shape
  return q.reshape((g, q_len, kv_heads, heads // kv_heads, head_dim))


def _group_forward(static: _Static, q, k, v, bias, q_slots, k_slots, kv_length, q_seg, k_seg,
                   q_chk, k_chk):
  """Output ``[g, Lq, H, Dv]`` (float32) and softmax max / normalizer ``[g, K, G, Lq]``."""
  g, _, heads, _ = q.shape
  kv_heads = k.shape[2]
  q_g = _grouped(q, kv_heads)
  outs, maxes, norms = [], [], []
  for start, end, key_end in static.chunks:
    logits = _chunk_logits(static, q_g, k, bias, q_slots, k_slots, kv_length, q_seg, k_seg,
                           q_chk, k_chk, start, end, key_end)
    stats = core.softmax_step(
        core.init_stats(g, kv_heads, heads // kv_heads, end - start, v.shape[-1]), logits,
        v[:, :key_end])
    outs.append(core.finish(stats).reshape((g, end - start, heads, v.shape[-1])))
    maxes.append(stats.row_max)
    norms.append(stats.norm)
  cat = lambda xs, axis: xs[0] if len(xs) == 1 else jnp.concatenate(xs, axis=axis)
  return cat(outs, 1), cat(maxes, 3), cat(norms, 3)


def _group_backward(static: _Static, shared_bias: bool, q, k, v, bias, q_slots, k_slots,
                    kv_length, q_seg, k_seg, q_chk, k_chk, out, row_max, norm, dout):
  """Gradients of one group: ``dq, dk, dv`` and the bias gradient (batch-summed if shared)."""
  g, q_len, heads, head_dim = q.shape
  kv_heads = k.shape[2]
  dout_g = _grouped(dout.astype(jnp.float32), kv_heads)
  delta = core.softmax_delta(dout_g, _grouped(out, kv_heads))
  inv_norm = core.inverse_norm(norm)
  q_g = _grouped(q, kv_heads)
  dq_chunks = []
  dk = jnp.zeros(k.shape, jnp.float32)
  dv = jnp.zeros(v.shape, jnp.float32)
  dbias = None if bias is None else jnp.zeros(
      ((1,) if shared_bias else (g,)) + bias.shape[1:], jnp.float32)
  for start, end, key_end in static.chunks:
    logits = _chunk_logits(static, q_g, k, bias, q_slots, k_slots, kv_length, q_seg, k_seg,
                           q_chk, k_chk, start, end, key_end)
    dq_c, dk_c, dv_c, dlogits = core.tile_grads(
        q_g[:, start:end], k[:, :key_end], v[:, :key_end], dout_g[:, start:end], logits,
        row_max[..., start:end], inv_norm[..., start:end], delta[..., start:end],
        scale=1.0 / math.sqrt(head_dim))
    dv = dv.at[:, :key_end].add(dv_c)
    dk = dk.at[:, :key_end].add(dk_c)
    if dbias is not None:
      dbias = dbias.at[:, :, start:end, :key_end].add(core.bias_grad(dlogits, shared=shared_bias))
    dq_chunks.append(dq_c)
  dq = dq_chunks[0] if len(dq_chunks) == 1 else jnp.concatenate(dq_chunks, axis=1)
  return dq.reshape(q.shape), dk, dv, dbias


# --------------------------------------------------------------------------------------------
# Batch grouping and the custom VJP.


def _split(x: Optional[Array], group: int) -> Optional[Array]:
  """``[B, ...] -> [B // group, group, ...]``."""
  return None if x is None else x.reshape((x.shape[0] // group, group) + x.shape[1:])


def _merge(x: Optional[Array]) -> Optional[Array]:
  return None if x is None else x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])


def _group_bias(bias: Optional[Array], per_row: bool, index, group: int) -> Optional[Array]:
  """The bias rows of batch group ``index`` (a per-row bias), else the bias itself.

  Sliced inside the loop rather than split into the loop's inputs: a bias computed in another
  layout (heads before batch) would otherwise be copied whole into the split layout first.
  """
  if not per_row:
    return bias
  return jax.lax.dynamic_slice_in_dim(bias, index * group, group, axis=0)


def _batched_bias(bias: Optional[Array], batch: int) -> bool:
  return bias is not None and bias.shape[0] == batch and batch > 1


def _forward(static: _Static, q, k, v, bias, q_slots, k_slots, kv_length, q_seg, k_seg, q_chk,
             k_chk):
  """Forward over all groups: output ``[B, Lq, H, D]`` (float32), max and normalizer."""
  batch = q.shape[0]
  shared = (q_slots, k_slots, kv_length)
  per_row_bias = _batched_bias(bias, batch)
  if static.group == batch:
    return _group_forward(static, q, k, v, bias, *shared, q_seg, k_seg, q_chk, k_chk)

  def one_group(xs):
    index, q_, k_, v_, qs_, ks_, qc_, kc_ = xs
    return _group_forward(static, q_, k_, v_, _group_bias(bias, per_row_bias, index, static.group),
                          *shared, qs_, ks_, qc_, kc_)

  xs = (jnp.arange(batch // static.group),) + tuple(
      _split(x, static.group) for x in (q, k, v, q_seg, k_seg, q_chk, k_chk))
  return tuple(_merge(y) for y in jax.lax.map(one_group, xs))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attend(static: _Static, q, k, v, bias, q_slots, k_slots, kv_length, q_seg, k_seg, q_chk,
            k_chk):
  out = _forward(static, q, k, v, bias, q_slots, k_slots, kv_length, q_seg, k_seg, q_chk,
                 k_chk)[0]
  return out.astype(q.dtype)


def _attend_fwd(static: _Static, q, k, v, bias, q_slots, k_slots, kv_length, q_seg, k_seg, q_chk,
                k_chk):
  out, row_max, norm = _forward(static, q, k, v, bias, q_slots, k_slots, kv_length, q_seg, k_seg,
                                q_chk, k_chk)
  out = out.astype(q.dtype)
  return out, (q, k, v, bias, q_slots, k_slots, kv_length, q_seg, k_seg, q_chk, k_chk, out,
               row_max, norm)


def _attend_bwd(static: _Static, residuals, dout):
  (q, k, v, bias, q_slots, k_slots, kv_length, q_seg, k_seg, q_chk, k_chk, out, row_max,
   norm) = residuals
  batch = q.shape[0]
  per_row_bias = _batched_bias(bias, batch)
  shared_bias = bias is not None and not per_row_bias
  shared = (q_slots, k_slots, kv_length)
  if static.group == batch:
    dq, dk, dv, dbias = _group_backward(static, shared_bias, q, k, v, bias, *shared, q_seg,
                                        k_seg, q_chk, k_chk, out, row_max, norm, dout)
  else:
    def one_group(dbias_sum, xs):
      index, q_, k_, v_, qs_, ks_, qc_, kc_, o_, m_, n_, do_ = xs
      dq_, dk_, dv_, db_ = _group_backward(
          static, shared_bias, q_, k_, v_, _group_bias(bias, per_row_bias, index, static.group),
          *shared, qs_, ks_, qc_, kc_, o_, m_, n_, do_)
      if shared_bias:
        return dbias_sum + db_, (dq_, dk_, dv_, None)
      return dbias_sum, (dq_, dk_, dv_, db_)

    xs = (jnp.arange(batch // static.group),) + tuple(_split(x, static.group) for x in (
        q, k, v, q_seg, k_seg, q_chk, k_chk, out, row_max, norm, dout))
    init = jnp.zeros(bias.shape, jnp.float32) if shared_bias else None
    dbias_sum, ys = jax.lax.scan(one_group, init, xs)
    dq, dk, dv, dbias_rows = (_merge(y) for y in ys)
    dbias = dbias_sum if shared_bias else dbias_rows
  if dbias is not None:
    dbias = dbias.astype(bias.dtype)
  return (dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), dbias,
          None, None, None, None, None, None, None)


_attend.defvjp(_attend_fwd, _attend_bwd)


# Causal chunking: from CHUNK_FROM tokens, at most MAX_CHUNKS query chunks of at least MIN_CHUNK
# rows. Measured side by side on 2 CPU cores (benchmarks/results): the 4-layer training step at
# 256 tokens 1152 -> 1031 ms CPU (train_throughput_chunks.md); the forward of one causal attention
# (B=1, 4 heads of 32) at 1K tokens 48 -> 14 ms CPU, at 4K 1088 -> 520 ms.
MIN_CHUNK = 64
CHUNK_FROM = 2 * MIN_CHUNK
MAX_CHUNKS = 8


def causal_chunks(length: int) -> list[tuple[int, int]]:
  """Static ``[start, end)`` query chunks of causal dense attention over ``length`` tokens.

  ``n = min(MAX_CHUNKS, length // MIN_CHUNK)`` near-equal chunks; one chunk (no split) below
  ``CHUNK_FROM`` tokens.

  Args:
    length: the number of queries (= keys).

  Returns:
    list of ``(start, end)`` covering ``[0, length)`` in order.
  """
  if length < CHUNK_FROM:
    return [(0, length)]
  num = max(1, min(MAX_CHUNKS, length // MIN_CHUNK))
  edges = [round(i * length / num) for i in range(num + 1)]
  return list(zip(edges[:-1], edges[1:]))


def _serves(call: AttentionCall) -> bool:
  return call.schedule == "dense"


def _run(call: AttentionCall) -> Array:
  q_len, k_len = call.q.shape[1], call.k.shape[1]
  chunks = ((0, q_len, k_len),)
  if call.causal and call.full_sequence and q_len == k_len:
    # Query chunk [start, end) sees keys [0, end): the tiles above the diagonal are skipped.
    chunks = tuple((start, end, end) for start, end in causal_chunks(q_len))
  return dense_attention(
      call.q, call.k, call.v, bias=call.evaluated_bias(),
      q_slots=call.q_offset + jnp.arange(q_len, dtype=jnp.int32),
      k_slots=jnp.arange(k_len, dtype=jnp.int32), causal=call.causal, chunks=chunks,
      kv_length=call.kv_length, q_segment_ids=call.q_segment_ids,
      k_segment_ids=call.k_segment_ids, window=call.window,
      batch_groups=call.platform == "cpu", **chunk_id_arguments(call))


KERNEL = register_kernel(Kernel("dense", _serves, _run, priority=10, chunk_aware=True))
