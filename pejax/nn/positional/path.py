"""PaTH attention: data-dependent Householder transforms between every key and query.

Axes: B batch, L length, T cache slots, H query heads, K key/value heads, D head dim, E width.

Each layer computes, per token t and key/value head, a unit vector ``w_t`` and a strength
``beta_t = 2 sigmoid(u . x_t + c)`` in (0, 2), and the logit of query i and key j <= i becomes
``q_i^T H_i ... H_{j+1} k_j / sqrt(D)`` with ``H_t = I - beta_t w_t w_t^T``
(:mod:`pejax.encodings.path`). As in the reference layer (fla's ``PaTHAttention``): ``w`` is a
low-rank projection of the layer's input (``E -> w_rank -> K * D``, bias-free; ``w_rank = 0``: one
``E -> K * D`` map), then a causal depthwise convolution over the last ``short_conv`` tokens with
a SiLU (``short_conv = 0``: none), then L2-normalized per head; no other positional encoding.

Hooks: ``features`` returns, per token and key/value head, ``w`` (D), ``beta`` (1), the
pre-convolution projection (D, for the convolution of later tokens in KV-cache decoding) and its
position (1), so a KV cache keeps one float32 ``[K, 2 D + 2]`` entry per token.
PaTH owns its layer's attention (the ``attend`` hook): a full sequence runs
:func:`~pejax.encodings.path_attention.path_attention`, blockwise (``attention="blockwise"``: O(L)
memory with gradients, blocks of the decoder's ``block_size``) or from the whole logits
(``"dense"``: :func:`~pejax.encodings.path.path_logits` in chunks of ``chunk_size``,
O(L^2 D / C) memory under autodiff); every other call (a KV cache, a sliding window, chunked
attention) takes new queries against every key, key by key
(:func:`~pejax.encodings.path.path_logits_rows`), and a masked softmax: the same numbers.

The convolution does not reach across packed documents: a tap reads an earlier token only if its
position is smaller than the current token's (positions restart in each packed document, and
left padding sits at position 0). Positions play no other role: PaTH sees only the order. With an
evicting KV cache (``eviction="window"`` / ``"sinks"``) the evicted tokens' transforms leave the
products, while a kept token keeps the vector its own neighbours gave it.

Defaults follow fla-org/flash-linear-attention's ``PaTHAttention`` (``use_low_rank_w=True`` with
rank 32, ``use_w_shortconv=True``, ``conv_size=3``, no convolution bias, no forget gate), its
layers initialized as torch's (uniform in ``+-1/sqrt(fan_in)``).

References:
  Yang, Shen, Wen, Tan, Mishra, Ren, Panda and Kim 2025, "PaTH Attention: Position Encoding via
  Accumulating Householder Transformations", arXiv 2505.16381.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from flax import nnx
import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings.path import path_logits_rows
from pejax.encodings.path_attention import path_attention
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class PathConfig(PEConfig):
  """PaTH settings (the reference layer's defaults).

  Attributes:
    w_rank: rank of the low-rank projection to the transform vectors (32); 0: a full-rank map.
    short_conv: width of the causal depthwise convolution on the transform vectors (3); 0: none.
    chunk_size: tokens per chunk of the full-sequence logits (64): a speed / memory knob, the
      numbers do not depend on it beyond float32 rounding.
  """

  w_rank: int = 32
  short_conv: int = 3
  chunk_size: int = 64

  def __post_init__(self):
    arg_checks.check_nonnegative_int("w_rank", self.w_rank)
    arg_checks.check_nonnegative_int("short_conv", self.short_conv)
    arg_checks.check_positive_int("chunk_size", self.chunk_size)


# The position of "no token" before the first one: above any position a tap compares with (kept
# finite, so that no infinity enters the traced program).
_NO_TOKEN = 2.0 ** 62


def _uniform(key: jax.Array, shape: tuple[int, ...], fan_in: int) -> jax.Array:
  limit = 1.0 / math.sqrt(fan_in)
  return jax.random.uniform(key, shape, jnp.float32, -limit, limit)


@register_pe("path")
class PathPE(PositionalEncoding):
  """``q_i^T H_i ... H_{j+1} k_j`` logits with ``H_t = I - beta_t w_t w_t^T`` from the tokens."""

  config_class = PathConfig
  translation_invariant = True
  per_layer = True
  content_aware = True
  causal_only = True

  def __init__(self, config: PathConfig, model: ModelDims, *, rngs: nnx.Rngs):
    super().__init__(config, model, rngs=rngs)
    kv_heads = getattr(model, "kv_heads", model.num_heads)
    self.kv_heads = kv_heads
    width, out = model.d_model, kv_heads * model.head_dim
    if config.w_rank:
      self.w_down = nnx.Param(_uniform(rngs.params(), (width, config.w_rank), width))
      self.w_up = nnx.Param(_uniform(rngs.params(), (config.w_rank, out), config.w_rank))
    else:
      self.w_kernel = nnx.Param(_uniform(rngs.params(), (width, out), width))
    if config.short_conv:
      # torch.nn.Conv1d(groups=channels): fan_in = kernel width.
      self.conv = nnx.Param(_uniform(rngs.params(), (config.short_conv, out), config.short_conv))
    self.beta_kernel = nnx.Param(_uniform(rngs.params(), (width, kv_heads), width))
    self.beta_bias = nnx.Param(_uniform(rngs.params(), (kv_heads,), width))

  def _project(self, x: jax.Array) -> jax.Array:
    """``[B, L, E]`` -> the pre-convolution transform vectors ``[B, L, K * D]`` (float32)."""
    x = x.astype(jnp.float32)
    hi = jax.lax.Precision.HIGHEST
    if self.config.w_rank:
      return jnp.einsum("blr,rf->blf", jnp.einsum("ble,er->blr", x, self.w_down[...],
                                                  precision=hi), self.w_up[...], precision=hi)
    return jnp.einsum("ble,ef->blf", x, self.w_kernel[...], precision=hi)

  def features(self, x: jax.Array, q: jax.Array, positions: jax.Array, *,
               cache: Optional[tuple[jax.Array, jax.Array]] = None) -> tuple[Any, Any]:
    """Transform vectors, strengths, projections and positions of the new tokens.

    Args:
      x: ``[B, L, E]`` the layer's normalized inputs.
      q: ``[B, L, H, D]`` its queries (unused).
      positions: int ``[B | 1, L]``.
      cache: ``None``, or ``(cached [B, T, K, 2 D + 2], length)``: the convolution reads the
        cached projections of slots ``length - 1, length - 2, ...``; the new tokens take slots
        ``length ..``.

    Returns:
      ``(features, features)``: float32 ``[B, L, K, 2 D + 2]``: ``w`` (D), ``beta`` (1), the
      projection (D), the position (1).
    """
    del q
    batch, length = x.shape[:2]
    dim = self.head_dim
    raw = self._project(x)  # [B, L, K * D]
    pos = jnp.broadcast_to(positions, (batch, length)).astype(jnp.float32)
    start = jnp.int32(0) if cache is None else jnp.asarray(cache[1], jnp.int32)
    width = self.config.short_conv
    if width:
      if cache is None:
        past_raw = jnp.zeros((batch, width - 1, raw.shape[-1]), jnp.float32)
        past_pos = jnp.full((batch, width - 1), _NO_TOKEN, jnp.float32)  # Never before a token.
      else:
        cached = cache[0]
        recent = jax.lax.dynamic_slice_in_dim(
            jnp.pad(cached, ((0, 0), (width - 1, 0), (0, 0), (0, 0))),
            start, width - 1, axis=1)  # Slots start - (W - 1) .. start - 1 (left-padded).
        past_raw = recent[..., dim + 1:2 * dim + 1].reshape(batch, width - 1, -1)
        slot_of = start - (width - 1) + jnp.arange(width - 1)
        filled = slot_of >= 0
        past_pos = jnp.where(filled[None, :], recent[:, :, 0, 2 * dim + 1], _NO_TOKEN)
      all_raw = jnp.concatenate([past_raw, raw], axis=1)  # [B, W - 1 + L, K * D]
      all_pos = jnp.concatenate([past_pos, pos], axis=1)
      conv = self.conv[...]  # [W, K * D]; tap W - 1 is the current token.
      mixed = jnp.zeros_like(raw)
      for tap in range(width):
        back = width - 1 - tap  # How many tokens back this tap reads.
        lo = width - 1 - back
        taken = all_raw[:, lo:lo + length]
        ok = (back == 0) | (all_pos[:, lo:lo + length] < pos)
        mixed = mixed + jnp.where(ok[..., None], taken, 0.0) * conv[tap][None, None, :]
      w = jax.nn.silu(mixed)
    else:
      w = raw
    w = w.reshape(batch, length, self.kv_heads, dim)
    w = w * jax.lax.rsqrt(jnp.sum(w * w, axis=-1, keepdims=True) + 1e-6)  # fla's l2_norm.
    beta = 2.0 * jax.nn.sigmoid(jnp.einsum(
        "ble,ek->blk", x.astype(jnp.float32), self.beta_kernel[...],
        precision=jax.lax.Precision.HIGHEST) + self.beta_bias[...][None, None, :])
    per_head = jnp.broadcast_to(pos[:, :, None, None], (batch, length, self.kv_heads, 1))
    features = jnp.concatenate([w, beta[..., None], raw.reshape(batch, length, self.kv_heads, dim),
                                per_head], axis=-1)
    return features, features

  def attend(self, q: jax.Array, k: jax.Array, v: jax.Array, *, q_features: Any,
             k_features: Any, mask: Optional[jax.Array], q_slots: Optional[jax.Array],
             segment_ids: Optional[jax.Array], implementation: str,
             block_size: int) -> jax.Array:
    """PaTH attention (shapes and calls as in :meth:`PositionalEncoding.attend`).

    A full sequence: :func:`pejax.path_attention`, blockwise in blocks of ``block_size`` or from
    the whole logits in chunks of ``chunk_size``. Otherwise (a KV cache, a window, chunks): the
    logits of the queries at ``q_slots`` against every key, key by key
    (:func:`pejax.path_logits_rows`), then the masked softmax.
    """
    del q_features
    dim = self.head_dim
    w, beta = k_features[..., :dim], k_features[..., dim]
    if mask is None:
      dense = implementation == "dense"
      return path_attention(q, k, v, w, beta,
                            block_size=self.config.chunk_size if dense else block_size,
                            segment_ids=segment_ids, dense=dense)
    logits = path_logits_rows(q, k, w, beta, q_slots=q_slots) / math.sqrt(dim)
    probs = jax.nn.softmax(jnp.where(mask, logits, -1e30), axis=-1)  # [B, H, Lq, Lk]
    values = jnp.repeat(v.astype(jnp.float32), q.shape[2] // v.shape[2], axis=2)
    out = jnp.einsum("bhij,bjhd->bihd", probs, values, precision=jax.lax.Precision.HIGHEST)
    return out.astype(q.dtype)

  def key_feature_shape(self) -> Optional[tuple[int, ...]]:
    """``w``, ``beta``, the projection and the position per key/value head.

    Returns:
      ``(K, 2 D + 2)``.
    """
    return (self.kv_heads, 2 * self.head_dim + 2)
