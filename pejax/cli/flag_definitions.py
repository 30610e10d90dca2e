"""The flags of the command line and its ``--help`` text.

One config (``--config``, a ``get_config()`` file), one override mechanism
(``--config.<path>=value``) and a few aliases (:data:`ALIASES`, resolved in one place:
:func:`pejax.cli.config_resolution.resolve_config`).
"""

from __future__ import annotations

from typing import Optional, Sequence

from absl import flags
from absl import logging  # Defines --verbosity & co. in flags.FLAGS.
from ml_collections import config_flags

from pejax import decoder_from_config
from pejax import experiment_config
from pejax.cli import config_file
from pejax.cli import pe_modules
from pejax.cli import raw_argv
from pejax.cli.studies import Studies
from pejax.nn import pe_names

# The aliases: flag -> config path.
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
HELP_FLAGS = ("--help", "-h", "--helpshort", "--helpfull", "-?")
# absl's logging flags (--verbosity, ...), kept from the days of absl.app.run.
_LOGGING_MODULE = logging.__name__


def define_flags(flag_values: flags.FlagValues, argv: Sequence[str], *,
                 default_config: str = config_file.PACKAGE_CONFIG,
                 studies: Optional[Studies] = None) -> None:
  """Defines the command line's flags in ``flag_values``.

  The ``--pe_module`` modules of ``argv`` (or, without any, those its ``--workdir`` run recorded)
  are imported first (their PEs become valid ``--pe`` values with ``--config.pe.<field>``
  flags), and the ``--config`` file of ``argv`` is checked.

  Args:
    flag_values: where to define them (a fresh ``flags.FlagValues()``).
    argv: the command line (``--config=`` and ``--pe_module=`` are read from it).
    default_config: the ``get_config()`` file used without ``--config``.
    studies: the studies ``--study`` can run (``None``: none, outside a checkout).

  Raises:
    CommandLineError: a ``--pe_module`` that does not import, or a ``--config`` file that does
      not load.
  """
  fv = dict(flag_values=flag_values)
  pe_modules.import_pe_modules_of(argv)
  config_file.check_config_flag(argv)
  study = raw_argv.raw_flag_values(argv, "study")
  if (studies is not None and study and study[-1] in studies.names
      and not raw_argv.raw_flag_values(argv, "config")):
    # --study=<name>: its config file is the one --config.study.<field> overrides apply to (the
    # default file has no study section). Not --config's "present" value: --study with --config
    # stays an error.
    default_config = studies.config_file(study[-1])
  with config_file.config_errors(argv, default_config=default_config):  # Loads the file.
    config_flags.DEFINE_config_file(
        "config", default_config, f"Experiment config file (a get_config() module; default "
        f"{default_config}); override any field with --config.<path>=value (the fields are "
        "listed below).", sys_argv=list(argv), **fv)
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
  names = ", ".join(studies.names) if studies else "none here: studies run from a checkout"
  flags.DEFINE_string("study", None, f"Run a study ({names}): sweep, report.md, plots.", **fv)
  flags.DEFINE_string("pe", None, "Alias of --config.pe.name: " + ", ".join(pe_names()) +
                      " (any case; comma-separated: one per layer, cycled).", **fv)
  flags.DEFINE_list("pe_module", None, "Modules or .py files to import first, e.g. one that "
                    "registers a PE with pejax.nn.register_pe (then --pe=<its name>; --help "
                    "with it lists its fields). The run records them (config.pe_modules): "
                    "--eval_only and resume import them again.", **fv)
  flags.DEFINE_string("sliding_window", None, "Alias of --config.model.sliding_window.", **fv)
  flags.DEFINE_enum("rope_scaling", None, decoder_from_config.ROPE_SCALINGS,
                    "Alias of --config.pe.scaling (training-time RoPE scaling; with "
                    "--rope_factor).", **fv)
  flags.DEFINE_float("rope_factor", None, "Alias of --config.pe.factor.", **fv)
  flags.DEFINE_string("data", None, "Alias of --config.data.name.", **fv)
  flags.DEFINE_integer("train_len", None, "Alias of --config.data.train_len.", lower_bound=8,
                       **fv)
  flags.DEFINE_integer("steps", None, "Alias of --config.train.steps.", lower_bound=1, **fv)
  flags.DEFINE_list("eval_lens", None, "Alias of --config.eval.lens.", **fv)
  _define_study_flags(fv)
  _define_mesh_flags(fv)
  for flag in flags.FLAGS.get_flags_for_module(_LOGGING_MODULE):
    if flag.name not in flag_values:  # flags.FLAGS itself has them.
      flag_values[flag.name] = flag  # Registers its short name (-v) too.
      flag_values.register_flag_by_module(_LOGGING_MODULE, flag)


def _define_study_flags(fv: dict) -> None:
  """The study aliases (``ALIASES``' study entries)."""
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


def _define_mesh_flags(fv: dict) -> None:
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


def help_text(flag_values: flags.FlagValues, *, doc: str, prog: str, full: bool = False) -> str:
  """``--help``: ``doc``, the flags, and every config field with its default and comment.

  Args:
    flag_values: the defined flags (after :func:`define_flags`).
    doc: the text before the flags (the entry point's docstring).
    prog: the program's name, as the user typed it.
    full: also absl's logging flags (``--helpfull``).

  Returns:
    The text.
  """
  modules = [m for m in flag_values.flags_by_module_dict() if m != _LOGGING_MODULE]
  if full:
    modules.append(_LOGGING_MODULE)
  # module_help: "<module>:" then the flags; the module names mean nothing to a user.
  flag_help = "\n".join(flag_values.module_help(m).strip().split("\n", 1)[-1] for m in modules)
  config = flag_values["config"].value
  return (doc.rstrip() + f"\n\nFlags of {prog}:\n\n" + flag_help +
          "\n\nConfig fields and their defaults (--config.<section>.<field>=value):\n\n"
          + experiment_config.help_text(config))
