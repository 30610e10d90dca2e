r"""pejax entry point: train a small decoder at one length, evaluate it at many.

    python launch.py                       # RoPE on the built-in stdlib corpus (~2 min, 2 CPUs)
    python launch.py --pe=alibi            # any registered PE
    python launch.py --pe=rope --eval_rope_scaling=yarn --eval_rope_factor=4
    python launch.py --config=experiments/configs/default.py --config.model.num_layers=4
    python launch.py --study=extrapolation --quick   # a study: sweep, report.md, plots

Flags map onto one experiment config (``pejax.experiment_config``); a ``--config`` file in the
Flax-examples manner is applied first, then the plain flags given on the command line. Nothing
below this file reads flags.

``--study=<name>`` runs the study ``experiments/<name>.py`` instead of one experiment (the same
as ``python -m experiments.<name>``): it reads the shared study flags of
``experiments.study_report`` (``--quick``, ``--workdir`` = report directory, ``--runs_dir`` =
trained models, ``--seeds``, ``--steps``, ``--override=path=value,...``), and the model, data and
optimizer flags given here (``--d_model``, ``--num_layers``, ``--batch_size``, ``--train_len``,
``--learning_rate``, ...) become config overrides of every model the study trains, so a study
scales up on an accelerator, e.g. ``--study=extrapolation --d_model=512 --num_layers=8``. Flags a
study sweeps itself (``--pe``, ``--seed``, ``--data``, ``--rope_scaling``, ``--eval_*``, ...) are
rejected with a usage error.
"""

from __future__ import annotations

import importlib
import pkgutil

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

import experiments
from experiments import study_report
from pejax import experiment_config
from pejax import runtime_env
from pejax.nn import pe_names
from pejax.train import experiment

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Optional experiment config file (a get_config() module), e.g. "
    "experiments/configs/default.py; override fields with --config.model.num_layers=4.")

# Each flag left unset keeps the config's value. Enum flags reject bad values with a usage line.
flags.DEFINE_enum("pe", None, pe_names(), "Positional encoding.")
flags.DEFINE_enum("rope_scaling", None, experiment.ROPE_SCALINGS,
                  "RoPE scaling used in training.")
flags.DEFINE_float("rope_factor", None, "Factor of --rope_scaling.")
flags.DEFINE_enum("rope_layout", None, ("half", "interleaved"), "RoPE channel layout.")
flags.DEFINE_float("rope_fraction", None, "Partial rotary: fraction of head dims rotated.")
flags.DEFINE_float("rope_base", None, "RoPE base theta.")
flags.DEFINE_integer("train_len", None, "Training sequence length (bytes).", lower_bound=8)
flags.DEFINE_list("eval_lens", None, "Evaluation lengths; default 1,2,4,8,16 x train_len.")
flags.DEFINE_enum("eval_mode", None, experiment.EVAL_MODES,
                  "Evaluation protocol(s) (ALiBi paper).")
flags.DEFINE_integer("eval_tokens", None, "Validation tokens scored per length.", lower_bound=1)
flags.DEFINE_enum("eval_rope_scaling", None, experiment.ROPE_SCALINGS,
                  "Zero-shot context extension applied at evaluation (RoPE models).")
flags.DEFINE_float("eval_rope_factor", None, "Factor of --eval_rope_scaling; default "
                   "max(eval_len) / train_len.")
flags.DEFINE_bool("passkey", None, "Also report passkey retrieval accuracy by length and depth.")
flags.DEFINE_integer("steps", None, "Optimizer steps.", lower_bound=1)
flags.DEFINE_integer("batch_size", None, "Sequences per batch.", lower_bound=1)
flags.DEFINE_float("learning_rate", None, "Peak learning rate.", lower_bound=0.0)
flags.DEFINE_integer("num_layers", None, "Decoder blocks.", lower_bound=1)
flags.DEFINE_integer("d_model", None, "Model width.", lower_bound=8)
flags.DEFINE_integer("num_heads", None, "Attention heads.", lower_bound=1)
flags.DEFINE_integer("num_kv_heads", None, "Key/value heads (GQA); 0 = num_heads.",
                     lower_bound=0)
flags.DEFINE_string("data", None, "stdlib (built-in), a UTF-8 file or directory, or one of "
                    "copy, reverse, passkey, addition.")
flags.DEFINE_string("workdir", None, "Output directory (checkpoints, metrics, results).")
flags.DEFINE_integer("seed", None, "Random seed.")
flags.DEFINE_bool("resume", None, "Continue from the latest checkpoint in --workdir.")
flags.DEFINE_enum("attention", None, ("auto", "dense", "blockwise"), "Attention kernel.")
flags.DEFINE_string("mesh", None, "Device mesh, e.g. data=4,model=2 (axes data, fsdp, model; "
                    "one size may be -1); default: all devices on data.")
flags.DEFINE_bool("distributed", None, "Call jax.distributed.initialize (auto-detects SLURM, "
                  "Open MPI, Cloud TPU pods, Kubernetes).")
