"""Tests of the passkey-scaling study: seed-spread verdicts, the haystack mixture, a tiny run."""

from __future__ import annotations

import json
import pathlib

from absl.testing import absltest
import numpy as np
import pytest

from experiments import passkey_scaling
from experiments.algorithmic import convergence
from experiments.study import expectations
from experiments.study import seed_statistics
from experiments.study import study_options
from pejax.data import passkey_mixture

L = 96
SETTINGS = passkey_scaling.Settings(train_len=L, seeds=(0, 1, 2), multipliers=(1, 2, 4),
                                    recipe=convergence.Recipe(), finetune_steps=10)


def _s(*values):
  return seed_statistics.spread(list(values))


def _numbers(at_l, none, linear, ntk, dynamic, yarn, ft_linear, ft_yarn, beyond_linear,
             beyond_yarn):
  return {"at_L": at_l, "beyond": {"none": none, "linear": linear, "ntk": ntk,
                                   "dynamic": dynamic, "yarn": yarn},
          "ft_at": {"linear": ft_linear, "yarn": ft_yarn},
          "ft_beyond": {"linear": beyond_linear, "yarn": beyond_yarn}}


class SummaryTest(absltest.TestCase):

  def test_mean_and_beyond(self):
    cells = [{"length": l, "depth": d, "accuracy": a}
             for l, a in {L: 1.0, 2 * L: 0.5, 4 * L: 0.0}.items() for d in (0.0, 1.0)]
    self.assertAlmostEqual(passkey_scaling.mean_accuracy(cells, L), 1.0)
    self.assertIsNone(passkey_scaling.mean_accuracy(cells, 8 * L))
    self.assertAlmostEqual(passkey_scaling.beyond(cells, L), 0.25)


