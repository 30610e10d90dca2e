"""Tests of the context-extension study: verdicts on made-up curves and a tiny end-to-end run."""

from __future__ import annotations

import json
import pathlib

from absl.testing import absltest
import pytest

from experiments import context_extension
from experiments.study import expectations
from experiments.study import study_options
from experiments.study import trained_runs

L = 32


def _statuses(zero, tuned):
  """Verdicts of one seed's curves (``zero`` / ``tuned``), or of a list of them."""
  as_seeds = lambda c: c if isinstance(c, list) else [c]
  return [v.status for v in context_extension.verdicts(as_seeds(zero), as_seeds(tuned),
                                                       train_len=L, finetune_len=4 * L)]


ZERO = {  # Shaped like Peng et al. 2023 Fig. / bloc97's plots.
    "none": {L: 10.0, 2 * L: 50.0, 4 * L: 200.0},
    "linear": {L: 10.0, 2 * L: 14.0, 4 * L: 25.0},
    "dynamic": {L: 10.0, 2 * L: 10.5, 4 * L: 12.0},
    "yarn": {L: 10.0, 2 * L: 10.2, 4 * L: 11.0},
}
TUNED = {"linear": {4 * L: 9.6}, "yarn": {4 * L: 9.5}}


class VerdictTest(absltest.TestCase):

  def test_published_shape_holds(self):
    self.assertEqual(_statuses(ZERO, TUNED), [expectations.HELD] * 4)

  def test_each_claim_can_fail(self):
    zero = {k: dict(v) for k, v in ZERO.items()}
    zero["dynamic"][4 * L] = 300.0  # Worse than plain RoPE beyond L.
    zero["yarn"][2 * L] = 40.0  # Worse than PI beyond L (geometric mean).
    tuned = {"linear": {4 * L: 12.0}, "yarn": {4 * L: 13.0}}  # YaRN > 1.02 x PI; PI > 1.1 x base.
    self.assertEqual(_statuses(zero, tuned), [expectations.NOT_HELD] * 4)

  def test_the_unscaled_fine_tune_control_is_a_verdict(self):
    # The control of issue 45: YaRN's fine-tune against the same fine-tune without scaling.
    control = lambda tuned: [v for v in context_extension.verdicts(
        [ZERO] * len(tuned), tuned, train_len=L, finetune_len=4 * L)
        if v.expectation.startswith("Control")]
    (held,) = control([{**TUNED, "none": {4 * L: 9.9}}])
    self.assertEqual(held.status, expectations.HELD)
    self.assertEqual(held.measured, "YaRN 9.50, unscaled 9.90; every seed (differences -0.4)")
    (tie,) = control([{**TUNED, "none": {4 * L: 9.5}}])  # A tie: the scaling added nothing.
    self.assertEqual(tie.status, expectations.NOT_HELD)
    self.assertEqual(control([TUNED]), [])  # No control trained: no claim.

  def test_no_mean_decides(self):
    # Issue 45: YaRN's mean beats the unscaled fine-tune's (9.65 < 9.9), but one seed of three
    # is against it and the bootstrap interval over seeds does not exclude 0: not held.
    seeds = [{**TUNED, "yarn": {4 * L: y}, "none": {4 * L: 9.9}} for y in (9.5, 9.5, 9.95)]
    statuses = _statuses([ZERO] * 3, seeds)
    self.assertEqual(statuses[3], expectations.NOT_HELD)  # The control.
    # A zero-shot claim that holds on two seeds' curves but not on the third: not held either.
    worse = {k: dict(v) for k, v in ZERO.items()}
    worse["yarn"][4 * L] = 400.0
    self.assertEqual(_statuses([ZERO, ZERO, worse], [TUNED] * 3)[1], expectations.NOT_HELD)
    # A threshold claim must hold on every seed: PI's recovery fails on one seed of three.
    bad = {"linear": {4 * L: 12.0}, "yarn": {4 * L: 9.5}}
    self.assertEqual(_statuses([ZERO] * 3, [TUNED, TUNED, bad])[3], expectations.NOT_HELD)

  def test_missing_perplexity_is_not_measurable(self):
    zero = {k: dict(v) for k, v in ZERO.items()}
    zero["dynamic"][4 * L] = None
    self.assertEqual(_statuses(zero, {})[0], expectations.NOT_MEASURED)

  def test_finetune_config_keeps_tokens_per_step(self):
    from experiments import extrapolation  # pylint: disable=g-import-not-at-top
    base = extrapolation.base_config(study_options.StudyOptions(quick=True))
    settings = context_extension.settings_for(study_options.StudyOptions(quick=True), base)
    info = trained_runs.RunInfo(pathlib.Path("runs/base"), settings.steps, 1.0, 1.0, 3.0, 0.0,
                                True)
    ft = context_extension.finetune_config(base, info, "yarn", settings)
    self.assertEqual(ft.data.train_len * ft.data.batch_size,
                     base.data.train_len * base.data.batch_size)
    self.assertEqual((ft.pe.scaling, ft.pe.factor), ("yarn", 4.0))
    self.assertEqual(ft.pe.original_max_position, base.data.train_len)
    # The fine-tuned model's PE: YaRN x4 from the pre-training length.
    from pejax import decoder_from_config  # pylint: disable=g-import-not-at-top
    pe = decoder_from_config.pe_config_from(ft)
    self.assertEqual((pe.scaling.name, pe.scaling.factor, pe.scaling.original_max_position),
                     ("yarn", 4.0, base.data.train_len))
    # Linear has no original length: it is left unset (setting it would be an error).
    linear = context_extension.finetune_config(base, info, "linear", settings)
    self.assertIsNone(linear.pe.original_max_position)
    self.assertEqual(decoder_from_config.pe_config_from(linear).scaling.factor, 4.0)
    none = context_extension.finetune_config(base, info, "none", settings)
    self.assertIsNone(decoder_from_config.pe_config_from(none).scaling)
    self.assertEqual(ft.train.init_from, "runs/base")
    self.assertEqual(ft.train.steps, round(0.15 * base.train.steps))


