"""Passkey retrieval in natural language, tokenized with a pretrained model's tokenizer.

Axes: L sequence length in tokens. The prompt of Mohtashami and Jaggi 2023 ("Landmark
Attention", arXiv 2305.16300) and of the LongLoRA / YaRN evaluations: an instruction, repeated
filler sentences with ``The pass key is K. Remember it. K is the pass key.`` inserted at a chosen
depth, then ``What is the pass key? The pass key is`` followed by the answer `` K``. Pieces are
tokenized separately and concatenated, so the sequence has exactly the requested length.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pejax.encodings import arg_checks

INSTRUCTION = ("There is an important info hidden inside a lot of irrelevant text. Find it and "
               "memorize it. I will quiz you about the important information there.\n")
FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back "
          "again.\n")
QUESTION = "What is the pass key? The pass key is"


def passkey_text_example(tokenizer: Any, *, length: int, depth: float,
                         seed: int) -> dict[str, np.ndarray]:
  """One passkey example of exactly ``length`` tokens.

  Args:
    tokenizer: an object with ``encode(str) -> ids`` (``pejax.hf.load_tokenizer``).
    length: L, the total number of tokens (inputs and the answer).
    depth: where the key sits in the filler, in [0, 1] (0 = right after the instruction).
    seed: picks the 5-digit key.

  Returns:
    ``inputs``, ``targets``, ``positions`` int32 ``[L - 1]`` and ``loss_mask`` float32
    ``[L - 1]`` (1 on the answer tokens), plus ``key`` (the number, a 0-d array).

  Raises:
    ValueError: if ``length`` cannot hold the instruction, key and question, or ``depth`` is
      outside [0, 1].
  """
  length = arg_checks.check_positive_int("length", length)
  if not 0.0 <= float(depth) <= 1.0:
    raise ValueError(f"depth must be in [0, 1], got {depth}")
  key = int(np.random.RandomState(seed).randint(10000, 100000))
  encode = lambda text: np.asarray(tokenizer.encode(text), np.int32).reshape(-1)
  instruction, filler = encode(INSTRUCTION), encode(FILLER)
  needle = encode(f"The pass key is {key}. Remember it. {key} is the pass key.\n")
  question, answer = encode(QUESTION), encode(f" {key}")
  fixed = instruction.size + needle.size + question.size + answer.size
  room = length - fixed
  if room < 0:
    raise ValueError(f"length must be at least {fixed} tokens for this tokenizer (instruction, "
                     f"key and question), got {length}")
  reps = -(-room // max(filler.size, 1))
  fill = np.tile(filler, reps)[:room]
  cut = min(room, int(round(float(depth) * (room // max(filler.size, 1)))) * filler.size)
  sequence = np.concatenate([instruction, fill[:cut], needle, fill[cut:], question, answer])
  mask = np.zeros(length - 1, np.float32)
  mask[length - 1 - answer.size:] = 1.0
  return {"inputs": sequence[:-1], "targets": sequence[1:],
          "positions": np.arange(length - 1, dtype=np.int32), "loss_mask": mask,
          "key": np.asarray(key)}
