"""Logical axis names of the decoder's arrays and the rules that map them onto mesh axes.

Parameters are annotated with *logical* names ("embed", "heads", "mlp", "vocab") where they are
created (:func:`partitioned`); which mesh axis a logical name lands on is decided once, here, by
:data:`LOGICAL_AXIS_RULES`. The mesh always has the three axes of :data:`MESH_AXES` (size 1 when
unused), so every rule names an existing mesh axis:

  batch     -> ("data", "fsdp")  rows of a batch (data parallelism; FSDP also splits the batch)
  embed     -> "fsdp"            model width E of every weight matrix (ZeRO-3 style sharding)
  heads     -> "model"           query heads H (Megatron-style tensor parallelism)
  kv_heads  -> "model"           key/value heads K
  mlp       -> "model"           MLP hidden width F
  vocab     -> "model"           vocabulary V of the embedding / output projection
  length, head_dim -> None       never sharded

Without an active mesh nothing here changes a computation: annotations are metadata only
(``eager_sharding=False``), and :func:`constrain` is the identity.

References:
  Shoeybi et al. 2019, "Megatron-LM", arXiv 1909.08053 (tensor parallelism of attention and MLP);
  Rajbhandari et al. 2020, "ZeRO", arXiv 1910.02054 (sharding parameters over data replicas);
  Xu et al. 2021, "GSPMD", arXiv 2105.04663 (the XLA partitioner that runs it).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional, Sequence

from flax import nnx
from flax.core import spmd as flax_spmd
import jax
from jax.sharding import PartitionSpec

DATA, FSDP, MODEL = "data", "fsdp", "model"
MESH_AXES = (DATA, FSDP, MODEL)

BATCH = "batch"
LENGTH = "length"
EMBED = "embed"
HEADS = "heads"
KV_HEADS = "kv_heads"
HEAD_DIM = "head_dim"
MLP = "mlp"
VOCAB = "vocab"

LOGICAL_AXIS_RULES: tuple[tuple[str, Any], ...] = (
    (BATCH, (DATA, FSDP)),
    (LENGTH, None),
    (EMBED, FSDP),
    (HEADS, MODEL),
    (KV_HEADS, MODEL),
    (HEAD_DIM, None),
    (MLP, MODEL),
    (VOCAB, MODEL),
)


def partitioned(initializer: Callable[..., Any],
                names: Sequence[Optional[str]]) -> Callable[..., Any]:
  """Wraps a parameter initializer with logical axis names (``nnx.with_partitioning``).

  The names are metadata of the created ``nnx.Param`` (``out_sharding``); the value is created
  unsharded whether or not a mesh is active (``eager_sharding=False``), so a module builds the
  same numbers on one device as on a mesh. :func:`pejax.parallel.shard_module` later places the
  variables with :func:`logical_to_mesh_spec` of these names.

  Args:
    initializer: an ``nnx.initializers`` function ``(key, shape, dtype) -> array``.
    names: one logical name (or ``None``) per dimension of the parameter.

  Returns:
    The wrapped initializer (pass it as ``kernel_init=`` / ``embedding_init=``).
  """
  return nnx.with_partitioning(initializer, tuple(names), eager_sharding=False)


def logical_to_mesh_spec(names: Sequence[Any], rules=LOGICAL_AXIS_RULES) -> PartitionSpec:
  """The mesh ``PartitionSpec`` of logical ``names`` under ``rules`` (unknown names raise).

  Args:
    names: logical axis names, ``None`` or ``PartitionSpec.UNCONSTRAINED`` per dimension.
    rules: ``(logical name, mesh axis | tuple of mesh axes | None)`` pairs.

  Returns:
    A ``PartitionSpec`` over mesh axis names.
  """
  table = dict(rules)
  axes = []
  for name in names:
    if name is None or name is PartitionSpec.UNCONSTRAINED:
      axes.append(name)
    elif name in table:
      axes.append(table[name])
    else:
      raise ValueError(f"logical axis name {name!r} has no rule; known names {sorted(table)}")
  return PartitionSpec(*axes)


def active_mesh() -> Optional[jax.sharding.AbstractMesh]:
  """The mesh set by ``jax.set_mesh`` (e.g. through :func:`mesh_context`), or ``None``.

  Returns:
    The current abstract mesh, or ``None`` when no mesh is set (one-device run).
  """
  mesh = jax.sharding.get_abstract_mesh()
  return None if mesh.empty else mesh


@contextlib.contextmanager
def mesh_context(mesh: jax.sharding.Mesh, rules=LOGICAL_AXIS_RULES) -> Iterator[None]:
  """Makes ``mesh`` and the logical axis ``rules`` current (``jax.set_mesh`` + flax rules).

  Trace (call for the first time) the jitted steps inside this context so that the activation
  constraints of :func:`constrain` apply.

  Args:
    mesh: a mesh from :func:`pejax.parallel.make_mesh`.
    rules: logical axis rules.

  Yields:
    ``None``; the mesh and rules are current until the ``with`` block exits.
  """
  with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
    yield


def constrain(x: jax.Array, names: Sequence[Any]) -> jax.Array:
  """``with_sharding_constraint`` of ``x`` to logical ``names`` if a mesh is active, else ``x``.

  Use ``PartitionSpec.UNCONSTRAINED`` for dimensions left to the partitioner (e.g. the batch of
  an evaluation batch that the data axis may not divide).

  Args:
    x: an array ``[N_1, ..., N_k]`` with ``k = len(names)`` dimensions.
    names: logical name, ``None`` or ``PartitionSpec.UNCONSTRAINED`` per dimension.

  Returns:
    ``x`` (same shape ``[N_1, ..., N_k]`` and dtype), constrained to
    ``logical_to_mesh_spec(names)`` on the active mesh.

  Raises:
    ValueError: if a mesh is active and ``names`` has not one entry per dimension of ``x``.
  """
  if active_mesh() is None:
    return x
  if x.ndim != len(names):
    raise ValueError(f"names must give one entry per dimension of x {x.shape}, got {names}")
  rules = flax_spmd.get_logical_axis_rules() or LOGICAL_AXIS_RULES
  return jax.lax.with_sharding_constraint(x, logical_to_mesh_spec(names, rules))
