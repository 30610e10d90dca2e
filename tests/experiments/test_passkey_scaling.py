"""Tests of the passkey-scaling study: seed-spread verdicts, the haystack mixture, a tiny run."""

from __future__ import annotations

import json
import pathlib

from absl.testing import absltest
import numpy as np
import pytest

from experiments import passkey_scaling
from experiments import study_report
from experiments.algorithmic import convergence
from experiments.algorithmic import engine
from pejax.data import passkey_mixture

L = 96
SETTINGS = passkey_scaling.Settings(train_len=L, seeds=(0, 1, 2), multipliers=(1, 2, 4),
                                    recipe=convergence.Recipe(), finetune_steps=10)


def _s(*values):
  return engine.seed_spread(list(values))


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
    self.assertEqual(statuses, [study_report.HELD] * 8)

  def test_overlapping_seeds_do_not_hold(self):
    # yarn's median is far above, but one yarn seed is below one linear seed.
    numbers = _numbers(_s(1.0, 0.95, 0.97), _s(0.1, 0.0, 0.2), _s(0.3, 0.25, 0.5),
                       _s(0.6, 0.7, 0.65), _s(0.7, 0.8, 0.75), _s(0.4, 0.9, 0.85),
                       _s(0.95, 1.0, 0.92), _s(1.0, 1.0, 0.97), _s(0.1, 0.2, 0.1),
                       _s(0.5, 0.6, 0.7))
    by_claim = {v.expectation: v.status for v in passkey_scaling.verdicts(numbers, SETTINGS)}
    self.assertEqual(
        by_claim["Zero-shot, YaRN (Peng et al. 2023) retrieves beyond L better than no scaling "
                 "and PI"], study_report.NOT_HELD)

  def test_no_retrieval_at_l_leaves_extension_unjudged(self):
    numbers = _numbers(_s(0.5, 0.95, 1.0), *[_s(0.5)] * 9)
    out = passkey_scaling.verdicts(numbers, SETTINGS)
    self.assertEqual(out[0].status, study_report.NOT_HELD)
    self.assertTrue(all(v.status == study_report.NOT_MEASURED for v in out[1:]))
    self.assertIn("did not retrieve at L", out[1].note)


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
    options = study_report.StudyOptions(
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
    self.assertEqual(payload["verdicts"][0]["status"], study_report.NOT_HELD)
    self.assertLen(payload["results"]["per_seed"][0]["finetuned"]["yarn"], 2)  # 2L x 2 depths.


if __name__ == "__main__":
  absltest.main()
