"""Orbax checkpoints of a run: model, optimizer, step, data-iterator state and the config.

Every checkpoint is one step directory ``<directory>/<step>/`` with four items:

  model       ``nnx.state(model)``: every variable of the model (parameters and any other state,
              e.g. RNG counters), Orbax ``StandardSave``
  optimizer   ``nnx.state(optimizer)``: its step count and the optax state, ``StandardSave``
  data_state  the training iterator's ``get_state()`` dict, ``JsonSave``
  config      the full experiment config as JSON, ``JsonSave``

The step is the directory name (and equals ``optimizer.step`` for checkpoints written by the
loop). Orbax writes each step into a temporary directory and renames it when complete, so a save
interrupted by a crash or a kill leaves the previous checkpoints intact and the half-written one
invisible (it is removed the next time a :class:`Checkpointer` opens the directory). Old steps are
deleted only after a newer one is committed (``keep the last N``).

Restoring never happens without a target: the abstract state of the given model and optimizer
(``nnx.eval_shape``, with the shardings of their current arrays) is checked against the saved
metadata, and the saved config against the current one (without a current config, against the
model's own ``config`` when it has one, e.g. a :class:`pejax.nn.Decoder`: its PE and sizes), before
any array is read; then the restored state is written in with ``nnx.update``.

A newest checkpoint that cannot be read (a truncated or corrupt file) is not fatal when an older
committed one exists: :meth:`Checkpointer.restore` without an explicit step falls back to the
previous one with a warning naming both, and moves the unreadable step directory aside
(``<step>.unreadable``) so the resumed run can write that step again.

Sharded state: Orbax writes each array's shards from the processes that hold them (every process
of a multi-host run calls :meth:`Checkpointer.save` and :meth:`Checkpointer.restore`; the
directory must be shared) and reads into the shardings of the *target*. A checkpoint written on
one mesh therefore restores onto another mesh or onto a single device: place the model and
optimizer as wanted (:func:`pejax.parallel.shard_module`, or nothing for one device) before
calling :meth:`Checkpointer.restore`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging as pylogging
import os
from typing import Any, Iterator, Mapping, Sequence

from absl import logging
import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from flax import nnx

CHECKPOINT_SUBDIR = "checkpoints"
COMPATIBILITY_SECTIONS = ("model", "pe", "data")
_ITEMS = ("model", "optimizer", "data_state", "config")


def config_to_dict(config: Any) -> dict[str, Any] | None:
  """The experiment config as a JSON-compatible dict (``None`` stays ``None``).

  Args:
    config: An ``ml_collections.ConfigDict`` / ``FrozenConfigDict`` or a mapping.

  Returns:
    A dict that survives a JSON round trip unchanged.
  """
  if config is None:
    return None
  if hasattr(config, "to_json_best_effort"):
    return json.loads(config.to_json_best_effort())
  return json.loads(json.dumps(dict(config), default=repr))


def _flatten_dict(tree: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[
    tuple[tuple[str, ...], Any]]:
  for key, value in tree.items():
    path = prefix + (str(key),)
    if isinstance(value, Mapping):
      if value:
        yield from _flatten_dict(value, path)
    else:
      yield path, value


def config_differences(
    saved: Mapping[str, Any],
    current: Mapping[str, Any],
    *,
    sections: Sequence[str] = COMPATIBILITY_SECTIONS,
) -> list[str]:
  """Fields of ``sections`` whose values differ between two config dicts.

  Args:
    saved: The config dict stored in a checkpoint.
    current: The config dict of the current run (compared after a JSON round trip).
    sections: Top-level sub-configs to compare; others (``train``, ``eval``, ``optim``, ...) may
      differ freely.

  Returns:
    One line per differing field, sorted, e.g.
    ``"model.d_model: checkpoint has 128, current config has 64"``; a field missing on one side
    reads ``<missing>``. A field missing on one side and ``None`` on the other is no difference:
    ``None`` means "unset" (e.g. ``pe.decay_rate`` of a PE registered by ``--pe_module`` after the
    checkpoint was written, which every other PE leaves ``None``).
  """
  current = json.loads(json.dumps(current))
  missing = object()

  def show(value: Any) -> str:
    return "<missing>" if value is missing else repr(value)

  lines = []
  for section in sections:
    saved_fields = dict(_flatten_dict({section: saved.get(section, {})}))
    current_fields = dict(_flatten_dict({section: current.get(section, {})}))
    for path in sorted(set(saved_fields) | set(current_fields)):
      old = saved_fields.get(path, missing)
      new = current_fields.get(path, missing)
      if {id(old), id(new)} <= {id(missing), id(None)}:
        continue  # Unset on both sides.
      if old != new:
        lines.append(
            f"{'.'.join(path)}: checkpoint has {show(old)}, current config has {show(new)}")
  return lines


class CheckpointMismatchError(ValueError):
  """The checkpoint does not fit the current config or model (message names the field)."""


# Experiment-config field -> attribute of a model's own ``config`` (a ``DecoderConfig``): what
# must agree when a checkpoint is restored without an experiment config.
_MODEL_CONFIG_FIELDS = (
    ("pe.name", "pe_name"), ("model.vocab_size", "vocab_size"),
    ("model.num_layers", "num_layers"), ("model.d_model", "d_model"),
    ("model.num_heads", "num_heads"), ("pe.layout", "pe.layout"), ("pe.fraction", "pe.fraction"))


def model_config_differences(saved: Mapping[str, Any], model: Any) -> list[str]:
  """Fields of a saved experiment config that disagree with ``model.config`` (if it has one).

  Only fields the model's config states are compared (``pe`` as its registry name); a model
  without a ``config`` attribute gives no differences.
  """
  model_config = getattr(model, "config", None)
  if model_config is None or not saved:
    return []
  lines = []
  for path, attribute in _MODEL_CONFIG_FIELDS:
    current: Any = model_config
    for name in attribute.split("."):
      current = getattr(current, name, None)
    if current is None:
      continue
    node: Any = saved
    for key in path.split("."):
      node = node.get(key) if isinstance(node, Mapping) else None
    if node is None:
      continue
    if node != current:
      lines.append(f"{path}: checkpoint has {node!r}, current model has {current!r}")
  return lines


@dataclasses.dataclass(frozen=True)
class RestoredCheckpoint:
  """What :meth:`Checkpointer.restore` read besides the arrays it wrote into the model.

  Attributes:
    step: The restored step.
    data_state: The data iterator state saved with it (pass to ``iterator.set_state``).
    config: The saved experiment config dict (``None`` if none was saved).
    skipped: Newer steps that could not be read (the restore fell back past them).
  """

  step: int
  data_state: dict[str, Any]
  config: dict[str, Any] | None
  skipped: tuple[int, ...] = ()


def _abstract_state(node: Any) -> Any:
  """``nnx.eval_shape`` of ``nnx.state(node)`` carrying the shardings of the live arrays."""
  abstract = nnx.eval_shape(lambda n: nnx.state(n), node)
  concrete = nnx.state(node)
  return jax.tree.map(
      lambda a, x: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=getattr(x, "sharding", None)),
      abstract, concrete)


def _stored_shape_dtype(leaf: Any) -> tuple[tuple[int, ...], Any]:
  """Shape and dtype an abstract leaf has on disk (typed PRNG keys are stored as key data)."""
  if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
    data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct(leaf.shape, leaf.dtype))
    return tuple(data.shape), data.dtype
  return tuple(leaf.shape), leaf.dtype


def _target_mismatches(item: str, saved_tree: Mapping[str, Any], abstract: Any) -> list[str]:
  """Differences in paths, shapes and dtypes between saved metadata and an abstract target."""

  def strip_value(path: tuple[str, ...]) -> tuple[str, ...]:
    return path[:-1] if path and path[-1] == "value" else path

  saved = {strip_value(p): leaf for p, leaf in _flatten_dict(saved_tree)}
  target = {p: leaf for p, leaf in _flatten_dict(nnx.to_pure_dict(abstract))}
  lines = []
  for path in sorted(set(saved) | set(target)):
    name = f"{item} variable '{'/'.join(path)}'"
    if path not in target:
      lines.append(f"{name}: in the checkpoint, not in the current {item}")
      continue
    if path not in saved:
      lines.append(f"{name}: in the current {item}, not in the checkpoint")
      continue
    shape, dtype = _stored_shape_dtype(target[path])
    saved_shape = tuple(saved[path].shape)
    saved_dtype = jnp.dtype(saved[path].dtype)
    if saved_shape != shape or saved_dtype != jnp.dtype(dtype):
      lines.append(
          f"{name}: checkpoint has {saved_dtype}{list(saved_shape)}, current {item} has"
          f" {jnp.dtype(dtype)}{list(shape)}")
  return lines


class _ReadOnlyNoticeFilter(pylogging.Filter):
  """Drops Orbax's warning that a read-only manager's directory is read only (it is asked for)."""

  def filter(self, record: pylogging.LogRecord) -> bool:
    return not record.getMessage().startswith("Given directory is read only")


@contextlib.contextmanager
def _quiet_read_only_notice() -> Iterator[None]:
  absl_logger = pylogging.getLogger("absl")
  notice_filter = _ReadOnlyNoticeFilter()
  absl_logger.addFilter(notice_filter)
  try:
    yield
  finally:
    absl_logger.removeFilter(notice_filter)


class Checkpointer:
  """A directory of training checkpoints behind an ``ocp.CheckpointManager``.

  Args:
    directory: Where step directories go (created if missing), normally
      ``<workdir>/checkpoints``.
    config: The current experiment config: saved with every checkpoint and compared on restore.
    max_to_keep: Keep the latest ``max_to_keep`` checkpoints (``None`` keeps all).
    async_save: Write in a background thread (device-to-host copies happen before :meth:`save`
      returns, so training may continue and donate its buffers).
    compatibility_sections: Config sections that must match on restore.
    read_only: Only read: for a reader of another process's run (``--eval_only``,
      :func:`pejax.load_run`, ``init_from``), which may still be training. Nothing in
      ``directory`` is created, deleted or renamed: Orbax's clean-up of temporary step folders
      (which would delete the checkpoint the training process is writing) is off, an unreadable
      newest step is skipped with the warning but left where it is, and :meth:`save` is an error.

  Use as a context manager, or call :meth:`close` (which waits for pending writes).
  """

  def __init__(
      self,
      directory: str | os.PathLike[str],
      *,
      config: Any = None,
      max_to_keep: int | None = None,
      async_save: bool = True,
      compatibility_sections: Sequence[str] = COMPATIBILITY_SECTIONS,
      read_only: bool = False,
  ):
    if max_to_keep is not None and (
        isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int) or max_to_keep < 1):
      raise ValueError(f"max_to_keep must be a positive integer or None, got {max_to_keep!r}")
    self.directory = os.path.abspath(os.fspath(directory))
    self.config = config_to_dict(config)
    self.compatibility_sections = tuple(compatibility_sections)
    self.read_only = bool(read_only)
    if self.read_only and not os.path.isdir(self.directory):
      raise FileNotFoundError(f"no checkpoint directory {self.directory}")
    options = ocp.CheckpointManagerOptions(
        # A reader deletes nothing: no preservation policy, no clean-up of temporary folders.
        preservation_policy=ocp.checkpoint_managers.LatestN(
            None if self.read_only else max_to_keep),  # None keeps all.
        enable_async_checkpointing=async_save and not self.read_only,
        cleanup_tmp_directories=not self.read_only,
        create=not self.read_only,
        read_only=self.read_only,
        **({"save_interval_steps": 0} if self.read_only else {}),
    )
    with _quiet_read_only_notice():
      self._manager = ocp.CheckpointManager(
          self.directory,
          options=options,
          item_handlers={
              "model": ocp.StandardCheckpointHandler(),
              "optimizer": ocp.StandardCheckpointHandler(),
              "data_state": ocp.JsonCheckpointHandler(),
              "config": ocp.JsonCheckpointHandler(),
          },
      )

  def latest_step(self) -> int | None:
    """The newest complete checkpoint step, or ``None``.

    Returns:
      The largest saved step, or ``None`` when the directory holds no checkpoint.
    """
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    """All complete checkpoint steps, ascending (including ones still being written).

    Returns:
      The saved steps in ascending order (empty when there is none).
    """
    return sorted(self._manager.all_steps())

  def save(
      self,
      step: int,
      *,
      model: nnx.Module,
      optimizer: nnx.Optimizer,
      data_state: Mapping[str, Any] | None = None,
  ) -> bool:
    """Writes checkpoint ``step`` (asynchronously unless ``async_save=False``).

    Args:
      step: The step (number of applied updates) the state belongs to.
      model: The model.
      optimizer: Its optimizer.
      data_state: JSON-serializable data iterator state (``iterator.get_state()``).

    Returns:
      ``True`` if a save was started, ``False`` if ``step`` already exists.

    Raises:
      ValueError: if ``data_state`` is not JSON-serializable (checked before anything is
        written), or the checkpointer is ``read_only``.
    """
    if self.read_only:
      raise ValueError(f"Checkpointer(read_only=True) of {self.directory} cannot save step {step}")
    try:  # Fail here, not in the background thread halfway through the save.
      data_state = json.loads(json.dumps(dict(data_state or {}), allow_nan=False))
    except (TypeError, ValueError) as e:
      raise ValueError(f"data_state must be JSON-serializable, got {data_state!r}: {e}") from e
    if step in self._manager.all_steps():
      return False
    args = ocp.args.Composite(
        model=ocp.args.StandardSave(nnx.state(model)),
        optimizer=ocp.args.StandardSave(nnx.state(optimizer)),
        data_state=ocp.args.JsonSave(data_state),
        config=ocp.args.JsonSave(self.config if self.config is not None else {}),
    )
    return bool(self._manager.save(step, args=args, force=True))

  def saved_config(self, step: int | None = None) -> dict[str, Any] | None:
    """The config dict stored with ``step`` (default: latest); ``None`` if it has none.

    Args:
      step: Checkpoint step to read; ``None`` means the latest.

    Returns:
      The JSON config dict saved with the checkpoint, or ``None`` if it was saved without one.

    Raises:
      FileNotFoundError: if there is no checkpoint (for ``step``).
    """
    step = self._resolve_step(step)
    restored = self._manager.restore(step, args=ocp.args.Composite(config=ocp.args.JsonRestore()))
    return restored["config"] or None

  def check_compatible(self, step: int | None = None) -> None:
    """Raises ``ValueError`` naming every differing config field, if the config does not match.

    Args:
      step: Checkpoint to compare with (default: latest).

    Raises:
      ValueError: ``"checkpoint <dir>/<step> is incompatible with the current config:
        model.d_model: checkpoint has 128, current config has 64"``.
    """
    step = self._resolve_step(step)
    saved = self.saved_config(step)
    if saved is None or self.config is None:
      return
    differences = config_differences(saved, self.config, sections=self.compatibility_sections)
    if differences:
      raise CheckpointMismatchError(
          f"checkpoint {self.directory}/{step} is incompatible with the current config: "
          + "; ".join(differences))

  def restore(
      self, model: nnx.Module, optimizer: nnx.Optimizer | None = None, *,
      step: int | None = None) -> RestoredCheckpoint:
    """Restores ``step`` (default: latest readable) into ``model`` and ``optimizer`` in place.

    The config is compared first (:meth:`check_compatible`; without a current config, the saved
    one against ``model.config`` when the model has one), then the saved variable paths, shapes
    and dtypes against the abstract state of ``model`` / ``optimizer``; only then are arrays read,
    into that abstract target, and written in with ``nnx.update``.

    Without ``step``, a newest checkpoint that cannot be read (truncated or corrupt files) is
    skipped with a warning naming it and the step restored instead, and moved aside to
    ``<step>.unreadable``; the next older one is tried, and so on.

    Args:
      model: A model built from the current config (its values are overwritten).
      optimizer: Its optimizer, or ``None`` to restore the model alone (e.g. for evaluation).
      step: Checkpoint step; default the latest readable one.

    Returns:
      The :class:`RestoredCheckpoint` (step, data state, saved config, skipped steps).

    Raises:
      FileNotFoundError: if there is no checkpoint (or not ``step``).
      CheckpointMismatchError: a ``ValueError`` naming the differing config fields or
        variables, if incompatible.
      RuntimeError: if no checkpoint can be read (naming each step and its error).
    """
    if step is not None:
      return self._restore_step(model, optimizer, self._resolve_step(step))
    self._resolve_step(None)  # FileNotFoundError when there is none.
    failures: list[tuple[int, str]] = []
    for candidate in sorted(self._manager.all_steps(), reverse=True):
      try:
        restored = self._restore_step(model, optimizer, candidate)
      except (CheckpointMismatchError, FileNotFoundError):
        raise
      except Exception as e:  # pylint: disable=broad-except
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        failures.append((candidate, reason))
        continue
      if failures:
        for bad, reason in failures:
          message = (f"checkpoint step {bad} in {self.directory} is unreadable ({reason}); "
                     f"resuming from the previous committed checkpoint step {candidate}")
          logging.warning(message)
          if not self.read_only:  # A reader leaves the writer's files alone.
            self._set_aside(bad)
        restored = dataclasses.replace(restored, skipped=tuple(b for b, _ in failures))
      return restored
    raise RuntimeError(f"no readable checkpoint in {self.directory}: " + "; ".join(
        f"step {bad}: {reason}" for bad, reason in failures))

  def _set_aside(self, step: int) -> None:
    """Renames an unreadable step directory to ``<step>.unreadable`` (kept for inspection)."""
    source = os.path.join(self.directory, str(step))
    if os.path.isdir(source):
      target = source + ".unreadable"
      suffix = 1
      while os.path.exists(target):
        suffix += 1
        target = f"{source}.unreadable{suffix}"
      os.rename(source, target)
    self._manager.reload()

  def _restore_step(self, model: nnx.Module, optimizer: nnx.Optimizer | None,
                    step: int) -> RestoredCheckpoint:
    self.check_compatible(step)
    if self.config is None:
      differences = model_config_differences(self.saved_config(step) or {}, model)
      if differences:
        raise CheckpointMismatchError(
            f"checkpoint {self.directory}/{step} does not fit the current model: "
            + "; ".join(differences))
    targets = {"model": model}
    if optimizer is not None:
      targets["optimizer"] = optimizer
    abstract = {name: _abstract_state(node) for name, node in targets.items()}
    metadata = self._manager.item_metadata(step)
    mismatches = []
    for name, target in abstract.items():
      mismatches += _target_mismatches(name, metadata[name].tree, target)
    if mismatches:
      raise CheckpointMismatchError(
          f"checkpoint {self.directory}/{step} does not fit the current model/optimizer: "
          + "; ".join(mismatches))
    args = {name: ocp.args.StandardRestore(target) for name, target in abstract.items()}
    restored = self._manager.restore(
        step,
        args=ocp.args.Composite(
            data_state=ocp.args.JsonRestore(), config=ocp.args.JsonRestore(), **args))
    for name, node in targets.items():
      nnx.update(node, restored[name])
    return RestoredCheckpoint(
        step=step, data_state=dict(restored["data_state"] or {}),
        config=restored["config"] or None)

  def _resolve_step(self, step: int | None) -> int:
    steps = self._manager.all_steps()
    if step is None:
      step = self._manager.latest_step()
      if step is None:
        raise FileNotFoundError(f"no checkpoint in {self.directory}")
    elif step not in steps:
      raise FileNotFoundError(
          f"no checkpoint for step {step} in {self.directory}; available steps {sorted(steps)}")
    return step

  def wait_until_finished(self) -> None:
    """Blocks until pending asynchronous saves (and old-step deletions) are done."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    """Waits for pending saves and releases the manager."""
    self._manager.wait_until_finished()
    self._manager.close()

  def __enter__(self) -> Checkpointer:
    return self

  def __exit__(self, *exc_info: Any) -> None:
    self.close()
