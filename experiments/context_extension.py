r"""RoPE context extension: zero-shot frequency scalings and a short fine-tune at a longer length.

    python -m experiments.context_extension --quick     # ~2.5 min on 2 CPU cores
    python -m experiments.context_extension             # full: ~5 min (+ the base model)
    python launch.py --study=context_extension --quick

One RoPE decoder is trained at length L on the stdlib corpus (the same model as the
``extrapolation`` study's ``rope`` seed, reused from its runs directory when present). It is then
evaluated at 1x-16x L with its weights unchanged and its rotary frequencies rescaled by each
scaling (none, linear = position interpolation, ntk, dynamic, yarn, llama3), with
``factor = eval_len / L`` at every length (the factor each method prescribes for that context).
Finally, copies are fine-tuned at 4x L for 15% of the pre-training steps with linear (PI) and
YaRN scaling at factor 4 (and, as a control, with no scaling) and evaluated again.

References:
  Chen et al., "Extending Context Window of Large Language Models via Positional Interpolation",
  2023, arXiv:2306.15595.
  bloc97, "NTK-Aware Scaled RoPE allows LLaMA models to have extended (8k+) context size without
  any fine-tuning and minimal perplexity degradation", r/LocalLLaMA, 2023 (and its dynamic form).
  Peng et al., "YaRN: Efficient Context Window Extension of Large Language Models", ICLR 2024,
  arXiv:2309.00071.
"""

from __future__ import annotations

# Run as a program: re-execute with the allocator settings before the imports below, not
# after them (pejax.runtime_env; importing it loads nothing else).
from pejax import runtime_env  # pylint: disable=wrong-import-position
runtime_env.apply_when_main(__name__)
# pylint: disable=wrong-import-position

import dataclasses
import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import ml_collections

from experiments import extrapolation
from experiments.study import expectations
from experiments.study import markdown_report
from experiments.study import result_cache
from experiments.study import seed_statistics
from experiments.study import study_options
from experiments.study import table_cells
from experiments.study import trained_runs
from pejax.eval import report as eval_report

STUDY = "context_extension"
SCALINGS = ("none", "linear", "ntk", "dynamic", "yarn", "llama3")
FINETUNE_SCALINGS = ("linear", "yarn", "none")
MODE = "nonoverlap"

YARN_MATCH = 1.02  # "YaRN matches or beats PI": YaRN perplexity <= 1.02 x PI's.
PI_RECOVERY = 1.10  # PI fine-tune: perplexity at 4x L <= 1.10 x the base model's at L.
PI_NOTE = (
    "Likely reason at this scale: PI divides every rotation angle by the factor, so neighbouring "
    "bytes get a fraction of the positional separation the model learned; a byte-level model "
    "leans on exact local order, and a fine-tune of 15% of pre-training at a third of the "
    "learning rate does not re-learn it (Chen et al. fine-tune LLaMA for 1000 steps). YaRN keeps "
    "the high frequencies unscaled, which is why it recovers at once; compare the `none` control.")


@dataclasses.dataclass(frozen=True)
class Settings:
  """The sweep.

  Attributes:
    train_len: pre-training length L.
    steps: pre-training steps.
    seeds: seeds of the base model (results are averaged).
    multipliers: evaluation lengths as multiples of L.
    eval_tokens: validation tokens per length.
    finetune_multiplier: fine-tuning length as a multiple of L (also the fine-tuning factor).
    finetune_fraction: fine-tuning steps as a fraction of the pre-training steps.
    scalings: zero-shot scalings compared.
    finetune_scalings: scalings fine-tuned at the longer length.
  """

  train_len: int
  steps: int
  seeds: tuple
  multipliers: tuple
  eval_tokens: int
  finetune_multiplier: int = 4
  finetune_fraction: float = 0.15
  scalings: tuple = SCALINGS
  finetune_scalings: tuple = FINETUNE_SCALINGS

  @property
  def lengths(self) -> List[int]:
    return [self.train_len * m for m in self.multipliers]

  @property
  def finetune_len(self) -> int:
    return self.train_len * self.finetune_multiplier

  @property
  def finetune_steps(self) -> int:
    return max(2, int(round(self.finetune_fraction * self.steps)))


def settings_for(options: study_options.StudyOptions,
                 config: ml_collections.ConfigDict) -> Settings:
  """Quick: 1-8x L; full: 1-16x L. One seed unless ``--seeds``."""
  return Settings(
      train_len=int(config.data.train_len), steps=int(config.train.steps),
      seeds=tuple(options.seed_list((0,))),
      multipliers=(1, 2, 4, 8) if options.quick else (1, 2, 4, 8, 16),
      eval_tokens=4096 if options.quick else 8192)


