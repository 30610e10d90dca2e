"""The blockwise schedule: query/key tiles with an online (flash-style) softmax.

Axes: B batch, Lq query length, Lk key length, H query heads, K key/value heads (GQA, H % K == 0),
G = H // K query heads per key/value head, D head dim, bq / bk query / key tile sizes.

Private kernel behind :func:`pejax.nn.attention.attention`; a tile's logits, online-softmax step
and gradient are the shared algebra of :mod:`pejax.nn.attention.core`, this module is the loop.
Memory is O(L * tile) instead of O(L^2): no ``[Lq, Lk]`` logits, mask or bias array is ever
built. The positional bias is a *function of positions* evaluated on each ``[bq, bk]`` tile, and
the mask (causal by slot, valid length, segments) likewise. The running max, normalizer and
accumulator are float32 whatever the input dtype. Key tiles that are entirely in the future of a
query tile (or past the valid length, outside every query's sliding window, or in no query's
chunk with chunked local attention) are skipped with ``lax.switch``, so causal attention does
about half the work (chunked attention with chunk C about C / L of it); tiles that every query of the tile sees entirely (below the diagonal, within
the valid length, no segment ids) skip the mask, and float32 queries are scaled by ``1/sqrt(D)``
once instead of every tile of logits (together: forward of 4K-token causal attention, 4 heads of
32, tile 512, 255 -> 195 ms CPU time on 2 cores). Lengths that are not a multiple of the tile are
padded internally and the padding masked.

The forward loops are ``lax.map`` over query tiles and ``lax.scan`` over key tiles. The gradient
is a custom VJP (FlashAttention-2's backward pass): the residuals are the inputs, the output and
each row's max and normalizer; the backward pass re-walks the same tiles, recomputes each tile's
probabilities and accumulates ``dq`` per query tile and ``dk``, ``dv`` over query tiles. Memory
is O(L) (4 heads of 32, tile 512: forward + backward temporaries at 4K tokens 102 -> 32 MiB; from
16K to 32K tokens 63 -> 104 MiB, where the checkpointed loops grew 3.8x) and the backward pass is about 20% faster than
autodiff of the checkpointed loops it replaces. A bias function's closed-over arrays (a learned
T5 table) are hoisted with ``jax.closure_convert`` and get their gradients tile by tile.

References:
  Rabe & Staats 2021, "Self-attention Does Not Need O(n^2) Memory", arXiv 2112.05682.
  Dao et al. 2022, "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness",
  arXiv 2205.14135.
  Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning",
  arXiv 2307.08691.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks
from pejax.nn.attention import core
from pejax.nn.attention.dispatch import AttentionCall, Kernel, register_kernel
from pejax.nn.attention.input_checks import check_positions_and_segments
from pejax.nn.attention.mask import attention_mask, chunk_ids

Array = jax.Array
BiasFn = Callable[[Array, Array], Array]



def _pad_axis(x: Optional[Array], multiple: int, axis: int, value) -> Optional[Array]:
  """Pads ``x`` along ``axis`` with ``value`` up to a multiple of ``multiple`` (``value="edge"``:
  with copies of the last entry)."""
  if x is None:
    return None
  extra = -x.shape[axis] % multiple
  if not extra:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, extra)
  if value == "edge":
    return jnp.pad(x, widths, mode="edge")
  return jnp.pad(x, widths, constant_values=value)


def _tiles(x: Optional[Array], size: int) -> Optional[Array]:
  """``[B, n * size, ...] -> [n, B, size, ...]`` (tile index leading, for scan/map)."""
  if x is None:
    return None
  b, length = x.shape[:2]
  x = x.reshape((b, length // size, size) + x.shape[2:])
  return jnp.moveaxis(x, 1, 0)


def blockwise_attention(
    q: Array,
    k: Array,
    v: Array,
    *,
    q_positions: Array,
    k_positions: Array,
    bias_fn: Optional[BiasFn] = None,
    causal: bool = True,
    q_offset: Array | int = 0,
    kv_length: Optional[Array | int] = None,
    q_segment_ids: Optional[Array] = None,
    k_segment_ids: Optional[Array] = None,
    block_size: int = 512,
    window: Optional[int] = None,
    indexed_bias: bool = False,
    chunk_size: Optional[int] = None,
) -> Array:
  """Exact softmax attention computed tile by tile.

  Args:
    q, k, v, q_positions, k_positions, causal, q_offset, kv_length, q_segment_ids,
      k_segment_ids, window: as :func:`pejax.nn.attention.attention` (key tiles entirely outside
      every query's window are skipped like tiles in the future).
    bias_fn: optional ``(q_positions [B|1, bq], k_positions [B|1, bk]) -> [B|1, H, bq, bk]``
      float bias added to the logits, evaluated per tile.
    block_size: tile size for both queries and keys (capped at the lengths).
    indexed_bias: ``bias_fn`` also takes the tile's query and key row indices, int32 ``[bq]``
      and ``[bk]`` (into the ``Lq`` queries / ``Lk`` keys; padding rows index past the end), to
      gather per-token features it closes over: ``bias_fn(q_pos, k_pos, q_index, k_index)``.
    chunk_size: optional chunked local attention, as :func:`pejax.nn.attention.attention`: a
      query sees only keys whose position is in its chunk. A key tile is skipped when the range
      of its chunks does not meet the query tile's, decided from the positions at run time (so
      packed segments and KV-cache offsets skip correctly too).

  Returns:
    ``[B, Lq, H, Dv]`` in ``q.dtype``.

  Raises:
    ValueError: naming the argument: malformed ``q``, ``k``, ``v`` shapes, positions or segment
      ids whose length is not the query / key length, ``block_size < 1``.
  """
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or v.shape[:3] != k.shape[:3]:
    raise ValueError(
        f"q must be [B, Lq, H, D] and k, v [B, Lk, K, D], got shapes {q.shape}, {k.shape}, "
        f"{v.shape}")
  if q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1] or q.shape[2] % k.shape[2]:
    raise ValueError(
        f"q and k must share batch and head dims and query heads ({q.shape[2]}) must be a "
        f"multiple of key/value heads ({k.shape[2]}), got q {q.shape} and k {k.shape}")
  block_size = arg_checks.check_positive_int("block_size", block_size)
  q_positions, k_positions = check_positions_and_segments(
      q, k, q_positions=q_positions, k_positions=k_positions, q_segment_ids=q_segment_ids,
      k_segment_ids=k_segment_ids)
  batch, q_len, num_heads, head_dim = q.shape
  k_len, num_kv_heads = k.shape[1], k.shape[2]
  groups = num_heads // num_kv_heads
  bq = min(block_size, q_len)
  bk = min(block_size, k_len)
  valid_keys = k_len if kv_length is None else jnp.minimum(kv_length, k_len)

  # float32 queries are scaled once instead of every [bq, bk] tile of logits (lower precisions
  # would round the scaled queries, so their logits are scaled per tile in float32). The scaling
  # stays outside the custom VJP: autodiff carries its gradient.
  prescaled = q.dtype == jnp.float32
  if prescaled:
    q = q * jnp.float32(1.0 / math.sqrt(head_dim))
  q = _pad_axis(q, bq, 1, 0).reshape((batch, -1, num_kv_heads, groups, head_dim))
  q_tiles = _tiles(q, bq)  # [nq, B, bq, K, G, D]
  k_tiles = _tiles(_pad_axis(k, bk, 1, 0), bk)  # [nk, B, bk, K, D]
  v_tiles = _tiles(_pad_axis(v, bk, 1, 0), bk)
  qpos_tiles = _tiles(_pad_axis(q_positions, bq, 1, 0), bq)  # [nq, B|1, bq]
  kpos_tiles = _tiles(_pad_axis(k_positions, bk, 1, 0), bk)
  qseg_tiles = _tiles(_pad_axis(q_segment_ids, bq, 1, -1), bq)
  kseg_tiles = _tiles(_pad_axis(k_segment_ids, bk, 1, -2), bk)
  qchk_tiles = kchk_tiles = None
  if chunk_size is not None:
    chunk_size = arg_checks.check_positive_int("chunk_size", chunk_size)
    # Padding rows repeat the last row's chunk, so they never widen a tile's range of chunks
    # (the padding itself is masked by length).
    qchk_tiles = _tiles(_pad_axis(chunk_ids(q_positions, chunk_size), bq, 1, "edge"), bq)
    kchk_tiles = _tiles(_pad_axis(chunk_ids(k_positions, chunk_size), bk, 1, "edge"), bk)

  bias_consts: tuple = ()
  converted_bias = None
  if bias_fn is not None:
    # Parameters the bias closes over (a learned T5 table) become explicit inputs of the custom
    # VJP, so that its backward pass can return their gradients.
    examples = (qpos_tiles[0], kpos_tiles[0])
    if indexed_bias:
      examples += (jnp.arange(bq, dtype=jnp.int32), jnp.arange(bk, dtype=jnp.int32))
    converted_bias, bias_consts = jax.closure_convert(bias_fn, *examples)
    bias_consts = tuple(bias_consts)
  if window is not None:
    window = arg_checks.check_positive_int("window", window)
  static = _Static(causal=bool(causal), segments=q_segment_ids is not None, bq=bq, bk=bk,
                   head_dim=head_dim, prescaled=prescaled, bias_fn=converted_bias,
                   window=window, indexed=bool(indexed_bias))
  out = _flash(static, q_tiles, k_tiles, v_tiles, qpos_tiles, kpos_tiles, qseg_tiles,
               kseg_tiles, qchk_tiles, kchk_tiles, jnp.asarray(q_offset, jnp.int32),
               jnp.asarray(valid_keys, jnp.int32), bias_consts)  # [nq, B, bq, K, G, D]
  out = jnp.moveaxis(out, 0, 1).reshape((batch, -1, num_heads, v.shape[-1]))
  return out[:, :q_len]


class _Static(NamedTuple):
  """Hashable trace-time configuration (``nondiff_argnums`` of the custom VJP)."""
  causal: bool
  segments: bool
  bq: int
  bk: int
  head_dim: int
  prescaled: bool
  bias_fn: Optional[Callable]  # (q_pos, k_pos, *consts) -> [B|1, H, bq, bk], closure-converted
  window: Optional[int] = None  # sliding window (None: global)
  indexed: bool = False  # bias_fn also takes the tile's row indices (q_index, k_index)


def _tile_kind(static: _Static, i, j, q_offset, valid_keys, q_chk=None, k_chk=None):
  """0: key tile ``j`` unseen by query tile ``i``; 1: seen entirely (no mask); 2: masked.

  ``q_chk`` / ``k_chk``: the tiles' chunk ids ``[B|1, bq]`` / ``[B|1, bk]`` (chunked attention):
  the tile is needed only if the ranges of its query and key chunks meet, and mask-free only if
  both hold one and the same chunk.
  """
  last_q_slot = q_offset + i * static.bq + static.bq - 1
  first_k_slot = j * static.bk
  last_k_slot = first_k_slot + static.bk - 1
  needed = first_k_slot < valid_keys
  full = jnp.logical_and(last_k_slot < valid_keys, not static.segments)
  if static.causal:
    needed = jnp.logical_and(needed, first_k_slot <= last_q_slot)
    full = jnp.logical_and(full, last_k_slot <= last_q_slot - static.bq + 1)  # <= first q slot
  if static.window is not None:
    first_q_slot = last_q_slot - static.bq + 1
    needed = jnp.logical_and(needed, last_k_slot > first_q_slot - static.window)
    full = jnp.logical_and(full, first_k_slot > last_q_slot - static.window)
  if q_chk is not None:
    q_low, q_high = jnp.min(q_chk), jnp.max(q_chk)
    k_low, k_high = jnp.min(k_chk), jnp.max(k_chk)
    needed = jnp.logical_and(needed, jnp.logical_and(q_high >= k_low, k_high >= q_low))
    one_chunk = (q_low == q_high) & (k_low == k_high) & (q_low == k_low)
    full = jnp.logical_and(full, one_chunk)
  return jnp.where(needed, jnp.where(full, 1, 2), 0)


def _tile_bias(static: _Static, i, j, q_pos, k_pos, consts) -> Optional[Array]:
  """Float32 bias ``[B|1, H, bq, bk]`` of tile ``(i, j)``, or ``None`` without a bias function."""
  if static.bias_fn is None:
    return None
  if static.indexed:
    q_index = i * static.bq + jnp.arange(static.bq, dtype=jnp.int32)
    k_index = j * static.bk + jnp.arange(static.bk, dtype=jnp.int32)
    return static.bias_fn(q_pos, k_pos, q_index, k_index, *consts).astype(jnp.float32)
  return static.bias_fn(q_pos, k_pos, *consts).astype(jnp.float32)


def _tile_logits(static: _Static, masked: bool, i, j, q_tile, k_tile, bias, q_seg, k_seg,
                 q_chk, k_chk, q_offset, valid_keys):
  """Float32 logits ``[B, K, G, bq, bk]`` of one tile and its mask (``None`` if unmasked).

  ``bias`` is the tile's :func:`_tile_bias` (``None`` for no bias).
  """
  mask = None
  if masked:
    q_slots = q_offset + i * static.bq + jnp.arange(static.bq, dtype=jnp.int32)
    k_slots = j * static.bk + jnp.arange(static.bk, dtype=jnp.int32)
    mask = attention_mask(q_slots, k_slots, causal=static.causal, kv_length=valid_keys,
                          q_segment_ids=q_seg, k_segment_ids=k_seg, window=static.window,
                          q_chunk_ids=q_chk, k_chunk_ids=k_chk)
  scale = None if static.prescaled else 1.0 / math.sqrt(static.head_dim)
  return core.tile_logits(q_tile, k_tile, scale=scale, bias=bias, mask=mask), mask


def _forward(static: _Static, q_tiles, k_tiles, v_tiles, qpos_tiles, kpos_tiles, qseg_tiles,
             kseg_tiles, qchk_tiles, kchk_tiles, q_offset, valid_keys, consts):
  """Output tiles ``[nq, B, bq, K, G, D]`` and per-row max / normalizer ``[nq, B, K, G, bq]``."""
  _, batch, bq, num_kv_heads, groups, _ = q_tiles.shape
  head_dim = v_tiles.shape[-1]
  num_k_tiles = k_tiles.shape[0]

  def tile_update(masked, carry, i, j, q_tile, k_tile, v_tile, q_pos, k_pos, q_seg, k_seg, q_chk,
                  k_chk):
    logits, mask = _tile_logits(static, masked, i, j, q_tile, k_tile,
                                _tile_bias(static, i, j, q_pos, k_pos, consts), q_seg, k_seg,
                                q_chk, k_chk, q_offset, valid_keys)
    return tuple(core.softmax_step(core.SoftmaxStats(*carry), logits, v_tile, mask))

  def query_tile(inputs):
    i, q_tile, q_pos, q_seg, q_chk = inputs

    def key_tile(carry, key_inputs):
      j, k_tile, v_tile, k_pos, k_seg, k_chk = key_inputs
      args = (i, j, q_tile, k_tile, v_tile, q_pos, k_pos, q_seg, k_seg, q_chk, k_chk)
      carry = jax.lax.switch(
          _tile_kind(static, i, j, q_offset, valid_keys, q_chk, k_chk),
          [lambda c: c,
           lambda c: tile_update(False, c, *args),
           lambda c: tile_update(True, c, *args)],
          carry)
      return carry, None

    init = tuple(core.init_stats(batch, num_kv_heads, groups, bq, head_dim))
    key_inputs = (jnp.arange(num_k_tiles, dtype=jnp.int32), k_tiles, v_tiles, kpos_tiles,
                  kseg_tiles, kchk_tiles)
    stats, _ = jax.lax.scan(key_tile, init, key_inputs)
    stats = core.SoftmaxStats(*stats)
    # Rows with no visible key (only padding) have normalizer 0: core.finish gives 0 there.
    return core.finish(stats).astype(q_tile.dtype), stats.row_max, stats.norm  # [B, bq, K, G, D]

  query_inputs = (jnp.arange(q_tiles.shape[0], dtype=jnp.int32), q_tiles, qpos_tiles,
                  qseg_tiles, qchk_tiles)
  return jax.lax.map(query_tile, query_inputs)


def _float_consts(consts) -> list[bool]:
  return [jnp.issubdtype(jnp.result_type(c), jnp.inexact) for c in consts]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(static: _Static, q_tiles, k_tiles, v_tiles, qpos_tiles, kpos_tiles, qseg_tiles,
           kseg_tiles, qchk_tiles, kchk_tiles, q_offset, valid_keys, consts):
  return _forward(static, q_tiles, k_tiles, v_tiles, qpos_tiles, kpos_tiles, qseg_tiles,
                  kseg_tiles, qchk_tiles, kchk_tiles, q_offset, valid_keys, consts)[0]


def _flash_fwd(static: _Static, q_tiles, k_tiles, v_tiles, qpos_tiles, kpos_tiles, qseg_tiles,
               kseg_tiles, qchk_tiles, kchk_tiles, q_offset, valid_keys, consts):
  out, row_max, normalizer = _forward(static, q_tiles, k_tiles, v_tiles, qpos_tiles, kpos_tiles,
                                      qseg_tiles, kseg_tiles, qchk_tiles, kchk_tiles, q_offset,
                                      valid_keys, consts)
  residuals = (q_tiles, k_tiles, v_tiles, qpos_tiles, kpos_tiles, qseg_tiles, kseg_tiles,
               qchk_tiles, kchk_tiles, q_offset, valid_keys, consts, out, row_max, normalizer)
  return out, residuals


def _flash_bwd(static: _Static, residuals, dout):
  """FlashAttention-2's backward pass: per query tile, a scan over its key tiles recomputes the
  probabilities from the saved row max / normalizer and accumulates ``dq``; the key tiles'
  ``dk``, ``dv`` are summed over query tiles. Memory O(L), no ``[Lq, Lk]`` array."""
  (q_tiles, k_tiles, v_tiles, qpos_tiles, kpos_tiles, qseg_tiles, kseg_tiles, qchk_tiles,
   kchk_tiles, q_offset, valid_keys, consts, out, row_max, normalizer) = residuals
  _, batch, bq, num_kv_heads, groups, head_dim = q_tiles.shape
  scale = jnp.float32(1.0 if static.prescaled else 1.0 / math.sqrt(head_dim))
  is_float = _float_consts(consts)
  float_consts = [c for c, f in zip(consts, is_float) if f]

  delta = core.softmax_delta(dout, out)
  inverse_norm = core.inverse_norm(normalizer)

  def tile_grads(masked, i, j, q_tile, k_tile, v_tile, q_pos, k_pos, q_seg, k_seg, q_chk, k_chk,
                 do_tile, m_tile, inv_tile, delta_tile):
    bias_vjp = None
    if static.bias_fn is not None and float_consts:
      def bias_of(*fc):
        it = iter(fc)
        return _tile_bias(static, i, j, q_pos, k_pos,
                          [next(it) if f else c for c, f in zip(consts, is_float)])
      # One evaluation of the bias serves the logits and the gradient of its parameters.
      bias, bias_vjp = jax.vjp(bias_of, *float_consts)
    else:
      bias = _tile_bias(static, i, j, q_pos, k_pos, consts)
    logits, mask = _tile_logits(static, masked, i, j, q_tile, k_tile, bias, q_seg, k_seg,
                                q_chk, k_chk, q_offset, valid_keys)
    dq, dk, dv, dlogits = core.tile_grads(q_tile, k_tile, v_tile, do_tile, logits, m_tile,
                                          inv_tile, delta_tile, scale=scale, probs_mask=mask)
    dconsts = []
    if bias_vjp is not None:
      dbias = core.bias_grad(dlogits, shared=bias.shape[0] == 1)
      dconsts = [d.astype(jnp.float32) for d in bias_vjp(dbias)]
    return dq, dk, dv, dconsts

  zero_consts = [jnp.zeros(jnp.shape(c), jnp.float32) for c in float_consts]

  def query_tile(carry, inputs):
    dk_sum, dv_sum, dconsts_sum = carry
    i, q_tile, q_pos, q_seg, q_chk, do_tile, m_tile, inv_tile, delta_tile = inputs
    do_tile = do_tile.astype(jnp.float32)

    def key_tile(inner, key_inputs):
      dq_acc, dconsts_acc = inner
      j, k_tile, v_tile, k_pos, k_seg, k_chk = key_inputs
      args = (i, j, q_tile, k_tile, v_tile, q_pos, k_pos, q_seg, k_seg, q_chk, k_chk, do_tile,
              m_tile, inv_tile, delta_tile)
      zeros = (jnp.zeros(q_tile.shape, jnp.float32), jnp.zeros(k_tile.shape, jnp.float32),
               jnp.zeros(v_tile.shape, jnp.float32), zero_consts)
      dq, dk, dv, dc = jax.lax.switch(
          _tile_kind(static, i, j, q_offset, valid_keys, q_chk, k_chk),
          [lambda: zeros, lambda: tile_grads(False, *args), lambda: tile_grads(True, *args)])
      return (dq_acc + dq, [a + b for a, b in zip(dconsts_acc, dc)]), (dk, dv)

    key_inputs = (jnp.arange(k_tiles.shape[0], dtype=jnp.int32), k_tiles, v_tiles, kpos_tiles,
                  kseg_tiles, kchk_tiles)
    (dq, dconsts_sum), (dk, dv) = jax.lax.scan(
        key_tile, (jnp.zeros(q_tile.shape, jnp.float32), dconsts_sum), key_inputs)
    return (dk_sum + dk, dv_sum + dv, dconsts_sum), dq

  init = (jnp.zeros(k_tiles.shape, jnp.float32), jnp.zeros(v_tiles.shape, jnp.float32),
          zero_consts)
  inputs = (jnp.arange(q_tiles.shape[0], dtype=jnp.int32), q_tiles, qpos_tiles, qseg_tiles,
            qchk_tiles, dout, row_max, inverse_norm, delta)
  (dk, dv, dconsts), dq = jax.lax.scan(query_tile, init, inputs)
  it = iter(dconsts)
  const_grads = tuple(
      next(it).astype(jnp.result_type(c)) if f else np.zeros(jnp.shape(c), jax.dtypes.float0)
      for c, f in zip(consts, is_float))
  return (dq.astype(q_tiles.dtype), dk.astype(k_tiles.dtype), dv.astype(v_tiles.dtype),
          None, None, None, None, None, None, None, None, const_grads)


_flash.defvjp(_flash_fwd, _flash_bwd)


def _rows(tree, index: Array):
  """Rows ``index`` (axis 1) of every array of ``tree``; indices past the end are clipped (the
  padding rows of a blockwise tile, masked anyway)."""
  return jax.tree.map(lambda x: jnp.take(x, index, axis=1, mode="clip"), tree)


def _serves(call: AttentionCall) -> bool:
  return call.schedule == "blockwise"


def _run(call: AttentionCall) -> Array:
  bias_fn = call.bias
  if call.has_features:
    def bias_fn(qp, kp, q_index, k_index):  # Gathers the tile's features (pads: clipped).
      return call.bias(qp, kp, _rows(call.q_features, q_index), _rows(call.k_features, k_index))
  return blockwise_attention(
      call.q, call.k, call.v, q_positions=call.q_positions, k_positions=call.k_positions,
      bias_fn=bias_fn, causal=call.causal, q_offset=call.q_offset, kv_length=call.kv_length,
      q_segment_ids=call.q_segment_ids, k_segment_ids=call.k_segment_ids,
      block_size=call.block_size, window=call.window, indexed_bias=call.has_features,
      chunk_size=call.chunk_size)


KERNEL = register_kernel(Kernel("blockwise", _serves, _run, priority=20, chunk_aware=True))
