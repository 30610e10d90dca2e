r"""Length extrapolation of every PE (Press et al. 2022, "Train Short, Test Long").

    python -m experiments.extrapolation --quick        # 1 seed, L=64, 100 steps: ~5 min
    python -m experiments.extrapolation                # 2 seeds, L=128, 2000 steps: ~6 h
    python -m experiments.extrapolation --seeds=0,1,2  # adds a seed (trains only the new one)
    python launch.py --study=extrapolation --quick     # the same through the entry point

(Times on 2 CPU cores shared with other jobs: quick 4.5 min measured; full estimated from the
300-step full mode of before issue 45, which took 55 min; on an
accelerator scale it up with e.g. ``python launch.py --study=extrapolation
--config.model.d_model=512 --config.model.num_layers=8 --steps=5000``.)

Trains one decoder per positional encoding and seed (every registered PE that can serve the
study's decoder, :func:`study_pes`: a PE added as one file joins the study) at length L on the built-in stdlib byte corpus, then measures perplexity at 1x-16x L in both
protocols of the ALiBi paper (``nonoverlap`` windows and ``sliding`` windows with stride L/4).
A PE with a bounded table (a ``max_length``, e.g. the learned positions, sized L here) reports
n/a past it.
Writes ``report.md`` (tables, plots, expectation vs measured), ``results.json`` and
``extrapolation_<protocol>.png`` into ``--workdir``; models go to ``--config.study.runs_dir``,
by default ``<workdir>/models``, where git keeps each model's records (``config.json``,
``status.json``, ``metrics.jsonl``, its cached evaluation) but not its checkpoints
(``.gitignore``). A finished model is reused from those records, so a run too long for one
session is committed in parts and resumes on any clone; ``--shard=I/N`` trains every N-th model
(no report), ``--pes`` a subset.

References:
  Press, Smith and Lewis, "Train Short, Test Long: Attention with Linear Biases Enables Input
  Length Extrapolation", ICLR 2022, arXiv:2108.12409.
"""

from __future__ import annotations

# Run as a program: re-execute with the allocator settings before the imports below, not
# after them (pejax.runtime_env; importing it loads nothing else).
from pejax import runtime_env  # pylint: disable=wrong-import-position
runtime_env.apply_when_main(__name__)
# pylint: disable=wrong-import-position

import dataclasses
import math
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import ml_collections

from experiments.study import expectations
from experiments.study import markdown_report
from experiments.study import pe_capabilities
from experiments.study import result_cache
from experiments.study import seed_statistics
from experiments.study import study_options
from experiments.study import table_cells
from experiments.study import trained_runs
from pejax.eval import report as eval_report

STUDY = "extrapolation"
STUDY_FLAGS = ("--pes", "--shard")  # A subset of the PEs; every N-th model (no report).
MODES = ("nonoverlap", "sliding")
# The encodings of the ALiBi paper's comparison (its Fig. 1): its claims are about these.
PRESS_PES = ("sinusoidal", "rope", "t5", "alibi")

# Verdict thresholds (stated in the report next to each verdict).
ALIBI_HOLD_RATIO = 1.10  # ALiBi: perplexity at the longest length <= 1.10 x its perplexity at L.
SHARP_RATIO = 2.0  # "degrades sharply": perplexity at the longest length >= 2 x at L.
DEGRADE_RATIO = 1.5  # "degrades": perplexity at the longest length >= 1.5 x at L.
NOPE_MARGIN = 0.02  # Control: a PE's positions trained if it beats NoPE at L by >= 2% per seed.
FLAT_TOLERANCE = 0.01  # Training flattened: validation loss fell < 1% over its last quarter.
FULL_STEPS = 2000  # Full mode (issue 45: train until flat; the report states how far each got).
FULL_EVAL_TOKENS = 32768  # Full mode: validation tokens scored per (length, protocol) cell.
SCALE_NOTE = ("Likely reason at this scale: briefly trained small models rely mostly on short-range "
              "context, so unfamiliar positions far away cost them little; more steps (the full "
              "mode, or --steps) sharpen the differences.")


