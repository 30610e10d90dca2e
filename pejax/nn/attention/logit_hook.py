"""Dense attention with a logit transform that sees whole rows of ``q . k`` (e.g. CoPE).

Axes: B batch, Lq / Lk query / key length, H query heads, K key/value heads, G = H // K,
D query/key head dim, Dv value head dim.

The tile logits of :mod:`pejax.nn.attention.core` over the whole ``[Lq, Lk]`` square, plus
``logits_fn(logits)``, then one online-softmax step (= the softmax), differentiated by autodiff. A transform that needs
every key of a row (CoPE's gate counts are cumulative sums over the keys) cannot be evaluated
tile by tile, so this path is dense only and keeps the O(L^2) probabilities for the backward
pass; :func:`pejax.nn.attention.attention` dispatches here when ``logits_fn`` is given.

References:
  Golovneva et al. 2024, "Contextual Position Encoding: Learning to Count What's Important",
  arXiv 2405.18719 (the transform this path exists for).
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import jax
import jax.numpy as jnp

from pejax.nn.attention import core
from pejax.nn.attention.dispatch import AttentionCall, Kernel, register_kernel
from pejax.nn.attention.mask import attention_mask, chunk_id_arguments

Array = jax.Array


def hooked_attention(q: Array, k: Array, v: Array, *, bias: Optional[Array],
                     logits_fn: Callable[[Array], Array], q_slots: Array, k_slots: Array,
                     causal: bool, kv_length: Optional[Array] = None,
                     q_segment_ids: Optional[Array] = None,
                     k_segment_ids: Optional[Array] = None,
                     window: Optional[int] = None,
                     q_chunk_ids: Optional[Array] = None,
                     k_chunk_ids: Optional[Array] = None) -> Array:
  """Softmax attention with ``logits_fn(logits)`` added to the masked logits.

  Args:
    q: ``[B, Lq, H, D]``.
    k: ``[B, Lk, K, D]``.
    v: ``[B, Lk, K, Dv]``.
    bias: ``None`` or float ``[B | 1, H, Lq, Lk]``.
    logits_fn: ``[B, H, Lq, Lk] -> [B, H, Lq, Lk]`` float32 term; its input has masked pairs at
      ``-1e30`` and its output is masked again afterwards.
    q_slots: int ``[Lq]`` slot of each query.
    k_slots: int ``[Lk]`` slot of each key.
    causal: mask keys at later slots.
    kv_length: optional int scalar; keys at slots ``>= kv_length`` are masked.
    q_segment_ids: optional int ``[B, Lq]``.
    k_segment_ids: optional int ``[B, Lk]``.
    window: optional sliding window.
    q_chunk_ids: optional int ``[B | 1, Lq]`` chunk of each query (chunked local attention).
    k_chunk_ids: optional int ``[B | 1, Lk]``.

  Returns:
    ``[B, Lq, H, Dv]`` in ``q.dtype``.
  """
  batch, q_len, heads, head_dim = q.shape
  kv_heads = k.shape[2]
  q_g = q.reshape((batch, q_len, kv_heads, heads // kv_heads, head_dim))
  mask = attention_mask(q_slots, k_slots, causal=causal, kv_length=kv_length,
                        q_segment_ids=q_segment_ids, k_segment_ids=k_segment_ids, window=window,
                        q_chunk_ids=q_chunk_ids, k_chunk_ids=k_chunk_ids)
  logits = core.tile_logits(q_g, k, scale=1.0 / math.sqrt(head_dim), bias=bias, mask=mask)
  logits = logits.reshape((batch, heads, q_len, k.shape[1]))  # head h = kv_head * G + group
  logits = jnp.where(mask, logits + logits_fn(logits).astype(jnp.float32), core.MASKED)
  stats = core.softmax_step(core.init_stats(batch, kv_heads, heads // kv_heads, q_len,
                                            v.shape[-1]),
                            logits.reshape((batch, kv_heads, heads // kv_heads) + logits.shape[2:]),
                            v)
  return core.finish(stats).reshape((batch, q_len, heads, v.shape[-1])).astype(q.dtype)


def _serves(call: AttentionCall) -> bool:
  return call.logits_fn is not None


def _run(call: AttentionCall) -> Array:
  return hooked_attention(
      call.q, call.k, call.v, bias=call.evaluated_bias(), logits_fn=call.logits_fn,
      q_slots=call.q_offset + jnp.arange(call.q.shape[1], dtype=jnp.int32),
      k_slots=jnp.arange(call.k.shape[1], dtype=jnp.int32), causal=call.causal,
      kv_length=call.kv_length, q_segment_ids=call.q_segment_ids,
      k_segment_ids=call.k_segment_ids, window=call.window, **chunk_id_arguments(call))


KERNEL = register_kernel(Kernel("logit_hook", _serves, _run, priority=100, chunk_aware=True))
