"""One pre-norm decoder block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``.

Axes: B batch, L length, E model width.

References:
  Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture", arXiv 2002.04745.
  Zhang & Sennrich 2019, "Root Mean Square Layer Normalization", arXiv 1910.07467.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flax import nnx
import jax

from pejax.nn.mlp import Mlp
from pejax.nn.rms_norm import make_rms_norm
from pejax.nn.self_attention import SelfAttention

if TYPE_CHECKING:
  from pejax.nn.decoder_config import DecoderConfig


class DecoderBlock(nnx.Module):
  """RMSNorm -> grouped-query self-attention -> residual; RMSNorm -> MLP -> residual."""

  def __init__(self, config: "DecoderConfig", *, rngs: nnx.Rngs, layer: int = 0):
    self.attention_norm = make_rms_norm(config, config.d_model, rngs=rngs)
    self.attention = SelfAttention(config, rngs=rngs, layer=layer)
    self.mlp_norm = make_rms_norm(config, config.d_model, rngs=rngs)
    self.mlp = Mlp(config, rngs=rngs)

  def __call__(self, x: jax.Array, **attention_kwargs: Any) -> jax.Array:
    """``[B, L, E] -> [B, L, E]``; ``attention_kwargs`` go to :class:`SelfAttention`.

    Args:
      x: ``[B, L, E]`` residual stream.
      **attention_kwargs: keyword arguments of :meth:`SelfAttention.__call__` (``pe``,
        ``positions`` int32 ``[B | 1, L]``, ``segment_ids``, ``bias``, ``implementation``).

    Returns:
      ``[B, L, E]``, the residual stream after the attention and MLP sub-blocks.
    """
    x = x + self.attention(self.attention_norm(x), **attention_kwargs)
    return x + self.mlp(self.mlp_norm(x))

  def extend(self, x: jax.Array, **attention_kwargs: Any) -> tuple[jax.Array, Any]:
    """KV-cache form: returns ``(x, layer_cache)`` (see :meth:`SelfAttention.extend`).

    Axes as in :mod:`pejax.nn.kv_cache`: T cache capacity, K key/value heads, D head dim.

    Args:
      x: ``[B, L, E]`` residual stream of the L new tokens.
      **attention_kwargs: keyword arguments of :meth:`SelfAttention.extend` (``pe``,
        ``positions`` ``[B, L]``, ``cache_positions`` ``[B, T]``, this layer's ``layer_cache``
        (:class:`~pejax.nn.kv_cache.LayerCache`), ``length``, ``bias``, ``implementation``).

    Returns:
      ``(x [B, L, E], layer_cache)``: the new tokens' residual stream and the layer's cache with
      them written at slots ``length .. length + L - 1``.
    """
    attended, layer_cache = self.attention.extend(self.attention_norm(x), **attention_kwargs)
    x = x + attended
    return x + self.mlp(self.mlp_norm(x)), layer_cache
