"""Counting and selective copy, the tasks CoPE (Golovneva et al. 2024) is shown to solve.

Size n = input length:

  selective_copy  n bytes of ``.`` (blank) with k in [1, max(1, n // 2)] letters at random
                  places -> the letters in order (Gu & Dao 2023; CoPE section 5). Text <= 1.5n + 3.
  count_symbol    n bytes over ``abcd``, ``?``, a queried symbol -> how many times it occurs
                  (decimal). Counting the tokens of one kind is the position CoPE assigns by
                  its gates; Golovneva et al. count marked tokens since the last reset, here the
                  whole string is counted. Text <= n + 7.

References:
  Golovneva et al., "Contextual Position Encoding: Learning to Count What's Important", 2024,
  arXiv:2405.18719. Gu & Dao, "Mamba: Linear-Time Sequence Modeling with Selective State
  Spaces", 2023, arXiv:2312.00752 (selective copying).
"""

from __future__ import annotations

import numpy as np

from pejax.data import synthetic_example
from pejax.encodings import arg_checks

SEPARATOR = b"="
END = b"\n"
BLANK = b"."
LETTERS = b"abcdefghijklmnopqrstuvwxyz"
COUNTED = b"abcd"
QUERY = b"?"


def selective_copy_example(rng: np.random.Generator | int, *,
                           length: int) -> synthetic_example.SyntheticExample:
  """Letters scattered among blanks -> the letters in order.

  Args:
    rng: a numpy Generator, or a seed.
    length: input bytes n >= 1.

  Returns:
    The example.
  """
  n = arg_checks.check_positive_int("length", length)
  rng = np.random.default_rng(rng)
  k = int(rng.integers(1, max(1, n // 2) + 1))
  where = np.sort(rng.choice(n, size=k, replace=False))
  row = bytearray(BLANK * n)
  letters = bytes(LETTERS[i] for i in rng.integers(0, len(LETTERS), size=k))
  for w, c in zip(where, letters):
    row[w] = c
  return synthetic_example.SyntheticExample(bytes(row) + SEPARATOR, letters, END)


def count_symbol_example(rng: np.random.Generator | int, *,
                         length: int) -> synthetic_example.SyntheticExample:
  """``n`` bytes over ``abcd``, then ``?x=`` -> the number of ``x`` in them (decimal)."""
  n = arg_checks.check_positive_int("length", length)
  rng = np.random.default_rng(rng)
  s = bytes(COUNTED[i] for i in rng.integers(0, len(COUNTED), size=n))
  x = COUNTED[int(rng.integers(0, len(COUNTED)))]
  return synthetic_example.SyntheticExample(s + QUERY + bytes([x]) + SEPARATOR,
                                            str(s.count(x)).encode(), END)


def solve(task: str, prompt: bytes) -> bytes:
  """The answer of ``task`` (``selective_copy`` / ``count_symbol``) from its prompt.

  Raises:
    ValueError: for an unknown task or a malformed prompt.
  """
  if not prompt.endswith(SEPARATOR):
    raise ValueError(f"prompt must end with '=', got {prompt[-40:]!r}")
  body = prompt[:-1]
  if task == "selective_copy":
    return body.replace(BLANK, b"")
  if task == "count_symbol":
    if len(body) < 2 or body[-2:-1] != QUERY:
      raise ValueError(f"a count_symbol prompt ends with '?<symbol>=', got {prompt[-40:]!r}")
    return str(body[:-2].count(body[-1])).encode()
  raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")


# name -> (generator, smallest size, (a, b): text <= a n + b bytes); a = 1.5 is written 3/2.
TASKS = {
    "selective_copy": (selective_copy_example, 1, (1.5, 3)),
    "count_symbol": (count_symbol_example, 1, (1, 7)),
}
