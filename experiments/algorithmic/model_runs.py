"""Training and scoring every model of an algorithmic sweep.

For every (task, variant, seed): train until held-out in-distribution exact match reaches the
fit threshold, or a step cap (:func:`experiments.algorithmic.convergence.train_to_fit`; cached
on disk, so a killed study resumes at the next model), with one second run from scratch and a
longer cap (``Settings.rescue_steps``) for a model that did not fit; then score it at every test
size (:mod:`experiments.algorithmic.scoring`). With ``Settings.batched`` (by default on a GPU or
TPU, not on CPU) the seeds of a (task, variant) train as one program
(:mod:`experiments.algorithmic.batched_fit`), and so do their second runs.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Callable, Dict, List, Optional

import ml_collections

from experiments.algorithmic import batched_fit
from experiments.algorithmic import convergence
from experiments.algorithmic import scoring
from experiments.algorithmic import sweep
from experiments.study import table_cells


@dataclasses.dataclass
class Outcome:
  """One trained and evaluated model.

  ``fit`` is the run that was evaluated; ``first`` the run within the study's cap that did not
  fit, when a second run with the longer cap replaced it (``None`` otherwise).
  """

  task: str
  variant: str
  seed: int
  fit: convergence.FitResult
  evals: Dict[str, Dict[str, float]]
  protocol: str
  aggregate: Dict[str, Optional[float]]
  first: Optional[convergence.FitResult] = None

  @property
  def train_seconds(self) -> float:
    return self.fit.train_seconds + (self.first.train_seconds if self.first else 0.0)

  def record(self) -> Dict[str, Any]:
    return {"seed": self.seed, "fit": self.fit.fit, "in_dist": self.fit.in_dist,
            "best_in_dist": self.fit.best_in_dist, "steps": self.fit.steps,
            "steps_to_fit": self.fit.steps_to_fit, "second_run": self.first is not None,
            **self.aggregate}


def model_order(base: ml_collections.ConfigDict, settings: sweep.Settings, *, shard: tuple = ()
                ) -> List[tuple]:
  """``(seed, spec, variant, config, label)`` of every model, seed-major (a partial run has
  seed 0 first), or of one shard's (``(index, count)``: every ``count``-th from ``index``)."""
  order = [(seed, spec, variant) for seed in settings.seeds
           for spec in settings.tasks for variant in settings.variants]
  if shard:
    order = order[shard[0]::shard[1]]
  return [(seed, spec, variant,
           sweep.variant_config(base, variant=variant, seed=seed,
                                max_position=settings.position_range_for(spec)),
           f"{spec.name}-{variant.replace('+', '_')}-s{seed}") for seed, spec, variant in order]


def fit_arguments(settings: sweep.Settings, spec: sweep.TaskSpec, randomized: bool) -> Dict[str,
                                                                                            Any]:
  """The task arguments of :func:`convergence.train_to_fit` (and :func:`convergence.fit_key`)."""
  return {"task": spec.name, "train_sizes": (spec.train_min, spec.train_max),
          "randomized": settings.position_range_for(spec) if randomized else None}


