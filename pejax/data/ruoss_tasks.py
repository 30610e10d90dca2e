"""The algorithmic tasks of Delétang et al. 2023 used by Ruoss et al. 2023, as byte texts.

Every task's *size* n is the length of its input (the string the model reads before `=`); the
model is trained on small n and tested on larger n. The answer follows `=`; the end marker
`\\n` after it is not scored (except for stack manipulation, whose output length is not known
from the input: its answer ends with a scored `$`).

  task                symbols              input (size n)                answer
  reverse_string      0 1                  s                             s reversed
  duplicate_string    0 1                  s                             s s
  missing_duplicate   0 1, _ (mask)        w w, one byte of it _         the masked byte (n even)
  odds_first          0 1                  s = s1 s2 ... sn              s1 s3 s5 ... s2 s4 ...
  binary_addition     0 1 +                x+y, least significant first  x + y, lsb first,
                                                                         max(|x|, |y|) + 1 bits
  bucket_sort         0 1 2 3 4            s                             s sorted
  parity              0 1                  s                             1 if s has an odd
                                                                         number of 1s, else 0
  cycle_navigation    > < .                moves on a cycle of 5 from 0  the final position 0..4
                                           (+1, -1, stay)
  stack_manipulation  0 1 | a b p          stack (bottom..top) | actions  the final stack,
                                           (a: push 0, b: push 1,        top first, then $
                                           p: pop; pop on empty: none)

The regular (parity, cycle navigation, even pairs), context-free (reverse, stack manipulation)
and context-sensitive (duplicate, missing duplicate, odds first, binary addition, bucket sort)
groups follow Delétang et al. The paper's models emit the answer in one non-autoregressive
pass; here a decoder generates it after `=` (teacher-forced exact match of the whole answer =
greedy decoding).

References:
  Delétang et al., "Neural Networks and the Chomsky Hierarchy", ICLR 2023, arXiv:2207.02098.
  Ruoss et al., "Randomized Positional Encodings Boost Length Generalization of Transformers",
  ACL 2023, arXiv:2305.16843.
"""

from __future__ import annotations

import numpy as np

from pejax.data import synthetic_example
from pejax.encodings import arg_checks

SEPARATOR = b"="
END = b"\n"
MASK = b"_"
CYCLE = 5  # Cycle navigation: positions 0..4.
MOVES = {ord(">"): 1, ord("<"): -1, ord("."): 0}
STACK_SEPARATOR = b"|"
STACK_END = b"$"
PUSH = {ord("a"): b"0", ord("b"): b"1"}
POP = ord("p")

Example = synthetic_example.SyntheticExample


def _bits(rng: np.random.Generator, n: int, alphabet: bytes = b"01") -> bytes:
  table = np.frombuffer(alphabet, dtype=np.uint8)
  return table[rng.integers(0, len(table), size=n)].tobytes()


def _example(source: bytes, answer: bytes, **info) -> Example:
  return Example(prompt=source + SEPARATOR, answer=answer, suffix=END,
                 info={"source": source, **info})


def _length(length: int, *, at_least: int = 1, task: str = "") -> int:
  """``length`` checked: a positive int, and ``>= at_least`` (the smallest size of ``task``)."""
  n = arg_checks.check_positive_int("length", length)
  if n < at_least:
    raise ValueError(f"length of {task} must be >= {at_least}, got {length}")
  return n


# The tasks whose input is a uniform random string and whose answer is a function of it alone:
# name -> (alphabet, answer).
_STRING_TASKS = {
    "reverse_string": (b"01", lambda s: s[::-1]),
    "duplicate_string": (b"01", lambda s: s + s),
    "odds_first": (b"01", lambda s: s[0::2] + s[1::2]),
    "bucket_sort": (b"01234", lambda s: bytes(sorted(s))),
    "parity": (b"01", lambda s: b"1" if s.count(b"1") % 2 else b"0"),
    "cycle_navigation": (b"><.", lambda s: str(sum(MOVES[c] for c in s) % CYCLE).encode()),
}


def _string_example(task: str, rng: np.random.Generator | int, length: int) -> Example:
  """A random input of a ``_STRING_TASKS`` task, ``length`` symbols long, and its answer."""
  alphabet, answer = _STRING_TASKS[task]
  s = _bits(np.random.default_rng(rng), _length(length), alphabet)
  return _example(s, answer(s))


def _input_of(prompt: bytes) -> bytes:
  if not prompt.endswith(SEPARATOR) or len(prompt) < 2:
    raise ValueError(f"prompt must be b'<input>=', got {prompt[:40]!r}")
  return prompt[:-1]


def reverse_string_example(rng: np.random.Generator | int, *, length: int) -> Example:
  """A binary string and its reverse.

  Args:
    rng: a numpy Generator, or a seed.
    length: input length n >= 1.

  Returns:
    The example (text `2 n + 2` bytes).
  """
  return _string_example("reverse_string", rng, length)


def duplicate_string_example(rng: np.random.Generator | int, *, length: int) -> Example:
  """A binary string and the string written twice (text `3 n + 2` bytes)."""
  return _string_example("duplicate_string", rng, length)


