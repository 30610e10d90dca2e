r"""Training curves of sinusoidal, RoPE and ALiBi decoders on the same budget.

    python -m experiments.training_curves --quick       # seconds with extrapolation's models
    python -m experiments.training_curves               # full (else trains 3 PEs x 2 seeds)
    python launch.py --study=training_curves --quick

Reads the training and validation losses of ``metrics.jsonl`` (``pejax.train.read_metrics``) of
one decoder per PE, trained with the ``extrapolation`` study's settings: the models of that study
are reused when its runs directory holds them (same settings hash), otherwise trained here.
Writes ``report.md``, ``results.json`` and ``training_curves.png`` into ``--workdir``.

References:
  Press, Smith and Lewis, "Train Short, Test Long", ICLR 2022, arXiv:2108.12409.
  Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021,
  arXiv:2104.09864.
"""

from __future__ import annotations

# Run as a program: re-execute with the allocator settings before the imports below, not
# after them (pejax.runtime_env; importing it loads nothing else).
from pejax import runtime_env  # pylint: disable=wrong-import-position
runtime_env.apply_when_main(__name__)
# pylint: disable=wrong-import-position

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence


from experiments import extrapolation
from experiments.study import expectations
from experiments.study import markdown_report
from experiments.study import seed_statistics
from experiments.study import study_options
from experiments.study import table_cells
from experiments.study import trained_runs
from pejax.eval import report as eval_report

STUDY = "training_curves"
PES = ("sinusoidal", "rope", "alibi")
WELL_BELOW_UNIGRAM = 0.75  # "well past unigram": final validation loss <= 0.75 x unigram loss.


def curves_from_metrics(records: Sequence[Mapping[str, Any]]) -> Dict[str, List[tuple]]:
  """``{"train": [(step, loss)], "eval": [(step, loss)]}`` from ``metrics.jsonl`` records."""
  out: Dict[str, List[tuple]] = {"train": [], "eval": []}
  for record in records:
    split = record.get("split")
    loss = record.get("metrics", {}).get("loss")
    if split in out and loss is not None:
      out[split].append((int(record["step"]), float(loss)))
  return out


def average_curves(curves: Sequence[Sequence[tuple]]) -> List[tuple]:
  """Pointwise ``(step, mean, min, max)`` over seeds at the steps every seed logged."""
  if not curves:
    return []
  common = set.intersection(*(set(s for s, _ in c) for c in curves))
  out = []
  for step in sorted(common):
    values = [dict(c)[step] for c in curves]
    stats = seed_statistics.spread(values)
    out.append((step, stats["mean"], stats["min"], stats["max"]))
  return out


def first_step_below(curve: Sequence[tuple], threshold: float) -> Optional[int]:
  """First logged step whose (mean) loss is <= ``threshold``."""
  for point in curve:
    if point[1] <= threshold:
      return int(point[0])
  return None


def verdicts(final_valid: Mapping[str, Sequence[Optional[float]]], *,
             unigram: Optional[float]) -> List[expectations.Verdict]:
  """Published claims about training at L, checked on every seed's final validation loss.

  A comparison holds when every seed (paired: seed ``i`` of both PEs) has the claimed order, or
  the 95% bootstrap interval of the paired differences excludes 0
  (:func:`~experiments.study.expectations.compare_over_seeds`); the mean never decides.

  Args:
    final_valid: pe -> final validation loss per seed.
    unigram: the corpus's unigram loss.
  """
  out = []
  cell = lambda values: table_cells.fmt_spread(seed_statistics.spread(values), 3)
  shown = ", ".join(f"{p} {cell(v)}" for p, v in final_valid.items())
  for pe, source in (("rope", "Su et al. 2021, Fig. 3"),
                     ("alibi", "Press et al. 2022, Table 2 / Fig. 1 at L")):
    if pe in final_valid and "sinusoidal" in final_valid:
      result = expectations.compare_over_seeds(final_valid[pe], final_valid["sinusoidal"],
                                               higher_is_better=False)
      out.append(expectations.verdict(
          f"At the same budget {pe} reaches a lower loss than sinusoidal ({source})",
          f"final validation loss {pe} < sinusoidal on every seed, or a 95% bootstrap interval "
          "of the paired differences excluding 0", f"{shown}; {result.text()}",
          lambda result=result: result))
  if unigram is not None and final_valid:
    out.append(expectations.verdict(
        "Every model trains well past the unigram loss (needed for PE differences to show)",
        f"every seed's final validation loss <= {WELL_BELOW_UNIGRAM} x unigram loss "
        f"({table_cells.fmt(WELL_BELOW_UNIGRAM * unigram, 3)})",
        shown + f"; unigram {table_cells.fmt(unigram, 3)}",
        lambda: expectations.every_seed([v for vs in final_valid.values() for v in vs],
                                        lambda v: v <= WELL_BELOW_UNIGRAM * unigram)))
  return out


