"""xPos: RoPE with an exponential decay scale on queries and keys (``rotate`` hook), causal only.

The scale exponent is centered per batch row at ``(max(k_positions) + 1) // 2``, as
x-transformers does (``max_pos // 2``): the center cancels in every score and keeps the per-vector
scales inside float32 range on long sequences (see :mod:`pejax.encodings.xpos`). The KV cache
keeps keys before rotation (``cache_rotated_keys=False``) and re-rotates them at each step with
the center of that step; the scores are the same up to float rounding.

Causal only: for a key after its query the xPos factor grows with the distance, so the paper
(and x-transformers) define it for causal attention. The decoder is causal; ``bidirectional=True``
is rejected with a ``ValueError`` naming the PE.

References:
  Sun et al. 2022, "A Length-Extrapolatable Transformer", arXiv 2212.10554.
"""

from __future__ import annotations

import dataclasses

from flax import nnx
import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings import xpos as xpos_lib
from pejax.encodings.rope import LAYOUTS, RopeConfig, rope_inv_freq
from pejax.encodings.xpos import DEFAULT_GAMMA, DEFAULT_SCALE_BASE, apply_xpos
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class XposConfig(PEConfig):
  """xPos hyper-parameters (the paper's defaults).

  Attributes:
    base: RoPE base theta of the rotation (10000).
    layout: channel pairs, ``"half"`` (pejax's RoPE default) or ``"interleaved"`` (torchscale,
      x-transformers); the scores are the same up to a permutation of the projection weights.
    scale_base: the paper's B: the decay of pair i is ``zeta_i ** (distance / scale_base)`` (512).
    gamma: offset of ``zeta_i = (2i / D + gamma) / (1 + gamma)`` (0.4).
    centered: center the exponent per row at ``(max key position + 1) // 2`` (float32 range on
      long sequences); ``False`` uses the raw positions.
    bidirectional: must stay ``False``: xPos is defined for causal attention only.
  """

  base: float = 10000.0
  layout: str = "half"
  scale_base: float = DEFAULT_SCALE_BASE
  gamma: float = DEFAULT_GAMMA
  centered: bool = True
  bidirectional: bool = False

  def __post_init__(self):
    arg_checks.check_base("base", self.base)
    arg_checks.check_choice("layout", self.layout, LAYOUTS)
    arg_checks.check_positive_float("scale_base", self.scale_base)
    xpos_lib.check_gamma(self.gamma)  # Plain Python: no XLA backend at config time.
    for name in ("centered", "bidirectional"):
      if not isinstance(getattr(self, name), bool):
        raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
    if self.bidirectional:
      raise ValueError("pe='xpos' is causal only: its scale zeta ** ((q - k) / scale_base) grows "
                       "without bound for keys after the query (Sun et al. 2022); got "
                       "bidirectional=True")

  def check_model(self, model: ModelDims) -> None:
    """Raises ``ValueError`` unless the head dim is even.

    Args:
      model: the decoder config (``head_dim``).
    """
    RopeConfig(model.head_dim, base=self.base, layout=self.layout)


@register_pe("xpos")
class XposPE(PositionalEncoding):
  """RoPE rotation of every query / key channel pair, times ``zeta ** (+-position / B)``."""

  config_class = XposConfig
  translation_invariant = True
  causal_only = True

  def __init__(self, config: XposConfig, model: ModelDims, *, rngs: nnx.Rngs):
    super().__init__(config, model, rngs=rngs)
    self.rope = RopeConfig(model.head_dim, base=config.base, layout=config.layout)

  def rotate(self, q: jax.Array, k: jax.Array, q_positions: jax.Array,
             k_positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Rotates queries and keys as RoPE and scales them by ``zeta ** (+-(position - c) / B)``.

    Shapes as in :meth:`PositionalEncoding.rotate`.
    """
    inv_freq, _ = rope_inv_freq(self.rope)
    center = 0
    if self.config.centered:
      center = (jnp.max(k_positions, axis=-1, keepdims=True) + 1) // 2  # [B | 1, 1]
    apply = lambda x, positions, is_key: apply_xpos(
        x, positions, inv_freq, is_key=is_key, layout=self.config.layout,
        scale_base=self.config.scale_base, gamma=self.config.gamma, center=center)
    return apply(q, q_positions, False), apply(k, k_positions, True)
