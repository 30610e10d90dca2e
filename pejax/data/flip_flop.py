"""Flip-flop language modelling (Liu et al. 2023): remember the last written bit.

A sequence of n instructions, each an opcode byte and a data bit: ``w`` (write), ``r`` (read),
``i`` (ignore). The first is a write and the last a read; the others are ``i`` with probability
``ignore_prob`` and otherwise ``w`` or ``r`` with equal probability; write and ignore bits are
uniform, and a read's bit is the bit of the latest write. Only the read bits are scored (the
whole sequence is the answer, fed under teacher forcing): exact match = every read right.

Text: ``w`` (the prompt), then the rest of the 2n-byte sequence (the answer), then ``\\n``
(2n + 1 bytes). Liu et al. train with ``ignore_prob = 0.8`` (FFL(0.8)); longer sequences test
length generalization and other ``ignore_prob`` values test sparse / dense distribution shift.

References:
  Liu et al., "Exposing Attention Glitches with Flip-Flop Language Modeling", NeurIPS 2023,
  arXiv:2306.00946. Golovneva et al., "Contextual Position Encoding: Learning to Count What's
  Important", 2024, arXiv:2405.18719 (the task as a CoPE benchmark).
"""

from __future__ import annotations

import numpy as np

from pejax.data import synthetic_example
from pejax.encodings import arg_checks

END = b"\n"


def flip_flop_example(rng: np.random.Generator | int, *, length: int,
                      ignore_prob: float = 0.8) -> synthetic_example.SyntheticExample:
  """A flip-flop sequence of ``length`` instructions.

  Args:
    rng: a numpy Generator, or a seed.
    length: instructions n >= 2 (a first write, a last read).
    ignore_prob: probability of ``i`` for the middle instructions, in [0, 1].

  Returns:
    The example; ``scored`` marks the bits after ``r``.

  Raises:
    ValueError: for ``length < 2`` or ``ignore_prob`` outside [0, 1].
  """
  n = arg_checks.check_positive_int("length", length)
  if n < 2:
    raise ValueError(f"length of flip_flop must be >= 2, got {length}")
  if not 0.0 <= float(ignore_prob) <= 1.0:
    raise ValueError(f"ignore_prob must be in [0, 1], got {ignore_prob}")
  rng = np.random.default_rng(rng)
  ops = [b"w"]
  for _ in range(n - 2):
    if rng.random() < ignore_prob:
      ops.append(b"i")
    else:
      ops.append(b"w" if rng.random() < 0.5 else b"r")
  ops.append(b"r")
  text, memory = bytearray(), None
  for op in ops:
    if op == b"r":
      bit = memory
    else:
      bit = b"1" if rng.random() < 0.5 else b"0"
      if op == b"w":
        memory = bit
    text += op + bit
  text = bytes(text)
  scored = tuple(i >= 2 and text[i - 1] == ord("r") for i in range(1, len(text)))
  return synthetic_example.SyntheticExample(text[:1], text[1:], END, scored=scored,
                                            info={"ignore_prob": ignore_prob})


def solve(prompt_and_answer: bytes) -> bytes:
  """The read bits of a flip-flop text (``w1i0r1...``), in order, from the writes before them.

  Raises:
    ValueError: for an odd-length text or an opcode other than w, r, i.
  """
  text = prompt_and_answer.rstrip(END)
  if len(text) % 2:
    raise ValueError(f"a flip-flop text has opcode/bit pairs, got {len(text)} bytes")
  memory, reads = None, bytearray()
  for op, bit in zip(text[0::2], text[1::2]):
    if op == ord("w"):
      memory = bit
    elif op == ord("r"):
      reads.append(memory)
    elif op != ord("i"):
      raise ValueError(f"flip-flop opcodes are w, r, i, got {chr(op)!r}")
  return bytes(reads)


# name -> (generator, smallest size, (a, b): text <= a n + b bytes).
TASKS = {"flip_flop": (flip_flop_example, 2, (2, 1))}
