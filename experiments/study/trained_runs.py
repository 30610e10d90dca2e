"""Trained decoders of the language-model studies: train once, reuse by settings.

A study's models live under ``config.study.runs_dir``, one directory per model named by
:func:`pejax.train.run_directory.default_workdir` (a hash of the settings that define the
model), so re-running a study, or another study with the same settings, reuses the model
instead of training it again (:func:`train_run`); :func:`load_model` reads one back, optionally
with another PE.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import pathlib
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import ml_collections


@dataclasses.dataclass(frozen=True)
class RunInfo:
  """A trained model on disk and how well it trained.

  Attributes:
    run_dir: the run's workdir (checkpoints, metrics.jsonl, config.json).
    steps: final training step.
    train_loss: mean training loss of the last logging window (nats/byte).
    valid_loss: last validation loss at the training length (nats/byte); ``None`` for tasks.
    unigram_loss: log of the training split's unigram perplexity; ``None`` for tasks.
    seconds: wall time of this call (training, or only the check when reused).
    reused: whether the model was already trained.
    train_seconds: training wall time read from ``metrics.jsonl`` (also for reused runs).
  """

  run_dir: pathlib.Path
  steps: int
  train_loss: Optional[float]
  valid_loss: Optional[float]
  unigram_loss: Optional[float]
  seconds: float
  reused: bool
  train_seconds: Optional[float] = None

  def train_time(self) -> str:
    """Training time for a table, e.g. ``"154 s"`` or ``"154 s (reused)"``."""
    if self.train_seconds is None:
      return "reused" if self.reused else f"{self.seconds:.0f} s"
    return f"{self.train_seconds:.0f} s" + (" (reused)" if self.reused else "")

  def to_json(self) -> Dict[str, Any]:
    out = dataclasses.asdict(self)
    out["run_dir"] = str(self.run_dir)
    return out


def run_dir_for(config: ml_collections.ConfigDict, runs_dir: os.PathLike | str) -> pathlib.Path:
  """``<runs_dir>/<pe>-<data>-<hash>``: same model-defining settings, same directory."""
  from pejax.train import run_directory  # pylint: disable=g-import-not-at-top
  return pathlib.Path(runs_dir) / run_directory.default_workdir(config).name


def is_trained(run_dir: os.PathLike | str, steps: int, *, weights: bool = True) -> bool:
  """Whether ``run_dir`` holds a finished run of ``steps`` steps.

  Args:
    run_dir: the run directory.
    steps: its final step.
    weights: require the checkpoint of the final step (a study that loads the model); ``False``
      also accepts the run's records alone, a ``status.json`` that says finished (a study that
      keeps its models' records in git, not their weights, and reads only cached evaluations).
  """
  run_dir = pathlib.Path(run_dir)
  if (run_dir / "checkpoints" / str(int(steps))).is_dir():
    return True
  if weights or not (run_dir / "status.json").exists():
    return False
  from pejax.train import run_directory  # pylint: disable=g-import-not-at-top
  # ``train.steps`` is part of the directory's name (:func:`run_dir_for`): finished is enough.
  return run_directory.is_finished(run_dir)


def final_losses(run_dir: os.PathLike | str) -> Dict[str, Optional[float]]:
  """Last training-window loss, last validation loss and the training time of ``metrics.jsonl``.

  The training time is extrapolated from the wall-clock stamps of the ``train`` records: the
  time between the first and the last one, scaled by ``last_step / (last_step - first_step)``
  (the first logging window, which includes compilation, has no earlier stamp).
  """
  from pejax.train import read_metrics  # pylint: disable=g-import-not-at-top
  train_loss = valid_loss = None
  stamps = []
  for record in read_metrics(run_dir):
    loss = record.get("metrics", {}).get("loss")
    if record.get("split") == "train":
      train_loss = loss
      if record.get("wall_time") is not None:
        stamps.append((int(record["step"]), float(record["wall_time"])))
    elif record.get("split") == "eval":
      valid_loss = loss
  train_seconds = None
  if len(stamps) >= 2 and stamps[-1][0] > stamps[0][0]:
    train_seconds = ((stamps[-1][1] - stamps[0][1]) * stamps[-1][0]
                     / (stamps[-1][0] - stamps[0][0]))
  return {"train_loss": train_loss, "valid_loss": valid_loss, "train_seconds": train_seconds}


def validation_curve(run_dir: os.PathLike | str) -> List[Tuple[int, float]]:
  """``[(step, validation loss)]`` of a run's ``metrics.jsonl`` (its ``eval`` records), in order."""
  from pejax.train import read_metrics  # pylint: disable=g-import-not-at-top
  return [(int(r["step"]), float(r["metrics"]["loss"])) for r in read_metrics(run_dir)
          if r.get("split") == "eval" and r.get("metrics", {}).get("loss") is not None]


