"""Tests of the passkey-scaling study: verdicts, accuracy summaries, heatmaps, a tiny run."""

from __future__ import annotations

import json
import pathlib

from absl.testing import absltest
import pytest

from experiments import passkey_scaling
from experiments import study_report

L = 96


def _cells(acc_by_length):
  return [{"length": l, "depth": d, "accuracy": a}
          for l, a in acc_by_length.items() for d in (0.0, 1.0)]


class SummaryTest(absltest.TestCase):

  def test_mean_and_beyond(self):
    cells = _cells({L: 1.0, 2 * L: 0.5, 4 * L: 0.0}) + [
        {"length": 8 * L, "depth": 0.0, "accuracy": None}]
    self.assertAlmostEqual(passkey_scaling.mean_accuracy(cells, L), 1.0)
    self.assertIsNone(passkey_scaling.mean_accuracy(cells, 8 * L))
    self.assertAlmostEqual(passkey_scaling.beyond(cells, L), 0.25)


class VerdictTest(absltest.TestCase):

  def test_published_shape_holds(self):
    beyond = {"none": 0.1, "linear": 0.3, "ntk": 0.6, "dynamic": 0.7, "yarn": 0.8}
    statuses = [v.status for v in passkey_scaling.verdicts(1.0, beyond)]
    self.assertEqual(statuses, [study_report.HELD] * 5)

  def test_each_claim_can_fail(self):
    # ntk is worse; dynamic and yarn are better, but by less than the 0.1 margin.
    beyond = {"none": 0.9, "linear": 0.85, "ntk": 0.2, "dynamic": 0.95, "yarn": 0.99}
    statuses = [v.status for v in passkey_scaling.verdicts(0.5, beyond)]
    self.assertEqual(statuses, [study_report.NOT_HELD] * 5)

  def test_unmeasured(self):
    (v,) = passkey_scaling.verdicts(None, {})
    self.assertEqual(v.status, study_report.NOT_MEASURED)


class SmokeTest(absltest.TestCase):

  @pytest.mark.slow
  def test_tiny_run_writes_report_json_and_heatmaps(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    options = study_report.StudyOptions(
        quick=True, workdir=str(tmp / "report"), runs_dir=str(tmp / "runs"), steps=2,
        command="test", overrides={"model.num_layers": 1, "model.d_model": 32,
                                   "model.num_heads": 2, "data.batch_size": 2,
                                   "optim.warmup_steps": 1})
    settings = passkey_scaling.Settings(train_len=L, steps=2, seeds=(0,), multipliers=(1, 2),
                                        depths=(0.0, 1.0), examples=2,
                                        scalings=("none", "yarn"))
    results = passkey_scaling.run(options, settings=settings, log=lambda _: None)
    self.assertEqual(sorted(results["grids"]), ["none", "yarn"])
    self.assertLen(results["grids"]["yarn"], 4)  # 2 lengths x 2 depths.
    report = (tmp / "report" / "report.md").read_text()
    self.assertIn("## Expectation vs measured", report)
    self.assertIn("![passkey accuracy heatmaps](passkey_heatmaps.png)", report)
    self.assertEqual((tmp / "report" / "passkey_heatmaps.png").read_bytes()[:4], b"\x89PNG")
    payload = json.loads((tmp / "report" / "results.json").read_text())
    # Two training steps cannot retrieve: the sanity verdict must say so.
    self.assertEqual(payload["verdicts"][0]["status"], study_report.NOT_HELD)


if __name__ == "__main__":
  absltest.main()
