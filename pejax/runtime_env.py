"""Process environment that makes XLA:CPU training faster, applied by re-executing the process.

XLA:CPU allocates its output and temporary buffers with ``malloc``. Under glibc's default
allocator every block of 32 MiB or more (``M_MMAP_THRESHOLD`` caps at 32 MiB on 64-bit) is a
fresh ``mmap``: each call of a compiled step page-faults all of those pages in again (4 KiB at a
time) and ``munmap``s them at the end. ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (glibc >= 2.35)
makes malloc ``madvise`` such mappings for transparent huge pages, 512x fewer faults.
``benchmarks/train_throughput.py`` measures the effect (page faults per step and tokens/s, with
and without, side by side).

glibc reads ``GLIBC_TUNABLES`` only when a process starts, so :func:`apply_runtime_env` re-executes
the current command line with the variable set (once: a marker variable prevents loops). It is
opt-out with ``PEJAX_NO_RUNTIME_ENV=1`` and does nothing on non-glibc systems, with glibc older
than 2.35, or when transparent huge pages are disabled (``never``).

Usage (first lines of a launcher; re-executing after ``import jax`` is correct, since ``execve``
replaces the whole process, but calling it first saves the imports)::

  from pejax import runtime_env
  runtime_env.apply_runtime_env()
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Mapping, Optional

HUGETLB_TUNABLE = "glibc.malloc.hugetlb=1"
MARKER = "PEJAX_RUNTIME_ENV_APPLIED"
OPT_OUT = "PEJAX_NO_RUNTIME_ENV"
_THP_PATH = "/sys/kernel/mm/transparent_hugepage/enabled"


def _glibc_version() -> Optional[tuple[int, int]]:
  """``(major, minor)`` of the running glibc, or ``None`` if the C library is not glibc."""
  lib, version = platform.libc_ver()
  if lib != "glibc" or not version:
    return None
  try:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)
  except ValueError:
    return None


def _thp_enabled() -> bool:
  """Whether transparent huge pages can back ``madvise``d memory (mode ``always``/``madvise``)."""
  try:
    with open(_THP_PATH) as f:
      return "[never]" not in f.read()
  except OSError:
    return False


def recommended_env(env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
  """The variables to add or change in ``env`` (default ``os.environ``); empty if none.

  Args:
    env: the environment to complete.

  Returns:
    ``{"GLIBC_TUNABLES": ...}`` with ``glibc.malloc.hugetlb=1`` appended to any existing
    tunables, when the platform supports it and it is not set yet; otherwise ``{}``.
  """
  env = os.environ if env is None else env
  glibc = _glibc_version()
  if sys.platform != "linux" or glibc is None or glibc < (2, 35) or not _thp_enabled():
    return {}
  tunables = env.get("GLIBC_TUNABLES", "")
  if "glibc.malloc.hugetlb=" in tunables:
    return {}  # The user chose a value: keep it.
  return {"GLIBC_TUNABLES": f"{tunables}:{HUGETLB_TUNABLE}" if tunables else HUGETLB_TUNABLE}


def apply_runtime_env(argv: Optional[list[str]] = None) -> None:
  """Re-executes this process with :func:`recommended_env` if anything is missing.

  Returns normally (without re-executing) when nothing is missing, after a re-execution (marker
  set), or when ``PEJAX_NO_RUNTIME_ENV=1``. Call it early: the process is replaced, so
  anything done before (imports, threads, open files) is done again.

  Args:
    argv: the command line to re-run; defaults to ``[sys.executable] + sys.argv`` (a ``python -m
      module`` invocation is re-run as such).
  """
  if os.environ.get(OPT_OUT) == "1" or os.environ.get(MARKER) == "1":
    return
  extra = recommended_env()
  if not extra:
    return
  if argv is None:
    argv = [sys.executable] + _original_args()
  new_env = {**os.environ, **extra, MARKER: "1"}
  sys.stdout.flush()
  sys.stderr.flush()
  os.execve(argv[0], argv, new_env)


def _original_args() -> list[str]:
  """``sys.argv`` with ``-m module`` restored when the process was started with ``python -m``."""
  orig = getattr(sys, "orig_argv", None)  # Python >= 3.10: the interpreter's own argv.
  if orig:
    return list(orig[1:])
  return list(sys.argv)
