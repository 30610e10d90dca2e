"""Tests of the length-generalization study: a tiny end-to-end run and the verdict logic."""

from __future__ import annotations

import json
import pathlib

from absl.testing import absltest
import numpy as np
import pytest

from experiments import length_generalization as lg
from experiments import study_report


def _summary(ood: dict, *, in_dist: float = 1.0) -> dict:
  """A made-up summary: variant -> one seed with the given OOD accuracy (None = did not fit)."""
  per_seed = {}
  for variant, value in ood.items():
    if value is None:
      per_seed[variant] = [{"in_dist": 0.5, "ood": 0.9}]
    else:
      per_seed[variant] = [{"in_dist": in_dist, "ood": value}]
  return lg.summarize(per_seed)


class VerdictTest(absltest.TestCase):

  def test_better_than_holds_and_fails(self):
    summary = _summary({"none": 0.5, "t5": 0.4, "alibi": 0.3, "sinusoidal": 0.1,
                        "learned": 0.0})
    self.assertTrue(lg.better_than(summary, ["none"], ["sinusoidal", "learned"]))
    self.assertTrue(lg.better_than(summary, ["t5", "alibi"], ["sinusoidal", "learned"]))
    self.assertFalse(lg.better_than(summary, ["sinusoidal"], ["none"]))
    # Within the margin is not "better".
    tie = _summary({"none": 0.10, "sinusoidal": 0.09})
    self.assertFalse(lg.better_than(tie, ["none"], ["sinusoidal"]))

  def test_unfit_pes_are_left_out(self):
    summary = _summary({"none": 0.5, "sinusoidal": None, "learned": 0.1})
    self.assertEqual(summary["sinusoidal"]["fit"], 0)
    self.assertIsNone(summary["sinusoidal"]["ood"]["median"])
    # sinusoidal's 0.9 OOD (from an unfit seed) must not count against NoPE.
    self.assertTrue(lg.better_than(summary, ["none"], ["sinusoidal", "learned"]))
    only_unfit = _summary({"none": 0.5, "sinusoidal": None})
    self.assertIsNone(lg.better_than(only_unfit, ["none"], ["sinusoidal"]))

  def test_minority_fit_is_not_comparable(self):
    summary = lg.summarize({
        "t5": [{"in_dist": 0.96, "ood": 0.5}, {"in_dist": 0.5, "ood": 0.0},
               {"in_dist": 0.9, "ood": 0.0}],
        "rope": [{"in_dist": 1.0, "ood": 0.0}, {"in_dist": 0.97, "ood": 0.0},
                 {"in_dist": 0.5, "ood": 0.9}]})
    self.assertEqual(summary["t5"]["fit"], 1)
    self.assertFalse(lg.comparable(summary, "t5"))
    self.assertTrue(lg.comparable(summary, "rope"))
    self.assertEqual(summary["rope"]["ood"]["median"], 0.0)  # Over the two fitting seeds only.
    self.assertIsNone(lg.better_than(summary, ["t5"], ["rope"]))

  def test_verdicts_per_task(self):
    held = _summary({"none": 0.6, "sinusoidal": 0.0, "learned": 0.0, "rope": 0.1, "alibi": 0.5,
                     "t5": 0.5, "rope+randomized": 0.4, "learned+randomized": 0.3})
    failed = _summary({"none": 0.0, "sinusoidal": 0.3, "learned": 0.3, "rope": 0.5, "alibi": 0.0,
                       "t5": 0.0, "rope+randomized": 0.1, "learned+randomized": 0.0})
    out = lg.verdicts({"copy": held, "reverse": failed})
    self.assertLen(out, 8)
    self.assertEqual([v.held for v in out[:4]], [True] * 4)
    self.assertEqual([v.held for v in out[4:]], [False] * 4)
    self.assertTrue(all(v.expectation.startswith("copy") for v in out[:4]))

  def test_fit_summary_names_unfit_variants(self):
    text = lg.fit_summary({"copy": {"summary": _summary({"rope": 0.1, "alibi": None})}})
    self.assertIn("rope (1/1)", text)
    self.assertIn("did not: alibi (0/1, median 0.500)", text)
    self.assertIn("did not fit", text)
    all_fit = lg.fit_summary({"copy": {"summary": _summary({"rope": 0.1})}})
    self.assertNotIn("under-trained", all_fit)

  def test_seed_spread_reports_median(self):
    spread = lg.seed_spread([0.9, None, 0.1, 0.3])
    self.assertEqual(spread, {"min": 0.1, "median": 0.3, "max": 0.9, "n": 3})

  def test_aggregate_bands(self):
    # L = 16: training sizes 1..7; sizes 8..31 fit 4L = 64.
    acc = {s: (1.0 if s <= 7 else 0.0) for s in range(1, 32)}
    acc[8] = 1.0  # text 17 bytes: in band (1L, 2L].
    agg = lg.aggregate(acc, train_len=16)
    self.assertEqual(agg["in_dist"], 1.0)
    self.assertAlmostEqual(agg["ood"], 1 / 24)
    self.assertAlmostEqual(agg["1-2x"], 1 / 8)  # sizes 8..15
    self.assertEqual(agg["3-4x"], 0.0)
    self.assertEqual(agg["reach"], 8.0)  # sizes 1..8 all >= 0.5, size 9 not.

  def test_randomized_eval_positions(self):
    pos = lg.eval_positions([5, 40], row_len=48, train_len=16, max_position=64, seed=0)
    self.assertEqual(pos.shape, (2, 48))
    self.assertTrue(np.all(np.diff(pos[1, :40]) > 0))
    self.assertTrue(np.all(pos < 64))
    self.assertTrue(np.all(pos[0, 5:] == pos[0, 4]))
    plain = lg.eval_positions([5], row_len=8, train_len=4, max_position=None, seed=0)
    np.testing.assert_array_equal(plain[0], np.arange(8))


