"""RULER's exact-match scorers: the fraction of reference answers found in a prediction.

* ``string_match_all`` (every RULER synthetic task): the fraction of the references that occur
  in the prediction, as case-insensitive substrings;
* ``string_match_part`` (RULER's QA tasks): 1 if any reference occurs, else 0.

RULER averages these over examples and reports percentages; pejax returns fractions in
``[0, 1]``.

References:
  Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context Language
  Models?": https://arxiv.org/abs/2404.06654 (NVIDIA/RULER, scripts/eval/synthetic/constants.py).
"""

from __future__ import annotations

import collections
from typing import Any, Dict, List, Sequence, Tuple

from pejax.eval.ruler import tasks as tasks_lib
from pejax.eval.ruler.example import Example


def _check_text(name: str, value: Any) -> str:
  if not isinstance(value, str):
    raise ValueError(f"{name} must be a str, got {type(value).__name__}")
  return value


def _check_answers(answers: Any) -> Tuple[str, ...]:
  if isinstance(answers, str) or not isinstance(answers, Sequence) or not answers:
    raise ValueError("answers must be a non-empty sequence of strings (a list or tuple), got "
                     f"{answers!r}")
  return tuple(_check_text("answers[i]", a) for a in answers)


def string_match_all(prediction: str, answers: Sequence[str]) -> float:
  """The fraction of ``answers`` that occur in ``prediction``, ignoring case.

  Args:
    prediction: the model's output.
    answers: the reference answers (non-empty).

  Returns:
    A score in ``[0, 1]``.

  Raises:
    ValueError: if ``prediction`` is not a ``str`` or ``answers`` not a non-empty sequence of
      ``str``.
  """
  prediction = _check_text("prediction", prediction).lower()
  answers = _check_answers(answers)
  return sum(a.lower() in prediction for a in answers) / len(answers)


def string_match_part(prediction: str, answers: Sequence[str]) -> float:
  """1 if any of ``answers`` occurs in ``prediction`` (ignoring case), else 0.

  Args:
    prediction: the model's output.
    answers: the reference answers (non-empty).

  Returns:
    ``1.0`` or ``0.0``.

  Raises:
    ValueError: if ``prediction`` is not a ``str`` or ``answers`` not a non-empty sequence of
      ``str``.
  """
  prediction = _check_text("prediction", prediction).lower()
  answers = _check_answers(answers)
  return float(any(a.lower() in prediction for a in answers))


_METRICS = {"all": string_match_all, "part": string_match_part}


def score(task: str, prediction: str, answers: Sequence[str]) -> float:
  """One prediction's score under ``task``'s metric.

  Args:
    task: a task name (its metric is ``TASKS[task].metric``).
    prediction: the model's output (the continuation of the example's ``input``).
    answers: the example's reference answers.

  Returns:
    A score in ``[0, 1]``.

  Raises:
    ValueError: for an unknown task or malformed arguments.
  """
  return _METRICS[tasks_lib.get_task(task).metric](prediction, answers)


def score_examples(examples: Sequence[Example], predictions: Sequence[str]) -> Dict[str, float]:
  """The mean score per task of ``predictions`` for ``examples``.

  Args:
    examples: generated examples ``[N]``, of one or several tasks.
    predictions: the model's outputs ``[N]``, in the same order.

  Returns:
    ``{task: mean score in [0, 1]}`` for each task present, in order of first appearance.

  Raises:
    ValueError: if the two sequences differ in length, are empty, or hold wrong types.
  """
  if isinstance(predictions, str):
    raise ValueError("predictions must be a sequence of strings, got a str")
  if len(examples) != len(predictions):
    raise ValueError(f"predictions must have one entry per example ({len(examples)}), got "
                     f"{len(predictions)}")
  if not examples:
    raise ValueError("examples must not be empty, got 0")
  scores: Dict[str, List[float]] = collections.defaultdict(list)
  for example, prediction in zip(examples, predictions):
    if not isinstance(example, Example):
      raise ValueError(f"examples must hold Example objects, got {type(example).__name__}")
    scores[example.task].append(score(example.task, prediction, example.answers))
  return {task: sum(values) / len(values) for task, values in scores.items()}
