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
    arg_checks.check_positive_int("max_position", config.max_position)

  def embed(self, x: jax.Array, positions: jax.Array) -> jax.Array:
    return x + self.table(positions).astype(x.dtype)