@dataclasses.dataclass(frozen=True)
class Settings:
  """The sweep of one run of the study.

  Attributes:
    train_len: training length L.
    steps: training steps per model.
    seeds: seeds per PE.
    multipliers: evaluation lengths as multiples of L.
    eval_tokens: validation tokens scored per (length, protocol).
    pes: encodings compared; empty means :func:`study_pes` (every registered PE that can run).
  """

  train_len: int
  steps: int
  seeds: tuple
  multipliers: tuple
  eval_tokens: int
  pes: tuple = ()

  @property
  def lengths(self) -> List[int]:
    return [self.train_len * m for m in self.multipliers]


def base_config(options: study_options.StudyOptions) -> ml_collections.ConfigDict:
  """The default experiment at the study's mode settings, with the user's overrides applied."""
  from pejax import experiment_config  # pylint: disable=g-import-not-at-top
  config = experiment_config.get_default_config()
  config.data.train_len = 64 if options.quick else 128
  config.train.steps = options.steps or (100 if options.quick else FULL_STEPS)
  config.train.eval_every = 50 if options.quick else 100
  config.train.log_every = 10 if options.quick else 25
  config.optim.warmup_steps = 20 if options.quick else 50
  study_options.apply_overrides(config, options.overrides)
  return config


def settings_for(options: study_options.StudyOptions,
                 config: ml_collections.ConfigDict) -> Settings:
  """The sweep for ``options`` (quick: 1 seed, 1-8x, 4096 tokens a cell; full: 2 seeds, 1-16x,
  :data:`FULL_EVAL_TOKENS` a cell)."""
  return Settings(
      train_len=int(config.data.train_len), steps=int(config.train.steps),
      seeds=tuple(options.seed_list((0,) if options.quick else (0, 1))),
      multipliers=(1, 2, 4, 8) if options.quick else (1, 2, 4, 8, 16),
      eval_tokens=4096 if options.quick else FULL_EVAL_TOKENS)


def study_pes(base: ml_collections.ConfigDict) -> tuple:
  """Every registered PE that can run the study: its default config serves ``base``'s decoder.

  Any PE can be trained as a causal language model and evaluated past L (a dense-only PE is
  evaluated densely at every length; a bounded table reports n/a past its size).

  Args:
    base: the study's base config.

  Returns:
    Registry names, sorted.
  """
  return pe_capabilities.runnable_pes(base)


def bounded_pes(base: ml_collections.ConfigDict, pes: Sequence[str]) -> Dict[str, int]:
  """``pe -> max_length`` for the PEs whose model in this study has a bounded table.

  Args:
    base: the study's base config.
    pes: registry names.

  Returns:
    The PEs with a ``max_length`` (the learned table: ``data.train_len`` rows) and its value.
  """
  out = {}
  for pe in pes:
    limit = pe_capabilities.pe_max_length(pe_config(base, pe, 0))
    if limit is not None:
      out[pe] = limit
  return out


def pe_config(base: ml_collections.ConfigDict, pe: str, seed: int) -> ml_collections.ConfigDict:
  """``base`` with one PE and seed."""
  config = base.copy_and_resolve_references()
  with config.unlocked():
    config.pe.name = pe
    config.seed = int(seed)
  return config


def evaluate_run(info: trained_runs.RunInfo, config: ml_collections.ConfigDict, *,
                 lengths: Sequence[int], modes: Sequence[str], eval_tokens: int,
                 log: Callable[[str], None]) -> List[Dict[str, Any]]:
  """Perplexity of one trained model at every length and protocol (cached in its run dir)."""
  from pejax import eval as eval_lib  # pylint: disable=g-import-not-at-top

  def compute():
    if not (info.run_dir / "checkpoints").is_dir():
      raise FileNotFoundError(
          f"{info.run_dir}: its evaluation for {key} is not recorded and its weights were not "
          "kept (git keeps a model's records, not its checkpoints): delete the directory to "
          "train the model again")
    model = trained_runs.load_model(info.run_dir, config)
    max_length = pe_capabilities.pe_max_length(config)  # A bounded (learned) table: n/a past it.
    results = eval_lib.perplexity_at_lengths(
        model, trained_runs.load_corpus(str(config.data.name)).valid, lengths=lengths,
        modes=modes, max_tokens=eval_tokens, max_length=max_length,
        blockwise_threshold=int(config.eval.blockwise_threshold),
        unsupported_reason=f"table size {max_length}")
    return [r.to_json() for r in results]

  key = {"lengths": list(lengths), "modes": list(modes), "eval_tokens": eval_tokens,
         "stride": "L/4", "steps": info.steps}
  return result_cache.cached(info.run_dir / f"study_{STUDY}_eval.json", key, compute)


