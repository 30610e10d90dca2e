"""Extrapolation results as a terminal table, CSV, JSON and a PNG plot."""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
import pathlib
from typing import Any, Dict, List, Optional, Sequence

from pejax import json_file
from pejax.eval.passkey import PasskeyResult
from pejax.eval.perplexity import LengthResult


def format_table(results: Sequence[LengthResult], *, train_len: int, title: str = "",
                 token: str = "byte", reference: str = "train") -> str:
  """A fixed-width table: one row per length, perplexity and bits per token per protocol.

  Args:
    results: from :func:`pejax.eval.perplexity_at_lengths`.
    train_len: the reference length of the ``x <reference>`` column (the training length).
    title: optional first line.
    token: what one token is, for the ``bits/<token>`` column: ``"byte"`` for byte-level
      models, ``"token"`` for a pretrained model's own tokenizer.
    reference: the name of the reference length: ``"train"``, or ``"context"`` for a pretrained
      checkpoint's original context.

  Returns:
    The table as text (also valid GitHub markdown).
  """
  modes = sorted({r.mode for r in results}, key=["nonoverlap", "sliding"].index)
  by_key = {(r.length, r.mode): r for r in results}
  lengths = sorted({r.length for r in results})
  header = ["eval len", f"x {reference}"]
  for mode in modes:
    header += [f"ppl {mode}", f"bits/{token} {mode}"]
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
  """Passkey accuracy as a length x depth table.

  Args:
    results: one :class:`PasskeyResult` per (length, depth) cell; every cell of the grid of
      their lengths and depths must be present.

  Returns:
    A Markdown table, one row per length and one column per depth; each cell holds the accuracy
    (two decimals) or the status of a skipped cell.
  """
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
  json_file.write_json_atomic(paths["json"], payload)
  fields = ["label"] + [f.name for f in dataclasses.fields(LengthResult)]
  rows = io.StringIO(newline="")
  writer = csv.DictWriter(rows, fieldnames=fields)
  writer.writeheader()
  for label, rs in tables.items():
    for r in rs:
      writer.writerow({"label": label, **r.to_json()})
  json_file.write_text_atomic(paths["csv"], rows.getvalue())
  plot_perplexity(tables, paths["png"], train_len=meta.get("train_len"), title=title)
  return paths


def readable_log_ticks(low: float, high: float, *, max_ticks: int = 8) -> List[float]:
  """Round tick values (1-2-5 per decade, then 1-1.5-2-3-5-7) covering ``[low, high]``.

  A log axis spanning less than a decade gets only one labelled power of ten from matplotlib's
  default locator; these ticks give it 3 to ``max_ticks`` labels at round numbers.

  Args:
    low: the smallest value shown (> 0).
    high: the largest value shown (> 0).
    max_ticks: the most ticks returned.

  Returns:
    Ascending tick values (empty when ``low`` or ``high`` is not a positive finite number).
  """
  if not (low > 0 and high > 0 and math.isfinite(low) and math.isfinite(high)):
    return []
  low, high = min(low, high), max(low, high)
  for mantissas in ((1,), (1, 2, 5), (1, 1.5, 2, 3, 5, 7), (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8)):
    ticks = []
    for exponent in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1):
      for m in mantissas:
        value = m * 10.0 ** exponent
        if low * 0.999 <= value <= high * 1.001:
          ticks.append(float(f"{value:.6g}"))
    ticks = sorted(set(ticks))
    if len(ticks) >= 3:
      if len(ticks) > max_ticks:
        ticks = ticks[::math.ceil(len(ticks) / max_ticks)]
      return ticks
  # A very narrow range: evenly spaced round values.
  step = (high - low) / 4 or 1.0
  return [float(f"{low + i * step:.3g}") for i in range(5)]


def set_readable_log_ticks(axis: Any, low: float, high: float) -> None:
  """Puts :func:`readable_log_ticks` on a log-scaled matplotlib ``axis`` with plain labels."""
  import matplotlib.ticker  # pylint: disable=g-import-not-at-top
  ticks = readable_log_ticks(low, high)
  if not ticks:
    return
  axis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
  axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
  axis.set_minor_locator(matplotlib.ticker.NullLocator())
  axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def plot_loss(series: Dict[str, Sequence[tuple]], path: pathlib.Path, *,
              unigram_loss: Optional[float] = None, title: str = "") -> pathlib.Path:
  """Loss against training step, one line per series, saved as a PNG.

  Args:
    series: label -> ``[(step, loss), ...]`` points (non-finite losses are skipped).
    path: the PNG file to write.
    unigram_loss: drawn as a horizontal reference line (dash-dot) when given.
    title: the plot's title (default "Loss vs step").

  Returns:
    ``path``.
  """
  return plot_curves(
      path, series, xlabel="training step", ylabel="loss (nats per token)",
      title=title or "Loss vs step", hline=unigram_loss,
      hline_label=f"unigram loss {unigram_loss:.3f}" if unigram_loss is not None else "")


def _fill_band(ax, points: Sequence[tuple], color) -> None:
  """Shades the ``(x, y, low, high)`` points' low-high band, unless it has no width."""
  bands = [p for p in points if len(p) >= 4 and p[2] is not None and p[3] is not None]
  if bands and any(p[2] != p[3] for p in bands):
    ax.fill_between([p[0] for p in bands], [p[2] for p in bands], [p[3] for p in bands],
                    color=color, alpha=0.2, linewidth=0)


