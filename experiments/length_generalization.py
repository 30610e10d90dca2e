"""``python -m experiments.length_generalization [--quick]``: copy / reverse past the train size.

Protocol (Kazemnejad et al. 2023; Ruoss et al. 2023): a small decoder learns a synthetic task
(``copy``: ``s=s``, ``reverse``: ``s=reversed(s)``, lowercase ``s``) from examples that fit rows
of the training length L (string sizes ``1 .. (L - 1) // 2``), once per positional encoding and
seed. Every trained model is then scored on every string size that fits ``4 L`` (up to
``(4 L - 1) // 2``), 1 to 4 times the longest text seen in training.

* Metric: exact match under teacher forcing (all answer bytes are the argmax), which equals
  greedy decoding after the prompt (see ``pejax.data.synthetic_example``). All sizes are scored
  in rows of length 4 L (right padding never influences earlier tokens under causal attention),
  so each model compiles one evaluation.
* In-distribution accuracy = mean over the training sizes. A run whose in-distribution accuracy
  is below ``FIT_THRESHOLD`` did not learn the task; its out-of-distribution (OOD) accuracy is
  not reported (nor used in the verdicts). OOD accuracy = mean over the sizes whose text is
  longer than L (up to 4 L), also split into the bands (L, 2L], (2L, 3L], (3L, 4L].
* Randomized positions (Ruoss et al.): training positions are sorted samples of ``[0, 4 L)``;
  at evaluation the paper keeps sampling (an example of ``k`` bytes gets the first ``k`` of
  ``max(k, L)`` sorted samples, as in training); plain ``0 .. k - 1`` positions are reported too.
  Combined with every PE that reads positions (``<pe>+randomized``); NoPE (no hook) is not
  combined: it ignores positions, so randomizing them changes nothing.
* The PEs are every registered PE that can serve the study's decoder (:func:`study_variants`;
  a PE added as one file joins the study), selected and grouped by their declared capabilities.
  A PE with a bounded table (a ``max_length``: the learned positions) gets ``4 L`` rows so that
  it can be evaluated at all (rows past L are untrained unless positions are randomized).

References:
  Kazemnejad et al., "The Impact of Positional Encoding on Length Generalization in
  Transformers", NeurIPS 2023, arXiv:2305.19466. Ruoss et al., "Randomized Positional Encodings
  Boost Length Generalization of Transformers", ACL 2023, arXiv:2305.16843.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import statistics
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import ml_collections
import numpy as np

from experiments import study_report
from pejax import runtime_env

STUDY = "length_generalization"
TASKS = ("copy", "reverse")
RANDOMIZED = "+randomized"  # Variant label suffix: ``rope+randomized`` is RoPE, sampled positions.
BLIND_STEPS_MULTIPLIER = 6  # Position-blind PEs (NoPE) learn the tasks more slowly.
FIT_THRESHOLD = 0.95  # In-distribution exact match a run must reach before its OOD counts.
MARGIN = 0.02  # "better" means a higher median OOD accuracy by at least this much.
EVAL_MULTIPLE = 4  # Sizes are evaluated up to what fits EVAL_MULTIPLE * L.
BANDS = ((1, 2), (2, 3), (3, 4))  # OOD bands in multiples of L (text length).
REACH_LEVEL = 0.5  # "Solved up to size n": every size <= n has at least this accuracy.
CHANCE_LOSS = math.log(26)  # Answer-byte loss of uniform guessing over the lowercase alphabet.


@dataclasses.dataclass(frozen=True)
class Settings:
  """The sweep of one run of the study.

  Attributes:
    train_len: training row length L.
    steps: training steps per model.
    seeds: seeds per (task, variant).
    tasks: tasks to run.
    variants: variant labels (a PE registry name, ``+randomized`` for sampled positions); empty
      means :func:`study_variants` (every PE that can run the study).
    examples: evaluation examples per string size.
    steps_multiplier: variant -> factor on ``steps`` (NoPE must infer positions from the causal
      mask and learns the tasks more slowly; it gets more steps to reach the in-distribution
      threshold, since only fitting runs are compared); ``None`` means ``blind_multiplier`` for
      every position-blind variant (a PE without any hook).
    blind_multiplier: the default factor of position-blind variants.
  """

  train_len: int
  steps: int
  seeds: tuple
  tasks: tuple = TASKS
  variants: tuple = ()
  examples: int = 32
  steps_multiplier: Optional[tuple] = None
  blind_multiplier: int = BLIND_STEPS_MULTIPLIER

  def steps_for(self, variant: str) -> int:
    if self.steps_multiplier is None:
      blind = not pe_class_uses_positions(parse_variant(variant)[0])
      return int(self.steps * (self.blind_multiplier if blind else 1))
    return int(self.steps * dict(self.steps_multiplier).get(variant, 1))

  @property
  def train_size(self) -> int:
    """Largest string size seen in training."""
    return (self.train_len - 1) // 2

  @property
  def eval_len(self) -> int:
    return EVAL_MULTIPLE * self.train_len

  @property
  def max_position(self) -> int:
    """Range of randomized positions and rows of the learned table."""
    return EVAL_MULTIPLE * self.train_len


def parse_variant(variant: str) -> tuple:
  """``"rope+randomized"`` -> ``("rope", True)``; ``"alibi"`` -> ``("alibi", False)``."""
  if variant.endswith(RANDOMIZED):
    return variant[:-len(RANDOMIZED)], True
  return variant, False


def _pe_class(name: str):
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top
  return registry.get_pe_class(name) if name in registry.pe_names() else None


def pe_class_uses_positions(name: str) -> bool:
  """Whether the registered PE ``name`` overrides any hook (NoPE: none; unknown names: True)."""
  from pejax.nn.positional.interface import PositionalEncoding  # pylint: disable=g-import-not-at-top
  cls = _pe_class(name)
  if cls is None:
    return True
  return any(getattr(cls, hook) is not getattr(PositionalEncoding, hook)
             for hook in ("embed", "rotate", "bias", "content_bias", "logits"))


def _is_absolute(name: str) -> bool:
  cls = _pe_class(name)
  return bool(cls is not None and cls.absolute)


def _is_relative_bias(name: str) -> bool:
  """A translation-invariant bias of positions only (T5, ALiBi, KERPLE, Sandwich)."""
  from pejax.nn.positional.interface import PositionalEncoding  # pylint: disable=g-import-not-at-top
  cls = _pe_class(name)
  return bool(cls is not None and cls.translation_invariant and not cls.content_aware
              and cls.bias is not PositionalEncoding.bias
              and cls.rotate is PositionalEncoding.rotate)


def study_variants(base: ml_collections.ConfigDict, *, quick: bool = False) -> tuple:
  """Every registered PE that can run the study, plus ``+randomized`` for those reading positions.

  Quick mode keeps one PE of each kind (in registry order): position-blind, absolute without a
  table, rotary translation-invariant, preferring one that takes a RoPE scaling (the family the
  context-extension studies scale), and its randomized variant.

  Args:
    base: the study's base config.
    quick: the small subset.

  Returns:
    Variant labels.
  """
  from pejax.nn.positional.interface import PositionalEncoding  # pylint: disable=g-import-not-at-top
  names = study_report.runnable_pes(base)
  if quick:
    def first(pred):
      scalable = lambda n: "scaling" in _pe_class(n).config_class.field_types()
      ordered = sorted(names, key=lambda n: not scalable(n))  # Stable: registry order.
      return next((n for n in ordered if pred(n, _pe_class(n))), None)
    plain = lambda c: not (c.per_layer or c.content_aware or c.length_dependent)
    picks = [
        first(lambda n, c: not pe_class_uses_positions(n)),
        first(lambda n, c: c.absolute and c.embed is not PositionalEncoding.embed
              and not _table_bounded(base, n)),
        first(lambda n, c: c.translation_invariant and plain(c)
              and c.rotate is not PositionalEncoding.rotate and not c.causal_only),
    ]
    picks = [p for p in picks if p]
    return tuple(picks) + tuple(p + RANDOMIZED for p in picks[-1:] if pe_class_uses_positions(p))
  return names + tuple(n + RANDOMIZED for n in names if pe_class_uses_positions(n))


def _table_bounded(base: ml_collections.ConfigDict, name: str) -> bool:
  trial = base.copy_and_resolve_references()
  with trial.unlocked():
    trial.pe.name = name
  return study_report.pe_max_length(trial) is not None


def base_config(options: study_report.StudyOptions) -> ml_collections.ConfigDict:
  """A 2-layer d=64 decoder on the task at L=16, with the user's overrides applied."""
  from pejax import experiment_config  # pylint: disable=g-import-not-at-top
  config = experiment_config.get_default_config()
  config.model.num_layers = 2
  config.model.d_model = 64
  config.model.num_heads = 4
  config.data.name = "copy"
  config.data.train_len = 16
  config.data.batch_size = 32
  config.train.steps = options.steps or (800 if options.quick else 1000)
  config.train.log_every = 100
  config.train.eval_every = 10**9  # Tasks have no validation split; accuracy comes after.
  config.train.checkpoint_every = int(config.train.steps)
  config.train.keep_checkpoints = 1
  config.optim.warmup_steps = 50
  study_report.apply_overrides(config, options.overrides)
  return config


