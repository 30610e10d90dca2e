"""Passkey retrieval in natural text, mixed with language modelling (a haystack of real text).

A model trained on the synthetic passkey task alone sees only repetitive filler of at most
``L - 79`` bytes, so beyond its training length both the positions and the filler are out of
distribution, and a RoPE scaling can only fix the first. Here the key sentence is hidden in a
chunk of corpus text (the "needle in a haystack" setting of long-context evaluations), and
training rows mix such examples with plain language-model rows, so the model learns to retrieve
across any distance inside its window from text it also models.

Layout of a haystack example of ``length`` bytes (``d`` digits)::

    <text before> The pass key is NNNNN. Remember it. <text after> What is the pass key? The
    pass key is NNNNN.

The text is a random contiguous chunk of the corpus; the key sentence is inserted at
``depth`` (0: first, 1: right before the question). Only the final key is scored.

References:
  Mohtashami and Jaggi, "Landmark Attention: Random-Access Infinite Context Length for
  Transformers", NeurIPS 2023, arXiv:2305.16300. Peng et al., "YaRN: Efficient Context Window
  Extension of Large Language Models", ICLR 2024, arXiv:2309.00071 (passkey after fine-tuning).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pejax.data import passkey
from pejax.data import synthetic_example
from pejax.encodings import arg_checks


def haystack_passkey_example(rng: np.random.Generator | int, text: np.ndarray, *, length: int,
                             depth: float, num_digits: int = 5
                             ) -> synthetic_example.SyntheticExample:
  """A passkey hidden at ``depth`` of a random chunk of ``text``; ``length`` bytes in total.

  Args:
    rng: a numpy Generator, or a seed.
    text: ``[N]`` uint8 corpus bytes (N > ``length``).
    length: total bytes, >= ``passkey.passkey_min_length(num_digits)``.
    depth: key position in [0, 1].
    num_digits: key digits.

  Returns:
    The example (``info``: ``key``, ``depth``).

  Raises:
    ValueError: for a too short ``length`` or ``text``, or ``depth`` outside [0, 1].
  """
  length = arg_checks.check_positive_int("length", length)
  smallest = passkey.passkey_min_length(num_digits)
  if length < smallest:
    raise ValueError(f"length must be >= {smallest} for a {num_digits}-digit key, got {length}")
  if not 0.0 <= float(depth) <= 1.0:
    raise ValueError(f"depth must be in [0, 1], got {depth}")
  text = np.asarray(text, dtype=np.uint8)
  filler = length - smallest
  if text.size <= filler:
    raise ValueError(f"text must hold more than {filler} bytes, got {text.size}")
  rng = np.random.default_rng(rng)
  key = bytes(48 + d for d in rng.integers(0, 10, size=num_digits))
  start = int(rng.integers(0, text.size - filler))
  chunk = text[start:start + filler].tobytes().replace(b"\x00", b" ")
  cut = int(round(float(depth) * filler))
  prompt = chunk[:cut] + passkey.key_sentence(key) + chunk[cut:] + passkey.QUESTION
  return synthetic_example.SyntheticExample(prompt, key, passkey.END,
                                            info={"key": key, "depth": float(depth)})


def mixture_batch(rng: np.random.Generator, text: np.ndarray, *, batch_size: int, seq_len: int,
                  passkey_fraction: float, min_length: int | None = None,
                  lengths: Sequence[int] | None = None) -> dict[str, np.ndarray]:
  """Rows of language modelling on ``text`` and haystack passkey examples.

  Each row is a passkey example with probability ``passkey_fraction`` (length uniform in
  ``[min_length, seq_len + 1]``, depth uniform in [0, 1]; only the key is scored), else a
  random ``seq_len + 1``-byte chunk of ``text`` (every byte scored).

  Args:
    rng: the generator.
    text: ``[N]`` uint8 corpus bytes.
    batch_size: rows B.
    seq_len: row length L.
    passkey_fraction: share of passkey rows, in [0, 1].
    min_length: shortest passkey example (default: the smallest that fits a key).
    lengths: exact passkey lengths per row instead (all rows passkey; evaluation).

  Returns:
    int32 ``inputs``, ``targets``, ``positions`` and float32 ``loss_mask``, ``[B, L]``.

  Raises:
    ValueError: for ``passkey_fraction`` outside [0, 1].
  """
  if not 0.0 <= float(passkey_fraction) <= 1.0:
    raise ValueError(f"passkey_fraction must be in [0, 1], got {passkey_fraction}")
  text = np.asarray(text, dtype=np.uint8)
  lowest = min_length or passkey.passkey_min_length()
  rows = []
  for b in range(batch_size):
    if lengths is not None or rng.random() < passkey_fraction:
      n = int(lengths[b]) if lengths is not None else int(rng.integers(lowest, seq_len + 2))
      rows.append(haystack_passkey_example(rng, text, length=n,
                                           depth=float(rng.uniform(0.0, 1.0))))
    else:
      start = int(rng.integers(0, text.size - seq_len - 1))
      chunk = text[start:start + seq_len + 1].tobytes().replace(b"\x00", b" ")
      rows.append(synthetic_example.SyntheticExample(chunk[:1], chunk[1:]))
  return synthetic_example.encode_examples(rows, seq_len=seq_len)
