"""What each test costs in JAX compilation: traces, lowerings, compiles and cache hits per test.

The suite's time is mostly compiling small programs (docs/tests.md), so "which tests compile
what, and how often" is the question when it gets slow. With ``PEJAX_TEST_COMPILE_CENSUS=DIR``
set, every pytest process (xdist workers included) appends one JSON line per test to
``DIR/census-<worker>.jsonl``, from JAX's monitoring events in that process:

  traces / trace_s        jaxpr traces (``jax.jit`` / ``nnx.jit`` cache misses, eager ops)
  lower_s                 jaxpr -> StableHLO
  compiles / compile_s    backend compiles requested, persistent-cache reads included
  cache_hits / cache_misses   of the persistent compilation cache
  by_function             compiles per function name (the top 8)

Programs compiled inside subprocesses the test starts (``launch.py``, studies) are not counted
here; a cold run into an empty cache folder counts them (one file per distinct program:
``PEJAX_TEST_JAX_CACHE=DIR``).

Summary of a census::

  python tests/compile_census.py DIR            # totals, the costliest files and tests
  python tests/compile_census.py DIR --top 40   # more rows

The plugin is registered by tests/conftest.py only when the variable is set; it adds nothing to
an ordinary run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import sys
import time
from typing import Dict, List

ENV = "PEJAX_TEST_COMPILE_CENSUS"

_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_COMPILE = "/jax/core/compile/backend_compile_duration"
_HIT = "/jax/compilation_cache/cache_hits"
_MISS = "/jax/compilation_cache/cache_misses"


class Census:
  """Counters fed by JAX's monitoring listeners; :meth:`take` returns and resets them."""

  def __init__(self):
    self._reset()

  def _reset(self):
    self.traces = 0
    self.trace_s = 0.0
    self.lower_s = 0.0
    self.compiles = 0
    self.compile_s = 0.0
    self.cache_hits = 0
    self.cache_misses = 0
    self.by_function: Dict[str, int] = collections.Counter()

  def on_duration(self, event: str, duration: float, **kwargs) -> None:
    if event == _TRACE:
      self.traces += 1
      self.trace_s += duration
    elif event == _LOWER:
      self.lower_s += duration
    elif event == _COMPILE:
      self.compiles += 1
      self.compile_s += duration
      self.by_function[str(kwargs.get("fun_name", "?"))] += 1

  def on_event(self, event: str, **kwargs) -> None:
    del kwargs
    if event == _HIT:
      self.cache_hits += 1
    elif event == _MISS:
      self.cache_misses += 1

  def take(self) -> dict:
    record = dict(traces=self.traces, trace_s=round(self.trace_s, 3),
                  lower_s=round(self.lower_s, 3), compiles=self.compiles,
                  compile_s=round(self.compile_s, 3), cache_hits=self.cache_hits,
                  cache_misses=self.cache_misses,
                  by_function=dict(collections.Counter(self.by_function).most_common(8)))
    self._reset()
    return record


class CensusPlugin:
  """A pytest plugin writing one census line per test (setup, call and teardown together)."""

  def __init__(self, directory: str):
    import jax  # pylint: disable=import-outside-toplevel
    self.census = Census()
    jax.monitoring.register_event_duration_secs_listener(self.census.on_duration)
    jax.monitoring.register_event_listener(self.census.on_event)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    path = pathlib.Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    self._file = open(path / f"census-{worker}-{os.getpid()}.jsonl", "a", encoding="utf-8")  # pylint: disable=consider-using-with

  def pytest_runtest_logstart(self, nodeid, location):  # pylint: disable=unused-argument
    self.census.take()  # Whatever ran between tests (collection, other plugins) is not billed.
    self._started = time.monotonic()

  def pytest_runtest_logfinish(self, nodeid, location):  # pylint: disable=unused-argument
    record = dict(test=nodeid, wall_s=round(time.monotonic() - self._started, 3),
                  **self.census.take())
    self._file.write(json.dumps(record) + "\n")
    self._file.flush()


def load(directory: pathlib.Path) -> List[dict]:
  """Every census line under ``directory``."""
  records = []
  for path in sorted(pathlib.Path(directory).glob("census-*.jsonl")):
    for line in path.read_text(encoding="utf-8").splitlines():
      if line.strip():
        records.append(json.loads(line))
  return records


def summarize(records: List[dict], *, top: int = 20) -> str:
  """Totals, then the files and tests with the most compiles and the most wall time."""
  if not records:
    raise ValueError("no census records: run pytest with PEJAX_TEST_COMPILE_CENSUS=DIR first")
  keys = ("wall_s", "traces", "trace_s", "lower_s", "compiles", "compile_s", "cache_hits",
          "cache_misses")
  total = {k: sum(r[k] for r in records) for k in keys}
  lines = [f"{len(records)} tests: " + ", ".join(
      f"{k} {total[k]:.0f}" if isinstance(total[k], float) else f"{k} {total[k]}" for k in keys)]
  by_file: Dict[str, Dict[str, float]] = collections.defaultdict(collections.Counter)
  for r in records:
    f = r["test"].split("::")[0]
    for k in keys:
      by_file[f][k] += r[k]
    by_file[f]["tests"] += 1
  lines.append(f"\nfiles by wall time (top {top}):")
  lines.append(f"{'wall_s':>8} {'tests':>5} {'compiles':>8} {'compile_s':>9} {'trace_s':>7}  file")
  for f, c in sorted(by_file.items(), key=lambda kv: -kv[1]["wall_s"])[:top]:
    lines.append(f"{c['wall_s']:8.1f} {int(c['tests']):5d} {int(c['compiles']):8d} "
                 f"{c['compile_s']:9.1f} {c['trace_s']:7.1f}  {f}")
  lines.append(f"\ntests by compiles (top {top}):")
  for r in sorted(records, key=lambda r: -r["compiles"])[:top]:
    lines.append(f"{r['compiles']:6d} compiles {r['compile_s']:6.1f} s {r['wall_s']:6.1f} s wall"
                 f"  {r['test']}")
  functions: Dict[str, int] = collections.Counter()
  for r in records:
    functions.update(r.get("by_function", {}))
  lines.append(f"\nfunctions compiled most often across tests (top {top}, from each test's "
               "top 8):")
  for name, n in functions.most_common(top):
    lines.append(f"{n:6d}  {name}")
  return "\n".join(lines)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("directory", type=pathlib.Path)
  parser.add_argument("--top", type=int, default=20)
  args = parser.parse_args(argv)
  try:
    print(summarize(load(args.directory), top=args.top))
  except ValueError as e:
    print(f"compile_census: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
