"""Extrapolation results as a terminal table, CSV, JSON and a PNG plot."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import pathlib
from typing import Any, Dict, List, Optional, Sequence

from pejax.eval.passkey import PasskeyResult
from pejax.eval.perplexity import LengthResult


def format_table(results: Sequence[LengthResult], *, train_len: int, title: str = "") -> str:
  """A fixed-width table: one row per length, perplexity and bits/byte per protocol.

  Args:
    results: from :func:`pejax.eval.perplexity_at_lengths`.
    train_len: training length (the ``x train`` column).
    title: optional first line.

  Returns:
    The table as text (also valid GitHub markdown).
  """
  modes = sorted({r.mode for r in results}, key=["nonoverlap", "sliding"].index)
  by_key = {(r.length, r.mode): r for r in results}
  lengths = sorted({r.length for r in results})
  header = ["eval len", "x train"]
  for mode in modes:
    header += [f"ppl {mode}", f"bits/byte {mode}"]
  rows = []
  for length in lengths:
    row = [str(length), f"{length / train_len:g}"]
    for mode in modes:
      r = by_key.get((length, mode))
      if r is None:
        row += ["", ""]
      elif r.status != "ok":
        row += [r.status, ""]
      else:
        row += [f"{r.perplexity:.3f}", f"{r.bits_per_byte:.3f}"]
    rows.append(row)
  widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
  fmt = lambda cells: "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths)) + " |"
  lines = [title] if title else []
  lines += [fmt(header), "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"]
  lines += [fmt(r) for r in rows]
  return "\n".join(lines)


def format_passkey_table(results: Sequence[PasskeyResult]) -> str:
  """Passkey accuracy as a length x depth table."""
  depths = sorted({r.depth for r in results})
  lengths = sorted({r.length for r in results})
  by_key = {(r.length, r.depth): r for r in results}
  header = ["length"] + [f"depth {d:.2f}" for d in depths]
  lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
  for length in lengths:
    cells = [str(length)]
    for d in depths:
      r = by_key[(length, d)]
      cells.append(f"{r.accuracy:.2f}" if r.status == "ok" else r.status)
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def write_results(workdir: pathlib.Path, tables: Dict[str, Sequence[LengthResult]], *,
                  meta: Dict[str, Any], passkey: Sequence[PasskeyResult] = (),
                  title: str = "") -> Dict[str, pathlib.Path]:
  """Writes ``results.json``, ``results.csv`` and ``perplexity_vs_length.png`` into ``workdir``.

  Args:
    workdir: output directory (created if missing).
    tables: label (e.g. ``"rope"``, ``"rope + zero-shot yarn x4"``) -> results.
    meta: run facts stored in the JSON (``train_len`` also draws the training-length line).
    passkey: optional passkey results.
    title: plot title.

  Returns:
    The written paths by kind (``json``, ``csv``, ``png``).
  """
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  paths = {"json": workdir / "results.json", "csv": workdir / "results.csv",
           "png": workdir / "perplexity_vs_length.png"}
  payload = {"meta": meta,
             "perplexity": {label: [r.to_json() for r in rs] for label, rs in tables.items()},
             "passkey": [r.to_json() for r in passkey]}
  paths["json"].write_text(json.dumps(payload, indent=1, default=str) + "\n")
  fields = ["label"] + [f.name for f in dataclasses.fields(LengthResult)]
  with paths["csv"].open("w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=fields)
    writer.writeheader()
    for label, rs in tables.items():
      for r in rs:
        writer.writerow({"label": label, **r.to_json()})
  plot_perplexity(tables, paths["png"], train_len=meta.get("train_len"), title=title)
  return paths


def plot_perplexity(curves: Dict[str, Sequence[LengthResult]], path: pathlib.Path, *,
                    train_len: Optional[int] = None, title: str = "",
                    spreads: Optional[Dict[str, List[tuple]]] = None) -> pathlib.Path:
  """Perplexity against evaluation length (log-log), one line per curve and protocol.

  Args:
    curves: label -> results of that model.
    path: PNG path.
    train_len: draws a vertical line at the training length when given.
    title: plot title.
    spreads: optional label -> list of (length, low, high) drawn as a shaded band.

  Returns:
    ``path``.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  import matplotlib.ticker  # pylint: disable=g-import-not-at-top

  fig, ax = plt.subplots(figsize=(7, 4.5))
  for label, results in curves.items():
    for mode, style in (("nonoverlap", "-"), ("sliding", "--")):
      pts = sorted((r.length, r.perplexity) for r in results
                   if r.mode == mode and r.status == "ok" and math.isfinite(r.perplexity))
      if pts:
        name = label if mode == "nonoverlap" else f"{label} (sliding)"
        ax.plot(*zip(*pts), style, marker="o", label=name)
    if spreads and label in spreads and spreads[label]:
      xs, lo, hi = zip(*sorted(spreads[label]))
      ax.fill_between(xs, lo, hi, alpha=0.2)
  if train_len:
    ax.axvline(train_len, color="gray", linestyle=":", label=f"train length {train_len}")
  ax.set_xscale("log", base=2)
  lengths = sorted({r.length for rs in curves.values() for r in rs})
  if lengths:
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
  values = [r.perplexity for rs in curves.values() for r in rs
            if r.status == "ok" and math.isfinite(r.perplexity)]
  if values and max(values) / min(values) > 4:  # Log scale only when curves span a wide range.
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
  ax.set_xlabel("evaluation length (tokens)")
  ax.set_ylabel("perplexity (bytes)")
  ax.set_title(title or "Perplexity vs evaluation length")
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path
