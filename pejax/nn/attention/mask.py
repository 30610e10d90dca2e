"""The boolean attention mask shared by dense and blockwise attention.

Axes: B batch, Lq query length, Lk key length.

Causality is defined by *slots* (indices in the key/value sequence or KV cache), never by
positions: positions are free (packed sequences restart them, randomized positions skip values,
a KV cache continues them), while slot order is what "earlier token" means. A query at slot ``s``
sees keys at slots ``<= s`` (causal), below ``kv_length`` (filled cache entries, unpadded keys),
with its own segment id (packed sequences), with a sliding window W, at slots ``> s - W``, and,
with chunked local attention of chunk size C (Llama 4's iRoPE layers), in its own chunk.

Chunks are the one part of the mask defined by *positions*, not slots: a query at position p sees
a key at position k only if ``k // C == p // C``. Chunks are fixed spans of the text (positions
``[0, C)``, ``[C, 2C)``, ...) that restart in each packed segment with its positions and continue
through a KV cache with the cache's positions, as Hugging Face's ``create_chunked_causal_mask``
does (it chunks by the cache index minus the left padding, i.e. by position, and by position ids
for packed sequences); a window, which is translation-invariant, needs no such anchor.

References:
  Meta 2025, "The Llama 4 herd" (ai.meta.com/blog/llama-4-multimodal-intelligence): iRoPE,
  chunked local attention on the RoPE layers; Hugging Face ``transformers``,
  ``masking_utils.chunked_overlay`` and ``models/llama4/modeling_llama4.py``.
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
    q_chunk_ids: Optional[Array] = None,
    k_chunk_ids: Optional[Array] = None,
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
    q_chunk_ids: optional int ``[B | 1, Lq]`` chunk of each query (:func:`chunk_ids` of its
      position); with ``k_chunk_ids`` ``[B | 1, Lk]``, a query sees only keys of its own chunk
      (chunked local attention).
    k_chunk_ids: optional int ``[B | 1, Lk]``.

  Returns:
    bool ``[B, 1, Lq, Lk]`` with segment or per-row chunk ids, else ``[1, 1, Lq, Lk]`` (broadcast over batch and
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
  if (q_chunk_ids is None) != (k_chunk_ids is None):
    raise ValueError("q_chunk_ids and k_chunk_ids must be given together")
  if q_chunk_ids is not None:
    same = q_chunk_ids[:, :, None] == k_chunk_ids[:, None, :]  # [B|1, Lq, Lk]
    mask = jnp.logical_and(mask, same[:, None, :, :])
  return mask


def chunk_ids(positions: Array, chunk_size: int) -> Array:
  """The chunk of each position for chunked local attention: ``positions // chunk_size``.

  Floor division, so a negative position falls in a negative chunk rather than sharing chunk 0.

  Args:
    positions: int ``[B | 1, L]`` positions.
    chunk_size: C >= 1 (checked by the caller).

  Returns:
    int32 ``[B | 1, L]``.
  """
  return jnp.floor_divide(positions.astype(jnp.int32), jnp.int32(chunk_size))


def chunk_id_arguments(call) -> dict:
  """``q_chunk_ids`` / ``k_chunk_ids`` of an attention call (an ``AttentionCall``): both ``None``
  without a ``chunk_size``, else :func:`chunk_ids` of its query and key positions.

  Args:
    call: the checked :class:`~pejax.nn.attention.dispatch.AttentionCall`.

  Returns:
    keyword arguments for :func:`attention_mask` and the schedules.
  """
  if call.chunk_size is None:
    return dict(q_chunk_ids=None, k_chunk_ids=None)
  return dict(q_chunk_ids=chunk_ids(call.q_positions, call.chunk_size),
              k_chunk_ids=chunk_ids(call.k_positions, call.chunk_size))
