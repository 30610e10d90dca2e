"""Training rows in RULER's task formats, mixed with language modelling (byte-level models).

A model can only be scored on RULER's retrieval tasks beyond its training length if it has
learned the task format at that length (Yang et al. 2025 fine-tune on such a mixture before
they compare PEs). A RULER row is a prompt of :func:`pejax.eval.ruler.generate` (the task's
template around a noise haystack of random size, fitted to a random budget that leaves room for
the answer) followed by the answer, ``" " + ", ".join(answers) + "."``; only the answer bytes are
scored. A language-model row is a random chunk of the corpus, every byte scored.

Training prompts use seeds from :data:`TRAIN_SEED_BASE` up, drawn per row; the held-out check
and the evaluation use small fixed seeds, so a test prompt is not a training prompt (the
needle vocabulary is finite, so a key or value may recur).

References:
  Hsieh et al., "RULER: What's the Real Context Size of Your Long-Context Language Models?",
  2024, arXiv:2404.06654. Yang et al., "Rope to Nope and Back Again: A New Hybrid Attention
  Strategy", 2025, arXiv:2501.18795.
"""

from __future__ import annotations

import functools
import re
from typing import Dict, Sequence

import numpy as np

TRAIN_SEED_BASE = 1_000_000  # Training prompts' seeds are >= this; test seeds are below.
ANSWER_ROOM = 48  # Bytes kept free for the answer (a UUID answer is 36 bytes, plus ". ").


def answer_text(answers: Sequence[str]) -> str:
  """What a row teaches after the prompt's answer prefix: ``" a, b."``."""
  return " " + ", ".join(answers) + "."


@functools.lru_cache(maxsize=None)
def smallest_budget(task: str) -> int:
  """The smallest prompt budget (bytes) at which :func:`pejax.eval.ruler.generate` builds every
  one of 16 probe examples of ``task``, rounded up to 16 (keys and values vary in length)."""
  from pejax.eval import ruler  # pylint: disable=g-import-not-at-top
  from pejax.eval.ruler import tasks  # pylint: disable=g-import-not-at-top
  tasks.get_task(task)  # An unknown task: its own error, with the closest name.
  budget = 16
  while budget < 1 << 20:
    try:
      ruler.generate(task, length=budget, tokenizer=ruler.ByteTokenizer(), num_examples=16,
                     seed=0)
      return budget
    except ValueError as e:
      shortest = _shortest_prompt(e)
      if shortest is None:
        raise
      budget = max(budget + 16, -(-shortest // 16) * 16)
  raise ValueError(f"task {task!r} has no prompt within 1 MiB")


def _shortest_prompt(error: ValueError) -> int | None:
  """The smallest prompt a ``generate`` error asks for, or ``None`` for another error."""
  shortest = re.search(r"length must be at least (\d+) tokens", str(error))
  return None if shortest is None else int(shortest.group(1))


def check_fits(tasks: Sequence[str], seq_len: int) -> None:
  """Refuses a row length too short for a task's smallest prompt plus its answer.

  Raises:
    ValueError: naming the task, ``seq_len`` and the smallest length that fits.
  """
  for task in tasks:
    need = smallest_budget(task) + ANSWER_ROOM
    if seq_len < need:
      raise ValueError(f"seq_len={seq_len} is too short for RULER task {task!r}: its rows need "
                       f">= {need} bytes (smallest prompt {smallest_budget(task)} + "
                       f"{ANSWER_ROOM} for the answer)")


def ruler_row(rng: np.random.Generator, task: str, *, seq_len: int, seed: int | None = None,
              budget: int | None = None):
  """One RULER row of ``task`` that fits ``seq_len`` (prompt budget uniform over what fits).

  Args:
    rng: draws the budget and, without ``seed``, the prompt's seed (>= :data:`TRAIN_SEED_BASE`).
    task: a RULER task name.
    seq_len: row length L (the row is at most L + 1 bytes).
    seed: the prompt's seed (held-out rows); ``None``: drawn for training.
    budget: the prompt budget; ``None``: uniform in [the task's smallest, L + 1 - answer room].
      :func:`smallest_budget` is measured on probe prompts: a prompt whose needles are longer
      may need more, and then gets the budget it needs (still within the row).

  Returns:
    A :class:`~pejax.data.synthetic_example.SyntheticExample` (answer bytes scored).

  Raises:
    ValueError: if this prompt's smallest form does not fit the row.
  """
  from pejax.data import synthetic_example  # pylint: disable=g-import-not-at-top
  from pejax.eval import ruler  # pylint: disable=g-import-not-at-top
  check_fits((task,), seq_len)
  top = seq_len + 1 - ANSWER_ROOM
  if budget is None:
    budget = int(rng.integers(smallest_budget(task), top + 1))
  if seed is None:
    seed = TRAIN_SEED_BASE + int(rng.integers(0, 1 << 30))
  make = lambda budget: ruler.generate(task, length=int(budget), tokenizer=ruler.ByteTokenizer(),
                                       num_examples=1, seed=int(seed))[0]
  try:
    example = make(budget)
  except ValueError as e:  # Found in the full run: a 'niah_single_words' prompt needed 450 > 448.
    shortest = _shortest_prompt(e)
    if shortest is None or shortest > top:
      raise
    example = make(shortest)
  return synthetic_example.SyntheticExample(example.input.encode("utf-8"),
                                            answer_text(example.answers).encode("utf-8"))


def mixture_batch(rng: np.random.Generator, text: np.ndarray, *, batch_size: int, seq_len: int,
                  tasks: Sequence[str], ruler_fraction: float) -> Dict[str, np.ndarray]:
  """Rows of RULER tasks (probability ``ruler_fraction``, task uniform) and language modelling.

  Args:
    rng: the generator.
    text: ``[N]`` uint8 corpus bytes (N > ``seq_len`` + 1).
    batch_size: rows B.
    seq_len: row length L.
    tasks: RULER task names.
    ruler_fraction: share of RULER rows, in [0, 1].

  Returns:
    int32 ``inputs``, ``targets``, ``positions`` and float32 ``loss_mask``, ``[B, L]``.

  Raises:
    ValueError: for ``ruler_fraction`` outside [0, 1], no task, or ``seq_len`` too short.
  """
  from pejax.data import synthetic_example  # pylint: disable=g-import-not-at-top
  if not 0.0 <= float(ruler_fraction) <= 1.0:
    raise ValueError(f"ruler_fraction must be in [0, 1], got {ruler_fraction}")
  if not tasks:
    raise ValueError("tasks must name at least one RULER task, got none")
  check_fits(tasks, seq_len)
  text = np.asarray(text, dtype=np.uint8)
  rows = []
  for _ in range(batch_size):
    if rng.random() < ruler_fraction:
      rows.append(ruler_row(rng, tasks[int(rng.integers(len(tasks)))], seq_len=seq_len))
    else:
      start = int(rng.integers(0, text.size - seq_len - 1))
      chunk = text[start:start + seq_len + 1].tobytes().replace(b"\x00", b" ")
      rows.append(synthetic_example.SyntheticExample(chunk[:1], chunk[1:]))
  return synthetic_example.encode_examples(rows, seq_len=seq_len)