def settings_for(options: study_report.StudyOptions,
                 config: ml_collections.ConfigDict) -> Settings:
  """Quick: copy only, 4 variants, 1 seed. Full: both tasks, all variants, 3 seeds."""
  if options.quick:
    return Settings(train_len=int(config.data.train_len), steps=int(config.train.steps),
                    seeds=tuple(options.seed_list((0,))), tasks=("copy",),
                    variants=study_variants(config, quick=True), examples=16,
                    blind_multiplier=2)
  return Settings(train_len=int(config.data.train_len), steps=int(config.train.steps),
                  seeds=tuple(options.seed_list((0, 1, 2))), variants=study_variants(config))


def variant_config(base: ml_collections.ConfigDict, settings: Settings, *, task: str,
                   variant: str, seed: int) -> ml_collections.ConfigDict:
  """``base`` with one task, PE variant and seed."""
  pe, randomized = parse_variant(variant)
  config = base.copy_and_resolve_references()
  with config.unlocked():
    config.data.name = task
    config.pe.name = pe
    config.seed = int(seed)
    config.train.steps = settings.steps_for(variant)
    config.train.checkpoint_every = settings.steps_for(variant)
    if (study_report.pe_max_length(config) is not None  # A bounded table: 4L rows.
        and "max_position" in _pe_class(pe).config_class.field_types()):
      config.pe.max_position = settings.max_position
    if randomized:
      config.pe.randomized_max_position = settings.max_position
  return config