flags.DEFINE_string("coordinator_address", None, "host:port of process 0 in a multi-host run.")
flags.DEFINE_integer("num_processes", None, "Processes of a multi-host run (0 = detect).",
                     lower_bound=0)
flags.DEFINE_integer("process_id", None, "This process's index (-1 = detect).", lower_bound=-1)
flags.DEFINE_string("study", None, "Run the study experiments/<name>.py instead (see the module "
                    "docstring); e.g. extrapolation, context_extension, passkey_scaling, "
                    "training_curves.")
study_report.define_flags()  # --quick, --runs_dir, --seeds, --override (workdir/steps above).

# flag name -> config path.
FLAG_TO_CONFIG = {
    "pe": "pe.name", "rope_scaling": "pe.rope_scaling", "rope_factor": "pe.rope_factor",
    "rope_layout": "pe.rope_layout", "rope_fraction": "pe.rope_fraction",
    "rope_base": "pe.rope_base", "train_len": "data.train_len", "eval_mode": "eval.mode",
    "eval_tokens": "eval.num_tokens", "eval_rope_scaling": "eval.rope_scaling",
    "eval_rope_factor": "eval.rope_factor", "passkey": "eval.passkey", "steps": "train.steps",
    "batch_size": "data.batch_size", "learning_rate": "optim.learning_rate",
    "num_layers": "model.num_layers", "d_model": "model.d_model", "num_heads": "model.num_heads",
    "num_kv_heads": "model.num_kv_heads", "data": "data.name", "workdir": "workdir",
    "seed": "seed", "resume": "train.resume", "attention": "model.attention",
    "mesh": "mesh.spec", "distributed": "mesh.distributed",
    "coordinator_address": "mesh.coordinator_address", "num_processes": "mesh.num_processes",
    "process_id": "mesh.process_id",
}


def build_config(flag_values: flags.FlagValues = flags.FLAGS):
  """The experiment config: defaults, then ``--config`` file, then explicit flags."""
  config = flag_values["config"].value
  if config is None:
    config = experiment_config.get_default_config()
  config = config.copy_and_resolve_references()
  with config.unlocked():
    for flag, path in FLAG_TO_CONFIG.items():
      value = flag_values[flag].value
      if value is None:
        continue
      *parents, leaf = path.split(".")
      node = config
      for parent in parents:
        node = node[parent]
      node[leaf] = value
    if flag_values["eval_lens"].value is not None:
      config.eval.lens = ",".join(flag_values["eval_lens"].value)
  return config


# Flags a study sets itself (it sweeps them), and flags a study reads directly.
STUDY_OWNED_FLAGS = ("pe", "seed", "data", "rope_scaling", "rope_factor", "eval_lens", "eval_mode",
                     "eval_rope_scaling", "eval_rope_factor", "passkey", "resume")
STUDY_DIRECT_FLAGS = ("workdir", "steps")


def study_names() -> list[str]:
  """Modules of ``experiments/`` that define a study ``run(options)`` entry."""
  names = []
  for info in pkgutil.iter_modules(experiments.__path__):
    if info.ispkg or info.name.startswith("_") or info.name == "study_report":
      continue
    names.append(info.name)
  return sorted(names)


def run_study(name: str, flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Runs ``experiments.<name>.run`` with the study flags and the config flags as overrides."""
  if name not in study_names():
    raise app.UsageError(f"--study must be one of {study_names()}, got {name!r}")
  module = importlib.import_module(f"experiments.{name}")
  if not callable(getattr(module, "run", None)):
    raise app.UsageError(f"experiments.{name} has no run(options) entry; use "
                         f"python -m experiments.{name}")
  owned = [f"--{f}" for f in STUDY_OWNED_FLAGS if flag_values[f].value is not None]
  if flag_values["config"].value is not None:
    owned.append("--config")
  if owned:
    raise app.UsageError(f"--study={name} does not take {', '.join(owned)} (the study sets "
                         "them); use --override=path=value for other config fields")
  overrides = {path: flag_values[flag].value for flag, path in FLAG_TO_CONFIG.items()
               if flag not in STUDY_OWNED_FLAGS + STUDY_DIRECT_FLAGS
               and flag_values[flag].value is not None}
  try:
    options = study_report.options_from_flags(flag_values, extra_overrides=overrides)
    study_report.apply_overrides(experiment_config.get_default_config(), options.overrides)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  module.run(options)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected positional arguments: {' '.join(argv[1:])}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # Keep Orbax's per-file INFO lines out of the way.
  if flags.FLAGS.study:
    run_study(flags.FLAGS.study)
    return
  study_flags = [f"--{f}" for f in ("quick", "runs_dir", "seeds", "override")
                 if flags.FLAGS[f].present]
  if study_flags:
    raise app.UsageError(f"{', '.join(study_flags)} only take effect with --study=<name>")
  try:
    experiment.train_and_evaluate(build_config())
  except experiment.ConfigError as e:
    raise app.UsageError(str(e)) from None


if __name__ == "__main__":
  runtime_env.apply_runtime_env()  # Re-executes once with the allocator settings.
  app.run(main)
