"""FoX, forgetting attention: a data-dependent forget-gate bias (content-aware bias hooks).

Each layer projects its normalized input to one forget-gate logit per query head,
``w_h . x_t + b_h``, and adds ``c_i - c_j`` (the sum of the log forget gates of the tokens after
key j up to query i) to the logits. ``features`` returns the cumulative log gates ``c`` of the new
tokens for both queries and keys, continuing, in KV-cache decoding, from the last cached ``c``;
``content_bias`` forms ``c_i - c_j`` for everything (dense) or one tile (blockwise).

Defaults follow the paper's code (``fgate_type="full"``): no other positional encoding
(``use_rope=False``), gate weights normal(0, 0.02) and bias 0. x-transformers'
``DataDependentAlibi`` initializes the bias to 5 (gates near 1 at first): ``gate_bias_init=5``.
With ``use_rope=True`` queries and keys are also rotated by RoPE (the paper's FoX + RoPE ablation;
its code's default base, 500000).

References:
  Lin, Nikishin, He and Courville 2025, "Forgetting Transformer: Softmax Attention with a Forget
  Gate", ICLR 2025, arXiv 2503.02130.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from flax import nnx
import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings.fox import fox_bias, fox_cumulative_log_forget
from pejax.encodings.rope import RopeConfig, apply_rope, rope_inv_freq
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class FoxConfig(PEConfig):
  """Forgetting-attention settings (the paper's code defaults).

  Attributes:
    use_rope: also rotate queries and keys by RoPE (the paper's FoX uses no other PE).
    base: RoPE base theta when ``use_rope`` (500000, the paper code's ``rope_base``).
    gate_bias_init: initial forget-gate bias (0: gates start at sigmoid(0) = 1/2; x-transformers
      uses 5).
    gate_init_std: standard deviation of the gate weights' normal initialization (0.02).
  """

  use_rope: bool = False
  base: float = 500000.0
  gate_bias_init: float = 0.0
  gate_init_std: float = 0.02

  def __post_init__(self):
    if not isinstance(self.use_rope, bool):
      raise ValueError(f"use_rope must be a bool, got {self.use_rope!r}")
    arg_checks.check_base("base", self.base)
    try:
      finite = math.isfinite(float(self.gate_bias_init))
    except (TypeError, ValueError):
      finite = False
    if isinstance(self.gate_bias_init, bool) or not finite:
      raise ValueError(f"gate_bias_init must be a finite number, got {self.gate_bias_init!r}")
    arg_checks.check_positive_float("gate_init_std", self.gate_init_std)

  def check_model(self, model: ModelDims) -> None:
    """Raises ``ValueError`` unless the head dim is even when RoPE is used.

    Args:
      model: the decoder config (``head_dim``).
    """
    if self.use_rope:
      RopeConfig(model.head_dim, base=self.base)


@register_pe("fox")
class FoxPE(PositionalEncoding):
  """``sum_{l=j+1}^{i} log sigmoid(w_h . x_l + b_h)`` added to the logits, per layer and head."""

  config_class = FoxConfig
  translation_invariant = True
  per_layer = True
  content_aware = True

  def __init__(self, config: FoxConfig, model: ModelDims, *, rngs: nnx.Rngs):
    super().__init__(config, model, rngs=rngs)
    self.rope = RopeConfig(model.head_dim, base=config.base) if config.use_rope else None
    self.gate_kernel = nnx.Param(config.gate_init_std * jax.random.normal(
        rngs.params(), (model.d_model, model.num_heads), jnp.float32))  # [E, H]
    self.gate_bias = nnx.Param(jnp.full((model.num_heads,), config.gate_bias_init,
                                        jnp.float32))  # [H]

  @property
  def has_rotate(self) -> bool:
    """Whether RoPE rotates queries and keys (``use_rope``)."""
    return self.config.use_rope

  def rotate(self, q: jax.Array, k: jax.Array, q_positions: jax.Array,
             k_positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """RoPE on queries and keys when ``use_rope`` (else unchanged).

    Shapes as in :meth:`PositionalEncoding.rotate`.
    """
    if self.rope is None:
      return q, k
    inv_freq, _ = rope_inv_freq(self.rope)
    return (apply_rope(q, q_positions, inv_freq, layout=self.rope.layout),
            apply_rope(k, k_positions, inv_freq, layout=self.rope.layout))

  def gate_logits(self, x: jax.Array) -> jax.Array:
    """Forget-gate logits ``w_h . x_t + b_h``.

    Args:
      x: ``[B, L, E]`` the layer's normalized inputs.

    Returns:
      float32 ``[B, L, H]``.
    """
    logits = jnp.einsum("ble,eh->blh", x.astype(jnp.float32), self.gate_kernel[...],
                        precision=jax.lax.Precision.HIGHEST)
    return logits + self.gate_bias[...][None, None, :]

  def features(self, x: jax.Array, q: jax.Array, positions: jax.Array, *,
               cache: Optional[tuple[jax.Array, jax.Array]] = None) -> tuple[Any, Any]:
    """Cumulative log forget gates of the new tokens (queries and keys alike).

    Args:
      x: ``[B, L, E]`` the layer's normalized inputs.
      q: ``[B, L, H, D]`` its queries (unused).
      positions: int ``[B | 1, L]`` (unused: the gates depend on content only).
      cache: ``None``, or ``(cached [B, T, H], length)``: the running sum continues from slot
        ``length - 1`` (from 0 when the cache is empty).

    Returns:
      ``(c, c)``: float32 ``[B, L, H]``.
    """
    del q, positions
    initial = None
    if cache is not None:
      cached, length = cache
      last = jax.lax.dynamic_index_in_dim(cached, jnp.maximum(length - 1, 0), axis=1,
                                          keepdims=False)  # [B, H]
      initial = jnp.where(length > 0, last, jnp.zeros_like(last))
    cumulative = fox_cumulative_log_forget(self.gate_logits(x), initial=initial)
    return cumulative, cumulative

  def key_feature_shape(self) -> Optional[tuple[int, ...]]:
    """One cumulative log gate per head and key token.

    Returns:
      ``(H,)``.
    """
    return (self.num_heads,)

  def content_bias(self, q_positions: jax.Array, k_positions: jax.Array, q_features: Any,
                   k_features: Any) -> jax.Array:
    """``c_i - c_j`` for the given query rows and keys.

    Args:
      q_positions: int ``[B | 1, lq]`` (unused).
      k_positions: int ``[B | 1, lk]`` (unused).
      q_features: float32 ``[B, lq, H]`` cumulative log gates of the query rows.
      k_features: float32 ``[B, lk, H]`` cumulative log gates of the keys.

    Returns:
      float32 ``[B, H, lq, lk]``.
    """
    del q_positions, k_positions
    return fox_bias(q_features, k_features)
