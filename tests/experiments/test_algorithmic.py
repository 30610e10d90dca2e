"""The algorithmic studies' shared machinery: convergence training (fit, cap, cache), seed-spread verdicts."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from unittest import mock

from absl.testing import absltest
import numpy as np
import pytest

from experiments import kazemnejad_suite
from experiments.algorithmic import convergence
from experiments.algorithmic import model_runs
from experiments.algorithmic import report_sections
from experiments.algorithmic import scoring
from experiments.algorithmic import seed_comparison
from experiments.algorithmic import seed_summary
from experiments.algorithmic import sweep
from experiments.algorithmic import sweep_progress
from experiments.study import expectations
from experiments.study import markdown_report
from experiments.study import result_cache
from experiments.study import seed_statistics
from experiments.study import study_options
from experiments.study import table_cells
from pejax import experiment_config
from pejax.eval import report as eval_report


def _spread(*values):
  return seed_statistics.spread(list(values))


def _tiny_config():
  config = experiment_config.get_default_config()
  config.model.num_layers, config.model.d_model, config.model.num_heads = 1, 16, 2
  config.data.batch_size = 4
  config.pe.name = "rope"
  return config


def _copy_and_parity_settings(*, copy_second_run: bool = True) -> sweep.Settings:
  """Two tasks, one RoPE model each, cap 600 and a second run of 1200."""
  return sweep.Settings(
      tasks=(sweep.TaskSpec("copy", 2, (1, 3), second_run=copy_second_run),
             sweep.TaskSpec("parity", 2, (1, 3))),
      variants=("rope",), seeds=(0,), recipe=convergence.Recipe(max_steps=600),
      rescue_steps=1200)


def _run_with_fake_training(settings, fake_train):
  """``run_models`` with ``fake_train`` for training and a fixed evaluation: (outcomes, log)."""
  lines = []
  with mock.patch.object(convergence, "train_to_fit", fake_train), \
      mock.patch.object(scoring, "evaluate", lambda *a, **k: {"arange": {"1": 1.0, "3": 0.5}}):
    out = model_runs.run_models(experiment_config.get_default_config(), settings,
                                runs_dir=pathlib.Path("/nonexistent"), log=lines.append)
  return out, lines


class CompareTest(absltest.TestCase):

  def test_difference_counts_only_beyond_the_seed_range(self):
    self.assertTrue(seed_comparison.compare({"a": _spread(0.5, 0.6, 0.7)}, {"b": _spread(0.1, 0.2,
                                                                                         0.4)}))
    # Overlapping ranges: the medians differ by 0.3 but one seed of b beats one of a.
    self.assertFalse(seed_comparison.compare({"a": _spread(0.3, 0.6, 0.7)},
                                    {"b": _spread(0.1, 0.3, 0.4)}))
    # Separated but within the margin.
    self.assertFalse(seed_comparison.compare({"a": _spread(0.51, 0.52)}, {"b": _spread(0.50,
                                                                                       0.505)}))
    self.assertIsNone(seed_comparison.compare({"a": _spread()}, {"b": _spread(0.1)}))
    # One seed each: only the medians (the report labels it indicative).
    self.assertTrue(seed_comparison.compare({"a": _spread(0.5)}, {"b": _spread(0.1)}))

  def test_why_not_names_the_pair_and_the_broken_part_of_the_criterion(self):
    self.assertEqual(
        seed_comparison.why_not({"a": _spread(0.5, 0.6, 0.7)}, {"b": _spread(0.1, 0.2)}), "")
    self.assertEqual(
        seed_comparison.why_not({"none": _spread(0.1)}, {"sinusoidal": _spread(0.2)}),
        "Reason: sinusoidal is ahead of none or level with it (medians 0.200 vs 0.100).")
    self.assertIn("the seeds overlap: a's lowest seed 0.300 is not above b's highest 0.400",
                  seed_comparison.why_not({"a": _spread(0.3, 0.6, 0.7)}, {"b": _spread(0.1, 0.3,
                                                                                       0.4)}))
    self.assertIn("a leads b by 0.013 in the median, less than the 0.02 margin",
                  seed_comparison.why_not({"a": _spread(0.51, 0.52)}, {"b": _spread(0.50, 0.505)}))
    # A lead just under the margin is printed with the digits that show it is under (the full
    # length-generalization run had t5 0.026 vs sinusoidal 0.007: "0.020 < 0.02" before).
    self.assertIn("t5 leads sinusoidal by 0.0197 in the median, less than the 0.02 margin",
                  seed_comparison.why_not({"t5": _spread(0.0261)}, {"sinusoidal": _spread(0.0064)}))
    self.assertEqual(seed_comparison.why_not({"a": _spread()}, {"b": _spread(0.1)}), "")

  def test_a_verdict_that_did_not_hold_carries_its_reason(self):
    entries = {v: {"fit": {"n": 3, "values": [1, 1, 1]}, "ood": _spread(*ood),
                   "best_in_dist": _spread(1.0, 1.0, 1.0)}
               for v, ood in (("none", (0.1, 0.12, 0.2)), ("sinusoidal", (0.15, 0.3, 0.31)))}
    with mock.patch.object(seed_summary, "comparable", lambda entry: True):
      out = seed_comparison.group_verdict("NoPE beats APE", entries, ["none"], ["sinusoidal"],
                                          convergence.Recipe(), view="trainability")
    self.assertFalse(out.held)
    self.assertIn("Reason: sinusoidal is ahead of none", out.note)

  def test_summary_counts_ood_over_fitting_seeds_only(self):
    records = [{"fit": True, "in_dist": 1.0, "best_in_dist": 1.0, "steps": 300,
                "steps_to_fit": 300, "ood": 0.4, "ood_2x": 0.5, "ood_far": 0.3},
               {"fit": False, "in_dist": 0.8, "best_in_dist": 0.9, "steps": 1000,
                "steps_to_fit": None, "ood": 0.9, "ood_2x": 0.9, "ood_far": 0.9},
               {"fit": True, "in_dist": 0.99, "best_in_dist": 0.99, "steps": 500,
                "steps_to_fit": 500, "ood": 0.2, "ood_2x": 0.3, "ood_far": 0.1}]
    entry = seed_summary.summarize_variant(records)
    self.assertEqual((entry["fit"], entry["seeds"]), (2, 3))
    self.assertTrue(seed_summary.comparable(entry))
    self.assertEqual(entry["ood"]["max"], 0.4)
    self.assertEqual(entry["steps_to_fit"]["median"], 400)
    self.assertEqual(table_cells.median_cell(entry["best_in_dist"], 2), "0.99 [0.90-1.00]")

  def test_strict_spreads_count_every_seed_with_unfit_ones_zero(self):
    records = [{"fit": True, "in_dist": 1.0, "best_in_dist": 1.0, "steps": 300,
                "steps_to_fit": 300, "ood": 0.4, "ood_2x": 0.5, "ood_far": 0.3},
               {"fit": False, "in_dist": 0.8, "best_in_dist": 0.9, "steps": 1000,
                "steps_to_fit": None, "ood": 0.9, "ood_2x": 0.9, "ood_far": 0.9}]
    entry = seed_summary.summarize_variant(records)
    self.assertEqual(entry["ood_strict"]["values"], [0.4, 0.0])
    self.assertEqual(entry["ood_far_strict"]["values"], [0.3, 0.0])
    self.assertEqual(entry["ood"]["values"], [0.4])

  def test_a_variant_that_fit_in_no_majority_still_gets_a_measured_verdict(self):
    fit = lambda *ood: seed_summary.summarize_variant([
        {"fit": True, "in_dist": 1.0, "best_in_dist": 1.0, "steps": 100, "steps_to_fit": 100,
         "ood": v, "ood_2x": v, "ood_far": v} for v in ood])
    unfit = seed_summary.summarize_variant([
        {"fit": f, "in_dist": 0.9, "best_in_dist": b, "steps": 600, "steps_to_fit": None,
         "ood": 0.8, "ood_2x": 0.8, "ood_far": 0.8} for f, b in ((False, 0.95), (False, 0.97))]
        + [{"fit": True, "in_dist": 1.0, "best_in_dist": 1.0, "steps": 500, "steps_to_fit": 500,
            "ood": 0.6, "ood_2x": 0.6, "ood_far": 0.6}])
    entries = {"rope+randomized": unfit, "rope": fit(0.1, 0.2, 0.3)}
    # The raw view (the studies' verdicts): every seed with what it measured, fit or not. The
    # randomized variant generalizes better ([0.6, 0.8, 0.8] vs [0.1, 0.3]) though it fit less.
    raw = seed_comparison.group_verdict("randomized helps rope", entries, ["rope+randomized"],
                                        ["rope"], convergence.Recipe(max_steps=600),
                                        rescue_steps=1200)
    self.assertIs(raw.held, True)
    self.assertIn("rope+randomized 0.800 [0.600-0.800]", raw.measured)
    self.assertIn("their seeds enter with the accuracy they measured", raw.note)
    self.assertIn("fit or not", raw.criterion)
    # The trainability view: a seed that did not fit counts 0, so the same models read "not
    # held" (the conflation issue 45 names; kept as a named view, not the verdict).
    out = seed_comparison.group_verdict("randomized helps rope", entries, ["rope+randomized"],
                                        ["rope"], convergence.Recipe(max_steps=600),
                                        rescue_steps=1200, view="trainability")
    self.assertIs(out.held, False)  # [0, 0, 0.6] overlaps [0.1, 0.3]: measured, not held.
    self.assertIn("rope+randomized 0.000 [0.000-0.600]", out.measured)
    self.assertIn("within 600 steps, or 1200 in a second run)", out.note)
    self.assertIn("best in-distribution: rope+randomized 0.970 [0.950-1.000]", out.note)
    self.assertIn("a seed that did not fit counted 0", out.note)
    losing = seed_comparison.group_verdict("rope beats its randomized variant", entries, ["rope"],
                                           ["rope+randomized"], convergence.Recipe(),
                                           view="trainability")
    self.assertIs(losing.held, False)
    self.assertIn("the seeds overlap", losing.note)
    with self.assertRaisesRegex(ValueError, "view must be one of .*got 'gated'"):
      seed_comparison.group_verdict("x", entries, ["rope"], ["rope+randomized"],
                                    convergence.Recipe(), view="gated")

  def test_raw_view_at_chance_on_both_sides_is_the_floor(self):
    at_chance = lambda *ood: dict(seed_summary.summarize_variant([
        {"fit": False, "in_dist": 0.5, "best_in_dist": 0.5, "steps": 600, "steps_to_fit": None,
         "ood": v, "ood_2x": v, "ood_far": v} for v in ood]), chance=0.5)
    entries = {"a": at_chance(0.5, 0.49, 0.5), "b": at_chance(0.45, 0.5, 0.48)}
    out = seed_comparison.group_verdict("a beats b", entries, ["a"], ["b"], convergence.Recipe())
    self.assertEqual(out.status, expectations.FLOOR)
    self.assertIn("at or below chance (0.500)", out.criterion)
    entries["a"] = at_chance(0.9, 0.8, 0.85)  # One side above chance: decided.
    out = seed_comparison.group_verdict("a beats b", entries, ["a"], ["b"], convergence.Recipe())
    self.assertIs(out.held, True)

  def test_suite_mean_raw_and_trainability_views(self):
    def outcome(task, seed, fit, ood):
      result = convergence.FitResult(run_dir=pathlib.Path("/nonexistent"), steps=100,
                                     steps_to_fit=100 if fit else None, in_dist=1.0,
                                     best_in_dist=1.0, best_step=100, curve=(),
                                     train_seconds=1.0)
      return model_runs.Outcome(task, "rope", seed, result, {}, "arange", {"ood": ood})
    settings = sweep.Settings(
        tasks=(sweep.TaskSpec("copy", 2, (3,)), sweep.TaskSpec("parity", 2, (3,))),
        variants=("rope",), seeds=(0, 1), recipe=convergence.Recipe())
    outcomes = {("copy", "rope", 0): outcome("copy", 0, True, 0.5),
                ("parity", "rope", 0): outcome("parity", 0, False, 0.9),
                ("copy", "rope", 1): outcome("copy", 1, True, 0.3),
                ("parity", "rope", 1): outcome("parity", 1, True, 0.7)}
    self.assertEqual(seed_summary.suite_mean(settings, outcomes, "rope", view="trainability")
                     ["values"], [0.25, 0.5])
    # The raw view: parity's seed 0 enters with the 0.9 it measured.
    self.assertEqual(seed_summary.suite_mean(settings, outcomes, "rope")["values"], [0.7, 0.5])
    # The published protocol: per task the best seed (copy 0.5, parity 0.9), mean over tasks.
    self.assertEqual(seed_summary.suite_mean(settings, outcomes, "rope", view="best_seed")
                     ["values"], [0.7])
    with self.assertRaisesRegex(ValueError, "view must be one of"):
      seed_summary.suite_mean(settings, outcomes, "rope", view="mean")

  def test_rescue_cap_must_exceed_the_first_cap(self):
    with self.assertRaisesRegex(ValueError, "rescue_steps must be 0 or above the cap 600, got "
                                "600"):
      sweep.Settings(tasks=(), variants=(), seeds=(0,),
                      recipe=convergence.Recipe(max_steps=600), rescue_steps=600)
    settings = sweep.Settings(tasks=(), variants=(), seeds=(0,),
                               recipe=convergence.Recipe(max_steps=600), rescue_steps=1200)
    self.assertEqual(settings.rescue_recipe, convergence.Recipe(max_steps=1200))
    self.assertIsNone(dataclasses.replace(settings, rescue_steps=0).rescue_recipe)

  def test_many_variants_are_drawn_one_panel_per_pe(self):
    def outcome(variant, seed):
      result = convergence.FitResult(run_dir=pathlib.Path("/nonexistent"), steps=100,
                                     steps_to_fit=100 if "alibi" not in variant else None,
                                     in_dist=1.0, best_in_dist=1.0, best_step=100, curve=(),
                                     train_seconds=1.0)
      return model_runs.Outcome("copy", variant, seed, result, {"arange": {"1": 1.0, "3": 0.5}},
                            "arange", {"ood": 0.5})
    variants = ("none",) + tuple(f"{pe}{r}" for pe in ("rope", "alibi", "t5", "learned")
                                 for r in ("", "+randomized"))
    settings = sweep.Settings(tasks=(sweep.TaskSpec("copy", 2, (1, 3)),), variants=variants,
                               seeds=(0, 1), recipe=convergence.Recipe())
    outcomes = {("copy", v, s): outcome(v, s) for v in variants for s in (0, 1)}
    panels = report_sections.curve_panels(settings, outcomes, "copy")
    self.assertEqual(list(panels), ["none", "rope", "alibi", "t5", "learned"])
    self.assertEqual(set(panels["alibi"]), {"plain (did not fit)", "randomized (did not fit)"})
    self.assertEqual(panels["rope"]["randomized (2/2 fit)"], [(1, 1.0, 1.0, 1.0),
                                                              (3, 0.5, 0.5, 0.5)])
    self.assertGreaterEqual(len(variants), report_sections.PANELS_FROM)
    report = markdown_report.Report("t", study="t", options=study_options.StudyOptions(command="t"))
    with mock.patch.object(eval_report, "plot_panels") as drawn:
      report_sections.write_common(report, experiment_config.get_default_config(), settings,
                                   outcomes,
                          seed_summary.summaries(settings, outcomes),
                          pathlib.Path(self.create_tempdir().full_path))
    self.assertEqual(list(drawn.call_args.args[1]), list(panels))
    setup = next(part for part in report.parts if part.startswith("## Setup"))
    self.assertIn("- trained on: not recorded (trained before 2026-12-02 07:00 UTC) (18 models)",
                  setup)
    self.assertEqual(drawn.call_args.kwargs["styles"]["randomized (2/2 fit)"], "--")

  def test_shards_partition_the_models_in_seed_major_order(self):
    trained = []

    def fake_train(config, recipe, *, task, train_sizes, runs_dir, label, randomized, log):
      del config, recipe, train_sizes, runs_dir, randomized, log
      trained.append(label)
      return convergence.FitResult(run_dir=pathlib.Path("/nonexistent"), steps=100,
                                   steps_to_fit=100, in_dist=1.0, best_in_dist=1.0,
                                   best_step=100, curve=(), train_seconds=1.0)

    settings = sweep.Settings(
        tasks=(sweep.TaskSpec("copy", 2, (1, 3)), sweep.TaskSpec("parity", 2, (1, 3))),
        variants=("rope", "alibi", "none"), seeds=(0, 1), recipe=convergence.Recipe())
    keys = []
    with mock.patch.object(convergence, "train_to_fit", fake_train), \
        mock.patch.object(scoring, "evaluate", lambda *a, **k: {"arange": {"1": 1.0, "3": 0.5}}):
      for shard in ((0, 2), (1, 2)):
        keys.append(set(model_runs.run_models(experiment_config.get_default_config(), settings,
                                          runs_dir=pathlib.Path("/nonexistent"),
                                          log=lambda _: None, shard=shard)))
      every = set(model_runs.run_models(experiment_config.get_default_config(), settings,
                                    runs_dir=pathlib.Path("/nonexistent"), log=lambda _: None))
    self.assertEqual(len(every), 12)
    self.assertEqual((len(keys[0]), len(keys[1])), (6, 6))
    self.assertEqual(keys[0] | keys[1], every)
    self.assertFalse(keys[0] & keys[1])
    self.assertEqual(trained[:3], ["copy-rope-s0", "copy-none-s0", "parity-alibi-s0"])

  def test_shard_options_are_checked(self):
    for bad in ((2, 2), (0, 0), (-1, 2), ("0", 2)):
      with self.assertRaisesRegex(study_options.StudyOptionError, "shard must be"):
        study_options.StudyOptions(shard=bad)
    self.assertEqual(study_options.StudyOptions(shard=(1, 3)).shard, (1, 3))

  def test_a_model_that_did_not_fit_gets_one_second_run_with_the_longer_cap(self):
    calls = []

    def fake_train(config, recipe, *, task, train_sizes, runs_dir, label, randomized, log):
      del config, train_sizes, runs_dir, randomized, log
      calls.append((task, label, recipe.max_steps))
      fits = label.startswith("copy") and recipe.max_steps == 1200  # copy fits on its 2nd run.
      return convergence.FitResult(
          run_dir=pathlib.Path("/nonexistent") / label, steps=900 if fits else recipe.max_steps,
          steps_to_fit=900 if fits else None, in_dist=1.0 if fits else 0.5,
          best_in_dist=1.0 if fits else 0.6, best_step=100, curve=(), train_seconds=10.0)

    settings = _copy_and_parity_settings()
    out, lines = _run_with_fake_training(settings, fake_train)
    self.assertEqual(calls, [("copy", "copy-rope-s0", 600), ("copy", "copy-rope-s0-cap1200", 1200),
                             ("parity", "parity-rope-s0", 600),
                             ("parity", "parity-rope-s0-cap1200", 1200)])
    copy, parity = out[("copy", "rope", 0)], out[("parity", "rope", 0)]
    self.assertEqual((copy.fit.steps_to_fit, copy.first.steps), (900, 600))
    self.assertEqual(copy.train_seconds, 20.0)
    self.assertTrue(copy.record()["second_run"])
    self.assertFalse(parity.fit.fit)  # The second run's result is the one kept.
    self.assertEqual(parity.fit.steps, 1200)
    self.assertTrue(any("did not fit within 600 steps (best 0.600); a second run from scratch "
                        "with a cap of 1200" in line for line in lines))
    summary = seed_summary.summaries(settings, out)
    _, rows = report_sections.task_table(summary["copy"], settings.recipe)
    self.assertEqual(rows[0][4], "900 (2nd run)")  # After the raw OOD, chance and fit rate.
    runs = report_sections.results_payload(settings, summary, out)["runs"]
    self.assertEqual(runs["copy"]["rope"][0]["first_run"]["steps"], 600)
    self.assertEqual(runs["copy"]["rope"][0]["fit"]["steps_to_fit"], 900)

  def test_a_task_without_second_runs_keeps_its_first_run(self):
    calls = []

    def fake_train(config, recipe, *, task, train_sizes, runs_dir, label, randomized, log):
      del config, train_sizes, runs_dir, randomized, log
      calls.append((label, recipe.max_steps))
      return convergence.FitResult(
          run_dir=pathlib.Path("/nonexistent") / label, steps=recipe.max_steps,
          steps_to_fit=None, in_dist=0.5, best_in_dist=0.96, best_step=500, curve=(),
          train_seconds=10.0)

    settings = _copy_and_parity_settings(copy_second_run=False)
    out, lines = _run_with_fake_training(settings, fake_train)
    # Neither fits; only parity gets the second run.
    self.assertEqual(calls, [("copy-rope-s0", 600), ("parity-rope-s0", 600),
                             ("parity-rope-s0-cap1200", 1200)])
    copy = out[("copy", "rope", 0)]
    self.assertIsNone(copy.first)
    self.assertEqual((copy.fit.steps, copy.fit.best_in_dist), (600, 0.96))
    self.assertFalse(copy.record()["second_run"])
    self.assertFalse(any("copy-rope-s0: did not fit" in line for line in lines))
    setup = "\n".join(report_sections.setup_lines(experiment_config.get_default_config(),
                                                   settings))
    self.assertIn("copy: no second run", setup)
    self.assertNotIn("parity: no second run", setup)

  def test_reciprocal_ranks_share_ties(self):
    self.assertEqual(kazemnejad_suite.reciprocal_ranks({"a": 0.9, "b": 0.5, "c": 0.5, "d": 0.1}),
                     {"a": 1.0, "b": 0.5, "c": 0.5, "d": 0.25})

  def test_sampled_positions_follow_the_training_distribution(self):
    rng = np.random.default_rng(0)
    pos = convergence.sampled_positions(rng, [3, 10], row_len=12, train_len=8, max_position=64)
    self.assertTrue(np.all(np.diff(pos[1, :10]) > 0))
    self.assertTrue(np.all(pos[0, 3:] == pos[0, 2]))  # Padding repeats the last position.
    np.testing.assert_array_equal(
        convergence.sampled_positions(rng, [3], row_len=4, train_len=2, max_position=None),
        [[0, 1, 2, 3]])
    with self.assertRaisesRegex(ValueError, "max_position must be >= 8"):
      convergence.sampled_positions(rng, [3], row_len=4, train_len=8, max_position=5)

  def test_row_len_for_is_the_shortest_fitting_row(self):
    self.assertEqual(convergence.row_len_for("copy", 8), 17)  # 2n + 2 bytes fill 2n + 1 rows.
    self.assertEqual(convergence.row_len_for("parity", 40), 42)

  def test_recipe_rejects_bad_values(self):
    with self.assertRaisesRegex(ValueError, "fit_threshold must be in"):
      convergence.Recipe(fit_threshold=1.5)
    with self.assertRaisesRegex(ValueError, "decay must be"):
      convergence.Recipe(decay="linear")


class MetricTest(absltest.TestCase):

  def test_per_token_accuracy_is_at_least_exact_match_size_by_size(self):
    model = convergence.build_model(_tiny_config())  # Untrained: some bytes right by chance.
    spec = sweep.TaskSpec("reverse_string", 4, (2, 4, 6), train_min=1)
    common = {"examples": 6, "seed": 0, "train_len": convergence.row_len_for(spec.name, 4),
              "max_position": None}
    exact = scoring.accuracy_by_size(model, spec, **common)
    token = scoring.accuracy_by_size(model, spec, metric="token_accuracy", **common)
    self.assertEqual(set(token), {2, 4, 6})
    for size in token:
      self.assertGreaterEqual(token[size], exact[size])
      self.assertBetween(token[size], 0.0, 1.0)
    with self.assertRaisesRegex(ValueError, "metric must be one of .*got 'bleu'"):
      scoring.accuracy_by_size(model, spec, metric="bleu", **common)

  def test_settings_check_the_metric_and_name_it(self):
    with self.assertRaisesRegex(ValueError, "metric must be one of .*got 'per_token'"):
      sweep.Settings(tasks=(), variants=(), seeds=(0,), recipe=convergence.Recipe(),
                      metric="per_token")
    settings = sweep.Settings(tasks=(), variants=(), seeds=(0,), recipe=convergence.Recipe(),
                               metric="token_accuracy")
    self.assertEqual(settings.metric_label, "per-token accuracy")
    self.assertEqual(dataclasses.replace(settings, metric="exact_match").metric_label,
                     "exact match")


class TrainToFitTest(absltest.TestCase):

  @pytest.mark.slow
  def test_stops_at_the_cap_caches_and_reloads(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    config = experiment_config.get_default_config()
    config.model.num_layers, config.model.d_model, config.model.num_heads = 1, 16, 2
    config.data.batch_size = 4
    config.pe.name = "rope"
    recipe = convergence.Recipe(max_steps=4, check_every=2, check_examples=8)
    result = convergence.train_to_fit(config, recipe, task="parity", train_sizes=(1, 3),
                                      runs_dir=tmp, label="parity-rope-s0")
    self.assertEqual(result.steps, 4)
    self.assertEqual([c[0] for c in result.curve], [2, 4])
    self.assertIsNone(result.steps_to_fit)  # 4 steps cannot fit parity at 0.99.
    again = convergence.train_to_fit(config, recipe, task="parity", train_sizes=(1, 3),
                                     runs_dir=tmp, label="parity-rope-s0")
    self.assertTrue(again.reused)
    self.assertEqual(again.curve, result.curve)
    self.assertIn(" cores, jax ", result.machine)  # Where it was trained, kept in fit.json.
    self.assertEqual(again.machine, result.machine)
    model = convergence.load_model(again, config)
    self.assertEqual(model.config.d_model, 16)
    shorter = convergence.Recipe(max_steps=2, check_every=2, check_examples=8)
    other = convergence.train_to_fit(config, shorter, task="parity", train_sizes=(1, 3),
                                     runs_dir=tmp, label="parity-rope-s0")
    self.assertFalse(other.reused)
    self.assertNotEqual(other.run_dir, result.run_dir)  # The recipe is part of the key.

  def test_one_size_batches_use_one_size_and_four_row_lengths(self):
    captured = {}
    with mock.patch.object(convergence, "train_until",
                           lambda *a, **k: captured.update(k)):
      convergence.train_to_fit(
          _tiny_config(), convergence.Recipe(max_steps=4, one_size_per_batch=True),
          task="duplicate_string", train_sizes=(1, 40), runs_dir="/nonexistent", label="x")
    make_batch = captured["make_batch"]
    rng = np.random.default_rng(0)
    rows = set()
    for step in range(40):
      batch = make_batch(rng, step)
      answer_tokens = batch["loss_mask"].sum(axis=1)
      self.assertLen(set(answer_tokens.tolist()), 1)  # Every example of the batch one size.
      rows.add(batch["inputs"].shape[1])
      self.assertEqual(batch["positions"].shape, batch["inputs"].shape)
    self.assertEqual(sorted(rows), [32, 64, 96, 121])
    self.assertEqual(convergence.batch_row_len("duplicate_string", 40, 121), 121)
    self.assertEqual(convergence.batch_row_len("parity", 1, 42), 16)

  def test_randomized_rotation_pes_get_a_position_table_of_the_position_range(self):
    from experiments import length_generalization as lg  # pylint: disable=g-import-not-at-top
    options = study_options.StudyOptions()
    base = lg.base_config(options)
    for variant, want in (("liere+randomized", 66), ("comrope+randomized", 66), ("liere", None),
                          ("rope+randomized", None)):
      config = sweep.variant_config(base, variant=variant, seed=0, max_position=66)
      self.assertEqual(config.pe.get("position_table"), want, variant)

  def test_committed_records_keep_their_directories(self):
    # The run key of a default recipe must not change when Recipe gains a field: the full run
    # of length_generalization committed these directories and resumes from them.
    from experiments import length_generalization as lg  # pylint: disable=g-import-not-at-top
    options = study_options.StudyOptions()
    base = lg.base_config(options)
    settings = lg.settings_for(options, base)
    models = (pathlib.Path(__file__).resolve().parents[2] / "experiments" / "results"
              / "length_generalization" / "models")
    for task, variant, seed, name in (
        ("copy", "alibi", 0, "copy-alibi-s0-f88af68f13"),
        ("copy", "alibi+randomized", 0, "copy-alibi_randomized-s0-7d7283ccb3")):
      config = sweep.variant_config(base, variant=variant, seed=seed,
                                     max_position=settings.position_range)
      key = convergence.run_key(
          config, settings.recipe, task=task, train_sizes=(1, lg.TRAIN_MAX),
          row_len=convergence.row_len_for(task, lg.TRAIN_MAX),
          randomized=settings.position_range if "randomized" in variant else None)
      label = f"{task}-{variant.replace('+', '_')}-s{seed}"
      self.assertEqual(
          convergence.run_dir_for(models, convergence.full_key(key), label=label).name, name)
      self.assertTrue((models / name / convergence.RESULT_FILE).exists())
    self.assertNotIn("one_size_per_batch", key["recipe"])
    changed = dataclasses.replace(settings.recipe, one_size_per_batch=True)
    self.assertTrue(convergence.run_key(config, changed, task="copy", train_sizes=(1, 8),
                                        row_len=17, randomized=None)["recipe"]
                    ["one_size_per_batch"])

  @pytest.mark.slow
  def test_one_size_batches_train_and_reload(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    recipe = convergence.Recipe(max_steps=6, check_every=3, check_examples=4,
                                one_size_per_batch=True)
    result = convergence.train_to_fit(_tiny_config(), recipe, task="reverse_string",
                                      train_sizes=(1, 8), runs_dir=tmp, label="r")
    self.assertEqual(result.steps, 6)
    self.assertTrue(all(np.isfinite(c[2]) for c in result.curve))
    again = convergence.train_to_fit(_tiny_config(), recipe, task="reverse_string",
                                     train_sizes=(1, 8), runs_dir=tmp, label="r")
    self.assertTrue(again.reused)

  def test_a_killed_run_resumes_at_its_last_check_bit_identically(self):
    config = experiment_config.get_default_config()
    config.model.num_layers, config.model.d_model, config.model.num_heads = 1, 16, 2
    config.pe.name = "rope"
    recipe = convergence.Recipe(max_steps=6, check_every=2, check_examples=1)

    def make_batch(rng, step, *, fail_at=None):
      if step == fail_at:
        raise KeyboardInterrupt("killed")
      tokens = rng.integers(0, 256, size=(4, 9))
      return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
              "positions": np.broadcast_to(np.arange(8), (4, 8)),
              "loss_mask": np.ones((4, 8), np.float32)}

    def train(runs_dir, fail_at=None, lines=None):
      return convergence.train_until(
          config, recipe, key={"what": "resume-test"}, runs_dir=runs_dir, label="resume",
          make_batch=lambda rng, step: make_batch(rng, step, fail_at=fail_at),
          check=lambda model: 0.0, log=(lines.append if lines is not None else print))

    whole_dir = pathlib.Path(self.create_tempdir().full_path)
    whole = train(whole_dir)
    cut_dir = pathlib.Path(self.create_tempdir().full_path)
    with self.assertRaises(KeyboardInterrupt):
      train(cut_dir, fail_at=3)  # Killed after the check at step 2 wrote its progress.
    progress = json.loads((cut_dir / whole.run_dir.name / convergence.PROGRESS_META).read_text())
    self.assertEqual(progress["step"], 2)
    lines = []
    resumed = train(cut_dir, lines=lines)
    self.assertIn("resume: resuming at step 2 of 6", lines[0])
    self.assertTrue(any("step 4/6 held-out 0.000" in line for line in lines))
    self.assertEqual(resumed.steps, 6)
    self.assertEqual([c[:2] for c in resumed.curve], [c[:2] for c in whole.curve])
    np.testing.assert_array_equal([c[2] for c in resumed.curve], [c[2] for c in whole.curve])
    with np.load(whole.run_dir / convergence.PARAMS_FILE) as a, \
        np.load(resumed.run_dir / convergence.PARAMS_FILE) as b:
      self.assertEqual(sorted(a.files), sorted(b.files))
      for name in a.files:
        np.testing.assert_array_equal(a[name], b[name])
    for name in (convergence.PROGRESS_FILE, convergence.PROGRESS_META):
      self.assertFalse((resumed.run_dir / name).exists())  # Superseded by fit.json.


class ProgressTest(absltest.TestCase):
  """``--progress``: how far a long run is, read from the records (nothing is trained)."""

  def setUp(self):
    super().setUp()
    self.runs = pathlib.Path(self.create_tempdir().full_path)
    self.settings = sweep.Settings(
        tasks=(sweep.TaskSpec("copy", 2, (1, 3)),), variants=("rope", "alibi"), seeds=(0, 1),
        recipe=convergence.Recipe(max_steps=100), rescue_steps=200)
    self.base = _tiny_config()
    self.models = {label: (config, spec, variant) for _, spec, variant, config, label
                   in model_runs.model_order(self.base, self.settings)}

  def _key(self, label, recipe):
    config, spec, variant = self.models[label]
    return convergence.fit_key(config, recipe, task=spec.name,
                               train_sizes=(spec.train_min, spec.train_max),
                               randomized=(self.settings.position_range
                                           if sweep.parse_variant(variant)[1] else None))

  def _finished(self, label, recipe, *, fit, seconds, evaluated=True, key=None, suffix="",
                ood=0.25, eval_settings=None):
    key = key or self._key(label, recipe)
    run_dir = convergence.run_dir_for(self.runs, key, label=label + suffix)
    run_dir.mkdir(parents=True)
    result = convergence.FitResult(run_dir=run_dir, steps=recipe.max_steps,
                                   steps_to_fit=50 if fit else None, in_dist=0.5,
                                   best_in_dist=0.5, best_step=50, curve=(),
                                   train_seconds=seconds)
    (run_dir / convergence.RESULT_FILE).write_text(json.dumps(
        {"key": key, "result": result.to_json()}, default=str))
    if evaluated:  # Test accuracies as scoring.evaluate stores them: size 1 in, size 3 OOD.
      _, spec, variant = self.models[label]
      eval_key = scoring.eval_key(result, spec, eval_settings or self.settings,
                                 randomized=sweep.parse_variant(variant)[1])
      result_cache.cached(run_dir / convergence.EVAL_FILE, eval_key,
                          lambda: {"arange": {"1": 1.0, "3": ood}})
    return run_dir

  def _unfinished(self, label, recipe, *, step, seconds, suffix=""):
    key = self._key(label, recipe)
    run_dir = convergence.run_dir_for(self.runs, key, label=label + suffix)
    run_dir.mkdir(parents=True)
    (run_dir / convergence.PROGRESS_META).write_text(json.dumps(
        {"key": key, "step": step, "seconds": seconds}, default=str))
    (run_dir / convergence.PROGRESS_FILE).write_bytes(b"")  # (Its state; not read here.)

  def test_states_times_and_estimate_come_from_this_runs_records_only(self):
    recipe, rescue = self.settings.recipe, self.settings.rescue_recipe
    self.assertEqual(list(self.models), ["copy-rope-s0", "copy-alibi-s0", "copy-rope-s1",
                                         "copy-alibi-s1"])
    self._finished("copy-rope-s0", recipe, fit=True, seconds=60.0)
    # Did not fit within the cap; its second run (cap 200) is at step 50.
    self._finished("copy-alibi-s0", recipe, fit=False, seconds=120.0)
    self._unfinished("copy-alibi-s0", rescue, step=50, seconds=30.0, suffix="-cap200")
    self._unfinished("copy-rope-s1", recipe, step=40, seconds=20.0)
    # A record of another model (seed 0's key) in seed 1's directory does not count.
    self._finished("copy-alibi-s1", recipe, fit=True, seconds=99.0,
                   key=self._key("copy-alibi-s0", recipe))
    # An unfinished run without its state (a clone: git keeps no progress files) cannot resume.
    self._unfinished("copy-alibi-s1", recipe, step=70, seconds=5.0)
    stateless = next(self.runs.glob("copy-alibi-s1-*/" + convergence.PROGRESS_FILE))
    stateless.unlink()
    models = sweep_progress.model_progress(self.base, self.settings, runs_dir=self.runs)
    self.assertEqual([(m.label, m.state, m.seconds, m.step, m.cap) for m in models], [
        ("copy-rope-s0", "done", 60.0, None, 100),
        ("copy-alibi-s0", "second run", 150.0, 50, 200),
        ("copy-rope-s1", "training", 20.0, 40, 100),
        ("copy-alibi-s1", "not started", 0.0, None, 100)])
    s = sweep_progress.progress_summary(models, cores=2)
    self.assertEqual((s["models"], s["done"]), (4, 1))
    self.assertEqual(s["by_seed"], {"0": {"done": 1, "models": 2}, "1": {"done": 0, "models": 2}})
    self.assertAlmostEqual(s["one_core_minutes"], (60 + 150 + 20) / 60)
    self.assertEqual(s["median_minutes"], 1.0)
    # 3 models left at the 1-minute median, each less what was spent on it, never below 0:
    # copy-alibi-s0 is past the median (150 s), copy-rope-s1 has 20 s, copy-alibi-s1 none.
    self.assertAlmostEqual(s["left_one_core_minutes"], 0 + (1 - 20 / 60) + 1)
    self.assertAlmostEqual(s["left_hours"], (2 - 20 / 60) / 60 / 2)
    lines = sweep_progress.progress_lines("t", s, self.runs)
    self.assertIn("t: 1 of 4 models done (trained and evaluated)", lines[0])
    self.assertIn("1 training, 1 second run, 1 not started", lines[0])
    self.assertEqual(lines[1], "  seed 0: 1 of 2, seed 1: 0 of 2")
    self.assertIn("  unfinished: copy-alibi-s0 (second run) at step 50 of 200, 2.5 min so far",
                  lines)
    # The shard 1/2 holds the second and fourth models of the run order.
    self.assertEqual([m.label for m in sweep_progress.model_progress(
        self.base, self.settings, runs_dir=self.runs, shard=(1, 2))],
                     ["copy-alibi-s0", "copy-alibi-s1"])

  def test_a_slow_variant_is_estimated_by_its_own_finished_seeds(self):
    done = lambda task, variant, seed, minutes: sweep_progress.ModelProgress(
        f"{task}-{variant}-s{seed}", seed, "done", minutes * 60.0, task=task, variant=variant)
    left = lambda task, variant, seed, minutes=0.0: sweep_progress.ModelProgress(
        f"{task}-{variant}-s{seed}", seed, "not started", minutes * 60.0, task=task,
        variant=variant)
    models = [done("copy", "rope", s, 2.0) for s in range(3)] + [
        done("copy", "liere", 0, 30.0), left("copy", "liere", 1, minutes=5.0),
        left("copy", "rope", 3), left("reverse", "rope", 0)]
    s = sweep_progress.progress_summary(models, cores=1)
    # LieRE s1: its variant's 30 min less the 5 spent (the task's median would say 2); rope s3:
    # its variant's 2 min; reverse: nothing of its variant or task finished, the median of all.
    self.assertAlmostEqual(s["left_one_core_minutes"], 25.0 + 2.0 + 2.0)

  def test_an_unfit_model_of_a_task_without_second_runs_is_done(self):
    self.settings = dataclasses.replace(self.settings, tasks=(
        sweep.TaskSpec("copy", 2, (1, 3), second_run=False),))
    self._finished("copy-rope-s0", self.settings.recipe, fit=False, seconds=100.0)
    models = sweep_progress.model_progress(self.base, self.settings, runs_dir=self.runs)
    self.assertEqual((models[0].state, models[0].seconds, models[0].fit), ("done", 100.0, False))

  def test_a_second_run_that_finished_makes_the_model_done_with_both_times(self):
    recipe, rescue = self.settings.recipe, self.settings.rescue_recipe
    self._finished("copy-rope-s0", recipe, fit=False, seconds=100.0)
    self._finished("copy-rope-s0", rescue, fit=False, seconds=200.0, suffix="-cap200")
    self._finished("copy-alibi-s0", recipe, fit=True, seconds=30.0, evaluated=False)
    models = sweep_progress.model_progress(self.base, self.settings, runs_dir=self.runs)
    self.assertEqual([(m.state, m.seconds, m.fit) for m in models[:2]],
                     [("done", 300.0, False), ("not evaluated", 30.0, True)])
    s = sweep_progress.progress_summary(models, cores=1)
    self.assertEqual(s["states"]["not evaluated"], 1)
    self.assertEqual((s["median_minutes"], s["longest_minutes"]), (2.75, 5.0))

  def test_test_accuracies_of_other_settings_do_not_make_a_model_done(self):
    recipe = self.settings.recipe
    other = dataclasses.replace(self.settings, examples=self.settings.examples + 1)
    self._finished("copy-rope-s0", recipe, fit=True, seconds=60.0, eval_settings=other)
    self.assertEqual(sweep_progress.model_progress(self.base, self.settings,
                                                   runs_dir=self.runs)[0].state,
                     "not evaluated")

  def test_interim_results_and_the_estimate_per_task(self):
    settings = dataclasses.replace(
        self.settings, tasks=self.settings.tasks + (sweep.TaskSpec("reverse", 2, (1, 3)),),
        variants=("rope", "rope" + sweep.RANDOMIZED), seeds=(0,), rescue_steps=0)
    self.settings = settings
    self.models = {label: (config, spec, variant) for _, spec, variant, config, label
                   in model_runs.model_order(self.base, settings)}
    recipe = settings.recipe
    self.assertEqual(list(self.models), ["copy-rope-s0", "copy-rope_randomized-s0",
                                         "reverse-rope-s0", "reverse-rope_randomized-s0"])
    self._finished("copy-rope-s0", recipe, fit=True, seconds=60.0, ood=0.2)
    self._finished("copy-rope_randomized-s0", recipe, fit=True, seconds=180.0, ood=0.6)
    self._finished("reverse-rope-s0", recipe, fit=False, seconds=600.0, ood=0.9)
    models = sweep_progress.model_progress(self.base, settings, runs_dir=self.runs)
    self.assertEqual([(m.task, m.fit, m.ood) for m in models],
                     [("copy", True, 0.2), ("copy", True, 0.6), ("reverse", False, 0.9),
                      ("reverse", None, None)])
    s = sweep_progress.progress_summary(models, cores=1)
    copy, reverse = s["tasks"]["copy"], s["tasks"]["reverse"]
    self.assertEqual((copy["done"], copy["fit"], copy["plain"]["median"],
                      copy["randomized"]["median"], copy["best"]),
                     (2, 2, 0.2, 0.6, ("copy-rope_randomized-s0", 0.6)))
    # A model that did not fit enters neither the spread nor the best.
    self.assertEqual((reverse["done"], reverse["fit"], reverse["plain"]["n"], reverse["best"]),
                     (1, 0, 0, None))
    # Fewer than TASK_MEDIAN_MIN finished models of reverse: the median of all (3 min) applies.
    self.assertEqual(sweep_progress.TASK_MEDIAN_MIN, 3)
    self.assertAlmostEqual(s["left_one_core_minutes"], 3.0)
    lines = sweep_progress.progress_lines("t", s, self.runs, metric_label="per-token accuracy")
    self.assertIn("  interim, finished models only (not the study's verdicts): OOD per-token "
                  "accuracy of the models that fit, median [min-max] over PEs and seeds (count)",
                  lines)
    # Per task, the median one-core minutes of its finished models (the estimate's figure once
    # a task has TASK_MEDIAN_MIN of them).
    self.assertEqual((copy["median_minutes"], reverse["median_minutes"]), (2.0, 10.0))
    self.assertIn("    copy: 2 of 2 done, 2 fit, 2.0 one-core min a model (median); plain 0.20 "
                  "(1), randomized 0.60 (1); best copy-rope_randomized-s0 0.600", lines)
    self.assertIn("    reverse: 1 of 2 done, 0 fit, 10.0 one-core min a model (median)", lines)
    # With three finished models of its task, a model's own task median applies.
    models = [dataclasses.replace(m, task="copy", state="done", seconds=s_)
              for m, s_ in zip(models[:3], (60.0, 120.0, 600.0))] + [
                  dataclasses.replace(models[3], task="copy", seconds=30.0)]
    self.assertAlmostEqual(sweep_progress.progress_summary(models,
                                                           cores=1)["left_one_core_minutes"],
                           2.0 - 0.5)

  def test_nothing_finished_gives_no_estimate_and_bad_cores_are_refused(self):
    s = sweep_progress.progress_summary(sweep_progress.model_progress(self.base, self.settings,
                                                      runs_dir=self.runs), cores=2)
    self.assertEqual((s["done"], s["states"]["not started"]), (0, 4))
    self.assertIsNone(s["left_one_core_minutes"])
    self.assertIn("  left: no estimate until a model has finished",
                  sweep_progress.progress_lines("t", s, self.runs))
    with self.assertRaisesRegex(ValueError, "cores must be >= 1, got 0"):
      sweep_progress.progress_summary([], cores=0)

  def test_the_progress_option_trains_nothing_and_writes_no_report(self):
    workdir = pathlib.Path(self.create_tempdir().full_path)
    options = study_options.StudyOptions(progress=True, workdir=str(workdir),
                                        runs_dir=str(self.runs), command="t")
    self.base = kazemnejad_suite.base_config(options)  # The study's models, not the tiny ones.
    self.models = {label: (config, spec, variant) for _, spec, variant, config, label
                   in model_runs.model_order(self.base, self.settings)}
    self._finished("copy-rope-s0", self.settings.recipe, fit=True, seconds=60.0)
    lines = []
    with mock.patch.object(convergence, "train_to_fit", side_effect=AssertionError("trained")):
      out = kazemnejad_suite.run(options, settings=self.settings, log=lines.append)
    self.assertEqual((out["done"], out["models"]), (1, 4))
    self.assertTrue(any("1 of 4 models done" in line for line in lines))
    self.assertFalse((workdir / "report.md").exists())



class FineTuneKeyTest(absltest.TestCase):

  def test_a_fine_tunes_start_is_its_base_directory_wherever_that_lies(self):
    # The same base found from another working directory or clone gives the same fine-tune
    # record; another base (another directory name) another one.
    key = {"what": "finetune"}
    relative = convergence.full_key(key, init_from="runs/study/base-s0-1a2b/params.npz")
    absolute = convergence.full_key(
        key, init_from="/home/x/clone/experiments/results/study/models/base-s0-1a2b/params.npz")
    self.assertEqual(relative, absolute)
    self.assertEqual(relative["init_from"], "base-s0-1a2b/params.npz")
    other = convergence.full_key(key, init_from="runs/study/base-s1-9f8e/params.npz")
    self.assertNotEqual(relative, other)
    self.assertIsNone(convergence.full_key(key)["init_from"])

  def test_a_start_whose_weights_are_not_here_is_named(self):
    # A clone has the base's records (git) but not its weights: the fine-tune says which file
    # is missing and what to do, before training anything.
    missing = pathlib.Path(self.create_tempdir().full_path) / "base-s0-1a2b" / "params.npz"
    with self.assertRaisesRegex(FileNotFoundError, rf"{missing} does not exist: the weights "
                                r"this run starts from are not on this machine .* delete "):
      convergence.load_params(None, missing)

if __name__ == "__main__":
  absltest.main()
