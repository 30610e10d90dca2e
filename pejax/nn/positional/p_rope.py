"""p-RoPE: RoPE keeping only the highest fraction p of its frequencies (``rotate`` hook).

The channel pairs of the lowest ``1 - p`` frequencies are rotated by zero (a position-free
sub-space in every head), unlike partial rotary, which rotates fewer channels at re-spread
frequencies (see :mod:`pejax.encodings.p_rope`).

References:
  Barbero et al. 2024, "Round and Round We Go! What makes Rotary Positional Encodings useful?",
  arXiv 2410.06205.
"""

from __future__ import annotations

import dataclasses

import jax

from pejax.encodings import arg_checks
from pejax.encodings.p_rope import DEFAULT_P, p_rope_inv_freq, p_rope_num_kept
from pejax.encodings.rope import LAYOUTS, RopeConfig, apply_rope
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class PRopeConfig(PEConfig):
  """p-RoPE hyper-parameters.

  Attributes:
    p: fraction of the highest frequencies kept, in ``[0, 1]`` (1 is RoPE, 0 is NoPE); 0.25 is
      one of the two fractions the paper reports (with 0.75) and Gemma 4's global-layer value.
    base: RoPE base theta (10000).
    layout: ``"half"`` (GPT-NeoX / HF) or ``"interleaved"`` (GPT-J / Meta Llama).
  """

  p: float = DEFAULT_P
  base: float = 10000.0
  layout: str = "half"

  def __post_init__(self):
    p_rope_num_kept(1, p=self.p)  # Names p.
    arg_checks.check_base("base", self.base)
    arg_checks.check_choice("layout", self.layout, LAYOUTS)

  def check_model(self, model: ModelDims) -> None:
    """Raises ``ValueError`` unless the head dim is even.

    Args:
      model: the decoder config (``head_dim``).
    """
    RopeConfig(model.head_dim, base=self.base, layout=self.layout)


@register_pe("p_rope")
class PRopePE(PositionalEncoding):
  """Rotates the ``floor(p * D / 2)`` fastest channel pairs by RoPE; the others stay put."""

  config_class = PRopeConfig
  translation_invariant = True

  def rotate(self, q: jax.Array, k: jax.Array, q_positions: jax.Array,
             k_positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Rotates queries and keys with p-RoPE's truncated frequencies.

    Shapes as in :meth:`PositionalEncoding.rotate`.
    """
    inv_freq = p_rope_inv_freq(self.head_dim, p=self.config.p, base=self.config.base)
    layout = self.config.layout
    return (apply_rope(q, q_positions, inv_freq, layout=layout),
            apply_rope(k, k_positions, inv_freq, layout=layout))
