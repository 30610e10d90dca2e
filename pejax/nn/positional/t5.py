"""T5 relative position bias: a learned scalar per (bucket of k - q, head) (``bias`` hook).

One :class:`~pejax.encodings.t5_bias.T5RelativeBias` table per decoder, shared by all layers (as
in T5): the decoder evaluates the bias once per forward pass for dense attention and once per
tile for blockwise attention.

References:
  Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
  Transformer", arXiv 1910.10683.
"""

from __future__ import annotations

import dataclasses

from flax import nnx
import jax

from pejax.encodings.t5_bias import T5RelativeBias
from pejax.encodings.kernel_bias import KernelBias
from pejax.encodings.t5_buckets import check_bucket_settings, t5_kernel_bias
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class T5Config(PEConfig):
  """T5 bucket settings (T5's defaults).

  Attributes:
    num_buckets: relative-position buckets.
    max_distance: distance from which the last bucket is used.
    bidirectional: buckets for keys after the query too (encoder style).
  """

  num_buckets: int = 32
  max_distance: int = 128
  bidirectional: bool = False

  def __post_init__(self):
    # Plain Python: building a config must not start the XLA backend (jax.distributed comes
    # after the config in a multi-process run).
    check_bucket_settings(num_buckets=self.num_buckets, max_distance=self.max_distance,
                          bidirectional=self.bidirectional)


@register_pe("t5")
class T5BiasPE(PositionalEncoding):
  """Bucketed relative-position bias with one learned ``[num_buckets, H]`` table."""

  config_class = T5Config
  translation_invariant = True

  def __init__(self, config: T5Config, model: ModelDims, *, rngs: nnx.Rngs):
    super().__init__(config, model, rngs=rngs)
    self.relative_bias = T5RelativeBias(
        model.num_heads, num_buckets=config.num_buckets, max_distance=config.max_distance,
        bidirectional=config.bidirectional, rngs=rngs)

  def bias(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
    """The learned bias of the bucket of ``k - q``, per head.

    Args:
      q_positions: int ``[B | 1, Lq]``.
      k_positions: int ``[B | 1, Lk]``.

    Returns:
      float32 ``[B | 1, H, Lq, Lk]``, from the ``[num_buckets, H]`` table.
    """
    return self.relative_bias(q_positions, k_positions)

  def kernel_bias(self) -> KernelBias:
    """The same bias as a tile function of positions (gradients reach the bucket table).

    Returns:
      :func:`pejax.t5_kernel_bias` of the current ``[num_buckets, H]`` table.
    """
    rel = self.relative_bias
    return t5_kernel_bias(rel.table[...], num_buckets=rel.num_buckets,
                          max_distance=rel.max_distance, bidirectional=rel.bidirectional)