def run(options: study_options.StudyOptions, *, pes: Sequence[str] = PES,
        log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Runs the study (training only what the extrapolation study has not) and writes the report."""
  from pejax.train import read_metrics  # pylint: disable=g-import-not-at-top
  base = extrapolation.base_config(options)
  seeds = options.seed_list((0,) if options.quick else (0, 1))
  runs_dir = options.models_dir(STUDY)
  workdir = options.report_dir(STUDY)
  reuse = [] if options.runs_dir else [options.models_dir(extrapolation.STUDY)]
  report = markdown_report.Report("Training curves: sinusoidal vs RoPE vs ALiBi", study=STUDY,
                               options=options)
  report.models_per_arm(len(seeds))
  unigram = trained_runs.unigram_loss(str(base.data.name))
  train_curves, eval_curves, runs, seed_evals = {}, {}, {}, {}
  for pe in pes:
    per_seed_train, per_seed_eval = [], []
    for seed in seeds:
      config = extrapolation.pe_config(base, pe, seed)
      info = trained_runs.train_run(config, runs_dir=runs_dir, reuse_dirs=reuse, log=log)
      curves = curves_from_metrics(read_metrics(info.run_dir))
      per_seed_train.append(curves["train"])
      per_seed_eval.append(curves["eval"])
      runs.setdefault(pe, []).append(info)
    train_curves[pe] = average_curves(per_seed_train)
    eval_curves[pe] = average_curves(per_seed_eval)
    seed_evals[pe] = per_seed_eval
  final_valid = {pe: (eval_curves[pe][-1][1] if eval_curves[pe] else None) for pe in pes}
  report.add_runs([r for infos in runs.values() for r in infos])
  for v in verdicts({pe: [c[-1][1] if c else None for c in seed_evals[pe]] for pe in pes},
                    unigram=unigram):
    report.add_verdict(v)

  report.section(
      "Setup",
      f"Same settings as the extrapolation study: {base.model.num_layers} layers, d_model "
      f"{base.model.d_model}, L = {base.data.train_len}, batch {base.data.batch_size}, "
      f"{base.train.steps} steps, AdamW lr {base.optim.learning_rate} (warm-up "
      f"{base.optim.warmup_steps}, cosine), seeds {seeds}; the training loss is the mean over "
      f"each {base.train.log_every}-step logging window, the validation loss is measured every "
      f"{base.train.eval_every} steps at L. Curves are means over seeds (band: min-max).")
  series = {}
  for pe in pes:
    series[f"{pe} train"] = train_curves[pe]
    series[f"{pe} valid"] = eval_curves[pe]
  styles = {f"{pe} valid": "--" for pe in pes}
  colors = {f"{pe} {split}": f"C{i}" for i, pe in enumerate(pes) for split in ("train", "valid")}
  png = eval_report.plot_curves(
      workdir / "training_curves.png", series, xlabel="step", ylabel="loss (nats per byte)",
      hline=unigram, hline_label="unigram loss", styles=styles, colors=colors,
      title=f"Training curves at L = {base.data.train_len} (dashed: validation; "
      f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''})")
  report.image(png, "training curves")
  threshold = 0.6 * unigram if unigram else None
  rows = []
  for pe in pes:
    final_train = seed_statistics.spread([r.train_loss for r in runs[pe]])
    valid = seed_statistics.spread([r.valid_loss for r in runs[pe]])
    rows.append([pe, base.train.steps, table_cells.fmt_spread(final_train, 3),
                 table_cells.fmt_spread(valid, 3),
                 (first_step_below(train_curves[pe], threshold) or "not reached") if threshold
                 else "n/a",
                 ", ".join(r.train_time() for r in runs[pe])])
  report.table(["PE", "steps", "final train loss", "final valid loss",
                f"first step with train loss <= {table_cells.fmt(threshold, 3)}",
                "train time"], rows,
               caption=f"**Final losses** (nats per byte; unigram {table_cells.fmt(unigram, 3)}; "
               "mean [min-max] over seeds)")
  results = {"seeds": seeds, "unigram_loss": unigram, "final_valid_loss": final_valid,
             "train_curves": train_curves, "eval_curves": eval_curves,
             "runs": {pe: [r.to_json() for r in infos] for pe, infos in runs.items()}}
  return markdown_report.write_report(report, workdir, results, study=STUDY, log=log)


if __name__ == "__main__":
  study_options.run_as_launch("training_curves")
