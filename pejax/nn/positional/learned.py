"""Learned absolute positions added to the token embeddings (``embed`` hook).

The table has ``max_position`` rows. Concrete out-of-range positions raise ``ValueError``; traced
ones (inside ``jit``) produce NaN rows instead of silently clamping; and the decoder raises when
the static sequence length alone exceeds the table.

References:
  Gehring et al. 2017, "Convolutional Sequence to Sequence Learning", arXiv 1705.03122;
  Radford et al. 2019 (GPT-2).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from flax import nnx
import jax

from pejax.encodings import arg_checks
from pejax.encodings.learned_position import LearnedPositionEmbedding
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class LearnedConfig(PEConfig):
  """Learned table size.

  Attributes:
    max_position: rows of the table (largest position + 1); from flat fields, 0 means the
      experiment's training length.
  """

  max_position: int = 2048

  def __post_init__(self):
    arg_checks.check_positive_int("max_position", self.max_position)

  @classmethod
  def from_fields(cls, values: dict[str, Any], *,
                  context: Optional[dict[str, Any]] = None) -> "LearnedConfig":
    """As :meth:`PEConfig.from_fields`; a missing or 0 ``max_position`` is
    ``context["train_len"]`` when the context has one (an experiment's table covers its training
    length).

    Args:
      values: flat fields.
      context: ``train_len`` of the experiment, if known.

    Returns:
      A validated config.
    """
    values = dict(values)
    if not values.get("max_position") and (context or {}).get("train_len"):
      values["max_position"] = int(context["train_len"])
    return super().from_fields(values)


@register_pe("learned")
class LearnedPE(PositionalEncoding):
  """``x + table[positions]`` with a learned ``[max_position, E]`` table."""

  config_class = LearnedConfig
  absolute = True

  def __init__(self, config: LearnedConfig, model: ModelDims, *, rngs: nnx.Rngs):
    super().__init__(config, model, rngs=rngs)
    self.max_length = config.max_position
    self.table = LearnedPositionEmbedding(config.max_position, model.d_model, rngs=rngs)

  def embed(self, x: jax.Array, positions: jax.Array) -> jax.Array:
    """Adds the learned table rows of ``positions`` to the token embeddings.

    Args:
      x: ``[B, L, E]`` token embeddings.
      positions: int ``[B | 1, L]``, each in ``[0, max_position)``.

    Returns:
      ``[B, L, E]`` in ``x.dtype``.
    """
    return x + self.table(positions).astype(x.dtype)
