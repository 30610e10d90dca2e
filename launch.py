r"""pejax entry point: train a small decoder at one length, evaluate it at many.

Examples (tests/test_doc_examples.py runs every one of them):

    python launch.py                                    # RoPE, built-in stdlib corpus (~2 min)
    python launch.py --pe=alibi                         # any registered PE
    python launch.py --config=experiments/configs/quick.py --config.model.num_layers=4
    python launch.py --pe=rope --config.eval.rope_scaling=yarn --config.eval.rope_factor=4
    python launch.py --rope_scaling=yarn --rope_factor=4 --config.pe.original_max_position=64
    python launch.py --pe=kerple_log --config.pe.r1_init_max=0.5   # any field of any PE
    python launch.py --pe=rope,rope,none --sliding_window=64,64,0  # per-layer PE pattern + SWA
    python launch.py --workdir=runs/alibi-L128 --pe=alibi
    python launch.py --workdir=runs/alibi-L128 --eval_only --eval_lens=256,512 --eval_name=long
    python launch.py --study=extrapolation --quick      # a study: sweep, report.md, plots
    python launch.py --init_from_hf=<hf dir> --eval_only --data=<text> --eval_lens=1024,4096 \
        --eval_rope_scaling=yarn,linear          # a pretrained HF model, zero-shot scalings
    python launch.py --init_from_hf=<hf dir> --data=<text> --train_len=4096 \
        --rope_scaling=yarn --rope_factor=4      # fine-tune it with a new scaling
    python -m pejax.compare runs/*                       # one table and one plot

One config (``--config``, a ``get_config()`` file, default experiments/configs/default.py), one
override mechanism (``--config.<path>=value``) and a few aliases (``--pe`` = ``--config.pe.name``,
...; the table ``ALIASES`` below). Nothing below this file reads flags.

A run directory is a record: its training settings are fixed when it is created (a command with
other ones fails naming the field; ``--workdir=<run>`` alone continues it with its own settings),
``--eval_only`` evaluates it with its own config into ``evals/<name>/``. SIGINT / SIGTERM save a
checkpoint, skip evaluation and exit 130 / 143; the same command resumes.

"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from typing import Any, Dict, Optional, Sequence

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from experiments import studies
from pejax import decoder_from_config
from pejax import experiment_config
from pejax import runtime_env
from pejax.nn import pe_names
from pejax.train import experiment
from pejax.train import loop
from pejax.train import run_directory

ROOT = os.path.dirname(os.path.abspath(__file__))
CONFIGS_DIR = os.path.join(ROOT, "experiments", "configs")

# The aliases, resolved in one place (resolve_config): flag -> config path.
ALIASES = {
    "pe": "pe.name", "rope_scaling": "pe.scaling", "rope_factor": "pe.factor",
    "sliding_window": "model.sliding_window",
    "data": "data.name", "train_len": "data.train_len", "steps": "train.steps",
    "eval_lens": "eval.lens", "quick": "study.quick", "seeds": "study.seeds",
    "pes": "study.pes", "runs_dir": "study.runs_dir", "shard": "study.shard",
    "progress": "study.progress",
    "eval_rope_scaling": "eval.rope_scaling", "init_from_hf": "train.init_from_hf",
}
# Multi-process aliases (python -m pejax.parallel.local_cluster appends the first three).
ALIASES.update({
    "coordinator_address": "mesh.coordinator_address", "num_processes": "mesh.num_processes",
    "process_id": "mesh.process_id", "mesh": "mesh.spec",
    "heartbeat_timeout": "mesh.heartbeat_timeout_s",
})
# What a study sweeps itself: a study command may not set these.
STUDY_OWNED = ("pe.name", "seed", "data.name", "pe.scaling", "pe.factor", "eval.",
               "train.resume")


def study_names() -> list[str]:
  """The registered studies (:data:`experiments.studies.STUDIES`), sorted."""
  return sorted(studies.STUDIES)


def define_flags(flag_values: flags.FlagValues = flags.FLAGS,
                 argv: Optional[Sequence[str]] = None) -> None:
  """Defines launch.py's flags in ``flag_values`` (``argv``: the command line, for overrides)."""
  fv = dict(flag_values=flag_values)
  import_pe_modules(sys.argv if argv is None else argv)
  with _config_field_errors(sys.argv if argv is None else argv):  # Parses the default file.
    config_flags.DEFINE_config_file(
        "config", os.path.relpath(os.path.join(CONFIGS_DIR, "default.py")), "Experiment config "
        "file (a get_config() module in experiments/configs/); override any field with "
        "--config.<path>=value (listed above).",
        sys_argv=list(argv) if argv is not None else None, **fv)
  flags.DEFINE_string("workdir", None, "Run directory (default runs/<pe>[-<scaling>]-L<len>-"
                      "<data>-<hash>); for --study, the report directory.", **fv)
  flags.DEFINE_bool("eval_only", False, "Evaluate the run in --workdir with its own config "
                    "(only --config.eval.* / --eval_lens may change) into evals/<name>/.", **fv)
  flags.DEFINE_string("init_from_hf", None, "Alias of --config.train.init_from_hf: a local "
                      "Hugging Face checkpoint directory (llama, mistral, qwen2, qwen3, phi3, "
                      "gemma; with tokenizer.json) to fine-tune on --data (its tokenizer; "
                      "--rope_scaling applies); with --eval_only: perplexity vs --eval_lens of "
                      "that model, zero-shot with each --eval_rope_scaling.", **fv)
  flags.DEFINE_string("eval_rope_scaling", None, "Alias of --config.eval.rope_scaling "
                      "(with --init_from_hf: a comma-separated list).", **fv)
  flags.DEFINE_string("eval_name", "", "Name of the evaluation directory evals/<name>/ "
                      "(default: a UTC timestamp); an existing name is an error.", **fv)
  flags.DEFINE_enum("study", None, study_names(), "Run a study (= --config=experiments/"
                    "configs/<name>.py): sweep, report.md, plots.", **fv)
  flags.DEFINE_string("pe", None, "Alias of --config.pe.name: " + ", ".join(pe_names()) +
                      " (comma-separated: one per layer, cycled).", **fv)
  flags.DEFINE_list("pe_module", None, "Modules to import before anything else, e.g. one "
                    "that registers a PE with pejax.nn.register_pe (then --pe=<its name>).", **fv)
  flags.DEFINE_string("sliding_window", None, "Alias of --config.model.sliding_window.", **fv)
  flags.DEFINE_enum("rope_scaling", None, decoder_from_config.ROPE_SCALINGS,
                    "Alias of --config.pe.scaling (training-time RoPE scaling).", **fv)
  flags.DEFINE_float("rope_factor", None, "Alias of --config.pe.factor.", **fv)
  flags.DEFINE_string("data", None, "Alias of --config.data.name.", **fv)
  flags.DEFINE_integer("train_len", None, "Alias of --config.data.train_len.", lower_bound=8,
                       **fv)
  flags.DEFINE_integer("steps", None, "Alias of --config.train.steps.", lower_bound=1, **fv)
  flags.DEFINE_list("eval_lens", None, "Alias of --config.eval.lens.", **fv)
  flags.DEFINE_bool("quick", None, "Alias of --config.study.quick (with --study).", **fv)
  flags.DEFINE_list("seeds", None, "Alias of --config.study.seeds (with --study).", **fv)
  flags.DEFINE_string("runs_dir", None, "Alias of --config.study.runs_dir (with --study): where "
                      "the study's models live (default runs/<study>; the convergence studies: "
                      "<workdir>/models, whose records git keeps).", **fv)
  flags.DEFINE_list("pes", None, "Alias of --config.study.pes (with --study): the PE variants "
                    "an algorithmic study runs, e.g. rope,alibi,rope+randomized.", **fv)
  flags.DEFINE_string("shard", None, "Alias of --config.study.shard (with --study): I/N trains "
                      "only every N-th model of an algorithmic study from the I-th (0-based) "
                      "and writes no report; N processes, one per core, share one runs "
                      "directory, then the complete command writes the report.", **fv)
  flags.DEFINE_bool("progress", None, "Alias of --config.study.progress (with --study): an "
                    "algorithmic study prints how far its run is (models done, one-core "
                    "minutes, an estimate of the time left, interim results per task) from the "
                    "records in its models directory, and trains nothing.", **fv)
  _define_mesh_flags(fv)


