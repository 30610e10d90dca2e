"""Dense attention with a logit transform that sees whole rows of ``q . k`` (e.g. CoPE).

Axes: B batch, Lq / Lk query / key length, H query heads, K key/value heads, G = H // K,
D query/key head dim, Dv value head dim.

The plain textbook computation, differentiated by autodiff: ``[B, H, Lq, Lk]`` float32 logits,
scaled, biased and masked, plus ``logits_fn(logits)``, softmax, values. A transform that needs
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

from pejax.nn.attention_mask import attention_mask

Array = jax.Array
_MASKED = -1e30


def hooked_attention(q: Array, k: Array, v: Array, *, bias: Optional[Array],
                     logits_fn: Callable[[Array], Array], q_slots: Array, k_slots: Array,
                     causal: bool, kv_length: Optional[Array] = None,
                     q_segment_ids: Optional[Array] = None,
                     k_segment_ids: Optional[Array] = None,
                     window: Optional[int] = None) -> Array:
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

  Returns:
    ``[B, Lq, H, Dv]`` in ``q.dtype``.
  """
  groups = q.shape[2] // k.shape[2]
  keys = jnp.repeat(k, groups, axis=2) if groups > 1 else k
  values = jnp.repeat(v, groups, axis=2) if groups > 1 else v
  logits = jnp.einsum("bqhd,bkhd->bhqk", q, keys, preferred_element_type=jnp.float32)
  logits = logits * jnp.float32(1.0 / math.sqrt(q.shape[-1]))
  if bias is not None:
    logits = logits + bias.astype(jnp.float32)
  mask = attention_mask(q_slots, k_slots, causal=causal, kv_length=kv_length,
                        q_segment_ids=q_segment_ids, k_segment_ids=k_segment_ids, window=window)
  logits = jnp.where(mask, logits, _MASKED)
  logits = jnp.where(mask, logits + logits_fn(logits).astype(jnp.float32), _MASKED)
  probs = jax.nn.softmax(logits, axis=-1)
  out = jnp.einsum("bhqk,bkhd->bqhd", probs.astype(values.dtype), values,
                   preferred_element_type=jnp.float32)
  return out.astype(q.dtype)
