"""Randomized positional encodings (Ruoss et al., 2023).

During training, instead of positions 0 .. L - 1, a sequence of length L gets an increasing
random subset of `[0, max_position)`, where `max_position` is at least the longest length to be
evaluated. The model thus sees every position it will meet at test time while training only on
short sequences. The positions feed any PE unchanged (sinusoidal, learned, RoPE, ALiBi, ...);
at evaluation one usually passes plain `arange(L)` positions (or keeps sampling, as the paper
does).

References:
  Ruoss et al., "Randomized Positional Encodings Boost Length Generalization of Transformers",
  ACL 2023, arXiv:2305.16843.
"""

from __future__ import annotations

from collections.abc import Sequence
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks


def _check_batch_shape(batch_shape: Any) -> tuple[int, ...]:
  """Returns `batch_shape` as a tuple of ints >= 0, else raises `ValueError`."""
  if isinstance(batch_shape, (int, bool)) or not isinstance(batch_shape, Sequence):
    raise ValueError(f"batch_shape must be a tuple of non-negative ints, got {batch_shape!r}")
  for i, size in enumerate(batch_shape):
    arg_checks.check_nonnegative_int(f"batch_shape[{i}]", size)
  return tuple(int(size) for size in batch_shape)


def randomized_positions(
    key: jax.Array,
    length: int,
    *,
    max_position: int,
    batch_shape: Sequence[int] = (),
) -> jnp.ndarray:
  """Sorted distinct positions drawn uniformly without replacement from `[0, max_position)`.

  Every one of the C(max_position, length) subsets is equally likely; each row of the batch is
  an independent draw. `length`, `max_position` and `batch_shape` are static (Python ints), so
  under `jax.jit` pass them as static arguments; `key` may be traced. Each draw shuffles all of
  `[0, max_position)` (`jax.random.choice` without replacement), so it costs
  O(prod(batch_shape) * max_position) work and memory.

  Example::

    positions = randomized_positions(key, 128, max_position=2048, batch_shape=(batch,))
    x = token_embed(tokens) + sinusoidal_embedding(positions, d_model)

  Args:
    key: A JAX PRNG key (`jax.random.key` or `jax.random.PRNGKey`).
    length: Number of positions L per sequence, 1 <= L <= `max_position`.
    max_position: Exclusive upper bound of the positions.
    batch_shape: Leading dims B...; each gets an independent sample.

  Returns:
    `[*batch_shape, L]` int32, strictly increasing along the last axis.

  Raises:
    ValueError: if `length < 1`, `max_position < 1`, `length > max_position`, or `batch_shape`
      is not a tuple of non-negative ints.
  """
  length = arg_checks.check_positive_int("length", length)
  max_position = arg_checks.check_positive_int("max_position", max_position)
  if length > max_position:
    raise ValueError(
        f"length must be <= max_position ({max_position}) to sample distinct positions, got"
        f" {length}")
  batch_shape = _check_batch_shape(batch_shape)
  return _sample(key, length, max_position, batch_shape)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _sample(
    key: jax.Array, length: int, max_position: int, batch_shape: tuple[int, ...]
) -> jnp.ndarray:
  """Compiled once per static signature (eager calls would otherwise dispatch op by op)."""

  def sample_one(one_key: jax.Array) -> jnp.ndarray:
    chosen = jax.random.choice(one_key, max_position, shape=(length,), replace=False)
    return jnp.sort(chosen).astype(jnp.int32)

  if not batch_shape:
    return sample_one(key)
  keys = jax.random.split(key, math.prod(batch_shape))
  return jnp.reshape(jax.vmap(sample_one)(keys), batch_shape + (length,))
