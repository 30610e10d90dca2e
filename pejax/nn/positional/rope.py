"""Rotary position embedding of queries and keys (``rotate`` hook), any scaling and layout.

Length-dependent scalings (dynamic NTK, LongRoPE) take their current length as
``max(q_positions, k_positions) + 1`` over the whole call (Hugging Face: ``max(position_ids) +
1`` over the batch). A full forward pass thus uses the length of the whole sequence for every
token; a KV cache that keeps keys *before* rotation re-rotates them with the frequencies of the
current length at each step and reproduces the full pass exactly (see :mod:`pejax.nn.kv_cache`).

References:
  Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding",
  arXiv 2104.09864.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flax import nnx
import jax
import jax.numpy as jnp

from pejax.encodings import rope_scaling
from pejax.encodings.rope import RopeConfig, apply_rope, rope_inv_freq
from pejax.nn.positional.interface import PositionalEncoding

if TYPE_CHECKING:
  from pejax.nn.decoder_config import DecoderConfig

LENGTH_DEPENDENT_SCALINGS = (rope_scaling.DynamicNTKScaling, rope_scaling.LongRoPEScaling)


def rope_config_of(config: "DecoderConfig") -> RopeConfig:
  """The :class:`RopeConfig` of a decoder config; ``rotary_dim = int(head_dim * rope_fraction)``."""
  return RopeConfig.from_partial_rotary_factor(
      config.head_dim, config.rope_fraction, base=config.rope_base, scaling=config.rope_scaling,
      layout=config.rope_layout)


class RotaryPE(PositionalEncoding):
  """Rotates the first ``rotary_dim`` channels of every query and key head by its position."""

  def __init__(self, config: "DecoderConfig", *, rngs: nnx.Rngs):
    del rngs
    self.rope = rope_config_of(config)

  @classmethod
  def check_config(cls, config: "DecoderConfig") -> None:
    """Raises ``ValueError`` if the RoPE fields of ``config`` give no valid :class:`RopeConfig`.

    Args:
      config: the decoder config (``head_dim``, ``rope_fraction``, ``rope_base``,
        ``rope_scaling``, ``rope_layout``).
    """
    rope_config_of(config)

  def rotate(self, q: jax.Array, k: jax.Array, q_positions: jax.Array,
             k_positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Rotates the first ``rotary_dim`` channels of queries and keys by their positions.

    Length-dependent scalings use ``max(q_positions, k_positions) + 1`` as the current length.

    Args:
      q: ``[B, Lq, H, D]`` queries.
      k: ``[B, Lk, K, D]`` keys.
      q_positions: int ``[B | 1, Lq]``.
      k_positions: int ``[B | 1, Lk]``.

    Returns:
      ``(q, k)`` rotated (and scaled by the scaling's attention factor), with unchanged shapes
      and dtypes.
    """
    seq_len = None
    if isinstance(self.rope.scaling, LENGTH_DEPENDENT_SCALINGS):
      seq_len = jnp.maximum(jnp.max(q_positions), jnp.max(k_positions)) + 1
    inv_freq, attention_factor = rope_inv_freq(self.rope, seq_len=seq_len)
    layout = self.rope.layout
    q = apply_rope(q, q_positions, inv_freq, layout=layout, attention_factor=attention_factor)
    k = apply_rope(k, k_positions, inv_freq, layout=layout, attention_factor=attention_factor)
    return q, k
