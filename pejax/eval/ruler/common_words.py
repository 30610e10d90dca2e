"""Common words extraction (cwe): the most frequent words of a long numbered list.

``num_common`` words appear ``common_repeats`` times each and the other words
``uncommon_repeats`` times each, shuffled into ``"1. w 2. w 3. w ..."``; the answer is the common
words. RULER's rule for the repeats: 30 and 3 for ``max_seq_length >= 4096``, else 6 and 1 (with
a shot of 40 words, 10 and 3 repeats, resp. 20 words, 3 and 1); ``None`` options follow it,
with ``length`` as the sequence length, and fall back to the short setting when the long one's
smallest prompt does not fit (a byte tokenizer at 4096). ``num_shots`` solved examples precede
the task, each wrapped in the model template (RULER adds one; its words are never the task's
common words). The haystack size is the number of distinct words.

References:
  Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context Language
  Models?": https://arxiv.org/abs/2404.06654 (NVIDIA/RULER,
  scripts/data/synthetic/common_words_extraction.py).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

from pejax.eval.ruler import task_spec
from pejax.eval.ruler import vocabulary

_TEMPLATE = ("Below is a numbered list of words. In these words, some appear more often than "
             "others. Memorize the ones that appear most often.\n{context}\nQuestion: What are "
             "the {num_common} most common words in the above list?")
_ANSWER_PREFIX = (" Answer: The top {num_common} words that appear most often in the list "
                  "are:")
# RULER's switch between its short and long settings (on max_seq_length).
LONG_LENGTH = 4096
# (repeats of a common word, of an uncommon word, words in a shot, common-word repeats in a
# shot, uncommon-word repeats in a shot) of RULER's long and short settings.
_LONG = (30, 3, 40, 10, 3)
_SHORT = (6, 1, 20, 3, 1)


def check_options(options: Dict[str, Any]) -> Dict[str, Any]:
  """Validates the common-words options.

  Args:
    options: ``num_common`` (>= 1), ``common_repeats`` and ``uncommon_repeats`` (``None``:
      RULER's rule, or integers with ``common_repeats > uncommon_repeats >= 1``),
      ``num_shots`` (>= 0).

  Returns:
    The options, integers as ``int``.

  Raises:
    ValueError: naming the bad option and its value.
  """
  options = dict(options)
  words = len(vocabulary.single_words())
  options["num_common"] = task_spec.check_int("num_common", options["num_common"], minimum=1)
  if 5 * options["num_common"] > words:
    raise ValueError(f"num_common must be at most {words // 5} (a fifth of the built-in "
                     f"vocabulary), got {options['num_common']}")
  options["common_repeats"] = task_spec.check_optional_int(
      "common_repeats", options["common_repeats"], minimum=2)
  options["uncommon_repeats"] = task_spec.check_optional_int(
      "uncommon_repeats", options["uncommon_repeats"], minimum=1)
  common, uncommon = options["common_repeats"], options["uncommon_repeats"]
  if common is not None and uncommon is not None and common <= uncommon:
    raise ValueError(f"common_repeats must be greater than uncommon_repeats ({uncommon}), got "
                     f"{common}")
  options["num_shots"] = task_spec.check_int("num_shots", options["num_shots"], minimum=0)
  return options


def _numbered(words: Sequence[str]) -> str:
  return " ".join(f"{i + 1}. {word}" for i, word in enumerate(words))


def _word_list(rng: np.random.Generator, common: Sequence[str], uncommon: Sequence[str], *,
               common_repeats: int, uncommon_repeats: int) -> List[str]:
  words = list(common) * common_repeats + list(uncommon) * uncommon_repeats
  return [words[i] for i in rng.permutation(len(words))]


def _uncommon_words(rng: np.random.Generator, pool: Sequence[str], count: int) -> List[str]:
  """``count`` distinct words: from ``pool``, then ``"a-b"`` pairs of pool words (a != b)."""
  if count <= len(pool):
    return [pool[i] for i in rng.choice(len(pool), size=count, replace=False)]
  size = len(pool)
  words = [pool[i] for i in rng.permutation(size)]
  for pair in rng.choice(size * (size - 1), size=count - size, replace=False):
    first, second = divmod(int(pair), size - 1)
    words.append(f"{pool[first]}-{pool[second + (second >= first)]}")
  return words


def make_builder(entropy: Sequence[int], *, length: int, options: Dict[str, Any],
                 model_template: str, count: Callable[[str], int]
                 ) -> Tuple[Callable[[int], task_spec.Draft], int]:
  """Draws the common words and shots of a cwe example; returns its prompt builder.

  Args:
    entropy: the example's seed material (:func:`task_spec.rng_for`).
    length: the token budget (picks RULER's long or short setting).
    options: checked options (:func:`check_options`).
    model_template: the chat template holding ``{task_template}``.
    count: the token counter (does the long setting's smallest prompt fit?).

  Returns:
    ``(build, min_units)``: ``build(n)`` is the prompt listing ``n`` distinct words,
    ``min_units = num_common + 1``.
  """
  num_common = options["num_common"]
  rng = task_spec.rng_for(entropy, 0)
  words = vocabulary.single_words()
  order = rng.permutation(len(words))
  common = [words[i] for i in order[:num_common]]
  rest = [words[i] for i in order[num_common:]]  # Shots and uncommon words never use `common`.
  answer_prefix = _ANSWER_PREFIX.format(num_common=num_common)

  def builder(setting: Tuple[int, ...]) -> Callable[[int], task_spec.Draft]:
    common_repeats = options["common_repeats"] or setting[0]
    uncommon_repeats = options["uncommon_repeats"] or setting[1]
    if common_repeats <= uncommon_repeats:
      raise ValueError(f"common_repeats must be greater than uncommon_repeats "
                       f"({uncommon_repeats}), got {common_repeats}")
    shot_words, shot_common_repeats, shot_uncommon_repeats = setting[2:]
    shot_words = -(-shot_words * num_common // 10)  # RULER's shots are for num_common=10.
    shot_rng = task_spec.rng_for(entropy, 2)
    shots = []
    for _ in range(options["num_shots"]):
      chosen = [rest[i] for i in shot_rng.choice(len(rest), size=shot_words, replace=False)]
      shot_common = chosen[:num_common]
      listed = _word_list(shot_rng, shot_common, chosen[num_common:],
                          common_repeats=shot_common_repeats,
                          uncommon_repeats=shot_uncommon_repeats)
      text = _TEMPLATE.format(context=_numbered(listed), num_common=num_common)
      shots.append(task_spec.apply_model_template(model_template, text) + answer_prefix + " "
                   + _numbered(shot_common) + "\n")

    def build(n: int) -> task_spec.Draft:
      list_rng = task_spec.rng_for(entropy, 1, n)
      uncommon = _uncommon_words(list_rng, rest, n - num_common)
      listed = _word_list(list_rng, common, uncommon, common_repeats=common_repeats,
                          uncommon_repeats=uncommon_repeats)
      text = _TEMPLATE.format(context=_numbered(listed), num_common=num_common)
      return task_spec.Draft(
          input=("".join(shots) + task_spec.apply_model_template(model_template, text)
                 + answer_prefix),
          answer_prefix=answer_prefix,
          answers=tuple(common),
          metadata={"haystack_size": n, "list_length": len(listed),
                    "common_repeats": common_repeats, "uncommon_repeats": uncommon_repeats})

    return build

  if length >= LONG_LENGTH:
    build = builder(_LONG)
    if count(build(num_common + 1).input) <= length:
      return build, num_common + 1
  return builder(_SHORT), num_common + 1
