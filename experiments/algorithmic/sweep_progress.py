"""How far a long algorithmic run is (``--progress``): read from the records, trains nothing."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Dict, List, Mapping, Optional, Sequence

import ml_collections
import numpy as np

from experiments.algorithmic import convergence
from experiments.algorithmic import model_runs
from experiments.algorithmic import scoring
from experiments.algorithmic import sweep
from experiments.study import seed_statistics
from experiments.study import table_cells


@dataclasses.dataclass(frozen=True)
class ModelProgress:
  """How far one model of a run is.

  Attributes:
    label: ``<task>-<variant>-s<seed>``.
    seed: its seed.
    state: ``"done"`` (trained, and its test accuracies recorded for these settings), ``"not
      evaluated"`` (trained, no such ``eval.json``), ``"training"`` (an unfinished run is on
      disk), ``"second run"`` (did not fit within the cap; the second run is unfinished or not
      started) or ``"not started"``.
    seconds: training seconds spent on it so far (both runs).
    step: the last checked step of its unfinished run, else ``None``.
    cap: that run's step cap.
    task: its task; ``variant`` its PE variant.
    variant: see ``task``.
    fit: whether the finished run fit in-distribution (``None`` while unfinished).
    ood: its mean test accuracy beyond the training sizes (``"done"`` only, else ``None``).
  """

  label: str
  seed: int
  state: str
  seconds: float = 0.0
  step: Optional[int] = None
  cap: int = 0
  task: str = ""
  variant: str = ""
  fit: Optional[bool] = None
  ood: Optional[float] = None


def model_progress(base: ml_collections.ConfigDict, settings: sweep.Settings, *,
                   runs_dir: pathlib.Path, shard: tuple = ()) -> List[ModelProgress]:
  """The :class:`ModelProgress` of every model of ``settings`` (or of a shard), in run order,
  from what ``runs_dir`` holds: a record counts only when its key is this very model's."""
  out = []
  for seed, spec, variant, config, label in model_runs.model_order(base, settings, shard=shard):
    randomized = sweep.parse_variant(variant)[1]
    arguments = model_runs.fit_arguments(settings, spec, randomized)
    about = {"task": spec.name, "variant": variant}

    def look(recipe, label):
      return convergence.recorded(runs_dir, convergence.fit_key(config, recipe, **arguments),
                                  label=label)

    recipe, seen = settings.recipe, look(settings.recipe, label)
    earlier = 0.0
    if (seen.result is not None and not seen.result.fit
        and settings.rescue_recipe is not None and spec.second_run):
      earlier, recipe = seen.seconds, settings.rescue_recipe
      seen = look(recipe, f"{label}-cap{settings.rescue_steps}")
      if seen.result is None:
        out.append(ModelProgress(label, seed, "second run", earlier + seen.seconds, seen.step,
                                 recipe.max_steps, **about))
        continue
    fit = ood = None
    if seen.result is not None:
      fit = seen.result.fit
      evals = scoring.recorded_evals(seen.result, spec, settings, randomized=randomized)
      state = "not evaluated" if evals is None else "done"
      if evals is not None:
        ood = scoring.aggregate(evals[scoring.reported_protocol(evals)], spec)["ood"]
    else:
      state = "training" if seen.step is not None else "not started"
    out.append(ModelProgress(label, seed, state, earlier + seen.seconds, seen.step,
                             recipe.max_steps, fit=fit, ood=ood, **about))
  return out


TASK_MEDIAN_MIN = 3  # Finished models of a task before its own median drives the estimate.


def progress_summary(models: Sequence[ModelProgress], *, cores: int) -> Dict[str, Any]:
  """Counts, one-core minutes, an estimate of what is left and interim results per task, from
  :func:`model_progress`.

  The estimate gives each unfinished model the median one-core time of the finished models of
  its own variant on its task (a variant's cost predicts its other seeds best: randomized LieRE
  takes ~10x the task's median), else of its task (of all tasks while its task has fewer than
  :data:`TASK_MEDIAN_MIN`), less the time already spent on it, spread over ``cores`` processes
  (one shard each). It is rough: a model that needs a second run takes about three times one
  that fits early.

  ``tasks`` holds, per task, the finished models so far: how many fit, their median one-core
  minutes (both runs), and the OOD accuracy of the plain and the randomized variants that fit
  (min / median / max over models and seeds).
  Interim numbers of the models finished first, not the study's verdicts.
  """
  if cores < 1:
    raise ValueError(f"cores must be >= 1, got {cores}")
  finished = [m for m in models if m.state in ("done", "not evaluated")]
  minutes = [m.seconds / 60.0 for m in finished]
  started = sum(m.seconds for m in models if m.state in ("training", "second run")) / 60.0
  median = float(np.median(minutes)) if minutes else None
  by_task: Dict[str, List[float]] = {}
  by_variant: Dict[tuple, List[float]] = {}
  for m in finished:
    by_task.setdefault(m.task, []).append(m.seconds / 60.0)
    by_variant.setdefault((m.task, m.variant), []).append(m.seconds / 60.0)
  estimate = None
  if median is not None:
    estimate = 0.0
    for m in models:
      if m.state in ("done", "not evaluated"):
        continue
      own, task = by_variant.get((m.task, m.variant), []), by_task.get(m.task, [])
      expected = (float(np.median(own)) if own else
                  float(np.median(task)) if len(task) >= TASK_MEDIAN_MIN else median)
      estimate += max(0.0, expected - m.seconds / 60.0)
  by_seed: Dict[int, List[int]] = {}
  for m in models:
    counts = by_seed.setdefault(m.seed, [0, 0])
    counts[0] += m.state == "done"
    counts[1] += 1
  states = {state: sum(m.state == state for m in models) for state in
            ("done", "not evaluated", "training", "second run", "not started")}
  return {"models": len(models), "done": states["done"], "states": states,
          "by_seed": {str(seed): {"done": d, "models": n} for seed, (d, n) in by_seed.items()},
          "one_core_minutes": sum(minutes) + started,
          "median_minutes": median, "longest_minutes": max(minutes) if minutes else None,
          "left_one_core_minutes": estimate, "cores": cores,
          "left_hours": None if estimate is None else estimate / 60.0 / cores,
          "running": [dataclasses.asdict(m) for m in models if m.step is not None],
          "tasks": _interim_by_task(models, by_task)}


