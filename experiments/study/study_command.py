"""``launch.py --study=<name>``: the study part of the command line (a floor above pejax.cli).

:data:`STUDIES` is what ``launch.py`` hands to :func:`pejax.cli.command_line`: the registered
names, where each study's config file is, and how a resolved study config runs.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Dict, Optional

from experiments import studies
from experiments.study import study_options
from pejax import cli

CONFIGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "configs")
# What a study sweeps itself: a study command may not set these.
STUDY_OWNED = ("pe.name", "seed", "data.name", "pe.scaling", "pe.factor", "eval.",
               "train.resume")


def study_names() -> list[str]:
  """The registered studies (:data:`experiments.studies.STUDIES`), sorted."""
  return sorted(studies.STUDIES)


def config_file(name: str) -> str:
  """The study's ``get_config()`` file, relative to the current directory when it is inside."""
  path = os.path.join(CONFIGS_DIR, f"{name}.py")
  rel = os.path.relpath(path)
  return rel if not rel.startswith("..") else path


# The flags of the studies that sweep PE variants and train many models (the algorithmic
# studies, ``SELECTS_PES = True``); another study declares those it takes in ``STUDY_FLAGS``.
SWEEP_FLAGS = ("--pes", "--shard", "--progress", "--config.study.batched")


def study_flags(module: Any) -> tuple:
  """The sweep flags (:data:`SWEEP_FLAGS`) a study module takes."""
  default = SWEEP_FLAGS if getattr(module, "SELECTS_PES", False) else ()
  return tuple(getattr(module, "STUDY_FLAGS", default))


def studies_taking(flag: str) -> list[str]:
  """The registered studies that take ``flag`` (imports each study's module)."""
  return [n for n in study_names()
          if flag in study_flags(importlib.import_module(f"experiments.{n}"))]


_BATCHED = {"": None, "auto": None, "on": True, "true": True, "off": False, "false": False}


def parse_batched(value: str, *, flag: str = "--config.study.batched") -> Optional[bool]:
  """``--config.study.batched``: ``on`` / ``off`` (also ``true`` / ``false``), or empty / ``auto``
  (``None``: batched on an accelerator only). Anything else is a :class:`CommandLineError`."""
  key = value.strip().lower()
  if key not in _BATCHED:
    raise cli.CommandLineError(f"{flag}={value}: must be on, off or auto")
  return _BATCHED[key]


def parse_shard(text: str) -> tuple:
  """``"I/N"`` -> ``(I, N)`` with ``0 <= I < N``; ``""`` -> ``()``.

  Raises:
    cli.CommandLineError: naming the value, for anything else.
  """
  if not text.strip():
    return ()
  parts = text.split("/")
  try:
    index, count = (int(x) for x in parts)
  except ValueError:
    index, count = -1, 0
  if len(parts) != 2 or count < 1 or not 0 <= index < count:
    raise cli.CommandLineError(f"--shard={text}: must be I/N with 0 <= I < N (e.g. 0/2)")
  return (index, count)


def run_study(config, overrides: Dict[str, Any], origins: Dict[str, str]) -> None:
  """Runs ``experiments.<config.study.name>.run`` with the explicit overrides."""
  name = str(config.study.name)
  if name not in study_names():
    raise cli.CommandLineError(f"config.study.name={name}: no such study; one of "
                               f"{', '.join(study_names())}")
  owned = [origins[p] for p in overrides
           if not p.startswith("study.") and any(p == o or (o.endswith(".") and p.startswith(o))
                                                 for o in STUDY_OWNED)]
  if owned:
    raise cli.CommandLineError(f"--study={name} does not take {', '.join(owned)} (the study "
                               "sets them); use --config.<path>=value for the other config "
                               "fields")
  try:
    seeds = tuple(int(s) for s in str(config.study.seeds).split(",") if s.strip())
  except ValueError:
    raise cli.CommandLineError(f"{origins.get('study.seeds', '--config.study.seeds')}="
                               f"{config.study.seeds}: must be comma-separated integers (e.g. "
                               "0,1,2)") from None
  pes = tuple(p.strip() for p in str(config.study.get("pes", "") or "").split(",") if p.strip())
  shard = parse_shard(str(config.study.get("shard", "") or ""))
  progress = bool(config.study.get("progress", False))
  batched = parse_batched(str(config.study.get("batched", "") or ""),
                         flag=origins.get("study.batched", "--config.study.batched"))
  # --steps (train.steps) is the step count of the LM studies' models and the step cap of the
  # convergence studies (algorithmic suites, passkey), which read it from the options.
  options = study_options.StudyOptions(
      quick=bool(config.study.quick), workdir=str(config.workdir or ""),
      runs_dir=str(config.study.runs_dir or ""), seeds=seeds, pes=pes, shard=shard,
      progress=progress, batched=batched,
      steps=int(overrides.get("train.steps", 0) or 0),
      overrides={p: v for p, v in overrides.items()
                 if not p.startswith("study.") and p != "pe_modules"})
  module = importlib.import_module(f"experiments.{name}")
  for flag, value in (("--pes", pes), ("--shard", shard), ("--progress", progress),
                      ("--config.study.batched", batched is not None)):
    if value and flag not in study_flags(module):
      raise cli.CommandLineError(f"{flag} only applies to the studies "
                                 f"{', '.join(studies_taking(flag))}, not --study={name}")
  try:
    module.run(options)
  except study_options.StudyOptionError as e:
    raise cli.CommandLineError(str(e)) from None


STUDIES = cli.Studies(names=tuple(study_names()), config_file=config_file, run=run_study)
