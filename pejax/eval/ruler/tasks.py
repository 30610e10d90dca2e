"""The RULER tasks pejax generates: 11 of RULER's 13, none needing downloaded data.

RULER's essay haystack (Paul Graham's essays) and its QA tasks (SQuAD, HotpotQA) need downloads;
the NIAH tasks that use essays here use the noise haystack instead (the ``ruler_name`` says which
RULER task each reproduces), and the QA tasks are left out.

References:
  Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context Language
  Models?": https://arxiv.org/abs/2404.06654 (NVIDIA/RULER, scripts/synthetic.yaml).
"""

from __future__ import annotations

import types
from typing import Any, Mapping, Tuple

from pejax.eval.ruler import common_words
from pejax.eval.ruler import frequent_words
from pejax.eval.ruler import niah
from pejax.eval.ruler import task_spec
from pejax.eval.ruler import variable_tracking


def _niah(name: str, ruler_name: str, description: str, *, key_type: str = "words",
          value_type: str = "numbers", haystack: str = "noise", num_keys: int = 1,
          num_values: int = 1, num_queries: int = 1) -> task_spec.TaskSpec:
  return task_spec.TaskSpec(
      name=name, family="niah", ruler_name=ruler_name, description=description, metric="all",
      tokens_to_generate=128,
      options=(("key_type", key_type), ("value_type", value_type), ("haystack", haystack),
               ("num_keys", num_keys), ("num_values", num_values),
               ("num_queries", num_queries)),
      check_options=niah.check_options, make_builder=niah.make_builder)


def _all_tasks() -> Tuple[task_spec.TaskSpec, ...]:
  return (
      _niah("niah_single_1", "niah_single_1",
            "one needle (word key, 7-digit number) in the noise haystack"),
      _niah("niah_single_words", "niah_single_2 (value: words)",
            "one needle whose value is an adjective-noun word, noise haystack",
            value_type="words"),
      _niah("niah_single_uuids", "niah_single_3 (noise haystack)",
            "one needle whose value is a UUID, noise haystack", value_type="uuids"),
      _niah("niah_multikey_1", "niah_multikey_1 (noise haystack)",
            "four needles with distinct keys, one asked, noise haystack", num_keys=4),
      _niah("niah_multikey_2", "niah_multikey_2",
            "one needle among distractor needles with other word keys (the haystack is needles)",
            haystack="needle"),
      _niah("niah_multikey_3", "niah_multikey_3",
            "one needle among distractor needles, UUID keys and values", key_type="uuids",
            value_type="uuids", haystack="needle"),
      _niah("niah_multivalue", "niah_multivalue (noise haystack)",
            "four needles with one key and four values, all asked, noise haystack",
            num_values=4),
      _niah("niah_multiquery", "niah_multiquery (noise haystack)",
            "four needles with distinct keys, all four asked, noise haystack", num_keys=4,
            num_queries=4),
      task_spec.TaskSpec(
          name="vt", family="variable_tracking", ruler_name="vt",
          description="the variables that a chain of assignments gives one value, noise haystack",
          metric="all", tokens_to_generate=30,
          options=(("num_chains", 1), ("num_hops", 4), ("num_shots", 1),
                   ("shot_haystack_size", 16)),
          check_options=variable_tracking.check_options,
          make_builder=variable_tracking.make_builder),
      task_spec.TaskSpec(
          name="cwe", family="common_words_extraction", ruler_name="cwe",
          description="the 10 most common words of a numbered word list", metric="all",
          tokens_to_generate=120,
          options=(("num_common", 10), ("common_repeats", None), ("uncommon_repeats", None),
                   ("num_shots", 1)),
          check_options=common_words.check_options, make_builder=common_words.make_builder),
      task_spec.TaskSpec(
          name="fwe", family="freq_words_extraction", ruler_name="fwe",
          description="the 3 most frequent coded words of a Zipf-distributed text",
          metric="all", tokens_to_generate=50,
          options=(("alpha", 2.0), ("word_length", 6), ("vocab_size", None)),
          check_options=frequent_words.check_options,
          make_builder=frequent_words.make_builder),
  )


# Task name -> its spec, in RULER's order.
TASKS: Mapping[str, task_spec.TaskSpec] = types.MappingProxyType(
    {spec.name: spec for spec in _all_tasks()})


def task_names() -> Tuple[str, ...]:
  """The task names, in RULER's order.

  Returns:
    The keys of :data:`TASKS`.
  """
  return tuple(TASKS)


def get_task(task: Any) -> task_spec.TaskSpec:
  """The spec of the task named ``task``.

  Args:
    task: a task name.

  Returns:
    ``TASKS[task]``.

  Raises:
    ValueError: naming ``task``, with the closest name, if it is not a task.
  """
  if not isinstance(task, str) or task not in TASKS:
    hint = task_spec.did_you_mean(task, TASKS) if isinstance(task, str) else ""
    raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}{hint}")
  return TASKS[task]