def scaled_model(base_model, config: ml_collections.ConfigDict, name: str, factor: float):
  """``base_model``'s weights in a decoder whose RoPE uses scaling ``name`` at ``factor``."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from pejax.nn import Decoder  # pylint: disable=g-import-not-at-top
  from pejax import decoder_from_config  # pylint: disable=g-import-not-at-top
  train_len = int(config.data.train_len)
  model_config = decoder_from_config.decoder_config_from(config)
  scaled_pe = decoder_from_config.with_rope_scaling(
      model_config.pe, name, factor=factor,
      original_max_position=int(config.pe.get("original_max_position") or train_len),
      head_dim=model_config.head_dim)
  model = Decoder(dataclasses.replace(model_config, pe=scaled_pe), rngs=nnx.Rngs(params=0))
  nnx.update(model, nnx.state(base_model))
  return model


def experiment_pe_base(config: ml_collections.ConfigDict) -> float:
  """The RoPE base the config's PE uses (its default when ``pe.base`` is unset)."""
  from pejax import decoder_from_config  # pylint: disable=g-import-not-at-top
  return decoder_from_config.pe_config_from(config).base


def zero_shot(info: trained_runs.RunInfo, config: ml_collections.ConfigDict, *,
              settings: Settings, log: Callable[[str], None]) -> Dict[str, List[Dict[str, Any]]]:
  """scaling -> perplexity rows at every length, factor = length / L (cached in the run dir)."""
  from pejax import eval as eval_lib  # pylint: disable=g-import-not-at-top

  def compute():
    base = trained_runs.load_model(info.run_dir, config)
    valid = trained_runs.load_corpus(str(config.data.name)).valid
    out = {}
    for name in settings.scalings:
      rows = []
      for length in settings.lengths:
        factor = max(1.0, length / settings.train_len)
        model = base if name == "none" else scaled_model(base, config, name, factor)
        (result,) = eval_lib.perplexity_at_lengths(
            model, valid, lengths=[length], modes=[MODE], max_tokens=settings.eval_tokens,
            blockwise_threshold=int(config.eval.blockwise_threshold))
        rows.append({**result.to_json(), "factor": factor})
      out[name] = rows
      log(f"  zero-shot {name:<8} " + " ".join(
          f"{r['length']}:{table_cells.fmt(r['perplexity'])}" for r in rows))
    return out

  key = {"lengths": settings.lengths, "scalings": list(settings.scalings),
         "eval_tokens": settings.eval_tokens, "factor": "length/L", "steps": info.steps}
  return result_cache.cached(info.run_dir / f"study_{STUDY}_zero_shot.json", key, compute)


