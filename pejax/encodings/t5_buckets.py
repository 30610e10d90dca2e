"""T5 relative-position buckets (Raffel et al., 2020).

T5 maps the signed distance `relative_position = key - query` to one of `num_buckets` buckets:
exact buckets for small distances, logarithmically wider buckets up to `max_distance`, and one
saturating bucket beyond it (per direction). A learned `[num_buckets, H]` table then gives each
head a scalar bias per bucket (see `pejax.encodings.t5_bias.T5RelativeBias`).

This is Hugging Face `T5Attention._relative_position_bucket` (itself Mesh TensorFlow's), with the
same float32 operation order, so bucket ids match it exactly.

References:
  Raffel et al., "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
  Transformer", JMLR 2020, arXiv:1910.10683, section 2.1.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings.kernel_bias import KernelBias, TileBias


def t5_relative_position_bucket(
    relative_position: Any,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> jnp.ndarray:
  """Buckets of the signed distances `key - query`, identical to HF T5.

  With `bidirectional=True` (encoder) half of the buckets are for keys after the query
  (`relative_position > 0`, ids offset by `num_buckets // 2`) and half for keys at or before it.
  With `bidirectional=False` (decoder) only keys at or before the query are distinguished: every
  future key (`relative_position > 0`) falls in bucket 0, the same as the query itself, and is
  expected to be masked by causal attention.

  Within one direction of n buckets (n = `num_buckets`, halved if bidirectional) and distance
  d = |relative_position|: buckets 0 .. n/2 - 1 are exact (d < n/2); larger d gets
  `n/2 + int(log(d / (n/2)) / log(max_distance / (n/2)) * (n - n/2))`, clipped to n - 1, so all
  distances >= `max_distance` share the last bucket (saturation is by design: no input is
  out of range).

  Args:
    relative_position: Integer array `[...]` of any shape (e.g. `[Lq, Lk]`),
      `key_position - query_position`.
    bidirectional: Whether keys after the query get their own buckets.
    num_buckets: Total number of buckets; >= 2, and even and >= 4 if bidirectional.
    max_distance: Distance from which the last bucket is used; must exceed the number of exact
      buckets.

  Returns:
    int32 bucket ids in `[0, num_buckets)`, same shape `[...]` as `relative_position`.

  Raises:
    ValueError: if `relative_position` is not an integer array or a hyper-parameter is invalid.
  """
  relative_position = arg_checks.check_integer_array("relative_position", relative_position)
  num_buckets, max_distance = check_bucket_settings(
      num_buckets=num_buckets, max_distance=max_distance, bidirectional=bidirectional)
  per_direction = num_buckets // 2 if bidirectional else num_buckets
  return _bucket(relative_position, bool(bidirectional), per_direction, max_distance)


def check_bucket_settings(*, num_buckets: int, max_distance: int,
                          bidirectional: bool) -> tuple[int, int]:
  """Validates T5 bucket hyper-parameters in plain Python (no array, no XLA backend).

  Args:
    num_buckets: buckets (>= 2; even and >= 4 when bidirectional).
    max_distance: distance of the last bucket, > the number of exact buckets.
    bidirectional: whether keys after the query get their own buckets.

  Returns:
    ``(num_buckets, max_distance)`` as ints.

  Raises:
    ValueError: naming the invalid argument and value.
  """
  num_buckets = arg_checks.check_positive_int("num_buckets", num_buckets)
  max_distance = arg_checks.check_positive_int("max_distance", max_distance)
  if bidirectional:
    if num_buckets < 4 or num_buckets % 2:
      raise ValueError(
          f"num_buckets must be even and >= 4 when bidirectional=True, got {num_buckets}")
  elif num_buckets < 2:
    raise ValueError(f"num_buckets must be >= 2, got {num_buckets}")
  per_direction = num_buckets // 2 if bidirectional else num_buckets
  max_exact = per_direction // 2
  if max_distance <= max_exact:
    raise ValueError(
        f"max_distance must be > {max_exact} (the number of exact buckets), got {max_distance}")
  return num_buckets, max_distance


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _bucket(
    relative_position: jnp.ndarray, bidirectional: bool, per_direction: int, max_distance: int
) -> jnp.ndarray:
  """HF's arithmetic on validated input; one compiled kernel instead of ~20 eager ops."""
  max_exact = per_direction // 2
  # Every |distance| >= max_distance saturates, so clipping first keeps int32 math overflow-free.
  if relative_position.dtype.itemsize >= 4:
    low = 0 if jnp.issubdtype(relative_position.dtype, jnp.unsignedinteger) else -2**30
    relative_position = jnp.clip(relative_position, low, 2**30)
  relative_position = relative_position.astype(jnp.int32)
  if bidirectional:
    offset = (relative_position > 0).astype(jnp.int32) * per_direction
    distance = jnp.abs(relative_position)
  else:
    offset = jnp.zeros_like(relative_position)
    distance = -jnp.minimum(relative_position, 0)
  # Now distance >= 0.
  is_small = distance < max_exact
  # Same float32 op order as HF. The max() only keeps log() finite on entries where() discards.
  safe_distance = jnp.maximum(distance, max_exact).astype(jnp.float32)
  log_ratio = jnp.log(safe_distance / jnp.float32(max_exact))
  scaled = (log_ratio / jnp.float32(math.log(max_distance / max_exact))
            * jnp.float32(per_direction - max_exact))
  if_large = max_exact + scaled.astype(jnp.int32)  # truncation, as torch .to(long)
  if_large = jnp.minimum(if_large, per_direction - 1)
  return offset + jnp.where(is_small, distance, if_large)


