"""Published expectations checked against measured numbers: the verdicts of a study.

A :class:`Verdict` is held, did not hold, or not measurable (the numbers it needs are missing);
every study builds its verdicts with :func:`verdict` and its report prints them first.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional


HELD = "held"


NOT_HELD = "did not hold"


NOT_MEASURED = "not measurable"


@dataclasses.dataclass(frozen=True)
class Verdict:
  """A published expectation checked against measured numbers.

  Attributes:
    expectation: the published claim, with its source.
    criterion: the explicit test applied to the numbers.
    measured: the numbers the test used, as text.
    held: ``True`` / ``False``, or ``None`` when the numbers needed were not measurable.
    note: optional explanation (e.g. why it did not hold at this scale).
  """

  expectation: str
  criterion: str
  measured: str
  held: Optional[bool]
  note: str = ""

  @property
  def status(self) -> str:
    return NOT_MEASURED if self.held is None else (HELD if self.held else NOT_HELD)

  def to_json(self) -> Dict[str, Any]:
    return {**dataclasses.asdict(self), "status": self.status}


def verdict(expectation: str, criterion: str, measured: str,
            check: Callable[[], Optional[bool]], note: str = "",
            note_if_not_held: str = "") -> Verdict:
  """A :class:`Verdict` whose outcome is ``check()``.

  Missing numbers (``None``, a ``TypeError`` / ``KeyError`` / ``ValueError`` from absent values)
  make it not measurable. ``note_if_not_held`` (e.g. the likely reason at this scale) is attached
  only when the check fails.
  """
  try:
    held = check()
  except (TypeError, KeyError, ValueError, ZeroDivisionError):
    held = None
  if held is not None:
    held = bool(held)
  if held is False and note_if_not_held:
    note = f"{note} {note_if_not_held}".strip()
  return Verdict(expectation, criterion, measured, held, note)