def late_improvement(curve: Sequence[Tuple[int, float]], *, fraction: float = 0.25
                     ) -> Optional[float]:
  """How much the validation loss still fell over the last ``fraction`` of training.

  The relative drop ``(loss then - final loss) / loss then``, where "then" is the last
  evaluation at or before step ``(1 - fraction) * final step`` (a training curve that has
  flattened gives about 0; a negative value: the loss rose). ``None`` with fewer than two
  evaluations or none that early.

  Args:
    curve: ``[(step, loss)]`` (:func:`validation_curve`).
    fraction: the late part of training, in (0, 1).

  Raises:
    ValueError: for ``fraction`` outside (0, 1).
  """
  if not 0.0 < float(fraction) < 1.0:
    raise ValueError(f"fraction must be in (0, 1), got {fraction}")
  if len(curve) < 2:
    return None
  final_step, final_loss = curve[-1]
  earlier = [loss for step, loss in curve[:-1] if step <= (1.0 - fraction) * final_step]
  if not earlier or earlier[-1] <= 0:
    return None
  return (earlier[-1] - final_loss) / earlier[-1]


@functools.lru_cache(maxsize=4)
def unigram_loss(data_name: str) -> Optional[float]:
  """Log unigram perplexity (nats/byte) of a corpus's training split; ``None`` for tasks."""
  from pejax import data as data_lib  # pylint: disable=g-import-not-at-top
  from pejax.eval import unigram_baseline  # pylint: disable=g-import-not-at-top
  if data_lib.is_task(data_name):
    return None
  return math.log(unigram_baseline.unigram_perplexity(data_lib.load_corpus(data_name).train))


@functools.lru_cache(maxsize=4)
def load_corpus(data_name: str):
  """The corpus (cached: the studies evaluate many models on the same validation split)."""
  from pejax import data as data_lib  # pylint: disable=g-import-not-at-top
  return data_lib.load_corpus(data_name)