def _save_figure(fig, path: os.PathLike | str) -> pathlib.Path:
  """Lays out, writes (creating the folder) and closes ``fig``; returns the path."""
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig.tight_layout()
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def plot_curves(path: os.PathLike | str, series: Dict[str, Sequence[tuple]], *,
                xlabel: str, ylabel: str, title: str = "", logx: bool = False,
                logy: bool = False, vline: Optional[float] = None, vline_label: str = "",
                hline: Optional[float] = None, hline_label: str = "",
                styles: Optional[Dict[str, str]] = None,
                colors: Optional[Dict[str, str]] = None) -> pathlib.Path:
  """Line plot with optional spread bands.

  Args:
    path: PNG path.
    series: label -> points ``(x, y)`` or ``(x, y, low, high)`` (the band is drawn between low
      and high when given).
    xlabel, ylabel, title: axis labels and title.
    logx, logy: log axes (base 2 for x).
    vline, vline_label: optional vertical reference line (e.g. the training length).
    hline, hline_label: optional horizontal reference line (e.g. the unigram loss).
    styles: label -> matplotlib line style (default solid).
    colors: label -> matplotlib color (default: the colour cycle).

  Returns:
    ``path``.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, ax = plt.subplots(figsize=(7, 4.5))
  # More series than the 10 colours of the cycle: every 10 series change the dash pattern and
  # the marker too, so that no two lines look alike.
  many = len(series) > 10
  palette = plt.get_cmap("tab10").colors
  for index, (label, points) in enumerate(series.items()):
    pts = sorted(p for p in points if p[1] is not None and math.isfinite(p[1]))
    if not pts:
      continue
    xs = [p[0] for p in pts]
    style = (styles or {}).get(label, ("-", "--", ":")[index // 10 % 3] if many else "-")
    color = (colors or {}).get(label, palette[index % 10] if many else None)
    marker = ("o", "s", "^")[index // 10 % 3] if many else "o"
    (line,) = ax.plot(xs, [p[1] for p in pts], style,
                      marker=marker if len(pts) < 20 else None, markersize=3, label=label,
                      color=color)
    _fill_band(ax, pts, line.get_color())
  if vline is not None:
    ax.axvline(vline, color="gray", linestyle=":", label=vline_label or None)
  if hline is not None:
    ax.axhline(hline, color="black", linestyle="-.", linewidth=0.8, label=hline_label or None)
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  plain = ticker.FuncFormatter(lambda v, _: f"{v:g}")
  if logx:
    ax.set_xscale("log", base=2)
    xs = sorted({p[0] for points in series.values() for p in points})
    if 0 < len(xs) <= 12:
      ax.set_xticks(xs)
      ax.xaxis.set_major_formatter(plain)
      ax.xaxis.set_minor_formatter(ticker.NullFormatter())
  if logy:
    # Round ticks over the data's range: a log axis spanning less than a decade otherwise gets
    # a single labelled tick.
    ax.set_yscale("log")
    ys = [v for points in series.values() for p in points for v in p[1:]
          if v is not None and math.isfinite(v) and v > 0]
    if ys:
      set_readable_log_ticks(ax.yaxis, min(ys), max(ys))
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=7, ncol=2 if many else 1)
  return _save_figure(fig, path)


def plot_panels(path: os.PathLike | str, panels: Dict[str, Dict[str, Sequence[tuple]]], *,
                xlabel: str, ylabel: str, title: str = "", vline: Optional[float] = None,
                vline_label: str = "", styles: Optional[Dict[str, str]] = None,
                colors: Optional[Dict[str, str]] = None, ncols: int = 4) -> pathlib.Path:
  """Small multiples: one panel per group of series, shared axes, for too many lines to read.

  Args:
    path: PNG path.
    panels: panel title -> (label -> points ``(x, y)`` or ``(x, y, low, high)``); the same
      label gets the same colour and style in every panel.
    xlabel, ylabel, title: the figure's axis labels and title.
    vline, vline_label: optional vertical reference line in every panel.
    styles: label -> matplotlib line style (default solid).
    colors: label -> matplotlib colour (default: one colour of the cycle per distinct label).
    ncols: panels per row.

  Returns:
    ``path``.

  Raises:
    ValueError: for no panels or ``ncols < 1``.
  """
  if not panels:
    raise ValueError("panels must not be empty")
  if ncols < 1:
    raise ValueError(f"ncols must be >= 1, got {ncols}")
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  ncols = min(ncols, len(panels))
  nrows = -(-len(panels) // ncols)
  fig, axes = plt.subplots(nrows, ncols, figsize=(3.0 * ncols, 2.3 * nrows + 0.8),
                           sharex=True, sharey=True, squeeze=False)
  palette = plt.get_cmap("tab10").colors
  labels: List[str] = []
  for series in panels.values():
    labels += [label for label in series if label not in labels]
  for ax, (name, series) in zip(axes.flat, panels.items()):
    for label, points in series.items():
      pts = sorted(p for p in points if p[1] is not None and math.isfinite(p[1]))
      if not pts:
        continue
      color = (colors or {}).get(label, palette[labels.index(label) % 10])
      ax.plot([p[0] for p in pts], [p[1] for p in pts], (styles or {}).get(label, "-"),
              color=color, linewidth=1.2, label=label)
      _fill_band(ax, pts, color)
    if vline is not None:
      ax.axvline(vline, color="gray", linestyle=":", label=vline_label or None)
    ax.set_title(name, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6, loc="best")
  for ax in list(axes.flat)[len(panels):]:
    ax.set_visible(False)
  fig.supxlabel(xlabel)
  fig.supylabel(ylabel)
  if title:
    fig.suptitle(title)
  return _save_figure(fig, path)


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
    set_readable_log_ticks(ax.yaxis, min(values), max(values))
  ax.set_xlabel("evaluation length (tokens)")
  ax.set_ylabel("perplexity (bytes)")
  ax.set_title(title or "Perplexity vs evaluation length")
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path
