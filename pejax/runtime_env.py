"""Process environment that makes XLA:CPU training faster, applied by re-executing the process.

XLA:CPU allocates its output and temporary buffers with ``malloc`` on every call of a compiled
step. Under glibc's defaults those blocks come back to the kernel when freed (``munmap`` of blocks
of 32 MiB or more, trimming of the per-thread arenas XLA's worker threads allocate from) and are
page-faulted in again, 4 KiB at a time, on the next step: 85,000 faults per step of the benchmark
model (4 layers, d=128, batch 16 x 256 tokens). :data:`ALLOCATOR_TUNABLES` keeps freed memory in
the process instead: one arena (``arena_max=1``), no ``mmap``ed blocks (``mmap_max=0``), no
trimming. Measured side by side on 2 CPU cores (``benchmarks/results/train_throughput.md``): 0
page faults per step, training throughput +23% (5235 -> 6450 tokens/s), CPU time per step -20%;
the price is a peak resident set that stays at the heap's high-water mark (926 -> 1545 MiB for
that model). ``glibc.malloc.hugetlb=1`` (transparent huge pages for malloc) was measured too: 552
faults per step and +11%, less than the profile above and nothing on top of it.

glibc reads ``GLIBC_TUNABLES`` only when a process starts, so :func:`apply_runtime_env` re-executes
the current command line with the variable set (once: a marker variable prevents loops).
``launch.py`` and the studies call it first thing. It is opt-out with ``PEJAX_NO_RUNTIME_ENV=1``,
does nothing on non-glibc systems or with glibc older than 2.26 (no tunables), and never
overrides a tunable the user has set.

Usage: the first lines of a program, before its other imports. Re-executing after ``import jax``
is correct, since ``execve`` replaces the whole process, but every import made before it is made
twice: ``launch.py --help`` cost 7.8 s of CPU with its imports before the re-execution and 4.5 s
without (2 cores, 2026-12-07). ``import pejax.runtime_env`` itself loads nothing heavy (pejax's
``__init__`` is lazy)::

  from pejax import runtime_env
  runtime_env.apply_when_main(__name__)   # then the program's imports
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Mapping, Optional

# name -> value; the trim threshold is 64 GiB ("never").
ALLOCATOR_TUNABLES = {
    "glibc.malloc.arena_max": "1",
    "glibc.malloc.mmap_max": "0",
    "glibc.malloc.trim_threshold": str(64 << 30),
}
MARKER = "PEJAX_RUNTIME_ENV_APPLIED"
OPT_OUT = "PEJAX_NO_RUNTIME_ENV"


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


def recommended_env(env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
  """The variables to add or change in ``env`` (default ``os.environ``); empty if none.

  Args:
    env: the environment to complete.

  Returns:
    ``{"GLIBC_TUNABLES": ...}``: the existing tunables followed by those of
    :data:`ALLOCATOR_TUNABLES` they do not set already; ``{}`` when all are set, off Linux, or
    when the C library is not glibc >= 2.26.
  """
  env = os.environ if env is None else env
  glibc = _glibc_version()
  if sys.platform != "linux" or glibc is None or glibc < (2, 26):
    return {}
  tunables = env.get("GLIBC_TUNABLES", "")
  present = {item.split("=", 1)[0] for item in tunables.split(":") if item}
  missing = [f"{name}={value}" for name, value in ALLOCATOR_TUNABLES.items()
             if name not in present]
  if not missing:
    return {}
  return {"GLIBC_TUNABLES": ":".join(([tunables] if tunables else []) + missing)}


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


def apply_when_main(module_name: str) -> None:
  """:func:`apply_runtime_env` when ``module_name`` is ``"__main__"`` (the module runs as a program).

  Lets a module that is both imported (by tests, by other modules) and run (``python -m``) call
  this at its top, before its heavy imports, without re-executing whoever imports it.

  Args:
    module_name: the calling module's ``__name__``.
  """
  if module_name == "__main__":
    apply_runtime_env()


def _original_args() -> list[str]:
  """``sys.argv`` with ``-m module`` restored when the process was started with ``python -m``."""
  orig = getattr(sys, "orig_argv", None)  # Python >= 3.10: the interpreter's own argv.
  if orig:
    return list(orig[1:])
  return list(sys.argv)