class SelectionTest(absltest.TestCase):
  """Variants come from the registry; kinds from the declared capabilities."""

  def test_every_registered_pe_and_a_randomized_variant_of_those_reading_positions(self):
    from pejax.nn import pe_names  # pylint: disable=g-import-not-at-top
    base = lg.base_config(study_report.StudyOptions(quick=True))
    variants = lg.study_variants(base)
    self.assertContainsSubset(pe_names(), variants)
    randomized = {lg.parse_variant(v)[0] for v in variants if lg.parse_variant(v)[1]}
    self.assertEqual(randomized, set(pe_names()) - {"none"})  # NoPE has no hook.
    self.assertEqual(lg.parse_variant("learned+randomized"), ("learned", True))

  def test_quick_keeps_one_pe_per_kind(self):
    options = study_report.StudyOptions(quick=True)
    base = lg.base_config(options)
    settings = lg.settings_for(options, base)
    self.assertEqual(settings.variants, ("none", "sinusoidal", "rope", "rope+randomized"))
    # Position-blind variants get more steps (found by capability: no hook).
    self.assertEqual(settings.steps_for("none"), 2 * settings.steps)
    self.assertEqual(settings.steps_for("rope"), settings.steps)

  def test_bounded_table_gets_4l_rows_by_capability(self):
    base = lg.base_config(study_report.StudyOptions(quick=True))
    settings = lg.Settings(train_len=16, steps=1, seeds=(0,), variants=("learned", "rope"))
    learned = lg.variant_config(base, settings, task="copy", variant="learned", seed=0)
    self.assertEqual(study_report.pe_max_length(learned), settings.max_position)
    other = lg.variant_config(base, settings, task="copy", variant="rope", seed=0)
    self.assertIsNone(other.pe.max_position)


class TinyStudyTest(absltest.TestCase):

  @pytest.mark.slow
  def test_tiny_run_writes_report_json_and_plot(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    options = study_report.StudyOptions(
        quick=True, workdir=str(tmp / "report"), runs_dir=str(tmp / "runs"), steps=4,
        overrides={"model.d_model": 32, "model.num_layers": 1, "data.batch_size": 8},
        command="test")
    settings = lg.Settings(train_len=12, steps=4, seeds=(0,), tasks=("copy",),
                           variants=("rope", "learned+randomized"), examples=2)
    results = lg.run(options, settings=settings, log=lambda _: None)
    report = (tmp / "report" / "report.md").read_text()
    self.assertIn("Expectation vs measured", report)
    self.assertIn("copy_accuracy_by_size.png", report)
    self.assertTrue((tmp / "report" / "copy_accuracy_by_size.png").stat().st_size > 0)
    saved = json.loads((tmp / "report" / "results.json").read_text())
    runs = saved["results"]["tasks"]["copy"]["runs"]
    self.assertEqual(set(runs), {"rope", "learned+randomized"})
    by_size = runs["learned+randomized"][0]["accuracy_by_size"]
    self.assertEqual(set(by_size), {"sampled", "arange"})
    self.assertLen(by_size["sampled"], (4 * 12 - 1) // 2)
    self.assertEqual(runs["rope"][0]["protocol"], "arange")
    # The randomized learned model trains every row of its 4L table.
    self.assertIn("learned+randomized", results["tasks"]["copy"]["summary"])


if __name__ == "__main__":
  absltest.main()
