"""Sorting and summation of digit lists, two tasks of Kazemnejad et al. 2023 as byte texts.

Size n = number of digits in the input (single digits, no separators):

  sort_digits   s = d1 ... dn          answer: the digits sorted ascending        text 2n + 2
  sum_digits    s = d1 ... dn          answer: (d1 + ... + dn) mod 10, one digit  text n + 3

The other tasks of the paper's suite are registered elsewhere: copy and reverse
(`pejax.data.copy_reverse`), addition (`pejax.data.addition`), parity
(`pejax.data.ruoss_tasks`).

References:
  Kazemnejad et al., "The Impact of Positional Encoding on Length Generalization in
  Transformers", NeurIPS 2023, arXiv:2305.19466.
"""

from __future__ import annotations

import numpy as np

from pejax.data import synthetic_example
from pejax.encodings import arg_checks

SEPARATOR = b"="
END = b"\n"


def _digits(rng: np.random.Generator | int, length: int) -> bytes:
  n = arg_checks.check_positive_int("length", length)
  return bytes(48 + d for d in np.random.default_rng(rng).integers(0, 10, size=n))


def sort_digits_example(rng: np.random.Generator | int, *,
                        length: int) -> synthetic_example.SyntheticExample:
  """``length`` random digits -> the digits sorted ascending.

  Args:
    rng: a numpy Generator, or a seed.
    length: digits n >= 1.

  Returns:
    The example (text 2n + 2 bytes).
  """
  s = _digits(rng, length)
  return synthetic_example.SyntheticExample(s + SEPARATOR, bytes(sorted(s)), END,
                                            info={"source": s})


def sum_digits_example(rng: np.random.Generator | int, *,
                       length: int) -> synthetic_example.SyntheticExample:
  """``length`` random digits -> their sum modulo 10 (one digit; text n + 3 bytes)."""
  s = _digits(rng, length)
  return synthetic_example.SyntheticExample(
      s + SEPARATOR, str(sum(c - 48 for c in s) % 10).encode(), END, info={"source": s})


def solve(task: str, prompt: bytes) -> bytes:
  """The answer of ``task`` (``sort_digits`` / ``sum_digits``) from ``b"<digits>="``.

  Raises:
    ValueError: for an unknown task or a prompt that is not digits followed by ``=``.
  """
  if not prompt.endswith(SEPARATOR) or not prompt[:-1].isdigit():
    raise ValueError(f"prompt must be b'<digits>=', got {prompt[:40]!r}")
  s = prompt[:-1]
  if task == "sort_digits":
    return bytes(sorted(s))
  if task == "sum_digits":
    return str(sum(c - 48 for c in s) % 10).encode()
  raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")


# name -> (generator, smallest size, (a, b): text <= a n + b bytes).
TASKS = {
    "sort_digits": (sort_digits_example, 1, (2, 2)),
    "sum_digits": (sum_digits_example, 1, (1, 3)),
}