def missing_duplicate_example(rng: np.random.Generator | int, *, length: int) -> Example:
  """``w w`` with one byte replaced by ``_``; the answer is that byte (n = 2 |w|, text n + 3).

  An odd ``length`` uses ``length - 1``.

  Raises:
    ValueError: for ``length < 2``.
  """
  n = _length(length, at_least=2, task="missing_duplicate")
  rng = np.random.default_rng(rng)
  w = _bits(rng, n // 2)
  full = bytearray(w + w)
  where = int(rng.integers(0, len(full)))
  answer = bytes(full[where:where + 1])
  full[where:where + 1] = MASK
  return _example(bytes(full), answer, position=where)


def odds_first_example(rng: np.random.Generator | int, *, length: int) -> Example:
  """``s1 s2 ... sn`` -> ``s1 s3 ... s2 s4 ...`` (odd positions first, 1-based; text 2n + 2)."""
  return _string_example("odds_first", rng, length)


def _lsb_value(bits: bytes) -> int:
  return sum(1 << i for i, b in enumerate(bits) if b == ord("1"))


def _lsb_bits(value: int, width: int) -> bytes:
  return bytes(ord("1") if (value >> i) & 1 else ord("0") for i in range(width))


def _binary_sum(s: bytes) -> bytes:
  """``x+y`` (lsb first) -> ``x + y`` lsb first, ``max(|x|, |y|) + 1`` bits."""
  x, y = s.split(b"+")
  return _lsb_bits(_lsb_value(x) + _lsb_value(y), max(len(x), len(y)) + 1)


def binary_addition_example(rng: np.random.Generator | int, *, length: int) -> Example:
  """``x+y`` (binary, least significant bit first, n = |x| + |y| + 1) -> their sum.

  The operand lengths are drawn uniformly (both >= 1); the sum is written least significant
  bit first with ``max(|x|, |y|) + 1`` bits (its last bit is the carry, possibly 0).

  Raises:
    ValueError: for ``length < 3``.
  """
  n = _length(length, at_least=3, task="binary_addition")
  rng = np.random.default_rng(rng)
  a = int(rng.integers(1, n - 1))
  x, y = _bits(rng, a), _bits(rng, n - 1 - a)
  return _example(x + b"+" + y, _binary_sum(x + b"+" + y))


def bucket_sort_example(rng: np.random.Generator | int, *, length: int) -> Example:
  """A string over ``01234`` and the same symbols sorted (text 2n + 2)."""
  return _string_example("bucket_sort", rng, length)


def parity_example(rng: np.random.Generator | int, *, length: int) -> Example:
  """A binary string -> ``1`` if it has an odd number of 1s, else ``0`` (text n + 3)."""
  return _string_example("parity", rng, length)


def cycle_navigation_example(rng: np.random.Generator | int, *, length: int) -> Example:
  """Moves ``>`` (+1), ``<`` (-1), ``.`` (stay) on a cycle of 5 from 0 -> the final position."""
  return _string_example("cycle_navigation", rng, length)


def _run_stack(stack: bytes, actions: bytes) -> bytes:
  items = bytearray(stack)
  for c in actions:
    if c == POP:
      if items:
        items.pop()
    elif c in PUSH:
      items += PUSH[c]
    else:
      raise ValueError(f"stack action must be one of a, b, p, got {chr(c)!r}")
  return bytes(items[::-1]) + STACK_END


def stack_manipulation_example(rng: np.random.Generator | int, *, length: int) -> Example:
  """A stack (bottom to top) and actions -> the final stack top first, then ``$``.

  Size n = stack length + number of actions (both >= 1; the split is uniform). Actions: ``a``
  pushes 0, ``b`` pushes 1, ``p`` pops (nothing on an empty stack). Text <= 2 n + 4 bytes.

  Raises:
    ValueError: for ``length < 2``.
  """
  n = _length(length, at_least=2, task="stack_manipulation")
  rng = np.random.default_rng(rng)
  k = int(rng.integers(1, n))
  stack, actions = _bits(rng, k), _bits(rng, n - k, b"abp")
  return _example(stack + STACK_SEPARATOR + actions, _run_stack(stack, actions))


def solve(task: str, prompt: bytes) -> bytes:
  """The answer of ``task`` computed from its prompt alone (the reference solver).

  Args:
    task: a task name of this module (``TASKS``).
    prompt: ``b"<input>="``.

  Returns:
    The answer bytes.

  Raises:
    ValueError: for an unknown task or a malformed prompt.
  """
  s = _input_of(prompt)
  if task in _STRING_TASKS:
    return _STRING_TASKS[task][1](s)
  if task == "missing_duplicate":
    half = len(s) // 2
    where = s.index(MASK)
    other = where + half if where < half else where - half
    return s[other:other + 1]
  if task == "binary_addition":
    return _binary_sum(s)
  if task == "stack_manipulation":
    stack, actions = s.split(STACK_SEPARATOR)
    return _run_stack(stack, actions)
  raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")


# name -> (generator, smallest size, (a, b): text <= a n + b bytes).
TASKS = {
    "reverse_string": (reverse_string_example, 1, (2, 2)),
    "duplicate_string": (duplicate_string_example, 1, (3, 2)),
    "missing_duplicate": (missing_duplicate_example, 2, (1, 3)),
    "odds_first": (odds_first_example, 1, (2, 2)),
    "binary_addition": (binary_addition_example, 3, (2, 2)),
    "bucket_sort": (bucket_sort_example, 1, (2, 2)),
    "parity": (parity_example, 1, (1, 3)),
    "cycle_navigation": (cycle_navigation_example, 1, (1, 3)),
    "stack_manipulation": (stack_manipulation_example, 2, (2, 4)),
}
