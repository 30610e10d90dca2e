"""The position-wise MLP of a decoder block: SwiGLU or GELU.

Axes: B batch, L length, E model width, F hidden width.

References:
  Shazeer 2020, "GLU Variants Improve Transformer", arXiv 2002.05202 (SwiGLU).
  Hendrycks & Gimpel 2016, "Gaussian Error Linear Units (GELUs)", arXiv 1606.08415.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flax import nnx
import jax

if TYPE_CHECKING:
  from pejax.nn.decoder_config import DecoderConfig


class Mlp(nnx.Module):
  """``down(silu(gate(x)) * up(x))`` (SwiGLU) or ``down(gelu(up(x)))`` (GELU), no biases."""

  def __init__(self, config: "DecoderConfig", *, rngs: nnx.Rngs):
    width, hidden, dtype = config.d_model, config.mlp_hidden, config.compute_dtype
    self.kind = config.mlp
    self.gate = (nnx.Linear(width, hidden, use_bias=False, dtype=dtype, rngs=rngs)
                 if self.kind == "swiglu" else None)
    self.up = nnx.Linear(width, hidden, use_bias=False, dtype=dtype, rngs=rngs)
    self.down = nnx.Linear(hidden, width, use_bias=False, dtype=dtype, rngs=rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    """Maps ``[B, L, E] -> [B, L, E]``."""
    if self.gate is not None:
      hidden = nnx.silu(self.gate(x)) * self.up(x)
    else:
      hidden = nnx.gelu(self.up(x))
    return self.down(hidden)
