"""Tests of the length-generalization study: variants by capability, claims, a tiny run."""

from __future__ import annotations

import dataclasses
import json
import pathlib

from absl.testing import absltest
import pytest

from experiments import length_generalization as lg
from experiments.algorithmic import convergence
from experiments.algorithmic import seed_summary
from experiments.algorithmic import sweep
from experiments.study import pe_capabilities
from experiments.study import study_options


def _entry(values, fit=True):
  records = [{"fit": fit, "in_dist": 1.0 if fit else 0.5, "best_in_dist": 1.0 if fit else 0.6,
              "steps": 100, "steps_to_fit": 100 if fit else None, "ood": v, "ood_2x": v,
              "ood_far": v} for v in values]
  return seed_summary.summarize_variant(records)


class ClaimsTest(absltest.TestCase):

  def test_claims_group_by_capability(self):
    claims = lg.claims(["none", "sinusoidal", "learned", "rope", "alibi", "t5",
                        "rope+randomized"])
    by_name = {c[0].split(" (")[0]: (c[1], c[2]) for c in claims}
    self.assertEqual(by_name["NoPE generalizes to longer inputs better than absolute PEs"],
                     (["none"], ["sinusoidal", "learned"]))
    winners, losers = by_name["relative-bias PEs"]
    self.assertEqual(set(winners), {"alibi", "t5"})
    self.assertEqual(by_name["randomized positions improve length generalization of rope"],
                     (["rope+randomized"], ["rope"]))

  def test_nope_side_is_only_the_pe_that_encodes_no_order(self):
    # PaTH and stick-breaking read no position ids but encode order through their attention
    # operator: they are not NoPE in Kazemnejad et al.'s claim (the 20:09 UTC report of
    # 2026-12-06 counted them on NoPE's side), and randomized positions leave them unchanged.
    claims = lg.claims(["none", "path", "stick_breaking", "sinusoidal", "learned"])
    by_name = {c[0].split(" (")[0]: (c[1], c[2]) for c in claims}
    self.assertEqual(by_name["NoPE generalizes to longer inputs better than absolute PEs"],
                     (["none"], ["sinusoidal", "learned"]))
    for name, uses, takes in (("none", False, False), ("path", True, False),
                              ("stick_breaking", True, False), ("rope", True, True),
                              ("alibi", True, True), ("fox", True, True)):
      self.assertEqual((pe_capabilities.uses_positions(name),
                        pe_capabilities.takes_position_ids(name)), (uses, takes), name)
    base = lg.base_config(study_options.StudyOptions())
    variants = sweep.all_variants(base)
    self.assertIn("path", variants)
    self.assertNotIn("path+randomized", variants)
    self.assertNotIn("stick_breaking+randomized", variants)
    self.assertNotIn("none+randomized", variants)
    self.assertIn("liere+randomized", variants)

  def test_verdicts_use_the_seed_spread_and_name_unfit_variants(self):
    settings = sweep.Settings(tasks=(), variants=(), seeds=(0, 1, 2),
                               recipe=convergence.Recipe(max_steps=500))
    summary = {"copy": {"none": _entry([0.5, 0.6, 0.7]), "sinusoidal": _entry([0.1, 0.2, 0.3]),
                        "learned": _entry([0.0, 0.0, 0.0], fit=False)},
               "reverse": {"none": _entry([0.5, 0.6, 0.7]),
                           "sinusoidal": _entry([0.4, 0.45, 0.6]),
                           "learned": _entry([0.0, 0.1, 0.2])}}
    out = lg.verdicts(summary, settings)
    self.assertEqual([v.held for v in out], [True, False])
    self.assertIn("learned did not fit", out[0].note)
    self.assertIn("best in-distribution: learned 0.600", out[0].note)
    self.assertIn("none 0.600 [0.500-0.700]", out[0].measured)

  @pytest.mark.slow
  def test_quick_keeps_one_pe_per_kind(self):
    base = lg.base_config(study_options.StudyOptions(quick=True))
    settings = lg.settings_for(study_options.StudyOptions(quick=True), base)
    self.assertEqual(settings.variants, ("none", "sinusoidal", "rope", "rope+randomized"))
    self.assertEqual(settings.seeds, (0,))
    full = lg.settings_for(study_options.StudyOptions(), base)
    self.assertEqual(full.seeds, (0, 1, 2))
    self.assertIn("cope", full.variants)  # Every registered PE enters by capability.
    self.assertNotIn("none+randomized", full.variants)
    self.assertEqual(full.tasks[0].test_sizes[-1], 4 * lg.TRAIN_MAX)


