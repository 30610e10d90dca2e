"""Summaries over the seeds of an algorithmic study: per (task, variant) and per suite.

Three views of the out-of-distribution (OOD) accuracy (issue 45: scoring an unfit model 0
measures trainability, not length generalization):

* raw (``_raw`` keys; the headline and the verdicts): every trained seed with the accuracy it
  measured, fit or not, beside the task's chance level and the fit rate as its own number;
* over the seeds that fit (the plain keys ``ood``, ``ood_2x``, ``ood_far``);
* trainability (``_strict`` keys and :func:`suite_mean` with ``view="trainability"``): every
  seed, a seed that did not fit counted 0 (a model that did not learn the task is given no
  credit beyond it);
* the published protocol (:func:`suite_mean` with ``view="best_seed"``): per task the best
  seed's OOD accuracy, averaged over the tasks, as Ruoss et al. 2023 (arXiv 2305.16843) and
  Delétang et al. 2023 (arXiv 2207.02098) report it (they maximize over 10 seeds and 3 learning
  rates; here over the study's seeds at its one learning rate).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np

from experiments.algorithmic import model_runs
from experiments.algorithmic import scoring
from experiments.algorithmic import sweep
from experiments.study import seed_statistics


STRICT = "_strict"  # Suffix of the spreads over every seed, unfit seeds counted 0.
RAW = "_raw"  # Suffix of the spreads over every seed, each with the accuracy it measured.
VIEWS = ("raw", "trainability")  # The views a verdict can take.
SUITE_VIEWS = (*VIEWS, "best_seed")  # And the suite means.


def summarize_variant(seeds: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
  """Spreads of one (task, variant) over its seed records.

  The OOD keys (``ood``, ``ood_2x``, ``ood_far``) are over the seeds that fit; the same keys
  with the ``_strict`` suffix are over every seed, a seed that did not fit counted 0.

  Args:
    seeds: per seed ``{"fit": bool, "in_dist", "steps", "steps_to_fit", "best_in_dist",
      "ood", ...}``.
  """
  fitting = [s for s in seeds if s["fit"]]
  out = {"fit": len(fitting), "seeds": len(seeds),
         "in_dist": seed_statistics.spread([s["in_dist"] for s in seeds]),
         "best_in_dist": seed_statistics.spread([s["best_in_dist"] for s in seeds]),
         "steps": seed_statistics.spread([s["steps"] for s in seeds]),
         "steps_to_fit": seed_statistics.spread([s["steps_to_fit"] for s in fitting])}
  for key in scoring.OOD_KEYS:
    out[key] = seed_statistics.spread([s.get(key) for s in fitting])
    out[key + STRICT] = seed_statistics.spread([strict_value(s, key) for s in seeds])
    out[key + RAW] = seed_statistics.spread([s.get(key) for s in seeds])
  return out


def strict_value(record: Mapping[str, Any], key: str = "ood") -> Optional[float]:
  """A seed's ``key`` where a seed that did not fit counts 0 (``None``: nothing measured)."""
  if not record["fit"]:
    return 0.0
  return record.get(key)


def comparable(entry: Optional[Mapping[str, Any]]) -> bool:
  """Whether a majority of the seeds fit in-distribution (the variant enters the verdicts with
  the seeds that fit; otherwise with every seed, unfit ones counted 0)."""
  return entry is not None and 2 * entry["fit"] > entry["seeds"]


def summaries(settings: sweep.Settings, outcomes: Mapping[tuple, model_runs.Outcome]) -> Dict[str,
                                                                                              Any]:
  """task -> variant -> :func:`summarize_variant` (plus ``"records"``: the per-seed records, and
  ``"chance"``: the task's chance level out of distribution, :func:`scoring.chance_level`)."""
  out: Dict[str, Any] = {}
  for spec in settings.tasks:
    out[spec.name] = {}
    chance = scoring.chance_level(spec, metric=settings.metric)
    for variant in settings.variants:
      records = [outcomes[(spec.name, variant, s)].record() for s in settings.seeds]
      entry = summarize_variant(records)
      entry["records"] = records
      entry["chance"] = chance
      out[spec.name][variant] = entry
  return out


def suite_mean(settings: sweep.Settings, outcomes: Mapping[tuple, model_runs.Outcome], variant: str,
               *, view: str = "raw") -> Dict[str, Any]:
  """Spread over seeds of the mean OOD accuracy across the tasks.

  Args:
    settings: the sweep.
    outcomes: the trained models.
    variant: the variant.
    view: ``"raw"`` (each task's accuracy as measured, fit or not), ``"trainability"`` (a
      task a seed did not fit counts 0) or ``"best_seed"`` (the published protocol: per task
      the best seed, averaged over the tasks; one value, no spread).
  """
  if view not in SUITE_VIEWS:
    raise ValueError(f"view must be one of {SUITE_VIEWS}, got {view!r}")
  if view == "best_seed":
    best = [max((outcomes[(spec.name, variant, seed)].record().get("ood") or 0.0
                 for seed in settings.seeds), default=0.0) for spec in settings.tasks]
    return seed_statistics.spread([float(np.mean(best))] if best else [])
  value = ((lambda r: r.get("ood")) if view == "raw" else strict_value)
  per_seed = []
  for seed in settings.seeds:
    values = [value(outcomes[(spec.name, variant, seed)].record()) or 0.0
              for spec in settings.tasks]
    per_seed.append(float(np.mean(values)))
  return seed_statistics.spread(per_seed)


def leaderboard_entry(settings: sweep.Settings, outcomes: Mapping[tuple, model_runs.Outcome], *,
                      view: str = "raw") -> Dict[str, Any]:
  """variant -> spread over seeds of the mean OOD accuracy (``Settings.metric``) across the
  study's tasks, in ``view`` (:func:`suite_mean`)."""
  return {v: suite_mean(settings, outcomes, v, view=view) for v in settings.variants}
