"""Learned absolute position embedding (GPT-2 / BERT style), as a Flax NNX module.

Axes: N table size (number of positions), F features, L length; `...` any leading batch dims.

A `[N, F]` table of parameters; position p reads row p, and the result is added to the token
embeddings. It cannot represent positions >= N at all, which is why extrapolation studies pair it
with a clear bounds policy:

* concrete (not traced) positions outside `[0, N)` raise `ValueError` naming `positions`, the
  offending value and the table size;
* traced positions (under `jit`, `nnx.jit`, `scan`, ...) cannot be inspected, so the gather uses
  fill mode: an out-of-range position, negative ones included, yields a row of NaN that poisons
  the output and the loss, instead of JAX's default silent clamp to the last row.

References:
  Radford et al., "Language Models are Unsupervised Multitask Learners" (GPT-2), 2019.
  Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers for Language
  Understanding", NAACL 2019, arXiv:1810.04805.
"""

from __future__ import annotations

from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks


class LearnedPositionEmbedding(nnx.Module):
  """A learned `[num_positions, features]` absolute position table.

  Example::

    pe = LearnedPositionEmbedding(1024, 64, rngs=nnx.Rngs(0))
    x = token_embed(tokens) + pe(positions)        # positions [B, L] int32

  Attributes:
    table: `nnx.Param` `[N, F]` of `param_dtype`, initialized from N(0, 0.02^2).
  """

  def __init__(
      self,
      num_positions: int,
      features: int,
      *,
      rngs: nnx.Rngs,
      dtype: Any = jnp.float32,
      param_dtype: Any = jnp.float32,
  ):
    """Builds the table.

    Args:
      num_positions: Table size N >= 1; valid positions are 0 .. N - 1.
      features: Embedding width F >= 1.
      rngs: Provides the `params` stream for the initializer.
      dtype: Dtype of the returned embeddings.
      param_dtype: Dtype of the stored table (must be floating, NaN marks bad positions).

    Raises:
      ValueError: if `num_positions` or `features` is not a positive integer, or `param_dtype`
        is not a floating dtype.
    """
    self.num_positions = arg_checks.check_positive_int("num_positions", num_positions)
    self.features = arg_checks.check_positive_int("features", features)
    if not jnp.issubdtype(param_dtype, jnp.floating):
      raise ValueError(f"param_dtype must be a floating dtype, got {param_dtype!r}")
    self.dtype = dtype
    init = nnx.initializers.normal(stddev=0.02)
    self.table = nnx.Param(
        init(rngs.params(), (self.num_positions, self.features), param_dtype))

  def __call__(self, positions: Any) -> jnp.ndarray:
    """Looks up the embeddings of `positions`.

    Args:
      positions: `[..., L]` integer positions in `[0, N)`.

    Returns:
      `[..., L, F]` of `dtype`; rows of NaN where a traced position is out of range.

    Raises:
      ValueError: if `positions` is not an integer array, or is concrete and has a value outside
        `[0, N)`.
    """
    positions = arg_checks.check_integer_array("positions", positions)
    if not isinstance(positions, jax.core.Tracer) and positions.size:
      host = np.asarray(positions)
      low, high = int(host.min()), int(host.max())
      if low < 0 or high >= self.num_positions:
        bad = low if low < 0 else high
        raise ValueError(
            f"positions must lie in [0, {self.num_positions}) for a table of"
            f" num_positions={self.num_positions}, got {bad}")
    if positions.dtype.itemsize < 4:  # room for the out-of-range index N below
      positions = positions.astype(jnp.int32)
    # jnp.take wraps negative indices even in fill mode: send them past the end first.
    index = jnp.where(positions < 0, self.num_positions, positions)
    rows = jnp.take(self.table[...], index, axis=0, mode="fill", fill_value=jnp.nan)
    return rows.astype(self.dtype)
