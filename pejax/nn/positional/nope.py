"""NoPE: no positional encoding at all (order comes only from the causal mask).

References:
  Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length Generalization in
  Transformers", arXiv 2305.19466.
"""

from __future__ import annotations

import dataclasses

from pejax.nn.positional.interface import PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class NoPEConfig(PEConfig):
  """NoPE has no hyper-parameters."""


@register_pe("none")
class NoPE(PositionalEncoding):
  """Implements no hook: the decoder adds nothing, rotates nothing, biases nothing."""

  config_class = NoPEConfig
  translation_invariant = True
