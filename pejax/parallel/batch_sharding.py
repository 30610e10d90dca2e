"""Batches as global arrays split over the ``data`` (and ``fsdp``) mesh axes, one slice a process.

Axes: B global batch, L length.

Every process draws the *global* batch ``step`` from the seeded data iterator (batch ``i`` is a
pure function of ``(seed, i)``, so all processes agree without communicating), keeps only the
rows its devices hold (process ``p`` of ``N``: rows ``[p * B / N, (p + 1) * B / N)`` with the
usual device order) and assembles the global array with
``jax.make_array_from_process_local_data``. The global batch is therefore the same for any
number of processes and any mesh: a run on a pod sees exactly the batches of a one-device run.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from pejax.parallel.logical_axes import BATCH, LOGICAL_AXIS_RULES, logical_to_mesh_spec


def batch_sharding(mesh: Mesh, ndim: int = 2, rules=LOGICAL_AXIS_RULES) -> NamedSharding:
  """``NamedSharding`` of a ``[B, ...]`` batch array: rows over ``("data", "fsdp")``.

  Args:
    mesh: the mesh.
    ndim: rank of the array (dimensions after the first are replicated).
    rules: logical axis rules.

  Returns:
    The sharding.
  """
  return NamedSharding(mesh, logical_to_mesh_spec((BATCH,) + (None,) * (ndim - 1), rules))


def process_rows(sharding: NamedSharding, global_shape: tuple[int, ...]) -> slice:
  """The rows of a ``global_shape`` array that this process's devices hold under ``sharding``.

  Args:
    sharding: a batch sharding (rows split, other dimensions replicated).
    global_shape: shape of the global array.

  Returns:
    ``slice(start, stop)`` over the first dimension.

  Raises:
    ValueError: if the process's rows are not one contiguous range (an unusual device order).
  """
  rows = sorted({(idx[0].start or 0, global_shape[0] if idx[0].stop is None else idx[0].stop)
                 for idx in sharding.addressable_devices_indices_map(global_shape).values()})
  start, stop = rows[0]
  for row_start, row_stop in rows[1:]:
    if row_start > stop:
      raise ValueError(f"this process's batch rows are not contiguous: {rows}")
    stop = max(stop, row_stop)
  return slice(start, stop)


def shard_batch(batch: Mapping[str, Any], mesh: Mesh, rules=LOGICAL_AXIS_RULES) -> dict[str, Any]:
  """Global arrays of a global host batch, each process supplying only its rows.

  Args:
    batch: dict of ``[B, ...]`` host arrays (identical on all processes).
    mesh: the mesh.
    rules: logical axis rules.

  Returns:
    dict of ``jax.Array`` with :func:`batch_sharding`; non-array entries pass through.

  Raises:
    ValueError: if ``data * fsdp`` does not divide ``B``.
  """
  out = {}
  for key, value in batch.items():
    if not hasattr(value, "shape") or np.ndim(value) == 0:
      out[key] = value
      continue
    value = np.asarray(value)
    sharding = batch_sharding(mesh, value.ndim, rules)
    replicas = int(np.prod([mesh.shape[a] for a in _as_tuple(sharding.spec[0])]))
    if value.shape[0] % replicas:
      raise ValueError(
          f"batch[{key!r}] has {value.shape[0]} rows, not divisible by the {replicas} data shards "
          f"of mesh {dict(mesh.shape)}")
    local = value[process_rows(sharding, value.shape)]
    out[key] = jax.make_array_from_process_local_data(sharding, local, value.shape)
  return out


def _as_tuple(axes: Any) -> tuple[str, ...]:
  if axes is None or axes is PartitionSpec.UNCONSTRAINED:
    return ()
  return tuple(axes) if isinstance(axes, tuple) else (axes,)


class ShardedBatches:
  """Wraps a ``pejax.data`` batch iterator: yields :func:`shard_batch` of its global batches.

  ``get_state`` / ``set_state`` pass through (the state is the global step, the same on every
  process), so checkpoints resume exactly on any mesh or process count.

  Args:
    inner: iterator of global host batches with ``get_state`` / ``set_state``.
    mesh: the mesh.
  """

  def __init__(self, inner: Iterator[Mapping[str, Any]], mesh: Mesh, rules=LOGICAL_AXIS_RULES):
    self.inner = inner
    self.mesh = mesh
    self.rules = rules

  def __iter__(self) -> ShardedBatches:
    return self

  def __next__(self) -> dict[str, Any]:
    return shard_batch(next(self.inner), self.mesh, self.rules)

  def get_state(self) -> dict[str, Any]:
    """The wrapped iterator's state.

    Returns:
      ``inner.get_state()``: JSON-serializable, the same on every process.
    """
    return self.inner.get_state()

  def set_state(self, state: dict[str, Any]) -> None:
    """Restores the wrapped iterator's state.

    Args:
      state: a dict from :meth:`get_state` (``inner.set_state`` checks it).
    """
    self.inner.set_state(state)