def summarize(per_seed: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]]
              ) -> Dict[str, Dict[str, Dict[int, Dict[str, Any]]]]:
  """pe -> mode -> length -> spread of perplexity over seeds (plus the n/a status)."""
  summary: Dict[str, Dict[str, Dict[int, Dict[str, Any]]]] = {}
  for pe, seed_rows in per_seed.items():
    cells: Dict[tuple, list] = {}
    status: Dict[tuple, str] = {}
    for rows in seed_rows:
      for r in rows:
        key = (r["mode"], int(r["length"]))
        cells.setdefault(key, []).append(r["perplexity"] if r["status"] == "ok" else None)
        if r["status"] != "ok":
          status[key] = r["status"]
    for (mode, length), values in cells.items():
      stats = seed_statistics.spread(values)
      stats["status"] = status.get((mode, length), "ok")
      stats["seeds"] = list(values)  # In seed order, None where not measured: verdicts pair them.
      summary.setdefault(pe, {}).setdefault(mode, {})[length] = stats
  return summary


def _mean(summary, pe: str, mode: str, length: int) -> Optional[float]:
  return summary[pe][mode][length]["mean"]


def _ratio(summary, pe: str, mode: str, short: int, long: int) -> float:
  """Perplexity at ``long`` over perplexity at ``short`` (raises TypeError when missing)."""
  return _mean(summary, pe, mode, long) / _mean(summary, pe, mode, short)


def _seed_values(summary, pe: str, mode: str, length: int) -> List[Optional[float]]:
  """The cell's per-seed perplexities (a summary without them: its mean as one value)."""
  cell = summary[pe][mode][length]
  return list(cell["seeds"]) if "seeds" in cell else [cell["mean"]]


def _seed_ratios(summary, pe: str, mode: str, short: int, long: int) -> List[Optional[float]]:
  """Per seed, perplexity at ``long`` over perplexity at ``short`` (None where either is)."""
  return [(b / a) if (a and b is not None) else None
          for a, b in zip(_seed_values(summary, pe, mode, short),
                          _seed_values(summary, pe, mode, long))]


def _every_mode(modes: Sequence[str], decide) -> Optional[bool]:
  """``decide(mode)`` in every mode: ``None`` (not measurable) if any mode is."""
  outcomes = [decide(m) for m in modes]
  return None if any(o is None for o in outcomes) else all(outcomes)


def _ratios_text(summary, pe: str, modes: Sequence[str], short: int, long: int) -> str:
  parts = []
  for mode in modes:
    a, b = _mean(summary, pe, mode, short), _mean(summary, pe, mode, long)
    ratio = (b / a) if (a and b) else None
    seeds = _seed_ratios(summary, pe, mode, short, long)
    per_seed = (" ; seeds " + ", ".join(f"x{table_cells.fmt(r)}" for r in seeds)
                if len(seeds) > 1 else "")
    parts.append(f"{mode}: {table_cells.fmt(a)} -> {table_cells.fmt(b)} "
                 f"(x{table_cells.fmt(ratio)}{per_seed})")
  return "; ".join(parts)


