"""Where a result comes from: the code's commit, the packages, the machine, the command, the time.

Every record a run or a study writes (``results.json`` of a run and of each ``--eval_only``
evaluation, a study's ``results.json`` and the header of its ``report.md``) carries
:func:`provenance`, so a number can be traced to the code that produced it::

  {"commit": "5e7b983...", "dirty": false, "dirty_files": [], "code": "git checkout",
   "versions": {"python": "3.11.7", "jax": "0.10.2", ...},
   "machine": "Linux x86_64, AMD EPYC (family 26, model 2), 2 cores, jax 0.10.2 on cpu",
   "command": "python launch.py --pe=alibi", "started": "2026-12-05 23:40:12 UTC",
   "recorded": "2026-12-05 23:43:02 UTC", "wall_time_s": 170.2}

The commit is read from the git checkout that holds this ``pejax`` package (``git rev-parse
HEAD``). ``dirty`` says whether the code differed from that commit when the record was written: a
modified tracked file, or an untracked ``.py`` / ``.cfg`` / ``.toml`` file, outside the results
trees (``experiments/results``, ``runs``, ``benchmarks/results``: a study rewrites its own
committed results). An installed copy
without a checkout records ``"commit": null`` and its package version instead. Standard library
only (``git`` is run as a subprocess, 10 s at most).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import pathlib
import platform
import shlex
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

# Paths a study or a run writes its own results into: changes there do not make the code dirty.
RESULT_TREES = ("experiments/results", "runs", "benchmarks/results")
# The distributions whose versions a record names (absent ones are recorded as None).
PACKAGES = ("pejax", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy",
            "ml-collections", "chex")
# Untracked files that count as code (a new module not committed yet); other untracked files
# (notes, exported checkpoints) do not make a tree dirty.
CODE_SUFFIXES = (".py", ".cfg", ".toml")
_MAX_DIRTY_FILES = 20


def checkout_root(module_file: Optional[str] = None) -> Optional[pathlib.Path]:
  """The git checkout holding the ``pejax`` package, or None for an installed copy.

  Args:
    module_file: a file inside the package (default: this module's).
  """
  package_dir = pathlib.Path(module_file or __file__).resolve().parent
  root = package_dir.parent
  return root if (root / ".git").exists() else None


def _git(root: pathlib.Path, *args: str) -> Optional[str]:
  try:
    result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                            timeout=10, check=False)
  except (OSError, subprocess.SubprocessError):
    return None
  return result.stdout if result.returncode == 0 else None


def code_version(root: Optional[os.PathLike | str] = None) -> Dict[str, Any]:
  """The commit of the code and whether the code differs from it.

  Args:
    root: a git checkout; default: the one holding this package (:func:`checkout_root`).

  Returns:
    ``{"commit": sha or None, "dirty": bool or None, "dirty_files": [...], "code": how it was
    found}``; ``dirty_files`` lists at most 20 paths (``"... and N more"`` after them).
  """
  root = pathlib.Path(root) if root is not None else checkout_root()
  if root is None:
    return {"commit": None, "dirty": None, "dirty_files": [],
            "code": f"installed package (no git checkout), pejax {_version('pejax')}"}
  commit = _git(root, "rev-parse", "HEAD")
  if commit is None:
    return {"commit": None, "dirty": None, "dirty_files": [],
            "code": f"{root} (git could not read a commit there)"}
  excludes = [f":(exclude){tree}" for tree in RESULT_TREES]
  status = _git(root, "status", "--porcelain", "--untracked-files=all", "--", ".", *excludes)
  files: List[str] = []
  for line in (status or "").splitlines():
    state, path = line[:2], line[3:]
    if state != "??" or path.endswith(CODE_SUFFIXES):  # Untracked: only code counts.
      files.append(path)
  listed = files[:_MAX_DIRTY_FILES]
  if len(files) > _MAX_DIRTY_FILES:
    listed.append(f"... and {len(files) - _MAX_DIRTY_FILES} more")
  return {"commit": commit.strip(), "dirty": bool(files) if status is not None else None,
          "dirty_files": listed, "code": "git checkout"}


def _version(distribution: str) -> Optional[str]:
  try:
    return importlib.metadata.version(distribution)
  except importlib.metadata.PackageNotFoundError:
    return None


def package_versions(packages: Sequence[str] = PACKAGES) -> Dict[str, Optional[str]]:
  """Python's version and each installed distribution's (None when it is not installed)."""
  return {"python": platform.python_version(), **{name: _version(name) for name in packages}}


def command_line(argv: Optional[Sequence[str]] = None) -> str:
  """This process's command as one could type it again (``python launch.py --pe=alibi``).

  Args:
    argv: the arguments (default ``sys.argv``). A first element that is a module of a package
      becomes ``python -m <module>``, another ``.py`` file its path relative to the current
      directory.
  """
  argv = list(sys.argv if argv is None else argv)
  if not argv:
    return "python"
  program = pathlib.Path(argv[0])
  if program.suffix == ".py" and (program.resolve().parent / "__init__.py").exists():
    # A module of a package (python -m pejax.sample sets argv[0] to its file): its module name.
    path = program.resolve()
    parts = [] if path.stem == "__main__" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").exists():
      parts.insert(0, folder.name)
      folder = folder.parent
    head = ["python", "-m", ".".join(parts)]
  elif program.suffix == ".py":
    try:
      head = ["python", os.path.relpath(program)]
    except ValueError:  # Another drive (Windows).
      head = ["python", str(program)]
  else:
    head = [argv[0]]
  return " ".join(shlex.quote(a) for a in [*head, *argv[1:]])


def _utc(seconds: float) -> str:
  return f"{datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


def provenance(*, command: Optional[str] = None, started: Optional[float] = None,
               machine: Optional[str] = None) -> Dict[str, Any]:
  """The provenance record of a result written now.

  Args:
    command: the command that produced it (default: :func:`command_line` of this process).
    started: ``time.time()`` when the work began (the record's ``wall_time_s`` counts from it).
    machine: the machine line (default :func:`pejax.machine.describe_machine`; that imports jax).

  Returns:
    a JSON-serializable dict (see the module docstring).
  """
  if machine is None:
    from pejax import machine as machine_lib  # pylint: disable=import-outside-toplevel
    machine = machine_lib.describe_machine()
  now = time.time()
  return {**code_version(), "versions": package_versions(), "machine": machine,
          "command": command if command is not None else command_line(),
          "started": _utc(started) if started is not None else None, "recorded": _utc(now),
          "wall_time_s": round(now - started, 1) if started is not None else None}


def describe(record: Dict[str, Any]) -> List[str]:
  """Markdown lines for a report header: code, versions (and the machine and command if set).

  Args:
    record: a :func:`provenance` record.
  """
  if record.get("commit"):
    code = f"commit `{record['commit'][:12]}`"
    if record.get("dirty"):
      code += (f", with uncommitted changes to {len(record['dirty_files'])} file(s): "
               + ", ".join(f"`{f}`" for f in record["dirty_files"]))
    elif record.get("dirty") is False:
      code += " (clean tree)"
  else:
    code = record.get("code") or "unknown"
  versions = ", ".join(f"{name} {version}" for name, version in record["versions"].items()
                       if version is not None)
  return [f"- code: {code}", f"- versions: {versions}"]