# ----------------------------------------------------------------------------------------------
# Evaluation.


def eval_positions(lengths: Sequence[int], *, row_len: int, train_len: int,
                   max_position: Optional[int], seed: int) -> np.ndarray:
  """Positions ``[B, row_len]`` for examples of ``lengths`` bytes (B = len(lengths)).

  ``max_position=None`` gives ``0 .. row_len - 1``. Otherwise example ``b`` of ``k`` bytes gets
  the first ``k`` of ``max(k, train_len)`` sorted distinct samples of ``[0, max_position)``
  (the training distribution of randomized positions for ``k <= train_len``); the padding after
  it repeats the last position (it never influences the scored tokens).
  """
  out = np.tile(np.arange(row_len, dtype=np.int32), (len(lengths), 1))
  if max_position is None:
    return out
  rng = np.random.default_rng(seed)
  for b, k in enumerate(lengths):
    drawn = np.sort(rng.choice(max_position, size=max(int(k), train_len), replace=False))[:k]
    out[b, :k] = drawn
    out[b, k:] = drawn[-1]
  return out


def accuracy_by_size(model, task: str, *, sizes: Sequence[int], examples: int, row_len: int,
                     seed: int, positions: Callable[[Sequence[int]], np.ndarray],
                     chunk: int = 256) -> Dict[int, float]:
  """Exact-match accuracy of ``model`` for each string size (teacher forcing).

  Args:
    model: a ``pejax.nn.Decoder``.
    task: ``copy`` or ``reverse``.
    sizes: string sizes to score; each must fit ``row_len``.
    examples: examples per size.
    row_len: row length (all sizes share it, so the model compiles once).
    seed: data seed of the evaluation examples.
    positions: maps the example byte lengths ``[B]`` to positions ``[B, row_len]``.
    chunk: rows per forward pass.

  Returns:
    size -> fraction of its examples whose every answer byte is the argmax.
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from pejax import data as data_lib  # pylint: disable=g-import-not-at-top
  from pejax import eval as eval_lib  # pylint: disable=g-import-not-at-top
  from pejax.data import synthetic_example  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(seed)
  batch_examples, owners = [], []
  for size in sizes:
    batch_examples += data_lib.synthetic_examples(
        task, rng, batch_size=examples, seq_len=row_len, min_size=size, max_size=size)
    owners += [size] * examples
  batch = synthetic_example.encode_examples(batch_examples, seq_len=row_len)
  batch["positions"] = positions([len(e.text) for e in batch_examples])
  correct = []
  for start in range(0, len(owners), chunk):
    part = {k: jnp.asarray(v[start:start + chunk]) for k, v in batch.items()}
    correct.append(np.asarray(eval_lib.answer_exact_match(
        model, part["inputs"], part["targets"], part["positions"], part["loss_mask"])))
  correct = np.concatenate(correct)
  owners = np.asarray(owners)
  return {int(s): float(np.mean(correct[owners == s])) for s in sizes}


def size_band(size: int, train_len: int) -> float:
  """Text length of a string size, in multiples of L (``2 n + 1`` tokens are fed)."""
  return (2 * size + 1) / train_len


def aggregate(acc: Mapping[Any, float], *, train_len: int) -> Dict[str, Optional[float]]:
  """In-distribution, OOD and per-band means of an accuracy-by-size dict."""
  train_size = (train_len - 1) // 2
  by_size = {int(k): float(v) for k, v in acc.items()}
  def mean(pred):
    values = [v for s, v in by_size.items() if pred(s)]
    return float(np.mean(values)) if values else None
  out = {"in_dist": mean(lambda s: s <= train_size),
         "ood": mean(lambda s: s > train_size)}
  for lo, hi in BANDS:
    out[f"{lo}-{hi}x"] = mean(
        lambda s, lo=lo, hi=hi: s > train_size and lo < size_band(s, train_len) <= hi)
  reach = 0
  for size in sorted(by_size):
    if by_size[size] < REACH_LEVEL:
      break
    reach = size
  out["reach"] = float(reach)
  return out


def evaluate_run(info: study_report.RunInfo, config: ml_collections.ConfigDict,
                 settings: Settings) -> Dict[str, Any]:
  """Accuracy by size of one trained model, both position protocols (cached in its run dir)."""
  randomized = int(config.pe.randomized_max_position or 0)
  sizes = list(range(1, (settings.eval_len - 1) // 2 + 1))
  if not study_report.is_trained(info.run_dir, info.steps):
    # Training stopped early (a signal): never evaluate, or cache, a half-trained model.
    raise RuntimeError(f"{info.run_dir} has no checkpoint of step {info.steps}: training stopped "
                       "early; re-run the same command to finish it")

  def compute():
    model = study_report.load_model(info.run_dir, config)
    out = {}
    protocols = {"arange": None}
    if randomized:
      protocols = {"sampled": randomized, "arange": None}
    for name, max_position in protocols.items():
      positions = lambda lengths, m=max_position: eval_positions(
          lengths, row_len=settings.eval_len, train_len=settings.train_len, max_position=m,
          seed=int(config.seed) + 7)
      acc = accuracy_by_size(model, str(config.data.name), sizes=sizes,
                             examples=settings.examples, row_len=settings.eval_len,
                             seed=int(config.seed) + 1000, positions=positions)
      out[name] = {str(k): v for k, v in acc.items()}
    return out

  key = {"sizes": sizes, "examples": settings.examples, "eval_len": settings.eval_len,
         "steps": info.steps, "randomized": randomized, "version": 1}
  return study_report.cached(info.run_dir / f"study_{STUDY}_eval.json", key, compute)


# ----------------------------------------------------------------------------------------------
# Summaries and verdicts.


def seed_spread(values: Sequence[Optional[float]]) -> Dict[str, Any]:
  """min / median / max over the seeds that have a value."""
  present = [float(v) for v in values if v is not None]
  if not present:
    return {"min": None, "median": None, "max": None, "n": 0}
  return {"min": min(present), "median": float(statistics.median(present)),
          "max": max(present), "n": len(present)}


def summarize(per_seed: Mapping[str, Sequence[Mapping[str, Any]]], *,
              threshold: float = FIT_THRESHOLD) -> Dict[str, Any]:
  """Per variant: in-distribution spread, fitting seeds, OOD spreads over the fitting seeds.

  Args:
    per_seed: variant -> one ``aggregate`` dict per seed (the main protocol).
    threshold: in-distribution accuracy a seed must reach for its OOD numbers to count.

  Returns:
    variant -> ``{"in_dist", "fit", "seeds", "ood", "1-2x", ...}`` (spreads; OOD spreads only
    over fitting seeds, ``None`` median when no seed fit).
  """
  out = {}
  for variant, seeds in per_seed.items():
    fitting = [s for s in seeds if s.get("in_dist") is not None and s["in_dist"] >= threshold]
    entry = {"in_dist": seed_spread([s.get("in_dist") for s in seeds]),
             "fit": len(fitting), "seeds": len(seeds)}
    for key in ["ood", "reach"] + [f"{lo}-{hi}x" for lo, hi in BANDS]:
      entry[key] = seed_spread([s.get(key) for s in fitting])
    out[variant] = entry
  return out


def comparable(summary: Mapping[str, Any], variant: str) -> bool:
  """Whether a majority of the variant's seeds fit in-distribution (it enters the verdicts)."""
  entry = summary.get(variant)
  return entry is not None and 2 * entry["fit"] > entry["seeds"]


