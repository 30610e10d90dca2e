"""The records of a trained task model on disk: its outcome, weights and unfinished state.

Each model trained by :mod:`experiments.algorithmic.convergence` (alone) or
:mod:`experiments.algorithmic.batched_fit` (with the other seeds of its variant, as one
program) is a directory ``<runs_dir>/<label>-<hash>`` (the hash covers every setting that
defines the model) holding

* ``fit.json``: the key and the :class:`FitResult` of a finished run;
* ``params.npz``: its weights (git keeps the JSON records, not the weights);
* ``progress.npz`` + ``progress.json``: weights, optimizer moments, step, curve, data
  generator state and seconds at the last check of an unfinished run, superseded by
  ``fit.json`` at the end.

Both trainers read and write the same files, so a model finished by either is reused by the
other, and an unfinished one resumes under either. Every file is written atomically (a
temporary file, then a rename): a run killed at any point leaves the previous state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
from typing import Any, Callable, Dict, Mapping, Optional

import numpy as np

from pejax import json_file

RESULT_FILE = "fit.json"
PARAMS_FILE = "params.npz"
PROGRESS_FILE = "progress.npz"  # Weights + optimizer state at the last check of an unfinished run.
PROGRESS_META = "progress.json"  # Its step, curve, best, generator state and elapsed seconds.
EVAL_FILE = "eval.json"  # Test accuracies of a finished model (written by the studies).


@dataclasses.dataclass(frozen=True)
class FitResult:
  """The outcome of training one model to fit (or to its cap).

  Attributes:
    run_dir: the model's directory.
    steps: steps trained (the stop).
    steps_to_fit: the first checked step whose held-out accuracy reached the threshold, or
      ``None`` when the cap came first.
    in_dist: held-out in-distribution exact match at the stop.
    best_in_dist: the best checked value, and ``best_step`` its step.
    best_step: see ``best_in_dist``.
    curve: ``[(step, in-distribution accuracy, mean train loss since the previous check)]``.
    train_seconds: training wall time (checks included, compilation included); a model trained
      with others as one program (``models_together`` > 1) counts its share: each step's time
      divided by the models that took it, plus its own checks.
    reused: whether the result was read from disk.
    machine: where it was trained (:func:`pejax.machine.describe_machine`); empty in records written
      before 2026-12-02 07:00 UTC.
    models_together: models trained as one program with it at its start (1: alone, the only
      value of older records, which do not store the field).
  """

  run_dir: pathlib.Path
  steps: int
  steps_to_fit: Optional[int]
  in_dist: float
  best_in_dist: float
  best_step: int
  curve: tuple
  train_seconds: float
  reused: bool = False
  machine: str = ""
  models_together: int = 1

  @property
  def fit(self) -> bool:
    return self.steps_to_fit is not None

  def to_json(self) -> Dict[str, Any]:
    out = dataclasses.asdict(self)
    out["run_dir"] = str(self.run_dir)
    out["curve"] = [list(c) for c in self.curve]
    if self.models_together == 1:  # The records of a model trained alone keep their fields.
      del out["models_together"]
    return out


def same_key(stored: Any, key: Mapping[str, Any]) -> bool:
  """Whether a key read from JSON is ``key`` (compared in its JSON form)."""
  return stored == json.loads(json.dumps(dict(key), default=str))


def run_dir_for(runs_dir: os.PathLike | str, key: Mapping[str, Any], *, label: str
                ) -> pathlib.Path:
  """``<runs_dir>/<label>-<first 10 hex digits of the SHA-1 of the key's JSON>``."""
  digest = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:10]
  return pathlib.Path(runs_dir) / f"{label}-{digest}"


def save_tree(tree: Any, path: pathlib.Path) -> None:
  """Writes the leaves of ``tree`` to ``path`` (``.npz``, atomically)."""
  import jax  # pylint: disable=g-import-not-at-top
  tmp = path.with_name(path.name + ".tmp.npz")
  np.savez(tmp, *[np.asarray(x) for x in jax.tree.leaves(tree)])
  os.replace(tmp, path)


def read_tree(tree: Any, path: os.PathLike | str,
              same: Callable[[np.ndarray, Any], bool]) -> Optional[Any]:
  """``tree`` with the leaves stored at ``path``; ``None`` when they do not match (``same``)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  leaves, treedef = jax.tree.flatten(tree)
  with np.load(path) as stored:
    saved = [stored[f"arr_{i}"] for i in range(len(stored.files))]
  if len(saved) != len(leaves) or not all(same(a, b) for a, b in zip(saved, leaves)):
    return None
  return jax.tree.unflatten(treedef, [jnp.asarray(a) for a in saved])


def save_params(model, path: pathlib.Path) -> None:
  """Writes the ``nnx.Param`` leaves of ``model`` to ``path`` (atomically)."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  save_tree(nnx.state(model, nnx.Param), path)


def load_params(model, path: os.PathLike | str) -> None:
  """Writes the weights saved by :func:`save_params` into ``model`` (same config).

  Raises:
    FileNotFoundError: naming ``path`` when it is missing (records kept in git hold no weights:
      a run that starts from another run's weights needs the machine that trained it).
    ValueError: if the stored arrays do not fit ``model``.
  """
  from flax import nnx  # pylint: disable=g-import-not-at-top
  if not pathlib.Path(path).exists():
    raise FileNotFoundError(
        f"{path} does not exist: the weights this run starts from are not on this machine (the "
        "records kept in git hold no weights). Run it where its starting run was trained, or "
        f"delete {pathlib.Path(path).parent} to retrain that run here")
  params = read_tree(nnx.state(model, nnx.Param), path, lambda a, b: a.shape == b.shape)
  if params is None:
    raise ValueError(f"{path} does not hold the weights of this model (shapes differ)")
  nnx.update(model, params)