class VerdictTest(absltest.TestCase):

  def test_published_shape_holds(self):
    numbers = _numbers(_s(1.0, 0.95, 0.97), _s(0.1, 0.0, 0.2), _s(0.3, 0.25, 0.2),
                       _s(0.6, 0.7, 0.65), _s(0.7, 0.8, 0.75), _s(0.8, 0.9, 0.85),
                       _s(0.95, 1.0, 0.92), _s(1.0, 1.0, 0.97), _s(0.1, 0.2, 0.1),
                       _s(0.5, 0.6, 0.7))
    statuses = [v.status for v in passkey_scaling.verdicts(numbers, SETTINGS)]
    self.assertEqual(statuses, [expectations.HELD] * 8)

  def test_overlapping_seeds_do_not_hold(self):
    # yarn's median is far above, but one yarn seed is below one linear seed.
    numbers = _numbers(_s(1.0, 0.95, 0.97), _s(0.1, 0.0, 0.2), _s(0.3, 0.25, 0.5),
                       _s(0.6, 0.7, 0.65), _s(0.7, 0.8, 0.75), _s(0.4, 0.9, 0.85),
                       _s(0.95, 1.0, 0.92), _s(1.0, 1.0, 0.97), _s(0.1, 0.2, 0.1),
                       _s(0.5, 0.6, 0.7))
    by_claim = {v.expectation: v.status for v in passkey_scaling.verdicts(numbers, SETTINGS)}
    self.assertEqual(
        by_claim["Zero-shot, YaRN (Peng et al. 2023) retrieves beyond L better than no scaling "
                 "and PI"], expectations.NOT_HELD)

  def test_zero_against_zero_is_not_measurable_and_the_control_is_a_verdict(self):
    # Issue 45: both sides at 0 beyond the fine-tune length is the floor, not "did not hold";
    # the unscaled fine-tune is a control with its own verdict.
    numbers = _numbers(_s(1.0, 0.95, 0.97), _s(0.0, 0.0, 0.0), _s(0.0, 0.0, 0.0),
                       _s(0.0, 0.0, 0.0), _s(0.7, 0.8, 0.75), _s(0.8, 0.9, 0.85),
                       _s(0.95, 1.0, 0.92), _s(1.0, 1.0, 0.97), _s(0.0, 0.0, 0.0),
                       _s(0.0, 0.0, 0.0))
    numbers["ft_beyond"]["none"] = _s(0.0, 0.0, 0.0)
    by_claim = {v.expectation: v for v in passkey_scaling.verdicts(numbers, SETTINGS)}
    ntk = by_claim["Zero-shot, NTK-aware (bloc97 2023) retrieves beyond L better than no "
                   "scaling and PI"]
    self.assertEqual(ntk.status, expectations.FLOOR)
    yarn_vs_pi = [v for k, v in by_claim.items() if k.startswith("Fine-tuned YaRN")]
    self.assertEqual([v.status for v in yarn_vs_pi], [expectations.FLOOR])
    (control,) = [v for k, v in by_claim.items() if k.startswith("Control")]
    self.assertEqual(control.status, expectations.FLOOR)
    # One side above the floor: decided.
    numbers["ft_beyond"]["yarn"] = _s(0.5, 0.6, 0.7)
    (control,) = [v for v in passkey_scaling.verdicts(numbers, SETTINGS)
                  if v.expectation.startswith("Control")]
    self.assertEqual(control.status, expectations.HELD)
    numbers["ft_beyond"]["none"] = _s(0.5, 0.6, 0.7)  # The control ties YaRN.
    (control,) = [v for v in passkey_scaling.verdicts(numbers, SETTINGS)
                  if v.expectation.startswith("Control")]
    self.assertEqual(control.status, expectations.NOT_HELD)

  def test_no_retrieval_at_l_leaves_extension_unjudged(self):
    numbers = _numbers(_s(0.5, 0.95, 1.0), *[_s(0.5)] * 9)
    out = passkey_scaling.verdicts(numbers, SETTINGS)
    self.assertEqual(out[0].status, expectations.NOT_HELD)
    self.assertTrue(all(v.status == expectations.NOT_MEASURED for v in out[1:]))
    self.assertIn("did not retrieve at L", out[1].note)

  def test_extension_is_judged_on_the_seeds_that_retrieve(self):
    two = [_s(0.97, 1.0), _s(0.1, 0.0), _s(0.3, 0.25), _s(0.6, 0.7), _s(0.7, 0.8), _s(0.8, 0.9),
           _s(0.95, 1.0), _s(1.0, 1.0), _s(0.1, 0.2), _s(0.5, 0.6)]
    numbers = {**_numbers(*two), "retrieving": {"n": 2, "of": 3, "left_out": [2]}}
    out = passkey_scaling.verdicts(numbers, SETTINGS)
    self.assertEqual([v.status for v in out], [expectations.HELD] * 8)
    self.assertIn("2 of 3 seeds retrieve", out[0].measured)
    self.assertIn("seed(s) 2 did not retrieve at L", out[0].note)
    # One retrieving seed of three is not a majority: nothing beyond L is judged.
    numbers["retrieving"] = {"n": 1, "of": 3, "left_out": [1, 2]}
    out = passkey_scaling.verdicts(numbers, SETTINGS)
    self.assertEqual(out[0].status, expectations.NOT_HELD)
    self.assertTrue(all(v.status == expectations.NOT_MEASURED for v in out[1:]))


class MixtureTest(absltest.TestCase):

  def test_haystack_example_hides_the_key_at_depth(self):
    text = np.frombuffer(b"abcdefghij" * 100, dtype=np.uint8)
    e = passkey_mixture.haystack_passkey_example(0, text, length=200, depth=0.0)
    self.assertLen(e.text, 200)
    self.assertTrue(e.prompt.startswith(b"The pass key is " + e.answer))
    late = passkey_mixture.haystack_passkey_example(0, text, length=200, depth=1.0)
    self.assertTrue(late.prompt.endswith(b"Remember it. What is the pass key? The pass key is "))
    with self.assertRaisesRegex(ValueError, "depth must be in"):
      passkey_mixture.haystack_passkey_example(0, text, length=200, depth=1.5)

  def test_mixture_scores_every_lm_byte_and_only_passkey_keys(self):
    text = np.frombuffer(b"some python source; " * 200, dtype=np.uint8)
    rng = np.random.default_rng(0)
    lm = passkey_mixture.mixture_batch(rng, text, batch_size=3, seq_len=100, passkey_fraction=0.0)
    self.assertTrue(np.all(lm["loss_mask"] == 1.0))
    keys = passkey_mixture.mixture_batch(rng, text, batch_size=3, seq_len=100,
                                         passkey_fraction=1.0)
    self.assertTrue(np.all(keys["loss_mask"].sum(axis=1) == 5))