def _median(summary: Mapping[str, Any], variant: str, key: str = "ood") -> Optional[float]:
  """Median over the fitting seeds, ``None`` unless the variant is :func:`comparable`."""
  if not comparable(summary, variant):
    return None
  return summary[variant][key]["median"]


def _describe(summary: Mapping[str, Any], variants: Sequence[str], key: str = "ood") -> str:
  parts = []
  for v in variants:
    if v not in summary:
      parts.append(f"{v} not run")
    elif not comparable(summary, v):
      parts.append(f"{v} did not fit in-distribution ({summary[v]['fit']}/{summary[v]['seeds']} "
                   "seeds)")
    else:
      parts.append(f"{v} {study_report.fmt(_median(summary, v, key), 3)}")
  return ", ".join(parts)


def better_than(summary: Mapping[str, Any], winners: Sequence[str], losers: Sequence[str], *,
                margin: float = MARGIN) -> Optional[bool]:
  """Whether every measurable winner's median OOD beats every measurable loser's by ``margin``.

  PEs that did not fit in-distribution in a majority of seeds are left out; ``None`` (not
  measurable) when no winner or no loser is left.
  """
  won = [_median(summary, v) for v in winners if _median(summary, v) is not None]
  lost = [_median(summary, v) for v in losers if _median(summary, v) is not None]
  if not won or not lost:
    return None
  return min(won) >= max(lost) + margin


