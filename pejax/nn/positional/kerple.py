"""KERPLE log and power kernels: a learned, per-layer, per-head distance kernel (``bias`` hook).

Registry names: ``kerple_log`` (-r1 log(1 + r2 |q - k|)) and ``kerple_power``
(-r1 |q - k|^r2). Every layer has its own r1, r2 per head, as in the paper's code.

Positivity: the official code clamps r1, r2 to >= 0.01 after each optimizer step (and the power
exponent to <= 2). Here the constraint is a reparameterization inside the module, so any
optimizer keeps it: r = min_value + softplus(raw), and for the power exponent
r2 = min_value + (2 - min_value) sigmoid(raw). The initial values follow the official code:
uniform in (0, r1_init_max) and (0, r2_init_max), raised to at least twice ``min_value``.

References:
  Chi et al. 2022, "KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation",
  arXiv 2205.09921.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from flax import nnx
import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings.kernel_bias import KernelBias
from pejax.encodings.kerple import KERPLE_KINDS, kerple_bias, kerple_kernel_bias
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, register_pe

# Official initialization (gpt-neox ``ParallelKerpleLog`` / ``ParallelKerplePower``): uniform in
# (0, max) per head, by kind.
_INIT_MAX = {"log": (2.0, 1.0), "power": (1.0, 2.0)}
_POWER_MAX = 2.0


@dataclasses.dataclass(frozen=True)
class KerpleConfig(PEConfig):
  """KERPLE kernel and initialization (the official code's defaults).

  Attributes:
    kind: "log" (-r1 log(1 + r2 d)) or "power" (-r1 d^r2, 0 < r2 <= 2).
    r1_init_max: r1 starts uniform in (0, r1_init_max); None: 2 for log, 1 for power.
    r2_init_max: r2 starts uniform in (0, r2_init_max); None: 1 for log, 2 for power.
    min_value: lower bound of r1 and r2 (the official clamp, 0.01).
  """

  kind: str = "log"
  r1_init_max: Optional[float] = None
  r2_init_max: Optional[float] = None
  min_value: float = 0.01

  def __post_init__(self):
    arg_checks.check_choice("kind", self.kind, KERPLE_KINDS)
    arg_checks.check_positive_float("min_value", self.min_value)
    r1_max, r2_max = self.init_maxima()
    for name, value in (("r1_init_max", r1_max), ("r2_init_max", r2_max)):
      arg_checks.check_positive_float(name, value)
      if value <= 2 * self.min_value:
        raise ValueError(f"{name} must exceed 2 * min_value = {2 * self.min_value}, got {value}")
    if self.kind == "power" and (r2_max > _POWER_MAX or self.min_value >= _POWER_MAX / 2):
      raise ValueError(
          f"the power kernel needs r2_init_max <= 2 and min_value < 1, got r2_init_max {r2_max}"
          f" and min_value {self.min_value}")

  def init_maxima(self) -> tuple[float, float]:
    """The upper ends of the uniform initializations of r1 and r2 (the kind's defaults if None).

    Returns:
      ``(r1_init_max, r2_init_max)``.
    """
    r1_default, r2_default = _INIT_MAX[self.kind]
    return (r1_default if self.r1_init_max is None else self.r1_init_max,
            r2_default if self.r2_init_max is None else self.r2_init_max)


@register_pe("kerple_log", defaults=dict(kind="log"))
@register_pe("kerple_power", defaults=dict(kind="power"))
class KerplePE(PositionalEncoding):
  """-r1_h log(1 + r2_h |q - k|) or -r1_h |q - k|^r2_h with learned r1, r2 > 0 per head."""

  config_class = KerpleConfig
  translation_invariant = True
  per_layer = True

  def __init__(self, config: KerpleConfig, model: ModelDims, *, rngs: nnx.Rngs):
    super().__init__(config, model, rngs=rngs)
    num_heads = model.num_heads
    r1_max, r2_max = config.init_maxima()
    floor = 2 * config.min_value
    r1 = jax.random.uniform(rngs.params(), (num_heads,), jnp.float32, 0.0, r1_max)
    r2 = jax.random.uniform(rngs.params(), (num_heads,), jnp.float32, 0.0, r2_max)
    r1 = jnp.maximum(r1, floor)
    r2 = jnp.maximum(r2, floor)
    self.r1_raw = nnx.Param(self._inverse_positive(r1))
    if config.kind == "power":
      r2 = jnp.minimum(r2, _POWER_MAX - config.min_value / 2)
      self.r2_raw = nnx.Param(self._inverse_exponent(r2))
    else:
      self.r2_raw = nnx.Param(self._inverse_positive(r2))

  def _inverse_positive(self, value: jax.Array) -> jax.Array:
    """raw with min_value + softplus(raw) == value (value > min_value)."""
    shifted = value - self.config.min_value
    return shifted + jnp.log(-jnp.expm1(-shifted))  # log(expm1(shifted)), stable.

  def _inverse_exponent(self, value: jax.Array) -> jax.Array:
    """raw with min_value + (2 - min_value) sigmoid(raw) == value (min_value < value < 2)."""
    fraction = (value - self.config.min_value) / (_POWER_MAX - self.config.min_value)
    return jnp.log(fraction) - jnp.log1p(-fraction)

  def kernel_params(self) -> tuple[jax.Array, jax.Array]:
    """The constrained per-head parameters.

    Returns:
      ``(r1, r2)``: float32 ``[H]`` each; r1, r2 > min_value, and r2 < 2 for the power kernel.
    """
    min_value = self.config.min_value
    r1 = min_value + jax.nn.softplus(self.r1_raw[...])
    if self.config.kind == "power":
      r2 = min_value + (_POWER_MAX - min_value) * jax.nn.sigmoid(self.r2_raw[...])
    else:
      r2 = min_value + jax.nn.softplus(self.r2_raw[...])
    return r1, r2

  def bias(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
    """The KERPLE kernel of |q - k| with this layer's parameters."""
    r1, r2 = self.kernel_params()
    return kerple_bias(q_positions, k_positions, r1, r2, kind=self.config.kind)

  def kernel_bias(self) -> KernelBias:
    """The same bias as a tile function of positions (gradients reach the raw r1, r2)."""
    r1, r2 = self.kernel_params()
    return kerple_kernel_bias(r1, r2, kind=self.config.kind)
