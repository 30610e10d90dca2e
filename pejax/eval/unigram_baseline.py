"""The context-free baseline: perplexity of a token stream's unigram distribution."""

from __future__ import annotations

import numpy as np


def unigram_perplexity(tokens: np.ndarray) -> float:
  """Perplexity of the unigram distribution of ``tokens`` (the level a context-free model reaches).

  Args:
    tokens: integer tokens ``[N]`` (bytes, or a tokenizer's ids).

  Returns:
    ``exp(entropy)`` of the token frequencies, in nats.
  """
  counts = np.bincount(np.asarray(tokens, np.int64), minlength=256).astype(np.float64)
  p = counts[counts > 0] / counts.sum()
  return float(np.exp(-(p * np.log(p)).sum()))
