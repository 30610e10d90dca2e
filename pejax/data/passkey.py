"""Passkey retrieval: find a random number hidden at a chosen depth in repetitive filler text.

Text layout (`length` bytes in total, `d` = `num_digits`):

  <filler before> The pass key is NNNNN. Remember it. <filler after>[spaces]
  What is the pass key? The pass key is NNNNN.

The answer is the d digits after the final "The pass key is "; the final "." is the unscored end
marker. The filler repeats the sentences of Mohtashami & Jaggi ("The grass is green. The sky is
blue. The sun is yellow. Here we go. There and back again.") in whole sentences; the 0-21 bytes the
sentences cannot fill become spaces before the question. The key sentence is inserted at the
sentence boundary nearest to `depth * F`, F being the filler bytes, so depth 0 puts it first and
depth 1 right before the question. Unlike the paper, no task description is prepended: the prompt
must fit the short training lengths (a 5-digit key needs only `passkey_min_length() = 80` bytes).

References:
  Mohtashami and Jaggi, "Landmark Attention: Random-Access Infinite Context Length for
  Transformers", NeurIPS 2023, arXiv:2305.16300.
"""

from __future__ import annotations

import math
import re

import numpy as np

from pejax.data import synthetic_example
from pejax.encodings import arg_checks

FILLER_SENTENCES = (
    b"The grass is green. ", b"The sky is blue. ", b"The sun is yellow. ", b"Here we go. ",
    b"There and back again. ")
QUESTION = b"What is the pass key? The pass key is "
END = b"."  # End marker after the answer (not scored).
_KEY = re.compile(rb"The pass key is ([0-9]+)\. Remember it\. ")


def key_sentence(key: bytes) -> bytes:
  """The sentence that hides the key: `b"The pass key is <key>. Remember it. "`."""
  return b"The pass key is " + key + b". Remember it. "


def passkey_min_length(num_digits: int = 5) -> int:
  """Bytes of a passkey example with no filler: key sentence, question, key and end marker.

  Args:
    num_digits: Digits of the key, >= 1.

  Returns:
    The smallest `length` that `passkey_example` accepts for `num_digits`.

  Raises:
    ValueError: if `num_digits` is not a positive int.
  """
  num_digits = arg_checks.check_positive_int("num_digits", num_digits)
  return len(key_sentence(b"0" * num_digits)) + len(QUESTION) + num_digits + len(END)


def passkey_example(rng: np.random.Generator | int, *, length: int, depth: float,
                    num_digits: int = 5) -> synthetic_example.SyntheticExample:
  """A passkey-retrieval example of exactly `length` bytes with the key at `depth`.

  Args:
    rng: A numpy Generator, or a seed for `np.random.default_rng`; draws the key uniformly from
      `[10^(d-1), 10^d)`.
    length: Total bytes of the text, >= `passkey_min_length(num_digits)`.
    depth: Fraction in `[0, 1]` of the filler that precedes the key sentence.
    num_digits: Digits d of the key.

  Returns:
    The example; `info` holds `key` (int), `depth` (requested), `key_offset` (byte offset of the
    key sentence in the text), `filler_bytes` (F) and `realized_depth` (`key_offset / F`, 0 when
    F = 0).

  Raises:
    ValueError: if `length` is too short for the fixed parts or `depth` is outside `[0, 1]`.
  """
  num_digits = arg_checks.check_positive_int("num_digits", num_digits)
  length = arg_checks.check_positive_int("length", length)
  min_length = passkey_min_length(num_digits)
  if length < min_length:
    raise ValueError(
        f"length must be >= passkey_min_length({num_digits}) = {min_length}, got {length}")
  try:
    depth = float(depth)
  except (TypeError, ValueError):
    raise ValueError(f"depth must be a number in [0, 1], got {depth!r}") from None
  if not (math.isfinite(depth) and 0.0 <= depth <= 1.0):
    raise ValueError(f"depth must be in [0, 1], got {depth!r}")
  rng = np.random.default_rng(rng)
  key = int(rng.integers(10 ** (num_digits - 1), 10 ** num_digits))
  key_text = str(key).encode()

  filler_bytes = length - min_length
  sentences, boundaries = [], [0]
  while boundaries[-1] + len(FILLER_SENTENCES[len(sentences) % 5]) <= filler_bytes:
    sentences.append(FILLER_SENTENCES[len(sentences) % 5])
    boundaries.append(boundaries[-1] + len(sentences[-1]))
  target = depth * filler_bytes
  k = min(range(len(boundaries)), key=lambda i: abs(boundaries[i] - target))
  padding = b" " * (filler_bytes - boundaries[-1])
  prompt = (b"".join(sentences[:k]) + key_sentence(key_text) + b"".join(sentences[k:]) + padding
            + QUESTION)
  return synthetic_example.SyntheticExample(
      prompt=prompt, answer=key_text, suffix=END,
      info={"key": key, "depth": depth, "key_offset": boundaries[k], "filler_bytes": filler_bytes,
            "realized_depth": boundaries[k] / filler_bytes if filler_bytes else 0.0})


def solve_passkey(prompt: bytes) -> bytes:
  """The correct answer for a passkey prompt: the digits of its key sentence.

  Args:
    prompt: A passkey prompt (filler with one key sentence, ending with the question).

  Returns:
    The key's digits as ASCII bytes.

  Raises:
    ValueError: if `prompt` does not end with the question or holds no key sentence.
  """
  match = _KEY.search(prompt)
  if not prompt.endswith(QUESTION) or match is None:
    raise ValueError(
        "prompt must hold b'The pass key is <digits>. Remember it. ' and end with"
        f" {QUESTION!r}, got {prompt[-60:]!r}")
  return match.group(1)