def train_run(config: ml_collections.ConfigDict, *, runs_dir: os.PathLike | str,
              reuse_dirs: Sequence[os.PathLike | str] = (),
              log: Callable[[str], None] = print, quiet: bool = False,
              weights: bool = True) -> RunInfo:
  """Trains ``config`` under ``runs_dir`` unless a finished identical run exists.

  Looks for the run directory (:func:`run_dir_for`) in ``runs_dir`` and then ``reuse_dirs``; a
  run that reached ``config.train.steps`` is reused as is, an unfinished one in ``runs_dir``
  resumes. Training goes through ``train_and_evaluate`` with its final evaluation reduced to one
  cheap length (the studies evaluate the models themselves).

  Args:
    config: the full experiment config (``workdir`` is ignored and set here).
    runs_dir: where new runs go.
    reuse_dirs: other studies' run directories to look in first-come.
    log: receives one line per finished run (and the training progress unless ``quiet``).
    quiet: keep only the run's summary line, not the training progress.
    weights: reuse a run only with its final checkpoint; ``False`` reuses a finished run from
      its records alone (:func:`is_trained`), for a study that keeps its models' records in git.

  Returns:
    The :class:`RunInfo`.
  """
  from pejax.train import experiment  # pylint: disable=g-import-not-at-top
  started = time.time()
  steps = int(config.train.steps)
  for candidate in [runs_dir, *reuse_dirs]:
    run_dir = run_dir_for(config, candidate)
    if is_trained(run_dir, steps, weights=weights):
      info = _run_info(run_dir, config, steps, started, reused=True)
      log(f"reused {run_dir}: {describe_losses(info)}")
      return info
  run_dir = run_dir_for(config, runs_dir)
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.workdir = str(run_dir)
    config.eval.lens = str(int(config.data.train_len))
    config.eval.mode = "nonoverlap"
    config.eval.num_tokens = 4 * int(config.data.train_len)
    config.eval.rope_scaling = ""
    config.eval.passkey = False
  result = experiment.train_and_evaluate(config, log=(lambda _: None) if quiet else log)
  if result.stop_reason in experiment.EXIT_CODES:
    # Never a model of fewer steps in place of the finished one: a study that went on would
    # evaluate it and cache that evaluation under the finished run's key (found 2026-12-07: an
    # extrapolation model stopped at step 1510 was scored, and the scores were reused after it
    # resumed to 2000). The signal ends the study, as it ends launch.py.
    raise experiment.TrainingInterrupted(run_dir, signal_name=result.stop_reason,
                                         step=result.train.final_step, steps=steps)
  if not is_trained(run_dir, steps, weights=weights):
    raise RuntimeError(f"{run_dir}: training ended at step "
                       f"{result.train.final_step if result.train else '?'} of {steps} "
                       f"({result.stop_reason or 'no final checkpoint'}); it is not a finished "
                       "model to evaluate")
  info = _run_info(run_dir, config, steps, started, reused=False)
  log(f"trained {run_dir} in {info.seconds:.0f}s: {describe_losses(info)}")
  return info


def _run_info(run_dir: pathlib.Path, config: Any, steps: int, started: float, *,
              reused: bool) -> RunInfo:
  """The :class:`RunInfo` of a finished run, from its recorded losses."""
  losses = final_losses(run_dir)
  return RunInfo(run_dir, steps, losses["train_loss"], losses["valid_loss"],
                 unigram_loss(str(config.data.name)), time.time() - started, reused,
                 losses["train_seconds"])


def describe_losses(info: RunInfo) -> str:
  parts = [f"step {info.steps}"]
  for name, value in (("final train loss (window mean)", info.train_loss),
                      ("validation loss (train length)", info.valid_loss),
                      ("unigram", info.unigram_loss)):
    if value is not None:
      parts.append(f"{name} {value:.3f}")
  return ", ".join(parts)


def load_model(run_dir: os.PathLike | str, config: ml_collections.ConfigDict, *,
               pe: Any = None):
  """The trained decoder of ``run_dir``, optionally rebuilt with another PE config.

  The weights do not depend on a RoPE scaling (it only changes the rotation frequencies), so a
  zero-shot context extension is the trained state written into a decoder built with the new
  scaling (as ``train_and_evaluate`` does for ``--config.eval.rope_scaling``); build ``pe``
  with :func:`pejax.decoder_from_config.with_rope_scaling`.

  Args:
    run_dir: a finished run.
    config: the config it was trained with (checked against the checkpoint's).
    pe: PE config(s) used instead of the config's ``pe`` section (``None``: the config's).

  Returns:
    A :class:`pejax.nn.Decoder` holding the trained weights.
  """
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from pejax.nn import Decoder  # pylint: disable=g-import-not-at-top
  from pejax.train import checkpoint as checkpoint_lib  # pylint: disable=g-import-not-at-top
  from pejax import decoder_from_config  # pylint: disable=g-import-not-at-top
  model_config = decoder_from_config.decoder_config_from(config, pe=pe)
  model = Decoder(model_config, rngs=nnx.Rngs(params=0))
  directory = pathlib.Path(run_dir) / checkpoint_lib.CHECKPOINT_SUBDIR
  with checkpoint_lib.Checkpointer(directory, config=config, read_only=True) as ckpt:
    ckpt.restore(model)
  return model
