"""The random keys and values of RULER's needles: 7-digit numbers, words and UUIDs.

* ``"numbers"``: 7-digit decimal numbers, uniform in ``[1000000, 9999999]`` (RULER's
  ``generate_random_number``).
* ``"words"``: ``"{adjective}-{noun}"`` pairs of the built-in vocabulary, uniform (RULER's
  ``generate_random_word`` over wonderwords' adjective-noun pairs).
* ``"uuids"``: version-4 UUIDs of 128 random bits, ``str(uuid.UUID(int=bits, version=4))``
  (RULER's ``generate_random_uuid``).
"""

from __future__ import annotations

from typing import AbstractSet, List
import uuid

import numpy as np

from pejax.eval.ruler import vocabulary

KINDS = ("numbers", "words", "uuids")

_NUMBER_LOW = 10**6
_NUMBER_HIGH = 10**7  # Exclusive.


def capacity(kind: str) -> int:
  """How many distinct values of ``kind`` exist (an upper bound for ``UUIDs``).

  Args:
    kind: one of ``KINDS``.

  Returns:
    The number of distinct values.
  """
  if kind == "numbers":
    return _NUMBER_HIGH - _NUMBER_LOW
  if kind == "words":
    return vocabulary.num_compound_words()
  return 2**122  # The random bits of a version-4 UUID.


def _draw_batch(rng: np.random.Generator, kind: str, count: int) -> List[str]:
  if kind == "numbers":
    return [str(v) for v in rng.integers(_NUMBER_LOW, _NUMBER_HIGH, size=count)]
  if kind == "words":
    indices = rng.integers(0, vocabulary.num_compound_words(), size=count)
    return [vocabulary.compound_word(i) for i in indices]
  halves = rng.integers(0, 2**64, size=(count, 2), dtype=np.uint64)
  return [str(uuid.UUID(int=(int(hi) << 64) | int(lo), version=4)) for hi, lo in halves]


def draw_values(rng: np.random.Generator, kind: str, count: int, *, distinct: bool = True,
                exclude: AbstractSet[str] = frozenset()) -> List[str]:
  """``count`` random values of ``kind``, none in ``exclude``.

  Args:
    rng: the random generator.
    kind: one of ``KINDS``.
    count: how many values.
    distinct: whether the values must differ from each other.
    exclude: values never returned (the real keys, when drawing distractors).

  Returns:
    The ``count`` values, as strings.

  Raises:
    ValueError: if ``kind`` has too few distinct values.
  """
  if kind not in KINDS:
    raise ValueError(f"kind must be one of {list(KINDS)}, got {kind!r}")
  if distinct and count + len(exclude) > capacity(kind):
    raise ValueError(f"count must be at most {capacity(kind) - len(exclude)} distinct {kind}, "
                     f"got {count}")
  values: List[str] = []
  seen = set(exclude)
  while len(values) < count:
    for value in _draw_batch(rng, kind, count - len(values)):
      if value in seen:
        continue
      if distinct:
        seen.add(value)
      values.append(value)
  return values
