"""FIRE: an MLP of the log-normalized distance, learned per layer (``bias`` hook).

bias[h, i, j] = f_theta(psi(|i - j|) / psi(max(L, i)))_h, psi(x) = log(c x + 1), with per layer
a 1 -> ``mlp_width`` -> H ReLU MLP f_theta, a log-transform scale c and a threshold L, all
learned. As in the paper's code, L is learned as a multiplier of its initial value
(L = |multiplier * init_threshold|) and c enters through |c| (psi(|c x|) in the code).

The bias is not translation invariant: for a query beyond the threshold (i > L) it depends on i
through the normalizer psi(i). Below the threshold it is.

The MLP's layers start as PyTorch ``nn.Linear`` does in the paper's code (weights and biases
uniform in +-1/sqrt(fan_in)): a zero first-layer bias would make f_theta linear in its input at
initialization.

References:
  Li et al. 2024, "Functional Interpolation for Relative Positions Improves Long Context
  Transformers", arXiv 2310.04418.
"""

from __future__ import annotations

import dataclasses
import math

from flax import nnx
import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings.fire import FIRE_EPS
from pejax.encodings.fire import FIRE_INIT_C
from pejax.encodings.fire import FIRE_INIT_THRESHOLD
from pejax.encodings.fire import FIRE_MLP_WIDTH
from pejax.encodings.fire import fire_kernel_bias
from pejax.encodings.fire import fire_normalized_distance
from pejax.encodings.kernel_bias import KernelBias
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class FireConfig(PEConfig):
  """FIRE hyper-parameters (the paper's code defaults).

  Attributes:
    mlp_width: hidden units of the 1 -> width -> H ReLU MLP.
    init_c: initial log-transform scale c.
    init_threshold: initial threshold L of the normalizer psi(max(L, i)).
    learn_threshold: learn L (as a multiplier of init_threshold); False keeps it fixed.
    eps: constant added to the normalizer.
  """

  mlp_width: int = FIRE_MLP_WIDTH
  init_c: float = FIRE_INIT_C
  init_threshold: float = FIRE_INIT_THRESHOLD
  learn_threshold: bool = True
  eps: float = FIRE_EPS

  def __post_init__(self):
    arg_checks.check_positive_int("mlp_width", self.mlp_width)
    arg_checks.check_positive_float("init_c", self.init_c)
    arg_checks.check_positive_float("init_threshold", self.init_threshold)
    if not isinstance(self.learn_threshold, bool):
      raise ValueError(f"learn_threshold must be a bool, got {self.learn_threshold!r}")
    if isinstance(self.eps, bool) or not math.isfinite(self.eps) or self.eps < 0:
      raise ValueError(f"eps must be a non-negative finite number, got {self.eps!r}")


def _torch_linear(fan_in: int, fan_out: int, key: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``[fan_in, fan_out]`` kernel and ``[fan_out]`` bias, uniform in +-1/sqrt(fan_in)."""
  bound = 1.0 / math.sqrt(fan_in)
  kernel_key, bias_key = jax.random.split(key)
  kernel = jax.random.uniform(kernel_key, (fan_in, fan_out), jnp.float32, -bound, bound)
  bias = jax.random.uniform(bias_key, (fan_out,), jnp.float32, -bound, bound)
  return kernel, bias


@register_pe("fire")
class FirePE(PositionalEncoding):
  """A learned MLP of psi(|i - j|) / psi(max(L, i)), one per layer."""

  config_class = FireConfig
  per_layer = True

  def __init__(self, config: FireConfig, model: ModelDims, *, rngs: nnx.Rngs):
    super().__init__(config, model, rngs=rngs)
    kernel_1, bias_1 = _torch_linear(1, config.mlp_width, rngs.params())
    kernel_2, bias_2 = _torch_linear(config.mlp_width, model.num_heads, rngs.params())
    self.kernel_1, self.bias_1 = nnx.Param(kernel_1[0]), nnx.Param(bias_1)  # [W], [W]
    self.kernel_2, self.bias_2 = nnx.Param(kernel_2), nnx.Param(bias_2)  # [W, H], [H]
    self.c = nnx.Param(jnp.float32(config.init_c))
    multiplier = jnp.float32(1.0)
    self.threshold_multiplier = (nnx.Param(multiplier) if config.learn_threshold
                                 else nnx.Variable(multiplier))

  def threshold(self) -> jax.Array:
    """The current threshold L = |multiplier * init_threshold|.

    Returns:
      float32 scalar.
    """
    return jnp.abs(self.threshold_multiplier[...] * self.config.init_threshold)

  def mlp(self, distance: jax.Array) -> jax.Array:
    """f_theta applied to every normalized distance.

    Args:
      distance: float32 ``[..., Lq, Lk]`` normalized distances.

    Returns:
      float32 ``[..., Lq, Lk, H]``.
    """
    lead = (1,) * distance.ndim  # Explicit ranks (callers may forbid rank promotion).
    hidden = jax.nn.relu(distance[..., None] * self.kernel_1[...].reshape(lead + (-1,))
                         + self.bias_1[...].reshape(lead + (-1,)))
    out = jnp.einsum("...w,wh->...h", hidden, self.kernel_2[...],
                     precision=jax.lax.Precision.HIGHEST)
    return out + self.bias_2[...].reshape(lead + (-1,))

  def bias(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
    """FIRE's bias with this layer's MLP, c and threshold."""
    distance = fire_normalized_distance(
        q_positions, k_positions, c=jnp.abs(self.c[...]), threshold=self.threshold(),
        eps=self.config.eps)  # [B | 1, Lq, Lk]
    return jnp.moveaxis(self.mlp(distance), -1, -3)

  def kernel_bias(self) -> KernelBias:
    """The same bias as a tile function of positions (an unrolled MLP; gradients reach every
    parameter)."""
    return fire_kernel_bias(self.kernel_1[...], self.bias_1[...], self.kernel_2[...],
                            self.bias_2[...], jnp.abs(self.c[...]), self.threshold(),
                            eps=self.config.eps)