def verdicts(summary: Mapping[str, Any], *, train_len: int, max_len: int,
             modes: Sequence[str] = MODES,
             bounded: Optional[Mapping[str, int]] = None) -> List[expectations.Verdict]:
  """The ALiBi paper's claims checked on ``summary`` (from :func:`summarize`).

  Args:
    summary: pe -> mode -> length -> ``{"mean": perplexity, "status": ...}``.
    train_len: L.
    max_len: the longest evaluated length.
    modes: protocols a claim must hold in (all of them).
    bounded: ``pe -> table size`` of the PEs with a bounded table (:func:`bounded_pes`);
      default: the registered PEs of ``summary`` whose PE class builds a ``max_length``, with
      the study's table of ``train_len`` rows.

  Returns:
    One :class:`~experiments.study.expectations.Verdict` per claim whose PEs were evaluated.
  """
  x = max_len // train_len
  out = []
  have = lambda *pes: all(p in summary for p in pes)
  if have("alibi"):
    out.append(expectations.verdict(
        "ALiBi keeps its perplexity at L out to many times L (Press et al. 2022, Fig. 1)",
        f"ALiBi perplexity at {x}x L <= {ALIBI_HOLD_RATIO} x its perplexity at L, on every "
        f"seed, in {' and '.join(modes)}",
        _ratios_text(summary, "alibi", modes, train_len, max_len),
        lambda: _every_mode(modes, lambda m: expectations.every_seed(
            _seed_ratios(summary, "alibi", m, train_len, max_len),
            lambda r: r <= ALIBI_HOLD_RATIO))))
  if have("sinusoidal"):
    out.append(expectations.verdict(
        "Sinusoidal degrades sharply past L (Press et al. 2022, Fig. 1)",
        f"sinusoidal perplexity at {x}x L >= {SHARP_RATIO} x at L, on every seed, in "
        f"{' and '.join(modes)}",
        _ratios_text(summary, "sinusoidal", modes, train_len, max_len),
        lambda: _every_mode(modes, lambda m: expectations.every_seed(
            _seed_ratios(summary, "sinusoidal", m, train_len, max_len),
            lambda r: r >= SHARP_RATIO)), note_if_not_held=SCALE_NOTE))
  if bounded is None:
    bounded = {pe: train_len for pe in _bounded_by_capability(summary)}
  bounded = {pe: size for pe, size in bounded.items() if pe in summary}
  if bounded:
    longer = {pe: [l for l in summary[pe][modes[0]] if l > size] for pe, size in bounded.items()}
    names = ", ".join(sorted(bounded))
    out.append(expectations.verdict(
        f"Absolute positions from a bounded table ({names}) cannot go past their table "
        "(n/a beyond it)",
        "every length > the table size reports n/a and L itself is evaluated",
        "; ".join(f"{pe} (table {bounded[pe]}), {len(ls)} longer lengths: " + ", ".join(
            f"{l}: {summary[pe][modes[0]][l]['status']}" for l in sorted(ls))
                  for pe, ls in sorted(longer.items())),
        lambda: all(_mean(summary, pe, modes[0], train_len) is not None and all(
            summary[pe][m][l]["status"] != "ok" for m in modes for l in ls)
                    for pe, ls in longer.items())))
  if have("rope"):
    out.append(expectations.verdict(
        "RoPE degrades past L (Press et al. 2022, Fig. 1)",
        f"RoPE perplexity at {x}x L >= {DEGRADE_RATIO} x at L, on every seed, in "
        f"{' and '.join(modes)}",
        _ratios_text(summary, "rope", modes, train_len, max_len),
        lambda: _every_mode(modes, lambda m: expectations.every_seed(
            _seed_ratios(summary, "rope", m, train_len, max_len),
            lambda r: r >= DEGRADE_RATIO)), note_if_not_held=SCALE_NOTE))
  if have("t5", "rope"):
    def t5_vs_rope(mode):
      return expectations.compare_over_seeds(
          _seed_ratios(summary, "t5", mode, train_len, max_len),
          _seed_ratios(summary, "rope", mode, train_len, max_len), higher_is_better=False)

    out.append(expectations.verdict(
        "The T5 bias extrapolates better than RoPE (Press et al. 2022, Fig. 1)",
        f"T5's perplexity ratio {x}x L / L < RoPE's on every seed (or a 95% bootstrap interval "
        f"over seeds below 0), in {' and '.join(modes)}",
        "; ".join(
            f"{m}: T5 x{table_cells.fmt(_safe_ratio(summary, 't5', m, train_len, max_len))}"
            f" vs RoPE x{table_cells.fmt(_safe_ratio(summary, 'rope', m, train_len, max_len))}"
            f" (means; T5 - RoPE {t5_vs_rope(m).text()})"
            for m in modes),
        lambda: _every_mode(modes, lambda m: t5_vs_rope(m).held)))
  paper = [pe for pe in PRESS_PES if pe in summary]
  if have("alibi") and len(paper) > 1:
    def best(mode, among):
      finite = {p: _mean(summary, p, mode, max_len) for p in among}
      finite = {p: v for p, v in finite.items() if v is not None}
      return min(finite, key=finite.get) if finite else None

    def winners_per_seed(mode) -> List[str]:
      """The best of the paper's PEs on each seed where ALiBi was measured."""
      by_pe = {p: _seed_values(summary, p, mode, max_len) for p in paper}
      winners = []
      for i in range(min(len(v) for v in by_pe.values())):
        finite = {p: v[i] for p, v in by_pe.items() if v[i] is not None}
        if "alibi" in finite:
          winners.append(min(finite, key=finite.get))
      return winners

    def alibi_best_on_every_seed(mode) -> Optional[bool]:
      winners = winners_per_seed(mode)
      return None if not winners else all(w == "alibi" for w in winners)

    def measured(mode):
      text = f"{mode}: best of the paper's PEs {best(mode, paper)}"
      winners = winners_per_seed(mode)
      if len(winners) > 1:
        text += f" (by mean; per seed: {', '.join(winners)})"
      overall = best(mode, summary)
      if overall not in paper:  # A later encoding beats them all: say so, with the numbers.
        text += (f" (best of all {len(summary)} PEs: {overall} "
                 f"{table_cells.fmt(_mean(summary, overall, mode, max_len))} vs alibi "
                 f"{table_cells.fmt(_mean(summary, 'alibi', mode, max_len))})")
      return text
    out.append(expectations.verdict(
        "ALiBi has the lowest perplexity at long lengths of the PEs Press et al. 2022 compare "
        f"({', '.join(paper)})",
        f"ALiBi is the best of them at {x}x L on every seed, in {' and '.join(modes)}",
        "; ".join(measured(m) for m in modes),
        lambda: _every_mode(modes, alibi_best_on_every_seed)))
  return out