class TinyStudyTest(absltest.TestCase):

  @pytest.mark.slow
  def test_tiny_run_writes_report_and_resumes(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    options = study_options.StudyOptions(
        quick=True, workdir=str(tmp / "report"), runs_dir=str(tmp / "runs"),
        overrides={"model.d_model": 16, "model.num_layers": 1, "model.num_heads": 2,
                   "data.batch_size": 4, "optim.warmup_steps": 1},
        command="test")
    settings = sweep.Settings(
        tasks=(sweep.TaskSpec("copy", 2, (1, 2, 3, 4)),), variants=("rope", "rope+randomized"),
        seeds=(0,), recipe=convergence.Recipe(max_steps=3, check_every=2, check_examples=4),
        examples=2)
    lg.run(options, settings=settings, log=lambda _: None)
    report = (tmp / "report" / "report.md").read_text()
    # Nothing fits in 3 steps and nothing generalizes: both sides at chance (0 for an exact
    # match of several bytes) are the floor, counted neither way.
    self.assertIn("indicative (1 seed, at most 3 steps): not measurable (floor)", report)
    self.assertIn("their seeds enter with the accuracy they measured", report)
    self.assertIn("| variant | OOD, every seed as measured | chance | seeds fit |", report)
    self.assertNotIn("**held**", report)
    saved = json.loads((tmp / "report" / "results.json").read_text())
    runs = saved["results"]["runs"]["copy"]
    self.assertEqual(set(runs["rope+randomized"][0]["accuracy_by_size"]), {"sampled", "arange"})
    self.assertEqual(runs["rope"][0]["fit"]["steps"], 3)
    self.assertIn("copy / reverse", saved["results"]["leaderboard"])
    self.assertIn("copy / reverse", saved["results"]["leaderboard_trainability"])
    lines = []
    lg.run(options, settings=settings, log=lines.append)  # Every model is reused.
    self.assertTrue(any("reused" in line for line in lines), lines)
    # --pes=rope: a partial run of one variant, its model reused from the full sweep.
    subset = dataclasses.replace(options, pes=("rope",), workdir=str(tmp / "subset"))
    lines = []
    lg.run(subset, settings=settings, log=lines.append)
    saved = json.loads((tmp / "subset" / "results.json").read_text())
    self.assertEqual(set(saved["results"]["runs"]["copy"]), {"rope"})
    self.assertTrue(any("reused" in line for line in lines), lines)
    # --shard=1/2: the second of the two models (seed-major order), no report.
    sharded = dataclasses.replace(options, shard=(1, 2), workdir=str(tmp / "shard"))
    lines = []
    out = lg.run(sharded, settings=settings, log=lines.append)
    self.assertEqual(out, {"shard": [1, 2], "models": 1})
    self.assertFalse((tmp / "shard" / "report.md").exists())
    self.assertTrue(any("copy rope+randomized seed 0" in line and "reused" in line
                        for line in lines), lines)
    # --progress: both models are done (their records are this run's); nothing trained.
    progress = dataclasses.replace(options, progress=True, workdir=str(tmp / "progress"))
    lines = []
    out = lg.run(progress, settings=settings, log=lines.append)
    self.assertEqual((out["done"], out["models"]), (2, 2))
    self.assertIn("lg_study: 2 of 2 models done", "".join(lines).replace(lg.STUDY, "lg_study"))
    self.assertFalse((tmp / "progress" / "report.md").exists())


class SelectVariantsTest(absltest.TestCase):

  def test_subset_keeps_the_study_order_and_rejects_unknown_labels(self):
    settings = sweep.Settings(tasks=(), variants=("none", "rope", "rope+randomized", "alibi"),
                               seeds=(0,), recipe=convergence.Recipe())
    self.assertIs(sweep.select_variants(settings, ()), settings)
    self.assertEqual(sweep.select_variants(settings, ("alibi", "rope")).variants,
                     ("rope", "alibi"))
    with self.assertRaisesRegex(study_options.StudyOptionError,
                                "--pes: xpos not among this study's variants"):
      sweep.select_variants(settings, ("rope", "xpos"))


if __name__ == "__main__":
  absltest.main()
