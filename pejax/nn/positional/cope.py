"""CoPE, contextual position encoding (``logits`` hook; dense attention only).

Each layer learns ``max_position`` embeddings of the head dim (shared by its heads, zeros at
initialization as in the paper's code). Query i counts the keys its sigmoid gates select; the
fractional count indexes the embeddings by linear interpolation, and ``q_i . e[p_ij]`` is added to
the logits (:func:`pejax.encodings.cope_bias`). Positions beyond ``max_position - 1`` are clamped
there, deliberately, as in the paper.

The gates read whole rows of logits (a suffix sum over keys), so CoPE runs with dense attention;
``attention="blockwise"`` raises a ``ValueError`` naming the PE. CoPE is the only position
signal (the paper replaces the PE); the logits do not depend on positions, only on the causal
order, so a global shift of positions changes nothing.

References:
  Golovneva, Wang, Weston and Sukhbaatar 2024, "Contextual Position Encoding: Learning to Count
  What's Important", arXiv 2405.18719.
"""

from __future__ import annotations

import dataclasses

from flax import nnx
import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings.cope import cope_bias
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, register_pe

DEFAULT_MAX_POSITION = 64


@dataclasses.dataclass(frozen=True)
class CopeConfig(PEConfig):
  """CoPE settings.

  Attributes:
    max_position: number P of position embeddings; contextual positions are clamped to
      ``P - 1`` (the paper's ``npos_max``, much smaller than the context; x-transformers'
      default is 16).
  """

  max_position: int = DEFAULT_MAX_POSITION

  def __post_init__(self):
    arg_checks.check_positive_int("max_position", self.max_position)


@register_pe("cope")
class CopePE(PositionalEncoding):
  """Interpolated ``q_i . e[p_ij]`` at the gated key counts ``p_ij``, added to the logits."""

  config_class = CopeConfig
  translation_invariant = True
  supports_blockwise = False
  per_layer = True
  content_aware = True

  def __init__(self, config: CopeConfig, model: ModelDims, *, rngs: nnx.Rngs):
    super().__init__(config, model, rngs=rngs)
    self.pos_emb = nnx.Param(jnp.zeros((config.max_position, model.head_dim), jnp.float32))

  def logits(self, logits: jax.Array, q: jax.Array, k: jax.Array, q_positions: jax.Array,
             k_positions: jax.Array) -> jax.Array:
    """The CoPE term of these logits.

    Args:
      logits: float32 ``[B, H, Lq, Lk]`` scaled logits, masked pairs ``-1e30`` (gate 0).
      q: ``[B, Lq, H, D]`` queries.
      k: ``[B, Lk, K, D]`` keys (unused: the logits carry q.k).
      q_positions: int ``[B | 1, Lq]`` (unused).
      k_positions: int ``[B | 1, Lk]`` (unused).

    Returns:
      float32 ``[B, H, Lq, Lk]``.
    """
    del k, q_positions, k_positions
    return cope_bias(logits, q, self.pos_emb[...])
