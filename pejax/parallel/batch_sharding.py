"""Batches as global arrays split over the ``data`` (and ``fsdp``) mesh axes, one slice a process.

Axes: B global batch, L length.

Batch ``step`` of the seeded data iterator is a pure function of ``(seed, i)``, so all processes
agree on it without communicating. Each process loads only the rows its devices hold (process
``p`` of ``N``: rows ``[p * B / N, (p + 1) * B / N)`` with the usual device order; a corpus
iterator reads only those windows) and the global array is assembled with
``jax.make_array_from_process_local_data``. The global batch is therefore the same for any
number of processes and any mesh: a run on a pod sees exactly the batches of a one-device run.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping

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
    batch: dict of ``[B, ...]`` host arrays (identical on all processes); ``positions`` may be
      ``[1, L]`` (shared by every row: replicated).
    mesh: the mesh.
    rules: logical axis rules.

  Returns:
    dict of ``jax.Array`` with :func:`batch_sharding`; non-array entries pass through.

  Raises:
    ValueError: if ``data * fsdp`` does not divide ``B``.
  """

  def to_global(key: str, value: np.ndarray, sharding: NamedSharding) -> jax.Array:
    replicas = int(np.prod([mesh.shape[a] for a in _as_tuple(sharding.spec[0])]))
    if key == "positions" and value.shape[0] == 1 and replicas > 1:
      # Positions shared by every row ([1, L], pejax.train.model_inputs): replicated.
      return jax.make_array_from_process_local_data(
          NamedSharding(mesh, PartitionSpec()), value, value.shape)
    if value.shape[0] % replicas:
      raise ValueError(
          f"batch[{key!r}] has {value.shape[0]} rows, not divisible by the {replicas} data shards "
          f"of mesh {dict(mesh.shape)}")
    local = value[process_rows(sharding, value.shape)]
    return jax.make_array_from_process_local_data(sharding, local, value.shape)

  return _map_arrays(batch, mesh, rules, to_global)


def shard_process_rows(local_batch: Mapping[str, Any], mesh: Mesh, *, global_rows: int,
                       rules=LOGICAL_AXIS_RULES) -> dict[str, Any]:
  """Global arrays from this process's rows only (:func:`process_rows` of the batch sharding).

  Args:
    local_batch: dict of ``[b, ...]`` host arrays, ``b`` = this process's rows of the global batch.
    mesh: the mesh.
    global_rows: B, the global batch size.
    rules: logical axis rules.

  Returns:
    dict of ``[B, ...]`` ``jax.Array`` with :func:`batch_sharding`; non-array entries pass
    through.

  Raises:
    ValueError: if an entry does not have the number of rows this process holds.
  """

  def to_global(key: str, value: np.ndarray, sharding: NamedSharding) -> jax.Array:
    global_shape = (global_rows,) + value.shape[1:]
    rows = process_rows(sharding, global_shape)
    if value.shape[0] != rows.stop - rows.start:
      raise ValueError(
          f"batch[{key!r}] has {value.shape[0]} rows but this process holds rows "
          f"[{rows.start}, {rows.stop}) of the global batch of {global_rows}")
    return jax.make_array_from_process_local_data(sharding, value, global_shape)

  return _map_arrays(local_batch, mesh, rules, to_global)


def _map_arrays(batch: Mapping[str, Any], mesh: Mesh, rules,
                to_global: Callable[[str, np.ndarray, NamedSharding], jax.Array]
                ) -> dict[str, Any]:
  """``to_global(key, host array, its batch sharding)`` of each array entry; others pass through."""
  out = {}
  for key, value in batch.items():
    if not hasattr(value, "shape") or np.ndim(value) == 0:
      out[key] = value
    else:
      value = np.asarray(value)
      out[key] = to_global(key, value, batch_sharding(mesh, value.ndim, rules))
  return out


def _as_tuple(axes: Any) -> tuple[str, ...]:
  if axes is None or axes is PartitionSpec.UNCONSTRAINED:
    return ()
  return tuple(axes) if isinstance(axes, tuple) else (axes,)


class ShardedBatches:
  """Wraps a ``pejax.data`` batch iterator: yields its batches as global arrays on ``mesh``.

  An iterator that can load part of a batch (``select_rows(rows)`` and ``batch_size``, as every
  :class:`pejax.data.BatchIterator`) is told this process's rows (:attr:`rows`) and loads only
  those; the global arrays are assembled from each process's rows
  (:func:`shard_process_rows`). Any other iterator yields global batches, which
  :func:`shard_batch` slices.

  ``get_state`` / ``set_state`` pass through (the state is the global step, the same on every
  process), so checkpoints resume exactly on any mesh or process count.

  Args:
    inner: iterator of host batches with ``get_state`` / ``set_state``.
    mesh: the mesh.

  Attributes:
    rows: ``slice(start, stop)`` of each global batch this process loads, or ``None`` when the
      iterator yields whole batches.
    global_rows: the global batch size B (``None`` when the iterator yields whole batches).
  """

  def __init__(self, inner: Iterator[Mapping[str, Any]], mesh: Mesh, rules=LOGICAL_AXIS_RULES):
    self.inner = inner
    self.mesh = mesh
    self.rules = rules
    self.rows: slice | None = None
    self.global_rows: int | None = None
    batch_size = getattr(inner, "batch_size", None)
    if hasattr(inner, "select_rows") and isinstance(batch_size, int):
      self.global_rows = batch_size
      self.rows = process_rows(batch_sharding(mesh, 2, rules), (batch_size, 1))
      inner.select_rows(self.rows)

  def __iter__(self) -> ShardedBatches:
    return self

  def __next__(self) -> dict[str, Any]:
    if self.rows is None:
      return shard_batch(next(self.inner), self.mesh, self.rules)
    return shard_process_rows(next(self.inner), self.mesh, global_rows=self.global_rows,
                              rules=self.rules)

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
