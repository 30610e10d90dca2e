"""Softmax attention behind one function: ``dense`` or ``blockwise``, chosen by name or length.

Axes: B batch, Lq query length, Lk key length, H query heads, K key/value heads (GQA), D head dim.

* ``dense`` (:mod:`pejax.nn.dense_attention`) computes ``[Lq, Lk]`` float32 logits and softmax
  whatever the input dtype, the fast choice for training lengths: a few batch rows at a time so
  that they stay in the CPU cache, with a flash-style custom gradient that keeps O(L) residuals
  and recomputes the probabilities. A causal full-sequence call (no KV-cache offset, ``Lq ==
  Lk``) of at least ``_CHUNK_FROM`` (128) tokens is split into up to 8 static query chunks,
  chunk ``i`` attending only to the keys ``[0, end_i)``: the tiles above the diagonal are never
  computed (work ``(n + 1) / 2n`` of the full square, no loop, no online softmax, the same
  numbers; see ``benchmarks/README.md``).
* ``blockwise`` (:mod:`pejax.nn.blockwise_attention`) tiles queries and keys with an online
  softmax and evaluates the positional bias per tile: memory O(L * tile), for evaluation far
  beyond the training length.

Both take the same inputs and give the same numbers (float32 rounding aside). The positional bias
is passed either as a function of positions (``bias(q_positions, k_positions) -> [B|1, H, Lq,
Lk]``; both implementations accept it) or, for ``dense`` only, as the array that function
returned, so that a decoder evaluates it once per forward pass and shares it across layers. A
content-aware bias also takes per-token features (``q_features`` / ``k_features``, gathered per
tile by blockwise attention). A logit transform that needs whole rows of ``q . k``
(``logits_fn``, CoPE) runs on a plain dense path differentiated by autodiff, dense only.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.nn.blockwise_attention import blockwise_attention
from pejax.nn.blockwise_attention import check_positions_and_segments
from pejax.nn.dense_attention import dense_attention
from pejax.nn.hooked_attention import hooked_attention

Array = jax.Array
Bias = Union[None, Array, Callable[..., Array]]

IMPLEMENTATIONS = ("dense", "blockwise")

# Causal chunking of dense attention: from _CHUNK_FROM tokens, at most _MAX_CHUNKS query chunks of
# at least _MIN_CHUNK rows. Measured side by side on 2 CPU cores (benchmarks/results): the 4-layer
# training step at 256 tokens 1152 -> 1031 ms CPU (train_throughput_chunks.md); the forward of
# one causal attention (B=1, 4 heads of 32) at 1K tokens 48 -> 14 ms CPU, at 4K 1088 -> 520 ms.
_MIN_CHUNK = 64
_CHUNK_FROM = 2 * _MIN_CHUNK
_MAX_CHUNKS = 8
ATTENTION_CHOICES = ("auto",) + IMPLEMENTATIONS


def choose_implementation(attention: str, length: int, *, blockwise_threshold: int) -> str:
  """Resolves ``"auto"`` to ``"dense"`` up to ``blockwise_threshold`` tokens, else ``"blockwise"``.

  Args:
    attention: ``"auto"``, ``"dense"`` or ``"blockwise"``.
    length: the (static) number of query tokens.
    blockwise_threshold: longest length that ``"auto"`` runs densely.

  Returns:
    ``"dense"`` or ``"blockwise"``.
  """
  arg_checks.check_choice("attention", attention, ATTENTION_CHOICES)
  if attention != "auto":
    return attention
  return "blockwise" if length > blockwise_threshold else "dense"


def attention(
    q: Array,
    k: Array,
    v: Array,
    *,
    q_positions: Array,
    k_positions: Array,
    bias: Bias = None,
    implementation: str = "dense",
    causal: bool = True,
    q_offset: Array | int = 0,
    kv_length: Optional[Array | int] = None,
    q_segment_ids: Optional[Array] = None,
    k_segment_ids: Optional[Array] = None,
    block_size: int = 512,
    window: Optional[int] = None,
    q_features: Any = None,
    k_features: Any = None,
    logits_fn: Optional[Callable[[Array], Array]] = None,
) -> Array:
  """Scaled dot-product attention with a positional bias, causal/segment masks and GQA.

  Query ``i`` sits at slot ``q_offset + i``, key ``j`` at slot ``j`` (a KV cache passes its
  length as ``q_offset``; a plain forward pass uses 0). Causality compares slots, not positions.

  Args:
    q: ``[B, Lq, H, D]`` queries.
    k: ``[B, Lk, K, D]`` keys, ``H % K == 0``.
    v: ``[B, Lk, K, Dv]`` values (``Dv`` may differ from ``D``).
    q_positions: int ``[B | 1, Lq]`` query positions (arguments of a bias function).
    k_positions: int ``[B | 1, Lk]`` key positions.
    bias: ``None``; a function ``(q_positions, k_positions) -> [B|1, H, Lq, Lk]`` (with
      features: ``(q_positions, k_positions, q_features, k_features)``); or, for ``dense``
      only, an already evaluated ``[B|1, H, Lq, Lk]`` array.
    implementation: ``"dense"`` or ``"blockwise"``.
    causal: mask keys at later slots.
    q_offset: int scalar slot of the first query.
    kv_length: optional int scalar; keys at slots ``>= kv_length`` are masked.
    q_segment_ids: optional int ``[B, Lq]`` segment of each query (packed sequences).
    k_segment_ids: optional int ``[B, Lk]`` segment of each key.
    block_size: tile size of ``blockwise``.
    window: optional sliding window W: a query at slot ``s`` sees keys at slots ``> s - W``.
    q_features: optional pytree of per-query arrays ``[B, Lq, ...]`` passed to ``bias``.
    k_features: optional pytree of per-key arrays ``[B, Lk, ...]`` passed to ``bias``.
    logits_fn: optional ``logits [B, H, Lq, Lk] -> [B, H, Lq, Lk]`` term added to the scaled,
      biased, masked float32 logits (masked pairs are ``-1e30``); ``dense`` only.

  Returns:
    ``[B, Lq, H, Dv]`` in ``q.dtype``.

  Raises:
    ValueError: naming the argument, for malformed shapes (positions or segment ids whose length
      is not the query / key length included), dtypes or choices.
  """
  arg_checks.check_choice("implementation", implementation, IMPLEMENTATIONS)
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or v.shape[:3] != k.shape[:3]:
    raise ValueError(
        f"q must be [B, Lq, H, D] and k, v [B, Lk, K, D], got shapes {q.shape}, {k.shape}, "
        f"{v.shape}")
  if q.shape[-1] != k.shape[-1] or q.shape[2] % k.shape[2]:
    raise ValueError(
        f"query heads ({q.shape[2]}) must be a multiple of key/value heads ({k.shape[2]}) and "
        f"head dims must match, got q {q.shape} and k {k.shape}")
  q_positions, k_positions = check_positions_and_segments(
      q, k, q_positions=q_positions, k_positions=k_positions, q_segment_ids=q_segment_ids,
      k_segment_ids=k_segment_ids)
  if window is not None:
    window = arg_checks.check_positive_int("window", window)
  features = q_features is not None or k_features is not None
  if features and not callable(bias):
    raise ValueError("q_features / k_features need bias to be a function of (q_positions, "
                     "k_positions, q_features, k_features)")
  if implementation == "blockwise":
    if logits_fn is not None:
      raise ValueError("logits_fn needs whole rows of logits: use implementation='dense'")
    if bias is not None and not callable(bias):
      raise ValueError(
          "bias must be a function of positions for blockwise attention (it is evaluated per "
          f"tile), got an array of shape {jnp.shape(bias)}")
    bias_fn = bias
    if features:
      def bias_fn(qp, kp, q_index, k_index):  # Gathers the tile's features (pads: clipped).
        return bias(qp, kp, _rows(q_features, q_index), _rows(k_features, k_index))
    return blockwise_attention(
        q, k, v, q_positions=q_positions, k_positions=k_positions, bias_fn=bias_fn,
        causal=causal, q_offset=q_offset, kv_length=kv_length, q_segment_ids=q_segment_ids,
        k_segment_ids=k_segment_ids, block_size=block_size, window=window,
        indexed_bias=features)
  if callable(bias):
    bias = (bias(q_positions, k_positions, q_features, k_features) if features
            else bias(q_positions, k_positions))
  if logits_fn is not None:
    return hooked_attention(
        q, k, v, bias=bias, logits_fn=logits_fn,
        q_slots=q_offset + jnp.arange(q.shape[1], dtype=jnp.int32),
        k_slots=jnp.arange(k.shape[1], dtype=jnp.int32), causal=causal, kv_length=kv_length,
        q_segment_ids=q_segment_ids, k_segment_ids=k_segment_ids, window=window)
  q_len, k_len = q.shape[1], k.shape[1]
  chunks = ((0, q_len, k_len),)
  if causal and isinstance(q_offset, int) and q_offset == 0 and q_len == k_len:
    # Query chunk [start, end) sees keys [0, end): the tiles above the diagonal are skipped.
    chunks = tuple((start, end, end) for start, end in causal_chunks(q_len))
  return dense_attention(
      q, k, v, bias=bias, q_slots=q_offset + jnp.arange(q_len, dtype=jnp.int32),
      k_slots=jnp.arange(k_len, dtype=jnp.int32), causal=causal, chunks=chunks,
      kv_length=kv_length, q_segment_ids=q_segment_ids, k_segment_ids=k_segment_ids,
      window=window)


def _rows(tree: Any, index: Array) -> Any:
  """Rows ``index`` (axis 1) of every array of ``tree``; indices past the end are clipped (the
  padding rows of a blockwise tile, masked anyway)."""
  return jax.tree.map(lambda x: jnp.take(x, index, axis=1, mode="clip"), tree)


def causal_chunks(length: int) -> list[tuple[int, int]]:
  """Static ``[start, end)`` query chunks of causal dense attention over ``length`` tokens.

  ``n = min(_MAX_CHUNKS, length // _MIN_CHUNK)`` near-equal chunks; one chunk (no split) below
  ``_CHUNK_FROM`` tokens.

  Args:
    length: the number of queries (= keys).

  Returns:
    list of ``(start, end)`` covering ``[0, length)`` in order.
  """
  if length < _CHUNK_FROM:
    return [(0, length)]
  num = max(1, min(_MAX_CHUNKS, length // _MIN_CHUNK))
  edges = [round(i * length / num) for i in range(num + 1)]
  return list(zip(edges[:-1], edges[1:]))
