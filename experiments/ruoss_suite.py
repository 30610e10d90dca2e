"""``python -m experiments.ruoss_suite [--quick]``: the Ruoss et al. 2023 tasks, with and without
randomized positions.

Protocol (Ruoss et al. 2023, on the tasks of Delétang et al. 2023): train on inputs of length
1..40, test on longer inputs (the paper: 41..500; here a grid up to 500, or less in quick mode),
report the accuracy per length and its mean over the test lengths. As in the paper's code, each
training batch draws one length (uniform over the training lengths), so a short batch costs
less than a long one (``Recipe.one_size_per_batch``). Each PE is trained as is and
with randomized positions (sorted samples of ``[0, max_position)``, the paper's method; at test
time positions keep being sampled). Every model trains until it fits in-distribution (held-out
exact match >= 0.99) or a step cap (:mod:`experiments.algorithmic.convergence`).

Tasks (:mod:`pejax.data.ruoss_tasks`): reverse_string, duplicate_string, missing_duplicate,
odds_first, binary_addition, bucket_sort (context-sensitive / context-free), parity,
cycle_navigation (regular), stack_manipulation (context-free). The test metric is the paper's:
per-token accuracy of the answer (``Settings.metric="token_accuracy"``; with whole-answer exact
match every PE scores ~0 on answers of 50-500 bytes and the comparison measures nothing). Our
causal decoder predicts each answer byte from the correct earlier ones (teacher forcing), the
paper's encoder all at once, so our numbers are at least as high as the paper's setup would
give for the same model. Most answers are binary strings, so guessing scores about 0.5 per
byte. A model still counts as fit only at >= 0.99 held-out exact match.

Published expectation: randomized positions improve the test accuracy of every PE they are
combined with, by 12.0% on average over the 15 tasks (Ruoss et al., Table 1). Checked per PE on
the suite mean over tasks, beyond the seed spread.

References:
  Ruoss et al., "Randomized Positional Encodings Boost Length Generalization of Transformers",
  ACL 2023, arXiv:2305.16843. Delétang et al., "Neural Networks and the Chomsky Hierarchy",
  ICLR 2023, arXiv:2207.02098.
"""

from __future__ import annotations

# Run as a program: re-execute with the allocator settings before the imports below, not
# after them (pejax.runtime_env; importing it loads nothing else).
from pejax import runtime_env  # pylint: disable=wrong-import-position
runtime_env.apply_when_main(__name__)
# pylint: disable=wrong-import-position

from typing import Any, Callable, Dict, List, Optional

import ml_collections
import numpy as np

from experiments.algorithmic import convergence
from experiments.algorithmic import scoring
from experiments.algorithmic import seed_comparison
from experiments.algorithmic import seed_summary
from experiments.algorithmic import suite_study
from experiments.algorithmic import sweep
from experiments.study import expectations
from experiments.study import pe_capabilities
from experiments.study import study_options
from experiments.study import table_cells

STUDY = "ruoss_suite"
SELECTS_PES = True  # --pes runs a subset of the PE variants (partial runs).
TASKS = ("reverse_string", "duplicate_string", "missing_duplicate", "odds_first",
         "binary_addition", "bucket_sort", "parity", "cycle_navigation", "stack_manipulation")
QUICK_TASKS = ("reverse_string", "parity")
TRAIN_MAX = 40
TEST_SIZES = (50, 60, 80, 100, 150, 200, 300, 400, 500)
QUICK_TRAIN_MAX = 8
QUICK_TEST_SIZES = (12, 16, 24, 32)
METRIC = "token_accuracy"  # Ruoss et al. 2023 score per token (sweep.METRICS).


def base_config(options: study_options.StudyOptions) -> ml_collections.ConfigDict:
  """The length-generalization study's decoder, with the user's overrides."""
  from experiments import length_generalization  # pylint: disable=g-import-not-at-top
  return length_generalization.base_config(options)