def verdicts(summaries: Mapping[str, Mapping[str, Any]]) -> List[study_report.Verdict]:
  """The published expectations, checked per task on median OOD accuracy over fitting seeds."""
  out = []
  for task, summary in summaries.items():
    # Grouped by the capabilities the PE classes declare (plain variants only).
    plain_variants = [v for v in summary if not parse_variant(v)[1]]
    absolute = [v for v in plain_variants if _is_absolute(v)]
    blind = [v for v in plain_variants if not pe_class_uses_positions(v)]
    relative = [v for v in plain_variants if _is_relative_bias(v)]
    claims = [
        ("NoPE generalizes to longer inputs better than absolute PEs (Kazemnejad et al. 2023)",
         blind, absolute),
        ("relative PEs (T5, ALiBi) generalize better than absolute PEs (Kazemnejad et al. 2023)",
         relative, absolute),
    ]
    for randomized in summary:
      plain, is_randomized = parse_variant(randomized)
      if is_randomized and plain in summary:
        claims.append((f"randomized positions improve length generalization of {plain} "
                       "(Ruoss et al. 2023)", [randomized], [plain]))
    for expectation, winners, losers in claims:
      if not winners or not losers or any(v not in summary for v in winners + losers):
        continue
      out.append(study_report.verdict(
          f"{task}: {expectation}",
          f"median OOD exact match (sizes longer than L, up to 4L; over the seeds reaching >= "
          f"{FIT_THRESHOLD:g} in-distribution; only PEs where most seeds do) of every one of "
          f"{', '.join(winners)} >= that of every one of {', '.join(losers)} + {MARGIN:g}",
          _describe(summary, winners + losers),
          lambda w=winners, l=losers, s=summary: better_than(s, w, l),
          note=_note(summary, winners, losers)))
  return out


def _note(summary: Mapping[str, Any], winners: Sequence[str], losers: Sequence[str]) -> str:
  names = list(winners) + list(losers)
  unfit = [v for v in names if not comparable(summary, v)]
  values = [_median(summary, v) for v in names if _median(summary, v) is not None]
  if unfit:
    return (f"{', '.join(unfit)} did not reach {FIT_THRESHOLD:g} in-distribution exact match in "
            "a majority of seeds, so they are left out of the comparison.")
  if values and max(values) < MARGIN:
    return ("every PE compared scores ~0 out of distribution at this scale: the tiny models "
            "learned the training lengths only, so no ordering can show.")
  return ""


# ----------------------------------------------------------------------------------------------
# Report.


def _cell(spread: Mapping[str, Any], digits: int = 2) -> str:
  if spread.get("median") is None:
    return "n/a"
  if spread["n"] == 1:
    return study_report.fmt(spread["median"], digits)
  return (f"{study_report.fmt(spread['median'], digits)} "
          f"[{study_report.fmt(spread['min'], digits)}-{study_report.fmt(spread['max'], digits)}]")