def _define_mesh_flags(fv: Dict[str, Any]) -> None:
  """The multi-process aliases (``ALIASES``' mesh entries)."""
  flags.DEFINE_string("mesh", None, "Alias of --config.mesh.spec (e.g. data=4,model=2).", **fv)
  flags.DEFINE_string("coordinator_address", None, "Alias of --config.mesh.coordinator_address "
                      "(host:port of process 0).", **fv)
  flags.DEFINE_integer("num_processes", None, "Alias of --config.mesh.num_processes.",
                       lower_bound=1, **fv)
  flags.DEFINE_integer("process_id", None, "Alias of --config.mesh.process_id.", lower_bound=0,
                       **fv)
  flags.DEFINE_integer("heartbeat_timeout", None, "Alias of --config.mesh.heartbeat_timeout_s "
                       "(seconds before a silent process counts as lost).", lower_bound=1, **fv)


def import_pe_modules(argv: Sequence[str]) -> None:
  """Imports the ``--pe_module=a,b`` modules named on the command line (before the flags and
  the config's PE fields are defined, so that a PE they register is a valid ``--pe``)."""
  for i, arg in enumerate(argv):
    value = None
    if arg.startswith("--pe_module="):
      value = arg.split("=", 1)[1]
    elif arg == "--pe_module" and i + 1 < len(argv):
      value = argv[i + 1]
    for name in (value or "").split(","):
      if name.strip():
        if ROOT not in sys.path:
          sys.path.insert(0, ROOT)
        importlib.import_module(name.strip())


