"""The shared engine of the algorithmic length-generalization studies.

A study is a :class:`Settings` (tasks with their training and test sizes, PE variants, seeds,
a convergence :class:`~experiments.convergence.Recipe`) plus its published claims. For every
(task, variant, seed) the engine

1. trains a decoder until held-out in-distribution exact match reaches the fit threshold, or a
   step cap (:func:`experiments.convergence.train_to_fit`; cached on disk, so a killed study
   resumes at the next model);
2. scores exact match (teacher forcing = greedy decoding of the answer; or, with
   ``Settings.metric``, the per-token accuracy of the answer) for every test size, in
   rows bucketed by length so that each model compiles a handful of shapes; cached beside the
   model;
3. summarizes over seeds (median [min-max]), the OOD accuracy counted only for seeds that fit.

A model that does not fit within the cap gets one second run from scratch with a longer cap
(``Settings.rescue_steps``), so that slow learners are not judged on an unfinished model.

Verdicts (:func:`compare`) use the seed spread: a claim "A beats B" holds only when every seed
of A is above every seed of B (the min-max ranges do not overlap) and the medians differ by at
least a margin. With one seed (quick mode) the outcome is labelled indicative. A variant that
fit in no majority of its seeds still enters, with each seed that did not fit counted 0 out of
distribution (a model that did not learn the task is given no credit beyond it); the same rule
makes the suite means and the leaderboard.

Variants: a PE registry name, or ``<pe>+randomized`` (Ruoss et al. 2023: training positions are
sorted samples of ``[0, max_position)``; at test time positions keep being sampled, the paper's
protocol, and plain ``0..k-1`` positions are scored too). NoPE, which ignores positions, is not
combined with randomization. A PE with a bounded table (learned absolute positions) gets
``max_position`` rows so that long tests can run at all (rows past the training length are
untrained unless positions are randomized).

References:
  Ruoss et al., "Randomized Positional Encodings Boost Length Generalization of Transformers",
  ACL 2023, arXiv:2305.16843. Kazemnejad et al., "The Impact of Positional Encoding on Length
  Generalization in Transformers", NeurIPS 2023, arXiv:2305.19466.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import statistics
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import ml_collections
import numpy as np

from experiments.algorithmic import convergence
from experiments import study_report

RANDOMIZED = "+randomized"
MARGIN = 0.02  # Medians must differ by at least this much on top of separated seed ranges.
OOD_KEYS = ("ood", "ood_2x", "ood_far")
STRICT = "_strict"  # Suffix of the spreads over every seed, unfit seeds counted 0.
METRICS = {"exact_match": "exact match", "token_accuracy": "per-token accuracy"}  # Test metric
# of a study (Settings.metric) -> how reports name it. The fit check is always exact match.
ROW_BUCKETS = tuple(sorted({b * 2**k for b in (16, 24) for k in range(12)}))


# ----------------------------------------------------------------------------------------------
# Settings and variants.


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """One task of a study.

  Attributes:
    name: synthetic task name (``pejax.data.TASK_NAMES``).
    train_max: largest training size (the task's size unit, e.g. input length).
    test_sizes: sizes scored after training (training sizes among them give the
      in-distribution curve; larger ones are OOD).
    train_min: smallest training size.
  """

  name: str
  train_max: int
  test_sizes: tuple
  train_min: int = 1

  def __post_init__(self):
    if self.train_max < self.train_min:
      raise ValueError(f"train_max must be >= train_min ({self.train_min}), got "
                       f"{self.train_max}")
    if not self.test_sizes:
      raise ValueError(f"test_sizes of task {self.name!r} must not be empty")

  @property
  def ood_sizes(self) -> tuple:
    return tuple(s for s in self.test_sizes if s > self.train_max)


@dataclasses.dataclass(frozen=True)
class Settings:
  """The sweep of one run of a study.

  Attributes:
    tasks: the :class:`TaskSpec` s.
    variants: variant labels.
    seeds: seeds per (task, variant).
    recipe: the convergence recipe.
    examples: test examples per size.
    max_position: range of randomized positions and rows of a bounded table; 0 means the
      longest test row.
    rescue_steps: the cap of a second run from scratch for a model that did not fit within
      ``recipe.max_steps`` (its cosine decay spans the new cap); 0 means no second run.
    metric: what the tests score per size (a :data:`METRICS` key): ``"exact_match"`` (the
      whole answer right) or ``"token_accuracy"`` (the fraction of answer bytes right, the
      metric of Ruoss et al. 2023). Fitting is judged by exact match either way.
  """

  tasks: tuple
  variants: tuple
  seeds: tuple
  recipe: convergence.Recipe
  examples: int = 32
  max_position: int = 0
  rescue_steps: int = 0
  metric: str = "exact_match"

  def __post_init__(self):
    if self.metric not in METRICS:
      raise ValueError(f"metric must be one of {sorted(METRICS)}, got {self.metric!r}")
    if self.rescue_steps and self.rescue_steps <= self.recipe.max_steps:
      raise ValueError(f"rescue_steps must be 0 or above the cap {self.recipe.max_steps}, got "
                       f"{self.rescue_steps}")

  @property
  def metric_label(self) -> str:
    """``"exact match"`` or ``"per-token accuracy"``: the test metric as reports name it."""
    return METRICS[self.metric]

  @property
  def rescue_recipe(self) -> Optional[convergence.Recipe]:
    """The recipe of a second run, or ``None`` when there is none."""
    if not self.rescue_steps:
      return None
    return dataclasses.replace(self.recipe, max_steps=int(self.rescue_steps))

  @property
  def position_range(self) -> int:
    if self.max_position:
      return int(self.max_position)
    return max(test_row_len(t.name, max(t.test_sizes)) for t in self.tasks)


def parse_variant(variant: str) -> tuple:
  """``"rope+randomized"`` -> ``("rope", True)``; ``"alibi"`` -> ``("alibi", False)``."""
  if variant.endswith(RANDOMIZED):
    return variant[:-len(RANDOMIZED)], True
  return variant, False


def pe_class(name: str):
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top
  return registry.get_pe_class(name) if name in registry.pe_names() else None


def uses_positions(name: str) -> bool:
  """Whether the registered PE ``name`` overrides any hook (NoPE: none; unknown: True)."""
  from pejax.nn.positional.interface import PositionalEncoding  # pylint: disable=g-import-not-at-top
  cls = pe_class(name)
  if cls is None:
    return True
  return any(getattr(cls, hook) is not getattr(PositionalEncoding, hook)
             for hook in ("embed", "rotate", "bias", "content_bias", "logits"))


def is_absolute(name: str) -> bool:
  cls = pe_class(name)
  return bool(cls is not None and cls.absolute)


def is_content_aware(name: str) -> bool:
  cls = pe_class(name)
  return bool(cls is not None and cls.content_aware)


def is_relative_bias(name: str) -> bool:
  """A translation-invariant bias of positions only (T5, ALiBi, KERPLE, Sandwich)."""
  from pejax.nn.positional.interface import PositionalEncoding  # pylint: disable=g-import-not-at-top
  cls = pe_class(name)
  return bool(cls is not None and cls.translation_invariant and not cls.content_aware
              and cls.bias is not PositionalEncoding.bias
              and cls.rotate is PositionalEncoding.rotate)


def all_variants(base: ml_collections.ConfigDict, *, randomized: bool = True) -> tuple:
  """Every registered PE that can serve ``base`` (by capability), and its randomized variant."""
  names = study_report.runnable_pes(base)
  if not randomized:
    return names
  return names + tuple(n + RANDOMIZED for n in names if uses_positions(n))


def select_variants(settings: Settings, pes: Sequence[str]) -> Settings:
  """``settings`` restricted to the variants in ``pes`` (all of them when ``pes`` is empty).

  Args:
    settings: the study's sweep.
    pes: variant labels (``"rope"``, ``"rope+randomized"``), e.g. from ``--pes``.

  Returns:
    The settings with ``variants`` = those of ``pes``, in the study's order.

  Raises:
    study_report.StudyOptionError: naming a label the study does not sweep.
  """
  if not pes:
    return settings
  unknown = [p for p in pes if p not in settings.variants]
  if unknown:
    raise study_report.StudyOptionError(
        f"--pes: {', '.join(unknown)} not among this study's variants "
        f"({', '.join(settings.variants)})")
  return dataclasses.replace(settings, variants=tuple(v for v in settings.variants if v in pes))


def variant_config(base: ml_collections.ConfigDict, *, variant: str, seed: int,
                   max_position: int) -> ml_collections.ConfigDict:
  """``base`` with the variant's PE and the seed (a bounded table gets ``max_position`` rows)."""
  pe, _ = parse_variant(variant)
  config = base.copy_and_resolve_references()
  with config.unlocked():
    config.pe.name = pe
    config.seed = int(seed)
    config.data.train_len = max_position  # Learned tables default to data.train_len rows.
    cls = pe_class(pe)
    if (cls is not None and "max_position" in cls.config_class.field_types()
        and study_report.pe_max_length(config) is not None):
      config.pe.max_position = int(max_position)
  return config


# ----------------------------------------------------------------------------------------------
# Evaluation.


def test_row_len(task: str, size: int) -> int:
  """The bucketed row length that size ``size`` of ``task`` is scored in."""
  need = convergence.row_len_for(task, size)
  return next(b for b in ROW_BUCKETS if b >= need)


def accuracy_by_size(model, spec: TaskSpec, *, examples: int, seed: int, train_len: int,
                     max_position: Optional[int], metric: str = "exact_match"
                     ) -> Dict[int, float]:
  """Accuracy of ``model`` for every test size of ``spec`` (exact match, or per token).

  Args:
    model: a trained decoder.
    spec: the task.
    examples: examples per size.
    seed: data seed.
    train_len: the training row length (randomized positions draw at least this many).
    max_position: range of sampled positions, or ``None`` for ``0..k-1``.
    metric: ``"exact_match"`` (fraction of examples whose whole answer is right) or
      ``"token_accuracy"`` (mean over the examples of the fraction of answer bytes right).

  Returns:
    size -> accuracy.
  """
  score = {"exact_match": convergence.exact_match,
           "token_accuracy": convergence.token_accuracy}.get(metric)
  if score is None:
    raise ValueError(f"metric must be one of {sorted(METRICS)}, got {metric!r}")
  rng = np.random.default_rng([seed, 3])
  by_row: Dict[int, List[int]] = {}
  for size in spec.test_sizes:
    by_row.setdefault(test_row_len(spec.name, size), []).append(int(size))
  out = {}
  for row_len, sizes in sorted(by_row.items()):
    chunk = max(1, 8192 // row_len)
    for size in sizes:
      batch = convergence.task_batch(spec.name, rng, batch_size=examples, row_len=row_len,
                                     min_size=size, max_size=size, train_len=train_len,
                                     max_position=max_position, sizes=[size] * examples)
      out[size] = float(np.mean(score(model, batch, chunk=chunk)))
  return out


def evaluate(result: convergence.FitResult, config: ml_collections.ConfigDict, spec: TaskSpec,
             settings: Settings, *, randomized: bool) -> Dict[str, Dict[str, float]]:
  """Accuracy by size under each position protocol (cached in the model's directory)."""
  train_len = convergence.row_len_for(spec.name, spec.train_max)
  key = eval_key(result, spec, settings, randomized=randomized)
  protocols = key["protocols"]

  def compute():
    model = convergence.load_model(result, config)
    return {name: {str(k): v for k, v in accuracy_by_size(
        model, spec, examples=settings.examples, seed=int(config.seed) + 1000,
        train_len=train_len, max_position=m, metric=settings.metric).items()}
        for name, m in protocols.items()}

  return study_report.cached(pathlib.Path(result.run_dir) / convergence.EVAL_FILE, key, compute)


def eval_key(result: convergence.FitResult, spec: TaskSpec, settings: Settings, *,
             randomized: bool) -> Dict[str, Any]:
  """What the test accuracies of one trained model depend on (the key of its ``eval.json``)."""
  protocols = {"arange": None}
  if randomized:
    protocols = {"sampled": settings.position_range, "arange": None}
  key = {"sizes": list(spec.test_sizes), "examples": settings.examples,
         "protocols": protocols, "steps": result.steps, "version": 1}
  if settings.metric != "exact_match":  # (Exact-match records written before stay valid.)
    key["metric"] = settings.metric
  return key


def recorded_evals(result: convergence.FitResult, spec: TaskSpec, settings: Settings, *,
                   randomized: bool) -> Optional[Dict[str, Dict[str, float]]]:
  """The accuracies :func:`evaluate` stored for this model under these settings, else ``None``
  (evaluates nothing)."""
  return study_report.cached_value(pathlib.Path(result.run_dir) / convergence.EVAL_FILE,
                                   eval_key(result, spec, settings, randomized=randomized))


def reported_protocol(evals: Mapping[str, Any]) -> str:
  """The position protocol a study reports: ``"sampled"`` where it was tested (a randomized
  variant), else ``"arange"`` (``0..k-1``)."""
  return "sampled" if "sampled" in evals else "arange"


def aggregate(acc: Mapping[Any, float], spec: TaskSpec) -> Dict[str, Optional[float]]:
  """OOD mean and bands (sizes in multiples of the largest training size) of one seed."""
  by_size = {int(k): float(v) for k, v in acc.items()}

  def mean(pred):
    values = [v for s, v in by_size.items() if pred(s)]
    return float(np.mean(values)) if values else None

  m = spec.train_max
  return {"test_in_dist": mean(lambda s: s <= m), "ood": mean(lambda s: s > m),
          "ood_2x": mean(lambda s: m < s <= 2 * m), "ood_far": mean(lambda s: s > 2 * m)}


# ----------------------------------------------------------------------------------------------
# Seeds.


def seed_spread(values: Sequence[Optional[float]]) -> Dict[str, Any]:
  """min / median / max over the seeds that have a value (``values`` kept for the verdicts)."""
  present = [float(v) for v in values if v is not None]
  if not present:
    return {"min": None, "median": None, "max": None, "n": 0, "values": []}
  return {"min": min(present), "median": float(statistics.median(present)),
          "max": max(present), "n": len(present), "values": present}


def cell(spread: Mapping[str, Any], digits: int = 2) -> str:
  """``median [min-max]``, the median alone for one seed, ``n/a`` for none."""
  if not spread or spread.get("median") is None:
    return "n/a"
  if spread["n"] == 1:
    return study_report.fmt(spread["median"], digits)
  return (f"{study_report.fmt(spread['median'], digits)} "
          f"[{study_report.fmt(spread['min'], digits)}-{study_report.fmt(spread['max'], digits)}]")


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
         "in_dist": seed_spread([s["in_dist"] for s in seeds]),
         "best_in_dist": seed_spread([s["best_in_dist"] for s in seeds]),
         "steps": seed_spread([s["steps"] for s in seeds]),
         "steps_to_fit": seed_spread([s["steps_to_fit"] for s in fitting])}
  for key in OOD_KEYS:
    out[key] = seed_spread([s.get(key) for s in fitting])
    out[key + STRICT] = seed_spread([strict_value(s, key) for s in seeds])
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


def compare(winners: Mapping[str, Mapping[str, Any]], losers: Mapping[str, Mapping[str, Any]],
            *, margin: float = MARGIN) -> Optional[bool]:
  """Whether every winner beats every loser beyond the seed spread.

  Args:
    winners: label -> spread (``seed_spread``) of the compared number, higher is better.
    losers: the same for the expected losers.
    margin: the least difference of medians.

  Returns:
    ``True`` when for each pair the winner's smallest seed value is above the loser's largest
    and the medians differ by ``margin``; ``False`` otherwise (:func:`why_not` says why);
    ``None`` when a side has no value.
  """
  present = lambda side: {k: s for k, s in side.items() if s and s.get("median") is not None}
  won, lost = present(winners), present(losers)
  if not won or not lost:
    return None
  return not why_not(won, lost, margin=margin)


def why_not(winners: Mapping[str, Mapping[str, Any]], losers: Mapping[str, Mapping[str, Any]],
            *, margin: float = MARGIN, digits: int = 3) -> str:
  """Why :func:`compare` fails: the first (winner, loser) pair that breaks the criterion.

  Args:
    winners: label -> spread of the expected winners.
    losers: label -> spread of the expected losers.
    margin: the least difference of medians.
    digits: decimals of the numbers quoted.

  Returns:
    One sentence, e.g. ``"Reason: sinusoidal is ahead of none (medians 0.210 vs 0.105)."``;
    empty when the comparison holds or cannot be made. This is the criterion itself:
    :func:`compare` holds exactly when it is empty.

  Raises:
    ValueError: for ``margin <= 0`` (a loser level with the winner would count as beaten).
  """
  if not margin > 0:
    raise ValueError(f"margin must be > 0, got {margin}")
  f = lambda x: study_report.fmt(x, digits)
  for w_name, w in winners.items():
    for l_name, l in losers.items():
      if not w or not l or w.get("median") is None or l.get("median") is None:
        continue
      if l["median"] >= w["median"]:
        return (f"Reason: {l_name} is ahead of {w_name} or level with it (medians "
                f"{f(l['median'])} vs {f(w['median'])}).")
      if (w["n"] > 1 or l["n"] > 1) and not w["min"] > l["max"]:
        return (f"Reason: the seeds overlap: {w_name}'s lowest seed {f(w['min'])} is not above "
                f"{l_name}'s highest {f(l['max'])}.")
      if w["median"] < l["median"] + margin:
        # Enough digits that the lead printed is under the margin (0.0195, not "0.020 < 0.02").
        lead, shown = w["median"] - l["median"], digits
        while float(study_report.fmt(lead, shown)) >= margin and shown < 9:
          shown += 1
        return (f"Reason: {w_name} leads {l_name} by {study_report.fmt(lead, shown)} in the "
                f"median, less than the {margin:g} margin.")
  return ""


def describe(spreads: Mapping[str, Mapping[str, Any]], digits: int = 3) -> str:
  return ", ".join(f"{k} {cell(v, digits)}" for k, v in spreads.items())


# ----------------------------------------------------------------------------------------------
# Running.


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


def model_order(base: ml_collections.ConfigDict, settings: Settings, *, shard: tuple = ()
                ) -> List[tuple]:
  """``(seed, spec, variant, config, label)`` of every model, seed-major (a partial run has
  seed 0 first), or of one shard's (``(index, count)``: every ``count``-th from ``index``)."""
  order = [(seed, spec, variant) for seed in settings.seeds
           for spec in settings.tasks for variant in settings.variants]
  if shard:
    order = order[shard[0]::shard[1]]
  return [(seed, spec, variant,
           variant_config(base, variant=variant, seed=seed, max_position=settings.position_range),
           f"{spec.name}-{variant.replace('+', '_')}-s{seed}") for seed, spec, variant in order]


def _fit_arguments(settings: Settings, spec: TaskSpec, randomized: bool) -> Dict[str, Any]:
  """The task arguments of :func:`convergence.train_to_fit` (and :func:`convergence.fit_key`)."""
  return {"task": spec.name, "train_sizes": (spec.train_min, spec.train_max),
          "randomized": settings.position_range if randomized else None}


def run_models(base: ml_collections.ConfigDict, settings: Settings, *,
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
    randomized = parse_variant(variant)[1]

    def train(recipe, label=label, config=config, spec=spec, randomized=randomized):
      return convergence.train_to_fit(
          config, recipe, runs_dir=runs_dir, label=label, log=log,
          **_fit_arguments(settings, spec, randomized))

    fit, first = train(settings.recipe), None
    if not fit.fit and settings.rescue_recipe is not None:
      log(f"{label}: did not fit within {settings.recipe.max_steps} steps (best "
          f"{fit.best_in_dist:.3f}); a second run from scratch with a cap of "
          f"{settings.rescue_steps}")
      first, fit = fit, train(settings.rescue_recipe,
                              label=f"{label}-cap{settings.rescue_steps}")
    evals = evaluate(fit, config, spec, settings, randomized=randomized)
    protocol = reported_protocol(evals)
    agg = aggregate(evals[protocol], spec)
    outcome = Outcome(spec.name, variant, seed, fit, evals, protocol, agg, first=first)
    out[(spec.name, variant, seed)] = outcome
    done += 1
    how = "reused" if fit.reused else f"{outcome.train_seconds:.0f}s"
    status = (f"fit at step {fit.steps_to_fit}" if fit.fit else
              f"did not fit: best {fit.best_in_dist:.3f} at step {fit.best_step} of "
              f"{fit.steps}") + (" (second run)" if first else "")
    log(f"[{done}/{n}] {spec.name} {variant} seed {seed}: {status}, OOD "
        f"{study_report.fmt(agg['ood'], 3)} ({how}, {(time.time() - started) / 60:.1f} "
        "min so far)")
  return out


# ----------------------------------------------------------------------------------------------
# Progress of a long run (read from the records; trains nothing).


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


def model_progress(base: ml_collections.ConfigDict, settings: Settings, *,
                   runs_dir: pathlib.Path, shard: tuple = ()) -> List[ModelProgress]:
  """The :class:`ModelProgress` of every model of ``settings`` (or of a shard), in run order,
  from what ``runs_dir`` holds: a record counts only when its key is this very model's."""
  out = []
  for seed, spec, variant, config, label in model_order(base, settings, shard=shard):
    randomized = parse_variant(variant)[1]
    arguments = _fit_arguments(settings, spec, randomized)
    about = {"task": spec.name, "variant": variant}

    def look(recipe, label):
      return convergence.recorded(runs_dir, convergence.fit_key(config, recipe, **arguments),
                                  label=label)

    recipe, seen = settings.recipe, look(settings.recipe, label)
    earlier = 0.0
    if (seen.result is not None and not seen.result.fit
        and settings.rescue_recipe is not None):
      earlier, recipe = seen.seconds, settings.rescue_recipe
      seen = look(recipe, f"{label}-cap{settings.rescue_steps}")
      if seen.result is None:
        out.append(ModelProgress(label, seed, "second run", earlier + seen.seconds, seen.step,
                                 recipe.max_steps, **about))
        continue
    fit = ood = None
    if seen.result is not None:
      fit = seen.result.fit
      evals = recorded_evals(seen.result, spec, settings, randomized=randomized)
      state = "not evaluated" if evals is None else "done"
      if evals is not None:
        ood = aggregate(evals[reported_protocol(evals)], spec)["ood"]
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
  its task (of all tasks while its task has fewer than :data:`TASK_MEDIAN_MIN`), less the time
  already spent on it, spread over ``cores`` processes (one shard each). It is rough: a model
  that needs a second run takes about three times one that fits early.

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
  for m in finished:
    by_task.setdefault(m.task, []).append(m.seconds / 60.0)
  estimate = None
  if median is not None:
    estimate = 0.0
    for m in models:
      if m.state in ("done", "not evaluated"):
        continue
      own = by_task.get(m.task, [])
      expected = float(np.median(own)) if len(own) >= TASK_MEDIAN_MIN else median
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
      entry["randomized" if parse_variant(m.variant)[1] else "plain"].append(m.ood)
      if entry["best"] is None or m.ood > entry["best"][1]:
        entry["best"] = (m.label, m.ood)
  for task, entry in out.items():
    for kind in ("plain", "randomized"):
      entry[kind] = seed_spread(entry[kind])
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
                 f"per task, {s['left_hours']:.1f} h as {s['cores']} shard(s) on "
                 f"{s['cores']} core(s)")
  for m in s["running"]:
    lines.append(f"  unfinished: {m['label']} ({m['state']}) at step {m['step']} of {m['cap']}, "
                 f"{m['seconds'] / 60:.1f} min so far")
  tasks = {t: e for t, e in s.get("tasks", {}).items() if e["done"]}
  if tasks:
    lines.append(f"  interim, finished models only (not the study's verdicts): OOD {metric_label} "
                 "of the models that fit, median [min-max] over PEs and seeds (count)")
  for task, e in tasks.items():
    parts = [f"{kind} {cell(e[kind])} ({e[kind]['n']})" for kind in ("plain", "randomized")
             if e[kind]["n"]]
    best = (f"; best {e['best'][0]} {study_report.fmt(e['best'][1], 3)}" if e["best"] else "")
    cost = (f", {e['median_minutes']:.1f} one-core min a model (median)"
            if e["median_minutes"] is not None else "")
    lines.append(f"    {task}: {e['done']} of {e['models']} done, {e['fit']} fit{cost}"
                 + (f"; {', '.join(parts)}" if parts else "") + best)
  return lines


def _usable_cores() -> int:
  if hasattr(os, "sched_getaffinity"):
    return max(1, len(os.sched_getaffinity(0)))
  return max(1, os.cpu_count() or 1)


def run_progress(base: ml_collections.ConfigDict, settings: Settings, *, study: str,
                 shard: tuple, runs_dir: pathlib.Path, log: Callable[[str], None] = print
                 ) -> Dict[str, Any]:
  """``--progress``: prints how far the run is (:func:`progress_lines`); trains nothing."""
  summary = progress_summary(model_progress(base, settings, runs_dir=runs_dir, shard=shard),
                             cores=_usable_cores())
  for line in progress_lines(study, summary, runs_dir, metric_label=settings.metric_label):
    log(line)
  return summary


def run_shard(base: ml_collections.ConfigDict, settings: Settings, *, study: str,
              shard: tuple, runs_dir: pathlib.Path, log: Callable[[str], None] = print
              ) -> Dict[str, Any]:
  """Trains and evaluates one shard's models (``StudyOptions.shard``); writes no report.

  Returns:
    ``{"shard": [index, count], "models": number of models of the shard}``.
  """
  outcomes = run_models(base, settings, runs_dir=runs_dir, log=log, shard=shard)
  log(f"{study}: shard {shard[0]}/{shard[1]} done, {len(outcomes)} models in {runs_dir}; no "
      "report: the same command without --shard reuses every model and writes it")
  return {"shard": list(shard), "models": len(outcomes)}


def run_without_report(options: study_report.StudyOptions, base: ml_collections.ConfigDict,
                       settings: Settings, *, study: str, runs_dir: pathlib.Path,
                       log: Callable[[str], None] = print) -> Optional[Dict[str, Any]]:
  """``--progress`` (:func:`run_progress`) or ``--shard`` (:func:`run_shard`): their results;
  ``None`` for a complete run, which trains every model and writes the report."""
  if options.progress:
    return run_progress(base, settings, study=study, shard=options.shard, runs_dir=runs_dir,
                        log=log)
  if options.shard:
    return run_shard(base, settings, study=study, shard=options.shard, runs_dir=runs_dir,
                     log=log)
  return None


def summaries(settings: Settings, outcomes: Mapping[tuple, Outcome]) -> Dict[str, Any]:
  """task -> variant -> :func:`summarize_variant` (plus ``"records"``: the per-seed records)."""
  out: Dict[str, Any] = {}
  for spec in settings.tasks:
    out[spec.name] = {}
    for variant in settings.variants:
      records = [outcomes[(spec.name, variant, s)].record() for s in settings.seeds]
      entry = summarize_variant(records)
      entry["records"] = records
      out[spec.name][variant] = entry
  return out


def suite_mean(settings: Settings, outcomes: Mapping[tuple, Outcome], variant: str
               ) -> Dict[str, Any]:
  """Spread over seeds of the mean OOD accuracy across the tasks (a task a seed did not fit
  counts 0: a model that did not learn the task is given no credit beyond it)."""
  per_seed = []
  for seed in settings.seeds:
    values = [strict_value(outcomes[(spec.name, variant, seed)].record()) or 0.0
              for spec in settings.tasks]
    per_seed.append(float(np.mean(values)))
  return seed_spread(per_seed)


def cap_text(max_steps: int, rescue_steps: int = 0) -> str:
  """``"6000 steps"``, or ``"6000 steps, or 12000 in a second run"`` (a recipe's cap and
  ``Settings.rescue_steps``)."""
  return f"{max_steps} steps" + (f", or {rescue_steps} in a second run" if rescue_steps else "")


def fit_lines(summary: Mapping[str, Mapping[str, Any]], recipe: convergence.Recipe, *,
              rescue_steps: int = 0) -> str:
  """Which variants fit per task, and how far the others got."""
  lines = []
  for task, variants in summary.items():
    ok = [f"{v} ({e['fit']}/{e['seeds']})" for v, e in variants.items() if comparable(e)]
    bad = [f"{v} ({e['fit']}/{e['seeds']}, best {cell(e['best_in_dist'], 3)})"
           for v, e in variants.items() if not comparable(e)]
    lines.append(f"- {task}: fit (>= {recipe.fit_threshold:g} held-out in-distribution exact "
                 f"match within {cap_text(recipe.max_steps, rescue_steps)}) in a majority of "
                 f"seeds: {', '.join(ok) or 'none'}; did not: {', '.join(bad) or 'none'}.")
  return "\n".join(lines)


def task_table(entries: Mapping[str, Mapping[str, Any]], recipe: convergence.Recipe
               ) -> tuple:
  """Header and rows of one task: fit, steps-to-fit per seed, OOD spreads."""
  header = ["variant", "seeds fit", "steps to fit per seed (or best in-dist at the cap)",
            "held-out in-dist", "OOD (all test sizes)", "OOD (1x, 2x]", "OOD > 2x"]
  rows = []
  for variant, e in entries.items():
    per_seed = ", ".join(
        (str(r["steps_to_fit"]) if r["steps_to_fit"] is not None
         else f"no ({study_report.fmt(r['best_in_dist'], 2)})")
        + (" (2nd run)" if r.get("second_run") else "") for r in e.get("records", []))
    row = [variant, f"{e['fit']}/{e['seeds']}", per_seed or cell(e["steps_to_fit"], 0),
           cell(e["in_dist"], 3)]
    if e["fit"]:
      row += [cell(e["ood"], 3), cell(e["ood_2x"], 3), cell(e["ood_far"], 3)]
    else:
      row += ["did not fit", "", ""]
    rows.append(row)
  return header, rows


def _curve(settings: Settings, outcomes: Mapping[tuple, Outcome], task: str, variant: str
           ) -> tuple:
  """``("<k>/<n> fit" or "did not fit", [(size, median, min, max)])`` of one variant, over the
  fitting seeds (all seeds if none fit)."""
  runs = [outcomes[(task, variant, s)] for s in settings.seeds]
  chosen = [o for o in runs if o.fit.fit] or runs
  k = sum(o.fit.fit for o in runs)
  points = []
  for size in sorted(int(s) for s in chosen[0].evals[chosen[0].protocol]):
    values = [o.evals[o.protocol][str(size)] for o in chosen]
    points.append((size, float(np.median(values)), float(min(values)), float(max(values))))
  return (f"{k}/{len(runs)} fit" if k else "did not fit"), points


def curves(settings: Settings, outcomes: Mapping[tuple, Outcome], task: str
           ) -> Dict[str, List[tuple]]:
  """``"<variant> (<k>/<n> fit)"`` -> (size, median, min, max) over the fitting seeds (all
  seeds if none fit)."""
  series = {}
  for variant in settings.variants:
    fit, points = _curve(settings, outcomes, task, variant)
    series[f"{variant} ({fit})"] = points
  return series


def curve_panels(settings: Settings, outcomes: Mapping[tuple, Outcome], task: str
                 ) -> Dict[str, Dict[str, List[tuple]]]:
  """One panel per PE: ``pe -> {"plain (k/n fit)" | "randomized (k/n fit)": points}``."""
  panels: Dict[str, Dict[str, List[tuple]]] = {}
  for variant in settings.variants:
    pe, randomized = parse_variant(variant)
    fit, points = _curve(settings, outcomes, task, variant)
    panels.setdefault(pe, {})[f"{'randomized' if randomized else 'plain'} ({fit})"] = points
  return panels


PANELS_FROM = 9  # Variants from which the accuracy-by-size figure is one panel per PE.


def second_run_cap(cap: int) -> int:
  """The second-run cap (``Settings.rescue_steps``) of the full modes: twice the first cap."""
  return 2 * int(cap)


def quick_label(settings: Settings) -> str:
  return (f"{len(settings.seeds)} seed{'s' if len(settings.seeds) > 1 else ''}, at most "
          f"{settings.recipe.max_steps} steps")


def setup_lines(base: ml_collections.ConfigDict, settings: Settings) -> List[str]:
  m, o, r = base.model, base.optim, settings.recipe
  return [
      f"- model: decoder, {m.num_layers} layers, d_model {m.d_model}, {m.num_heads} heads, "
      f"{m.mlp} MLP, byte vocabulary",
      f"- training to convergence: AdamW lr {o.learning_rate:g}, warm-up {o.warmup_steps}, "
      f"{'constant rate' if r.decay == 'constant' else 'cosine decay over the cap'}, batch "
      f"{base.data.batch_size}; a held-out set of {r.check_examples} in-distribution examples "
      f"is scored every {r.check_every} steps and training stops at exact match >= "
      f"{r.fit_threshold:g} (steps-to-fit) or at {r.max_steps} steps"
      + (f"; curriculum: the largest training size grows over the first {r.curriculum_steps} "
         "steps" if r.curriculum_steps else "")
      + (f"; a model that does not fit gets a second run from scratch with a cap of "
         f"{settings.rescue_steps} steps (its cosine decay spans that cap; the tables mark "
         "it 2nd run)" if settings.rescue_steps else ""),
      f"- seeds: {', '.join(str(s) for s in settings.seeds)}; tables: median [min-max] over "
      "seeds, OOD over the seeds that fit",
      (f"- test: {settings.examples} examples per size, exact match of the whole answer "
       "(teacher forcing, equal to greedy decoding)" if settings.metric == "exact_match" else
       f"- test: {settings.examples} examples per size, per-token accuracy: the fraction of "
       "answer bytes whose argmax is right under teacher forcing (each byte predicted from the "
       "correct earlier ones), averaged over the examples; 1.0 exactly for an exact match, and "
       "about 1/k for a model guessing among k symbols (0.5 on binary strings)"),
      (f"- randomized positions (Ruoss et al. 2023): sorted samples of [0, "
       f"{settings.position_range}) in training and at test (the paper's protocol); a bounded "
       f"table (learned positions) has {settings.position_range} rows"
       if any(parse_variant(v)[1] for v in settings.variants) else
       f"- a bounded table (learned positions) has {settings.position_range} rows"),
      f"- verdicts: a claim holds only when every seed of the expected winner is above every "
      f"seed of the expected loser (min-max ranges do not overlap) and the medians differ by "
      f">= {MARGIN:g}; a variant that fit in no majority of its seeds enters with its unfit "
      "seeds counted 0; with one seed it is indicative only",
  ]


def training_minutes(outcomes: Mapping[tuple, Outcome]) -> float:
  return sum(o.train_seconds for o in outcomes.values()) / 60


def write_common(report: study_report.Report, base: ml_collections.ConfigDict,
                 settings: Settings, outcomes: Mapping[tuple, Outcome],
                 summary: Mapping[str, Any], workdir: pathlib.Path, *,
                 sizes_note: str = "") -> None:
  """Setup, fit and per-task sections (tables and accuracy-by-size plots) of a report."""
  lines = setup_lines(base, settings)
  reused = sum(o.fit.reused for o in outcomes.values())
  seconds = [o.train_seconds for o in outcomes.values()]
  lines.append(f"- compute: {len(outcomes)} models, training wall time "
               f"{training_minutes(outcomes):.1f} min summed over models "
               f"(median {np.median(seconds) / 60 if seconds else 0:.1f} min, longest "
               f"{max(seconds, default=0) / 60:.1f} min; second runs included), as each model "
               f"recorded it when it was trained, pauses included ({reused} reused from earlier "
               "runs, possibly on other machines)")
  machines: Dict[str, int] = {}
  for o in outcomes.values():
    name = o.fit.machine or "not recorded (trained before 2026-12-02 07:00 UTC)"
    machines[name] = machines.get(name, 0) + 1
  lines.append("- trained on: " + "; ".join(f"{m} ({k} model{'s' if k > 1 else ''})"
                                             for m, k in machines.items()))
  if sizes_note:
    lines.append(sizes_note)
  report.section("Setup", "\n".join(lines))
  report.section("Which models fit in-distribution",
                 fit_lines(summary, settings.recipe, rescue_steps=settings.rescue_steps))
  for spec in settings.tasks:
    header, rows = task_table(summary[spec.name], settings.recipe)
    report.section(f"{spec.name}")
    report.table(header, rows, caption=(
        f"Trained on sizes {spec.train_min}..{spec.train_max}; tested on "
        f"{', '.join(str(s) for s in spec.test_sizes if s > spec.train_max)}. "
        f"{settings.metric_label.capitalize()}, median [min-max] over seeds."))
    path = workdir / f"{spec.name}_accuracy_by_size.png"
    title = f"{spec.name}: trained on sizes <= {spec.train_max}"
    if len(settings.variants) >= PANELS_FROM:
      panels = curve_panels(settings, outcomes, spec.name)
      study_report.plot_panels(
          path, panels, xlabel="size",
          ylabel=f"{settings.metric_label} (median, band: min-max over seeds)",
          title=title, vline=spec.train_max + 0.5, vline_label="largest training size",
          styles={k: "--" for series in panels.values() for k in series
                  if k.startswith("randomized")},
          colors={k: "tab:orange" if k.startswith("randomized") else "tab:blue"
                  for series in panels.values() for k in series})
    else:
      series = curves(settings, outcomes, spec.name)
      study_report.plot_curves(
          path, series, xlabel="size", ylabel=settings.metric_label, title=title,
          vline=spec.train_max + 0.5, vline_label="largest training size",
          styles={k: "--" for k in series if "randomized" in k})
    report.image(path, f"{spec.name} accuracy by size")


def results_payload(settings: Settings, summary: Mapping[str, Any],
                    outcomes: Mapping[tuple, Outcome]) -> Dict[str, Any]:
  runs = {}
  for (task, variant, seed), o in outcomes.items():
    runs.setdefault(task, {}).setdefault(variant, []).append(
        {"seed": seed, "fit": o.fit.to_json(), "protocol": o.protocol,
         "aggregate": o.aggregate, "accuracy_by_size": o.evals,
         "first_run": o.first.to_json() if o.first else None})
  return {"settings": json.loads(json.dumps(dataclasses.asdict(settings), default=str)),
          "summary": summary, "runs": runs}


def leaderboard_entry(settings: Settings, outcomes: Mapping[tuple, Outcome]
                      ) -> Dict[str, Any]:
  """variant -> spread over seeds of the mean OOD accuracy (``Settings.metric``) across the
  study's tasks."""
  return {v: suite_mean(settings, outcomes, v) for v in settings.variants}


def report_for(title: str, *, study: str, options: study_report.StudyOptions,
               settings: Settings) -> study_report.Report:
  report = study_report.Report(title, study=study, options=options)
  if options.quick or len(settings.seeds) < 2:
    report.indicative = quick_label(settings)
  return report


def group_verdict(expectation: str, entries: Mapping[str, Mapping[str, Any]],
                  winners: Sequence[str], losers: Sequence[str], recipe: convergence.Recipe,
                  *, key: str = "ood", rescue_steps: int = 0) -> study_report.Verdict:
  """The claim "every winner beats every loser on ``key``", checked beyond the seed spread.

  Variants that fit in a majority of their seeds enter with ``key`` over the seeds that fit;
  the others with ``key`` over every seed, a seed that did not fit counted 0 (a model that did
  not learn the task is given no credit beyond it). The note names them with how far they got
  (their best held-out in-distribution accuracy), so the verdict is always measured.

  Args:
    expectation: the published claim.
    entries: variant -> :func:`summarize_variant` entry.
    winners: expected winners.
    losers: expected losers.
    recipe: the convergence recipe (for the note).
    key: the compared spread (``ood``, ``ood_2x`` or ``ood_far``).
    rescue_steps: the cap of the second runs (for the note), 0 for none.

  Returns:
    The :class:`~experiments.study_report.Verdict`.
  """
  unfit = [v for v in list(winners) + list(losers) if not comparable(entries[v])]
  pick = lambda v: entries[v][key] if comparable(entries[v]) else entries[v][key + STRICT]
  won = {v: pick(v) for v in winners}
  lost = {v: pick(v) for v in losers}
  note = ""
  if unfit:
    note = (f"{', '.join(unfit)} did not fit (>= {recipe.fit_threshold:g} held-out "
            f"in-distribution within {cap_text(recipe.max_steps, rescue_steps)}) in a majority of "
            "seeds (best in-distribution: " + ", ".join(
                f"{v} {cell(entries[v]['best_in_dist'], 3)}" for v in unfit)
            + "); compared with every seed, a seed that did not fit counted 0.")
  return study_report.verdict(
      expectation,
      f"every seed of each of {', '.join(winners)} above every seed of each of "
      f"{', '.join(losers)} ({key.replace('_', ' ')} exact match, seeds that fit; a variant "
      f"that fit in no majority counts its unfit seeds 0) and medians >= {MARGIN:g} apart",
      describe({**won, **lost}) or "no model was trained",
      lambda: compare(won, lost), note=note, note_if_not_held=why_not(won, lost))


def spread_verdict(expectation: str, winners: Mapping[str, Mapping[str, Any]],
                   losers: Mapping[str, Mapping[str, Any]], criterion: str,
                   note: str = "") -> study_report.Verdict:
  """A claim on already computed spreads (e.g. suite means, MRR), checked by :func:`compare`."""
  return study_report.verdict(expectation, criterion, describe({**winners, **losers}),
                              lambda: compare(winners, losers), note=note,
                              note_if_not_held=why_not(winners, losers))


def run_study(options: study_report.StudyOptions, *, study: str, title: str,
              base: ml_collections.ConfigDict, settings: Settings, family: str,
              verdicts: Callable[..., List[study_report.Verdict]],
              extra: Optional[Callable[..., Dict[str, Any]]] = None,
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
    log: progress lines.

  Returns:
    The results written to ``results.json`` (with ``options.shard`` or ``options.progress``:
    :func:`run_without_report`'s).
  """
  started = time.time()
  settings = select_variants(settings, options.pes)
  runs_dir = options.kept_models_dir(study)
  workdir = options.report_dir(study)
  workdir.mkdir(parents=True, exist_ok=True)
  log(f"{study}: {len(settings.tasks)} tasks x {len(settings.variants)} variants x "
      f"{len(settings.seeds)} seeds, to >= {settings.recipe.fit_threshold:g} in-distribution "
      f"or {settings.recipe.max_steps} steps; models in {runs_dir}")
  partial = run_without_report(options, base, settings, study=study, runs_dir=runs_dir, log=log)
  if partial is not None:
    return partial
  outcomes = run_models(base, settings, runs_dir=runs_dir, log=log)
  summary = summaries(settings, outcomes)
  report = report_for(title, study=study, options=options, settings=settings)
  report.started = started  # The header's wall time covers the training.
  for v in verdicts(summary, settings, outcomes):
    report.add_verdict(v)
  board = leaderboard_entry(settings, outcomes)
  report.section("Suite mean", (
      f"Mean OOD {settings.metric_label} over the tasks (a task where a seed did not fit counts "
      "0), median [min-max] over seeds:\n\n") + markdown_ranking(board, settings.metric_label))
  write_common(report, base, settings, outcomes, summary, workdir)
  results = results_payload(settings, summary, outcomes)
  if extra is not None:
    results.update(extra(report, summary, settings, outcomes))
  results["leaderboard"] = {family: board}
  results["verdicts"] = [v.to_json() for v in report.verdicts]
  return study_report.write_report(report, workdir, results, study=study, log=log)


def markdown_ranking(board: Mapping[str, Mapping[str, Any]], metric_label: str = "exact match"
                     ) -> str:
  ordered = sorted(board.items(), key=lambda kv: -(kv[1]["median"] or 0.0))
  return study_report.markdown_table(["variant", f"mean OOD {metric_label}"],
                                     [[v, cell(s, 3)] for v, s in ordered])
