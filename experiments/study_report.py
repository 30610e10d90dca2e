"""Shared plumbing of the studies: flags, trained-run reuse, verdicts and the markdown report.

A study (``experiments/<name>.py``) sweeps settings, trains small decoders through
:func:`pejax.train.experiment.train_and_evaluate`, measures something, and writes one
self-contained report into its workdir::

    report.md      header (command, date, machine), settings, tables, embedded PNGs, and an
                   "Expectation vs measured" section whose verdicts come from the numbers
    results.json   every measured number plus the verdicts
    *.png          plots (small, dpi 100)

Trained models live elsewhere, under ``config.study.runs_dir``: one sub-directory per model
named by :func:`pejax.train.experiment.default_workdir` (a hash of the settings that define the
model), so re-running a study, or another study with the same settings, reuses the model instead
of training it again.

Command line: ``python launch.py --study=<name>`` (or ``python -m experiments.<name>``, the same
command; or ``--config=experiments/configs/<name>.py``, see :func:`study_config`)::

    --quick                        a few minutes on 2 CPU cores (fewer seeds, steps and lengths)
    --workdir                      report directory (default runs/<study>)
    --seeds=0,1,2                  seeds (default: the study's)
    --shard=I/N                    algorithmic studies: train only every N-th model from the I-th
                                   (0-based), no report; N processes on one runs directory
    --progress                     algorithmic studies: how far the run is (models done,
                                   one-core minutes, time left), from the records; no training
    --config.study.runs_dir=DIR    trained models (default runs/<study>; the convergence
                                   studies: <workdir>/models, whose records git keeps)
    --steps=N, --config.<path>=V   overrides of every base model, e.g. --config.model.d_model=256

Studies define no absl flags; ``launch.py`` builds their :class:`StudyOptions`, and their
``run(options)`` is callable without flags.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
import math
import os
import pathlib
import platform
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from absl import flags
import ml_collections
import numpy as np

# Re-exported: the studies draw their figures with study_report.plot_curves.
from pejax.eval.report import plot_curves, plot_panels  # pylint: disable=unused-import

HELD = "held"
NOT_HELD = "did not hold"
NOT_MEASURED = "not measurable"


# ----------------------------------------------------------------------------------------------
# Options and flags.


class StudyOptionError(ValueError):
  """A study option that does not fit the study (``launch.py`` prints it as a usage error)."""


@dataclasses.dataclass(frozen=True)
class StudyOptions:
  """What a study run was asked for (from flags or from Python).

  Attributes:
    quick: the few-minute variant.
    workdir: report directory; empty means ``runs/<study>``.
    runs_dir: directory of the trained models; empty means ``runs/<study>`` (the convergence
      studies: ``<report dir>/models``, see :meth:`kept_models_dir`).
    seeds: seeds to train; empty means the study's default for the mode.
    pes: PE variants to run (labels such as ``"rope"``, ``"rope+randomized"``); empty means the
      study's own list (studies that sweep PEs by capability; a subset for partial runs).
    steps: training steps of the base models; 0 means the study's default for the mode.
    shard: ``(index, count)``: an algorithmic study trains only the models whose position in
      its seed-major order is ``index`` modulo ``count`` and writes no report (``count``
      processes, e.g. one per core, share one runs directory; the complete command then reuses
      every model and writes the report); ``()`` means every model and the report.
    progress: an algorithmic study prints how far its run is (models done, one-core minutes,
      an estimate of what is left) from the records in its models directory and trains
      nothing.
    overrides: config path -> value applied to every base config before the study's own sweep
      settings (e.g. ``{"model.d_model": 256}``).
    command: the command line, for the report header (default: ``sys.argv``).
  """

  quick: bool = False
  workdir: str = ""
  runs_dir: str = ""
  seeds: tuple = ()
  pes: tuple = ()
  steps: int = 0
  overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  command: str = ""
  shard: tuple = ()
  progress: bool = False

  def __post_init__(self):
    if self.shard:
      index, count = self.shard
      if not (isinstance(index, int) and isinstance(count, int) and count >= 1
              and 0 <= index < count):
        raise StudyOptionError(f"shard must be (index, count) with 0 <= index < count, got "
                               f"{self.shard!r}")

  def report_dir(self, study: str) -> pathlib.Path:
    return pathlib.Path(self.workdir or os.path.join("runs", study))

  def models_dir(self, study: str) -> pathlib.Path:
    return pathlib.Path(self.runs_dir or os.path.join("runs", study))

  def kept_models_dir(self, study: str) -> pathlib.Path:
    """Models of the convergence studies: ``runs_dir``, else ``<report dir>/models``.

    Their per-model records (``fit.json``: steps-to-fit and curve; ``eval.json``: accuracy by
    size) are small and kept beside the report, where git keeps them and ignores the weights
    (``.gitignore``). A full run too long for one session is committed in parts and resumes on
    any clone: a model whose records are there is not trained (or evaluated) again.
    """
    return pathlib.Path(self.runs_dir) if self.runs_dir else self.report_dir(study) / "models"

  def seed_list(self, default: Sequence[int]) -> List[int]:
    return [int(s) for s in (self.seeds or default)]

  def command_line(self) -> str:
    """The command as typed: ``python -m experiments.<name> ...`` or ``python launch.py ...``."""
    if self.command:
      return self.command
    program = pathlib.Path(sys.argv[0])
    if program.parent.name == "experiments" and program.suffix == ".py":
      program_text = f"-m experiments.{program.stem}"
    else:
      program_text = program.name
    return " ".join(["python", program_text] + sys.argv[1:])


def study_config(name: str) -> ml_collections.ConfigDict:
  """The config file of a study: the default experiment plus a ``study`` section.

  ``experiments/configs/<name>.py`` returns it; ``launch.py`` runs the study when a config has
  that section. The experiment fields are the base of every model the study trains; those given
  on the command line (``--config.model.d_model=256``) override the study's own choices.
  """
  from pejax import experiment_config  # pylint: disable=g-import-not-at-top
  config = experiment_config.get_default_config()
  config.study = ml_collections.ConfigDict()
  config.study.name = name  # The study module experiments/<name>.py.
  config.study.quick = False  # The few-minute variant (fewer seeds, steps and lengths).
  config.study.seeds = ""  # Comma-separated seeds; empty means the study's default.
  config.study.pes = ""  # Comma-separated PE variants (e.g. rope,alibi,rope+randomized) of the
  # algorithmic studies (alias --pes); empty means every variant the study sweeps.
  config.study.runs_dir = ""  # Directory of the trained models; empty means runs/<study>
  # (convergence studies: <workdir>/models).
  config.study.shard = ""  # "I/N" (alias --shard): an algorithmic study trains every N-th model
  # from the I-th and writes no report; empty means every model and the report.
  config.study.progress = False  # (alias --progress): an algorithmic study prints how far its
  # run is, from the records in its models directory, and trains nothing.
  return config


def run_as_launch(name: str) -> None:
  """``python -m experiments.<name> [flags]`` = ``python launch.py --study=<name> [flags]``."""
  import runpy  # pylint: disable=g-import-not-at-top
  root = pathlib.Path(__file__).resolve().parents[1]
  sys.argv = [str(root / "launch.py"), f"--study={name}"] + sys.argv[1:]
  runpy.run_path(str(root / "launch.py"), run_name="__main__")


def quiet_logging(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Keeps Orbax's per-file INFO lines out of a study's output unless --verbosity was given."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  if "verbosity" not in flag_values or not flag_values["verbosity"].present:
    logging.set_verbosity(logging.WARNING)


def parse_overrides(items: Optional[Sequence[str]]) -> Dict[str, str]:
  """``["model.d_model=256", ...]`` -> ``{"model.d_model": "256"}`` (values typed later)."""
  out = {}
  for item in items or ():
    if "=" not in item:
      raise ValueError(f"override must look like section.field=value, got {item!r}")
    key, value = item.split("=", 1)
    out[key.strip()] = value.strip()
  return out


def apply_overrides(config: ml_collections.ConfigDict,
                    overrides: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """Sets ``"section.field"`` paths of ``config`` in place (strings cast to the field's type).

  Raises:
    ValueError: naming the path when it does not exist in the config.
  """
  with config.unlocked():
    for path, value in overrides.items():
      *parents, leaf = path.split(".")
      node = config
      for parent in parents:
        if parent not in node:
          raise ValueError(f"override path {path!r} is not a config field")
        node = node[parent]
      if leaf not in node:
        raise ValueError(f"override path {path!r} is not a config field")
      current = node[leaf]
      if isinstance(value, str) and not isinstance(current, str):
        if isinstance(current, bool):
          value = value.lower() in ("1", "true", "yes")
        elif isinstance(current, int):
          value = int(value)
        elif isinstance(current, float):
          value = float(value)
      node[leaf] = value
  return config


# ----------------------------------------------------------------------------------------------
# Trained runs.


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
  from pejax.train import experiment  # pylint: disable=g-import-not-at-top
  return pathlib.Path(runs_dir) / experiment.default_workdir(config).name


def is_trained(run_dir: os.PathLike | str, steps: int) -> bool:
  """Whether ``run_dir`` holds the checkpoint of its final step."""
  return (pathlib.Path(run_dir) / "checkpoints" / str(int(steps))).is_dir()


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


@functools.lru_cache(maxsize=4)
def unigram_loss(data_name: str) -> Optional[float]:
  """Log unigram perplexity (nats/byte) of a corpus's training split; ``None`` for tasks."""
  from pejax import data as data_lib  # pylint: disable=g-import-not-at-top
  from pejax.train import experiment  # pylint: disable=g-import-not-at-top
  if data_lib.is_task(data_name):
    return None
  return math.log(experiment.unigram_perplexity(data_lib.load_corpus(data_name).train))


@functools.lru_cache(maxsize=4)
def load_corpus(data_name: str):
  """The corpus (cached: the studies evaluate many models on the same validation split)."""
  from pejax import data as data_lib  # pylint: disable=g-import-not-at-top
  return data_lib.load_corpus(data_name)


def train_run(config: ml_collections.ConfigDict, *, runs_dir: os.PathLike | str,
              reuse_dirs: Sequence[os.PathLike | str] = (),
              log: Callable[[str], None] = print, quiet: bool = False) -> RunInfo:
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

  Returns:
    The :class:`RunInfo`.
  """
  from pejax.train import experiment  # pylint: disable=g-import-not-at-top
  started = time.time()
  steps = int(config.train.steps)
  for candidate in [runs_dir, *reuse_dirs]:
    run_dir = run_dir_for(config, candidate)
    if is_trained(run_dir, steps):
      losses = final_losses(run_dir)
      info = RunInfo(run_dir, steps, losses["train_loss"], losses["valid_loss"],
                     unigram_loss(str(config.data.name)), time.time() - started, True,
                     losses["train_seconds"])
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
  experiment.train_and_evaluate(config, log=(lambda _: None) if quiet else log)
  losses = final_losses(run_dir)
  info = RunInfo(run_dir, steps, losses["train_loss"], losses["valid_loss"],
                 unigram_loss(str(config.data.name)), time.time() - started, False,
                 losses["train_seconds"])
  log(f"trained {run_dir} in {info.seconds:.0f}s: {describe_losses(info)}")
  return info


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
  with :func:`pejax.train.experiment.with_rope_scaling`.

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
  from pejax.train import experiment  # pylint: disable=g-import-not-at-top
  model_config = experiment.decoder_config_from(config, pe=pe)
  model = Decoder(model_config, rngs=nnx.Rngs(params=0))
  directory = pathlib.Path(run_dir) / checkpoint_lib.CHECKPOINT_SUBDIR
  with checkpoint_lib.Checkpointer(directory, config=config) as ckpt:
    ckpt.restore(model)
  return model


def layer_pes(config: ml_collections.ConfigDict) -> tuple:
  """The PE instance of each layer of the decoder ``config`` describes, built abstractly.

  Capabilities that an instance refines from its config (``max_length`` of a learned table,
  ``length_dependent`` of a RoPE scaling) are read here without computing any parameter.

  Args:
    config: an experiment config.

  Returns:
    One :class:`~pejax.nn.PositionalEncoding` per layer (shape-only parameters).

  Raises:
    pejax.train.experiment.ConfigError: if the config cannot build a decoder.
  """
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top
  from pejax.train import experiment  # pylint: disable=g-import-not-at-top
  model_config = experiment.decoder_config_from(config)
  return tuple(nnx.eval_shape(lambda c=pe: registry.build_pe(c, model_config,
                                                             rngs=nnx.Rngs(0)))
               for pe in model_config.layer_pes)


def pe_max_length(config: ml_collections.ConfigDict) -> Optional[int]:
  """Largest position + 1 the config's PE can encode (its ``max_length``), ``None`` if unbounded.

  Args:
    config: an experiment config.

  Returns:
    The smallest ``max_length`` over the layers' PEs (a learned table's size), or ``None``.
  """
  limits = [pe.max_length for pe in layer_pes(config) if pe.max_length is not None]
  return min(limits) if limits else None


def uses_positions(config: ml_collections.ConfigDict) -> bool:
  """Whether any layer's PE has a hook (NoPE has none: positions change nothing).

  Args:
    config: an experiment config.

  Returns:
    ``True`` if some hook of some layer's PE is overridden.
  """
  return any(pe.has_embed or pe.has_rotate or pe.has_bias or pe.has_content_bias
             or pe.has_logits for pe in layer_pes(config))


def runnable_pes(config: ml_collections.ConfigDict,
                 accept: Optional[Callable[[Any], bool]] = None) -> tuple:
  """Every registered PE that can serve the decoder of ``config``, in registry order.

  A PE can when its default config (experiment defaults filled in, e.g. a learned table of
  ``data.train_len`` rows) builds a decoder with the config's dimensions, and ``accept`` (a
  predicate on the PE class, i.e. its capabilities) holds. A PE added as one file joins every
  study that selects with this.

  Args:
    config: the study's base experiment config (its ``pe`` section is replaced per name).
    accept: optional capability filter on the PE class.

  Returns:
    Registry names.
  """
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top
  from pejax.train import experiment  # pylint: disable=g-import-not-at-top
  names = []
  for name in registry.pe_names():
    if accept is not None and not accept(registry.get_pe_class(name)):
      continue
    trial = config.copy_and_resolve_references()
    with trial.unlocked():
      for key in trial.pe.keys():
        if key not in ("name", "randomized_max_position"):
          trial.pe[key] = None
      trial.pe.name = name
    try:
      experiment.decoder_config_from(trial)
    except experiment.ConfigError:
      continue
    names.append(name)
  return tuple(names)


_MISSING = object()  # (A stored value may be None.)


def _cache_digest(key: Mapping[str, Any]) -> str:
  return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def cached_value(path: os.PathLike | str, key: Mapping[str, Any], default: Any = None) -> Any:
  """What :func:`cached` stored at ``path`` for this very ``key``, or ``default`` (no file,
  another key, an unreadable file); computes nothing."""
  path = pathlib.Path(path)
  if not path.exists():
    return default
  try:
    stored = json.loads(path.read_text())
    if stored.get("key_digest") == _cache_digest(key):
      return stored["value"]
  except (OSError, json.JSONDecodeError, KeyError, AttributeError):
    pass
  return default


def cached(path: os.PathLike | str, key: Mapping[str, Any],
           compute: Callable[[], Any]) -> Any:
  """JSON cache: returns the stored value when ``path`` holds the same ``key``, else computes.

  Lets a re-run study skip evaluations it already did (e.g. after a crash or a report tweak).
  """
  path = pathlib.Path(path)
  digest = _cache_digest(key)
  stored = cached_value(path, key, default=_MISSING)
  if stored is not _MISSING:
    return stored
  value = compute()
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_suffix(path.suffix + ".tmp")
  tmp.write_text(json.dumps({"key": key, "key_digest": digest, "value": value}, default=str,
                            allow_nan=True))
  os.replace(tmp, path)
  return value


# ----------------------------------------------------------------------------------------------
# Numbers.


def spread(values: Sequence[Optional[float]]) -> Dict[str, Optional[float]]:
  """Mean, min, max and standard deviation of the finite ``values`` (``None`` when none are)."""
  finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
  if not finite:
    return {"mean": None, "min": None, "max": None, "std": None, "n": 0}
  arr = np.asarray(finite)
  return {"mean": float(arr.mean()), "min": float(arr.min()), "max": float(arr.max()),
          "std": float(arr.std()), "n": len(finite)}


def fmt(value: Optional[float], digits: int = 2) -> str:
  """A number for a table (``n/a`` for missing / non-finite)."""
  if value is None or not math.isfinite(float(value)):
    return "n/a"
  value = float(value)
  if abs(value) >= 1e4:
    return f"{value:.3g}"
  return f"{value:.{digits}f}"


def fmt_spread(stats: Mapping[str, Optional[float]], digits: int = 2) -> str:
  """``mean`` or ``mean [min-max]`` when several values were measured."""
  if stats.get("mean") is None:
    return "n/a"
  if stats.get("n", 1) > 1:
    return (f"{fmt(stats['mean'], digits)} [{fmt(stats['min'], digits)}-"
            f"{fmt(stats['max'], digits)}]")
  return fmt(stats["mean"], digits)


# ----------------------------------------------------------------------------------------------
# Verdicts.


@dataclasses.dataclass(frozen=True)
class Verdict:
  """A published expectation checked against measured numbers.

  Attributes:
    expectation: the published claim, with its source.
    criterion: the explicit test applied to the numbers.
    measured: the numbers the test used, as text.
    held: ``True`` / ``False``, or ``None`` when the numbers needed were not measurable.
    note: optional explanation (e.g. why it did not hold at this scale).
  """

  expectation: str
  criterion: str
  measured: str
  held: Optional[bool]
  note: str = ""

  @property
  def status(self) -> str:
    return NOT_MEASURED if self.held is None else (HELD if self.held else NOT_HELD)

  def to_json(self) -> Dict[str, Any]:
    return {**dataclasses.asdict(self), "status": self.status}


def verdict(expectation: str, criterion: str, measured: str,
            check: Callable[[], Optional[bool]], note: str = "",
            note_if_not_held: str = "") -> Verdict:
  """A :class:`Verdict` whose outcome is ``check()``.

  Missing numbers (``None``, a ``TypeError`` / ``KeyError`` / ``ValueError`` from absent values)
  make it not measurable. ``note_if_not_held`` (e.g. the likely reason at this scale) is attached
  only when the check fails.
  """
  try:
    held = check()
  except (TypeError, KeyError, ValueError, ZeroDivisionError):
    held = None
  if held is not None:
    held = bool(held)
  if held is False and note_if_not_held:
    note = f"{note} {note_if_not_held}".strip()
  return Verdict(expectation, criterion, measured, held, note)


# ----------------------------------------------------------------------------------------------
# Markdown report.


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], *,
                   align: str = "") -> str:
  """A GitHub markdown table; ``align`` is one char per column (``l``/``r``), default: first
  column left, others right."""
  align = align or ("l" + "r" * (len(header) - 1))
  sep = ["---:" if a == "r" else ":---" for a in align]
  lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "|".join(sep) + "|"]
  for row in rows:
    lines.append("| " + " | ".join(str(c) for c in row) + " |")
  return "\n".join(lines)


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
  """The CPU's model name, with its family number when the name alone is generic.

  Timings and their ratios change with the CPU (the machines here change between sessions,
  e.g. "AMD EPYC" of families 23 and 26), so the reports name it.

  Args:
    cpuinfo: the Linux CPU description file (absent elsewhere: ``platform.processor()``).

  Returns:
    e.g. ``"AMD EPYC (family 26, model 2)"``, or ``"unknown CPU"``.
  """
  try:
    fields = {}
    for line in pathlib.Path(cpuinfo).read_text().splitlines():
      key, _, value = line.partition(":")
      fields.setdefault(key.strip(), value.strip())
  except OSError:
    return platform.processor() or "unknown CPU"
  name = fields.get("model name") or platform.processor() or "unknown CPU"
  if "cpu family" in fields:
    name += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
  return name


def machine() -> str:
  """OS, CPU, cores and the JAX backend."""
  import jax  # pylint: disable=g-import-not-at-top
  return (f"{platform.system()} {platform.machine()}, {cpu_model()}, {os.cpu_count()} cores, "
          f"jax {jax.__version__} on {jax.devices()[0].platform}")


class Report:
  """A markdown report assembled section by section, then written with its JSON.

  Args:
    title: the report's title.
    study: the study's name (default workdir ``runs/<study>``).
    options: the :class:`StudyOptions` of the run (command, mode).
  """

  def __init__(self, title: str, *, study: str, options: StudyOptions):
    self.title = title
    self.study = study
    self.options = options
    self.started = time.time()
    self.parts: List[str] = []
    self.verdicts: List[Verdict] = []
    self.images: List[str] = []
    self.runs: List[RunInfo] = []
    # Non-empty (e.g. "1 seed, 800 steps"): verdicts are printed as indicative, never as a bold
    # held / did not hold. Quick mode is always indicative.
    self.indicative = "quick mode" if options.quick else ""
    # Who decides the indicative verdicts (the last line of the verdict section).
    self.decided_by = "the full run (3 seeds, to convergence)"

  def add_runs(self, runs: Sequence[RunInfo]) -> None:
    """Records the trained models (their training time goes into the header)."""
    self.runs.extend(runs)

  def section(self, heading: str, text: str = "") -> None:
    self.parts.append(f"## {heading}\n\n{text}".rstrip() + "\n")

  def text(self, text: str) -> None:
    self.parts.append(text.rstrip() + "\n")

  def table(self, header: Sequence[str], rows: Sequence[Sequence[Any]], *,
            caption: str = "", align: str = "") -> None:
    block = (f"{caption}\n\n" if caption else "") + markdown_table(header, rows, align=align)
    self.parts.append(block + "\n")

  def image(self, path: os.PathLike | str, alt: str) -> None:
    """Embeds a PNG written into the report directory (by file name, so the folder moves)."""
    name = pathlib.Path(path).name
    self.images.append(name)
    self.parts.append(f"![{alt}]({name})\n")

  def add_verdict(self, v: Verdict) -> Verdict:
    self.verdicts.append(v)
    return v

  def status_text(self, v: Verdict) -> str:
    """The verdict cell: bold status, or ``indicative (...): status`` for quick / 1-seed runs."""
    if self.indicative:
      return f"indicative ({self.indicative}): {v.status}"
    return f"**{v.status}**"

  def verdict_section(self) -> str:
    rows = [[v.expectation, v.criterion, v.measured, self.status_text(v)] for v in self.verdicts]
    lines = ["## Expectation vs measured", "",
             markdown_table(["published expectation", "criterion", "measured", "verdict"], rows,
                            align="llll")]
    by_note: Dict[str, List[str]] = {}  # The same note for several claims is shown once.
    for v in self.verdicts:
      if v.note:
        by_note.setdefault(v.note, []).append(v.expectation.split("(")[0].strip())
    notes = [f"- *{'; '.join(claims)}*: {note}" for note, claims in by_note.items()]
    if notes:
      lines += ["", "Notes:", ""] + notes
    held = sum(v.held is True for v in self.verdicts)
    if self.indicative:
      lines += ["", f"Indicative only ({self.indicative}): {held} of {len(self.verdicts)} "
                f"expectations pointed the expected way; {self.decided_by} decides."]
    else:
      lines += ["", f"{held} of {len(self.verdicts)} expectations held at this scale."]
    return "\n".join(lines) + "\n"

  def markdown(self) -> str:
    elapsed = time.time() - self.started
    mode = "quick" if self.options.quick else "full"
    header = [f"# {self.title}", "",
              f"- command: `{self.options.command_line()}`",
              f"- mode: {mode}",
              f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
              f"- machine: {machine()}",
              f"- study wall time: {elapsed / 60:.1f} min (models reused from earlier runs "
              "are not retrained)"]
    if self.runs:
      total = sum(r.train_seconds or 0.0 for r in self.runs)
      reused = sum(r.reused for r in self.runs)
      header.append(f"- models: {len(self.runs)} ({reused} reused), total training time "
                    f"{total / 60:.1f} min (from their metrics.jsonl)")
    header.append("")
    return "\n".join(header) + "\n" + self.verdict_section() + "\n" + "\n".join(self.parts)

  def write(self, workdir: os.PathLike | str, results: Mapping[str, Any]) -> pathlib.Path:
    """Writes ``report.md`` and ``results.json`` (results + verdicts + header facts)."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "report.md"
    path.write_text(self.markdown())
    payload = {"study": self.study, "title": self.title,
               "mode": "quick" if self.options.quick else "full",
               "command": self.options.command_line(), "machine": machine(),
               "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
               "wall_time_s": time.time() - self.started,
               "indicative": self.indicative,
               "verdicts": [v.to_json() for v in self.verdicts], "results": results}
    (workdir / "results.json").write_text(json.dumps(_json_safe(payload), indent=1) + "\n")
    return path


def _json_safe(value: Any) -> Any:
  if isinstance(value, Mapping):
    return {str(k): _json_safe(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_json_safe(v) for v in value]
  if isinstance(value, (np.floating, float)):
    return float(value) if math.isfinite(float(value)) else None
  if isinstance(value, np.integer):
    return int(value)
  if isinstance(value, pathlib.Path):
    return str(value)
  return value


# ----------------------------------------------------------------------------------------------
# Plots.


def write_report(report: "Report", workdir, results: dict, *, study: str,
                 log: Callable[[str], None] = print) -> dict:
  """Writes ``report`` with ``results`` into ``workdir`` and logs every verdict; returns results."""
  path = report.write(workdir, results)
  log(f"{study}: wrote {path}")
  for v in report.verdicts:
    status = f"indicative: {v.status}" if report.indicative else v.status
    log(f"  [{status}] {v.expectation}: {v.measured}")
  return results
