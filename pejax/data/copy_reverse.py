"""Copy and reverse: repeat a random string, forwards or backwards, after `=`.

Text formats (n = `length` characters drawn uniformly from `alphabet`):

  copy:     b"<s>=<s>\\n"          answer = s
  reverse:  b"<s>=<reversed s>\\n"  answer = reversed s

Each example has `2 n + 2` bytes. The answer needs attention to the byte n + 1 positions back
(copy) or to a mirror position (reverse), so a model trained on short strings and tested on long
ones probes how its positional encoding extrapolates.

References:
  Delétang et al., "Neural Networks and the Chomsky Hierarchy", ICLR 2023, arXiv:2207.02098
  (duplicate_string, reverse_string); Ruoss et al., "Randomized Positional Encodings Boost Length
  Generalization of Transformers", ACL 2023, arXiv:2305.16843.
"""

from __future__ import annotations

import numpy as np

from pejax.data import synthetic_example
from pejax.encodings import arg_checks

LOWERCASE = b"abcdefghijklmnopqrstuvwxyz"  # Default alphabet.
SEPARATOR = b"="  # Between the string and its answer.
END = b"\n"  # End marker after the answer (not scored).


def _random_string(rng: np.random.Generator | int, length: int, alphabet: bytes) -> bytes:
  length = arg_checks.check_positive_int("length", length)
  alphabet = bytes(alphabet)
  reserved = SEPARATOR + END + bytes([synthetic_example.PAD_ID])
  if not alphabet or any(c in alphabet for c in reserved):
    raise ValueError(
        f"alphabet must be non-empty bytes without '=', newline or the pad byte, got {alphabet!r}")
  table = np.frombuffer(alphabet, dtype=np.uint8)
  rng = np.random.default_rng(rng)
  return table[rng.integers(0, len(table), size=length)].tobytes()


def copy_example(rng: np.random.Generator | int, *, length: int,
                 alphabet: bytes = LOWERCASE) -> synthetic_example.SyntheticExample:
  """A copy example `b"<s>=<s>\\n"` with a random string `s` of `length` characters.

  Args:
    rng: A numpy Generator, or a seed for `np.random.default_rng`.
    length: Characters n >= 1 of the string; the text has `2 n + 2` bytes.
    alphabet: Bytes the string is drawn from (uniformly); must not contain `=`, newline or 0.

  Returns:
    The example; `info["source"]` holds `s`.

  Raises:
    ValueError: on a non-positive `length` or an invalid `alphabet`.
  """
  source = _random_string(rng, length, alphabet)
  return _example(source, source)


def reverse_example(rng: np.random.Generator | int, *, length: int,
                    alphabet: bytes = LOWERCASE) -> synthetic_example.SyntheticExample:
  """A reverse example `b"<s>=<reversed s>\\n"`: :func:`copy_example` with `s` reversed after `=`.

  Args:
    rng: as for :func:`copy_example` (the same `rng` draws the same `s`).
    length: as for :func:`copy_example`.
    alphabet: as for :func:`copy_example`.

  Returns:
    The example; `info["source"]` holds `s` (the answer is `s` reversed).

  Raises:
    ValueError: as :func:`copy_example`.
  """
  source = _random_string(rng, length, alphabet)
  return _example(source, source[::-1])


def _example(source: bytes, answer: bytes) -> synthetic_example.SyntheticExample:
  return synthetic_example.SyntheticExample(
      prompt=source + SEPARATOR, answer=answer, suffix=END, info={"source": source})


def _source_of(prompt: bytes) -> bytes:
  if not prompt.endswith(SEPARATOR) or len(prompt) < 2:
    raise ValueError(f"prompt must be b'<string>=', got {prompt[:40]!r}")
  return prompt[:-len(SEPARATOR)]


def solve_copy(prompt: bytes) -> bytes:
  """The correct copy answer for a prompt `b"<s>="`, computed from the prompt alone.

  Args:
    prompt: The prompt `b"<s>="`.

  Returns:
    `s`.

  Raises:
    ValueError: if `prompt` does not end with `=` or has an empty string.
  """
  return _source_of(prompt)


def solve_reverse(prompt: bytes) -> bytes:
  """The correct reverse answer for a prompt `b"<s>="`: :func:`solve_copy`'s, reversed.

  Args:
    prompt: The prompt `b"<s>="`.

  Returns:
    `s` reversed.

  Raises:
    ValueError: as :func:`solve_copy`.
  """
  return _source_of(prompt)[::-1]
