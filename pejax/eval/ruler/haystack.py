"""RULER's "noise" haystack and the insertion of needles among its sentences.

The noise haystack repeats one filler line (RULER's ``type_haystack="noise"``); the lines of a
context are joined by newlines. Needles go *before* haystack lines at distinct positions drawn
uniformly from ``range(n)``, as RULER's ``random.sample(range(num_haystack), ...)``.
"""

from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np

# RULER's noise haystack: one line, repeated.
NOISE = ("The grass is green. The sky is blue. The sun is yellow. Here we go. "
         "There and back again.")


def insertion_positions(rng: np.random.Generator, *, num_lines: int, num_inserts: int
                        ) -> np.ndarray:
  """Distinct, sorted haystack positions for ``num_inserts`` needles.

  Args:
    rng: the random generator.
    num_lines: haystack lines ``n`` (``>= num_inserts``).
    num_inserts: needles to place.

  Returns:
    int ``[num_inserts]``, sorted, distinct, in ``[0, num_lines)``: needle ``j`` goes before
    haystack line ``positions[j]``, so its depth is ``positions[j] / num_lines``.
  """
  return np.sort(rng.choice(num_lines, size=num_inserts, replace=False))


def insert_lines(lines: Sequence[str], inserts: Sequence[str], positions: Sequence[int]
                 ) -> List[str]:
  """``lines`` with ``inserts[j]`` placed before ``lines[positions[j]]``.

  Args:
    lines: the haystack lines ``[n]``.
    inserts: the needle lines ``[m]``.
    positions: int ``[m]``, sorted, each in ``[0, n]`` (``n`` appends at the end).

  Returns:
    The ``n + m`` lines; the inserts keep their order.
  """
  before: Dict[int, List[str]] = {}
  for position, line in zip(positions, inserts):
    before.setdefault(int(position), []).append(line)
  out: List[str] = []
  for i, line in enumerate(lines):
    out.extend(before.pop(i, ()))
    out.append(line)
  for position in sorted(before):
    out.extend(before[position])
  return out
