"""Numbers as report table cells, and GitHub markdown tables."""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence


def fmt(value: Optional[float], digits: int = 2) -> str:
  """A number for a table (``n/a`` for missing / non-finite)."""
  if value is None or not math.isfinite(float(value)):
    return "n/a"
  value = float(value)
  if abs(value) >= 1e4:
    return f"{value:.3g}"
  return f"{value:.{digits}f}"


def fmt_spread(stats: Mapping[str, Optional[float]], digits: int = 2) -> str:
  """``mean`` or ``mean [min-max]`` when several values were measured."""
  if stats.get("mean") is None:
    return "n/a"
  if stats.get("n", 1) > 1:
    return (f"{fmt(stats['mean'], digits)} [{fmt(stats['min'], digits)}-"
            f"{fmt(stats['max'], digits)}]")
  return fmt(stats["mean"], digits)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], *,
                   align: str = "") -> str:
  """A GitHub markdown table; ``align`` is one char per column (``l``/``r``), default: first
  column left, others right."""
  align = align or ("l" + "r" * (len(header) - 1))
  sep = ["---:" if a == "r" else ":---" for a in align]
  lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "|".join(sep) + "|"]
  for row in rows:
    lines.append("| " + " | ".join(str(c) for c in row) + " |")
  return "\n".join(lines)


def median_cell(spread: Mapping[str, Any], digits: int = 2) -> str:
  """``median [min-max]``, the median alone for one seed, ``n/a`` for none."""
  if not spread or spread.get("median") is None:
    return "n/a"
  if spread["n"] == 1:
    return fmt(spread["median"], digits)
  return (f"{fmt(spread['median'], digits)} "
          f"[{fmt(spread['min'], digits)}-{fmt(spread['max'], digits)}]")
