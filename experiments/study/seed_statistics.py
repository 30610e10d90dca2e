"""The spread of one measured number over seeds (or any repeated measurement)."""

from __future__ import annotations

import math
import statistics
from typing import Any, Dict, Optional, Sequence

import numpy as np


def spread(values: Sequence[Optional[float]]) -> Dict[str, Any]:
  """Mean, median, min, max and standard deviation of the finite ``values``.

  The language-model studies report the mean (:func:`~experiments.study.table_cells.fmt_spread`),
  the algorithmic studies the median and range
  (:func:`~experiments.study.table_cells.median_cell`); their verdicts compare the seeds
  themselves, kept in ``values``.

  Args:
    values: one number per seed; ``None`` and non-finite values (not measured) are left out.

  Returns:
    ``{"mean", "median", "min", "max", "std", "n", "values"}``; the statistics are ``None``
    (``n`` 0, ``values`` empty) when no value is finite.
  """
  finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
  if not finite:
    return {"mean": None, "median": None, "min": None, "max": None, "std": None, "n": 0,
            "values": []}
  arr = np.asarray(finite)
  return {"mean": float(arr.mean()), "median": float(statistics.median(finite)),
          "min": min(finite), "max": max(finite), "std": float(arr.std()), "n": len(finite),
          "values": finite}
