"""ALiBi: a per-head linear penalty on query-key distance (``bias`` hook).

References:
  Press et al. 2022, "Train Short, Test Long: Attention with Linear Biases Enables Input Length
  Extrapolation", arXiv 2108.12409.
"""

from __future__ import annotations

import dataclasses

import jax

from pejax.encodings.alibi import alibi_bias, alibi_kernel_bias, alibi_slopes
from pejax.encodings.kernel_bias import KernelBias
from pejax.nn.positional.interface import PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class AlibiConfig(PEConfig):
  """ALiBi has no hyper-parameters: the slopes are the geometric sequence of Press et al."""


@register_pe("alibi")
class AlibiPE(PositionalEncoding):
  """``-slope_h * (q - k)`` on the logits of head h (slopes of Press et al.)."""

  config_class = AlibiConfig
  translation_invariant = True

  def bias(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
    """Causal ``-slope_h * (q - k)`` (future keys are left to the causal mask).

    Args:
      q_positions: int ``[B | 1, Lq]``.
      k_positions: int ``[B | 1, Lk]``.

    Returns:
      float32 ``[B | 1, H, Lq, Lk]``.
    """
    return alibi_bias(q_positions, k_positions, alibi_slopes(self.num_heads), causal=True)

  def kernel_bias(self) -> KernelBias:
    """The same bias as a tile function of positions.

    Returns:
      :func:`pejax.alibi_kernel_bias` of the heads: ``[H, 1]`` slopes.
    """
    return alibi_kernel_bias(self.num_heads, causal=True)
