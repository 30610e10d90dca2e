"""The validation loss a training run logs: the training length, a fixed validation slice."""

from __future__ import annotations

import math
from typing import Any, Callable, Dict

import numpy as np

from pejax import data as data_lib
from pejax.eval.perplexity import score_windows


def validation_loss_fn(valid_tokens: np.ndarray, train_len: int, *,
                       max_tokens: int = 8192) -> Callable[[Any], Dict[str, float]]:
  """A function scoring a model at the training length on a fixed slice of the validation split.

  Args:
    valid_tokens: the validation split's tokens ``[N]``.
    train_len: the training length (the window length).
    max_tokens: the slice's size (at least one window).

  Returns:
    ``evaluate(model) -> {"loss", "perplexity", "bits_per_byte"}`` (``loss`` in nats per token).
  """
  windows = data_lib.nonoverlapping_windows(valid_tokens, train_len,
                                            max_tokens=max(train_len, max_tokens))

  def evaluate(model) -> Dict[str, float]:
    total, count = score_windows(model, windows, batch_size=max(1, 8192 // train_len))
    nll = total / count
    return {"loss": nll, "perplexity": math.exp(min(nll, 700.0)),
            "bits_per_byte": nll / math.log(2)}

  return evaluate