def results_table(summary: Mapping[str, Any], losses: Mapping[str, Sequence[Optional[float]]]
                  ) -> tuple[List[str], List[List[str]]]:
  """Header and rows of one task's table (median [min-max] over seeds)."""
  header = ["variant", "final train loss", "in-dist exact match", "seeds fit",
            "OOD (L, 4L]"] + [f"OOD ({lo}L, {hi}L]" for lo, hi in BANDS] + [
                f"solved up to size (>= {REACH_LEVEL:g})"]
  rows = []
  for variant, entry in summary.items():
    loss = seed_spread(losses.get(variant, []))
    row = [variant, _cell(loss, 3), _cell(entry["in_dist"], 3),
           f"{entry['fit']}/{entry['seeds']}"]
    if entry["fit"] == 0:
      row += ["did not fit in-distribution"] + [""] * (len(BANDS) + 1)
    else:
      row += ([_cell(entry["ood"], 3)] + [_cell(entry[f"{lo}-{hi}x"], 3) for lo, hi in BANDS]
              + [_cell(entry["reach"], 0)])
    rows.append(row)
  return header, rows


def _curves(per_size: Mapping[str, Sequence[Mapping[str, float]]], fit: Mapping[str, List[bool]]
            ) -> Dict[str, List[tuple]]:
  """variant -> (size, median, min, max) over the fitting seeds (all seeds if none fit)."""
  series = {}
  for variant, seeds in per_size.items():
    chosen = [s for s, ok in zip(seeds, fit[variant]) if ok] or list(seeds)
    k, n = sum(fit[variant]), len(fit[variant])
    label = f"{variant} ({k}/{n} seeds fit)" if k else f"{variant} (did not fit)"
    points = []
    for size in sorted(int(k) for k in chosen[0]):
      values = [s[str(size)] for s in chosen]
      points.append((size, float(np.median(values)), float(min(values)), float(max(values))))
    series[label] = points
  return series


