"""The algorithmic engine: convergence training (fit, cap, cache), seed-spread verdicts."""

from __future__ import annotations

import json
import pathlib
from unittest import mock

from absl.testing import absltest
import numpy as np
import pytest

from experiments.algorithmic import convergence
from experiments.algorithmic import engine
from experiments import kazemnejad_suite
from pejax import experiment_config


def _spread(*values):
  return engine.seed_spread(list(values))


class CompareTest(absltest.TestCase):

  def test_difference_counts_only_beyond_the_seed_range(self):
    self.assertTrue(engine.compare({"a": _spread(0.5, 0.6, 0.7)}, {"b": _spread(0.1, 0.2, 0.4)}))
    # Overlapping ranges: the medians differ by 0.3 but one seed of b beats one of a.
    self.assertFalse(engine.compare({"a": _spread(0.3, 0.6, 0.7)},
                                    {"b": _spread(0.1, 0.3, 0.4)}))
    # Separated but within the margin.
    self.assertFalse(engine.compare({"a": _spread(0.51, 0.52)}, {"b": _spread(0.50, 0.505)}))
    self.assertIsNone(engine.compare({"a": _spread()}, {"b": _spread(0.1)}))
    # One seed each: only the medians (the report labels it indicative).
    self.assertTrue(engine.compare({"a": _spread(0.5)}, {"b": _spread(0.1)}))

  def test_why_not_names_the_pair_and_the_broken_part_of_the_criterion(self):
    self.assertEqual(engine.why_not({"a": _spread(0.5, 0.6, 0.7)}, {"b": _spread(0.1, 0.2)}), "")
    self.assertEqual(
        engine.why_not({"none": _spread(0.1)}, {"sinusoidal": _spread(0.2)}),
        "Reason: sinusoidal is ahead of none or level with it (medians 0.200 vs 0.100).")
    self.assertIn("the seeds overlap: a's lowest seed 0.300 is not above b's highest 0.400",
                  engine.why_not({"a": _spread(0.3, 0.6, 0.7)}, {"b": _spread(0.1, 0.3, 0.4)}))
    self.assertIn("a leads b by 0.013 in the median, less than the 0.02 margin",
                  engine.why_not({"a": _spread(0.51, 0.52)}, {"b": _spread(0.50, 0.505)}))
    self.assertEqual(engine.why_not({"a": _spread()}, {"b": _spread(0.1)}), "")

  def test_a_verdict_that_did_not_hold_carries_its_reason(self):
    entries = {v: {"fit": {"n": 3, "values": [1, 1, 1]}, "ood": _spread(*ood),
                   "best_in_dist": _spread(1.0, 1.0, 1.0)}
               for v, ood in (("none", (0.1, 0.12, 0.2)), ("sinusoidal", (0.15, 0.3, 0.31)))}
    with mock.patch.object(engine, "comparable", lambda entry: True):
      out = engine.group_verdict("NoPE beats APE", entries, ["none"], ["sinusoidal"],
                                 convergence.Recipe())
    self.assertFalse(out.held)
    self.assertIn("Reason: sinusoidal is ahead of none", out.note)

  def test_summary_counts_ood_over_fitting_seeds_only(self):
    records = [{"fit": True, "in_dist": 1.0, "best_in_dist": 1.0, "steps": 300,
                "steps_to_fit": 300, "ood": 0.4, "ood_2x": 0.5, "ood_far": 0.3},
               {"fit": False, "in_dist": 0.8, "best_in_dist": 0.9, "steps": 1000,
                "steps_to_fit": None, "ood": 0.9, "ood_2x": 0.9, "ood_far": 0.9},
               {"fit": True, "in_dist": 0.99, "best_in_dist": 0.99, "steps": 500,
                "steps_to_fit": 500, "ood": 0.2, "ood_2x": 0.3, "ood_far": 0.1}]
    entry = engine.summarize_variant(records)
    self.assertEqual((entry["fit"], entry["seeds"]), (2, 3))
    self.assertTrue(engine.comparable(entry))
    self.assertEqual(entry["ood"]["max"], 0.4)
    self.assertEqual(entry["steps_to_fit"]["median"], 400)
    self.assertEqual(engine.cell(entry["best_in_dist"], 2), "0.99 [0.90-1.00]")

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
    model = convergence.load_model(again, config)
    self.assertEqual(model.config.d_model, 16)
    shorter = convergence.Recipe(max_steps=2, check_every=2, check_examples=8)
    other = convergence.train_to_fit(config, shorter, task="parity", train_sizes=(1, 3),
                                     runs_dir=tmp, label="parity-rope-s0")
    self.assertFalse(other.reused)
    self.assertNotEqual(other.run_dir, result.run_dir)  # The recipe is part of the key.

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


if __name__ == "__main__":
  absltest.main()
