"""A study's report: ``report.md`` (header, verdicts, sections, plots) and ``results.json``.

A study writes one self-contained report into its workdir::

    report.md      header (command, date, machine), the "Expectation vs measured" section whose
                   verdicts come from the numbers, settings, tables and embedded PNGs
    results.json   every measured number plus the verdicts
    *.png          plots (small, dpi 100)
"""

from __future__ import annotations

import datetime
import json
import math
import os
import pathlib
import time
from typing import Any, Callable, Dict, List, Mapping, Sequence

import numpy as np

from experiments.study import expectations
from experiments.study import study_options
from experiments.study import table_cells
from experiments.study import trained_runs
from pejax import provenance


class Report:
  """A markdown report assembled section by section, then written with its JSON.

  Args:
    title: the report's title.
    study: the study's name (default workdir ``runs/<study>``).
    options: the :class:`StudyOptions` of the run (command, mode).
  """

  def __init__(self, title: str, *, study: str, options: study_options.StudyOptions):
    self.title = title
    self.study = study
    self.options = options
    self.started = time.time()
    self.parts: List[str] = []
    self.verdicts: List[expectations.Verdict] = []
    self.images: List[str] = []
    self.runs: List[trained_runs.RunInfo] = []
    # Non-empty (e.g. "1 seed, 800 steps"): verdicts are printed as indicative, never as a bold
    # held / did not hold. Quick mode is always indicative.
    self.indicative = "quick mode" if options.quick else ""
    # Who decides the indicative verdicts (the last line of the verdict section).
    self.decided_by = "the full run (3 seeds, to convergence)"

  def models_per_arm(self, count: int) -> None:
    """Labels the verdicts indicative when each compared arm rests on one model.

    One model per arm has no seed spread, so no verdict of it can be more than indicative
    (issue 45); a quick run keeps its own label.
    """
    if count <= 1 and not self.indicative:
      self.indicative = "one model per arm, no seed spread"
      self.decided_by = "a run with several seeds per arm"

  def add_runs(self, runs: Sequence[trained_runs.RunInfo]) -> None:
    """Records the trained models (their training time goes into the header)."""
    self.runs.extend(runs)

  def section(self, heading: str, text: str = "") -> None:
    self.parts.append(f"## {heading}\n\n{text}".rstrip() + "\n")

  def text(self, text: str) -> None:
    self.parts.append(text.rstrip() + "\n")

  def table(self, header: Sequence[str], rows: Sequence[Sequence[Any]], *,
            caption: str = "", align: str = "") -> None:
    block = (f"{caption}\n\n" if caption else "") + table_cells.markdown_table(header, rows,
                                                                               align=align)
    self.parts.append(block + "\n")

  def image(self, path: os.PathLike | str, alt: str) -> None:
    """Embeds a PNG written into the report directory (by file name, so the folder moves)."""
    name = pathlib.Path(path).name
    self.images.append(name)
    self.parts.append(f"![{alt}]({name})\n")

  def add_verdict(self, v: expectations.Verdict) -> expectations.Verdict:
    self.verdicts.append(v)
    return v

  def status_text(self, v: expectations.Verdict) -> str:
    """The verdict cell: bold status, or ``indicative (...): status`` for quick / 1-seed runs."""
    if self.indicative:
      return f"indicative ({self.indicative}): {v.status}"
    return f"**{v.status}**"

  def verdict_section(self) -> str:
    rows = [[v.expectation, v.criterion, v.measured, self.status_text(v)] for v in self.verdicts]
    lines = ["## Expectation vs measured", "",
             table_cells.markdown_table(["published expectation", "criterion", "measured",
                                         "verdict"], rows,
                            align="llll")]
    by_note: Dict[str, List[str]] = {}  # The same note for several claims is shown once.
    for v in self.verdicts:
      if v.note:
        by_note.setdefault(v.note, []).append(v.expectation.split("(")[0].strip())
    notes = [f"- *{'; '.join(claims)}*: {note}" for note, claims in by_note.items()]
    if notes:
      lines += ["", "Notes:", ""] + notes
    held = sum(v.held is True for v in self.verdicts)
    floors = sum(v.status == expectations.FLOOR for v in self.verdicts)
    counted = len(self.verdicts) - floors  # At the floor: counted neither way.
    floor_text = (f" ({floors} not measurable at the floor, counted neither way)"
                  if floors else "")
    if self.indicative:
      lines += ["", f"Indicative only ({self.indicative}): {held} of {counted} "
                f"expectations pointed the expected way{floor_text}; {self.decided_by} decides."]
    else:
      lines += ["", f"{held} of {counted} expectations held at this scale{floor_text}."]
    return "\n".join(lines) + "\n"

  def provenance(self) -> Dict[str, Any]:
    """The study's provenance record (pejax.provenance): commit, versions, machine, command."""
    return provenance.provenance(command=self.options.command_line(), started=self.started)

  def markdown(self, record: Mapping[str, Any] | None = None) -> str:
    """The report; ``record`` is the provenance its header states (default: taken now)."""
    record = record if record is not None else self.provenance()
    elapsed = time.time() - self.started
    mode = "quick" if self.options.quick else "full"
    header = [f"# {self.title}", "",
              f"- command: `{self.options.command_line()}`",
              f"- mode: {mode}",
              f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
              f"- machine: {record['machine']}",
              *provenance.describe(record),
              f"- study wall time: {elapsed / 60:.1f} min (models reused from earlier runs "
              "are not retrained)"]
    if self.runs:
      total = sum(r.train_seconds or 0.0 for r in self.runs)
      reused = sum(r.reused for r in self.runs)
      header.append(f"- models: {len(self.runs)} ({reused} reused), total training time "
                    f"{total / 60:.1f} min (from their metrics.jsonl)")
    header.append("")
    return "\n".join(header) + "\n" + self.verdict_section() + "\n" + "\n".join(self.parts)

  def write(self, workdir: os.PathLike | str, results: Mapping[str, Any]) -> pathlib.Path:
    """Writes ``report.md`` and ``results.json`` (results + verdicts + header facts)."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "report.md"
    record = self.provenance()
    path.write_text(self.markdown(record))
    payload = {"study": self.study, "title": self.title,
               "mode": "quick" if self.options.quick else "full",
               "command": self.options.command_line(), "machine": record["machine"],
               "provenance": record,
               "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
               "wall_time_s": time.time() - self.started,
               "indicative": self.indicative,
               "verdicts": [v.to_json() for v in self.verdicts], "results": results}
    (workdir / "results.json").write_text(json.dumps(_json_safe(payload), indent=1) + "\n")
    return path


def _json_safe(value: Any) -> Any:
  if isinstance(value, Mapping):
    return {str(k): _json_safe(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_json_safe(v) for v in value]
  if isinstance(value, (np.floating, float)):
    return float(value) if math.isfinite(float(value)) else None
  if isinstance(value, np.integer):
    return int(value)
  if isinstance(value, pathlib.Path):
    return str(value)
  return value


def write_report(report: "Report", workdir, results: dict, *, study: str,
                 log: Callable[[str], None] = print) -> dict:
  """Writes ``report`` with ``results`` into ``workdir`` and logs every verdict; returns results."""
  path = report.write(workdir, results)
  log(f"{study}: wrote {path}")
  for v in report.verdicts:
    status = f"indicative: {v.status}" if report.indicative else v.status
    log(f"  [{status}] {v.expectation}: {v.measured}")
  return results
