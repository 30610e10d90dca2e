"""Run a command line: parse, resolve, then train, ``--eval_only`` or a study.

:func:`command_line` is what a real command does (one-line errors and exit status 2,
``--help`` and exit status 0); :func:`run` is the same path for a notebook or a test, raising
:class:`~pejax.cli.CommandLineError` instead of printing it.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Optional, Sequence

from absl import app
from absl import flags
from absl import logging

from pejax import experiment_config
from pejax.cli import config_file
from pejax.cli import config_resolution
from pejax.cli import flag_definitions
from pejax.cli.command_line_error import CommandLineError
from pejax.cli.studies import Studies
from pejax.train import experiment
from pejax.train import loop
from pejax.train import run_directory

USAGE = r"""pejax: train a small decoder at one length, evaluate it at many.

    pejax-launch --pe=alibi                       # any registered PE (python -m pejax: the same)
    pejax-launch --rope_scaling=yarn --rope_factor=4 --config.model.num_layers=4
    pejax-launch --pe_module=my_pe.py --pe=my_pe  # a PE from your own file
    pejax-launch --workdir=runs/alibi-L128 --eval_only --eval_lens=256,512 --eval_name=long

The same flags as launch.py in a checkout of pejax, which also runs the studies (--study).
A mistake on the command line is one line "<prog>: error: ..." and exit status 2.
"""


def main(argv: Sequence[str], flag_values: flags.FlagValues, *,
         studies: Optional[Studies] = None) -> int:
  """Runs a parsed command; returns the exit status.

  Args:
    argv: the positional arguments left by parsing (the program name only, or a mistake).
    flag_values: the parsed flags.
    studies: the studies ``--study`` can run.

  Returns:
    0, or :data:`pejax.train.experiment.EXIT_CODES` after SIGINT / SIGTERM (130 / 143), or 1
    when the loss became non-finite.

  Raises:
    CommandLineError: a mistake on the command line or in the config (before anything ran).
  """
  if len(argv) > 1:
    raise CommandLineError(f"unexpected positional argument {argv[1]!r} (every setting is a "
                           "--flag=value)")
  value = lambda name: flag_values[name].value  # noqa: E731
  workdir, eval_only = value("workdir"), value("eval_only")
  if value("eval_name") and not eval_only:
    raise CommandLineError(f"--eval_name={value('eval_name')} only takes effect with --eval_only")
  if eval_only and not workdir and not value("init_from_hf"):
    raise CommandLineError("--eval_only needs --workdir=<run directory> (or --init_from_hf)")
  if "verbosity" in flag_values and not flag_values["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # Keep Orbax's per-file INFO lines out of the way.
  overrides, origins = {}, {}
  try:
    config, overrides, origins = config_resolution.resolve_config(flag_values, studies=studies)
    if "study" in config:
      try:
        studies.run(config, overrides, origins)
      except experiment.TrainingInterrupted as e:  # The study's current model is resumable.
        print(f"--study={value('study')}: {e}", file=sys.stderr)
        return e.exit_code
      return 0
    if value("init_from_hf") and eval_only:
      from pejax.train import pretrained  # pylint: disable=g-import-not-at-top
      pretrained.evaluate_pretrained(value("init_from_hf"), config, name=value("eval_name"))
      return 0
    if eval_only:
      experiment.evaluate_run(workdir, name=value("eval_name"),
                              overrides={p: v for p, v in overrides.items()
                                         if p not in ("workdir", "pe_modules")})
      return 0
    if (workdir and os.path.exists(os.path.join(workdir, run_directory.CONFIG_FILENAME))
        and not flag_values["config"].present
        and not any(run_directory.is_training_setting(p) for p in overrides)):
      # --workdir=<run> alone continues that run with its own settings.
      config = run_directory.load_run_config(workdir, overrides)
    result = experiment.train_and_evaluate(config)
  except experiment_config.ConfigError as e:
    raise CommandLineError(_named_by_flags(str(e), overrides, origins)) from None
  except loop.NonFiniteLossError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  return experiment.EXIT_CODES.get(result.stop_reason, 0)


def _named_by_flags(text: str, overrides: dict, origins: dict) -> str:
  """A config error as the command line wrote it.

  ``model.sliding_window must be ...`` set by ``--sliding_window=abc`` starts with
  ``--sliding_window=abc: ``; ``--config.pe.factor=`` in a hint is ``--rope_factor=``.
  """
  subject = re.match(r"[\w.]+", text)
  for path, origin in origins.items():
    if subject and subject.group(0) in (path, origin[2:]) and origin != f"--config.{path}":
      text = f"{origin}={overrides.get(path)}: {text}"
      break
  for flag, path in flag_definitions.ALIASES.items():
    text = text.replace(f"--config.{path}=", f"--{flag}=")
  return text


def _parsed_flags(argv: Sequence[str], *, default_config: str,
                  studies: Optional[Studies]) -> tuple[flags.FlagValues, list[str]]:
  flag_values = flags.FlagValues()
  flag_definitions.define_flags(flag_values, argv, default_config=default_config,
                                studies=studies)
  rest = config_resolution.parse_flags(argv, flag_values, default_config=default_config)
  return flag_values, rest


def run(argv: Sequence[str], *, default_config: str = config_file.PACKAGE_CONFIG,
        studies: Optional[Studies] = None) -> int:
  """Parses ``argv`` (``["launch.py", "--pe=alibi", ...]``) into fresh flags and runs it.

  The path of the real command line, callable from a notebook or a test.

  Args:
    argv: the command line, program name first.
    default_config: the ``get_config()`` file used without ``--config``.
    studies: the studies ``--study`` can run (``None``: none).

  Returns:
    The exit status (:func:`main`).

  Raises:
    CommandLineError: every mistake on the command line.
  """
  flag_values, rest = _parsed_flags(argv, default_config=default_config, studies=studies)
  return main(rest, flag_values, studies=studies)


def command_line(argv: Sequence[str], *, prog: str, doc: str = USAGE,
                 default_config: str = config_file.PACKAGE_CONFIG,
                 studies: Optional[Studies] = None) -> int:
  """Runs ``argv`` as the real command line does; returns its exit status.

  Every mistake is one line ``<prog>: error: ...`` on stderr and exit status 2; ``--help``
  (``--helpfull``: with absl's logging flags) prints ``doc``, the flags and the config fields
  (with the fields of a ``--pe_module``'s PE) and exits 0.

  Args:
    argv: the command line, program name first.
    prog: the program's name in messages (``launch.py``, ``pejax-launch``).
    doc: the text ``--help`` starts with.
    default_config: the ``get_config()`` file used without ``--config``.
    studies: the studies ``--study`` can run (``None``: none).

  Returns:
    The exit status.
  """
  try:
    asked = [a for a in argv[1:] if a in flag_definitions.HELP_FLAGS]
    if asked:
      flag_values = flags.FlagValues()
      flag_definitions.define_flags(flag_values, [a for a in argv if a not in asked],
                                    default_config=default_config, studies=studies)
      print(flag_definitions.help_text(flag_values, doc=doc, prog=prog,
                                       full="--helpfull" in asked))
      return 0
    return run(argv, default_config=default_config, studies=studies)
  except app.UsageError as e:  # CommandLineError, or a study's own usage error.
    print(f"{prog}: error: {' '.join(str(e).split())}", file=sys.stderr)
    return 2
  except experiment_config.ConfigError as e:  # Raised where main does not see it.
    print(f"{prog}: error: {' '.join(str(e).split())}", file=sys.stderr)
    return 2


def console_main() -> None:
  """The command line without studies (``pejax-launch`` and ``python -m pejax`` reach it through
  :func:`pejax.__main__.main`, which re-executes before importing this module; the call below
  then returns at once, and re-executes only a caller that comes here directly)."""
  from pejax import runtime_env  # pylint: disable=g-import-not-at-top
  runtime_env.apply_runtime_env()  # Re-executes once with the allocator settings.
  argv0 = sys.argv[0]
  prog = "python -m pejax" if argv0.endswith("__main__.py") else os.path.basename(argv0)
  sys.exit(command_line(sys.argv, prog=prog))
