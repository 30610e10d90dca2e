"""Flags -> one experiment config: the ``--config`` file, its overrides, then the aliases.

Every value a command names is checked here, before anything runs or any directory is made:
PE names (any case: ``--pe=ALiBi`` is ``alibi``), the data name, the study and the aliases
that only a study takes. The rest of the config is checked by the run itself
(:func:`pejax.train.config_check.check_config`), still before its directory is created.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Sequence

from absl import flags

from pejax.cli import command_line_error
from pejax.cli import config_file
from pejax.cli import flag_definitions
from pejax.cli import pe_modules
from pejax.cli.command_line_error import CommandLineError
from pejax.cli.command_line_error import did_you_mean
from pejax.cli.studies import Studies
from pejax.nn import pe_names


def parse_flags(argv: Sequence[str], flag_values: flags.FlagValues, *,
                default_config: str = config_file.PACKAGE_CONFIG) -> list[str]:
  """``flag_values(argv)``, every mistake a :class:`CommandLineError`; returns the positionals.

  Args:
    argv: the command line, program name first.
    flag_values: the flags (:func:`pejax.cli.flag_definitions.define_flags`).
    default_config: the ``get_config()`` file used without ``--config``.

  Returns:
    ``argv[0]`` and the positional arguments.

  Raises:
    CommandLineError: an unknown flag (with the closest one), an illegal value, a
      ``--config.<path>`` naming no field.
  """
  with config_file.config_errors(argv, default_config=default_config):
    try:
      return flag_values(list(argv))
    except flags.Error as e:
      raise command_line_error.from_flag_error(e, flag_values) from None


def _origin(path: str, origins: Dict[str, str]) -> str:
  return origins.get(path, f"the config file's {path}")


def normalize_pe_names(value: Any, *, origin: str) -> str:
  """``ALiBi,RoPE`` -> ``alibi,rope``: registry names in any case.

  Args:
    value: a PE name or comma-separated names.
    origin: the flag that gave it (for the message).

  Returns:
    The registered names, comma-separated.

  Raises:
    CommandLineError: naming the unknown name, with the closest registered one.
  """
  known = pe_names()
  by_lower = {n.lower(): n for n in known}
  names = [part.strip() for part in str(value).split(",")]
  for name in names:
    if name.lower() not in by_lower:
      raise CommandLineError(
          f"{origin}={value}: {name!r} is not a registered PE{did_you_mean(name, known)}; one "
          f"of {', '.join(known)} (a PE of your own: --pe_module=<module or file.py>)")
  return ",".join(by_lower[n.lower()] for n in names)


def check_data_name(value: Any, *, origin: str) -> None:
  """Checks a data name: a built-in corpus, a synthetic task or an existing file or directory.

  Raises:
    CommandLineError: naming the value, with the closest built-in name.
  """
  from pejax.data import registry  # pylint: disable=g-import-not-at-top
  name = str(value)
  builtin = list(registry.BUILTIN_CORPORA) + list(registry.TASK_NAMES)
  if name in builtin or os.path.exists(os.path.expanduser(name)):
    return
  raise CommandLineError(
      f"{origin}={name}: no such corpus, task, file or directory{did_you_mean(name, builtin)}; "
      f"a built-in corpus ({', '.join(registry.BUILTIN_CORPORA)}), a synthetic task "
      f"({', '.join(registry.TASK_NAMES)}) or a path to UTF-8 text")


def _study_config(flag_values: flags.FlagValues, studies: Optional[Studies], overrides):
  """The config file of ``--study=<name>`` with the ``--config.<path>`` overrides."""
  study = flag_values["study"].value
  if studies is None:
    raise CommandLineError(f"--study={study}: studies need a source checkout of pejax (run "
                           f"python launch.py --study={study} there)")
  if study not in studies.names:
    raise CommandLineError(f"--study={study}: no such study{did_you_mean(study, studies.names)}; "
                           f"one of {', '.join(studies.names)}")
  if flag_values["config"].present:
    raise CommandLineError(f"--study={study} picks its own config file; drop --config (or use "
                           f"--config={studies.config_file(study)} alone)")
  config = config_file.load_config_file(studies.config_file(study), flag=f"--study={study}")
  try:
    config.update_from_flattened_dict(overrides)
  except (AttributeError, KeyError):
    valid = config_file.config_paths(config)
    path = next(p for p in overrides if p not in valid)
    raise CommandLineError(f"--config.{path}: --study={study}'s config has no field {path!r}"
                           f"{did_you_mean(path, valid)}") from None
  return config


def resolve_config(flag_values: flags.FlagValues, *, studies: Optional[Studies] = None):
  """The config and the explicit overrides (``path -> value``, with the flag that set each).

  Order: the config file (``--study=<name>`` picks the study's file), then the
  ``--config.<path>`` overrides, then the aliases (:data:`flag_definitions.ALIASES`).

  Args:
    flag_values: the parsed flags.
    studies: the studies ``--study`` can run (``None``: none).

  Returns:
    ``(config, overrides, origins)``: the resolved config, ``path -> value`` of what the
    command line set, and ``path -> the flag that set it``.

  Raises:
    CommandLineError: naming the flag and the value.
  """
  config = flag_values["config"].value
  overrides: Dict[str, Any] = dict(flag_values["config"].override_values)
  origins = {path: f"--config.{path}" for path in overrides}
  if flag_values["study"].value is not None:
    config = _study_config(flag_values, studies, overrides)
  config = config.copy_and_resolve_references()
  with config.unlocked():
    for flag, path in flag_definitions.ALIASES.items():
      value = flag_values[flag].value
      if value is None:
        continue
      section, field = path.split(".")
      if section not in config:
        raise CommandLineError(f"--{flag} only takes effect with --study=<name>")
      if isinstance(value, list):
        value = ",".join(value)
      if isinstance(config[section][field], float) and isinstance(value, int):
        value = float(value)
      config[section][field] = value
      overrides[path] = value
      origins[path] = f"--{flag}"
    if "pe" in config and "name" in config.pe and "study" not in config:
      config.pe.name = normalize_pe_names(config.pe.name, origin=_origin("pe.name", origins))
      if "pe.name" in overrides:
        overrides["pe.name"] = config.pe.name
    if "data" in config and "name" in config.data and "study" not in config:
      check_data_name(config.data.name, origin=_origin("data.name", origins))
    if flag_values["pe_module"].value:
      config.pe_modules = pe_modules.recorded_value(flag_values["pe_module"].value)
      overrides["pe_modules"] = config.pe_modules
      origins["pe_modules"] = "--pe_module"
    if flag_values["workdir"].value is not None:
      config.workdir = flag_values["workdir"].value
  return config, overrides, origins