def control_verdicts(summary: Mapping[str, Any], *, train_len: int,
                     modes: Sequence[str] = MODES) -> List[expectations.Verdict]:
  """Controls the paper's comparisons rest on: each of its PEs learned to use positions.

  A PE whose perplexity at L is no better than NoPE's has not (yet) learned what its encoding
  offers (a T5 bias left near its initialization: issue 45), and its extrapolation says little
  about the encoding. Per PE of :data:`PRESS_PES`: perplexity at L below NoPE's by at least
  :data:`NOPE_MARGIN` on every seed (paired by seed), in every protocol.
  """
  if "none" not in summary:
    return []
  out = []
  for pe in PRESS_PES:
    if pe not in summary:
      continue

    def ratios(mode, pe=pe):
      return [(a / b) if (a is not None and b) else None
              for a, b in zip(_seed_values(summary, pe, mode, train_len),
                              _seed_values(summary, "none", mode, train_len))]

    measured = "; ".join(
        f"{m}: {pe} {table_cells.fmt(_mean(summary, pe, m, train_len))} vs NoPE "
        f"{table_cells.fmt(_mean(summary, 'none', m, train_len))} (per seed x"
        + ", x".join(table_cells.fmt(r, 3) for r in ratios(m)) + ")" for m in modes)
    out.append(expectations.verdict(
        f"Control: {pe} learned to use positions (its perplexity at L beats NoPE's)",
        f"{pe} perplexity at L <= {1 - NOPE_MARGIN:g} x NoPE's, on every seed (paired), in "
        f"{' and '.join(modes)}", measured,
        lambda pe=pe, ratios=ratios: _every_mode(modes, lambda m: expectations.every_seed(
            ratios(m), lambda r: r <= 1 - NOPE_MARGIN))))
  return out


def context_lost(ppl_short: Optional[float], ppl_long: Optional[float],
                 unigram: Optional[float]) -> Optional[float]:
  """The share of its context gain a model loses from L to a longer length.

  A model's gain from context at L is ``unigram - log ppl(L)`` (nats/byte: how far below a
  model without context it is); at a longer length it keeps ``unigram - log ppl(long)``. The
  lost share ``(log ppl(long) - log ppl(L)) / (unigram - log ppl(L))`` is 0 for a flat curve and
  1 for a model back at the unigram perplexity (above 1: worse than using no context). Unlike
  the ratio ``ppl(long) / ppl(L)``, it does not depend on the corpus's headroom (a byte-level
  corpus has a low unigram perplexity, a word-level one a very high one). ``None`` when a value
  is missing or the model is not below the unigram perplexity at L.
  """
  if ppl_short is None or ppl_long is None or unigram is None or ppl_short <= 0:
    return None
  gain = unigram - math.log(ppl_short)
  if gain <= 0:
    return None
  return (math.log(ppl_long) - math.log(ppl_short)) / gain


