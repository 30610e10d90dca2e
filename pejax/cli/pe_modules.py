"""``--pe_module``: import a user's PE (a module name or a ``.py`` file) before the flags exist.

A PE registers itself on import (:func:`pejax.nn.register_pe`), so its modules are imported
before the flags and the config's ``pe`` fields are defined: then ``--pe=<its name>`` is valid
and ``--config.pe.<its field>`` exists (``--help`` lists them). The run records the modules in
``config.pe_modules`` (``config.json``; a file as its absolute path), and ``--eval_only`` or a
resume of that run imports them again (:func:`import_recorded_pe_modules`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import pathlib
import sys
from typing import Sequence

from pejax.cli import raw_argv
from pejax.cli.command_line_error import CommandLineError

FLAG = "--pe_module"


def is_file_path(value: str) -> bool:
  """Whether a ``--pe_module`` value is a file path (``my_pe.py``, ``dir/my_pe``), not a module."""
  return value.endswith(".py") or os.sep in value or bool(os.altsep and os.altsep in value)


def module_name_for_file(path: str) -> str:
  """The module name a ``.py`` file is imported under: ``pejax_pe_module_<stem>_<hash>``.

  The hash of the absolute path keeps two files with one name apart; the same file imported
  twice in one process is one module (its PE registers once).
  """
  resolved = str(pathlib.Path(path).expanduser().resolve())
  digest = hashlib.sha1(resolved.encode()).hexdigest()[:8]
  stem = "".join(c if c.isalnum() else "_" for c in pathlib.Path(resolved).stem)
  return f"pejax_pe_module_{stem}_{digest}"


def _import_file(path: str) -> None:
  resolved = pathlib.Path(path).expanduser().resolve()
  if not resolved.is_file():
    raise CommandLineError(f"{FLAG}={path}: no such file")
  name = module_name_for_file(path)
  if name in sys.modules:
    return
  spec = importlib.util.spec_from_file_location(name, resolved)
  if spec is None or spec.loader is None:
    raise CommandLineError(f"{FLAG}={path}: not a Python file")
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module  # Dataclasses and pickling look their module up here.
  try:
    spec.loader.exec_module(module)
  except Exception as e:  # pylint: disable=broad-except  # Any failure: its own one line.
    del sys.modules[name]
    raise CommandLineError(f"{FLAG}={path}: importing it failed: {type(e).__name__}: {e}") from None


def import_pe_module(value: str) -> None:
  """Imports one ``--pe_module`` value: a module name (``mypkg.my_pe``) or a ``.py`` file.

  A module name is looked up on ``sys.path`` and in the current directory.

  Args:
    value: the module name or file path.

  Raises:
    CommandLineError: naming the value, when it does not import.
  """
  value = value.strip()
  if not value:
    return
  if is_file_path(value):
    _import_file(value)
    return
  if os.getcwd() not in sys.path and "" not in sys.path:
    sys.path.append(os.getcwd())
  try:
    importlib.import_module(value)
  except ModuleNotFoundError as e:
    if e.name and not (value == e.name or value.startswith(e.name + ".")):
      # The module exists but imports a missing one.
      raise CommandLineError(f"{FLAG}={value}: importing it failed: {e}") from None
    raise CommandLineError(f"{FLAG}={value}: no module named {value!r} on the Python path or in "
                           "the current directory (a file: --pe_module=path/to/my_pe.py)") from None
  except Exception as e:  # pylint: disable=broad-except  # Any failure: its own one line.
    raise CommandLineError(f"{FLAG}={value}: importing it failed: "
                           f"{type(e).__name__}: {e}") from None


def pe_modules_in(argv: Sequence[str]) -> list[str]:
  """The ``--pe_module=a,b`` values of a command line (read before the flags are parsed)."""
  return [v.strip() for value in raw_argv.raw_flag_values(argv, "pe_module")
          for v in value.split(",") if v.strip()]


def import_pe_modules_of(argv: Sequence[str]) -> None:
  """Imports the ``--pe_module`` values of ``argv``; without any, those the ``--workdir`` run
  recorded (:func:`import_recorded_pe_modules`).

  Raises:
    CommandLineError: naming the module that does not import.
  """
  given = pe_modules_in(argv)
  for value in given:
    import_pe_module(value)
  workdirs = raw_argv.raw_flag_values(argv, "workdir")
  if not given and workdirs and workdirs[-1]:
    import_recorded_pe_modules(workdirs[-1])


def recorded_value(values: Sequence[str]) -> str:
  """What a run records in ``config.pe_modules``: module names, files as absolute paths."""
  return ",".join(str(pathlib.Path(v).expanduser().resolve()) if is_file_path(v) else v
                  for v in values)


def import_recorded_pe_modules(workdir: str, *, config_filename: str = "config.json") -> None:
  """Imports the ``pe_modules`` a run recorded (before ``--eval_only`` or a resume reads it).

  Args:
    workdir: the run directory (nothing happens without its ``config.json``).
    config_filename: the record's file name.

  Raises:
    CommandLineError: naming the module and the run, when a recorded module does not import.
  """
  path = os.path.join(workdir, config_filename)
  if not os.path.isfile(path):
    return
  try:
    with open(path, encoding="utf-8") as f:
      recorded = json.load(f).get("pe_modules") or ""
  except (OSError, ValueError, AttributeError):
    return  # Not a readable record: the run's own checks say so.
  for value in str(recorded).split(","):
    try:
      import_pe_module(value)
    except CommandLineError as e:
      raise CommandLineError(
          f"--workdir={workdir} was trained with --pe_module={value.strip()}, which does not "
          f"import here ({e}); restore it, or pass --pe_module=<where it is now>") from None
