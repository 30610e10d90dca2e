"""Scaling out on XLA SPMD: device meshes, logical partitioning, sharded state and batches.

A run on a mesh is the one-device run partitioned by XLA (GSPMD): parameters carry logical axis
names, :data:`LOGICAL_AXIS_RULES` maps them onto the mesh axes ``data`` / ``fsdp`` / ``model``,
batches are split over ``data`` (and ``fsdp``), and the same jitted train and eval steps run on
the sharded arrays. Imports only jax and flax (``pejax.nn`` uses the logical names).

Example::

  mesh = parallel.make_mesh("data=4,model=2")
  with parallel.mesh_context(mesh):
    model = parallel.shard_module(Decoder(config, rngs=nnx.Rngs(0)), mesh)
    optimizer = parallel.shard_module(create_optimizer(model, ...), mesh)
    metrics = train_step(model, optimizer, parallel.shard_batch(batch, mesh))
"""

from __future__ import annotations

from pejax.parallel.batch_sharding import ShardedBatches
from pejax.parallel.batch_sharding import batch_sharding
from pejax.parallel.batch_sharding import process_rows
from pejax.parallel.batch_sharding import shard_batch
from pejax.parallel.batch_sharding import shard_process_rows
from pejax.parallel.distributed import initialize_distributed
from pejax.parallel.distributed import is_coordinator
from pejax.parallel.distributed import process_summary
from pejax.parallel.logical_axes import LOGICAL_AXIS_RULES
from pejax.parallel.logical_axes import MESH_AXES
from pejax.parallel.logical_axes import active_mesh
from pejax.parallel.logical_axes import constrain
from pejax.parallel.logical_axes import logical_to_mesh_spec
from pejax.parallel.logical_axes import mesh_context
from pejax.parallel.logical_axes import partitioned
from pejax.parallel.mesh import check_mesh_fits
from pejax.parallel.mesh import make_mesh
from pejax.parallel.mesh import parse_mesh_spec
from pejax.parallel.multiprocess import agree_on_stop
from pejax.parallel.state_sharding import shard_module
from pejax.parallel.state_sharding import state_shardings

__all__ = [
    "LOGICAL_AXIS_RULES",
    "MESH_AXES",
    "ShardedBatches",
    "active_mesh",
    "agree_on_stop",
    "batch_sharding",
    "check_mesh_fits",
    "constrain",
    "initialize_distributed",
    "is_coordinator",
    "logical_to_mesh_spec",
    "make_mesh",
    "mesh_context",
    "parse_mesh_spec",
    "partitioned",
    "process_rows",
    "process_summary",
    "shard_batch",
    "shard_module",
    "shard_process_rows",
    "state_shardings",
]