def sinusoidal_headroom_note(summary: Mapping[str, Any], *, unigram: Optional[float],
                             train_len: int, max_len: int, mode: str = "nonoverlap") -> str:
  """Why sinusoidal's ratio here is far below the steep rise of Press et al.'s Fig. 1 (issue
  45): the ratio is capped by the corpus's headroom; the lost share of the context gain is not."""
  a = _mean(summary, "sinusoidal", mode, train_len) if "sinusoidal" in summary else None
  b = _mean(summary, "sinusoidal", mode, max_len) if "sinusoidal" in summary else None
  lost = context_lost(a, b, unigram)
  if lost is None:
    return ""
  ceiling = math.exp(unigram)
  return (
      f"Sinusoidal's rise here (x{b / a:.2f} at {max_len // train_len}x L, `{mode}`) is far "
      "smaller than the steep one of Press et al.'s Fig. 1, but it is not a milder failure: "
      f"its perplexity at {max_len} ({b:.2f}) is {lost:.0%} of the way from its perplexity at L "
      f"({a:.2f}) to the corpus's unigram perplexity ({ceiling:.2f}), where a model that uses "
      "no context sits, so on this byte-level corpus no ratio much above "
      f"x{ceiling / a:.2f} is available (beyond it only by being confidently wrong). Press et "
      "al. measure word-level WikiText-103, whose unigram perplexity is orders of magnitude "
      "above their models' perplexity: the same loss of context shows as a much larger ratio. "
      "The share of the context gain lost (table below) compares PEs across corpora.")


def _bounded_by_capability(names) -> List[str]:
  """The registered names among ``names`` whose default PE has a ``max_length``."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from pejax.nn import DecoderConfig  # pylint: disable=g-import-not-at-top
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top
  out = []
  for name in names:
    if name not in registry.pe_names():
      continue
    model = DecoderConfig(pe=name, num_layers=1, d_model=16, num_heads=2)
    pe = nnx.eval_shape(lambda: registry.build_pe(model.pe, model, rngs=nnx.Rngs(0)))
    if pe.max_length is not None:
      out.append(name)
  return out


def _safe_ratio(summary, pe, mode, short, long) -> Optional[float]:
  try:
    return _ratio(summary, pe, mode, short, long)
  except (TypeError, KeyError, ZeroDivisionError):
    return None


def headline_table(summary: Mapping[str, Any], runs: Mapping[str, Sequence[Any]], *,
                   settings: Settings, mode: str) -> tuple:
  """(header, rows): PE x length perplexity (mean [min-max] over seeds) and losses at L."""
  header = (["PE"] + [f"{m}x ({settings.train_len * m})" for m in settings.multipliers]
            + ["valid loss at L"])
  rows = []
  for pe in settings.pes:
    if pe not in summary:
      continue
    cells = [pe]
    for length in settings.lengths:
      stats = summary[pe][mode].get(length, {})
      cells.append(table_cells.fmt_spread(stats) if stats.get("mean") is not None
                   else "n/a")
    losses = seed_statistics.spread([r.valid_loss for r in runs.get(pe, [])])
    cells.append(table_cells.fmt(losses["mean"], 3))
    rows.append(cells)
  return header, rows


def training_note(runs: Mapping[str, Sequence[trained_runs.RunInfo]], unigram: Optional[float],
                  options: study_options.StudyOptions) -> str:
  """How far below the unigram loss the models trained (computed, not asserted)."""
  losses = [r.valid_loss for infos in runs.values() for r in infos if r.valid_loss is not None]
  if not losses or unigram is None:
    return ""
  text = (f"Final validation losses {min(losses):.3f}-{max(losses):.3f} nats/byte against the "
          f"corpus's unigram loss {unigram:.3f} (ratio {min(losses) / unigram:.2f}-"
          f"{max(losses) / unigram:.2f}).")
  if options.quick:
    text += (" Quick mode trains only briefly: the models use little context, differences are "
             "smaller than in the full run and the verdicts are indicative only.")
  return text


def flatness_note(late: Mapping[str, Sequence[Optional[float]]], steps: int) -> str:
  """How far each PE's training got: whether its validation loss flattened on every seed."""
  if not late:
    return ""
  unknown = sorted(pe for pe, drops in late.items() if any(d is None for d in drops))
  still = {pe: drops for pe, drops in late.items() if pe not in unknown
           and any(d >= FLAT_TOLERANCE for d in drops)}
  flat = len(late) - len(unknown) - len(still)
  text = (f"Training flattened (criterion: the validation loss fell by less than "
          f"{FLAT_TOLERANCE:.0%} over the last quarter of the {steps} steps) on every seed for "
          f"{flat} of {len(late)} PEs")
  if still:
    text += "; still falling: " + ", ".join(
        f"{pe} ({', '.join(f'{d:.1%}' for d in drops)})" for pe, drops in sorted(still.items()))
  if unknown:
    text += f"; too few validation points to tell: {', '.join(unknown)}"
  return text + "."


