"""Tests of the gallery study: the figures' numbers, their checks, and the written report."""

from __future__ import annotations

import json
import pathlib

from absl.testing import absltest
import numpy as np
import pytest

from experiments import gallery
from experiments.study import expectations
from experiments.study import study_options
from pejax import encodings as pe_lib

_TINY = gallery.GallerySettings(num_positions=32, sinusoid_dim=16, similarity_distance=128,
                                head_dim=128, max_distance=2048, rope_factor=4.0,
                                rope_original=256, alibi_heads=4, alibi_len=8, t5_range=200)


class FormulaTest(absltest.TestCase):

  def test_roformer_bound_at_zero_is_mean_partial_count(self):
    inv_freq = np.asarray(pe_lib.rope_inv_freq(pe_lib.RopeConfig(16))[0])
    bound = gallery.roformer_bound(inv_freq, np.array([0]))
    # |S_j| = j at m = 0, so the mean over j = 1..8 is 4.5.
    self.assertAlmostEqual(float(bound[0]), 4.5, places=6)

  def test_rotated_dot_matches_mean_cosine(self):
    inv_freq = pe_lib.rope_inv_freq(pe_lib.RopeConfig(16))[0]
    m = np.array([0, 3, 50])
    dot = gallery.rotated_dot(inv_freq, m, head_dim=16)
    expected = np.cos(m[:, None] * np.asarray(inv_freq, np.float64)[None]).mean(-1)
    np.testing.assert_allclose(dot, expected, atol=1e-5)

  def test_spearman_sign(self):
    self.assertAlmostEqual(gallery.spearman([1, 2, 3], [3, 2, 1]), -1.0)
    self.assertAlmostEqual(gallery.spearman([1, 2, 3], [1, 5, 9]), 1.0)


class CheckTest(absltest.TestCase):

  def test_t5_direction_checks_detect_a_broken_bucketing(self):
    rel = np.arange(-200, 201)
    good = np.asarray(pe_lib.t5_relative_position_bucket(rel, bidirectional=False))
    result = gallery._direction_checks(rel, good, sign=-1, exact=16, max_distance=128)
    self.assertTrue(result["exact"] and result["monotone"] and result["saturated"])
    broken = good.copy()
    broken[rel == -150] = 3  # A far key in a near bucket: neither monotone nor saturated.
    result = gallery._direction_checks(rel, broken, sign=-1, exact=16, max_distance=128)
    self.assertFalse(result["monotone"])
    self.assertFalse(result["saturated"])

  def test_check_becomes_failed_verdict(self):
    check = gallery.Check("x.png", "prop", "crit", "measured", False, 0.0)
    self.assertEqual(check.to_verdict().status, expectations.NOT_HELD)
    self.assertEqual(gallery.Check("x.png", "p", "c", "m", True, 1.0).to_verdict().status,
                     expectations.HELD)


class RunTest(absltest.TestCase):

  @pytest.mark.slow
  def test_run_writes_report_json_and_pngs(self):
    workdir = pathlib.Path(self.create_tempdir().full_path)
    options = study_options.StudyOptions(quick=True, workdir=str(workdir), command="test")
    results = gallery.run(options, settings=_TINY, log=lambda _: None)
    report = (workdir / "report.md").read_text()
    self.assertIn("Expectation vs measured", report)
    for pngs in gallery._PNGS.values():
      for png in pngs:
        self.assertGreater((workdir / png).stat().st_size, 1000)
        self.assertIn(f"]({png})", report)
    saved = json.loads((workdir / "results.json").read_text())
    self.assertEqual(saved["study"], "gallery")
    self.assertTrue(all(v["status"] == "held" for v in saved["verdicts"]))
    self.assertEqual(len(results["verdicts"]), len(saved["verdicts"]))


if __name__ == "__main__":
  absltest.main()