def _interim_by_task(models: Sequence[ModelProgress], minutes: Mapping[str, List[float]]
                     ) -> Dict[str, Dict[str, Any]]:
  """Per task: counts, OOD spreads of the models that fit, and the median of ``minutes`` (task
  -> one-core minutes of its finished models, as :func:`progress_summary` collects them)."""
  out: Dict[str, Dict[str, Any]] = {}
  for m in models:
    entry = out.setdefault(m.task, {"models": 0, "done": 0, "fit": 0, "best": None,
                                    "plain": [], "randomized": []})
    entry["models"] += 1
    if m.state != "done":
      continue
    entry["done"] += 1
    entry["fit"] += bool(m.fit)
    if m.fit and m.ood is not None:
      entry["randomized" if sweep.parse_variant(m.variant)[1] else "plain"].append(m.ood)
      if entry["best"] is None or m.ood > entry["best"][1]:
        entry["best"] = (m.label, m.ood)
  for task, entry in out.items():
    for kind in ("plain", "randomized"):
      entry[kind] = seed_statistics.spread(entry[kind])
    own = minutes.get(task, [])
    entry["median_minutes"] = float(np.median(own)) if own else None
  return out


def progress_lines(study: str, summary: Mapping[str, Any], runs_dir: pathlib.Path, *,
                   metric_label: str = "exact match") -> List[str]:
  """The printout of ``--progress`` (:func:`progress_summary`)."""
  s = summary
  seeds = ", ".join(f"seed {k}: {v['done']} of {v['models']}" for k, v in s["by_seed"].items())
  others = ", ".join(f"{n} {state}" for state, n in s["states"].items()
                     if n and state != "done")
  lines = [f"{study}: {s['done']} of {s['models']} models done (trained and evaluated) in "
           f"{runs_dir}" + (f"; {others}" if others else ""), f"  {seeds}",
           f"  one-core training time so far: {s['one_core_minutes']:.0f} min"]
  if s["median_minutes"] is not None:
    lines[-1] += (f"; a finished model took {s['median_minutes']:.1f} min (median), longest "
                  f"{s['longest_minutes']:.1f}")
  if s["left_one_core_minutes"] is None:
    lines.append("  left: no estimate until a model has finished")
  elif s["done"] < s["models"]:
    lines.append(f"  left: about {s['left_one_core_minutes']:.0f} one-core min at the median "
                 f"of each model's variant (else task), {s['left_hours']:.1f} h as "
                 f"{s['cores']} shard(s) on "
                 f"{s['cores']} core(s)")
  for m in s["running"]:
    lines.append(f"  unfinished: {m['label']} ({m['state']}) at step {m['step']} of {m['cap']}, "
                 f"{m['seconds'] / 60:.1f} min so far")
  tasks = {t: e for t, e in s.get("tasks", {}).items() if e["done"]}
  if tasks:
    lines.append(f"  interim, finished models only (not the study's verdicts): OOD {metric_label} "
                 "of the models that fit, median [min-max] over PEs and seeds (count)")
  for task, e in tasks.items():
    parts = [f"{kind} {table_cells.median_cell(e[kind])} ({e[kind]['n']})"
             for kind in ("plain", "randomized") if e[kind]["n"]]
    best = (f"; best {e['best'][0]} {table_cells.fmt(e['best'][1], 3)}" if e["best"] else "")
    cost = (f", {e['median_minutes']:.1f} one-core min a model (median)"
            if e["median_minutes"] is not None else "")
    lines.append(f"    {task}: {e['done']} of {e['models']} done, {e['fit']} fit{cost}"
                 + (f"; {', '.join(parts)}" if parts else "") + best)
  return lines
