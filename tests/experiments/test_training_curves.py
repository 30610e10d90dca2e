"""Tests of the training-curves study: metrics parsing, averaging, verdicts, tiny run."""

from __future__ import annotations

import json
import pathlib

from absl.testing import absltest
import pytest

from experiments import training_curves
from experiments.study import expectations
from experiments.study import study_options

RECORDS = [
    {"step": 10, "split": "train", "metrics": {"loss": 3.0}},
    {"step": 20, "split": "train", "metrics": {"loss": 2.0}},
    {"step": 20, "split": "eval", "metrics": {"loss": 2.2}},
    {"step": 30, "split": "train", "metrics": {"loss": None}},  # A non-finite value logged.
]


class CurvesTest(absltest.TestCase):

  def test_curves_from_metrics(self):
    curves = training_curves.curves_from_metrics(RECORDS)
    self.assertEqual(curves["train"], [(10, 3.0), (20, 2.0)])
    self.assertEqual(curves["eval"], [(20, 2.2)])

  def test_average_over_seeds_at_common_steps(self):
    avg = training_curves.average_curves([[(10, 3.0), (20, 2.0)], [(10, 1.0), (20, 4.0),
                                                                    (30, 1.0)]])
    self.assertEqual(avg, [(10, 2.0, 1.0, 3.0), (20, 3.0, 2.0, 4.0)])

  def test_first_step_below(self):
    curve = [(10, 3.0, 3.0, 3.0), (20, 2.0, 2.0, 2.0)]
    self.assertEqual(training_curves.first_step_below(curve, 2.5), 20)
    self.assertIsNone(training_curves.first_step_below(curve, 1.0))


class VerdictTest(absltest.TestCase):

  def test_holds_and_fails(self):
    good = training_curves.verdicts({"sinusoidal": [1.5], "rope": [1.4], "alibi": [1.45]},
                                    unigram=3.2)
    self.assertEqual([v.status for v in good], [expectations.HELD] * 3)
    bad = training_curves.verdicts({"sinusoidal": [1.3], "rope": [1.4], "alibi": [3.0]},
                                   unigram=3.2)
    self.assertEqual([v.status for v in bad], [expectations.NOT_HELD] * 3)

  def test_no_mean_decides(self):
    # RoPE's mean loss is below sinusoidal's (1.40 < 1.45), but seed 2 is against it and three
    # seeds give no bootstrap interval that excludes 0: not held. One seed past the unigram
    # bound fails the second claim whatever the mean.
    verdicts = training_curves.verdicts(
        {"sinusoidal": [1.5, 1.5, 1.35], "rope": [1.3, 1.3, 1.6], "alibi": [1.4, 1.4, 1.3]},
        unigram=3.2)
    self.assertEqual(verdicts[0].status, expectations.NOT_HELD)
    self.assertIn("seeds split", verdicts[0].measured)
    self.assertEqual(verdicts[1].status, expectations.HELD)  # Every seed of ALiBi is lower.
    high = training_curves.verdicts({"sinusoidal": [1.5, 1.5, 3.1], "rope": [1.4, 1.4, 1.4]},
                                    unigram=3.2)
    self.assertEqual(high[-1].status, expectations.NOT_HELD)


class SmokeTest(absltest.TestCase):

  @pytest.mark.slow
  def test_tiny_run_writes_report_json_and_plot(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    corpus = tmp / "corpus.txt"
    corpus.write_text(pathlib.Path(training_curves.__file__).read_text() * 3)
    options = study_options.StudyOptions(
        quick=True, workdir=str(tmp / "report"), runs_dir=str(tmp / "runs"), steps=4,
        command="test", overrides={
            "model.num_layers": 1, "model.d_model": 32, "model.num_heads": 2,
            "data.train_len": 32, "data.batch_size": 2, "data.name": str(corpus),
            "optim.warmup_steps": 1, "train.log_every": 2, "train.eval_every": 2})
    results = training_curves.run(options, pes=("rope",), log=lambda _: None)
    self.assertEqual([p[0] for p in results["train_curves"]["rope"]], [2, 4])
    self.assertEqual([p[0] for p in results["eval_curves"]["rope"]], [2, 4])
    self.assertIn("## Expectation vs measured",
                  (tmp / "report" / "report.md").read_text())
    self.assertEqual((tmp / "report" / "training_curves.png").read_bytes()[:4], b"\x89PNG")
    payload = json.loads((tmp / "report" / "results.json").read_text())
    self.assertEqual(payload["verdicts"][0]["criterion"].split(" <=")[0],
                     "every seed's final validation loss")


if __name__ == "__main__":
  absltest.main()
