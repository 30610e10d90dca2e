"""Error rates of a trained task model under other task options, with many examples per cell.

A study trains each model on one distribution of its task; some published claims are about the
same model on another one. Flip-flop language modelling (Liu et al. 2023, arXiv:2306.00946)
trains with ignore probability 0.8 (FFL(0.8)) and tests for *glitches*, wrong reads, under sparse
(FFL(0.98): long gaps between a write and its read) and dense (FFL(0.1)) sequences; Golovneva et al. 2024
(arXiv:2405.18719) compare CoPE with RoPE and absolute positions on them.

A :class:`Condition` names task options (``{"ignore_prob": 0.98}``); :func:`condition_scores`
tests one model under each condition at each size with ``examples`` fresh examples (positions
``0..k-1``) and returns two error rates per cell:

* ``sequence_error``: the fraction of examples with at least one wrong scored byte (1 - exact
  match): for flip-flop, the sequences with at least one wrong read (a glitch);
* ``token_error``: the fraction of all scored bytes (flip-flop: read bits) that are wrong.

With n examples a cell resolves a rate of 1/n; :func:`resolution` states it beside the table,
and a verdict margin must exceed it (issue 45). The scores are cached beside the model
(``conditions.json``, kept in git with ``fit.json`` / ``eval.json``), so a report can be
rewritten from the committed records without the weights.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Dict, Mapping, Optional, Sequence

import ml_collections
import numpy as np

from experiments.algorithmic import convergence
from experiments.algorithmic import sweep
from experiments.study import result_cache

CONDITIONS_FILE = "conditions.json"


@dataclasses.dataclass(frozen=True)
class Condition:
  """Task options a trained model is tested under.

  Attributes:
    name: label in tables and records (``"sparse"``).
    options: keyword options of the task's generator (``{"ignore_prob": 0.98}``).
  """

  name: str
  options: Mapping[str, Any]

  def __post_init__(self):
    if not self.name or not isinstance(self.name, str):
      raise ValueError(f"name of a Condition must be a non-empty str, got {self.name!r}")


def condition_batch(task: str, rng: np.random.Generator, *, size: int, examples: int,
                    options: Mapping[str, Any]) -> Dict[str, np.ndarray]:
  """``examples`` examples of ``task`` at ``size`` under ``options``, encoded at the test row of
  that size (positions ``0..L-1``): :func:`convergence.task_batch` with the task's options.

  Raises:
    ValueError: for an option the task does not accept, or a size whose text does not fit
      (:func:`pejax.data.synthetic.resolve_size_range`).
  """
  from pejax.data import synthetic  # pylint: disable=g-import-not-at-top
  row_len = sweep.test_row_len(task, size)
  synthetic.resolve_size_range(task, seq_len=row_len, min_size=size, max_size=size, **options)
  return convergence.task_batch(task, rng, batch_size=examples, row_len=row_len, min_size=size,
                                max_size=size, train_len=row_len, max_position=None,
                                sizes=[size] * examples, options=options)


def error_rates(model, batch: Mapping[str, np.ndarray]) -> Dict[str, float]:
  """``{"sequence_error", "token_error", "examples", "scored"}`` of ``model`` on ``batch``."""
  row_len = batch["inputs"].shape[1]
  chunk = max(1, 8192 // row_len)
  # One forward pass: a row is an exact match when every scored byte is right, i.e. its token
  # accuracy (right / scored, two integers) is exactly 1, or it has no scored byte (NaN).
  per_row = convergence.token_accuracy(model, batch, chunk=chunk)
  exact = np.isnan(per_row) | (per_row == 1.0)
  per_row = np.nan_to_num(per_row, nan=1.0)
  scored = np.asarray(batch["loss_mask"]).sum(axis=1)
  return {"sequence_error": float(1.0 - np.mean(exact)),
          "token_error": float(1.0 - np.sum(per_row * scored) / max(1.0, float(scored.sum()))),
          "examples": int(len(exact)), "scored": int(scored.sum())}


def condition_key(result: convergence.FitResult, spec: sweep.TaskSpec,
                  conditions: Sequence[Condition], *, sizes: Sequence[int], examples: int
                  ) -> Dict[str, Any]:
  """What the scores of one model depend on (the key of its ``conditions.json``)."""
  return {"task": spec.name, "steps": result.steps, "sizes": [int(s) for s in sizes],
          "examples": int(examples), "version": 1,
          "conditions": {c.name: dict(c.options) for c in conditions}}


def condition_scores(result: convergence.FitResult, config: ml_collections.ConfigDict,
                     spec: sweep.TaskSpec, conditions: Sequence[Condition], *,
                     sizes: Sequence[int], examples: int,
                     recorded_only: bool = False
                     ) -> Optional[Dict[str, Dict[str, Dict[str, float]]]]:
  """Error rates of one trained model under each condition at each size (cached).

  Args:
    result: the trained model's record.
    config: its experiment config (``seed``: the examples come from
      ``default_rng([seed, 5, condition index])``).
    spec: its task.
    conditions: the conditions (distinct names).
    sizes: test sizes.
    examples: examples per (condition, size) cell, >= 1.
    recorded_only: return ``None`` instead of evaluating when ``conditions.json`` does not hold
      these scores (a report written from records kept without weights).

  Returns:
    ``{condition: {str(size): error_rates(...)}}``, or ``None`` (``recorded_only``).

  Raises:
    ValueError: for duplicate condition names, no size, or ``examples < 1``.
    FileNotFoundError: when the scores must be computed but the weights were not kept.
  """
  names = [c.name for c in conditions]
  if len(set(names)) != len(names):
    raise ValueError(f"condition names must be distinct, got {names}")
  if not sizes:
    raise ValueError("sizes must not be empty")
  if isinstance(examples, bool) or int(examples) != examples or examples < 1:
    raise ValueError(f"examples must be an int >= 1, got {examples!r}")
  key = condition_key(result, spec, conditions, sizes=sizes, examples=examples)
  path = pathlib.Path(result.run_dir) / CONDITIONS_FILE
  if recorded_only:
    return result_cache.cached_value(path, key)

  def compute():
    model = convergence.load_model(result, config)
    out = {}
    for i, condition in enumerate(conditions):
      rng = np.random.default_rng([int(config.seed), 5, i])
      out[condition.name] = {
          str(int(s)): error_rates(model, condition_batch(
              spec.name, rng, size=int(s), examples=int(examples), options=condition.options))
          for s in sizes}
    return out

  return result_cache.cached(path, key, compute)


def resolution(examples: int) -> float:
  """The smallest nonzero error rate a cell of ``examples`` examples can show (1 / n)."""
  return 1.0 / max(1, int(examples))
