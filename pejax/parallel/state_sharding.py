"""Placing a module's (or optimizer's) variables on a mesh from their logical annotations.

A variable created with :func:`~pejax.parallel.partitioned` carries logical axis names; its mesh
``PartitionSpec`` comes from the logical axis rules (``nnx.get_partition_spec`` under
``nnx.logical_axis_rules``). Variables without names (norm scales, the T5 bias table, a learned
position table, the optimizer step) are replicated. Optimizer moments inherit the names of their
parameters (``nnx.Optimizer`` copies the variable metadata), so they are sharded like them.
"""

from __future__ import annotations

from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding

from pejax.parallel.logical_axes import LOGICAL_AXIS_RULES


def state_shardings(node: Any, mesh: Mesh, rules=LOGICAL_AXIS_RULES) -> Any:
  """The ``NamedSharding`` tree of ``nnx.state(node)`` on ``mesh``.

  Args:
    node: an NNX module or optimizer (or its state).
    mesh: the mesh.
    rules: logical axis rules.

  Returns:
    A state-shaped tree of ``NamedSharding`` (replicated where no logical names were given).
  """
  state = node if isinstance(node, nnx.State) else nnx.state(node)
  with nnx.logical_axis_rules(rules):
    specs = nnx.get_partition_spec(state)
  return jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs)


def _put(x: Any, sharding: NamedSharding) -> Any:
  if sharding.is_fully_addressable:
    return jax.device_put(x, sharding)
  # Multi-process: every process built the same values (same seed); device_put of host data
  # checks that and keeps each process's shards.
  if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
    impl = jax.random.key_impl(x)
    data = jax.device_put(jax.device_get(jax.random.key_data(x)), sharding)
    return jax.random.wrap_key_data(data, impl=impl)
  return jax.device_put(jax.device_get(x), sharding)


def shard_module(node: Any, mesh: Mesh, rules=LOGICAL_AXIS_RULES) -> Any:
  """Moves every variable of ``node`` (a module or optimizer) onto ``mesh``, in place.

  Args:
    node: an NNX module or ``nnx.Optimizer``.
    mesh: the mesh.
    rules: logical axis rules.

  Returns:
    ``node`` (updated in place), for chaining.

  Raises:
    ValueError: from JAX if a mesh axis does not divide a sharded dimension (call
      :func:`~pejax.parallel.check_mesh_fits` first for a message naming the hyper-parameter).
  """
  state = nnx.state(node)
  shardings = state_shardings(state, mesh, rules)
  nnx.update(node, jax.tree.map(_put, state, shardings))
  return node
