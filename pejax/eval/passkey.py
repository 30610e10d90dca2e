"""Passkey retrieval accuracy by length and depth.

A number is hidden at a chosen depth of filler text and asked for at the end (Mohtashami and
Jaggi 2023, "Landmark Attention", arXiv 2305.16300). Scoring is teacher-forced: a retrieval counts
as correct when the argmax prediction of every answer byte is right, which is the same event as
greedy decoding reproducing the key (each answer byte is predicted from the correct earlier ones).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence

from flax import nnx
import jax.numpy as jnp
import numpy as np

from pejax import data as data_lib
from pejax.encodings import arg_checks
from pejax.eval import exact_match
from pejax.eval.json_fields import json_fields
from pejax.nn.attention import choose_implementation


@dataclasses.dataclass(frozen=True)
class PasskeyResult:
  """Retrieval accuracy at one (length, depth) cell.

  Attributes:
    length: sequence length L in bytes.
    depth: requested key depth in [0, 1] (0 = start of the filler).
    accuracy: fraction of examples whose whole key is predicted; NaN when not evaluated.
    examples: number of examples.
    status: ``"ok"`` or why the cell was skipped.
  """

  length: int
  depth: float
  accuracy: float
  examples: int
  status: str = "ok"

  def to_json(self) -> Dict[str, object]:
    """The fields as a JSON-serializable dict.

    Returns:
      ``{"length", "depth", "accuracy", "examples", "status"}``; a NaN accuracy becomes None
      (JSON has no NaN).
    """
    return json_fields(self)


def passkey_accuracy(model: nnx.Module, *, lengths: Sequence[int], depths: Sequence[float],
                     examples: int = 16, seed: int = 0, blockwise_threshold: Optional[int] = None,
                     max_length: Optional[int] = None,
                     progress: Optional[Callable[[str], None]] = None) -> List[PasskeyResult]:
  """Passkey accuracy of ``model`` for every (length, depth).

  Args:
    model: decoder called as ``model(inputs, positions=..., attention=...)``.
    lengths: sequence lengths L (each at least the task minimum, about 80 bytes).
    depths: key depths in [0, 1].
    examples: examples per cell (one batch).
    seed: data seed; cells use ``seed + index`` so they are independent and reproducible.
    blockwise_threshold: lengths above it use blockwise attention; None: the platform's
      measured crossover (:func:`pejax.nn.attention.choose_implementation`).
    max_length: longest length the model supports (learned table); longer cells are skipped.
    progress: optional callback receiving one line per cell.

  Returns:
    One :class:`PasskeyResult` per cell, lengths outer.
  """
  examples = arg_checks.check_positive_int("examples", examples)
  results = []
  for i, length in enumerate(lengths):
    length = arg_checks.check_positive_int("lengths", length)
    for j, depth in enumerate(depths):
      if max_length is not None and length > max_length:
        results.append(PasskeyResult(length, float(depth), float("nan"), 0,
                                     f"n/a (table size {max_length})"))
        continue
      if length + 1 < data_lib.passkey_min_length(5):
        results.append(PasskeyResult(length, float(depth), float("nan"), 0,
                                     f"n/a (shorter than {data_lib.passkey_min_length(5)})"))
        continue
      batch = data_lib.synthetic_batch(
          "passkey", seed + 1000 * i + j, batch_size=examples, seq_len=length,
          min_size=length + 1, max_size=length + 1, depth=float(depth))
      results.append(_score_cell(model, batch, length=length, depth=float(depth),
                                 blockwise_threshold=blockwise_threshold, progress=progress))
  return results


def _score_cell(model: nnx.Module, batch: Dict[str, np.ndarray], *, length: int, depth: float,
                blockwise_threshold: Optional[int],
                progress: Optional[Callable[[str], None]]) -> PasskeyResult:
  """Exact match of every answer of one (length, depth) batch under teacher forcing."""
  right = exact_match.answer_exact_match(
      model, *(jnp.asarray(batch[k]) for k in ("inputs", "targets", "positions", "loss_mask")),
      attention=choose_implementation("auto", length, blockwise_threshold=blockwise_threshold))
  accuracy = float(np.mean(np.asarray(right)))
  if progress is not None:
    progress(f"passkey L={length:>6} depth {depth:.2f}: accuracy {accuracy:.2f}")
  return PasskeyResult(length, depth, accuracy, int(batch["inputs"].shape[0]))


def passkey_text_accuracy(model: nnx.Module, tokenizer, *, lengths: Sequence[int],
                          depths: Sequence[float], examples: int = 4, seed: int = 0,
                          blockwise_threshold: Optional[int] = None,
                          progress: Optional[Callable[[str], None]] = None
                          ) -> List[PasskeyResult]:
  """Natural-language passkey accuracy of a pretrained model, with its own tokenizer.

  Each cell holds ``examples`` prompts of exactly L tokens (:func:`pejax.data.passkey_text.
  passkey_text_example`); a prompt counts as right when the argmax prediction of every answer
  token is right under teacher forcing (the same event as greedy decoding of the key).

  Args:
    model: decoder called as ``model(inputs, positions=..., attention=...) -> [B, L, V]``.
    tokenizer: ``encode(str) -> ids`` with the model's vocabulary (``pejax.hf.load_tokenizer``).
    lengths: sequence lengths L in tokens.
    depths: key depths in [0, 1].
    examples: prompts per cell (one batch).
    seed: data seed; cell (i, j) uses keys from ``seed + 1000 * i + 100 * j + e``.
    blockwise_threshold: lengths above it use blockwise attention; None: the platform's
      measured crossover (:func:`pejax.nn.attention.choose_implementation`).
    progress: optional callback receiving one line per cell.

  Returns:
    One :class:`PasskeyResult` per cell, lengths outer; a length too short for the prompt is
    reported with ``status = "n/a (needs N tokens)"``.
  """
  from pejax.data import passkey_text  # pylint: disable=g-import-not-at-top
  examples = arg_checks.check_positive_int("examples", examples)
  results = []
  for i, length in enumerate(lengths):
    length = arg_checks.check_positive_int("lengths", length)
    for j, depth in enumerate(depths):
      try:
        rows = [passkey_text.passkey_text_example(
            tokenizer, length=length, depth=float(depth), seed=seed + 1000 * i + 100 * j + e)
                for e in range(examples)]
      except ValueError as e:
        results.append(PasskeyResult(length, float(depth), float("nan"), 0,
                                     f"n/a ({str(e).split(' for ')[0]})"))
        continue
      batch = {k: np.stack([r[k] for r in rows])
               for k in ("inputs", "targets", "positions", "loss_mask")}
      results.append(_score_cell(model, batch, length=length, depth=float(depth),
                                 blockwise_threshold=blockwise_threshold, progress=progress))
  return results
