"""Report of the image-grid study: markdown table, JSON results and a bar plot."""

from __future__ import annotations

import json
import pathlib
from typing import Optional, Sequence

import numpy as np

from experiments.image_grid import study
from pejax import provenance

_EVAL_TITLES = {
    "train_grid": "train grid {train}",
    "extrapolate": "{large} extrapolated",
    "interpolate": "{large} interpolated",
}


def summarize(values: Sequence[Optional[float]]) -> Optional[dict]:
  """Mean, std, min, max and count of per-seed accuracies; None if all are n/a."""
  present = [v for v in values if v is not None]
  if not present:
    return None
  arr = np.asarray(present, np.float64)
  return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if len(arr) > 1 else 0.0,
          "min": float(arr.min()), "max": float(arr.max()), "n": int(len(arr))}


def _cell(summary: Optional[dict]) -> str:
  if summary is None:
    return "n/a"
  if summary["n"] == 1:
    return f"{100 * summary['mean']:.1f}"
  return (f"{100 * summary['mean']:.1f} ± {100 * summary['std']:.1f} "
          f"[{100 * summary['min']:.1f}, {100 * summary['max']:.1f}]")


def _grids(run: dict) -> tuple[str, str]:
  cfg = run["config"]
  side = run["data"]["image_size"] // cfg["patch_size"]
  large = side * cfg["eval_scale"]
  return f"{side}x{side}", f"{large}x{large}"


def format_table(run: dict) -> str:
  """Markdown table: one row per PE, test accuracy (%) per evaluation."""
  train, large = _grids(run)
  titles = [_EVAL_TITLES[e].format(train=train, large=large) for e in study.EVALS]
  lines = ["| PE | params | " + " | ".join(titles) + " |",
           "|---|---:|" + "---:|" * len(titles)]
  for pe, evals in run["results"].items():
    cells = [_cell(summarize(evals[e])) for e in study.EVALS]
    lines.append(f"| {pe} | {run['num_params'][pe]} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def format_report(run: dict, meta: dict) -> str:
  """The full ``report.md`` text."""
  cfg = run["config"]
  train, large = _grids(run)
  seeds = len(cfg["seeds"])
  spread = ("mean ± sample std [min, max] over " f"{seeds} seeds" if seeds > 1 else
            "one seed (no spread)")
  return "\n".join([
      "# Image grid study: positional encodings at a larger patch grid",
      "",
      f"Tiny ViT ({cfg['num_layers']} layers, width {cfg['d_model']}, {cfg['num_heads']} heads, "
      f"patch {cfg['patch_size']}) trained on scikit-learn's 8x8 digits "
      f"({run['data']['train']} train / {run['data']['test']} test images) at a {train} patch "
      f"grid for {cfg['steps']} steps (batch {cfg['batch_size']}), evaluated on the test digits "
      f"as trained and upsampled x{cfg['eval_scale']} ({cfg['upsample_method']}), which gives "
      f"{large} patch grids.",
      "",
      f"Test accuracy (%), {spread}:",
      "",
      format_table(run),
      "",
      "* **extrapolated**: integer positions of the larger grid (offsets never seen in "
      "training); n/a for the learned table, which has no rows there.",
      "* **interpolated**: the larger grid squeezed into the training range (float positions "
      f"0, {1 / cfg['eval_scale']:g}, ...); for the learned table, its bilinear resize to "
      f"{large} (ViT / DeiT practice).",
      "* `none` has no positions: its extrapolated and interpolated columns are the same model "
      "and input.",
      "* Every larger-grid column also meets unseen *content* (each new patch covers a quarter "
      "of a training patch), so all PEs lose accuracy; compare PEs within a column.",
      "",
      "## Run",
      "",
      f"* command: `{meta.get('command', '')}`",
      f"* date: {meta.get('date', '')}",
      f"* machine: {meta.get('machine', '')}",
      f"* wall time: {meta.get('wall_seconds', 0.0):.1f} s",
      *([line.replace("- ", "* ", 1) for line in provenance.describe(meta["provenance"])]
        if "provenance" in meta else []),
      "* files: `results.json` (per-seed numbers), `image_grid.png` (bar plot)",
      "",
  ])


def plot(run: dict, path: pathlib.Path) -> None:
  """Grouped bar plot: PE x evaluation, mean accuracy with min-max error bars."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  train, large = _grids(run)
  pes = list(run["results"])
  width = 0.8 / len(study.EVALS)
  fig, ax = plt.subplots(figsize=(1.6 * len(pes) + 2, 3.6))
  x = np.arange(len(pes))
  for i, name in enumerate(study.EVALS):
    means, low, high = [], [], []
    for pe in pes:
      s = summarize(run["results"][pe][name])
      means.append(np.nan if s is None else 100 * s["mean"])
      low.append(0.0 if s is None else 100 * (s["mean"] - s["min"]))
      high.append(0.0 if s is None else 100 * (s["max"] - s["mean"]))
    offsets = x + (i - (len(study.EVALS) - 1) / 2) * width
    ax.bar(offsets, means, width, yerr=[low, high], capsize=2,
           label=_EVAL_TITLES[name].format(train=train, large=large))
    for offset, mean in zip(offsets, means):
      if np.isnan(mean):
        ax.text(offset, 1, "n/a", ha="center", va="bottom", fontsize=7)
  ax.set_xticks(x)
  ax.set_xticklabels(pes)
  ax.set_ylabel("test accuracy (%)")
  ax.set_ylim(0, 100)
  ax.set_title("Tiny ViT on 8x8 digits: train grid vs larger grid")
  ax.legend(fontsize=8, loc="lower left")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def write_report(workdir: str | pathlib.Path, run: dict, meta: dict) -> dict[str, pathlib.Path]:
  """Writes ``report.md``, ``results.json`` and ``image_grid.png`` into ``workdir``.

  Returns:
    ``{"report": path, "results": path, "plot": path}``.
  """
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  paths = {"report": workdir / "report.md", "results": workdir / "results.json",
           "plot": workdir / "image_grid.png"}
  summary = {pe: {e: summarize(v[e]) for e in study.EVALS} for pe, v in run["results"].items()}
  paths["results"].write_text(json.dumps({**run, "summary": summary, "meta": meta}, indent=2))
  paths["report"].write_text(format_report(run, meta))
  plot(run, paths["plot"])
  return paths
