"""Sandwich: the parameter-free sinusoid inner product as a per-head bias (``bias`` hook).

Head h of H adds (H / 8h) * sum_{i < d_bar/2} cos((q - k) / base^(2i / d_bar)) to its logits:
the position-position term of a sinusoidal Transformer's logits, compressed per head like
ALiBi. No parameters; one instance serves every layer.

References:
  Chi et al. 2023, "Dissecting Transformer Length Extrapolation via the Lens of Receptive Field
  Analysis", arXiv 2212.10356.
"""

from __future__ import annotations

import dataclasses

import jax

from pejax.encodings import arg_checks
from pejax.encodings.kernel_bias import KernelBias
from pejax.encodings.sandwich import sandwich_bias, sandwich_kernel_bias
from pejax.nn.positional.interface import PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class SandwichConfig(PEConfig):
  """Sandwich settings (the paper's defaults).

  Attributes:
    dim: d_bar, the (even) dimension of the sinusoidal embeddings whose inner product is the
      bias; independent of the model's head dim.
    base: wavelength base of the sinusoids.
  """

  dim: int = 128
  base: float = 10000.0

  def __post_init__(self):
    # Plain-Python checks: building a config must not start the XLA backend (a multi-process
    # run initializes jax.distributed after the config exists).
    arg_checks.check_even("dim", self.dim)
    if arg_checks.check_positive_float("base", self.base) <= 1.0:
      raise ValueError(f"base must be > 1, got {self.base!r}")


@register_pe("sandwich")
class SandwichPE(PositionalEncoding):
  """(H / 8h) * p_q . p_k for head h, p the d_bar-dimensional sinusoidal embedding."""

  config_class = SandwichConfig
  translation_invariant = True

  def bias(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
    """The Sandwich bias of every query-key pair (:func:`pejax.sandwich_bias`)."""
    return sandwich_bias(q_positions, k_positions, num_heads=self.num_heads,
                         dim=self.config.dim, base=self.config.base)

  def kernel_bias(self) -> KernelBias:
    """The same bias as a tile function of positions (:func:`pejax.sandwich_kernel_bias`)."""
    return sandwich_kernel_bias(self.num_heads, dim=self.config.dim, base=self.config.base)
