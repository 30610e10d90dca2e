"""What a study run is asked for: :class:`StudyOptions`, the study config file, overrides.

``launch.py --study=<name>`` (or ``--config=experiments/configs/<name>.py``, whose
``get_config()`` is :func:`study_config`) builds a :class:`StudyOptions` and calls the study's
``run(options)``; ``python -m experiments.<name>`` is the same command (:func:`run_as_launch`).
Studies define no absl flags, so ``run(options)`` is callable from Python.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import sys
from typing import Any, List, Mapping, Optional, Sequence

import ml_collections



class StudyOptionError(ValueError):
  """A study option that does not fit the study (``launch.py`` prints it as a usage error)."""


@dataclasses.dataclass(frozen=True)
class StudyOptions:
  """What a study run was asked for (from flags or from Python).

  Attributes:
    quick: the few-minute variant.
    workdir: report directory; empty means ``runs/<study>``.
    runs_dir: directory of the trained models; empty means ``runs/<study>`` (the convergence
      studies and extrapolation: ``<report dir>/models``, see :meth:`kept_models_dir`).
    seeds: seeds to train; empty means the study's default for the mode.
    pes: PE variants to run (labels such as ``"rope"``, ``"rope+randomized"``); empty means the
      study's own list (studies that sweep PEs by capability; a subset for partial runs).
    steps: training steps of the base models; 0 means the study's default for the mode.
    shard: ``(index, count)``: an algorithmic study (or extrapolation) trains only the models
      whose position in its order is ``index`` modulo ``count`` and writes no report (``count``
      processes, e.g. one per core, share one runs directory; the complete command then reuses
      every model and writes the report); ``()`` means every model and the report.
    progress: an algorithmic study prints how far its run is (models done, one-core minutes,
      an estimate of what is left) from the records in its models directory and trains
      nothing.
    batched: whether an algorithmic study trains the seeds of a (task, variant) as one program
      (:mod:`experiments.algorithmic.batched_fit`: the same models to float32 tolerance);
      ``None`` (the default) batches on an accelerator only (on 2 CPU cores it was slower:
      benchmarks/results/studies_throughput.md).
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
  batched: Optional[bool] = None

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


def select_pes(known: Sequence[str], chosen: Sequence[str], *,
               default: Optional[Sequence[str]] = None) -> tuple:
  """``chosen`` (``--pes``) in the study's order of ``known``; without a choice, ``default``
  (``None``: every one of ``known``).

  Raises:
    StudyOptionError: naming the labels the study does not have, and those it has.
  """
  unknown = [c for c in chosen if c not in known]
  if unknown:
    raise StudyOptionError(f"--pes: {', '.join(unknown)} not among this study's PEs "
                           f"({', '.join(known)})")
  if chosen:
    return tuple(k for k in known if k in chosen)
  return tuple(known if default is None else default)


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
  # algorithmic studies and extrapolation (alias --pes); empty means every variant it sweeps.
  config.study.runs_dir = ""  # Directory of the trained models; empty means runs/<study>
  # (convergence studies and extrapolation: <workdir>/models).
  config.study.shard = ""  # "I/N" (alias --shard): an algorithmic study or extrapolation trains
  # every N-th model from the I-th and writes no report; empty means every model and the report.
  config.study.progress = False  # (alias --progress): an algorithmic study prints how far its
  # run is, from the records in its models directory, and trains nothing.
  config.study.batched = ""  # Algorithmic studies: "on" trains the seeds of a (task, variant)
  # as one program, "off" one model at a time; empty (or "auto") batches on accelerators only.
  return config


def launch_script() -> pathlib.Path:
  """The checkout's ``launch.py`` (this file is ``<root>/experiments/study/study_options.py``)."""
  return pathlib.Path(__file__).resolve().parents[2] / "launch.py"


def run_as_launch(name: str) -> None:
  """``python -m experiments.<name> [flags]`` = ``python launch.py --study=<name> [flags]``."""
  import runpy  # pylint: disable=g-import-not-at-top
  script = launch_script()
  sys.argv = [str(script), f"--study={name}"] + sys.argv[1:]
  runpy.run_path(str(script), run_name="__main__")


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
