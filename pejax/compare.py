r"""Compare runs: ``python -m pejax.compare RUN_DIR... [--out=compare.png] [--mode=nonoverlap]``.

Prints one table of perplexity against evaluation length (a row per run, labelled by the
settings that differ between the runs, e.g. ``pe=alibi`` / ``pe=rope scaling=yarn x4``)
with each run's final window-mean training loss and validation loss, and writes one plot of
perplexity vs length with the same labels in the legend. A run that is not finished (still
training, or preempted) is listed as such and left out of the plot: a partial run is never
reported as a result.

Each run directory's ``config.json`` gives the settings and ``results.json`` the perplexities
(``--evaluation=NAME`` reads ``evals/NAME/results.json`` instead).
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
from typing import Any, Dict, List, Optional, Sequence

# Fields never used to tell runs apart (where and how they were written, not what they are).
_IGNORED = ("workdir", "mesh.", "train.log_every", "train.eval_every", "train.checkpoint_every",
            "train.keep_checkpoints", "train.resume", "train.tensorboard", "eval.")


def _flatten(tree: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(_flatten(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def _short(path: str) -> str:
  """``pe.scaling`` -> ``scaling``; a section's ``name`` is the section (``pe.name`` -> ``pe``)."""
  if path.endswith(".name") and path.count(".") == 1:
    return path.split(".")[0]
  return path.split(".")[-1] if path.startswith(("pe.", "model.", "data.", "optim.")) else path


def run_labels(configs: Sequence[Dict[str, Any]]) -> List[str]:
  """One label per run: ``key=value`` for every setting that differs between the runs.

  A RoPE scaling is shown with its factor (``scaling=yarn x4``).

  Args:
    configs: the runs' saved configs (old ``pe.rope_*`` records are read with the new names).

  Returns:
    One label per config, in order.
  """
  from pejax.train import run_directory  # pylint: disable=g-import-not-at-top
  configs = [run_directory.upgrade_saved_config(c) for c in configs]
  flats = [_flatten(c) for c in configs]
  keys = sorted({k for f in flats for k in f})
  differing = [k for k in keys if not any(k == i or (i.endswith(".") and k.startswith(i))
                                          for i in _IGNORED)
               and len({json.dumps(f.get(k), sort_keys=True) for f in flats}) > 1]
  if "pe.factor" in differing and "pe.scaling" in differing:
    differing.remove("pe.factor")
  labels = []
  for i, flat in enumerate(flats):
    parts = []
    for key in differing:
      value = flat.get(key)
      text = f"{_short(key)}={value}"
      if key == "pe.scaling" and value not in ("none", None):
        text += f" x{float(flat.get('pe.factor') or 1.0):g}"
      parts.append(text)
    labels.append(" ".join(parts) or f"run {i + 1}")
  return labels


def load_run(run_dir: pathlib.Path, evaluation: str = "") -> Dict[str, Any]:
  """Config, status, final numbers and perplexity rows of one run directory."""
  from pejax.train import run_directory  # pylint: disable=g-import-not-at-top
  config_path = run_dir / run_directory.CONFIG_FILENAME
  if not config_path.exists():
    raise ValueError(f"{run_dir} is not a run directory (no {run_directory.CONFIG_FILENAME})")
  config = run_directory.upgrade_saved_config(json.loads(config_path.read_text()))
  results_dir = run_dir / run_directory.EVALS_SUBDIR / evaluation if evaluation else run_dir
  results_path = results_dir / "results.json"
  finished = run_directory.is_finished(run_dir) and results_path.exists()
  results = json.loads(results_path.read_text()) if finished else {}
  state = run_directory.run_status(run_dir).get("state", "unknown")
  if not results_path.exists() and state == "finished":
    state = f"no evaluation {evaluation!r}"
  return {"dir": run_dir, "config": config, "finished": finished, "state": state,
          "results": results, "final": run_directory.final_numbers(run_dir)}


def _rows(run: Dict[str, Any], mode: str) -> Dict[int, float]:
  """Length -> perplexity of the run's own (first) table in ``mode``."""
  tables = run["results"].get("perplexity", {})
  if not tables:
    return {}
  first = next(iter(tables.values()))
  return {int(r["length"]): r["perplexity"] for r in first
          if r.get("mode") == mode and r.get("status") == "ok" and r.get("perplexity") is not None}


def _fmt(value: Optional[float]) -> str:
  return "n/a" if value is None or not math.isfinite(value) else f"{value:.3f}"


def compare(run_dirs: Sequence[str], *, out: Optional[str] = "compare.png",
            mode: str = "nonoverlap", evaluation: str = "") -> str:
  """The comparison table as text; writes the plot to ``out`` (skipped when ``None``)."""
  runs = [load_run(pathlib.Path(d), evaluation) for d in run_dirs]
  if not runs:
    raise ValueError("give at least one run directory")
  labels = run_labels([r["config"] for r in runs])
  lengths = sorted({n for r in runs if r["finished"] for n in _rows(r, mode)})
  header = (["run", "label", "train loss (window mean)", "validation loss"]
            + [f"ppl@{n}" for n in lengths])
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  curves = {}
  for run, label in zip(runs, labels):
    final = run["final"]
    cells = [run["dir"].name, label, _fmt(final.get("train_loss")),
             _fmt(final.get("valid_loss"))]
    if run["finished"]:
      rows = _rows(run, mode)
      cells += [_fmt(rows.get(n)) for n in lengths]
      curves[label] = rows
    else:
      cells += [f"({run['state']}, not reported)"] + [""] * max(0, len(lengths) - 1)
    lines.append("| " + " | ".join(cells) + " |")
  title = f"Perplexity ({mode} windows) vs evaluation length"
  text = title + "\n" + "\n".join(lines)
  if out and curves:
    from pejax.eval import report  # pylint: disable=g-import-not-at-top
    from pejax.eval.perplexity import LengthResult  # pylint: disable=g-import-not-at-top
    train_lens = {int(r["config"]["data"]["train_len"]) for r in runs if r["finished"]}
    report.plot_perplexity(
        {label: [LengthResult(n, "nonoverlap", math.log(p), p, math.log2(p), 0, "")
                 for n, p in rows.items()] for label, rows in curves.items()},
        pathlib.Path(out), train_len=train_lens.pop() if len(train_lens) == 1 else None,
        title=title)
    text += f"\n\nwrote {out}"
  return text


def main(argv: Sequence[str]) -> int:
  import argparse  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(prog="python -m pejax.compare", description=__doc__.split(
      "\n\n")[0].split(": ", 1)[-1], formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("runs", nargs="+", help="run directories")
  parser.add_argument("--out", default="compare.png", help="plot path (default compare.png)")
  parser.add_argument("--mode", default="nonoverlap", choices=("nonoverlap", "sliding"))
  parser.add_argument("--evaluation", default="",
                      help="compare evals/<NAME>/ instead of each run's first evaluation")
  args = parser.parse_args(list(argv))
  try:
    print(compare(args.runs, out=args.out, mode=args.mode, evaluation=args.evaluation))
  except ValueError as e:
    parser.error(str(e))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
