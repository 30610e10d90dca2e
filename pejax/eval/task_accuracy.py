"""Exact-match accuracy of a model on a synthetic task at each evaluation length, and its table."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import jax.numpy as jnp
import numpy as np

from pejax import data as data_lib
from pejax.eval.exact_match import answer_exact_match
from pejax.nn.attention import choose_implementation


def task_accuracy_at_lengths(model: Any, task: str, *, lengths: Sequence[int], seed: int,
                             examples: int, blockwise_threshold: Optional[int],
                             options: Dict[str, Any],
                             log: Callable[[str], None]) -> List[Dict[str, Any]]:
  """Exact-match accuracy (every answer byte right under teacher forcing) at each length.

  Each length is scored on ``examples`` fresh examples of the largest task size that fits it
  (seed ``seed + length``).

  Args:
    model: a decoder.
    task: a synthetic task name (:data:`pejax.data.TASK_NAMES`).
    lengths: the evaluation lengths.
    seed: the base seed of the examples.
    examples: examples per length.
    blockwise_threshold: the longest length run with dense attention (``None``: the
      platform's crossover).
    options: the task's own options (``reverse_digits`` for addition).
    log: receives one line per length.

  Returns:
    One row per length: ``{"length", "task_size", "accuracy", "status": "ok"}``, or
    ``{"length", "accuracy": None, "status": "n/a (<why>)"}`` where no example fits.
  """
  rows = []
  for length in lengths:
    try:
      size = data_lib.max_size_for(task, length, **options)
      batch = data_lib.synthetic_batch(task, seed + length, batch_size=examples, seq_len=length,
                                       min_size=size, max_size=size, **options)
    except ValueError as e:
      rows.append({"length": length, "accuracy": None, "status": f"n/a ({e})"})
      continue
    ok = answer_exact_match(
        model, *(jnp.asarray(batch[k]) for k in ("inputs", "targets", "positions")),
        jnp.asarray(batch["loss_mask"]),
        attention=choose_implementation("auto", length, blockwise_threshold=blockwise_threshold))
    acc = float(np.mean(np.asarray(ok)))
    rows.append({"length": length, "task_size": size, "accuracy": acc, "status": "ok"})
    log(f"eval {task} L={length:>6} (size {size}): exact-match accuracy {acc:.3f}")
  return rows


def format_task_table(rows: Sequence[Dict[str, Any]], *, train_len: int) -> str:
  """A markdown table of :func:`task_accuracy_at_lengths`'s rows.

  Columns: evaluation length, multiple of the training length, task size, accuracy.

  Args:
    rows: :func:`task_accuracy_at_lengths`'s result.
    train_len: the training length (the ``x train`` column).

  Returns:
    The table.
  """
  lines = ["| eval len | x train | task size | accuracy |", "|---:|---:|---:|---:|"]
  for r in rows:
    acc = f"{r['accuracy']:.3f}" if r["accuracy"] is not None else r["status"]
    lines.append(f"| {r['length']} | {r['length'] / train_len:g} | {r.get('task_size', '')} | "
                 f"{acc} |")
  return "\n".join(lines)
