"""Counting and selective copy, the tasks CoPE (Golovneva et al. 2024) is shown to solve.

Size n = input length:

  selective_copy  n bytes of ``.`` (blank) with k in [1, max(1, n // 2)] letters at random
                  places -> the letters in order (Gu & Dao 2023; CoPE section 5). Text <= 1.5n + 3.
  count_symbol    n bytes over ``abcd``, ``?``, a queried symbol -> how many times it occurs
                  (decimal). Counting the tokens of one kind is the position CoPE assigns by
                  its gates; here the whole string is counted. Text <= n + 7.
  count_increments
                  Golovneva et al.'s counting task as their code generates it
                  (``projects/cope/scripts/count_data_gen.py`` of facebookresearch/RAM): a
                  program of n statements over ``num_variables`` variables (``a``, ``b``, ...),
                  each a reset ``x0`` (theirs: ``x = 0 ;``), an increment ``x+`` (``x ++;``) or
                  a no-op ``.`` (``pass;``), drawn with the reference's weights 1 : 7 : 50; then
                  ``?x=`` asks for the value of a variable that was reset at least once: the
                  number of its increments since its last reset (decimal, <= ``max_value``).
                  Text <= 2n + 6. Their model reads words (a statement is 1-4 tokens); here a
                  statement is 1-2 bytes, a no-op one, as a ``pass;`` is one of their tokens.

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
NO_OP = b"."
INCREMENT = b"+"
RESET = b"0"
VARIABLES = b"abcdefghijklmnopqrstuvwxyz"
# The reference generator's statement weights (reset, no-op, increment) and value cap.
COUNT_WEIGHTS = (1, 50, 7)
COUNT_MAX_VALUE = 10
_COUNT_TRIES = 1000  # The reference's limit on redrawing a program.


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


class _Uniforms:
  """Uniform draws in [0, 1) from ``rng``, fetched ``block`` at a time (a Python loop of single
  numpy draws is ~20x slower)."""

  def __init__(self, rng: np.random.Generator, block: int):
    self._rng, self._block = rng, block
    self._buffer, self._i = rng.random(block), 0

  def next(self) -> float:
    if self._i == len(self._buffer):
      self._buffer, self._i = self._rng.random(self._block), 0
    self._i += 1
    return float(self._buffer[self._i - 1])


def count_increments_example(rng: np.random.Generator | int, *, length: int,
                             num_variables: int = 3, max_value: int = COUNT_MAX_VALUE
                             ) -> synthetic_example.SyntheticExample:
  """A program of resets, increments and no-ops -> a variable's value (Golovneva et al.).

  The sampling follows the reference generator (module docstring): each statement draws its
  kind with weights reset 1, no-op 50, increment 7; a reset picks any of the variables, an
  increment one that has been reset (uniformly among them); an increment that is impossible (no
  variable reset yet, or the variable at ``max_value``) draws the statement again. The question
  asks about a uniformly drawn variable among those reset; a program with none is drawn again.
  The reference draws the program length from [3, max_steps]; here it is ``length``.

  Args:
    rng: a numpy Generator, or a seed.
    length: statements n >= 1.
    num_variables: variables in 1..26 (the reference's runs use 3 and 5).
    max_value: the largest value a variable reaches, in 1..99 (the reference: 10).

  Returns:
    The example: prompt = the statements + ``?x=``, answer = the value in decimal.

  Raises:
    ValueError: for a length, ``num_variables`` or ``max_value`` out of range.
  """
  n = arg_checks.check_positive_int("length", length)
  k = arg_checks.check_positive_int("num_variables", num_variables)
  if k > len(VARIABLES):
    raise ValueError(f"num_variables must be in 1..{len(VARIABLES)}, got {num_variables}")
  cap = arg_checks.check_positive_int("max_value", max_value)
  if cap > 99:
    raise ValueError(f"max_value must be in 1..99 (a two-digit answer), got {max_value}")
  rng = np.random.default_rng(rng)
  uniforms = _Uniforms(rng, 4 * n + 8)
  total = sum(COUNT_WEIGHTS)
  for _ in range(_COUNT_TRIES):
    values: dict[int, int] = {}  # variable index -> value, in order of first reset
    program = bytearray()
    for _ in range(n):
      while True:  # An impossible increment draws the statement again (as the reference does).
        w = uniforms.next() * total
        if w < COUNT_WEIGHTS[0]:
          v = int(uniforms.next() * k)
          values[v] = 0
          program += bytes([VARIABLES[v]]) + RESET
        elif w < COUNT_WEIGHTS[0] + COUNT_WEIGHTS[1]:
          program += NO_OP
        else:
          if not values:
            continue
          v = list(values)[int(uniforms.next() * len(values))]
          if values[v] + 1 > cap:
            continue
          values[v] += 1
          program += bytes([VARIABLES[v]]) + INCREMENT
        break
    if values:
      v = list(values)[int(uniforms.next() * len(values))]
      prompt = bytes(program) + QUERY + bytes([VARIABLES[v]]) + SEPARATOR
      return synthetic_example.SyntheticExample(prompt, str(values[v]).encode(), END)
  raise ValueError(f"no program of length {n} reset a variable in {_COUNT_TRIES} draws")


def _count_increments_answer(body: bytes) -> bytes:
  """The value of the queried variable of a ``count_increments`` prompt without its ``=``."""
  if len(body) < 2 or body[-2:-1] != QUERY or body[-1] not in VARIABLES:
    raise ValueError(f"a count_increments prompt ends with '?<variable>=', got {body[-40:]!r}")
  program, queried = body[:-2], body[-1]
  values: dict[int, int] = {}
  i = 0
  while i < len(program):
    if program[i:i + 1] == NO_OP:
      i += 1
      continue
    op = program[i + 1:i + 2]
    if program[i] not in VARIABLES or op not in (RESET, INCREMENT):
      raise ValueError(f"malformed count_increments statement {program[i:i + 2]!r} at byte {i}")
    if op == RESET:
      values[program[i]] = 0
    elif program[i] not in values:
      raise ValueError(f"increment of {chr(program[i])!r} before its reset at byte {i}")
    else:
      values[program[i]] += 1
    i += 2
  if queried not in values:
    raise ValueError(f"queried variable {chr(queried)!r} is never reset")
  return str(values[queried]).encode()


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
  if task == "count_increments":
    return _count_increments_answer(body)
  raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")


# name -> (generator, smallest size, (a, b): text <= a n + b bytes); a = 1.5 is written 3/2.
TASKS = {
    "selective_copy": (selective_copy_example, 1, (1.5, 3)),
    "count_symbol": (count_symbol_example, 1, (1, 7)),
    "count_increments": (count_increments_example, 1, (2, 6)),
}
