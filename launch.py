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

A mistake on the command line (a misspelt flag, a bad value, a config file, module, study or PE
that is not there) is one line ``launch.py: error: ...`` naming the flag and the value, with a
"did you mean" where one is close, and exit status 2, before any run directory is made.
``--pe_module=my_pe.py`` (or a module name) imports a PE of your own (``--help`` with it lists
its fields); the run records it, so ``--eval_only`` and resume import it again. The same flags
without a checkout: ``pejax-launch`` or ``python -m pejax`` (the studies need the checkout).
The logic is :mod:`pejax.cli`; this file adds the studies of ``experiments/``.

"""

from __future__ import annotations

# Run as a program: re-execute with the allocator settings before the imports below, not after
# them (they are most of --help's time; pejax.runtime_env loads nothing else).
from pejax import runtime_env  # pylint: disable=wrong-import-position
runtime_env.apply_when_main(__name__)
# pylint: disable=wrong-import-position

import os
import sys
from typing import Optional, Sequence

from absl import app
from absl import flags

from experiments.study import study_command
from pejax import cli

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CONFIG = os.path.join(study_command.CONFIGS_DIR, "default.py")
ALIASES = cli.ALIASES
# Every mistake raises a pejax.cli.CommandLineError, an absl UsageError (launch.app.UsageError).
UsageError = app.UsageError
STUDIES = study_command.STUDIES
study_names = study_command.study_names
load_config_file = cli.load_config_file


def _default_config() -> str:
  """experiments/configs/default.py, relative to the current directory when inside it."""
  return study_command.config_file("default")


def define_flags(flag_values: flags.FlagValues = flags.FLAGS,
                 argv: Optional[Sequence[str]] = None) -> None:
  """Defines launch.py's flags in ``flag_values`` (``argv``: the command line, for overrides)."""
  cli.define_flags(flag_values, sys.argv if argv is None else argv,
                   default_config=_default_config(), studies=STUDIES)


def parse_flags(argv: Sequence[str], flag_values: flags.FlagValues = flags.FLAGS) -> list[str]:
  """``flag_values(argv)``; every mistake a :class:`pejax.cli.CommandLineError`."""
  return cli.parse_flags(argv, flag_values, default_config=_default_config())


def resolve_config(flag_values: flags.FlagValues = flags.FLAGS):
  """The config and the explicit overrides (:func:`pejax.cli.resolve_config`)."""
  return cli.resolve_config(flag_values, studies=STUDIES)


def main(argv: Sequence[str], flag_values: flags.FlagValues = flags.FLAGS) -> int:
  """Runs a parsed command; returns the exit status (:func:`pejax.cli.main`)."""
  return cli.main(argv, flag_values, studies=STUDIES)


def run(argv: Sequence[str]) -> int:
  """Parses ``argv`` (``["launch.py", "--pe=alibi", ...]``) into fresh flags and runs it.

  The same path as the command line, callable from a notebook or a test; every mistake raises
  :class:`pejax.cli.CommandLineError` (an ``absl.app.UsageError``).
  """
  return cli.run(argv, default_config=_default_config(), studies=STUDIES)


def command_line(argv: Sequence[str]) -> int:
  """``argv`` as the real command line runs it: one-line errors (exit 2), ``--help`` (exit 0)."""
  return cli.command_line(argv, prog="launch.py", doc=__doc__, default_config=_default_config(),
                          studies=STUDIES)


def _help_doc() -> str:
  """This docstring followed by every flag and config field (``--help``)."""
  flag_values = flags.FlagValues()
  define_flags(flag_values, ["launch.py"])
  return cli.help_text(flag_values, doc=__doc__, prog="launch.py")


if __name__ == "__main__":
  sys.exit(command_line(sys.argv))