def run_models(base: ml_collections.ConfigDict, settings: sweep.Settings, *,
               runs_dir: pathlib.Path, log: Callable[[str], None] = print,
               shard: tuple = (), after_model: Optional[Callable[..., None]] = None
               ) -> Dict[tuple, Outcome]:
  """Trains (or reuses) and evaluates every (task, variant, seed).

  With ``settings.trains_together`` (``Settings.batched``: by default on an accelerator) the
  seeds of one (task, variant) that still need training are trained as one program (:func:`batched_fit.train_to_fit_many`), and so are their second
  runs; one model left to train is trained alone. The models are then (task, variant)-major:
  the seeds of a variant finish together.

  Args:
    base: the study's base experiment config.
    settings: the sweep.
    runs_dir: where the trained models live.
    log: one line per model.
    shard: ``(index, count)``: only the models whose position in the seed-major order is
      ``index`` modulo ``count`` (``StudyOptions.shard``); ``()``: every model.
    after_model: optional ``after_model(outcome, config, spec)``, called once per model right
      after it is evaluated: measurements that need the model's weights, which are not kept in
      git, so that a shard trained on another machine (or in an earlier session) has taken
      them before its weights are gone (e.g. the flip-flop glitch rates of ``content_tasks``,
      cached beside the model's records).

  Returns:
    ``(task, variant, seed) -> Outcome`` (the shard's models only, with ``shard``).
  """
  order = model_order(base, settings, shard=shard)
  n = len(order)
  started = time.time()
  out = {}
  done = 0
  for group in _groups(order, batched=settings.trains_together):
    firsts = _train(group, settings, settings.recipe, runs_dir=runs_dir, log=log)
    second_runs = {}
    if settings.rescue_recipe is not None:
      rescue = [(model, fit) for model, fit in zip(group, firsts)
                if not fit.fit and model[1].second_run]
      for (_, _, _, _, label), fit in rescue:
        log(f"{label}: did not fit within {settings.recipe.max_steps} steps (best "
            f"{fit.best_in_dist:.3f}); a second run from scratch with a cap of "
            f"{settings.rescue_steps}")
      second_runs = dict(zip((m[-1] for m, _ in rescue), _train(
          [m for m, _ in rescue], settings, settings.rescue_recipe, runs_dir=runs_dir, log=log,
          suffix=f"-cap{settings.rescue_steps}")))
    for (seed, spec, variant, config, label), first in zip(group, firsts):
      fit = second_runs.get(label, first)
      first = first if label in second_runs else None
      randomized = sweep.parse_variant(variant)[1]
      evals = scoring.evaluate(fit, config, spec, settings, randomized=randomized)
      protocol = scoring.reported_protocol(evals)
      agg = scoring.aggregate(evals[protocol], spec)
      outcome = Outcome(spec.name, variant, seed, fit, evals, protocol, agg, first=first)
      out[(spec.name, variant, seed)] = outcome
      if after_model is not None:
        after_model(outcome, config, spec)
      done += 1
      how = "reused" if fit.reused else f"{outcome.train_seconds:.0f}s"
      status = (f"fit at step {fit.steps_to_fit}" if fit.fit else
                f"did not fit: best {fit.best_in_dist:.3f} at step {fit.best_step} of "
                f"{fit.steps}") + (" (second run)" if first else "")
      log(f"[{done}/{n}] {spec.name} {variant} seed {seed}: {status}, OOD "
          f"{table_cells.fmt(agg['ood'], 3)} ({how}, {(time.time() - started) / 60:.1f} "
          "min so far)")
  return out


def _groups(order: List[tuple], *, batched: bool) -> List[List[tuple]]:
  """The models of ``order`` in training groups: one per (task, variant), in order of first
  appearance, when ``batched``; else one group per model, in order."""
  if not batched:
    return [[model] for model in order]
  groups: Dict[tuple, List[tuple]] = {}
  for model in order:
    groups.setdefault((model[1].name, model[2]), []).append(model)
  return list(groups.values())


def _train(group: List[tuple], settings: sweep.Settings, recipe: convergence.Recipe, *,
           runs_dir: pathlib.Path, log: Callable[[str], None], suffix: str = ""
           ) -> List[convergence.FitResult]:
  """The runs of ``group`` (models of one task and variant) with ``recipe``: reused when
  recorded; those left to train as one program when there are several, else alone."""
  if not group:
    return []
  _, spec, variant, _, _ = group[0]
  arguments = fit_arguments(settings, spec, sweep.parse_variant(variant)[1])
  labels = [label + suffix for *_, label in group]
  configs = [config for _, _, _, config, _ in group]
  pending = [convergence.recorded(runs_dir, convergence.fit_key(c, recipe, **arguments),
                                  label=label).result is None
             for c, label in zip(configs, labels)]
  if settings.trains_together and sum(pending) > 1:
    return batched_fit.train_to_fit_many(configs, recipe, runs_dir=runs_dir, labels=labels,
                                         log=log, **arguments)
  return [convergence.train_to_fit(c, recipe, runs_dir=runs_dir, label=label, log=log,
                                   **arguments) for c, label in zip(configs, labels)]
