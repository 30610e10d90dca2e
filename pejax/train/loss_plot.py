"""``loss_vs_step.png`` of a run: window-mean training loss and validation loss per step."""

from __future__ import annotations

import math
import pathlib
from typing import Optional

from pejax.eval import report as report_lib
from pejax.train import metrics as metrics_lib

LOSS_PLOT_FILENAME = "loss_vs_step.png"


def write_loss_plot(workdir: pathlib.Path, *, unigram: Optional[float]) -> None:
  """Draws the run's ``metrics.jsonl`` losses into ``<workdir>/loss_vs_step.png``.

  Nothing is written when no loss was logged.

  Args:
    workdir: the run directory.
    unigram: the training split's unigram perplexity, drawn as a reference line (its log,
      in nats), or ``None``.
  """
  records = metrics_lib.read_metrics(workdir)
  series = {"train loss (window mean)": [], "validation loss (train length)": []}
  for record in records:
    loss = record.get("metrics", {}).get("loss")
    if loss is None:
      continue
    key = {"train": "train loss (window mean)",
           "eval": "validation loss (train length)"}.get(record.get("split"))
    if key:
      series[key].append((int(record["step"]), float(loss)))
  if not any(series.values()):
    return
  report_lib.plot_loss(series, workdir / LOSS_PLOT_FILENAME,
                       unigram_loss=math.log(unigram) if unigram else None)
