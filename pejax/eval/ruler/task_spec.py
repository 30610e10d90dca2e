"""What a RULER task is: its metric, its options, and how it builds a prompt of a given size.

Each task family (needle in a haystack, variable tracking, common words, frequent words) has a
module with two functions, which a :class:`TaskSpec` holds:

* ``check_options(options) -> options``: validates the merged options (defaults overridden by
  the caller's), raising ``ValueError`` naming the option and the value;
* ``make_builder(entropy, *, length, options, model_template, count) -> (build, min_units)``:
  draws the example's content (keys, values, answers) from ``entropy`` and returns
  ``build(n) -> Draft``, the prompt with haystack size ``n``, deterministic in ``n``, and the
  smallest ``n`` allowed. :func:`pejax.eval.ruler.length_fit.fit_to_length` then picks ``n``.

Randomness comes only from ``entropy`` (seed, index and a CRC of the task and its options), through
:func:`rng_for`: one stream for the content, one per haystack size for the positions.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

# The argument of a model (chat) template that receives the task's prompt, as in RULER's
# scripts/data/template.py; the answer prefix follows the filled template.
TASK_TEMPLATE_FIELD = "{task_template}"

METRICS = ("all", "part")


@dataclasses.dataclass(frozen=True)
class Draft:
  """A prompt built at one haystack size, before its tokens are counted.

  Attributes:
    input: the whole prompt, ending with ``answer_prefix``.
    answer_prefix: the part of the prompt that starts the answer.
    answers: the reference answers.
    metadata: task-specific facts (plain Python values).
  """

  input: str
  answer_prefix: str
  answers: Tuple[str, ...]
  metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """One RULER task: a family, its option defaults, metric and generation budget.

  Attributes:
    name: the task name (a key of ``TASKS``).
    family: RULER's generator script it follows: ``"niah"``, ``"variable_tracking"``,
      ``"common_words_extraction"`` or ``"freq_words_extraction"``.
    ruler_name: the RULER task it reproduces (``scripts/synthetic.yaml``).
    description: one line.
    metric: ``"all"`` (RULER's ``string_match_all``: the fraction of answers found) or
      ``"part"`` (``string_match_part``: 1 if any answer is found).
    tokens_to_generate: RULER's generation budget for the task (RULER's ``max_seq_length`` is
      the prompt plus this).
    options: the default task options, ``(name, value)`` pairs.
    check_options: the family's option validation.
    make_builder: the family's prompt builder factory.
  """

  name: str
  family: str
  ruler_name: str
  description: str
  metric: str
  tokens_to_generate: int
  options: Tuple[Tuple[str, Any], ...]
  check_options: Callable[[Dict[str, Any]], Dict[str, Any]] = dataclasses.field(
      compare=False, repr=False)
  make_builder: Callable[..., Tuple[Callable[[int], Draft], int]] = dataclasses.field(
      compare=False, repr=False)

  def __post_init__(self):
    if self.metric not in METRICS:
      raise ValueError(f"metric must be one of {list(METRICS)}, got {self.metric!r}")

  @property
  def default_options(self) -> Dict[str, Any]:
    """The default task options.

    Returns:
      A new ``{name: value}`` dict.
    """
    return dict(self.options)

  def resolve_options(self, overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """The defaults overridden by ``overrides``, validated.

    Args:
      overrides: option names and values given by the caller.

    Returns:
      Every option of the task with its value.

    Raises:
      ValueError: naming an unknown option (with the closest known one) or a bad value.
    """
    options = self.default_options
    for name, value in overrides.items():
      if name not in options:
        raise ValueError(f"unknown option {name!r} for task {self.name!r}"
                         f"{did_you_mean(name, options)}; its options are {sorted(options)}")
      options[name] = value
    return self.check_options(options)


def did_you_mean(name: str, choices: Sequence[str]) -> str:
  """``"; did you mean 'x'?"`` for the closest of ``choices``, or ``""`` when none is close.

  Args:
    name: the misspelt name.
    choices: the valid names.

  Returns:
    The suggestion, to append to an error message.
  """
  close = difflib.get_close_matches(str(name), list(choices), n=1)
  return f"; did you mean {close[0]!r}?" if close else ""


def check_int(name: str, value: Any, *, minimum: int) -> int:
  """``value`` as an ``int`` if it is an integer (not a bool) ``>= minimum``.

  Args:
    name: the argument's name, for the message.
    value: the value received.
    minimum: the smallest value allowed.

  Returns:
    ``int(value)``.

  Raises:
    ValueError: naming ``name`` and ``value`` otherwise.
  """
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
    raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
  return int(value)


def check_optional_int(name: str, value: Any, *, minimum: int) -> Optional[int]:
  """``None``, or ``value`` checked by :func:`check_int`.

  Args:
    name: the argument's name, for the message.
    value: the value received.
    minimum: the smallest value allowed.

  Returns:
    ``None`` or ``int(value)``.
  """
  return None if value is None else check_int(name, value, minimum=minimum)


def check_float_above(name: str, value: Any, *, bound: float) -> float:
  """``value`` as a ``float`` if it is a finite real number (not a bool) ``> bound``.

  Args:
    name: the argument's name, for the message.
    value: the value received.
    bound: the exclusive lower bound.

  Returns:
    ``float(value)``.

  Raises:
    ValueError: naming ``name`` and ``value`` otherwise.
  """
  if (isinstance(value, bool) or not isinstance(value, numbers.Real)
      or not math.isfinite(value) or value <= bound):
    raise ValueError(f"{name} must be a finite number > {bound}, got {value!r}")
  return float(value)


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
  """``value`` if it is one of ``choices``.

  Args:
    name: the argument's name, for the message.
    value: the value received.
    choices: the allowed values.

  Returns:
    ``value``.

  Raises:
    ValueError: naming ``name``, the value and the choices otherwise.
  """
  if value not in choices:
    raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}"
                     f"{did_you_mean(value, choices) if isinstance(value, str) else ''}")
  return value


def rng_for(entropy: Sequence[int], *stream: int) -> np.random.Generator:
  """A generator seeded by ``entropy`` and a stream id (same arguments, same numbers).

  Args:
    entropy: non-negative integers naming the example (seed, index, task CRC).
    *stream: non-negative integers naming the stream (``0``: the content; ``1, n``: the
      positions at haystack size ``n``).

  Returns:
    A fresh ``numpy.random.Generator`` (PCG64).
  """
  return np.random.default_rng([*entropy, *stream])


def apply_model_template(model_template: str, task_text: str) -> str:
  """``model_template`` with ``{task_template}`` replaced by ``task_text``.

  Plain replacement, not ``str.format``: braces elsewhere in a chat template are kept.

  Args:
    model_template: a template holding ``{task_template}`` once (``"{task_template}"`` is
      RULER's ``base``).
    task_text: the task's prompt before its answer prefix.

  Returns:
    The filled template.
  """
  return model_template.replace(TASK_TEMPLATE_FIELD, task_text)
