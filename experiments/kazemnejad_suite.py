"""``python -m experiments.kazemnejad_suite [--quick]``: the NoPE paper's tasks and its
mean-reciprocal-rank summary.

Protocol (Kazemnejad et al. 2023): decoder-only models learn copy, reverse, addition, sorting,
summation and parity from instances up to a length, and are tested on longer instances (their
split: train on the shorter half of the lengths, test on the longer half; here sizes 1..10 and
11..20, addition 1..5 and 6..10 digits per operand). Each model trains until it fits
in-distribution (held-out exact match >= 0.99) or a step cap. The paper summarizes the PEs by
their mean reciprocal rank (MRR) over tasks: on each task the PEs are ranked by OOD accuracy
(rank 1 = best; ties share the better rank) and a PE's MRR is the mean of 1 / rank. Published
(5 PEs): NoPE 0.69, T5 0.55, ALiBi 0.50, RoPE 0.33, absolute (APE) 0.22.

Here the MRR is computed per seed (ranks on each task among the five published PEs: ``none``,
``t5``, ``alibi``, ``rope``, ``sinusoidal`` for APE; each model with the OOD accuracy it
measured, fit or not; a task where no PE of a seed scores above chance ranks nothing), then
summarized over seeds; the MRR among every registered PE is reported too.
Tasks (:mod:`pejax.data`): copy / reverse (lowercase strings), addition (decimal,
most-significant digit first), sort_digits, sum_digits (mod 10), parity (binary).

References:
  Kazemnejad et al., "The Impact of Positional Encoding on Length Generalization in
  Transformers", NeurIPS 2023, arXiv:2305.19466.
"""

from __future__ import annotations

# Run as a program: re-execute with the allocator settings before the imports below, not
# after them (pejax.runtime_env; importing it loads nothing else).
from pejax import runtime_env  # pylint: disable=wrong-import-position
runtime_env.apply_when_main(__name__)
# pylint: disable=wrong-import-position

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import ml_collections

from experiments.algorithmic import convergence
from experiments.algorithmic import seed_comparison
from experiments.algorithmic import scoring
from experiments.algorithmic import suite_study
from experiments.algorithmic import sweep
from experiments.study import expectations
from experiments.study import markdown_report
from experiments.study import pe_capabilities
from experiments.study import seed_statistics
from experiments.study import study_options
from experiments.study import table_cells

STUDY = "kazemnejad_suite"
SELECTS_PES = True  # --pes runs a subset of the PE variants (partial runs).
TASKS = ("copy", "reverse", "addition", "sort_digits", "sum_digits", "parity")
TRAIN_MAX = {"addition": 5}  # Default 10.
PUBLISHED_MRR = {"none": 0.69, "t5": 0.55, "alibi": 0.50, "rope": 0.33, "sinusoidal": 0.22}


def base_config(options: study_options.StudyOptions) -> ml_collections.ConfigDict:
  """The length-generalization study's decoder, with the user's overrides."""
  from experiments import length_generalization  # pylint: disable=g-import-not-at-top
  return length_generalization.base_config(options)


def _spec(task: str, scale: int = 10) -> sweep.TaskSpec:
  m = TRAIN_MAX.get(task, 10) * scale // 10
  return sweep.TaskSpec(task, m, tuple(range(1, 2 * m + 1)))


def settings_for(options: study_options.StudyOptions,
                 config: ml_collections.ConfigDict) -> sweep.Settings:
  """Quick: copy and parity at half size, NoPE / RoPE / sinusoidal, 1 seed, cap 1000.
  Full: the 6 tasks, every PE, 3 seeds, cap 6000 (a second run with cap 12000 for a model that
  did not fit)."""
  runnable = pe_capabilities.runnable_pes(config)
  if options.quick:
    return sweep.Settings(
        tasks=(_spec("copy", 6), _spec("parity", 6)),
        variants=tuple(v for v in ("none", "rope", "sinusoidal") if v in runnable),
        seeds=tuple(options.seed_list((0,))),
        recipe=convergence.Recipe(max_steps=options.steps or 1000), examples=16)
  recipe = convergence.Recipe(max_steps=options.steps or 6000)
  return sweep.Settings(
      tasks=tuple(_spec(t) for t in TASKS), variants=runnable,
      seeds=tuple(options.seed_list((0, 1, 2))),
      recipe=recipe, examples=32, rescue_steps=sweep.second_run_cap(recipe.max_steps))


