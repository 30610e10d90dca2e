"""Grouped-query self-attention with the PE ``rotate`` and ``bias`` hooks and a KV-cache path.

Axes: B batch, L new tokens, T cache capacity, E model width, H query heads, K key/value heads,
D head dim.

References:
  Ainslie et al. 2023, "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
  Checkpoints", arXiv 2305.13245.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from flax import nnx
import jax
from jax.sharding import PartitionSpec

from pejax.nn.attention import Bias, attention
from pejax.nn.positional.interface import PositionalEncoding
from pejax.nn.token_linear import TokenLinear
from pejax.parallel import logical_axes as axes

if TYPE_CHECKING:
  from pejax.nn.decoder_config import DecoderConfig


# [B, L, H|K, D] activations on a mesh: heads over the "model" axis, the rest left to XLA.
_HEADS_LAYOUT = (PartitionSpec.UNCONSTRAINED, PartitionSpec.UNCONSTRAINED, axes.HEADS, None)
_KV_HEADS_LAYOUT = (PartitionSpec.UNCONSTRAINED, PartitionSpec.UNCONSTRAINED, axes.KV_HEADS, None)


class SelfAttention(nnx.Module):
  """Projections to ``H`` query and ``K`` key/value heads, PE rotation, attention, output.

  Sharding (logical axes, :mod:`pejax.parallel.logical_axes`): query/key/value kernels
  ``[E, H*D]`` are ``("embed", "heads")``, the output kernel ``[H*D, E]`` is ``("heads",
  "embed")`` (Megatron column / row parallel); on a mesh the ``[B, L, H, D]`` queries, keys and
  values are constrained to heads over the ``model`` axis, so the PE rotation, the PE bias and
  the attention run per head shard. Without a mesh the annotations change nothing.
  """

  def __init__(self, config: "DecoderConfig", *, rngs: nnx.Rngs):
    width, dtype = config.d_model, config.compute_dtype
    self.num_heads = config.num_heads
    self.num_kv_heads = config.kv_heads
    self.head_dim = config.head_dim
    self.block_size = config.block_size
    self.cache_rotated_keys = config.cache_rotated_keys

    def linear(features_in: int, features_out: int, names: tuple[str, str]) -> TokenLinear:
      return TokenLinear(
          features_in, features_out, use_bias=False, dtype=dtype,
          kernel_init=axes.partitioned(nnx.nn.linear.default_kernel_init, names), rngs=rngs)

    self.query = linear(width, self.num_heads * self.head_dim, (axes.EMBED, axes.HEADS))
    self.key = linear(width, self.num_kv_heads * self.head_dim, (axes.EMBED, axes.KV_HEADS))
    self.value = linear(width, self.num_kv_heads * self.head_dim, (axes.EMBED, axes.KV_HEADS))
    self.output = linear(self.num_heads * self.head_dim, width, (axes.HEADS, axes.EMBED))

  def _project(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``[B, L, E]`` -> q ``[B, L, H, D]``, k and v ``[B, L, K, D]``."""
    batch, length = x.shape[:2]
    q = self.query(x).reshape((batch, length, self.num_heads, self.head_dim))
    k = self.key(x).reshape((batch, length, self.num_kv_heads, self.head_dim))
    v = self.value(x).reshape((batch, length, self.num_kv_heads, self.head_dim))
    return (axes.constrain(q, _HEADS_LAYOUT), axes.constrain(k, _KV_HEADS_LAYOUT),
            axes.constrain(v, _KV_HEADS_LAYOUT))

  def _merge_heads(self, out: jax.Array) -> jax.Array:
    batch, length = out.shape[:2]
    return self.output(out.reshape((batch, length, self.num_heads * self.head_dim)))

  def __call__(self, x: jax.Array, *, pe: PositionalEncoding, positions: jax.Array,
               segment_ids: Optional[jax.Array], bias: Bias, implementation: str) -> jax.Array:
    """Causal self-attention over a whole sequence.

    Args:
      x: ``[B, L, E]`` normalized inputs.
      pe: the decoder's positional encoding (its ``rotate`` hook is applied here).
      positions: int32 ``[B | 1, L]``.
      segment_ids: optional int ``[B, L]`` (packed sequences).
      bias: the PE bias (array for dense, function of positions for blockwise) or ``None``.
      implementation: ``"dense"`` or ``"blockwise"``.

    Returns:
      ``[B, L, E]``.
    """
    q, k, v = self._project(x)
    q, k = pe.rotate(q, k, positions, positions)
    out = attention(q, k, v, q_positions=positions, k_positions=positions, bias=bias,
                    implementation=implementation, q_segment_ids=segment_ids,
                    k_segment_ids=segment_ids, block_size=self.block_size)
    return self._merge_heads(out)

  def extend(self, x: jax.Array, *, pe: PositionalEncoding, positions: jax.Array,
             cache_positions: jax.Array, keys: jax.Array, values: jax.Array, length: jax.Array,
             bias: Bias, implementation: str) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Appends ``L`` tokens to this layer's cache and attends over everything cached so far.

    Args:
      x: ``[B, L, E]`` normalized inputs of the new tokens.
      pe: the decoder's positional encoding.
      positions: int32 ``[B, L]`` positions of the new tokens.
      cache_positions: int32 ``[B, T]`` positions of all cache slots, new tokens included.
      keys: ``[B, T, K, D]`` cached keys (rotated iff ``cache_rotated_keys``).
      values: ``[B, T, K, D]`` cached values.
      length: int32 scalar, filled slots before the new tokens.
      bias: the PE bias over ``(positions, cache_positions)`` or ``None``.
      implementation: ``"dense"`` or ``"blockwise"``.

    Returns:
      ``(out [B, L, E], keys, values)`` with the new tokens written at slots
      ``length .. length + L - 1``.
    """
    q, k, v = self._project(x)
    if self.cache_rotated_keys:
      q, k = pe.rotate(q, k, positions, positions)
    keys = jax.lax.dynamic_update_slice(keys, k.astype(keys.dtype), (0, length, 0, 0))
    values = jax.lax.dynamic_update_slice(values, v.astype(values.dtype), (0, length, 0, 0))
    visible_keys = keys
    if not self.cache_rotated_keys:  # Rotate every cached key for the current length.
      q, visible_keys = pe.rotate(q, keys, positions, cache_positions)
    out = attention(q, visible_keys, values, q_positions=positions, k_positions=cache_positions,
                    bias=bias, implementation=implementation, q_offset=length,
                    kv_length=length + x.shape[1], block_size=self.block_size)
    return self._merge_heads(out), keys, values
