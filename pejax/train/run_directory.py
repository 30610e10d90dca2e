"""The run directory as a record: its ``config.json``, ``status.json`` and final numbers.

A run directory's training config is fixed when the run is created (:func:`open_run`); a
command with other training settings (:func:`training_settings`) fails before writing anything.
Evaluations write their own ``evals/<name>/`` folders (:func:`new_eval_dir`) and never
overwrite. Records written before the PE interface v2 are read through
:func:`upgrade_saved_config`.

Layout (see :mod:`pejax.train.experiment` for the files training and evaluation add)::

    config.json      the experiment config, written once when the run is created
    status.json      training | preempted | finished
    evals/<name>/    each later evaluation
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pathlib
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

import ml_collections

from pejax import experiment_config
from pejax import parallel
from pejax.experiment_config import ConfigError
from pejax.json_file import write_json_atomic
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import metrics as metrics_lib

CONFIG_FILENAME = "config.json"
STATUS_FILENAME = "status.json"
EVALS_SUBDIR = "evals"
# Config sections whose values change what a checkpoint means (hashed into the default workdir).
_IDENTITY_SECTIONS = ("model", "pe", "data", "optim", "seed")
_TRAINING_RUN_FIELDS = ("steps", "init_from", "init_from_hf")  # train.* fields defining a run.


def config_paths(tree: Dict[str, Any], prefix: str = "") -> Iterator[Tuple[str, Any]]:
  """``("model.d_model", 64)`` for every leaf of a nested config dict, in order.

  Args:
    tree: a config as nested dicts (``config_to_dict`` of a ``ConfigDict``, a ``config.json``).
    prefix: prepended to every path (``"pe."`` walks a section as part of the whole config).

  Yields:
    ``(dotted path, value)`` pairs.
  """
  for key, value in tree.items():
    path = f"{prefix}{key}"
    if isinstance(value, dict):
      yield from config_paths(value, path + ".")
    else:
      yield path, value


# ----------------------------------------------------------------------------------------------
# What defines a run.


def training_settings(config: Any) -> Dict[str, Any]:
  """The fields that define what a run trains (flattened ``path -> value``).

  ``model``, ``pe``, ``data``, ``optim``, ``seed``, ``train.steps`` and ``train.init_from``; the
  evaluation, mesh, logging and checkpoint-interval settings are free to change between commands.

  Args:
    config: the experiment config (a ``ConfigDict`` or a parsed ``config.json``).

  Returns:
    ``{"pe.name": "rope", "train.steps": 1000, ...}`` (unset PE fields left out).
  """
  as_dict = checkpoint_lib.config_to_dict(config) or {}
  flat = {}
  for section in _IDENTITY_SECTIONS:
    value = as_dict.get(section)
    if isinstance(value, dict):
      for key, item in config_paths(value, section + "."):
        if section == "pe" and item is None:  # Unset PE fields: the PE's defaults.
          continue
        later = key[len("model."):] if section == "model" else None
        if later in experiment_config.LATER_MODEL_FIELDS and (
            item == experiment_config.LATER_MODEL_FIELDS[later]):
          continue  # As in runs recorded before the field existed.
        flat[key] = item
    else:
      flat[section] = value
  train = as_dict.get("train", {})
  for key in _TRAINING_RUN_FIELDS:
    flat[f"train.{key}"] = train.get(key)
  return flat


def training_differences(saved: Any, current: Any) -> List[str]:
  """``"pe.name: run has 'rope', this command has 'alibi'"`` for each differing training field.

  Args:
    saved: the run's config (its ``config.json``).
    current: this command's config.

  Returns:
    One line per differing :func:`training_settings` field, sorted by path.
  """
  old, new = training_settings(saved), training_settings(current)
  missing = "<missing>"
  return [f"{path}: run has {old.get(path, missing)!r}, this command has "
          f"{new.get(path, missing)!r}"
          for path in sorted(set(old) | set(new)) if old.get(path) != new.get(path)]


def is_training_setting(path: str) -> bool:
  """Whether a config path is one of the :func:`training_settings` (fixed for a run)."""
  return (path.split(".")[0] in _IDENTITY_SECTIONS
          or path in tuple(f"train.{k}" for k in _TRAINING_RUN_FIELDS))


def run_name(config: ml_collections.ConfigDict) -> str:
  """``<pe>[-<scaling>x<factor>]-L<train_len>-<data>-<hash>``: ``rope-yarnx4-L128-stdlib-1a2b3c``.

  The hash covers every training setting (:func:`training_settings`), so the same settings map
  to the same directory (and resume) and different ones never share it.

  Args:
    config: the experiment config (``pe``, ``data`` and the training settings are read).

  Returns:
    The directory name (not a path).
  """
  digest = hashlib.sha1(json.dumps(training_settings(config), sort_keys=True,
                                   default=str).encode()).hexdigest()[:6]
  data_name = pathlib.Path(str(config.data.name)).name or "data"
  scaling = str(config.pe.get("scaling") or "none")
  parts = [str(config.pe.name).replace(",", "+")]
  if scaling != "none":
    parts.append(f"{scaling}x{float(config.pe.get('factor') or 1.0):g}")
  parts += [f"L{int(config.data.train_len)}", data_name, digest]
  return "-".join(parts)


def default_workdir(config: ml_collections.ConfigDict) -> pathlib.Path:
  """``runs/<run_name>`` (:func:`run_name`)."""
  return pathlib.Path("runs") / run_name(config)


def eval_settings(config: Any) -> Dict[str, Any]:
  """The ``eval`` section of a config (a ``ConfigDict`` or a parsed ``config.json``) as a dict."""
  return (checkpoint_lib.config_to_dict(config) or {}).get("eval", {})


# ----------------------------------------------------------------------------------------------
# config.json


def open_run(config: ml_collections.ConfigDict) -> pathlib.Path:
  """The run directory of ``config``, created with its ``config.json`` unless it exists.

  An existing run keeps its ``config.json``: a command whose training settings differ fails
  here, before anything is written, naming each differing field.

  Args:
    config: the experiment config (``workdir`` empty: :func:`default_workdir`).

  Returns:
    The run directory.

  Raises:
    ConfigError: the run directory holds a run trained with other settings.
  """
  workdir = pathlib.Path(config.workdir) if config.workdir else default_workdir(config)
  saved_path = workdir / CONFIG_FILENAME
  if saved_path.exists():
    try:
      saved = upgrade_saved_config(json.loads(saved_path.read_text()))
    except json.JSONDecodeError as e:
      raise ConfigError(f"{saved_path} is not valid JSON ({e}); not touching that run") from None
    differences = training_differences(saved, config)
    if differences:
      raise ConfigError(
          f"workdir {str(workdir)!r} holds a run trained with other settings ("
          + "; ".join(differences) + "); a run directory is a record: use another --workdir, "
          "or --eval_only to evaluate that run")
    return workdir
  if (workdir / checkpoint_lib.CHECKPOINT_SUBDIR).exists():
    return workdir  # An older run without config.json: the checkpoint check still applies.
  if parallel.is_coordinator():
    workdir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(saved_path, json.loads(config.to_json_best_effort()))
  return workdir


def load_run_config(workdir: os.PathLike | str,
                    overrides: Optional[Dict[str, Any]] = None) -> ml_collections.ConfigDict:
  """The config a run was created with (its ``config.json``), then ``overrides`` applied.

  Args:
    workdir: the run directory.
    overrides: flattened ``path -> value`` changes applied after loading.

  Returns:
    The full experiment config (defaults for fields the saved file lacks).

  Raises:
    ConfigError: the directory has no ``config.json``.
  """
  workdir = pathlib.Path(workdir)
  saved_path = workdir / CONFIG_FILENAME
  if not saved_path.exists():
    raise ConfigError(f"{str(workdir)!r} is not a run directory (no {CONFIG_FILENAME})")
  config = experiment_config.get_default_config()
  saved = upgrade_saved_config(json.loads(saved_path.read_text()))
  with config.unlocked():
    config.update_from_flattened_dict(
        {k: v for k, v in config_paths(saved) if _has_path(config, k)})
    for path, value in (overrides or {}).items():
      config.update_from_flattened_dict({path: value})
    config.workdir = str(workdir)
  return config


def _has_path(config: ml_collections.ConfigDict, path: str) -> bool:
  node = config
  for key in path.split("."):
    if not hasattr(node, "keys") or key not in node:
      return False
    node = node[key]
  return True


# Run records written before the PE interface v2 name the PE fields ``pe.rope_*`` / ``pe.t5_*``
# and hold every PE's field, the unused ones at their defaults (0: "the training length").
# Old key -> (new key, old default).
LEGACY_PE_FIELDS = {
    "rope_base": ("base", 10000.0), "rope_layout": ("layout", "half"),
    "rope_fraction": ("fraction", 1.0), "rope_scaling": ("scaling", "none"),
    "rope_factor": ("factor", 1.0), "rope_original_max_position": ("original_max_position", 0),
    "t5_num_buckets": ("num_buckets", 32), "t5_max_distance": ("max_distance", 128),
    "max_position": ("max_position", 0),
}


def upgrade_saved_config(saved: Dict[str, Any]) -> Dict[str, Any]:
  """A saved config (``config.json``) with the old ``pe`` field names renamed.

  ``pe.rope_base`` -> ``pe.base``, ``pe.rope_layout`` -> ``pe.layout``, ``pe.rope_fraction`` ->
  ``pe.fraction``, ``pe.rope_scaling`` -> ``pe.scaling``, ``pe.rope_factor`` -> ``pe.factor``,
  ``pe.rope_original_max_position`` -> ``pe.original_max_position``, ``pe.t5_num_buckets`` ->
  ``pe.num_buckets``, ``pe.t5_max_distance`` -> ``pe.max_distance``. An old field at its old
  default becomes unset (``None``: the PE's default, the same value), since old records hold
  every field whether the PE used it or not; ``rope_factor`` is kept with a scaling. A record
  in the current form is returned unchanged.

  Args:
    saved: the parsed ``config.json``.

  Returns:
    A new dict (the input is not modified).
  """
  pe = saved.get("pe")
  if not isinstance(pe, dict) or not any(k in pe for k in LEGACY_PE_FIELDS if k != "max_position"):
    return saved
  scaling = pe.get("rope_scaling", "none")
  upgraded = {k: v for k, v in pe.items() if k not in LEGACY_PE_FIELDS}
  for old, (new, default) in LEGACY_PE_FIELDS.items():
    if old not in pe:
      continue
    keep = old == "rope_factor" and scaling not in ("none", "", None)
    upgraded[new] = pe[old] if keep or pe[old] != default else None
  return {**saved, "pe": upgraded}


# ----------------------------------------------------------------------------------------------
# status.json


def run_status(workdir: os.PathLike | str) -> Dict[str, Any]:
  """``status.json`` of a run: ``{"state": "training" | "preempted" | "finished" | ...}``.

  A directory without one (an older run) reads as finished when it has ``results.json``.

  Args:
    workdir: the run directory.

  Returns:
    The parsed ``status.json`` (at least a ``"state"`` key; ``"unknown"`` when unreadable).
  """
  workdir = pathlib.Path(workdir)
  try:
    return json.loads((workdir / STATUS_FILENAME).read_text())
  except (OSError, json.JSONDecodeError):
    return {"state": "finished" if (workdir / "results.json").exists() else "unknown"}


def is_finished(workdir: os.PathLike | str) -> bool:
  """Whether a run trained to its last step and wrote its results (never a partial run).

  Args:
    workdir: the run directory.

  Returns:
    True only when its status is ``"finished"``.
  """
  return run_status(workdir).get("state") == "finished"


def set_status(workdir: pathlib.Path, state: str, **facts: Any) -> None:
  """Writes ``status.json``: ``{"state": state, "time": <now>, **facts}``.

  Args:
    workdir: the run directory.
    state: ``"training"``, ``"preempted"``, ``"finished"`` or an early stop's reason.
    **facts: more fields (``step``, ``signal``).
  """
  write_json_atomic(workdir / STATUS_FILENAME, {"state": state, "time": time.time(), **facts})


# ----------------------------------------------------------------------------------------------
# Evaluations and final numbers.


def new_eval_dir(workdir: pathlib.Path, name: str) -> pathlib.Path:
  """``evals/<name or UTC timestamp>``, a fresh directory (an existing name is an error).

  Args:
    workdir: the run directory.
    name: the evaluation's folder name; empty for a UTC timestamp (``-2``, ``-3``... appended
      when taken).

  Returns:
    The folder's path (not created).

  Raises:
    ConfigError: ``name`` is not a plain directory name, or that evaluation exists.
  """
  base = workdir / EVALS_SUBDIR
  if name:
    if "/" in name or name in (".", ".."):
      raise ConfigError(f"eval name must be a plain directory name, got {name!r}")
    out = base / name
    if out.exists():
      raise ConfigError(f"evaluation {str(out)!r} already exists; evaluations are never "
                        "overwritten, choose another --eval_name")
  else:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out, k = base / stamp, 1
    while out.exists():
      k += 1
      out = base / f"{stamp}-{k}"
  return out


def final_numbers(workdir: os.PathLike | str) -> Dict[str, Any]:
  """The run's final training and validation numbers from its ``metrics.jsonl``.

  Args:
    workdir: the run directory.

  Returns:
    ``{"train_loss": window-mean training loss of the last logging window, "train_window":
    [first, last] steps of that window, "valid_loss": validation loss at the training length
    of the last validation, "valid_step": its step}`` (``None`` where not logged).
  """
  train_loss = valid_loss = valid_step = None
  window = None
  previous_train_step = 0
  for record in metrics_lib.read_metrics(workdir):
    step = int(record.get("step", 0))
    if record.get("split") == "train":
      train_loss = record.get("metrics", {}).get("loss")
      window = [previous_train_step + 1, step]
      previous_train_step = step
    elif record.get("split") == "eval":
      valid_loss, valid_step = record.get("metrics", {}).get("loss"), step
  return {"train_loss": train_loss, "train_window": window, "valid_loss": valid_loss,
          "valid_step": valid_step}


def describe_final_numbers(final: Dict[str, Any], *, train_len: int,
                           unigram: Optional[float]) -> str:
  """``final train loss 1.234 (window mean, steps 91-100); validation loss ...`` in one line.

  Args:
    final: :func:`final_numbers`.
    train_len: the training length (where the validation loss was measured).
    unigram: the unigram perplexity of the training split, or ``None``.

  Returns:
    The line (``"no training metrics logged"`` when there are none).
  """
  parts = []
  if final.get("train_loss") is not None:
    a, b = final["train_window"]
    parts.append(f"final train loss {final['train_loss']:.3f} (window mean, steps {a}-{b})")
  if final.get("valid_loss") is not None:
    parts.append(f"validation loss {final['valid_loss']:.3f} (L={train_len}, step "
                 f"{final['valid_step']})")
  if unigram:
    parts.append(f"unigram {math.log(unigram):.3f} nats")
  return "; ".join(parts) or "no training metrics logged"
