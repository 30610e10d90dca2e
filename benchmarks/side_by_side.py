"""One benchmark on two revisions of pejax, side by side: does a change slow anything down?

A redesign that promises "numbers unchanged, no slowdown" needs the same measurement on the code
before and after, on the same machine at the same time. This script checks out ``--before`` (a
git revision) into a temporary worktree, then runs a benchmark module alternately in that tree
and in this one (before, after, before, after, ...: load drifts hit both alike), each run in its
own process with its own ``--out`` folder, and reports per row the median over runs of the
benchmark's own medians and the ratio after / before (wall clock and CPU time when the benchmark
records both).

Usage (from the repository root)::

  python -m benchmarks.side_by_side --before=c17fb0d --runs=3 \\
      --benchmark=decoder_pe_cost -- --rounds 4 --steps 2 --pes none,rope,alibi,t5,fox,cope

Supported benchmarks: those whose JSON has ``rows`` with a key column and ``median_ms`` /
``cpu_median_ms`` (``decoder_pe_cost``; ``--key`` names the key column, default ``pe``).
Writes ``benchmarks/results/side_by_side_<benchmark>.{md,json}`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
  return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                        text=True).stdout.strip()


def _run(tree: pathlib.Path, benchmark: str, extra: list[str], out: pathlib.Path) -> dict:
  """Runs ``python -m benchmarks.<benchmark>`` in ``tree``; returns its JSON record."""
  out.mkdir(parents=True, exist_ok=True)
  env = dict(os.environ, PYTHONPATH=str(tree), JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS",
                                                                            "cpu"))
  subprocess.run([sys.executable, "-m", f"benchmarks.{benchmark}", *extra, "--out", str(out)],
                 cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
  return json.loads((out / f"{benchmark}.json").read_text())


def _medians(records: list[dict], key: str, field: str) -> dict[str, float]:
  values: dict[str, list[float]] = {}
  for record in records:
    for row in record["rows"]:
      if row.get(field) is not None:
        values.setdefault(row[key], []).append(float(row[field]))
  return {name: statistics.median(v) for name, v in values.items()}


def main(argv: list[str] | None = None) -> dict:
  """Runs the comparison; returns the record it writes.

  Args:
    argv: command-line arguments (``sys.argv[1:]`` when None); the benchmark's own arguments
      follow ``--``.

  Returns:
    The JSON record (setup and one row per key).
  """
  argv = list(sys.argv[1:] if argv is None else argv)
  extra: list[str] = []
  if "--" in argv:
    extra = argv[argv.index("--") + 1:]
    argv = argv[:argv.index("--")]
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--before", required=True, help="git revision of the 'before' code")
  parser.add_argument("--benchmark", default="decoder_pe_cost")
  parser.add_argument("--key", default="pe", help="the rows' key column")
  parser.add_argument("--runs", type=int, default=3, help="runs per tree (alternating)")
  parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
  args = parser.parse_args(argv)
  if args.runs < 1:
    parser.error(f"--runs must be >= 1, got {args.runs}")
  before_commit = _git("rev-parse", "--verify", f"{args.before}^{{commit}}")
  after_commit = _git("rev-parse", "HEAD")
  dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
  records: dict[str, list[dict]] = {"before": [], "after": []}
  load_before = os.getloadavg()
  start = time.time()
  with tempfile.TemporaryDirectory() as scratch:
    tree = pathlib.Path(scratch) / "before"
    _git("worktree", "add", "--detach", str(tree), before_commit)
    try:
      for run in range(args.runs):
        for side, path in (("before", tree), ("after", ROOT)):
          print(f"run {run + 1}/{args.runs}: {side} ...", flush=True)
          records[side].append(_run(path, args.benchmark, extra,
                                    pathlib.Path(scratch) / f"{side}{run}"))
    finally:
      _git("worktree", "remove", "--force", str(tree))
  rows = []
  for field, label in (("median_ms", "wall"), ("cpu_median_ms", "cpu")):
    before = _medians(records["before"], args.key, field)
    after = _medians(records["after"], args.key, field)
    for name in sorted(set(before) & set(after)):
      rows.append(dict(key=name, clock=label, before_ms=before[name], after_ms=after[name],
                       ratio=after[name] / before[name]))
  record = dict(setup=dict(
      benchmark=args.benchmark, arguments=extra, runs=args.runs, before=before_commit,
      after=after_commit + (" + uncommitted changes" if dirty else ""),
      machine=f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
      python=platform.python_version(), load_before=load_before, load_after=os.getloadavg(),
      minutes=round((time.time() - start) / 60, 1),
      date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
      command="python -m benchmarks.side_by_side " + " ".join(sys.argv[1:] if argv is None
                                                              else argv + ["--"] + extra)),
      rows=rows)
  lines = [f"# {args.benchmark}: before ({before_commit[:7]}) vs after ({record['setup']['after'][:7]}"
           f"{' + changes' if dirty else ''})", "",
           f"{record['setup']['date']}, {record['setup']['machine']}, load "
           f"{load_before[0]:.1f} -> {record['setup']['load_after'][0]:.1f}; {args.runs} "
           f"alternating runs per tree, each the benchmark's median over its rounds; the median "
           f"of those runs below.", "", f"`{record['setup']['command']}`", "",
           f"| {args.key} | clock | before (ms) | after (ms) | after / before |",
           "|:--|:--|--:|--:|--:|"]
  lines += [f"| {r['key']} | {r['clock']} | {r['before_ms']:.1f} | {r['after_ms']:.1f} | "
            f"{r['ratio']:.3f} |" for r in rows]
  text = "\n".join(lines) + "\n"
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / f"side_by_side_{args.benchmark}.md").write_text(text)
  (out / f"side_by_side_{args.benchmark}.json").write_text(json.dumps(record, indent=2))
  print(text)
  return record


if __name__ == "__main__":
  main()
