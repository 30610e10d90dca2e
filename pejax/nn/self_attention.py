"""Grouped-query self-attention with the PE ``rotate`` and ``bias`` hooks and a KV-cache path.

Axes: B batch, L new tokens, T cache capacity, E model width, H query heads, K key/value heads,
D head dim.

References:
  Ainslie et al. 2023, "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
  Checkpoints", arXiv 2305.13245.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

from flax import nnx
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from pejax.encodings.query_scaling import llama4_query_scale, logn_query_scale, ssmax_query_scale
from pejax.nn.attention import Bias, attention, kernel_bias_served
from pejax.nn.attention.mask import attention_mask, chunk_ids
from pejax.nn.kv_cache import LayerCache
from pejax.nn.rms_norm import make_rms_norm, rms_norm
from pejax.nn.positional.interface import PositionalEncoding
from pejax.nn.token_linear import TokenLinear
from pejax.parallel import logical_axes as axes

if TYPE_CHECKING:
  from pejax.nn.decoder_config import DecoderConfig


# [B, L, H|K, D] activations on a mesh: heads over the "model" axis, the rest left to XLA.
_HEADS_LAYOUT = (PartitionSpec.UNCONSTRAINED, PartitionSpec.UNCONSTRAINED, axes.HEADS, None)
_KV_HEADS_LAYOUT = (PartitionSpec.UNCONSTRAINED, PartitionSpec.UNCONSTRAINED, axes.KV_HEADS, None)


def pe_bias(pe: PositionalEncoding, q_positions: jax.Array, k_positions: jax.Array,
            implementation: str) -> Bias:
  """A PE's position bias as attention takes it: evaluated now for dense attention, else the
  per-tile function (also for dense where a kernel computes this PE's bias inside from its
  ``kernel_bias()``, :func:`pejax.nn.attention.kernel_bias_served`); ``None`` without a bias.

  Args:
    pe: the positional encoding.
    q_positions: int32 ``[B | 1, Lq]``.
    k_positions: int32 ``[B | 1, Lk]``.
    implementation: ``"dense"`` or ``"blockwise"``.

  Returns:
    float32 ``[B | 1, H, Lq, Lk]`` (dense; on a mesh split over heads like the logits), the
    function ``pe.bias`` (blockwise, or for a kernel that computes it inside), or ``None``.
  """
  if not pe.has_bias:
    return None
  if implementation == "dense" and not (pe.has_kernel_bias and kernel_bias_served()):
    return axes.constrain(pe.bias(q_positions, k_positions),
                          (PartitionSpec.UNCONSTRAINED, axes.HEADS, None, None))
  return pe.bias


class SelfAttention(nnx.Module):
  """Projections to ``H`` query and ``K`` key/value heads, PE rotation, attention, output.

  Sharding (logical axes, :mod:`pejax.parallel.logical_axes`): query/key/value kernels
  ``[E, H*D]`` are ``("embed", "heads")``, the output kernel ``[H*D, E]`` is ``("heads",
  "embed")`` (Megatron column / row parallel); on a mesh the ``[B, L, H, D]`` queries, keys and
  values are constrained to heads over the ``model`` axis, so the PE rotation, the PE bias and
  the attention run per head shard. Without a mesh the annotations change nothing.
  """

  def __init__(self, config: "DecoderConfig", *, rngs: nnx.Rngs, layer: int = 0):
    width, dtype = config.d_model, config.compute_dtype
    self.num_heads = config.num_heads
    self.num_kv_heads = config.kv_heads
    self.head_dim = config.head_dim
    self.block_size = config.block_size
    self.cache_rotated_keys = config.cache_rotated_keys
    self.window = config.layer_windows[layer]
    self.chunk_size = config.layer_chunk_sizes[layer]
    self.query_scaling = config.layer_query_scalings[layer]
    self.query_scaling_length = config.query_scaling_length
    self.llama4_floor_scale = config.llama4_floor_scale
    self.llama4_attn_scale = config.llama4_attn_scale
    if self.query_scaling == "ssmax":
      # s = 1 / log(L) makes the factor 1 at the training length (neutral at initialization);
      # 512 when no training length is given.
      length = config.query_scaling_length or 512  # >= 2 (DecoderConfig checks it).
      self.ssmax_s = nnx.Param(jnp.full((self.num_heads,), 1.0 / math.log(length), jnp.float32))

    def linear(features_in: int, features_out: int, names: tuple[str, str], *,
               bias: bool = False) -> TokenLinear:
      return TokenLinear(
          features_in, features_out, use_bias=bias, dtype=dtype,
          kernel_init=axes.partitioned(nnx.nn.linear.default_kernel_init, names),
          bias_init=axes.partitioned(nnx.initializers.zeros_init(), names[1:]), rngs=rngs)

    qkv_bias = config.qkv_bias
    self.query = linear(width, self.num_heads * self.head_dim, (axes.EMBED, axes.HEADS),
                        bias=qkv_bias)
    self.key = linear(width, self.num_kv_heads * self.head_dim, (axes.EMBED, axes.KV_HEADS),
                      bias=qkv_bias)
    self.value = linear(width, self.num_kv_heads * self.head_dim, (axes.EMBED, axes.KV_HEADS),
                        bias=qkv_bias)
    self.output = linear(self.num_heads * self.head_dim, width, (axes.HEADS, axes.EMBED),
                         bias=config.output_bias)
    # QK-norm: an RMSNorm over each query / key head before the PE rotation, with a learned scale
    # (True: Qwen3) or without one ("l2": Llama 4, where it follows the rotation; a rotation
    # keeps mean(x^2), so the order changes no number beyond rounding).
    qk_norm = config.layer_qk_norms[layer]
    self.qk_l2_norm = qk_norm == "l2"
    self.norm_epsilon = config.norm_epsilon
    learned = qk_norm is True
    self.query_norm = make_rms_norm(config, self.head_dim, rngs=rngs) if learned else None
    self.key_norm = make_rms_norm(config, self.head_dim, rngs=rngs) if learned else None

  def _project(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``[B, L, E]`` -> q ``[B, L, H, D]``, k and v ``[B, L, K, D]`` (QK-normed if configured)."""
    batch, length = x.shape[:2]
    q = self.query(x).reshape((batch, length, self.num_heads, self.head_dim))
    k = self.key(x).reshape((batch, length, self.num_kv_heads, self.head_dim))
    v = self.value(x).reshape((batch, length, self.num_kv_heads, self.head_dim))
    if self.query_norm is not None:
      q, k = self.query_norm(q), self.key_norm(k)
    elif self.qk_l2_norm:
      unit = jnp.ones((self.head_dim,), jnp.float32)
      q = rms_norm(q, unit, epsilon=self.norm_epsilon, dtype=q.dtype)
      k = rms_norm(k, unit, epsilon=self.norm_epsilon, dtype=k.dtype)
    return (axes.constrain(q, _HEADS_LAYOUT), axes.constrain(k, _KV_HEADS_LAYOUT),
            axes.constrain(v, _KV_HEADS_LAYOUT))

  def _merge_heads(self, out: jax.Array) -> jax.Array:
    batch, length = out.shape[:2]
    return self.output(out.reshape((batch, length, self.num_heads * self.head_dim)))

  def _scale_queries(self, q: jax.Array, positions: jax.Array) -> jax.Array:
    """log-n / SSMax / Llama 4: queries times a factor of their position (``n = position + 1``
    keys)."""
    if self.query_scaling == "none":
      return q
    if self.query_scaling == "logn":
      factor = logn_query_scale(positions, train_len=self.query_scaling_length)[..., None, None]
    elif self.query_scaling == "llama4":
      factor = llama4_query_scale(positions, floor_scale=self.llama4_floor_scale,
                                  attn_scale=self.llama4_attn_scale)[..., None, None]
    else:
      factor = ssmax_query_scale(positions, self.ssmax_s[...])[..., None]  # [B|1, L, H, 1]
    return (q.astype(jnp.float32) * factor).astype(q.dtype)

  def _attend(self, q, k, v, *, pe: PositionalEncoding, x: jax.Array, q_positions, k_positions,
              bias: Bias, implementation: str, cache=None, **kwargs):
    """Runs attention with the PE's bias / content bias / logit hooks for this layer.

    Returns ``(out, key_features)``; ``key_features`` is what the cache stores for the new
    tokens (``None`` for a PE without ``features``).
    """
    if implementation == "blockwise" and not pe.supports_blockwise:
      raise ValueError(f"pe={pe.name!r} does not support blockwise attention (it needs whole "
                       "rows of logits); use attention='dense'")
    if bias is None:  # A per-layer PE computes its own bias (shared ones come evaluated).
      bias = pe_bias(pe, q_positions, k_positions, implementation)
    q_features = k_features = new_features = None
    if pe.has_features:
      q_features, new_features = pe.features(x, q, q_positions, cache=cache)
      k_features = new_features
      if cache is not None and new_features is not None:
        cached, length = cache
        k_features = jax.tree.map(
            lambda c, n: jax.lax.dynamic_update_slice_in_dim(c, n.astype(c.dtype), length, 1),
            cached, new_features)
        new_features = k_features
    if pe.has_content_bias:
      position_bias = bias

      def bias(qp, kp, qf, kf):  # pylint: disable=function-redefined
        total = pe.content_bias(qp, kp, qf, kf)
        if position_bias is None:
          return total
        extra = position_bias(qp, kp) if callable(position_bias) else position_bias
        return total + extra
    if pe.has_attend:
      return self._pe_attend(q, k, v, pe=pe, q_features=q_features, k_features=k_features,
                             q_positions=q_positions, k_positions=k_positions,
                             implementation=implementation, **kwargs), new_features
    logits_fn = None
    if pe.has_logits:
      logits_fn = lambda logits: pe.logits(logits, q, k, q_positions, k_positions)
    # What a kernel that computes the bias inside needs (only where one runs).
    kernel_bias = (pe.kernel_bias() if callable(bias) and pe.has_kernel_bias
                   and kernel_bias_served() else None)
    out = attention(q, k, v, q_positions=q_positions, k_positions=k_positions, bias=bias,
                    kernel_bias=kernel_bias,
                    implementation=implementation, block_size=self.block_size,
                    window=self.window, chunk_size=self.chunk_size, q_features=q_features,
                    k_features=k_features,
                    logits_fn=logits_fn, bias_grad=bool(jax.tree.leaves(nnx.state(pe, nnx.Param))),
                    **kwargs)
    return out, new_features

  def _pe_attend(self, q, k, v, *, pe: PositionalEncoding, q_features, k_features, q_positions,
                 k_positions, implementation: str, q_offset=0, kv_length=None,
                 q_segment_ids=None, k_segment_ids=None) -> jax.Array:
    """The PE's own attention operator (PaTH, stick-breaking): a full causal sequence as it is
    (any schedule), every other call as a dense call with its mask spelled out."""
    full = (isinstance(q_offset, int) and q_offset == 0 and kv_length is None
            and self.window is None and self.chunk_size is None)
    if full:
      return pe.attend(q, k, v, q_features=q_features, k_features=k_features, mask=None,
                       q_slots=None, segment_ids=q_segment_ids, implementation=implementation,
                       block_size=self.block_size)
    q_slots = q_offset + jnp.arange(q.shape[1], dtype=jnp.int32)
    chunks = {}
    if self.chunk_size is not None:
      chunks = dict(q_chunk_ids=chunk_ids(q_positions, self.chunk_size),
                    k_chunk_ids=chunk_ids(k_positions, self.chunk_size))
    mask = attention_mask(q_slots, jnp.arange(k.shape[1], dtype=jnp.int32), causal=True,
                          kv_length=kv_length, q_segment_ids=q_segment_ids,
                          k_segment_ids=k_segment_ids, window=self.window, **chunks)
    return pe.attend(q, k, v, q_features=q_features, k_features=k_features, mask=mask,
                     q_slots=q_slots, segment_ids=None, implementation="dense",
                     block_size=self.block_size)

  def __call__(self, x: jax.Array, *, pe: PositionalEncoding, positions: jax.Array,
               segment_ids: Optional[jax.Array], bias: Bias, implementation: str) -> jax.Array:
    """Causal self-attention over a whole sequence.

    Args:
      x: ``[B, L, E]`` normalized inputs.
      pe: this layer's positional encoding (its ``rotate``, bias and logit hooks act here).
      positions: int32 ``[B | 1, L]``.
      segment_ids: optional int ``[B, L]`` (packed sequences).
      bias: the PE bias shared by the layers (array for dense, function of positions for
        blockwise) or ``None`` (no bias, or a per-layer PE that computes its own here).
      implementation: ``"dense"`` or ``"blockwise"``.

    Returns:
      ``[B, L, E]``.
    """
    q, k, v = self._project(x)
    if pe.has_rotate:
      q, k = pe.rotate(q, k, positions, positions)
    q = self._scale_queries(q, positions)
    out, _ = self._attend(q, k, v, pe=pe, x=x, q_positions=positions, k_positions=positions,
                          bias=bias, implementation=implementation,
                          q_segment_ids=segment_ids, k_segment_ids=segment_ids)
    return self._merge_heads(out)

  def extend(self, x: jax.Array, *, pe: PositionalEncoding, positions: jax.Array,
             cache_positions: jax.Array, layer_cache: LayerCache, length: jax.Array,
             bias: Bias, implementation: str, segment_ids: Optional[jax.Array] = None,
             cache_segment_ids: Optional[jax.Array] = None):
    """Appends ``L`` tokens to this layer's cache and attends over everything cached so far.

    Args:
      x: ``[B, L, E]`` normalized inputs of the new tokens.
      pe: this layer's positional encoding.
      positions: int32 ``[B, L]`` positions of the new tokens.
      cache_positions: int32 ``[B, T]`` positions of all cache slots, new tokens included.
      layer_cache: this layer's keys / values ``[B, T, K, D]`` (rotated iff
        ``cache_rotated_keys``; int8 / fp8 with float32 ``[B, T, K]`` scales when quantized) and
        cached key features ``[B, T, ...]`` (content-aware PEs) or ``None``.
      length: int32 scalar, the slot of the first new token (the filled slots before it).
      bias: the shared PE bias over ``(positions, cache_positions)`` or ``None``.
      implementation: ``"dense"`` or ``"blockwise"``.
      segment_ids: optional int32 ``[B, L]`` segment of each new token (0 = padding); given
        together with ``cache_segment_ids``.
      cache_segment_ids: optional int32 ``[B, T]`` segment of every slot, new tokens included.

    Returns:
      ``(out [B, L, E], layer_cache)`` with the new tokens written at slots
      ``length .. length + L - 1`` (quantized first for a quantized cache: attention reads back
      what the cache holds, so a prefill scores the tokens as later decoding steps see them).
    """
    q, k, v = self._project(x)
    if self.cache_rotated_keys and pe.has_rotate:
      q, k = pe.rotate(q, k, positions, positions)
    layer_cache = layer_cache.write(k, v, length)
    keys, values = layer_cache.read(q.dtype)
    if not self.cache_rotated_keys and pe.has_rotate:  # Rotate every cached key for now.
      q, keys = pe.rotate(q, keys, positions, cache_positions)
    q = self._scale_queries(q, positions)
    features = layer_cache.features
    out, features = self._attend(
        q, keys, values, pe=pe, x=x, q_positions=positions, k_positions=cache_positions,
        bias=bias, implementation=implementation,
        cache=None if features is None else (features, length), q_offset=length,
        kv_length=length + x.shape[1], q_segment_ids=segment_ids,
        k_segment_ids=cache_segment_ids)
    return self._merge_heads(out), layer_cache._replace(features=features)
