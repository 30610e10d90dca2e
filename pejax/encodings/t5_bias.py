"""T5 relative position bias (Raffel et al., 2020), as a Flax NNX module.

Axes: H heads, Lq query length, Lk key length, NB number of buckets; `...` any leading batch dims.

Each head learns one scalar per relative-position bucket; the bias for query position q and key
position k is `table[bucket(k - q), h]`, added to the attention logits of head h. Buckets come from
`t5_relative_position_bucket` (identical to Hugging Face T5). They saturate by design: every
distance >= `max_distance` shares the last bucket of its direction, so no position is ever out of
range (and, with `bidirectional=False`, every key after the query shares bucket 0).

Intended use, as in T5: one module per model, whose bias is computed once per forward pass and
shared by all layers; recomputing it in every layer was measured at +45% layer time. Because it
is a function of positions (an integer subtraction, the bucket arithmetic and a `[NB, H]` table
gather), it is also cheap to evaluate per `[Lq, Lk]` tile inside blockwise attention, which never
materializes the full `[H, N, N]` bias.

References:
  Raffel et al., "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
  Transformer", JMLR 2020, arXiv:1910.10683, section 2.1.
"""

from __future__ import annotations

from typing import Any

from flax import nnx
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks
from pejax.encodings.t5_buckets import t5_relative_position_bucket


class T5RelativeBias(nnx.Module):
  """Learned per-head bias of bucketed relative positions `k - q`.

  Example::

    rel_bias = T5RelativeBias(num_heads, rngs=nnx.Rngs(0))
    bias = rel_bias(positions, positions)        # [B, H, L, L], once per forward pass
    # ... every layer: logits = q @ k^T / sqrt(D) + bias (plus the causal mask)

  Attributes:
    table: `nnx.Param` `[NB, H]` float32, initialized from N(0, 0.02^2).
  """

  def __init__(
      self,
      num_heads: int,
      *,
      num_buckets: int = 32,
      max_distance: int = 128,
      bidirectional: bool = False,
      rngs: nnx.Rngs,
      dtype: Any = jnp.float32,
  ):
    """Builds the bucket table.

    Args:
      num_heads: Number of heads H >= 1.
      num_buckets: Number of buckets NB (>= 2; even and >= 4 if bidirectional).
      max_distance: Distance from which the last bucket is used (> number of exact buckets).
      bidirectional: False (decoder, default): keys after the query share bucket 0. True
        (encoder): separate buckets for keys after the query.
      rngs: Provides the `params` stream for the initializer.
      dtype: Dtype of the returned bias.

    Raises:
      ValueError: if a hyper-parameter is invalid (checked as `t5_relative_position_bucket`
        does).
    """
    self.num_heads = arg_checks.check_positive_int("num_heads", num_heads)
    self.num_buckets = num_buckets
    self.max_distance = max_distance
    self.bidirectional = bool(bidirectional)
    self.dtype = dtype
    # Validate the bucket hyper-parameters now rather than at the first call.
    t5_relative_position_bucket(
        np.zeros((), np.int32), bidirectional=self.bidirectional, num_buckets=num_buckets,
        max_distance=max_distance)
    init = nnx.initializers.normal(stddev=0.02)
    self.table = nnx.Param(init(rngs.params(), (num_buckets, self.num_heads), jnp.float32))

  def __call__(self, q_positions: Any, k_positions: Any) -> jnp.ndarray:
    """Bias for every (query, key) pair.

    Args:
      q_positions: `[..., Lq]` integer query positions.
      k_positions: `[..., Lk]` integer key positions; leading dims must broadcast with
        `q_positions`'.

    Returns:
      `[..., H, Lq, Lk]` of `dtype`.

    Raises:
      ValueError: if positions are not integer arrays of rank >= 1 or their leading dims do not
        broadcast.
    """
    q_positions, k_positions, batch_shape = arg_checks.check_query_key_positions(
        q_positions, k_positions)
    # int32 (signed) so that unsigned positions do not wrap around in k - q.
    q_positions = jnp.broadcast_to(q_positions.astype(jnp.int32),
                                   batch_shape + q_positions.shape[-1:])
    k_positions = jnp.broadcast_to(k_positions.astype(jnp.int32),
                                   batch_shape + k_positions.shape[-1:])
    k, q = k_positions[..., None, :], q_positions[..., :, None]
    relative_position = k - q  # [..., Lq, Lk]
    # |k - q| >= 2**31 wraps in int32 (a finite wrong bucket): saturate it instead; every
    # distance past max_distance falls in the last bucket anyway.
    wrapped = ((k ^ q) & (k ^ relative_position)) < 0
    relative_position = jnp.where(
        wrapped, jnp.where(k > q, jnp.iinfo(jnp.int32).max, jnp.iinfo(jnp.int32).min),
        relative_position)
    buckets = t5_relative_position_bucket(
        relative_position, bidirectional=self.bidirectional, num_buckets=self.num_buckets,
        max_distance=self.max_distance)
    # Buckets lie in [0, NB) by construction, so this gather cannot clamp.
    values = jnp.take(self.table[...], buckets, axis=0)  # [..., Lq, Lk, H]
    return jnp.moveaxis(values, -1, -3).astype(self.dtype)
