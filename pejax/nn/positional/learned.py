"""Learned absolute positions added to the token embeddings (``embed`` hook).

The table has ``config.max_position`` rows. Concrete out-of-range positions raise
``ValueError``; traced ones (inside ``jit``) produce NaN rows instead of silently clamping; and the
decoder raises when the static sequence length alone exceeds the table.

References:
  Gehring et al. 2017, "Convolutional Sequence to Sequence Learning", arXiv 1705.03122;
  Radford et al. 2019 (GPT-2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flax import nnx
import jax

from pejax.encodings import arg_checks
from pejax.encodings.learned_position import LearnedPositionEmbedding
from pejax.nn.positional.interface import PositionalEncoding

if TYPE_CHECKING:
  from pejax.nn.decoder_config import DecoderConfig


class LearnedPE(PositionalEncoding):
  """``x + table[positions]`` with a learned ``[max_position, E]`` table."""

  def __init__(self, config: "DecoderConfig", *, rngs: nnx.Rngs):
    self.check_config(config)
    self.max_length = config.max_position
    self.table = LearnedPositionEmbedding(config.max_position, config.d_model, rngs=rngs)

  @classmethod
  def check_config(cls, config: "DecoderConfig") -> None:
    """Raises ``ValueError`` unless ``config.max_position`` (the table size) is a positive int.

    Args:
      config: the decoder config.
    """
    arg_checks.check_positive_int("max_position", config.max_position)

  def embed(self, x: jax.Array, positions: jax.Array) -> jax.Array:
    """Adds the learned table rows of ``positions`` to the token embeddings.

    Args:
      x: ``[B, L, E]`` token embeddings.
      positions: int ``[B | 1, L]``, each in ``[0, max_position)``.

    Returns:
      ``[B, L, E]`` in ``x.dtype``.
    """
    return x + self.table(positions).astype(x.dtype)