def t5_tile(params, q_pos, k_pos, *, num_buckets: int, max_distance: int,
            bidirectional: bool) -> jnp.ndarray:
  """T5's bucketed bias on one ``[bq, bk]`` tile of one head (a ``TileBias`` function).

  :func:`t5_relative_position_bucket` of ``k - q`` (Hugging Face's float32 op order), then one
  select per bucket instead of the table gather. The distance is float32, exact below 2^24, where
  every distance >= ``max_distance`` has long saturated into the last bucket: no int32
  wrap-around.

  Args:
    params: the head's ``num_buckets`` bucket values (float32 scalars).
    q_pos: float32 ``[bq, 1]`` query positions.
    k_pos: float32 ``[1, bk]`` key positions.
    num_buckets: NB.
    max_distance: distance of the last bucket.
    bidirectional: encoder-style buckets for later keys.

  Returns:
    float32 ``[bq, bk]``.
  """
  relative = k_pos - q_pos  # [bq, bk]
  per_direction = num_buckets // 2 if bidirectional else num_buckets
  max_exact = per_direction // 2
  if bidirectional:
    offset = jnp.where(relative > 0, per_direction, 0)
    distance = jnp.abs(relative)
  else:
    offset = 0
    distance = -jnp.minimum(relative, 0.0)
  is_small = distance < max_exact
  safe = jnp.maximum(distance, float(max_exact))
  log_ratio = jnp.log(safe / jnp.float32(max_exact))
  scaled = (log_ratio / jnp.float32(math.log(max_distance / max_exact))
            * jnp.float32(per_direction - max_exact))
  large = jnp.minimum(max_exact + scaled.astype(jnp.int32), per_direction - 1)
  small = jnp.minimum(distance, float(max_exact)).astype(jnp.int32)
  bucket = offset + jnp.where(is_small, small, large)
  out = jnp.zeros(relative.shape, jnp.float32)
  for b in range(num_buckets):
    out = jnp.where(bucket == b, params[b], out)
  return out


def t5_kernel_bias(table: Any, *, num_buckets: int, max_distance: int,
                   bidirectional: bool) -> KernelBias:
  """T5's learned bias of the bucket of ``k - q`` as an in-kernel bias.

  Args:
    table: float ``[NB, H]`` bucket table (``T5RelativeBias.table``).
    num_buckets: NB.
    max_distance: distance of the last bucket.
    bidirectional: encoder-style buckets for later keys.

  Returns:
    A :class:`~pejax.encodings.kernel_bias.KernelBias` with ``[H, NB]`` parameters (learnable).

  Raises:
    ValueError: for invalid bucket settings or a table whose first dim is not ``num_buckets``.
  """
  num_buckets, max_distance = check_bucket_settings(
      num_buckets=num_buckets, max_distance=max_distance, bidirectional=bidirectional)
  if jnp.ndim(table) != 2 or jnp.shape(table)[0] != num_buckets:
    raise ValueError(f"table must have shape [num_buckets={num_buckets}, H], got "
                     f"{jnp.shape(table)}")
  options = (("num_buckets", num_buckets), ("max_distance", max_distance),
             ("bidirectional", bool(bidirectional)))
  return KernelBias(TileBias(t5_tile, num_buckets, True, options),
                    jnp.asarray(table, jnp.float32).T)
