"""A ``jax.sharding.Mesh`` from a spec string such as ``"data=4,model=2"``, and its fit checks.

The mesh always has the axes ``("data", "fsdp", "model")`` in this order (an axis the spec leaves
out has size 1), so the logical axis rules of :mod:`pejax.parallel.logical_axes` always apply.
One axis may be ``-1`` (all remaining devices); an empty spec puts every device on ``data``.

* ``data``  splits the batch; parameters are replicated (plain data parallelism).
* ``fsdp``  splits the batch *and* the model width E of every weight matrix and its optimizer
  moments (ZeRO-3 / FSDP: memory per device falls with the axis size).
* ``model`` splits heads, MLP width and vocabulary (tensor parallelism inside each layer).

All axes are ``AxisType.Auto``: XLA's SPMD partitioner (GSPMD) propagates the parameter and
batch shardings through the program and inserts the collectives.
"""

from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence

import jax
from jax.sharding import AxisType, Mesh

from pejax.parallel.logical_axes import DATA, FSDP, MESH_AXES, MODEL


def parse_mesh_spec(spec: str, num_devices: int) -> dict[str, int]:
  """Axis sizes of a mesh spec, resolved for ``num_devices`` devices.

  Args:
    spec: ``"axis=size,..."`` over ``data``, ``fsdp``, ``model``; one size may be ``-1``
      (the devices left); ``""`` means ``data=<num_devices>``.
    num_devices: devices available (all processes together).

  Returns:
    ``{"data": d, "fsdp": f, "model": m}`` with ``d * f * m == num_devices``.

  Raises:
    ValueError: naming the spec on a malformed entry, an unknown or repeated axis, or sizes
      whose product is not the number of devices.
  """
  if not isinstance(spec, str):
    raise ValueError(f"mesh spec must be a string like 'data=4,model=2', got {spec!r}")
  sizes: dict[str, int] = {}
  for item in (s.strip() for s in spec.split(",")):
    if not item:
      continue
    name, sep, value = item.partition("=")
    name = name.strip()
    if not sep or name not in MESH_AXES:
      raise ValueError(
          f"mesh spec entries must be axis=size with axis in {list(MESH_AXES)}, got {item!r} "
          f"in mesh spec {spec!r}")
    if name in sizes:
      raise ValueError(f"mesh spec names axis {name!r} twice: {spec!r}")
    try:
      size = int(value)
    except ValueError:
      raise ValueError(f"mesh axis {name} must have an integer size, got {value!r} in mesh spec "
                       f"{spec!r}") from None
    if size == 0 or size < -1:
      raise ValueError(f"mesh axis {name} must have size >= 1 or -1, got {size} in mesh spec "
                       f"{spec!r}")
    sizes[name] = size
  if not sizes:
    sizes = {DATA: -1}
  free = [name for name, size in sizes.items() if size == -1]
  if len(free) > 1:
    raise ValueError(f"at most one mesh axis may be -1, got {free} in mesh spec {spec!r}")
  fixed = math.prod(size for size in sizes.values() if size != -1)
  if free:
    if num_devices % fixed:
      raise ValueError(
          f"mesh spec {spec!r}: {num_devices} devices are not a multiple of the fixed axes' "
          f"product {fixed}")
    sizes[free[0]] = num_devices // fixed
  total = math.prod(sizes.values())
  if total != num_devices:
    raise ValueError(
        f"mesh spec {spec!r} needs {total} devices but {num_devices} are available (the "
        "product of the axis sizes must equal the device count of all processes)")
  return {name: sizes.get(name, 1) for name in MESH_AXES}


def make_mesh(spec: str = "", *, devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
  """A ``jax.sharding.Mesh`` with axes ``("data", "fsdp", "model")`` from a spec string.

  Args:
    spec: see :func:`parse_mesh_spec`, e.g. ``"data=4,model=2"``.
    devices: devices to use; default ``jax.devices()`` (every process's devices).

  Returns:
    The mesh (``jax.make_mesh``, topology-aware device order, ``AxisType.Auto`` axes).
  """
  devices = list(jax.devices() if devices is None else devices)
  sizes = parse_mesh_spec(spec, len(devices))
  shape = tuple(sizes[name] for name in MESH_AXES)
  return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES),
                       devices=devices)


def check_mesh_fits(axis_sizes: Mapping[str, int], *, batch_size: int, num_heads: int,
                    num_kv_heads: int, d_model: int, mlp_hidden: int, vocab_size: int,
                    num_processes: int = 1) -> None:
  """Raises ``ValueError`` if the mesh does not divide the batch or the sharded model dims.

  Args:
    axis_sizes: mesh axis sizes (``dict(mesh.shape)`` or :func:`parse_mesh_spec`).
    batch_size: global batch B (split over ``data * fsdp`` and over processes).
    num_heads: query heads H (split over ``model``).
    num_kv_heads: key/value heads K (split over ``model``).
    d_model: model width E (split over ``fsdp``).
    mlp_hidden: MLP hidden width F (split over ``model``).
    vocab_size: vocabulary V (split over ``model``).
    num_processes: JAX processes; each loads ``B / num_processes`` rows.

  Raises:
    ValueError: naming the dimension, its value and the mesh axes, e.g. ``"num_heads (6) must be
      divisible by the mesh axis model=4"``.
  """
  data, fsdp, model = (int(axis_sizes.get(name, 1)) for name in (DATA, FSDP, MODEL))
  replicas = data * fsdp
  if batch_size % replicas:
    raise ValueError(
        f"batch_size ({batch_size}) must be divisible by the mesh axes data*fsdp={data}*{fsdp}="
        f"{replicas} (each batch row lives on one data shard)")
  if batch_size % num_processes:
    raise ValueError(
        f"batch_size ({batch_size}) must be divisible by the number of processes "
        f"({num_processes})")
  for name, value in (("num_heads", num_heads), ("num_kv_heads", num_kv_heads),
                      ("mlp_hidden", mlp_hidden), ("vocab_size", vocab_size)):
    if value % model:
      raise ValueError(
          f"{name} ({value}) must be divisible by the mesh axis model={model} (heads, MLP width "
          "and vocabulary are split over it); choose a model axis that divides it")
  if d_model % fsdp:
    raise ValueError(f"d_model ({d_model}) must be divisible by the mesh axis fsdp={fsdp}")
