"""The position-wise MLP of a decoder block: SwiGLU, GELU or GeGLU.

Axes: B batch, L length, E model width, F hidden width.

References:
  Shazeer 2020, "GLU Variants Improve Transformer", arXiv 2002.05202 (SwiGLU).
  Hendrycks & Gimpel 2016, "Gaussian Error Linear Units (GELUs)", arXiv 1606.08415.
  Gemma Team 2024, arXiv 2403.08295 (GeGLU with the tanh-approximated GELU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flax import nnx
import jax

from pejax.nn.swiglu import swiglu
from pejax.nn.token_linear import TokenLinear
from pejax.parallel import logical_axes as axes

if TYPE_CHECKING:
  from pejax.nn.decoder_config import DecoderConfig


class Mlp(nnx.Module):
  """``down(silu(gate(x)) * up(x))`` (SwiGLU), ``down(gelu(up(x)))`` (GELU) or
  ``down(gelu(gate(x)) * up(x))`` (GeGLU), no biases; GELU is the tanh approximation
  (PyTorch's ``gelu(approximate="tanh")``, HF ``gelu_pytorch_tanh``).

  Sharding: ``gate`` / ``up`` kernels ``[E, F]`` are ``("embed", "mlp")``, ``down`` ``[F, E]`` is
  ``("mlp", "embed")`` (column then row parallel over the ``model`` mesh axis).
  """

  def __init__(self, config: "DecoderConfig", *, rngs: nnx.Rngs):
    width, hidden, dtype = config.d_model, config.mlp_hidden, config.compute_dtype
    self.kind = config.mlp

    def linear(features_in: int, features_out: int, names: tuple[str, str]) -> TokenLinear:
      return TokenLinear(
          features_in, features_out, use_bias=False, dtype=dtype,
          kernel_init=axes.partitioned(nnx.nn.linear.default_kernel_init, names), rngs=rngs)

    gated = self.kind in ("swiglu", "geglu")
    self.gate = linear(width, hidden, (axes.EMBED, axes.MLP)) if gated else None
    self.up = linear(width, hidden, (axes.EMBED, axes.MLP))
    self.down = linear(hidden, width, (axes.MLP, axes.EMBED))

  def __call__(self, x: jax.Array) -> jax.Array:
    """Maps ``[B, L, E] -> [B, L, E]``.

    Args:
      x: ``[B, L, E]`` normalized inputs (any leading axes work: ``[..., E]``).

    Returns:
      ``[B, L, E]`` in the compute dtype.
    """
    if self.kind == "swiglu":
      hidden = swiglu(self.gate(x), self.up(x))
    elif self.kind == "geglu":
      hidden = nnx.gelu(self.gate(x), approximate=True) * self.up(x)
    else:
      hidden = nnx.gelu(self.up(x))
    return self.down(hidden)
