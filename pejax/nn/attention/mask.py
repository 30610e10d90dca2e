"""The boolean attention mask shared by dense and blockwise attention.

Axes: B batch, Lq query length, Lk key length.

Causality is defined by *slots* (indices in the key/value sequence or KV cache), never by
positions: positions are free (packed sequences restart them, randomized positions skip values,
a KV cache continues them), while slot order is what "earlier token" means. A query at slot ``s``
sees keys at slots ``<= s`` (causal), below ``kv_length`` (filled cache entries, unpadded keys),
with its own segment id (packed sequences) and, with a sliding window W, at slots ``> s - W``.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

Array = jax.Array


def attention_mask(
    q_slots: Array,
    k_slots: Array,
    *,
    causal: bool,
    kv_length: Optional[Array] = None,
    q_segment_ids: Optional[Array] = None,
    k_segment_ids: Optional[Array] = None,
    window: Optional[int] = None,
) -> Array:
  """Which (query, key) pairs take part in attention.

  Args:
    q_slots: int ``[Lq]`` slot of each query.
    k_slots: int ``[Lk]`` slot of each key.
    causal: whether a query sees only keys at slots ``<=`` its own.
    kv_length: optional int scalar; keys at slots ``>= kv_length`` are masked (empty cache
      entries, padding).
    q_segment_ids: optional int ``[B, Lq]``; with ``k_segment_ids`` ``[B, Lk]``, a query sees only
      keys of the same segment (packed sequences).
    k_segment_ids: optional int ``[B, Lk]``.
    window: optional sliding window W: a query at slot ``s`` sees only keys at slots
      ``> s - W`` (the W most recent slots, its own included).

  Returns:
    bool ``[B, 1, Lq, Lk]`` with segment ids, else ``[1, 1, Lq, Lk]`` (broadcast over batch and
    heads, the layout ``jax.nn.dot_product_attention`` takes).
  """
  mask = jnp.ones((q_slots.shape[0], k_slots.shape[0]), dtype=bool)
  if causal:
    mask = k_slots[None, :] <= q_slots[:, None]
  if kv_length is not None:
    mask = jnp.logical_and(mask, (k_slots < kv_length)[None, :])
  if window is not None:
    mask = jnp.logical_and(mask, k_slots[None, :] > q_slots[:, None] - window)
  mask = mask[None, None, :, :]
  if (q_segment_ids is None) != (k_segment_ids is None):
    raise ValueError("q_segment_ids and k_segment_ids must be given together")
  if q_segment_ids is not None:
    same = q_segment_ids[:, :, None] == k_segment_ids[:, None, :]  # [B, Lq, Lk]
    mask = jnp.logical_and(mask, same[:, None, :, :])
  return mask