class SmokeTest(absltest.TestCase):

  @pytest.mark.slow
  def test_tiny_run_writes_report_json_and_plots(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    corpus = tmp / "corpus.txt"
    corpus.write_text(pathlib.Path(context_extension.__file__).read_text() * 3)
    options = study_options.StudyOptions(
        quick=True, workdir=str(tmp / "report"), runs_dir=str(tmp / "runs"), steps=2,
        command="test", overrides={
            "model.num_layers": 1, "model.d_model": 32, "model.num_heads": 2,
            "data.train_len": L, "data.batch_size": 2, "data.name": str(corpus),
            "optim.warmup_steps": 1})
    settings = context_extension.Settings(
        train_len=L, steps=2, seeds=(0,), multipliers=(1, 2), eval_tokens=128,
        finetune_multiplier=2, finetune_fraction=1.0, scalings=("none", "linear", "yarn"),
        finetune_scalings=("linear",))
    results = context_extension.run(options, settings=settings, log=lambda _: None)
    report = (tmp / "report" / "report.md").read_text()
    self.assertIn("## Expectation vs measured", report)
    for png in ("context_extension_zero_shot.png", "context_extension_finetuned.png"):
      self.assertEqual((tmp / "report" / png).read_bytes()[:4], b"\x89PNG")
    payload = json.loads((tmp / "report" / "results.json").read_text())
    self.assertNotEqual(payload["verdicts"], [])
    # At L every scaling has factor 1: the same model as plain RoPE.
    zero = results["zero_shot"]
    self.assertAlmostEqual(zero["linear"][str(L)]["mean"], zero["none"][str(L)]["mean"],
                           places=4)
    self.assertIn(str(2 * L), results["finetuned"]["linear"])


if __name__ == "__main__":
  absltest.main()
