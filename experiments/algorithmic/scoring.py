"""Scoring a trained task model at every test size (exact match or per-token accuracy).

Test rows are bucketed by length (:data:`~experiments.algorithmic.sweep.ROW_BUCKETS`) so that
each model compiles a handful of shapes; the accuracies are cached beside the model
(``eval.json``), under each position protocol (``arange``, and ``sampled`` for a randomized
variant).
"""

from __future__ import annotations

import pathlib
from typing import Any, Dict, List, Mapping, Optional

import ml_collections
import numpy as np

from experiments.algorithmic import convergence
from experiments.algorithmic import sweep
from experiments.study import result_cache


OOD_KEYS = ("ood", "ood_2x", "ood_far")


def accuracy_by_size(model, spec: sweep.TaskSpec, *, examples: int, seed: int, train_len: int,
                     max_position: Optional[int], metric: str = "exact_match"
                     ) -> Dict[int, float]:
  """Accuracy of ``model`` for every test size of ``spec`` (exact match, or per token).

  Args:
    model: a trained decoder.
    spec: the task.
    examples: examples per size.
    seed: data seed.
    train_len: the training row length (randomized positions draw at least this many).
    max_position: range of sampled positions, or ``None`` for ``0..k-1``.
    metric: ``"exact_match"`` (fraction of examples whose whole answer is right) or
      ``"token_accuracy"`` (mean over the examples of the fraction of answer bytes right).

  Returns:
    size -> accuracy.
  """
  score = {"exact_match": convergence.exact_match,
           "token_accuracy": convergence.token_accuracy}.get(metric)
  if score is None:
    raise ValueError(f"metric must be one of {sorted(sweep.METRICS)}, got {metric!r}")
  rng = np.random.default_rng([seed, 3])
  by_row: Dict[int, List[int]] = {}
  for size in spec.test_sizes:
    by_row.setdefault(sweep.test_row_len(spec.name, size), []).append(int(size))
  out = {}
  for row_len, sizes in sorted(by_row.items()):
    chunk = max(1, 8192 // row_len)
    for size in sizes:
      batch = convergence.task_batch(spec.name, rng, batch_size=examples, row_len=row_len,
                                     min_size=size, max_size=size, train_len=train_len,
                                     max_position=max_position, sizes=[size] * examples)
      out[size] = float(np.mean(score(model, batch, chunk=chunk)))
  return out


def chance_level(spec: sweep.TaskSpec, *, metric: str = "exact_match", examples: int = 64,
                 seed: int = 0) -> Optional[float]:
  """The accuracy of uniform guessing over the task's answer alphabet, out of distribution.

  The alphabet is every scored answer byte of ``examples`` generated examples per OOD size; a
  uniform guesser gets a byte right with probability ``1 / |alphabet|``, so its per-token
  accuracy is that and its exact match the mean over examples of ``(1 / |alphabet|) ** n``
  (``n`` scored bytes). A verdict on two variants both at or below this level is "not
  measurable (floor)".

  Args:
    spec: the task.
    metric: ``"exact_match"`` or ``"token_accuracy"``.
    examples: generated examples per OOD size.
    seed: their seed.

  Returns:
    The chance level (``None`` when the task has no OOD size).
  """
  if metric not in ("exact_match", "token_accuracy"):
    raise ValueError(f"metric must be one of {sorted(sweep.METRICS)}, got {metric!r}")
  from pejax import data as data_lib  # pylint: disable=g-import-not-at-top
  task = data_lib.synthetic.get_task(spec.name)
  rng = np.random.default_rng([seed, 7])
  alphabet, lengths = set(), []
  for size in spec.ood_sizes:
    for _ in range(examples):
      example = task.generate(rng, int(size))
      scored = example.scored or [True] * len(example.answer)
      answer = [b for b, keep in zip(example.answer, scored) if keep]
      alphabet.update(answer)
      lengths.append(len(answer))
  if not lengths:
    return None
  guess = 1.0 / max(1, len(alphabet))
  if metric == "token_accuracy":
    return guess
  return float(np.mean([guess ** n for n in lengths]))


def evaluate(result: convergence.FitResult, config: ml_collections.ConfigDict, spec: sweep.TaskSpec,
             settings: sweep.Settings, *, randomized: bool) -> Dict[str, Dict[str, float]]:
  """Accuracy by size under each position protocol (cached in the model's directory)."""
  train_len = convergence.row_len_for(spec.name, spec.train_max)
  key = eval_key(result, spec, settings, randomized=randomized)
  protocols = key["protocols"]

  def compute():
    model = convergence.load_model(result, config)
    return {name: {str(k): v for k, v in accuracy_by_size(
        model, spec, examples=settings.examples, seed=int(config.seed) + 1000,
        train_len=train_len, max_position=m, metric=settings.metric).items()}
        for name, m in protocols.items()}

  return result_cache.cached(pathlib.Path(result.run_dir) / convergence.EVAL_FILE, key, compute)


def eval_key(result: convergence.FitResult, spec: sweep.TaskSpec, settings: sweep.Settings, *,
             randomized: bool) -> Dict[str, Any]:
  """What the test accuracies of one trained model depend on (the key of its ``eval.json``)."""
  protocols = {"arange": None}
  if randomized:
    protocols = {"sampled": settings.position_range_for(spec), "arange": None}
  key = {"sizes": list(spec.test_sizes), "examples": settings.examples,
         "protocols": protocols, "steps": result.steps, "version": 1}
  if settings.metric != "exact_match":  # (Exact-match records written before stay valid.)
    key["metric"] = settings.metric
  return key


def recorded_evals(result: convergence.FitResult, spec: sweep.TaskSpec, settings: sweep.Settings, *,
                   randomized: bool) -> Optional[Dict[str, Dict[str, float]]]:
  """The accuracies :func:`evaluate` stored for this model under these settings, else ``None``
  (evaluates nothing)."""
  return result_cache.cached_value(pathlib.Path(result.run_dir) / convergence.EVAL_FILE,
                                   eval_key(result, spec, settings, randomized=randomized))


def reported_protocol(evals: Mapping[str, Any]) -> str:
  """The position protocol a study reports: ``"sampled"`` where it was tested (a randomized
  variant), else ``"arange"`` (``0..k-1``)."""
  return "sampled" if "sampled" in evals else "arange"


def aggregate(acc: Mapping[Any, float], spec: sweep.TaskSpec) -> Dict[str, Optional[float]]:
  """OOD mean and bands (sizes in multiples of the largest training size) of one seed."""
  by_size = {int(k): float(v) for k, v in acc.items()}

  def mean(pred):
    values = [v for s, v in by_size.items() if pred(s)]
    return float(np.mean(values)) if values else None

  m = spec.train_max
  return {"test_in_dist": mean(lambda s: s <= m), "ood": mean(lambda s: s > m),
          "ood_2x": mean(lambda s: m < s <= 2 * m), "ood_far": mean(lambda s: s > 2 * m)}
