"""T5 relative position bias: a learned scalar per (bucket of k - q, head) (``bias`` hook).

One :class:`~pejax.encodings.t5_bias.T5RelativeBias` table per decoder, shared by all layers (as
in T5): the decoder evaluates the bias once per forward pass for dense attention and once per
tile for blockwise attention.

References:
  Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
  Transformer", arXiv 1910.10683.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flax import nnx
import jax
import numpy as np

from pejax.encodings.t5_bias import T5RelativeBias
from pejax.encodings.t5_buckets import t5_relative_position_bucket
from pejax.nn.positional.interface import PositionalEncoding

if TYPE_CHECKING:
  from pejax.nn.decoder_config import DecoderConfig


class T5BiasPE(PositionalEncoding):
  """Bucketed relative-position bias with one learned ``[num_buckets, H]`` table."""

  def __init__(self, config: "DecoderConfig", *, rngs: nnx.Rngs):
    self.relative_bias = T5RelativeBias(
        config.num_heads, num_buckets=config.t5_num_buckets,
        max_distance=config.t5_max_distance, bidirectional=config.t5_bidirectional, rngs=rngs)

  @classmethod
  def check_config(cls, config: "DecoderConfig") -> None:
    """Raises ``ValueError`` if ``t5_num_buckets`` / ``t5_max_distance`` are invalid.

    Args:
      config: the decoder config (``t5_num_buckets``, ``t5_max_distance``,
        ``t5_bidirectional``).
    """
    try:
      t5_relative_position_bucket(
          np.zeros((), np.int32), bidirectional=config.t5_bidirectional,
          num_buckets=config.t5_num_buckets, max_distance=config.t5_max_distance)
    except ValueError as e:  # Name the config fields rather than the function's arguments.
      raise ValueError(f"invalid t5_num_buckets / t5_max_distance: {e}") from None

  def bias(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
    """The learned bias of the bucket of ``k - q``, per head.

    Args:
      q_positions: int ``[B | 1, Lq]``.
      k_positions: int ``[B | 1, Lk]``.

    Returns:
      float32 ``[B | 1, H, Lq, Lk]``.
    """
    return self.relative_bias(q_positions, k_positions)