def _load_config_file(path: str):
  spec = importlib.util.spec_from_file_location("pejax_config_file", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def resolve_config(flag_values: flags.FlagValues = flags.FLAGS):
  """The config and the explicit overrides (``path -> value``, with the flag that set each).

  Order: the config file (``--study=<name>`` picks experiments/configs/<name>.py), then the
  ``--config.<path>`` overrides, then the aliases.
  """
  config = flag_values["config"].value
  overrides: Dict[str, Any] = dict(flag_values["config"].override_values)
  origins = {path: f"--config.{path}" for path in overrides}
  study = flag_values["study"].value
  if study:
    if flag_values["config"].present:
      raise app.UsageError(f"--study={study} picks its own config file; drop --config (or use "
                           f"--config=experiments/configs/{study}.py alone)")
    config = _load_config_file(os.path.join(CONFIGS_DIR, f"{study}.py"))
    config.update_from_flattened_dict(overrides)
  config = config.copy_and_resolve_references()
  with config.unlocked():
    for flag, path in ALIASES.items():
      value = flag_values[flag].value
      if value is None:
        continue
      section, field = path.split(".")
      if section not in config:
        raise app.UsageError(f"--{flag} only takes effect with --study=<name>")
      if isinstance(value, list):
        value = ",".join(value)
      if isinstance(config[section][field], float) and isinstance(value, int):
        value = float(value)
      config[section][field] = value
      overrides[path] = value
      origins[path] = f"--{flag}"
    if flag_values["workdir"].value is not None:
      config.workdir = flag_values["workdir"].value
  return config, overrides, origins


def parse_shard(text: str) -> tuple:
  """``"I/N"`` -> ``(I, N)`` with ``0 <= I < N``; ``""`` -> ``()``.

  Raises:
    app.UsageError: naming the value, for anything else.
  """
  if not text.strip():
    return ()
  parts = text.split("/")
  try:
    index, count = (int(x) for x in parts)
  except ValueError:
    index, count = -1, 0
  if len(parts) != 2 or count < 1 or not 0 <= index < count:
    raise app.UsageError(f"--shard must be I/N with 0 <= I < N (e.g. 0/2), got {text!r}")
  return (index, count)


def run_study(config, overrides: Dict[str, Any], origins: Dict[str, str]) -> None:
  """Runs ``experiments.<config.study.name>.run`` with the explicit overrides."""
  from experiments.study import study_options  # pylint: disable=g-import-not-at-top
  name = str(config.study.name)
  if name not in study_names():
    raise app.UsageError(f"config.study.name must be one of {study_names()}, got {name!r}")
  owned = [origins[p] for p in overrides
           if not p.startswith("study.") and any(p == o or (o.endswith(".") and p.startswith(o))
                                                 for o in STUDY_OWNED)]
  if owned:
    raise app.UsageError(f"--study={name} does not take {', '.join(owned)} (the study sets "
                         "them); use --config.<path>=value for the other config fields")
  try:
    seeds = tuple(int(s) for s in str(config.study.seeds).split(",") if s.strip())
  except ValueError:
    raise app.UsageError(f"seeds must be comma-separated integers, got "
                         f"{config.study.seeds!r}") from None
  pes = tuple(p.strip() for p in str(config.study.get("pes", "") or "").split(",") if p.strip())
  shard = parse_shard(str(config.study.get("shard", "") or ""))
  progress = bool(config.study.get("progress", False))
  # --steps (train.steps) is the step count of the LM studies' models and the step cap of the
  # convergence studies (algorithmic suites, passkey), which read it from the options.
  options = study_options.StudyOptions(
      quick=bool(config.study.quick), workdir=str(config.workdir or ""),
      runs_dir=str(config.study.runs_dir or ""), seeds=seeds, pes=pes, shard=shard,
      progress=progress,
      steps=int(overrides.get("train.steps", 0) or 0),
      overrides={p: v for p, v in overrides.items() if not p.startswith("study.")})
  module = importlib.import_module(f"experiments.{name}")
  for flag, value in (("--pes", pes), ("--shard", shard), ("--progress", progress)):
    if value and not getattr(module, "SELECTS_PES", False):
      raise app.UsageError(f"{flag} only applies to the studies that sweep PE variants "
                           f"(length_generalization, ruoss_suite, kazemnejad_suite, "
                           f"content_tasks), not --study={name}")
  try:
    module.run(options)
  except study_options.StudyOptionError as e:
    raise app.UsageError(str(e)) from None


def main(argv: Sequence[str], flag_values: flags.FlagValues = flags.FLAGS) -> int:
  """Runs the command; returns the exit status (0, or 130 / 143 after SIGINT / SIGTERM)."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {' '.join(argv[1:])}")
  if "verbosity" in flag_values and not flag_values["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # Keep Orbax's per-file INFO lines out of the way.
  config, overrides, origins = resolve_config(flag_values)
  try:
    if "study" in config:
      run_study(config, overrides, origins)
      return 0
    if flag_values["init_from_hf"].value and flag_values["eval_only"].value:
      from pejax.train import pretrained  # pylint: disable=g-import-not-at-top
      pretrained.evaluate_pretrained(flag_values["init_from_hf"].value, config,
                                     name=flag_values["eval_name"].value)
      return 0
    if flag_values["eval_only"].value:
      if not flag_values["workdir"].value:
        raise app.UsageError("--eval_only needs --workdir=<run directory>")
      experiment.evaluate_run(flag_values["workdir"].value, name=flag_values["eval_name"].value,
                              overrides={p: v for p, v in overrides.items() if p != "workdir"})
      return 0
    if flag_values["eval_name"].value:
      raise app.UsageError("--eval_name only takes effect with --eval_only")
    workdir = flag_values["workdir"].value
    if (workdir and os.path.exists(os.path.join(workdir, run_directory.CONFIG_FILENAME))
        and not flag_values["config"].present
        and not any(run_directory.is_training_setting(p) for p in overrides)):
      # --workdir=<run> alone continues that run with its own settings.
      config = run_directory.load_run_config(workdir, overrides)
    result = experiment.train_and_evaluate(config)
  except experiment_config.ConfigError as e:
    raise app.UsageError(str(e)) from None
  except loop.NonFiniteLossError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  return experiment.EXIT_CODES.get(result.stop_reason, 0)


@contextlib.contextmanager
def _config_field_errors(argv: Sequence[str]):
  """A ``--config.<path>`` naming no field raises ``flags.Error`` (not a raw KeyError)."""
  try:
    yield
  except (AttributeError, KeyError) as e:  # ml_collections: an override of a missing field.
    given = [a.split("=", 1)[0] for a in argv if a.startswith("--config.")]
    raise flags.IllegalFlagValueError(
        f"no config field {str(e).strip(chr(34))} (in {', '.join(given)}); python launch.py "
        "--help lists them") from None


def parse_flags(argv: Sequence[str], flag_values: flags.FlagValues = flags.FLAGS) -> list[str]:
  """``flag_values(argv)``; a ``--config.<path>`` naming no field is a ``flags.Error`` too."""
  with _config_field_errors(argv):
    return flag_values(list(argv))


def run(argv: Sequence[str]) -> int:
  """Parses ``argv`` (``["launch.py", "--pe=alibi", ...]``) into fresh flags and runs it.

  The same path as the command line, callable from a notebook or a test. Usage errors raise
  ``app.UsageError`` (bad flag values: ``flags.Error``).
  """
  flag_values = flags.FlagValues()
  define_flags(flag_values, argv)
  return main(parse_flags(argv, flag_values), flag_values)


def _help_doc() -> str:
  """This docstring followed by every config field, grouped, with its default (``--help``)."""
  text = (__doc__ + "Config fields and their defaults (experiments/configs/default.py):\n\n"
          + experiment_config.help_text())
  return text.replace("%", "%%")


if __name__ == "__main__":
  runtime_env.apply_runtime_env()  # Re-executes once with the allocator settings.
  __doc__ = _help_doc()  # pylint: disable=redefined-builtin
  try:
    define_flags()
  except flags.Error as e:
    print(f"launch.py: error: {e}", file=sys.stderr)
    sys.exit(2)

  def _main(argv: Sequence[str]) -> None:
    try:
      sys.exit(main(argv))
    except app.UsageError as e:  # One line, not the whole --help text.
      print(f"launch.py: error: {e}", file=sys.stderr)
      sys.exit(2)

  app.run(_main, flags_parser=parse_flags)
