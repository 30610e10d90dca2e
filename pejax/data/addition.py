"""Multi-digit addition `a+b=c`, digits written most- or least-significant first.

Both operands have exactly `num_digits` decimal digits (uniform over `[10^(n-1), 10^n)`, or
`[0, 10)` for one digit), so the sum has n or n + 1 digits and the text `b"a+b=c\\n"` has `3 n + 3`
or `3 n + 4` bytes; the answer is c. With `reverse_digits=True` every number (a, b and c) is
written least-significant digit first, the format under which small Transformers learn addition
(the carry then flows left to right, in generation order).

References:
  Lee et al., "Teaching Arithmetic to Small Transformers", ICLR 2024, arXiv:2307.03381
  (reversed output); Zhou et al., "What Algorithms can Transformers Learn? A Study in Length
  Generalization", ICLR 2024, arXiv:2310.16028.
"""

from __future__ import annotations

import re

import numpy as np

from pejax.data import synthetic_example
from pejax.encodings import arg_checks

END = b"\n"  # End marker after the answer (not scored).
_PROMPT = re.compile(rb"([0-9]+)\+([0-9]+)=")


def _random_number(rng: np.random.Generator, num_digits: int) -> int:
  digits = rng.integers(0, 10, size=num_digits)
  if num_digits > 1:
    digits[0] = rng.integers(1, 10)
  return int("".join(str(d) for d in digits))


def _write(number: int, reverse_digits: bool) -> bytes:
  text = str(number).encode()
  return text[::-1] if reverse_digits else text


def addition_example(rng: np.random.Generator | int, *, num_digits: int,
                     reverse_digits: bool = False) -> synthetic_example.SyntheticExample:
  """An addition example `b"a+b=c\\n"` with two `num_digits`-digit operands.

  Args:
    rng: A numpy Generator, or a seed for `np.random.default_rng`.
    num_digits: Digits n >= 1 of each operand (arbitrary size: Python integers).
    reverse_digits: Write a, b and c least-significant digit first.

  Returns:
    The example; `info` holds the integers `a`, `b`, `c`.

  Raises:
    ValueError: if `num_digits` is not a positive integer.
  """
  num_digits = arg_checks.check_positive_int("num_digits", num_digits)
  rng = np.random.default_rng(rng)
  a = _random_number(rng, num_digits)
  b = _random_number(rng, num_digits)
  prompt = _write(a, reverse_digits) + b"+" + _write(b, reverse_digits) + b"="
  return synthetic_example.SyntheticExample(
      prompt=prompt, answer=_write(a + b, reverse_digits), suffix=END,
      info={"a": a, "b": b, "c": a + b})


def solve_addition(prompt: bytes, *, reverse_digits: bool = False) -> bytes:
  """The correct answer for a prompt `b"a+b="`, computed from the prompt alone.

  Args:
    prompt: `b"<digits>+<digits>="`, in the digit order given by `reverse_digits`.
    reverse_digits: Whether numbers are written least-significant digit first.

  Returns:
    The digits of a + b in the same order.

  Raises:
    ValueError: if `prompt` is not of the form `b"<digits>+<digits>="`.
  """
  match = _PROMPT.fullmatch(prompt)
  if match is None:
    raise ValueError(f"prompt must be b'<digits>+<digits>=', got {prompt[:60]!r}")
  a, b = (int(g[::-1] if reverse_digits else g) for g in match.groups())
  return _write(a + b, reverse_digits)
