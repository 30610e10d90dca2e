"""A positional encoding defined outside pejax whose bias a fused kernel computes inside.

The whole PE is this one file: a config, the hooks (``bias`` for the portable schedules,
``kernel_bias`` for kernels that compute the bias tile by tile) and its registration. No pejax
file names it. ``tests/nn/attention/test_user_kernel_bias.py`` checks that the Pallas kernel
(in interpret mode, on CPU) serves it inside a decoder and gives the dense path's numbers.

The bias: ``-slope_h * log(1 + |q - k|)`` with a learned slope per head (a KERPLE-log kernel
with r2 = 1).
"""

from __future__ import annotations

import dataclasses

from flax import nnx
import jax
import jax.numpy as jnp

from pejax.encodings.kernel_bias import KernelBias, TileBias
from pejax.nn.positional.interface import PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class LogDistanceConfig(PEConfig):
  """Attributes: init_slope: slope of head 0 at initialization (head h: ``(1 + h) * init``)."""

  init_slope: float = 0.5

  def __post_init__(self):
    if not self.init_slope > 0:
      raise ValueError(f"init_slope must be > 0, got {self.init_slope!r}")


def log_distance_tile(params, q_pos, k_pos):
  """The bias of one head on one ``[bq, bk]`` tile: ``-params[0] * log1p(|q - k|)``."""
  return -params[0] * jnp.log1p(jnp.abs(q_pos - k_pos))


@register_pe("log_distance_user")
class LogDistancePE(PositionalEncoding):
  """``-slope_h * log(1 + |q - k|)`` with learned per-head slopes."""

  config_class = LogDistanceConfig
  translation_invariant = True

  def __init__(self, config: LogDistanceConfig, model, *, rngs: nnx.Rngs):
    super().__init__(config, model, rngs=rngs)
    heads = jnp.arange(1, self.num_heads + 1, dtype=jnp.float32)
    self.slopes = nnx.Param(config.init_slope * heads)  # [H]

  def bias(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
    """float32 ``[B | 1, H, Lq, Lk]`` from int ``[B | 1, Lq]`` and ``[B | 1, Lk]`` positions."""
    distance = jnp.abs(q_positions.astype(jnp.float32)[:, None, :, None]
                       - k_positions.astype(jnp.float32)[:, None, None, :])
    return -self.slopes[...][None, :, None, None] * jnp.log1p(distance)

  def kernel_bias(self) -> KernelBias:
    """The same bias for a fused kernel: ``[H, 1]`` slopes (learnable) and the tile function."""
    return KernelBias(TileBias(log_distance_tile, num_params=1, learnable=True),
                      self.slopes[...][:, None])
