"""Shaw et al. (2018) relative position representations, key term (content-aware bias hooks).

Each layer learns a table w^K of 2k + 1 vectors (k = ``max_distance``), shared by the heads as
in the paper's section 3.3 (``per_head_tables=True``: one per head). The logits gain
q_i . w^K_{clip(j - i, k)} / sqrt(D):

* ``features``: per query token, its products with the whole table, ``[B, L, H, 2k + 1]`` (the
  paper's efficient implementation); nothing is computed or cached per key;
* ``content_bias``: gathers those products by clipped relative index, for everything (dense) or
  one tile (blockwise).

The value term (a^V added to the values) is omitted: it would need a hook on the attention's
weighted sum, and in the paper's ablation (table 4) the key term carries most of the gain.

References:
  Shaw, Uszkoreit and Vaswani 2018, "Self-Attention with Relative Position Representations",
  arXiv 1803.02155.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from flax import nnx
import jax

from pejax.encodings import shaw as shaw_lib
from pejax.encodings.shaw import SHAW_MAX_DISTANCE
from pejax.encodings.shaw import shaw_bias_from_scores
from pejax.encodings.shaw import shaw_query_scores
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class ShawConfig(PEConfig):
  """Shaw et al. settings (the paper's experiments).

  Attributes:
    max_distance: clipping distance k; the table has 2k + 1 rows.
    per_head_tables: one table per head instead of one shared by the heads (section 3.3).
  """

  max_distance: int = SHAW_MAX_DISTANCE
  per_head_tables: bool = False

  def __post_init__(self):
    # Plain Python (no XLA backend at config time): the bound shaw_relative_index enforces.
    shaw_lib.check_max_distance(self.max_distance)
    if not isinstance(self.per_head_tables, bool):
      raise ValueError(f"per_head_tables must be a bool, got {self.per_head_tables!r}")


@register_pe("shaw")
class ShawPE(PositionalEncoding):
  """q_i . w^K_{clip(j - i, k)} / sqrt(D) added to the logits, one learned table per layer."""

  config_class = ShawConfig
  translation_invariant = True
  per_layer = True
  content_aware = True

  def __init__(self, config: ShawConfig, model: ModelDims, *, rngs: nnx.Rngs):
    super().__init__(config, model, rngs=rngs)
    rows = 2 * config.max_distance + 1
    shape = ((model.num_heads,) if config.per_head_tables else ()) + (rows, model.head_dim)
    # Glorot-uniform rows (tensor2tensor / PyTorch ports use Xavier for this table).
    self.table = nnx.Param(nnx.initializers.xavier_uniform()(rngs.params(), shape))

  def features(self, x: jax.Array, q: jax.Array, positions: jax.Array, *,
               cache: Optional[tuple[jax.Array, jax.Array]] = None) -> tuple[Any, Any]:
    """Each query's products with the relative key table (no key features).

    Args:
      x: ``[B, L, E]`` the layer's normalized inputs (unused).
      q: ``[B, L, H, D]`` its queries after ``rotate``.
      positions: int ``[B | 1, L]`` (unused: the gather uses the tile's positions).
      cache: unused (nothing per key is cached).

    Returns:
      ``(scores, None)``: float32 ``[B, L, H, 2k + 1]`` query features.
    """
    del x, positions, cache
    return shaw_query_scores(q, self.table[...]), None

  def key_feature_shape(self) -> Optional[tuple[int, ...]]:
    """Nothing is cached per key.

    Returns:
      None.
    """
    return None

  def content_bias(self, q_positions: jax.Array, k_positions: jax.Array, q_features: Any,
                   k_features: Any) -> jax.Array:
    """Gathers the query scores by clipped relative index.

    Args:
      q_positions: int ``[B | 1, lq]``.
      k_positions: int ``[B | 1, lk]``.
      q_features: float32 ``[B, lq, H, 2k + 1]`` scores of these query rows.
      k_features: None.

    Returns:
      float32 ``[B, H, lq, lk]``.
    """
    del k_features
    return shaw_bias_from_scores(q_features, q_positions, k_positions)

