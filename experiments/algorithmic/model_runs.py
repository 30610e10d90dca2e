"""Training and scoring every model of an algorithmic sweep, seed-major.

For every (task, variant, seed): train until held-out in-distribution exact match reaches the
fit threshold, or a step cap (:func:`experiments.algorithmic.convergence.train_to_fit`; cached
on disk, so a killed study resumes at the next model), with one second run from scratch and a
longer cap (``Settings.rescue_steps``) for a model that did not fit; then score it at every test
size (:mod:`experiments.algorithmic.scoring`).
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Callable, Dict, List, Optional

import ml_collections

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
                                max_position=settings.position_range),
           f"{spec.name}-{variant.replace('+', '_')}-s{seed}") for seed, spec, variant in order]


def fit_arguments(settings: sweep.Settings, spec: sweep.TaskSpec, randomized: bool) -> Dict[str,
                                                                                            Any]:
  """The task arguments of :func:`convergence.train_to_fit` (and :func:`convergence.fit_key`)."""
  return {"task": spec.name, "train_sizes": (spec.train_min, spec.train_max),
          "randomized": settings.position_range if randomized else None}


def run_models(base: ml_collections.ConfigDict, settings: sweep.Settings, *,
               runs_dir: pathlib.Path, log: Callable[[str], None] = print,
               shard: tuple = ()) -> Dict[tuple, Outcome]:
  """Trains (or reuses) and evaluates every (task, variant, seed).

  Args:
    base: the study's base experiment config.
    settings: the sweep.
    runs_dir: where the trained models live.
    log: one line per model.
    shard: ``(index, count)``: only the models whose position in the seed-major order is
      ``index`` modulo ``count`` (``StudyOptions.shard``); ``()``: every model.

  Returns:
    ``(task, variant, seed) -> Outcome`` (the shard's models only, with ``shard``).
  """
  order = model_order(base, settings, shard=shard)
  n = len(order)
  started = time.time()
  out = {}
  done = 0
  for seed, spec, variant, config, label in order:
    randomized = sweep.parse_variant(variant)[1]

    def train(recipe, label=label, config=config, spec=spec, randomized=randomized):
      return convergence.train_to_fit(
          config, recipe, runs_dir=runs_dir, label=label, log=log,
          **fit_arguments(settings, spec, randomized))

    fit, first = train(settings.recipe), None
    if not fit.fit and settings.rescue_recipe is not None:
      log(f"{label}: did not fit within {settings.recipe.max_steps} steps (best "
          f"{fit.best_in_dist:.3f}); a second run from scratch with a cap of "
          f"{settings.rescue_steps}")
      first, fit = fit, train(settings.rescue_recipe,
                              label=f"{label}-cap{settings.rescue_steps}")
    evals = scoring.evaluate(fit, config, spec, settings, randomized=randomized)
    protocol = scoring.reported_protocol(evals)
    agg = scoring.aggregate(evals[protocol], spec)
    outcome = Outcome(spec.name, variant, seed, fit, evals, protocol, agg, first=first)
    out[(spec.name, variant, seed)] = outcome
    done += 1
    how = "reused" if fit.reused else f"{outcome.train_seconds:.0f}s"
    status = (f"fit at step {fit.steps_to_fit}" if fit.fit else
              f"did not fit: best {fit.best_in_dist:.3f} at step {fit.best_step} of "
              f"{fit.steps}") + (" (second run)" if first else "")
    log(f"[{done}/{n}] {spec.name} {variant} seed {seed}: {status}, OOD "
        f"{table_cells.fmt(agg['ood'], 3)} ({how}, {(time.time() - started) / 60:.1f} "
        "min so far)")
  return out
