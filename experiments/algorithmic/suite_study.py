"""Running one algorithmic study: every model, or one shard, or its progress; then the report.

Each algorithmic study (``length_generalization``, ``ruoss_suite``, ``kazemnejad_suite``,
``content_tasks``) is a :class:`~experiments.algorithmic.sweep.Settings` plus its published
claims, and calls :func:`run_study`.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time
from typing import Any, Callable, Dict, List, Optional

import ml_collections

from experiments.algorithmic import model_runs
from experiments.algorithmic import report_sections
from experiments.algorithmic import seed_summary
from experiments.algorithmic import sweep
from experiments.algorithmic import sweep_progress
from experiments.study import expectations
from experiments.study import markdown_report
from experiments.study import study_options


def _usable_cores() -> int:
  if hasattr(os, "sched_getaffinity"):
    return max(1, len(os.sched_getaffinity(0)))
  return max(1, os.cpu_count() or 1)


def run_progress(base: ml_collections.ConfigDict, settings: sweep.Settings, *, study: str,
                 shard: tuple, runs_dir: pathlib.Path, log: Callable[[str], None] = print
                 ) -> Dict[str, Any]:
  """``--progress``: prints how far the run is (:func:`progress_lines`); trains nothing."""
  models = sweep_progress.model_progress(base, settings, runs_dir=runs_dir, shard=shard)
  summary = sweep_progress.progress_summary(models, cores=_usable_cores())
  for line in sweep_progress.progress_lines(study, summary, runs_dir,
                                            metric_label=settings.metric_label):
    log(line)
  return summary


def run_shard(base: ml_collections.ConfigDict, settings: sweep.Settings, *, study: str,
              shard: tuple, runs_dir: pathlib.Path, log: Callable[[str], None] = print,
              after_model: Optional[Callable[..., None]] = None) -> Dict[str, Any]:
  """Trains and evaluates one shard's models (``StudyOptions.shard``), with ``after_model``
  (:func:`~experiments.algorithmic.model_runs.run_models`) on each; writes no report.

  Returns:
    ``{"shard": [index, count], "models": number of models of the shard}``.
  """
  outcomes = model_runs.run_models(base, settings, runs_dir=runs_dir, log=log, shard=shard,
                                   after_model=after_model)
  log(f"{study}: shard {shard[0]}/{shard[1]} done, {len(outcomes)} models in {runs_dir}; no "
      "report: the same command without --shard reuses every model and writes it")
  return {"shard": list(shard), "models": len(outcomes)}


def run_without_report(options: study_options.StudyOptions, base: ml_collections.ConfigDict,
                       settings: sweep.Settings, *, study: str, runs_dir: pathlib.Path,
                       log: Callable[[str], None] = print,
                       after_model: Optional[Callable[..., None]] = None
                       ) -> Optional[Dict[str, Any]]:
  """``--progress`` (:func:`run_progress`) or ``--shard`` (:func:`run_shard`): their results;
  ``None`` for a complete run, which trains every model and writes the report."""
  if options.progress:
    return run_progress(base, settings, study=study, shard=options.shard, runs_dir=runs_dir,
                        log=log)
  if options.shard:
    return run_shard(base, settings, study=study, shard=options.shard, runs_dir=runs_dir,
                     log=log, after_model=after_model)
  return None


def run_study(options: study_options.StudyOptions, *, study: str, title: str,
              base: ml_collections.ConfigDict, settings: sweep.Settings, family: str,
              verdicts: Callable[..., List[expectations.Verdict]],
              extra: Optional[Callable[..., Dict[str, Any]]] = None,
              after_model: Optional[Callable[..., None]] = None,
              log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Trains and tests every model of ``settings``, then writes the report of one study.

  Args:
    options: the study's options.
    study: its name (default report directory ``runs/<study>``, models in its ``models/``).
    title: the report title.
    base: the base experiment config.
    settings: the sweep.
    family: the leaderboard column of this study.
    verdicts: ``verdicts(summary, settings, outcomes) -> [Verdict]``.
    extra: optional ``extra(report, summary, settings, outcomes) -> dict`` adding sections
      (called after the common ones) and returning results to store.
    after_model: optional per-model measurement while its weights exist
      (:func:`~experiments.algorithmic.model_runs.run_models`), in shards and complete runs.
    log: progress lines.

  Returns:
    The results written to ``results.json`` (with ``options.shard`` or ``options.progress``:
    :func:`run_without_report`'s).
  """
  started = time.time()
  settings = sweep.select_variants(settings, options.pes)
  if options.batched is not None:  # --config.study.batched=on|off; None keeps the settings'.
    settings = dataclasses.replace(settings, batched=options.batched)
  runs_dir = options.kept_models_dir(study)
  workdir = options.report_dir(study)
  workdir.mkdir(parents=True, exist_ok=True)
  log(f"{study}: {len(settings.tasks)} tasks x {len(settings.variants)} variants x "
      f"{len(settings.seeds)} seeds, to >= {settings.recipe.fit_threshold:g} in-distribution "
      f"or {settings.recipe.max_steps} steps; models in {runs_dir}")
  partial = run_without_report(options, base, settings, study=study, runs_dir=runs_dir, log=log,
                               after_model=after_model)
  if partial is not None:
    return partial
  outcomes = model_runs.run_models(base, settings, runs_dir=runs_dir, log=log,
                                   after_model=after_model)
  summary = seed_summary.summaries(settings, outcomes)
  report = report_sections.report_for(title, study=study, options=options, settings=settings)
  report.started = started  # The header's wall time covers the training.
  for v in verdicts(summary, settings, outcomes):
    report.add_verdict(v)
  board = seed_summary.leaderboard_entry(settings, outcomes)
  trainability = seed_summary.leaderboard_entry(settings, outcomes, view="trainability")
  protocol = seed_summary.leaderboard_entry(settings, outcomes, view="best_seed")
  report.section("Suite mean", (
      f"Mean OOD {settings.metric_label} over the tasks, every seed with the accuracy it "
      "measured (fit or not), median [min-max] over seeds:\n\n")
      + report_sections.markdown_ranking(board, settings.metric_label)
      + "\n\nTrainability view (a task where a seed did not fit counts 0: this mixes "
      "trainability with length generalization), median [min-max] over seeds:\n\n"
      + report_sections.markdown_ranking(trainability, settings.metric_label)
      + "\n\nThe published protocol's view (Ruoss et al. 2023; Delétang et al. 2023): per task "
      f"the best of the {len(settings.seeds)} seed(s), averaged over the tasks (the papers "
      "maximize over 10 seeds and 3 learning rates):\n\n"
      + report_sections.markdown_ranking(protocol, settings.metric_label))
  report_sections.write_common(report, base, settings, outcomes, summary, workdir)
  results = report_sections.results_payload(settings, summary, outcomes)
  if extra is not None:
    results.update(extra(report, summary, settings, outcomes))
  results["leaderboard"] = {family: board}  # The raw view.
  results["leaderboard_trainability"] = {family: trainability}
  results["leaderboard_best_seed"] = {family: protocol}
  results["verdicts"] = [v.to_json() for v in report.verdicts]
  return markdown_report.write_report(report, workdir, results, study=study, log=log)
