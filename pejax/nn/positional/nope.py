"""NoPE: no positional encoding at all (order comes only from the causal mask).

References:
  Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length Generalization in
  Transformers", arXiv 2305.19466.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flax import nnx

from pejax.nn.positional.interface import PositionalEncoding

if TYPE_CHECKING:
  from pejax.nn.decoder_config import DecoderConfig


class NoPE(PositionalEncoding):
  """Implements no hook: the decoder adds nothing, rotates nothing, biases nothing."""

  def __init__(self, config: "DecoderConfig", *, rngs: nnx.Rngs):
    del config, rngs