def run(options: study_report.StudyOptions, *, settings: Optional[Settings] = None,
        log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Trains every (task, variant, seed), evaluates by size and writes the report.

  Args:
    options: flags (or their Python equivalent).
    settings: the sweep; default :func:`settings_for` ``options`` (tests pass tiny ones).
    log: progress lines.

  Returns:
    The results dict written to ``results.json``.
  """
  base = base_config(options)
  settings = settings or settings_for(options, base)
  if not settings.variants:
    settings = dataclasses.replace(settings, variants=study_variants(base))
  runs_dir = options.models_dir(STUDY)
  workdir = options.report_dir(STUDY)
  workdir.mkdir(parents=True, exist_ok=True)
  n_runs = len(settings.tasks) * len(settings.variants) * len(settings.seeds)
  log(f"{STUDY}: {len(settings.tasks)} tasks x {len(settings.variants)} variants x "
      f"{len(settings.seeds)} seeds = {n_runs} models, L={settings.train_len} (sizes 1.."
      f"{settings.train_size}), {settings.steps} steps, eval sizes up to "
      f"{(settings.eval_len - 1) // 2}; models in {runs_dir}")
  started = time.time()
  report = study_report.Report("Length generalization on copy and reverse", study=STUDY,
                               options=options)
  results: Dict[str, Any] = {"settings": dataclasses.asdict(settings),
                             "fit_threshold": FIT_THRESHOLD, "margin": MARGIN, "tasks": {}}
  summaries = {}
  done = 0
  # Train the slow learners (more steps) last, so the cheap models are done first.
  slow = [v for v in settings.variants if settings.steps_for(v) > settings.steps]
  order = [(t, v) for v in settings.variants if v not in slow for t in settings.tasks]
  order += [(t, v) for v in slow for t in settings.tasks]
  outcomes: Dict[tuple, Dict[str, Any]] = {}
  for task, variant in order:
    for seed in settings.seeds:
      config = variant_config(base, settings, task=task, variant=variant, seed=seed)
      info = study_report.train_run(config, runs_dir=runs_dir, log=lambda _: None)
      evals = evaluate_run(info, config, settings)
      main_protocol = "sampled" if "sampled" in evals else "arange"
      agg = aggregate(evals[main_protocol], train_len=settings.train_len)
      outcomes[(task, variant, seed)] = {"info": info, "evals": evals, "protocol": main_protocol,
                                         "aggregate": agg}
      done += 1
      log(f"[{done}/{n_runs}] {task} {variant} seed {seed}: train loss "
          f"{study_report.fmt(info.train_loss, 3)}, in-dist {agg['in_dist']:.3f}, OOD "
          f"{agg['ood']:.3f} ({'reused' if info.reused else f'{info.seconds:.0f}s'}, "
          f"{(time.time() - started) / 60:.1f} min so far)")
  for task in settings.tasks:
    per_seed: Dict[str, List[Dict[str, Any]]] = {}
    per_seed_arange: Dict[str, List[Dict[str, Any]]] = {}
    per_size: Dict[str, List[Dict[str, float]]] = {}
    losses: Dict[str, List[Optional[float]]] = {}
    runs: Dict[str, List[Dict[str, Any]]] = {}
    for variant in settings.variants:
      for seed in settings.seeds:
        o = outcomes[(task, variant, seed)]
        per_seed.setdefault(variant, []).append(o["aggregate"])
        per_seed_arange.setdefault(variant, []).append(
            aggregate(o["evals"]["arange"], train_len=settings.train_len))
        per_size.setdefault(variant, []).append(o["evals"][o["protocol"]])
        losses.setdefault(variant, []).append(o["info"].train_loss)
        runs.setdefault(variant, []).append({
            "seed": seed, "run": o["info"].to_json(), "steps": settings.steps_for(variant),
            "protocol": o["protocol"], "aggregate": o["aggregate"],
            "accuracy_by_size": o["evals"]})
    summary = summarize(per_seed)
    summaries[task] = summary
    results["tasks"][task] = {"summary": summary, "summary_arange_positions":
                              summarize(per_seed_arange), "runs": runs,
                              "losses": losses}
    fit = {v: [s["in_dist"] >= FIT_THRESHOLD for s in per_seed[v]] for v in per_seed}
    study_report.plot_curves(
        workdir / f"{task}_accuracy_by_size.png", _curves(per_size, fit),
        xlabel="string size n (text 2n+2 bytes)", ylabel="exact-match accuracy",
        title=f"{task}: trained on sizes <= {settings.train_size} (L={settings.train_len})",
        vline=settings.train_size + 0.5, vline_label="largest training size",
        styles={label: "--" for label in _curves(per_size, fit) if "randomized" in label})
  verdict_list = verdicts(summaries)
  results["verdicts"] = [v.to_json() for v in verdict_list]
  _write_report(report, settings, base, results, verdict_list, workdir)
  log(f"wrote {workdir / 'report.md'} ({(time.time() - started) / 60:.1f} min)")
  return results


def training_minutes(run_dirs: Sequence[Any]) -> float:
  """Training wall time of runs from their ``metrics.jsonl`` (also when reused later).

  Each run's time is the span of its train records, extrapolated by one logging interval (the
  first record comes one interval after the start); compile and evaluation time are excluded.
  """
  from pejax.train import read_metrics  # pylint: disable=g-import-not-at-top
  total = 0.0
  for run_dir in run_dirs:
    times = [r["wall_time"] for r in read_metrics(run_dir)
             if r.get("split") == "train" and "wall_time" in r]
    if len(times) >= 2:
      total += (times[-1] - times[0]) * len(times) / (len(times) - 1)
  return total / 60


def fit_summary(tasks: Mapping[str, Mapping[str, Any]]) -> str:
  """One line per task: which variants reached the in-distribution threshold, in how many seeds.

  Args:
    tasks: task -> ``{"summary": summarize(...)}``.
  """
  lines = []
  unfit_any = False
  for task, data in tasks.items():
    summary = data["summary"]
    fit = [f"{v} ({e['fit']}/{e['seeds']})" for v, e in summary.items() if comparable(summary, v)]
    unfit = [f"{v} ({e['fit']}/{e['seeds']}, median {study_report.fmt(e['in_dist']['median'], 3)})"
             for v, e in summary.items() if not comparable(summary, v)]
    unfit_any = unfit_any or bool(unfit)
    lines.append(f"- {task}: reached {FIT_THRESHOLD:g} in a majority of seeds: "
                 f"{', '.join(fit) or 'none'}; did not: {', '.join(unfit) or 'none'}.")
  if unfit_any:
    lines.append("")
    lines.append(
        "A variant that fits in no more than half of its seeds does not enter the verdicts (its "
        "OOD numbers are shown only for the seeds that fit): at this budget it is under-trained, "
        "which says nothing about its length generalization. The curves of variants where no "
        "seed fits are still drawn, labelled \"did not fit\". More steps (`--steps`, e.g. 3000 "
        "or more, ideally on an accelerator) are the remedy.")
  return "\n".join(lines)


def _write_report(report: study_report.Report, settings: Settings,
                  base: ml_collections.ConfigDict, results: Mapping[str, Any],
                  verdict_list: Sequence[study_report.Verdict], workdir: pathlib.Path) -> None:
  for v in verdict_list:
    report.add_verdict(v)
  m = base.model
  run_dirs = [r["run"]["run_dir"] for data in results["tasks"].values()
              for seeds in data["runs"].values() for r in seeds]
  report.section("Setup", "\n".join([
      f"- model: decoder, {m.num_layers} layers, d_model {m.d_model}, {m.num_heads} heads, "
      f"{m.mlp} MLP; byte vocabulary; AdamW lr {base.optim.learning_rate:g} (warm-up "
      f"{base.optim.warmup_steps}, cosine), batch {base.data.batch_size}, {settings.steps} steps "
      "per model" + "".join(f", {v}: {settings.steps_for(v)} steps (it learns more slowly: "
                           "positions must be inferred from the causal mask)"
                           for v in settings.variants if settings.steps_for(v) > settings.steps),
      f"- tasks: {', '.join(settings.tasks)} over a 26-letter alphabet; training rows of L = "
      f"{settings.train_len} tokens hold string sizes 1..{settings.train_size}; evaluation: every "
      f"size 1..{(settings.eval_len - 1) // 2} ({settings.examples} examples each) in rows of "
      f"{settings.eval_len} = {EVAL_MULTIPLE}L",
      f"- seeds: {', '.join(str(s) for s in settings.seeds)} (tables show median [min-max] over "
      "seeds)",
      f"- metric: exact match under teacher forcing (every answer byte is the argmax). "
      f"In-distribution = mean over training sizes; a seed counts only if it reaches "
      f"{FIT_THRESHOLD:g} there, otherwise its OOD accuracy is not reported. OOD = mean over "
      "sizes whose text is longer than L (up to 4L), also by band of text length.",
      f"- randomized positions (Ruoss et al. 2023): training positions are sorted samples of "
      f"[0, {settings.max_position}); evaluation keeps sampling (the paper's protocol; an "
      "example of k bytes gets the first k of max(k, L) sorted samples). Combined with "
      "the PEs that read positions (for a bounded table it is what trains its rows past L). Not "
      "combined with NoPE, which ignores positions.",
      f"- a PE with a bounded table (learned positions) has {settings.max_position} rows (rows "
      "past L are untrained without randomization); other PEs use their defaults (T5: 32 "
      "buckets, max_distance 128).",
      f"- training time of the {len(run_dirs)} models on this machine (from their metrics logs, "
      f"compilation and evaluation excluded): {training_minutes(run_dirs):.0f} min",
      f"- loss level of uniform guessing over the alphabet: {CHANCE_LOSS:.3f} nats/answer byte "
      "(the task analogue of the unigram loss); every model's final training loss is in the "
      "tables.",
  ]))
  report.section("Which models fit in-distribution", fit_summary(results["tasks"]))
  for task, data in results["tasks"].items():
    summary = data["summary"]
    header, rows = results_table(summary, data["losses"])
    report.section(f"{task}")
    report.table(header, rows, caption=(
        "Exact-match accuracy, median [min-max] over seeds; OOD columns over the seeds that fit "
        "in-distribution. Randomized variants: sampled evaluation positions."))
    report.text("Accuracy by string size: median over the seeds that fit (band: min-max), or over "
                "all seeds for variants labelled \"did not fit\"; dashed: randomized positions.")
    report.image(workdir / f"{task}_accuracy_by_size.png", f"{task} accuracy by size")
    arange = data["summary_arange_positions"]
    rand_rows = []
    for variant in summary:
      if parse_variant(variant)[1]:
        rand_rows.append([variant, _cell(summary[variant]["ood"], 3)
                          if summary[variant]["fit"] else "did not fit",
                          _cell(arange[variant]["ood"], 3) if arange[variant]["fit"]
                          else "did not fit"])
    if rand_rows:
      report.table(["variant", "OOD, sampled positions (paper)", "OOD, positions 0..k-1"],
                   rand_rows, caption="Randomized variants under both evaluation protocols.")
  report.write(workdir, results)


if __name__ == "__main__":
  runtime_env.apply_runtime_env()  # Re-executes once with the allocator settings.
  study_report.run_as_launch("length_generalization")
