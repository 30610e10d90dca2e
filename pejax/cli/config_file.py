"""``--config``: the ``get_config()`` file of a command and the errors of its overrides.

``ml_collections.config_flags`` loads the file and parses ``--config.<path>=value``; this module
checks the file first (so that a missing file, a failing import or a file without
``get_config`` is one line naming it) and turns a misspelt ``--config.<path>`` into
``no config field 'model.num_layer' (did you mean 'model.num_layers'?)``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from typing import Iterator, Optional, Sequence

import ml_collections

from pejax import experiment_config
from pejax.cli import raw_argv
from pejax.cli.command_line_error import CommandLineError
from pejax.cli.command_line_error import did_you_mean

# The default config inside the package (experiment_config.get_config), for installs without a
# checkout's experiments/configs/default.py.
PACKAGE_CONFIG = experiment_config.__file__
# The module name under which ml_collections loads the --config file. Its loader reuses a module
# already in sys.modules (an earlier file's get_config would survive a file without one), so
# each command line drops it first.
_ML_COLLECTIONS_MODULE = "config_config"


def config_flag_value(argv: Sequence[str]) -> Optional[str]:
  """The last ``--config=<file>`` (or ``--config <file>``) of a command line, or ``None``."""
  values = raw_argv.raw_flag_values(argv, "config")
  return values[-1] if values else None


def load_config_file(path: str, *, flag: str = "--config") -> ml_collections.ConfigDict:
  """The config of a ``get_config()`` file (``path:arg`` passes ``arg`` to ``get_config``).

  Args:
    path: the file.
    flag: the flag that named it (for the error message).

  Returns:
    What ``get_config()`` returned.

  Raises:
    CommandLineError: naming the flag and the path, for a missing file, a file that does not
      import, one without ``get_config()``, or a ``get_config()`` that fails or returns no
      ``ConfigDict``.
  """
  file_path, _, arg = str(path).partition(":")
  if not os.path.isfile(file_path):
    where = "" if os.path.isabs(file_path) else f" (relative to {os.getcwd()})"
    raise CommandLineError(f"{flag}={path}: no such file{where}")
  spec = importlib.util.spec_from_file_location("pejax_config_file", file_path)
  if spec is None or spec.loader is None:
    raise CommandLineError(f"{flag}={path}: not a Python file")
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except Exception as e:  # pylint: disable=broad-except  # Any failure: its own one line.
    raise CommandLineError(f"{flag}={path}: importing it failed: {type(e).__name__}: {e}") from None
  if not callable(getattr(module, "get_config", None)):
    raise CommandLineError(f"{flag}={path}: the file has no get_config() function (a config "
                           "file defines get_config() returning an ml_collections.ConfigDict)")
  try:
    config = module.get_config(*([arg] if arg else []))
  except Exception as e:  # pylint: disable=broad-except  # Any failure: its own one line.
    raise CommandLineError(f"{flag}={path}: get_config() failed: {type(e).__name__}: {e}") from None
  if not isinstance(config, ml_collections.ConfigDict):
    raise CommandLineError(f"{flag}={path}: get_config() returned {type(config).__name__}, not "
                           "an ml_collections.ConfigDict")
  return config


def check_config_flag(argv: Sequence[str]) -> None:
  """Checks the ``--config`` file of ``argv`` loads (see :func:`load_config_file`)."""
  sys.modules.pop(_ML_COLLECTIONS_MODULE, None)
  value = config_flag_value(argv)
  if value is not None:
    load_config_file(value)


def config_paths(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
  """Every ``section.field`` path of a config (``["seed", "model.d_model", ...]``)."""
  paths = []
  for key in config.keys():
    value = config[key]
    if isinstance(value, ml_collections.ConfigDict):
      paths += config_paths(value, f"{prefix}{key}.")
    else:
      paths.append(f"{prefix}{key}")
  return paths


def _closest_path(given: str, valid: Sequence[str]) -> str:
  """`` (did you mean 'model.num_layers'?)``: the closest field of the same section first."""
  section, _, field = given.rpartition(".")
  siblings = [p.rpartition(".")[2] for p in valid if p.rpartition(".")[0] == section]
  if siblings:
    return did_you_mean(given, [f"{section}.{f}" for f in siblings if did_you_mean(field, [f])])
  return did_you_mean(given, valid)


@contextlib.contextmanager
def config_errors(argv: Sequence[str], *,
                  default_config: str = PACKAGE_CONFIG) -> Iterator[None]:
  """Turns ml_collections' error for a ``--config.<path>`` naming no field into one line.

  Args:
    argv: the command line.
    default_config: the file used without ``--config`` (its fields are the valid paths).

  Raises:
    CommandLineError: ``--config.model.num_layer=2: no config field 'model.num_layer' (did you
      mean 'model.num_layers'?)``.
  """
  try:
    yield
  except (AttributeError, KeyError) as e:
    path = config_flag_value(argv)
    valid = config_paths(load_config_file(path) if path else load_config_file(default_config))
    sections = {p.split(".")[0] for p in valid if "." in p}
    for arg in argv:
      if not arg.startswith("--config."):
        continue
      given = arg.split("=", 1)[0][len("--config."):]
      if given in valid or given in sections:
        continue
      raise CommandLineError(f"{arg}: no config field {given!r}{_closest_path(given, valid)}; "
                             "--help lists them") from None
    raise CommandLineError(f"--config: {e}") from None
