"""Published expectations checked against measured numbers: the verdicts of a study.

A :class:`Verdict` is held, did not hold, not measurable (the numbers it needs are missing) or
not measurable (floor) (both sides of a comparison at the floor or at chance: the run cannot tell
them apart, so it counts neither way); every study builds its verdicts with :func:`verdict` and
its report prints them first.

Rules over seeds (issue 45): a verdict uses every seed, never the mean alone.
:func:`every_seed` holds a threshold claim only when each seed meets it;
:func:`compare_over_seeds` holds "A beats B" when A beats B on every seed, or when a bootstrap
interval of the mean difference over seeds excludes 0, says "did not hold" when the seeds split
and the interval includes 0, and "not measurable (floor)" when every value of both sides is at
the floor.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np


HELD = "held"


NOT_HELD = "did not hold"


NOT_MEASURED = "not measurable"


FLOOR = "not measurable (floor)"


class AtFloor:
  """What a verdict's check returns when both sides are at the floor (see :data:`AT_FLOOR`)."""

  def __repr__(self) -> str:
    return "AT_FLOOR"


AT_FLOOR = AtFloor()


@dataclasses.dataclass(frozen=True)
class Verdict:
  """A published expectation checked against measured numbers.

  Attributes:
    expectation: the published claim, with its source.
    criterion: the explicit test applied to the numbers.
    measured: the numbers the test used, as text.
    held: ``True`` / ``False``, or ``None`` when the numbers needed were not measurable.
    note: optional explanation (e.g. why it did not hold at this scale).
    at_floor: ``held`` is ``None`` because both sides were at the floor or at chance.
  """

  expectation: str
  criterion: str
  measured: str
  held: Optional[bool]
  note: str = ""
  at_floor: bool = False

  @property
  def status(self) -> str:
    if self.held is None:
      return FLOOR if self.at_floor else NOT_MEASURED
    return HELD if self.held else NOT_HELD

  def to_json(self) -> Dict[str, Any]:
    return {**dataclasses.asdict(self), "status": self.status}


def verdict(expectation: str, criterion: str, measured: str,
            check: Callable[[], Optional[bool]], note: str = "",
            note_if_not_held: str = "") -> Verdict:
  """A :class:`Verdict` whose outcome is ``check()``.

  Missing numbers (``None``, a ``TypeError`` / ``KeyError`` / ``ValueError`` from absent values)
  make it not measurable; a check returning :data:`AT_FLOOR` (or a :class:`SeedComparison` at
  the floor) makes it not measurable (floor). ``note_if_not_held`` (e.g. the likely reason at
  this scale) is attached only when the check fails.
  """
  try:
    held = check()
  except (TypeError, KeyError, ValueError, ZeroDivisionError):
    held = None
  at_floor = held is AT_FLOOR or (isinstance(held, SeedComparison) and held.at_floor)
  if isinstance(held, SeedComparison):
    held = held.held
  if at_floor:
    held = None
  elif held is not None:
    held = bool(held)
  if held is False and note_if_not_held:
    note = f"{note} {note_if_not_held}".strip()
  return Verdict(expectation, criterion, measured, held, note, at_floor)


def _finite(values: Sequence[Optional[float]]) -> list:
  return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def every_seed(values: Sequence[Optional[float]], meets: Callable[[float], bool]
               ) -> Optional[bool]:
  """Whether every seed's value meets a threshold claim (``None`` when no seed was measured).

  A seed not measured (``None``, NaN) is left out; the mean never decides.

  Args:
    values: one number per seed.
    meets: the claim for one number, e.g. ``lambda r: r >= 2``.
  """
  finite = _finite(values)
  if not finite:
    return None
  return all(meets(v) for v in finite)