def context_lost_table(summary: Mapping[str, Any], *, settings: Settings,
                       unigram: Optional[float], mode: str = "nonoverlap") -> tuple:
  """(header, rows, values): per PE and longer length, the share of the context gain lost
  (:func:`context_lost`, per seed, mean [min-max])."""
  header = ["PE"] + [f"{m}x ({settings.train_len * m})" for m in settings.multipliers[1:]]
  rows, values = [], {}
  for pe in settings.pes:
    if pe not in summary:
      continue
    row = [pe]
    for length in settings.lengths[1:]:
      if summary[pe][mode].get(length, {}).get("mean") is None:
        row.append("n/a")
        continue
      stats = seed_statistics.spread([
          context_lost(a, b, unigram)
          for a, b in zip(_seed_values(summary, pe, mode, settings.train_len),
                          _seed_values(summary, pe, mode, length))])
      values.setdefault(pe, {})[str(length)] = stats
      row.append(table_cells.fmt_spread(stats) if stats["n"] else "n/a")
    rows.append(row)
  return header, rows, values


def run(options: study_options.StudyOptions, *, settings: Optional[Settings] = None,
        log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Runs the study and writes its report; returns the results dict written to JSON.

  Args:
    options: flags (or their Python equivalent).
    settings: the sweep; default :func:`settings_for` ``options`` (tests pass tiny ones).
    log: progress lines.
  """
  base = base_config(options)
  settings = settings or settings_for(options, base)
  if not settings.pes:
    settings = dataclasses.replace(settings,
                                   pes=study_options.select_pes(study_pes(base), options.pes))
  runs_dir = options.kept_models_dir(STUDY)
  workdir = options.report_dir(STUDY)
  report = markdown_report.Report("Length extrapolation of positional encodings", study=STUDY,
                               options=options)
  report.models_per_arm(len(settings.seeds))
  models = [(pe, seed) for pe in settings.pes for seed in settings.seeds]
  if options.shard:
    models = models[options.shard[0]::options.shard[1]]
  log(f"{STUDY}: {len(settings.pes)} PEs x {len(settings.seeds)} seeds, L={settings.train_len}, "
      f"{settings.steps} steps, eval {settings.lengths}; models in {runs_dir}"
      + (f"; shard {options.shard[0]}/{options.shard[1]}: {len(models)} models" if options.shard
         else ""))
  per_seed: Dict[str, List[list]] = {}
  runs: Dict[str, List[trained_runs.RunInfo]] = {}
  started = time.time()
  for done, (pe, seed) in enumerate(models, 1):
    config = pe_config(base, pe, seed)
    info = trained_runs.train_run(config, runs_dir=runs_dir, log=log, weights=False)
    rows = evaluate_run(info, config, lengths=settings.lengths, modes=MODES,
                        eval_tokens=settings.eval_tokens, log=log)
    per_seed.setdefault(pe, []).append(rows)
    runs.setdefault(pe, []).append(info)
    longest = [r for r in rows if r["length"] == settings.lengths[-1] and r["status"] == "ok"]
    at_train_len = [r for r in rows if r["length"] == settings.train_len][0]
    log(f"[{done}/{len(models)}] {pe} seed {seed}: ppl at L "
        f"{table_cells.fmt(at_train_len['perplexity'])}"
        + (f", at {settings.lengths[-1]} {table_cells.fmt(longest[0]['perplexity'])}"
           if longest else "") + f" ({(time.time() - started) / 60:.1f} min so far)")
  if options.shard:
    log(f"{STUDY}: shard {options.shard[0]}/{options.shard[1]} done, {len(models)} models in "
        f"{runs_dir}; no report: the same command without --shard reuses every model and "
        "writes it")
    return {"shard": list(options.shard), "models": len(models)}
  summary = summarize(per_seed)
  report.add_runs([r for infos in runs.values() for r in infos])
  max_len = settings.lengths[-1]
  for v in verdicts(summary, train_len=settings.train_len, max_len=max_len,
                    bounded=bounded_pes(base, settings.pes)):
    report.add_verdict(v)
  for v in control_verdicts(summary, train_len=settings.train_len):
    report.add_verdict(v)
  late = {pe: [trained_runs.late_improvement(trained_runs.validation_curve(r.run_dir))
               for r in infos] for pe, infos in runs.items()}

  unigram = trained_runs.unigram_loss(str(base.data.name))
  report.section(
      "Setup",
      f"Decoder: {base.model.num_layers} layers, d_model {base.model.d_model}, "
      f"{base.model.num_heads} heads, byte vocabulary; trained at L = {settings.train_len} on "
      f"the built-in `{base.data.name}` corpus for {settings.steps} steps, batch "
      f"{base.data.batch_size}, AdamW lr {base.optim.learning_rate}; seeds {list(settings.seeds)}. "
      f"Evaluated on {settings.eval_tokens} validation tokens per cell at lengths "
      f"{settings.lengths}. Protocols (ALiBi paper): `nonoverlap` scores disjoint windows; "
      f"`sliding` advances windows by L_eval/4 and scores only the last quarter, so every scored "
      f"token has at least 3/4 L_eval of context. Cells show mean perplexity (bytes) over seeds "
      f"with [min-max] when there are several seeds. " + training_note(runs, unigram, options)
      + " " + flatness_note(late, settings.steps))
  for mode in MODES:
    header, rows = headline_table(summary, runs, settings=settings, mode=mode)
    report.table(header, rows, caption=f"**Perplexity vs evaluation length, `{mode}` protocol** "
                 f"(trained at L = {settings.train_len})")
    series = {}
    for pe in settings.pes:
      if pe not in summary:
        continue
      series[pe] = [(length, s["mean"], s["min"], s["max"])
                    for length, s in summary[pe][mode].items()]
    png = eval_report.plot_curves(
        workdir / f"extrapolation_{mode}.png", series, xlabel="evaluation length (bytes)",
        ylabel="perplexity", logx=True, logy=True, vline=settings.train_len,
        vline_label=f"train length {settings.train_len}",
        title=f"Perplexity vs length ({mode}; band = min-max over {len(settings.seeds)} "
        f"seed{'s' if len(settings.seeds) > 1 else ''})")
    report.image(png, f"perplexity vs length, {mode}")
  header, rows, lost = context_lost_table(summary, settings=settings, unigram=unigram)
  note = sinusoidal_headroom_note(summary, unigram=unigram, train_len=settings.train_len,
                                  max_len=max_len)
  report.section("Share of the context gain lost", (note + "\n\n" if note else "") + (
      "Per PE and length, `nonoverlap`: (log perplexity there - log perplexity at L) / "
      "(unigram loss - log perplexity at L), per seed, mean [min-max]: 0 is a flat curve, 1 a "
      "model back at the unigram perplexity."))
  report.table(header, rows)
  loss_rows = []
  for pe in settings.pes:
    for info, seed, drop in zip(runs.get(pe, []), settings.seeds, late.get(pe, [])):
      loss_rows.append([pe, seed, info.steps, table_cells.fmt(info.train_loss, 3),
                        table_cells.fmt(info.valid_loss, 3), table_cells.fmt(unigram, 3),
                        "n/a" if drop is None else f"{drop:.1%}", info.train_time()])
  report.table(["PE", "seed", "steps", "train loss", "valid loss at L", "unigram loss",
                "valid loss drop, last quarter", "train time"], loss_rows,
               caption="**Training** (nats per byte)")
  results = {
      "settings": dataclasses.asdict(settings), "lengths": settings.lengths,
      "unigram_loss": unigram,
      "summary": {pe: {m: {str(l): s for l, s in cells.items()} for m, cells in modes.items()}
                  for pe, modes in summary.items()},
      "per_seed": per_seed,
      "runs": {pe: [r.to_json() for r in infos] for pe, infos in runs.items()},
      "late_improvement": late, "flat_tolerance": FLAT_TOLERANCE,
      "context_lost": lost,
  }
  return markdown_report.write_report(report, workdir, results, study=STUDY, log=log)


if __name__ == "__main__":
  study_options.run_as_launch("extrapolation")