class SmokeTest(absltest.TestCase):

  @pytest.mark.slow
  def test_tiny_run_writes_report_json_and_heatmaps(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    options = study_options.StudyOptions(
        quick=True, workdir=str(tmp / "report"), runs_dir=str(tmp / "runs"), command="test",
        overrides={"model.num_layers": 1, "model.d_model": 32, "model.num_heads": 2,
                   "data.batch_size": 2, "optim.warmup_steps": 1})
    settings = passkey_scaling.Settings(
        train_len=L, seeds=(0,), multipliers=(1, 2), depths=(0.0, 1.0), examples=2,
        recipe=convergence.Recipe(max_steps=2, check_every=2, check_examples=3),
        finetune_steps=2, scalings=("none", "yarn"), finetune_scalings=("yarn",))
    results = passkey_scaling.run(options, settings=settings, log=lambda _: None)
    self.assertEqual(sorted(results["zero_shot_mean_grids"]), ["none", "yarn"])
    self.assertLen(results["zero_shot_mean_grids"]["yarn"], 4)  # 2 lengths x 2 depths.
    report = (tmp / "report" / "report.md").read_text()
    self.assertIn("indicative (1 seed, at most 2 steps)", report)
    self.assertEqual((tmp / "report" / "passkey_heatmaps.png").read_bytes()[:4], b"\x89PNG")
    payload = json.loads((tmp / "report" / "results.json").read_text())
    # Two training steps cannot retrieve: the sanity verdict must say so.
    self.assertEqual(payload["verdicts"][0]["status"], expectations.NOT_HELD)
    self.assertLen(payload["results"]["per_seed"][0]["finetuned"]["yarn"], 2)  # 2L x 2 depths.


FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "hf" / "fixtures" / "llama_default_untied"
YARN_FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "hf" / "fixtures" / "llama_yarn"


class PretrainedTest(absltest.TestCase):
  """``--init_from_hf``: the zero-shot comparison on a loaded checkpoint and its tokenizer."""

  def test_original_context(self):
    from pejax import hf  # pylint: disable=g-import-not-at-top
    plain = hf.from_pretrained(FIXTURE)
    self.assertEqual(passkey_scaling.pretrained_context(str(FIXTURE), plain, {}), 64)
    self.assertEqual(passkey_scaling.pretrained_context(str(FIXTURE), plain,
                                                        {"data.train_len": 300}), 300)
    yarn = hf.from_pretrained(YARN_FIXTURE)  # Scaled checkpoint: its original length.
    self.assertEqual(passkey_scaling.pretrained_context(str(YARN_FIXTURE), yarn, {}), 8)

  def test_a_context_too_short_for_the_prompt_fails_before_any_work(self):
    from pejax import experiment_config  # pylint: disable=g-import-not-at-top
    options = study_options.StudyOptions(quick=True, workdir=self.create_tempdir().full_path,
                                        overrides={"train.init_from_hf": str(FIXTURE)})
    with self.assertRaisesRegex(experiment_config.ConfigError,
                                "L=64 .* cannot hold the passkey prompt.*--train_len"):
      passkey_scaling.run(options, log=lambda _: None)
    options = study_options.StudyOptions(quick=True, overrides={
        "train.init_from_hf": "/nonexistent/checkpoint"})
    with self.assertRaisesRegex(experiment_config.ConfigError, "--init_from_hf=/nonexistent"):
      passkey_scaling.run(options, log=lambda _: None)

  @pytest.mark.slow
  def test_quick_run_writes_the_grid_of_every_scaling(self):
    workdir = pathlib.Path(self.create_tempdir().full_path)
    options = study_options.StudyOptions(quick=True, workdir=str(workdir), overrides={
        "train.init_from_hf": str(FIXTURE), "data.train_len": 200})
    results = passkey_scaling.run(options, log=lambda _: None)
    self.assertEqual(results["train_len"], 200)
    self.assertEqual(results["lengths"], [200, 400])
    self.assertEqual(set(results["zero_shot"]), set(passkey_scaling.SCALINGS))
    for cells in results["zero_shot"].values():  # Every (length, depth) cell measured.
      self.assertLen(cells, 2 * 3)
      self.assertTrue(all(c["status"] == "ok" and 0.0 <= c["accuracy"] <= 1.0 for c in cells))
    report = (workdir / "report.md").read_text()
    self.assertIn("the pretrained llama_default_untied retrieves", report)
    self.assertIn("indicative (one pretrained model, 4 prompts per cell)", report)
    self.assertTrue((workdir / "passkey_heatmaps.png").exists())
    written = json.loads((workdir / "results.json").read_text())
    self.assertEqual(written["results"]["train_len"], 200)
    self.assertLen(written["verdicts"], 5)


if __name__ == "__main__":
  absltest.main()