def _spec(task: str, train_max: int, test_sizes: tuple) -> sweep.TaskSpec:
  from pejax.data import synthetic  # pylint: disable=g-import-not-at-top
  lo = synthetic.get_task(task).size_range(1024)[0]
  sizes = tuple(range(lo, train_max + 1, max(1, train_max // 10))) + tuple(test_sizes)
  return sweep.TaskSpec(task, train_max, tuple(sorted(set(sizes))), train_min=lo)


def settings_for(options: study_options.StudyOptions,
                 config: ml_collections.ConfigDict) -> sweep.Settings:
  """Quick: 2 tasks, rope with and without randomized positions, 1 seed, sizes to 32, cap 1000.
  Full: 9 tasks, every PE with and without, 3 seeds, train <= 40, test to 500, cap 6000 (a
  second run with cap 12000 for a model that did not fit)."""
  if options.quick:
    variants = tuple(v for v in ("rope", "rope" + sweep.RANDOMIZED)
                     if sweep.parse_variant(v)[0] in pe_capabilities.runnable_pes(config))
    return sweep.Settings(
        tasks=tuple(_spec(t, QUICK_TRAIN_MAX, QUICK_TEST_SIZES) for t in QUICK_TASKS),
        variants=variants, seeds=tuple(options.seed_list((0,))),
        recipe=convergence.Recipe(max_steps=options.steps or 1000, one_size_per_batch=True),
        examples=16, metric=METRIC)
  recipe = convergence.Recipe(max_steps=options.steps or 6000, one_size_per_batch=True)
  return sweep.Settings(
      tasks=tuple(_spec(t, TRAIN_MAX, TEST_SIZES) for t in TASKS),
      variants=sweep.all_variants(config), seeds=tuple(options.seed_list((0, 1, 2))),
      recipe=recipe, examples=32, rescue_steps=sweep.second_run_cap(recipe.max_steps),
      metric=METRIC)


def verdicts(summary, settings: sweep.Settings, outcomes) -> List[expectations.Verdict]:
  """Per PE: its randomized variant's suite-mean OOD beats the plain one's beyond the seeds."""
  out = []
  chance = float(np.mean([scoring.chance_level(spec, metric=settings.metric) or 0.0
                          for spec in settings.tasks])) if settings.tasks else 0.0
  for v in settings.variants:
    plain, randomized = sweep.parse_variant(v)
    if not randomized or plain not in settings.variants:
      continue
    out.append(seed_comparison.spread_verdict(
        f"randomized positions improve {plain}'s mean test accuracy over the suite (Ruoss et "
        "al. 2023: +12.0% on average)",
        {v: seed_summary.suite_mean(settings, outcomes, v)},
        {plain: seed_summary.suite_mean(settings, outcomes, plain)},
        f"every seed of {v} above every seed of {plain} (mean OOD {settings.metric_label} over "
        f"the {len(settings.tasks)} tasks, each model as measured, fit or not) and medians >= "
        f"{seed_comparison.MARGIN:g} apart; both at or below the tasks' mean chance level "
        f"({table_cells.fmt(chance, 3)}): not measurable (floor)", floor=chance))
  return out


def run(options: study_options.StudyOptions, *, settings: Optional[sweep.Settings] = None,
        log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Trains, tests and reports the suite (see the module docstring).

  Args:
    options: flags (or their Python equivalent).
    settings: the sweep; default :func:`settings_for` ``options`` (tests pass tiny ones).
    log: progress lines.

  Returns:
    The results dict written to ``results.json``.
  """
  base = base_config(options)
  settings = settings or settings_for(options, base)
  return suite_study.run_study(
      options, study=STUDY, title="Ruoss et al. 2023 tasks, with and without randomized "
      "positions", base=base, settings=settings, family="Ruoss tasks", verdicts=verdicts,
      log=log)


if __name__ == "__main__":
  study_options.run_as_launch(STUDY)
