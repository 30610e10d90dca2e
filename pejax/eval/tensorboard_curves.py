"""An evaluation as TensorBoard events: perplexity (or task accuracy) against length, and its plot.

Tags written into the event folder :func:`write_evaluation` is given (one TensorBoard run)::

    perplexity_vs_length/<mode>            the model as evaluated; step = evaluation length
    perplexity_vs_length/<mode>/<variant>  every other table of the evaluation, e.g. a zero-shot
                                           RoPE scaling (``zero-shot_yarn_x4``)
    accuracy_vs_length                     a synthetic task's exact-match accuracy; step = length
    perplexity_vs_length (image)           the evaluation's ``perplexity_vs_length.png``; step =
                                           the training step the model was evaluated at

The step is the evaluation length rather than one ``ppl@<len>`` tag per length because
TensorBoard draws a scalar tag as a curve over its step: ``perplexity_vs_length/nonoverlap`` then
*is* the extrapolation curve, and the same tag in every run and every evaluation folder is drawn
in one chart, one line per TensorBoard run (``tensorboard --logdir runs`` overlays the runs, like
``python -m pejax.compare``); ``ppl@<len>`` tags would give one chart per length with one point
each.

Each evaluation has its own event folder (:mod:`pejax.train.experiment` uses
``<run>/tensorboard/results/`` for the first and ``<run>/tensorboard/evals/<name>/`` for later
ones), never the training one: a resumed training writer restarts its folder at the resumed step
(TensorBoard then hides every event at a higher step, and evaluation lengths are usually higher
than the step), and the training scalars are never touched. The folder starts with a restart
marker at step 0, so writing an evaluation again into the same folder shows only the newest one
in TensorBoard; the older event files stay on disk.
"""

from __future__ import annotations

import math
import os
import re
import time
from typing import Any, List, Mapping, Optional, Sequence

import numpy as np

from pejax.eval.perplexity import LengthResult

PERPLEXITY_TAG = "perplexity_vs_length"
ACCURACY_TAG = "accuracy_vs_length"
# Characters TensorBoard accepts in a tag (tensorboardX renames any other to "_", with a warning).
_TAG_UNSAFE = re.compile(r"[^-\w.]+")


def variant_name(label: str, base: str) -> str:
  """The tag suffix of a table: ``label`` without the ``base + " + "`` prefix, tag-safe.

  Args:
    label: a table's label (``"rope + zero-shot yarn x4"``).
    base: the first table's label (``"rope"``): the model as evaluated.

  Returns:
    ``""`` for the first table itself, else e.g. ``"zero-shot_yarn_x4"``.
  """
  if label == base:
    return ""
  if label.startswith(base + " + "):
    label = label[len(base) + 3:]
  return _TAG_UNSAFE.sub("_", label).strip("_") or "table"


def scalar_points(tables: Mapping[str, Sequence[Any]]) -> dict[str, list[tuple[int, float]]]:
  """The ``tag -> [(length, value), ...]`` curves :func:`write_evaluation` writes.

  Args:
    tables: label -> rows, the first label being the model as evaluated. A row is a
      :class:`~pejax.eval.perplexity.LengthResult` (perplexity, per mode) or a task-accuracy
      dict (``{"length", "accuracy", "status"}``). Rows whose status is not ``"ok"`` or whose
      value is not finite are left out.

  Returns:
    The points of each tag, in row order.

  Raises:
    TypeError: a row that is neither kind.
  """
  points: dict[str, list[tuple[int, float]]] = {}
  base = next(iter(tables), "")
  for label, rows in tables.items():
    variant = variant_name(label, base)
    for row in rows:
      if isinstance(row, Mapping):
        length, status, value, tag = (row.get("length"), row.get("status"), row.get("accuracy"),
                                      ACCURACY_TAG)
      elif isinstance(row, LengthResult):
        length, status, value, tag = (row.length, row.status, row.perplexity,
                                      f"{PERPLEXITY_TAG}/{row.mode}")
      else:
        raise TypeError(f"tables[{label!r}] rows must be LengthResult or task-accuracy dicts, "
                        f"got {type(row).__name__}")
      if status != "ok" or value is None or not math.isfinite(float(value)):
        continue
      name = f"{tag}/{variant}" if variant else tag
      points.setdefault(name, []).append((int(length), float(value)))
  return points


def _png_pixels(path: os.PathLike | str) -> np.ndarray:
  """``[H, W, 3]`` uint8 pixels of a PNG file."""
  from PIL import Image  # pylint: disable=g-import-not-at-top  (matplotlib's own dependency)
  with Image.open(path) as image:
    return np.asarray(image.convert("RGB"))


def write_evaluation(logdir: os.PathLike | str, tables: Mapping[str, Sequence[Any]], *,
                     step: int, plot: Optional[os.PathLike | str] = None) -> Optional[List[str]]:
  """Writes one evaluation's curves (and its plot) as TensorBoard events into ``logdir``.

  Args:
    logdir: the evaluation's own event folder (created).
    tables: label -> rows, as :func:`scalar_points` reads them.
    step: the training step of the evaluated model (the image's step).
    plot: the evaluation's perplexity-vs-length PNG, added as an image when it exists.

  Returns:
    The scalar tags written (sorted; an image tag is not listed), or ``None`` when
    ``tensorboardX`` is not installed (nothing written).
  """
  points = scalar_points(tables)
  try:
    import tensorboardX  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  # purge_step=0: a restart marker, so TensorBoard shows only this evaluation of the folder.
  # The suffix keeps a second writer in the same second from truncating the first one's file
  # (tensorboardX names files by the second); names still sort by time, as TensorBoard reads.
  writer = tensorboardX.SummaryWriter(logdir=os.fspath(logdir), purge_step=0,
                                      filename_suffix=f".{time.time_ns()}")
  try:
    for tag, curve in points.items():
      for length, value in curve:
        writer.add_scalar(tag, value, global_step=length)
    if plot is not None and os.path.exists(plot):
      writer.add_image(PERPLEXITY_TAG, _png_pixels(plot), global_step=int(step),
                       dataformats="HWC")
  finally:
    writer.close()
  return sorted(points)
