"""Per-row data-dependent ALiBi: FoX's forget gates, chosen per query (content-aware bias hooks).

Each layer projects its normalized input to a small gate query ``a_t`` and gate key ``b_t`` per
head (``gate_dim`` dims each, one bias-free linear map ``[E, 2 * H * gate_dim]``, queries first as
in x-transformers) and adds ``s * sum_{l=j}^{i-1} log sigmoid(a_i . b_l / sqrt(gate_dim))`` to the
logit of query i and key j (:func:`pejax.encodings.per_row_alibi_bias`). ``features`` returns the
gate vectors of the new tokens together with their text index + 1 (the last channel of each
head's feature vector, so a KV cache keeps one float32 ``[H, gate_dim + 1]`` entry per token);
``content_bias`` forms the bias over whole rows.

The bias of a row sums over every key between the key and the query, so it is evaluated on whole
rows: dense attention only (``attention="blockwise"`` raises a ``ValueError`` naming the PE), like
CoPE. It uses no positions, only the order of the tokens: a global shift of positions changes
nothing. With an evicting KV cache (``eviction="window"`` / ``"sinks"``), the gates of evicted
tokens drop out of the sums.

Defaults follow x-transformers 2.31.10 (``data_dependent_alibi_per_row=True``): ``gate_dim=8``,
``post_log_scale=1``, the linear map initialized as ``torch.nn.Linear``
(uniform in ``+-1/sqrt(E)``); no other positional encoding.

References:
  Lin, Nikishin, He and Courville 2025, "Forgetting Transformer: Softmax Attention with a Forget
  Gate", ICLR 2025, arXiv 2503.02130; x-transformers ``PerRowDataDependentAlibi``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from flax import nnx
import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings.per_row_alibi import per_row_alibi_bias
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class PerRowAlibiConfig(PEConfig):
  """Per-row data-dependent ALiBi settings (x-transformers' defaults).

  Attributes:
    gate_dim: d, dims of each head's gate query and gate key (x-transformers'
      ``data_dependent_alibi_per_row_dim_head``, 8).
    post_log_scale: s, multiplies the log gates (1).
  """

  gate_dim: int = 8
  post_log_scale: float = 1.0

  def __post_init__(self):
    arg_checks.check_positive_int("gate_dim", self.gate_dim)
    value = self.post_log_scale
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
      raise ValueError(f"post_log_scale must be a finite number, got {value!r}")


@register_pe("per_row_alibi")
class PerRowAlibiPE(PositionalEncoding):
  """``s * sum_{l=j}^{i-1} log sigmoid(a_i . b_l / sqrt(d))`` added to the logits, per layer."""

  config_class = PerRowAlibiConfig
  translation_invariant = True
  supports_blockwise = False
  per_layer = True
  content_aware = True

  def __init__(self, config: PerRowAlibiConfig, model: ModelDims, *, rngs: nnx.Rngs):
    super().__init__(config, model, rngs=rngs)
    limit = 1.0 / math.sqrt(model.d_model)
    self.gate_kernel = nnx.Param(jax.random.uniform(
        rngs.params(), (model.d_model, 2 * model.num_heads * config.gate_dim), jnp.float32,
        -limit, limit))  # [E, 2 * H * d]: gate queries, then gate keys.

  def gates(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Gate queries and gate keys of the tokens.

    Args:
      x: ``[B, L, E]`` the layer's normalized inputs.

    Returns:
      ``(a, b)``: float32 ``[B, L, H, d]`` each.
    """
    projected = jnp.einsum("ble,ef->blf", x.astype(jnp.float32), self.gate_kernel[...],
                           precision=jax.lax.Precision.HIGHEST)
    batch, length = x.shape[:2]
    both = projected.reshape(batch, length, 2, self.num_heads, self.config.gate_dim)
    return both[:, :, 0], both[:, :, 1]

  def features(self, x: jax.Array, q: jax.Array, positions: jax.Array, *,
               cache: Optional[tuple[jax.Array, jax.Array]] = None) -> tuple[Any, Any]:
    """Gate vectors of the new tokens with their text index + 1 in the last channel.

    Args:
      x: ``[B, L, E]`` the layer's normalized inputs.
      q: ``[B, L, H, D]`` its queries (unused).
      positions: int ``[B | 1, L]`` (unused: the order of the tokens, not their positions).
      cache: ``None``, or ``(cached [B, T, H, d + 1], length)``: the new tokens' text indices
        continue after the largest cached index in slots ``< length``.

    Returns:
      ``(q_features, k_features)``: float32 ``[B, L, H, d + 1]`` each.
    """
    del q, positions
    a, b = self.gates(x)
    batch, length = x.shape[:2]
    index = jnp.arange(1, length + 1, dtype=jnp.float32)[None, :]  # [1, L]
    if cache is not None:
      # Continue after the newest cached token: the largest index among the slots in use. (An
      # evicting cache's chronological view passes its capacity as the length, not the count of
      # tokens seen, and its empty slots hold index 0.)
      cached, filled = cache
      in_use = jnp.arange(cached.shape[1])[None, :] < filled
      newest = jnp.max(jnp.where(in_use, cached[:, :, 0, -1], 0.0), axis=1, keepdims=True)
      index = newest + index  # [B, L]
    index = jnp.broadcast_to(index[:, :, None, None], (batch, length, self.num_heads, 1))
    return jnp.concatenate([a, index], axis=-1), jnp.concatenate([b, index], axis=-1)

  def key_feature_shape(self) -> Optional[tuple[int, ...]]:
    """A gate key and the text index + 1 per head and key token.

    Returns:
      ``(H, d + 1)``.
    """
    return (self.num_heads, self.config.gate_dim + 1)

  def content_bias(self, q_positions: jax.Array, k_positions: jax.Array, q_features: Any,
                   k_features: Any) -> jax.Array:
    """The per-row bias of these query rows over all their keys.

    Args:
      q_positions: int ``[B | 1, lq]`` (unused).
      k_positions: int ``[B | 1, lk]`` (unused).
      q_features: float32 ``[B, lq, H, d + 1]`` from :meth:`features`.
      k_features: float32 ``[B, lk, H, d + 1]``, every key of the rows in text order (empty
        cache slots: index 0).

    Returns:
      float32 ``[B, H, lq, lk]``.
    """
    del q_positions, k_positions
    return per_row_alibi_bias(q_features[..., :-1], k_features[..., :-1],
                              q_index=q_features[..., 0, -1], k_index=k_features[..., 0, -1],
                              post_log_scale=float(self.config.post_log_scale))