def _training_state(model, optimizer) -> tuple:
  from flax import nnx  # pylint: disable=g-import-not-at-top
  return nnx.state(model, nnx.Param), nnx.state(optimizer)


def save_progress(run_dir: pathlib.Path, key: Mapping[str, Any], model, optimizer,
                  meta: Dict[str, Any]) -> None:
  """Writes the state at a check (arrays first, then the JSON that names them, both atomic).

  Args:
    run_dir: the model's directory.
    key: its key.
    model: the model (its ``nnx.Param`` leaves are stored).
    optimizer: its ``nnx.Optimizer`` (every leaf of its state).
    meta: ``step``, ``best``, ``best_step``, ``acc``, ``curve``, ``rng_state`` (the data
      generator's ``bit_generator.state``) and ``seconds``.
  """
  run_dir.mkdir(parents=True, exist_ok=True)
  save_tree(_training_state(model, optimizer), run_dir / PROGRESS_FILE)
  json_file.write_text_atomic(run_dir / PROGRESS_META,
                              json.dumps({"key": key, **meta}, default=str))


def load_progress(run_dir: pathlib.Path, key: Mapping[str, Any], model, optimizer
                  ) -> Optional[Dict[str, Any]]:
  """Restores ``model`` and ``optimizer`` from an unfinished run; its metadata, else ``None``.

  Raises:
    ValueError: if the stored arrays of this very key do not fit ``model`` / ``optimizer``.
  """
  from flax import nnx  # pylint: disable=g-import-not-at-top
  meta_path, arrays_path = run_dir / PROGRESS_META, run_dir / PROGRESS_FILE
  if not meta_path.exists() or not arrays_path.exists():
    return None
  try:
    meta = json.loads(meta_path.read_text())
  except json.JSONDecodeError:
    return None
  if not same_key(meta.get("key"), key):
    return None
  restored = read_tree(_training_state(model, optimizer), arrays_path,
                       lambda a, b: a.shape == b.shape and a.dtype == b.dtype)
  if restored is None:
    raise ValueError(f"{arrays_path} does not hold the training state of this model (shapes "
                     "or dtypes differ); delete it to train from scratch")
  params, opt_state = restored
  nnx.update(model, params)
  nnx.update(optimizer, opt_state)
  return meta


def read_result(run_dir: pathlib.Path, key: Mapping[str, Any]) -> Optional[FitResult]:
  """The finished run of ``key`` in ``run_dir`` (``fit.json``), else ``None``."""
  path = run_dir / RESULT_FILE
  if not path.exists():  # (The weights may be absent: git keeps records, not weights.)
    return None
  try:
    stored = json.loads(path.read_text())
  except json.JSONDecodeError:
    return None
  if not same_key(stored.get("key"), key):
    return None
  r = stored["result"]
  return FitResult(run_dir=run_dir, steps=int(r["steps"]), steps_to_fit=r["steps_to_fit"],
                   in_dist=float(r["in_dist"]), best_in_dist=float(r["best_in_dist"]),
                   best_step=int(r["best_step"]), curve=tuple(tuple(c) for c in r["curve"]),
                   train_seconds=float(r["train_seconds"]), reused=True,
                   machine=str(r.get("machine", "")),
                   models_together=int(r.get("models_together", 1)))


def write_result(result: FitResult, key: Mapping[str, Any], model) -> None:
  """Finishes a run: ``params.npz`` and ``fit.json`` (atomic), then drops its progress files."""
  run_dir = pathlib.Path(result.run_dir)
  run_dir.mkdir(parents=True, exist_ok=True)
  save_params(model, run_dir / PARAMS_FILE)
  payload = {"key": key, "result": result.to_json()}
  json_file.write_text_atomic(run_dir / RESULT_FILE, json.dumps(payload, indent=1, default=str))
  for name in (PROGRESS_META, PROGRESS_FILE):  # The finished result supersedes them.
    (run_dir / name).unlink(missing_ok=True)


@dataclasses.dataclass(frozen=True)
class Recorded:
  """What a runs directory holds of one model, read without training it.

  Attributes:
    result: the finished run's :class:`FitResult` (``fit.json``), else ``None``.
    step: the last checked step of an unfinished run that can resume (``progress.json`` and
      ``progress.npz``), else ``None``.
    seconds: training seconds so far (the finished run's, or the unfinished one's).

  Whether the finished run's test accuracies are recorded too depends on the study's test
  settings (``scoring.recorded_evals``).
  """

  result: Optional[FitResult] = None
  step: Optional[int] = None
  seconds: float = 0.0


def recorded(runs_dir: os.PathLike | str, key: Mapping[str, Any], *, label: str) -> Recorded:
  """Looks up the model of ``key`` (``convergence.fit_key``) under ``runs_dir`` without
  training it.

  Args:
    runs_dir: where the model directories are.
    key: the model's key.
    label: the readable prefix of its directory name (as given to the trainer).

  Returns:
    Its :class:`Recorded`: empty when neither a record nor an unfinished run of this very key
    is there.
  """
  run_dir = run_dir_for(runs_dir, key, label=label)
  result = read_result(run_dir, key)
  if result is not None:
    return Recorded(result=result, seconds=result.train_seconds)
  if not (run_dir / PROGRESS_FILE).exists():  # No state to resume from: it starts afresh.
    return Recorded()
  try:
    meta = json.loads((run_dir / PROGRESS_META).read_text())
  except (OSError, json.JSONDecodeError):
    return Recorded()
  if not same_key(meta.get("key"), key):
    return Recorded()
  return Recorded(step=int(meta["step"]), seconds=float(meta.get("seconds", 0.0)))
