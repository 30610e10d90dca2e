"""The report sections every algorithmic study shares: setup, fit, per-task tables and plots."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any, Dict, List, Mapping

import ml_collections
import numpy as np

from experiments.algorithmic import convergence
from experiments.algorithmic import model_runs
from experiments.algorithmic import seed_comparison
from experiments.algorithmic import seed_summary
from experiments.algorithmic import sweep
from experiments.study import markdown_report
from experiments.study import study_options
from experiments.study import table_cells
from pejax.eval import report as eval_report


def fit_lines(summary: Mapping[str, Mapping[str, Any]], recipe: convergence.Recipe, *,
              rescue_steps: int = 0) -> str:
  """Which variants fit per task, and how far the others got."""
  lines = []
  for task, variants in summary.items():
    ok = [f"{v} ({e['fit']}/{e['seeds']})" for v,
          e in variants.items() if seed_summary.comparable(e)]
    bad = [f"{v} ({e['fit']}/{e['seeds']}, best {table_cells.median_cell(e['best_in_dist'], 3)})"
           for v, e in variants.items() if not seed_summary.comparable(e)]
    lines.append(f"- {task}: fit (>= {recipe.fit_threshold:g} held-out in-distribution exact "
                 f"match within {seed_comparison.cap_text(recipe.max_steps, rescue_steps)}) "
                 "in a majority of "
                 f"seeds: {', '.join(ok) or 'none'}; did not: {', '.join(bad) or 'none'}.")
  return "\n".join(lines)


def task_table(entries: Mapping[str, Mapping[str, Any]], recipe: convergence.Recipe
               ) -> tuple:
  """Header and rows of one task: OOD as measured on every seed beside chance (the headline),
  the fit rate, steps-to-fit per seed, and the OOD spreads of the seeds that fit."""
  header = ["variant", "OOD, every seed as measured", "chance", "seeds fit",
            "steps to fit per seed (or best in-dist at the cap)", "held-out in-dist",
            "OOD, seeds that fit", "OOD (1x, 2x], seeds that fit", "OOD > 2x, seeds that fit"]
  rows = []
  for variant, e in entries.items():
    per_seed = ", ".join(
        (str(r["steps_to_fit"]) if r["steps_to_fit"] is not None
         else f"no ({table_cells.fmt(r['best_in_dist'], 2)})")
        + (" (2nd run)" if r.get("second_run") else "") for r in e.get("records", []))
    raw = e.get("ood" + seed_summary.RAW)
    row = [variant, table_cells.median_cell(raw, 3) if raw else "n/a",
           table_cells.fmt(e.get("chance"), 3), f"{e['fit']}/{e['seeds']}",
           per_seed or table_cells.median_cell(e["steps_to_fit"], 0),
           table_cells.median_cell(e["in_dist"], 3)]
    if e["fit"]:
      row += [table_cells.median_cell(e["ood"], 3), table_cells.median_cell(e["ood_2x"], 3),
              table_cells.median_cell(e["ood_far"], 3)]
    else:
      row += ["did not fit", "", ""]
    rows.append(row)
  return header, rows


def _curve(settings: sweep.Settings, outcomes: Mapping[tuple, model_runs.Outcome], task: str,
           variant: str
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


def curves(settings: sweep.Settings, outcomes: Mapping[tuple, model_runs.Outcome], task: str
           ) -> Dict[str, List[tuple]]:
  """``"<variant> (<k>/<n> fit)"`` -> (size, median, min, max) over the fitting seeds (all
  seeds if none fit)."""
  series = {}
  for variant in settings.variants:
    fit, points = _curve(settings, outcomes, task, variant)
    series[f"{variant} ({fit})"] = points
  return series


def curve_panels(settings: sweep.Settings, outcomes: Mapping[tuple, model_runs.Outcome], task: str
                 ) -> Dict[str, Dict[str, List[tuple]]]:
  """One panel per PE: ``pe -> {"plain (k/n fit)" | "randomized (k/n fit)": points}``."""
  panels: Dict[str, Dict[str, List[tuple]]] = {}
  for variant in settings.variants:
    pe, randomized = sweep.parse_variant(variant)
    fit, points = _curve(settings, outcomes, task, variant)
    panels.setdefault(pe, {})[f"{'randomized' if randomized else 'plain'} ({fit})"] = points
  return panels


PANELS_FROM = 9  # Variants from which the accuracy-by-size figure is one panel per PE.


def quick_label(settings: sweep.Settings) -> str:
  return (f"{len(settings.seeds)} seed{'s' if len(settings.seeds) > 1 else ''}, at most "
          f"{settings.recipe.max_steps} steps")


def setup_lines(base: ml_collections.ConfigDict, settings: sweep.Settings) -> List[str]:
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
         "it 2nd run)" if settings.rescue_steps else "")
      + "".join(f"; {t.name}: no second run (its in-distribution accuracy is a finding: every "
                f"model trains to the first cap, fit or not)"
                for t in settings.tasks if settings.rescue_steps and not t.second_run),
      f"- seeds: {', '.join(str(s) for s in settings.seeds)}; tables: median [min-max] over "
      "seeds; OOD as every seed measured it (the headline and the verdicts), and over the seeds "
      "that fit",
      (f"- test: {settings.examples} examples per size, exact match of the whole answer "
       "(teacher forcing, equal to greedy decoding)" if settings.metric == "exact_match" else
       f"- test: {settings.examples} examples per size, per-token accuracy: the fraction of "
       "answer bytes whose argmax is right under teacher forcing (each byte predicted from the "
       "correct earlier ones), averaged over the examples; 1.0 exactly for an exact match, and "
       "about 1/k for a model guessing among k symbols (0.5 on binary strings)"),
      (f"- randomized positions (Ruoss et al. 2023): sorted samples of [0, "
       f"{settings.position_range}) in training and at test (the paper's protocol); a bounded "
       f"table (learned positions) has {settings.position_range} rows"
       if any(sweep.parse_variant(v)[1] for v in settings.variants) else
       f"- a bounded table (learned positions) has {settings.position_range} rows")
      + "".join(f"; {t.name}: its own range, {t.max_position} (its rows are longer)"
                for t in settings.tasks if t.max_position),
      f"- verdicts: a claim holds only when every seed of the expected winner is above every "
      f"seed of the expected loser (min-max ranges do not overlap) and the medians differ by "
      f">= {seed_comparison.MARGIN:g}, on the OOD accuracy every trained seed measured (fit or "
      "not: the fit rate is its own column); when every seed of both sides is at or below "
      "chance the claim is not measurable (floor); with one seed it is indicative only",
  ]


def training_minutes(outcomes: Mapping[tuple, model_runs.Outcome]) -> float:
  return sum(o.train_seconds for o in outcomes.values()) / 60


def write_common(report: markdown_report.Report, base: ml_collections.ConfigDict,
                 settings: sweep.Settings, outcomes: Mapping[tuple, model_runs.Outcome],
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
      eval_report.plot_panels(
          path, panels, xlabel="size",
          ylabel=f"{settings.metric_label} (median, band: min-max over seeds)",
          title=title, vline=spec.train_max + 0.5, vline_label="largest training size",
          styles={k: "--" for series in panels.values() for k in series
                  if k.startswith("randomized")},
          colors={k: "tab:orange" if k.startswith("randomized") else "tab:blue"
                  for series in panels.values() for k in series})
    else:
      series = curves(settings, outcomes, spec.name)
      eval_report.plot_curves(
          path, series, xlabel="size", ylabel=settings.metric_label, title=title,
          vline=spec.train_max + 0.5, vline_label="largest training size",
          styles={k: "--" for k in series if "randomized" in k})
    report.image(path, f"{spec.name} accuracy by size")


def results_payload(settings: sweep.Settings, summary: Mapping[str, Any],
                    outcomes: Mapping[tuple, model_runs.Outcome]) -> Dict[str, Any]:
  runs = {}
  for (task, variant, seed), o in outcomes.items():
    runs.setdefault(task, {}).setdefault(variant, []).append(
        {"seed": seed, "fit": o.fit.to_json(), "protocol": o.protocol,
         "aggregate": o.aggregate, "accuracy_by_size": o.evals,
         "first_run": o.first.to_json() if o.first else None})
  return {"settings": json.loads(json.dumps(dataclasses.asdict(settings), default=str)),
          "summary": summary, "runs": runs}


def report_for(title: str, *, study: str, options: study_options.StudyOptions,
               settings: sweep.Settings) -> markdown_report.Report:
  report = markdown_report.Report(title, study=study, options=options)
  if options.quick or len(settings.seeds) < 2:
    report.indicative = quick_label(settings)
  return report


def markdown_ranking(board: Mapping[str, Mapping[str, Any]], metric_label: str = "exact match"
                     ) -> str:
  ordered = sorted(board.items(), key=lambda kv: -(kv[1]["median"] or 0.0))
  return table_cells.markdown_table(["variant", f"mean OOD {metric_label}"],
                                     [[v, table_cells.median_cell(s, 3)] for v, s in ordered])
