"""JSON-lines metrics log: ``metrics.jsonl`` in the workdir, one object per log event.

Each line is ``{"step": int, "split": str, "wall_time": float, "metrics": {...}}`` where
``wall_time`` is seconds since the epoch (``time.time()``) and ``metrics`` maps names to numbers
(nested dicts allowed). Non-finite numbers are written as ``null`` so every line is strict JSON.
Lines are flushed as they are written, so a killed run keeps everything it logged.

TensorBoard: with ``tensorboard=True`` and ``tensorboardX`` installed (``pip install -e
".[tensorboard]"``, which also installs the ``tensorboard`` viewer; optional), every numeric
metric is also written as a scalar ``<split>/<name>`` to event files in
``<workdir>/tensorboard/`` by tensorboardX's background writer thread, so the training step does
not wait for it (``tensorboard --logdir runs``). Evaluations (perplexity against length) have
their own event folders below it (:mod:`pejax.eval.tensorboard_curves`).
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Mapping

import numpy as np

METRICS_FILENAME = "metrics.jsonl"
TENSORBOARD_SUBDIR = "tensorboard"


def _tensorboard_writer(workdir: str, purge_step: int | None):
  """A ``tensorboardX.SummaryWriter`` in ``<workdir>/tensorboard``, or ``None`` if unavailable."""
  try:
    import tensorboardX  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  # The suffix keeps a writer opened in the same second as an earlier one (tensorboardX names
  # files by the second) from truncating its file; names still sort by time.
  return tensorboardX.SummaryWriter(
      logdir=os.path.join(workdir, TENSORBOARD_SUBDIR), purge_step=purge_step, flush_secs=10,
      filename_suffix=f".{time.time_ns()}")


def _scalars(metrics: Mapping[str, Any], prefix: str):
  for key, value in metrics.items():
    name = f"{prefix}/{key}"
    if isinstance(value, Mapping):
      yield from _scalars(value, name)
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
      yield name, float(value)


def _to_json_value(value: Any) -> Any:
  if isinstance(value, Mapping):
    return {str(k): _to_json_value(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_to_json_value(v) for v in value]
  if isinstance(value, (str, bool)) or value is None:
    return value
  if isinstance(value, (int, np.integer)):
    return int(value)
  if np.ndim(value) == 0:
    try:
      as_float = float(value)
    except (TypeError, ValueError):
      return str(value)
    return as_float if math.isfinite(as_float) else None
  return _to_json_value(np.asarray(value).tolist())


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
  """Parses a metrics file, skipping a trailing line cut short by a crash.

  Args:
    path: A ``metrics.jsonl`` file or the directory that holds it.

  Returns:
    The records in file order (empty if the file does not exist).
  """
  path = os.fspath(path)
  if os.path.isdir(path):
    path = os.path.join(path, METRICS_FILENAME)
  if not os.path.exists(path):
    return []
  records = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if not line:
        continue
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError:
        continue
  return records


class MetricsWriter:
  """Appends metric records to ``<workdir>/metrics.jsonl``.

  On a fresh run (``resume_step=None``) an existing file is emptied. On resume from a checkpoint
  at step ``s`` the records with ``step <= s`` are kept and later ones (logged by the interrupted
  run after its last checkpoint, and about to be logged again) are dropped, so the file reads as
  one uninterrupted run; new records are appended.

  With ``append=True`` the file is only appended to (later evaluations of a finished run).

  Args:
    workdir: Directory of the run (created if missing).
    resume_step: Step of the restored checkpoint, or ``None`` for a fresh run.
    append: Keep every existing record and append.
    tensorboard: Also write TensorBoard events if ``tensorboardX`` is installed.
  """

  def __init__(self, workdir: str | os.PathLike[str], *, resume_step: int | None = None,
               append: bool = False, tensorboard: bool = False):
    os.makedirs(workdir, exist_ok=True)
    self.path = os.path.join(os.fspath(workdir), METRICS_FILENAME)
    if not append:
      if resume_step is None:
        kept = []
      else:
        kept = [r for r in read_metrics(self.path) if int(r.get("step", 0)) <= resume_step]
      tmp_path = self.path + ".tmp"
      with open(tmp_path, "w", encoding="utf-8") as f:
        for record in kept:
          f.write(json.dumps(record, allow_nan=False) + "\n")
      os.replace(tmp_path, self.path)
    self._file = open(self.path, "a", encoding="utf-8")
    self._tensorboard = _tensorboard_writer(
        os.fspath(workdir), None if append else (resume_step or 0) + 1) if tensorboard else None

  @property
  def tensorboard_enabled(self) -> bool:
    """Whether TensorBoard events are being written."""
    return self._tensorboard is not None

  def write(self, step: int, split: str, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Appends one record and flushes it.

    Args:
      step: Optimizer step the metrics belong to.
      split: ``"train"``, ``"eval"``, ...
      metrics: Names to numbers (Python, numpy or jax scalars; nested mappings allowed).

    Returns:
      The record written.
    """
    record = {
        "step": int(step),
        "split": str(split),
        "wall_time": time.time(),
        "metrics": _to_json_value(metrics),
    }
    self._file.write(json.dumps(record, allow_nan=False) + "\n")
    self._file.flush()
    if self._tensorboard is not None:
      for name, value in _scalars(record["metrics"], record["split"]):
        self._tensorboard.add_scalar(name, value, global_step=record["step"],
                                     walltime=record["wall_time"])
    return record

  def close(self) -> None:
    """Closes the file and the TensorBoard writer (idempotent)."""
    if not self._file.closed:
      self._file.close()
    if self._tensorboard is not None:
      self._tensorboard.close()
      self._tensorboard = None

  def __enter__(self) -> MetricsWriter:
    return self

  def __exit__(self, *exc_info: Any) -> None:
    self.close()


class DiscardingWriter:
  """A :class:`MetricsWriter` stand-in that writes nothing (processes other than 0).

  :meth:`write` returns the record it would have written, so every process keeps the same
  history.
  """

  tensorboard_enabled = False

  def write(self, step: int, split: str, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Builds the record :meth:`MetricsWriter.write` would append, and discards it.

    Args:
      step: Optimizer step the metrics belong to.
      split: ``"train"``, ``"eval"``, ...
      metrics: Names to numbers.

    Returns:
      The record.
    """
    return {"step": int(step), "split": str(split), "wall_time": time.time(),
            "metrics": _to_json_value(metrics)}

  def close(self) -> None:
    """Nothing to close."""

  def __enter__(self) -> DiscardingWriter:
    return self

  def __exit__(self, *exc_info: Any) -> None:
    self.close()
