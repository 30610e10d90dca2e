"""Checks of the inputs every attention kernel shares: positions and segment ids.

Axes: B batch, Lq query length, Lk key length, H query heads, K key/value heads, D head dim.
"""

from __future__ import annotations

import jax

from pejax.encodings import arg_checks

Array = jax.Array


def check_positions_and_segments(q: Array, k: Array, *, q_positions, k_positions,
                                 q_segment_ids=None, k_segment_ids=None) -> tuple[Array, Array]:
  """Checks position / segment arrays against the query and key lengths (static shapes only).

  Args:
    q: ``[B, Lq, H, D]`` queries.
    k: ``[B, Lk, K, D]`` keys.
    q_positions: int ``[B | 1, Lq]``.
    k_positions: int ``[B | 1, Lk]``.
    q_segment_ids: optional int ``[B, Lq]``, given together with ``k_segment_ids``.
    k_segment_ids: optional int ``[B, Lk]``.

  Returns:
    ``(q_positions, k_positions)`` as jax arrays.

  Raises:
    ValueError: naming the argument whose dtype or shape is wrong. Free under ``jax.jit``.
  """
  batch = q.shape[0]
  checked = []
  for name, x, length in (("q_positions", q_positions, q.shape[1]),
                          ("k_positions", k_positions, k.shape[1])):
    x = arg_checks.check_integer_array(name, x)
    if x.ndim != 2 or x.shape[1] != length or x.shape[0] not in (1, batch):
      rows = "1" if batch == 1 else f"{batch} or 1"
      raise ValueError(f"{name} must have shape [{rows}, {length}], got {x.shape}")
    checked.append(x)
  if (q_segment_ids is None) != (k_segment_ids is None):
    raise ValueError("q_segment_ids and k_segment_ids must be given together")
  for name, x, length in (("q_segment_ids", q_segment_ids, q.shape[1]),
                          ("k_segment_ids", k_segment_ids, k.shape[1])):
    if x is not None:
      x = arg_checks.check_integer_array(name, x)
      if x.shape != (batch, length):
        raise ValueError(f"{name} must have shape [{batch}, {length}], got {x.shape}")
  return checked[0], checked[1]