def reciprocal_ranks(scores: Mapping[str, float]) -> Dict[str, float]:
  """1 / rank of each entry (rank 1 = highest score; ties share the better rank).

  Args:
    scores: name -> score.

  Returns:
    name -> 1 / (1 + number of strictly higher scores).
  """
  return {k: 1.0 / (1 + sum(other > v for other in scores.values()))
          for k, v in scores.items()}


def mrr(settings: sweep.Settings, outcomes, variants: Sequence[str]) -> Dict[str, Any]:
  """variant -> spread over seeds of its mean reciprocal rank over tasks among ``variants``.

  Each model enters with the OOD accuracy it measured, fit or not (issue 45). A task where no
  variant of a seed scores above the task's chance level (:func:`scoring.chance_level`) ranks
  nothing: it is left out of that seed's mean (before, such a task tied every variant at rank 1
  and added 1 / (number of tasks) to every MRR). A seed with no task left has no MRR.
  """
  chance = {spec.name: scoring.chance_level(spec, metric=settings.metric) or 0.0
            for spec in settings.tasks}
  per_seed: Dict[str, List[Optional[float]]] = {v: [] for v in variants}
  for seed in settings.seeds:
    sums = {v: 0.0 for v in variants}
    ranked = 0
    for spec in settings.tasks:
      scores = {v: outcomes[(spec.name, v, seed)].aggregate.get("ood") or 0.0 for v in variants}
      if all(score <= chance[spec.name] for score in scores.values()):
        continue  # At the floor: the task cannot rank the variants.
      ranked += 1
      for v, rr in reciprocal_ranks(scores).items():
        sums[v] += rr
    for v in variants:
      per_seed[v].append(sums[v] / ranked if ranked else None)
  return {v: seed_statistics.spread(values) for v, values in per_seed.items()}


def _published(settings: sweep.Settings) -> List[str]:
  return [v for v in PUBLISHED_MRR if v in settings.variants]


def verdicts(summary, settings: sweep.Settings, outcomes) -> List[expectations.Verdict]:
  """NoPE has the highest MRR of the published five; absolute positions the lowest."""
  five = _published(settings)
  if "none" not in five or len(five) < 2:
    return []
  ranks = mrr(settings, outcomes, five)
  published = ", ".join(f"{v} {PUBLISHED_MRR[v]:.2f}" for v in five)
  out = [seed_comparison.spread_verdict(
      f"NoPE has the highest MRR over the tasks (Kazemnejad et al. 2023: {published})",
      {"none": ranks["none"]}, {v: ranks[v] for v in five if v != "none"},
      "every seed's MRR of none above every seed's MRR of each other PE, medians >= "
      f"{seed_comparison.MARGIN:g} apart")]
  if "sinusoidal" in five:
    out.append(seed_comparison.spread_verdict(
        "absolute positions (APE) have the lowest MRR (Kazemnejad et al. 2023: 0.22)",
        {v: ranks[v] for v in five if v != "sinusoidal"}, {"sinusoidal": ranks["sinusoidal"]},
        "every seed's MRR of each other PE above every seed's MRR of sinusoidal, medians >= "
        f"{seed_comparison.MARGIN:g} apart"))
  return out


def extra(report: markdown_report.Report, summary, settings: sweep.Settings,
          outcomes) -> Dict[str, Any]:
  """The MRR tables: among the published five (with the paper's numbers) and among all PEs."""
  five = _published(settings)
  ranks5 = mrr(settings, outcomes, five) if five else {}
  ranks_all = mrr(settings, outcomes, [v for v in settings.variants
                                       if not sweep.parse_variant(v)[1]])
  report.section("Mean reciprocal rank", "Ranks per task by OOD exact match as measured (fit "
                 "or not; ties share the better rank; a task where no PE of a seed scores above "
                 "chance is left out of that seed's mean), MRR per seed, median [min-max] over "
                 "seeds.")
  if five:
    report.table(["PE", "MRR (measured, among the five)", "MRR (published)"],
                 [[v, table_cells.median_cell(ranks5[v], 2), f"{PUBLISHED_MRR[v]:.2f}"] for v in
                  sorted(five, key=lambda v: -(ranks5[v]["median"] or 0.0))])
  report.table(["PE", "MRR among every PE run"],
               [[v, table_cells.median_cell(s, 2)] for v, s in
                sorted(ranks_all.items(), key=lambda kv: -(kv[1]["median"] or 0.0))])
  return {"mrr_published_five": ranks5, "mrr_all": ranks_all}


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
      options, study=STUDY, title="Kazemnejad et al. 2023 tasks and their MRR summary",
      base=base, settings=settings, family="Kazemnejad tasks", verdicts=verdicts,
      extra=extra, log=log)


if __name__ == "__main__":
  study_options.run_as_launch(STUDY)
