"""``python -m experiments.algorithmic.leaderboard``: the PE x task-family table of the results.

Reads the committed ``results.json`` of the algorithmic studies (``experiments/results/<study>/``)
and writes, between the markers ``<!-- leaderboard:start -->`` and ``<!-- leaderboard:end -->``
of ``experiments/results/README.md`` (its report links are relative to that directory), one row
per PE variant and one column per task family: the mean out-of-distribution exact match over the
family's tasks (or the metric a column names: the Ruoss tasks are scored per token, as in the
paper), median [min-max] over seeds. Only full runs give cells (issue 45): a quick run is named
under the table, not shown in it. Each column names the run it comes from (seeds, step cap,
date, commit) and its view: "raw" (every trained seed with the accuracy it measured, fit or not)
for records written since the scoring views, "trainability" (a task a seed did not fit counts 0)
for the records before them.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence

from experiments.algorithmic import seed_comparison
from experiments.algorithmic import sweep
from experiments.study import table_cells

ROOT = pathlib.Path(__file__).resolve().parents[2]
STUDIES = ("length_generalization", "kazemnejad_suite", "ruoss_suite", "content_tasks")
START = "<!-- leaderboard:start -->"
END = "<!-- leaderboard:end -->"


def load(results_dir: pathlib.Path, studies: Sequence[str] = STUDIES) -> List[Dict[str, Any]]:
  """The ``results.json`` payloads of the studies that have one, in ``studies`` order."""
  out = []
  for study in studies:
    path = results_dir / study / "results.json"
    if path.exists():
      payload = json.loads(path.read_text())
      if "leaderboard" in payload.get("results", {}):
        out.append(payload)
  return out


def table(payloads: Sequence[Mapping[str, Any]]) -> str:
  """The markdown table (and a line per column saying which run it comes from)."""
  columns, notes, left_out = [], [], []
  for p in payloads:
    if p.get("mode") != "full":
      left_out.append(f"`{p['study']}` ({p.get('mode')} run, {p.get('date')}: indicative, not "
                      f"shown; [report]({p['study']}/report.md))")
      continue
    settings = p["results"]["settings"]
    recipe = settings["recipe"]
    metric = settings.get("metric", "exact_match")
    view = ("raw: every seed as measured, fit or not"
            if "leaderboard_trainability" in p["results"]
            else "trainability: a task a seed did not fit counts 0 (recorded before the raw view)")
    commit = (p.get("provenance") or {}).get("commit")
    for family, board in p["results"]["leaderboard"].items():
      if metric != "exact_match":  # The column says it is not the table's exact match.
        family = f"{family} ({sweep.METRICS[metric]})"
      columns.append((family, board))
      notes.append(f"- {family}: `{p['study']}` full run, {len(settings['seeds'])} "
                   f"seed(s), training to >= {recipe['fit_threshold']:g} in-distribution or "
                   + seed_comparison.cap_text(recipe["max_steps"], settings.get("rescue_steps", 0))
                   + f", {p['date']}, "
                   + (f"commit {commit[:12]}" if commit else "commit not recorded (stale)")
                   + f"; view {view} "
                   f"([report]({p['study']}/report.md))")  # Relative to experiments/results/.
  if left_out:
    notes.append("- not shown: " + "; ".join(left_out))
  variants: List[str] = []
  for _, board in columns:
    variants += [v for v in board if v not in variants]
  header = ["PE"] + [family for family, _ in columns]
  rows = [[v] + [table_cells.median_cell(board[v], 2) if v in board else "" for _, board in columns]
          for v in variants]
  return (table_cells.markdown_table(header, rows) + "\n\n"
          + "\n".join(notes) + "\n")


def update_readme(readme: pathlib.Path, text: str) -> bool:
  """Replaces the text between the markers; ``False`` when the file has no markers."""
  content = readme.read_text()
  if START not in content or END not in content:
    return False
  head, rest = content.split(START, 1)
  _, tail = rest.split(END, 1)
  readme.write_text(f"{head}{START}\n{text}{END}{tail}")
  return True


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Regenerates the table of ``experiments/results/README.md`` from the results; prints it."""
  del argv
  results = ROOT / "experiments" / "results"
  text = table(load(results))
  print(text)
  if not update_readme(results / "README.md", text):
    print(f"experiments/results/README.md has no {START} ... {END} markers", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
