"""Stick-breaking attention: weights by breaking a stick from the query backwards (no PE).

Each key j takes ``sigmoid(q_i . k_j / sqrt(D))`` of what the keys between it and the query left;
the weights of a row sum to at most 1 and the rest goes to the query's own value
(:func:`pejax.encodings.stick_breaking.stick_breaking_attention`). The order of the keys is the
only position signal, so the PE has no parameters and no other hook: it owns its layer's
attention (``attend``), a full sequence dense or blockwise (O(L) memory), every other call (KV
cache, sliding window, chunked attention) densely with the call's mask. A global shift of
positions changes nothing.

Defaults follow the reference implementation's own tests (``attend_current=False``, remainder on
the query's value).

References:
  Tan, Shen, Yang, Courville and Panda 2024, "Scaling Stick-Breaking Attention: An Efficient
  Implementation and In-depth Study", arXiv 2410.17980; shawntan/stickbreaking-attention.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax

from pejax.encodings import arg_checks
from pejax.encodings.stick_breaking import REMAINDERS, stick_breaking_attention
from pejax.nn.positional.interface import PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class StickBreakingConfig(PEConfig):
  """Stick-breaking attention settings.

  Attributes:
    attend_current: whether a query's own key takes part (first in its product).
    remainder: where ``1 - sum_j A_ij`` goes: ``"value"`` (the query's own value, as the
      reference) or ``"none"`` (dropped).
  """

  attend_current: bool = False
  remainder: str = "value"

  def __post_init__(self):
    if not isinstance(self.attend_current, bool):
      raise ValueError(f"attend_current must be a bool, got {self.attend_current!r}")
    arg_checks.check_choice("remainder", self.remainder, REMAINDERS)


@register_pe("stick_breaking")
class StickBreakingPE(PositionalEncoding):
  """Stick-breaking weights over the keys, nearest first, instead of a softmax."""

  config_class = StickBreakingConfig
  translation_invariant = True
  content_aware = True
  causal_only = True

  def attend(self, q: jax.Array, k: jax.Array, v: jax.Array, *, q_features: Any,
             k_features: Any, mask: Optional[jax.Array], q_slots: Optional[jax.Array],
             segment_ids: Optional[jax.Array], implementation: str,
             block_size: int) -> jax.Array:
    """Stick-breaking attention (shapes and calls as in :meth:`PositionalEncoding.attend`).

    A full sequence: blockwise in blocks of ``block_size`` for ``"blockwise"``, else dense;
    otherwise densely with ``mask`` for queries at ``q_slots``.
    """
    del q_features, k_features
    options = dict(attend_current=self.config.attend_current, remainder=self.config.remainder)
    if mask is None:
      return stick_breaking_attention(
          q, k, v, segment_ids=segment_ids,
          block_size=block_size if implementation == "blockwise" else None, **options)
    return stick_breaking_attention(q, k, v, mask=mask, q_slots=q_slots, **options)