def finetune_config(config: ml_collections.ConfigDict, base_run: trained_runs.RunInfo,
                    scaling: str, settings: Settings) -> ml_collections.ConfigDict:
  """``config`` fine-tuned at ``finetune_len`` with ``scaling`` x ``finetune_multiplier``.

  Same tokens per step (batch divided by the length multiplier), 15% of the pre-training steps,
  a third of the pre-training learning rate with 10% warm-up.
  """
  from pejax.encodings import rope_scaling as scalings  # pylint: disable=g-import-not-at-top
  ft = config.copy_and_resolve_references()
  with ft.unlocked():
    ft.pe.scaling = None if scaling == "none" else scaling
    ft.pe.factor = float(settings.finetune_multiplier) if scaling != "none" else None
    if scaling != "none" and "original_max_position" in {  # The scalings that read it.
        f.name for f in dataclasses.fields(scalings.scaling_class(scaling))}:
      ft.pe.original_max_position = settings.train_len
    ft.data.train_len = settings.finetune_len
    ft.data.batch_size = max(1, int(config.data.batch_size) // settings.finetune_multiplier)
    ft.train.steps = settings.finetune_steps
    ft.train.eval_every = settings.finetune_steps
    ft.train.log_every = max(1, settings.finetune_steps // 4)
    ft.train.checkpoint_every = settings.finetune_steps
    ft.optim.learning_rate = float(config.optim.learning_rate) / 3.0
    ft.optim.warmup_steps = max(1, settings.finetune_steps // 10)
    ft.train.init_from = str(base_run.run_dir)
  return ft


def finetuned(config: ml_collections.ConfigDict, base_run: trained_runs.RunInfo, *,
              settings: Settings, runs_dir, log: Callable[[str], None]
              ) -> Dict[str, Dict[str, Any]]:
  """scaling -> {"run": RunInfo, "rows": perplexity rows} of each fine-tuned copy."""
  from pejax import eval as eval_lib  # pylint: disable=g-import-not-at-top
  out = {}
  # Fine-tuned runs are keyed by their base model (init_from is not part of the run hash).
  ft_dir = runs_dir / f"finetune-{base_run.run_dir.name}"
  for scaling in settings.finetune_scalings:
    ft = finetune_config(config, base_run, scaling, settings)
    info = trained_runs.train_run(ft, runs_dir=ft_dir, log=log)

    def compute(info=info, ft=ft):
      model = trained_runs.load_model(info.run_dir, ft)
      results = eval_lib.perplexity_at_lengths(
          model, trained_runs.load_corpus(str(ft.data.name)).valid, lengths=settings.lengths,
          modes=[MODE], max_tokens=settings.eval_tokens,
          blockwise_threshold=int(ft.eval.blockwise_threshold))
      return [r.to_json() for r in results]

    key = {"lengths": settings.lengths, "eval_tokens": settings.eval_tokens, "steps": info.steps}
    rows = result_cache.cached(info.run_dir / f"study_{STUDY}_eval.json", key, compute)
    log(f"  fine-tuned {scaling:<8} " + " ".join(
        f"{r['length']}:{table_cells.fmt(r['perplexity'])}" for r in rows))
    out[scaling] = {"run": info, "rows": rows}
  return out


def _by_length(rows: Sequence[Mapping[str, Any]]) -> Dict[int, Optional[float]]:
  return {int(r["length"]): r["perplexity"] for r in rows}


def _geo_mean_beyond(curve: Mapping[int, Optional[float]], train_len: int) -> Optional[float]:
  values = [v for l, v in curve.items() if l > train_len]
  if not values or any(v is None or not math.isfinite(v) or v <= 0 for v in values):
    return None
  return math.exp(sum(math.log(v) for v in values) / len(values))


Curves = Mapping[str, Mapping[int, Optional[float]]]  # scaling -> length -> perplexity.


def _per_seed(seeds: Sequence[Curves], name: str, length: int) -> List[Optional[float]]:
  return [curves.get(name, {}).get(length) for curves in seeds]


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
  return None if a is None or b is None or not b else a / b


def _cell(values: Sequence[Optional[float]]) -> str:
  return table_cells.fmt_spread(seed_statistics.spread(values))


def verdicts(zero: Sequence[Curves], tuned: Sequence[Curves], *, train_len: int,
             finetune_len: int) -> List[expectations.Verdict]:
  """The published claims checked on every seed's perplexity curves (issue 45: no mean decides).

  A comparison holds when every seed (paired: the same seed's base model under both) points
  the claimed way, or when the 95% bootstrap interval of the paired differences excludes 0
  (:func:`~experiments.study.expectations.compare_over_seeds`); a threshold claim must hold on
  every seed (:func:`~experiments.study.expectations.every_seed`).

  Args:
    zero: per seed, zero-shot scaling -> length -> perplexity.
    tuned: per seed, fine-tuned scaling -> length -> perplexity.
    train_len: L.
    finetune_len: the fine-tuning length.
  """
  out = []
  have = lambda seeds, *names: bool(seeds) and all(all(n in c for c in seeds) for n in names)
  g = {name: [_geo_mean_beyond(c[name], train_len) for c in zero]
       for name in (zero[0] if zero else {})}
  measured = ", ".join(f"{n} {_cell(v)}" for n, v in g.items())
  for name, who in (("dynamic", "Dynamic NTK (bloc97 2023)"), ("yarn", "YaRN (Peng et al. 2023)")):
    if have(zero, name, "linear", "none"):
      vs = [expectations.compare_over_seeds(g[name], g[other], higher_is_better=False)
            for other in ("linear", "none")]
      out.append(expectations.verdict(
          f"Without fine-tuning, {who} beats PI and plain RoPE beyond L",
          f"geometric-mean perplexity over lengths > L: {name} below linear (PI) and below none "
          "on every seed, or a 95% bootstrap interval of the paired differences excluding 0",
          f"{measured}; vs linear: {vs[0].text()}; vs none: {vs[1].text()}",
          lambda vs=vs: None if any(v.held is None for v in vs) else all(v.held for v in vs)))
  if have(tuned, "yarn", "linear"):
    y, p = _per_seed(tuned, "yarn", finetune_len), _per_seed(tuned, "linear", finetune_len)
    out.append(expectations.verdict(
        "After fine-tuning at the longer length, YaRN matches or beats PI (Peng et al. 2023, "
        "Table 1)",
        f"fine-tuned YaRN perplexity at {finetune_len} <= {YARN_MATCH} x fine-tuned PI's, on "
        "every seed",
        f"YaRN {_cell(y)}, PI {_cell(p)}",
        lambda: expectations.every_seed([_ratio(a, b) for a, b in zip(y, p)],
                                        lambda r: r <= YARN_MATCH)))
  if have(tuned, "yarn", "none"):
    y, plain = _per_seed(tuned, "yarn", finetune_len), _per_seed(tuned, "none", finetune_len)
    control = expectations.compare_over_seeds(y, plain, higher_is_better=False)
    out.append(expectations.verdict(
        "Control: fine-tuned YaRN beats the same fine-tune without any scaling (the gain is the "
        "scaling's, not the fine-tune's; Peng et al. 2023 compare scalings, not this control)",
        f"fine-tuned YaRN perplexity at {finetune_len} below the unscaled fine-tune's on every "
        "seed, or a 95% bootstrap interval of the paired differences excluding 0",
        f"YaRN {_cell(y)}, unscaled {_cell(plain)}; {control.text()}", lambda: control))
  if have(tuned, "linear") and have(zero, "none"):
    p, base = _per_seed(tuned, "linear", finetune_len), _per_seed(zero, "none", train_len)
    out.append(expectations.verdict(
        "A short PI fine-tune gives a good model at the extended length (Chen et al. 2023, "
        "Table 1)",
        f"fine-tuned PI perplexity at {finetune_len} <= {PI_RECOVERY} x the base model's at "
        f"{train_len}, on every seed",
        f"PI fine-tuned {_cell(p)} at {finetune_len}; base {_cell(base)} at {train_len}",
        lambda: expectations.every_seed([_ratio(a, b) for a, b in zip(p, base)],
                                        lambda r: r <= PI_RECOVERY), note_if_not_held=PI_NOTE))
  return out


def _mean_curves(per_seed: Sequence[Mapping[str, Sequence[Mapping[str, Any]]]]
                 ) -> Dict[str, Dict[int, Dict[str, Any]]]:
  """name -> length -> spread over seeds."""
  values: Dict[str, Dict[int, list]] = {}
  for curves in per_seed:
    for name, rows in curves.items():
      for r in rows:
        values.setdefault(name, {}).setdefault(int(r["length"]), []).append(r["perplexity"])
  return {name: {l: seed_statistics.spread(v) for l, v in cells.items()}
          for name, cells in values.items()}


def run(options: study_options.StudyOptions, *, settings: Optional[Settings] = None,
        log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Runs the study and writes its report; returns the results written to JSON."""
  base = extrapolation.base_config(options)
  settings = settings or settings_for(options, base)
  runs_dir = options.models_dir(STUDY)
  workdir = options.report_dir(STUDY)
  reuse = [] if options.runs_dir else [options.models_dir(extrapolation.STUDY)]
  report = markdown_report.Report("RoPE context extension: zero-shot scalings and fine-tuning",
                               study=STUDY, options=options)
  report.models_per_arm(len(settings.seeds))
  log(f"{STUDY}: RoPE at L={settings.train_len}, {settings.steps} steps, seeds "
      f"{list(settings.seeds)}; eval {settings.lengths}; fine-tune at {settings.finetune_len} for "
      f"{settings.finetune_steps} steps")
  zero_per_seed, tuned_per_seed, base_runs, tuned_runs = [], [], [], {}
  for seed in settings.seeds:
    config = extrapolation.pe_config(base, "rope", seed)
    info = trained_runs.train_run(config, runs_dir=runs_dir, reuse_dirs=reuse, log=log)
    base_runs.append(info)
    zero_per_seed.append(zero_shot(info, config, settings=settings, log=log))
    tuned = finetuned(config, info, settings=settings, runs_dir=runs_dir, log=log)
    tuned_per_seed.append({k: v["rows"] for k, v in tuned.items()})
    for k, v in tuned.items():
      tuned_runs.setdefault(k, []).append(v["run"])
  report.add_runs(base_runs + [r for infos in tuned_runs.values() for r in infos])
  zero = _mean_curves(zero_per_seed)
  tuned = _mean_curves(tuned_per_seed)
  by_length = lambda per_seed: [{n: {int(r["length"]): r["perplexity"] for r in rows}
                                 for n, rows in curves.items()} for curves in per_seed]
  for v in verdicts(by_length(zero_per_seed), by_length(tuned_per_seed),
                    train_len=settings.train_len, finetune_len=settings.finetune_len):
    report.add_verdict(v)

  unigram = trained_runs.unigram_loss(str(base.data.name))
  report.section(
      "Setup",
      f"Base model: RoPE (base {experiment_pe_base(base)}), {base.model.num_layers} layers, d_model "
      f"{base.model.d_model}, trained at L = {settings.train_len} for {settings.steps} steps "
      f"(seeds {list(settings.seeds)}; valid loss "
      + ", ".join(table_cells.fmt(r.valid_loss, 3) for r in base_runs)
      + f" nats vs unigram {table_cells.fmt(unigram, 3)}). Zero-shot: the same weights, "
      "rotary frequencies rescaled; the factor at each evaluation length is "
      "`max(1, eval_len / L)` (so at L every method equals plain RoPE); `dynamic` recomputes its "
      "base from the actual sequence length, `llama3` uses low/high frequency factors 1 and 4. "
      f"Fine-tune: from the base weights at {settings.finetune_len} = "
      f"{settings.finetune_multiplier}x L with factor {settings.finetune_multiplier}, "
      f"{settings.finetune_steps} steps ({settings.finetune_fraction:.0%} of pre-training), the "
      "same tokens per step, learning rate / 3; `none` is the control (fine-tuned at the long "
      f"length without scaling). Perplexity in the `{MODE}` protocol on {settings.eval_tokens} "
      "validation tokens per length (mean [min-max] over seeds when several).")

  def table(curves, names, caption):
    header = ["scaling"] + [f"{l // settings.train_len}x ({l})" for l in settings.lengths]
    rows = [[n] + [table_cells.fmt_spread(curves[n].get(l, {})) for l in settings.lengths]
            for n in names if n in curves]
    report.table(header, rows, caption=caption)

  table(zero, settings.scalings, f"**Zero-shot perplexity** (trained at L = {settings.train_len})")
  png = eval_report.plot_curves(
      workdir / "context_extension_zero_shot.png",
      {(n if n == "none" else f"{n} x(eval_len / {settings.train_len})"):
       [(l, s["mean"], s["min"], s["max"]) for l, s in zero[n].items()]
       for n in settings.scalings if n in zero},
      xlabel="evaluation length (bytes)", ylabel="perplexity", logx=True, logy=True,
      vline=settings.train_len, vline_label=f"train length {settings.train_len}",
      title="RoPE zero-shot context extension (factor = eval_len / L)")
  report.image(png, "zero-shot perplexity vs length")
  table(tuned, settings.finetune_scalings,
        f"**After fine-tuning at {settings.finetune_len}** ({settings.finetune_steps} steps, "
        f"factor {settings.finetune_multiplier}; `none` = no scaling)")
  series = {(f"fine-tuned {n}" + (f" x{settings.finetune_multiplier:g}" if n != "none" else "")):
            [(l, s["mean"], s["min"], s["max"]) for l, s in tuned[n].items()]
            for n in settings.finetune_scalings if n in tuned}
  series["base, no scaling"] = [(l, s["mean"]) for l, s in zero.get("none", {}).items()]
  png = eval_report.plot_curves(
      workdir / "context_extension_finetuned.png", series,
      xlabel="evaluation length (bytes)", ylabel="perplexity", logx=True, logy=True,
      vline=settings.finetune_len, vline_label=f"fine-tune length {settings.finetune_len}",
      styles={"base, no scaling": ":"},
      title=f"After fine-tuning at {settings.finetune_multiplier}x L")
  report.image(png, "fine-tuned perplexity vs length")
  train_rows = []
  for info in base_runs:
    train_rows.append(["base (rope)", info.steps, table_cells.fmt(info.train_loss, 3),
                       table_cells.fmt(info.valid_loss, 3), info.train_time()])
  for name, infos in tuned_runs.items():
    for r in infos:
      train_rows.append([f"fine-tune {name}", r.steps, table_cells.fmt(r.train_loss, 3),
                         table_cells.fmt(r.valid_loss, 3), r.train_time()])
  report.table(["model", "steps", "train loss", "valid loss at its train length",
                "train time"], train_rows,
               caption=f"**Training** (nats per byte; unigram {table_cells.fmt(unigram, 3)})")
  results = {"settings": {**dataclasses.asdict(settings), "lengths": settings.lengths,
                          "finetune_len": settings.finetune_len,
                          "finetune_steps": settings.finetune_steps},
             "unigram_loss": unigram,
             "zero_shot": {n: {str(l): s for l, s in c.items()} for n, c in zero.items()},
             "finetuned": {n: {str(l): s for l, s in c.items()} for n, c in tuned.items()},
             "base_runs": [r.to_json() for r in base_runs],
             "finetune_runs": {k: [r.to_json() for r in v] for k, v in tuned_runs.items()}}
  return markdown_report.write_report(report, workdir, results, study=STUDY, log=log)


if __name__ == "__main__":
  study_options.run_as_launch("context_extension")