@dataclasses.dataclass(frozen=True)
class SeedComparison:
  """The outcome of "A beats B" over seeds (:func:`compare_over_seeds`).

  Attributes:
    held: ``True`` / ``False``; ``None`` when not measurable (no seed on one side, or at floor).
    rule: which rule decided: ``"every seed"``, ``"bootstrap"``, ``"seeds split"``,
      ``"every seed against"``, ``"floor"`` or ``"no seeds"``.
    differences: A - B per seed (paired) or per pair of means (unpaired: one value).
    interval: the bootstrap interval of the mean difference (``None`` when not computed).
    at_floor: every value of both sides at the floor.
  """

  held: Optional[bool]
  rule: str
  differences: tuple
  interval: Optional[tuple]
  at_floor: bool = False

  def text(self) -> str:
    """e.g. ``every seed (differences +0.12, +0.08, +0.31)``."""
    diffs = ", ".join(f"{d:+.3g}" for d in self.differences)
    if self.rule == "bootstrap" or (self.rule == "seeds split" and self.interval):
      low, high = self.interval
      return f"{self.rule} (differences {diffs}; 95% interval [{low:+.3g}, {high:+.3g}])"
    return f"{self.rule} (differences {diffs})" if diffs else self.rule


def compare_over_seeds(a: Sequence[Optional[float]], b: Sequence[Optional[float]], *,
                       higher_is_better: bool, paired: bool = True,
                       floor: Optional[float] = None, confidence: float = 0.95,
                       resamples: int = 10_000, seed: int = 0) -> SeedComparison:
  """Whether A beats B using every seed: all seeds on one side, or a bootstrap interval.

  Paired (the default: the same seeds train both arms), seed ``i`` of A is compared with seed
  ``i`` of B and a seed missing on either side is left out; unpaired, every A value is compared
  with every B value. Held when every difference points A's way; otherwise held when the
  bootstrap interval (``confidence``, over seeds resampled with replacement) of the mean
  difference excludes 0 on A's side; otherwise did not hold ("seeds split"). With ``floor``
  (e.g. accuracy 0, or chance level), when every value of both sides is at or past the floor on
  the bad side, the comparison is not measurable (floor).

  Args:
    a, b: one number per seed for each arm (``None`` / NaN: not measured).
    higher_is_better: ``True`` for accuracies, ``False`` for perplexities and losses.
    paired: compare seed ``i`` with seed ``i``.
    floor: the value at which the measurement cannot distinguish the arms.
    confidence: the bootstrap interval's coverage.
    resamples: bootstrap resamples.
    seed: the bootstrap's random seed (the verdict is reproducible).

  Returns:
    A :class:`SeedComparison`.
  """
  sign = 1.0 if higher_is_better else -1.0
  if paired:
    if len(a) != len(b):
      raise ValueError(f"paired seeds need as many values in a ({len(a)}) as in b ({len(b)})")
    pairs = [(float(x), float(y)) for x, y in zip(a, b)
             if x is not None and y is not None and math.isfinite(float(x))
             and math.isfinite(float(y))]
    xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
  else:
    xs, ys = _finite(a), _finite(b)
  if not xs or not ys:
    return SeedComparison(None, "no seeds", (), None)
  if floor is not None and all(sign * (v - floor) <= 0 for v in xs + ys):
    return SeedComparison(None, "floor", (), None, at_floor=True)
  if paired:
    diffs = np.asarray(xs) - np.asarray(ys)
  else:
    diffs = (np.asarray(xs)[:, None] - np.asarray(ys)[None, :]).ravel()
  shown = tuple(float(d) for d in (diffs if paired else [np.mean(xs) - np.mean(ys)]))
  if np.all(sign * diffs > 0):
    return SeedComparison(True, "every seed", shown, None)
  rng = np.random.default_rng(seed)
  if paired:
    means = diffs[rng.integers(0, len(diffs), size=(resamples, len(diffs)))].mean(axis=1)
  else:
    ax = np.asarray(xs)[rng.integers(0, len(xs), size=(resamples, len(xs)))].mean(axis=1)
    by = np.asarray(ys)[rng.integers(0, len(ys), size=(resamples, len(ys)))].mean(axis=1)
    means = ax - by
  tail = (1.0 - confidence) / 2.0
  interval = (float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail)))
  if (sign > 0 and interval[0] > 0) or (sign < 0 and interval[1] < 0):
    return SeedComparison(True, "bootstrap", shown, interval)
  if np.any(sign * diffs > 0):
    return SeedComparison(False, "seeds split", shown, interval)
  return SeedComparison(False, "every seed against", shown, None)
