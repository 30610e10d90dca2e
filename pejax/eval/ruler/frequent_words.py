"""Frequent words extraction (fwe): the three most frequent coded words of a Zipf-distributed text.

A vocabulary of ``vocab_size`` words is ranked; rank 1 is the noise word ``"..."`` and the others
are random lower-case strings of ``word_length`` letters. The word of rank ``k`` appears
``floor(N * k**-alpha / zeta(alpha))`` times, shuffled into one space-separated text; the answer
is the words of ranks 2, 3 and 4 (RULER's ``vocab[1:4]``). The haystack size is ``N``; its
smallest value makes rank 4 strictly more frequent than rank 5 at every larger ``N``.
``vocab_size=None`` is RULER's ``length // 50`` (at least the ranks of the smallest text).

References:
  Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context Language
  Models?": https://arxiv.org/abs/2404.06654 (NVIDIA/RULER,
  scripts/data/synthetic/freq_words_extraction.py).
"""

from __future__ import annotations

import math
import string
from typing import Any, Callable, Dict, List, Sequence, Set, Tuple

import numpy as np

from pejax.eval.ruler import task_spec

_TEMPLATE = ("Read the following coded text and track the frequency of each coded word. Find the "
             "three most frequently appeared coded words. {context}\nQuestion: Do not provide any "
             "explanation. Please ignore the dots '....'. What are the three most frequently "
             "appeared words in the above coded text?")
_ANSWER_PREFIX = (" Answer: According to the coded text above, the three most frequently "
                  "appeared words are:")
NOISE_WORD = "..."
NUM_ANSWERS = 3
# The smallest vocabulary: the noise word, the three answers and one word below them.
MIN_VOCAB_SIZE = NUM_ANSWERS + 2
# RULER's default vocabulary size: one word per this many tokens of the sequence.
TOKENS_PER_VOCAB_WORD = 50


def zeta(alpha: float) -> float:
  """The Riemann zeta function at ``alpha > 1`` (to ~1e-12 relative; no SciPy needed).

  Args:
    alpha: the exponent, > 1.

  Returns:
    ``sum_{k >= 1} k**-alpha``: a direct sum to 1000 plus the Euler-Maclaurin tail.
  """
  m = 1000
  head = float(np.sum(np.arange(1, m, dtype=np.float64) ** -alpha))
  return head + m**(1 - alpha) / (alpha - 1) + 0.5 * m**-alpha + alpha * m**(-alpha - 1) / 12


def check_options(options: Dict[str, Any]) -> Dict[str, Any]:
  """Validates the frequent-words options.

  Args:
    options: ``alpha`` (a number > 1), ``word_length`` (>= 2), ``vocab_size`` (``None`` or
      >= 5, at most half the ``26**word_length`` coded words).

  Returns:
    The options, ``alpha`` as ``float``, integers as ``int``.

  Raises:
    ValueError: naming the bad option and its value.
  """
  options = dict(options)
  options["alpha"] = task_spec.check_float_above("alpha", options["alpha"], bound=1.0)
  options["word_length"] = task_spec.check_int("word_length", options["word_length"], minimum=2)
  options["vocab_size"] = task_spec.check_optional_int("vocab_size", options["vocab_size"],
                                                       minimum=MIN_VOCAB_SIZE)
  most = 26**options["word_length"] // 2
  if options["vocab_size"] is not None and options["vocab_size"] > most:
    raise ValueError(f"vocab_size must be at most {most} with word_length="
                     f"{options['word_length']}, got {options['vocab_size']}")
  return options


def _coded_words(rng: np.random.Generator, count: int, letters: int) -> List[str]:
  """``count`` distinct random lower-case words of ``letters`` letters."""
  words: List[str] = []
  seen: Set[str] = set()
  while len(words) < count:
    for row in rng.integers(0, 26, size=(count - len(words), letters)):
      word = "".join(string.ascii_lowercase[c] for c in row)
      if word not in seen:
        seen.add(word)
        words.append(word)
  return words


def make_builder(entropy: Sequence[int], *, length: int, options: Dict[str, Any],
                 model_template: str, count: Callable[[str], int]
                 ) -> Tuple[Callable[[int], task_spec.Draft], int]:
  """Draws the coded vocabulary of an fwe example; returns its prompt builder.

  Args:
    entropy: the example's seed material (:func:`task_spec.rng_for`).
    length: the token budget (sets the default vocabulary size).
    options: checked options (:func:`check_options`).
    model_template: the chat template holding ``{task_template}``.
    count: the token counter (unused).

  Returns:
    ``(build, min_units)``: ``build(n)`` is the prompt at Zipf scale ``N = n``.
  """
  del count
  alpha = options["alpha"]

  def weights_of(size: int) -> np.ndarray:  # The Zipf weights of ranks 1 .. size.
    return np.arange(1, size + 1, dtype=np.float64) ** -alpha / zeta(alpha)

  # Rank 4 beats rank 5 by at least one occurrence once N * (w4 - w5) >= 1 (+ 1: rounding).
  w4, w5 = weights_of(NUM_ANSWERS + 2)[NUM_ANSWERS:]
  min_units = math.ceil(1.0 / (w4 - w5)) + 1
  vocab_size = options["vocab_size"]
  if vocab_size is None:
    # RULER's length // 50, and at least the ranks the smallest text holds (so that the
    # smallest prompt, hence the minimum length, does not depend on the length).
    ranks_at_min = int(np.sum(np.floor(min_units * weights_of(10**4)) >= 1))
    vocab_size = min(max(length // TOKENS_PER_VOCAB_WORD, ranks_at_min, MIN_VOCAB_SIZE),
                     26**options["word_length"] // 2)
  rng = task_spec.rng_for(entropy, 0)
  vocab = np.array([NOISE_WORD] + _coded_words(rng, vocab_size - 1, options["word_length"]))
  weights = weights_of(vocab_size)
  answers = tuple(str(w) for w in vocab[1:1 + NUM_ANSWERS])
  answer_prefix = _ANSWER_PREFIX

  def build(n: int) -> task_spec.Draft:
    counts = np.floor(n * weights).astype(np.int64)
    ranks = np.repeat(np.arange(vocab_size), counts)
    task_spec.rng_for(entropy, 1, n).shuffle(ranks)
    text = _TEMPLATE.format(context=" ".join(vocab[ranks].tolist()))
    return task_spec.Draft(
        input=task_spec.apply_model_template(model_template, text) + answer_prefix,
        answer_prefix=answer_prefix,
        answers=answers,
        metadata={"haystack_size": n, "vocab_size": vocab_size, "num_words": int(ranks.size),
                  "top_counts": tuple(int(c) for c in counts[:MIN_VOCAB_SIZE])})

  return build, min_units
