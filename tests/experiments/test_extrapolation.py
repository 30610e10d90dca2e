"""Tests of the extrapolation study: verdict logic on made-up numbers and a tiny end-to-end run."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import shutil
import signal
from unittest import mock

from absl.testing import absltest
import pytest

from experiments import extrapolation
from experiments.study import expectations
from experiments.study import pe_capabilities
from experiments.study import study_options
from pejax import provenance
from pejax.train import experiment

L = 32


def _tiny_overrides(tmp: pathlib.Path) -> dict:
  """A one-layer model on a small corpus (this module's text): the settings of the tiny runs."""
  corpus = tmp / "corpus.txt"
  corpus.write_text(pathlib.Path(extrapolation.__file__).read_text() * 3)
  return {"model.num_layers": 1, "model.d_model": 32, "model.num_heads": 2,
          "data.train_len": L, "data.batch_size": 2, "data.name": str(corpus),
          "optim.warmup_steps": 1}


def _summary(curves):
  """pe -> {length: ppl} (same in both protocols; None = n/a) in the summarize() format."""
  out = {}
  for pe, points in curves.items():
    for mode in extrapolation.MODES:
      out.setdefault(pe, {})[mode] = {
          length: {"mean": ppl, "status": "ok" if ppl is not None else "n/a (table size 32)"}
          for length, ppl in points.items()}
  return out


PUBLISHED = {  # Shaped like Press et al. Fig. 1.
    "alibi": {L: 10.0, 16 * L: 9.5},
    "sinusoidal": {L: 10.5, 16 * L: 300.0},
    "learned": {L: 10.4, 16 * L: None},
    "rope": {L: 10.2, 16 * L: 40.0},
    "t5": {L: 10.1, 16 * L: 14.0},
}


def _statuses(curves):
  return {v.expectation: v.status for v in extrapolation.verdicts(
      _summary(curves), train_len=L, max_len=16 * L)}


class VerdictTest(absltest.TestCase):

  def test_published_shape_holds_everywhere(self):
    statuses = _statuses(PUBLISHED)
    self.assertLen(statuses, 6)
    self.assertEqual(set(statuses.values()), {expectations.HELD})

  def test_each_claim_can_fail(self):
    curves = {pe: dict(points) for pe, points in PUBLISHED.items()}
    curves["alibi"][16 * L] = 12.0  # +20%: ALiBi no longer flat, and no longer the best.
    curves["sinusoidal"][16 * L] = 15.0  # Only x1.4: not "sharp".
    curves["learned"][16 * L] = 11.0  # Evaluated past its table.
    curves["rope"][16 * L] = 11.0  # Only x1.08.
    curves["t5"][16 * L] = 20.0  # Worse ratio than RoPE.
    statuses = _statuses(curves)
    self.assertEqual(set(statuses.values()), {expectations.NOT_HELD}, statuses)

  def test_a_claim_that_holds_on_the_mean_but_not_on_every_seed_does_not_hold(self):
    # The reviewer's case (issue 45): sinusoidal x2.13 on the mean, 2 of 3 seeds below x2.
    per_seed = {pe: [[{"mode": m, "length": n, "perplexity": ppl * f, "status": "ok"}
                      for m in extrapolation.MODES for n, ppl in points.items()]
                     for f in (1.0, 1.0, 1.0)] for pe, points in PUBLISHED.items()
                if pe != "learned"}
    sinusoidal_16x = (19.1, 19.3, 25.5)  # At L: 10.0 on each seed.
    per_seed["sinusoidal"] = [
        [{"mode": m, "length": n, "perplexity": 10.0 if n == L else ppl, "status": "ok"}
         for m in extrapolation.MODES for n in (L, 16 * L)] for ppl in sinusoidal_16x]
    summary = extrapolation.summarize(per_seed)
    self.assertGreaterEqual(summary["sinusoidal"]["nonoverlap"][16 * L]["mean"] / 10.0, 2.0)
    (v,) = [v for v in extrapolation.verdicts(summary, train_len=L, max_len=16 * L, bounded={})
            if v.expectation.startswith("Sinusoidal")]
    self.assertEqual(v.status, expectations.NOT_HELD)
    self.assertIn("seeds x1.91, x1.93, x2.55", v.measured)
    # T5 better than RoPE on two seeds of three, far worse on the third: seeds split.
    per_seed["t5"] = [[{"mode": m, "length": n, "perplexity": 10.0 if n == L else ppl,
                        "status": "ok"} for m in extrapolation.MODES for n in (L, 16 * L)]
                      for ppl in (14.0, 14.0, 90.0)]
    (t5,) = [v for v in extrapolation.verdicts(extrapolation.summarize(per_seed), train_len=L,
                                               max_len=16 * L, bounded={})
             if v.expectation.startswith("The T5 bias")]
    self.assertEqual(t5.status, expectations.NOT_HELD)
    self.assertIn("seeds split", t5.measured)

  def test_missing_numbers_are_not_measurable(self):
    curves = {"alibi": {L: 10.0, 16 * L: None}}
    (v,) = extrapolation.verdicts(_summary(curves), train_len=L, max_len=16 * L)
    self.assertEqual(v.status, expectations.NOT_MEASURED)

  def test_summarize_spreads_over_seeds(self):
    rows = lambda ppl: [{"length": L, "mode": "nonoverlap", "perplexity": ppl, "status": "ok"}]
    summary = extrapolation.summarize({"rope": [rows(2.0), rows(4.0)]})
    cell = summary["rope"]["nonoverlap"][L]
    self.assertAlmostEqual(cell["mean"], 3.0)
    self.assertEqual((cell["min"], cell["max"], cell["n"]), (2.0, 4.0, 2))


class ControlAndHeadroomTest(absltest.TestCase):
  """Issue 45 part 4: each PE's positions trained (vs NoPE at L), how far training got, and the
  share of the context gain lost (the ratio's ceiling is the corpus's unigram perplexity)."""

  def _per_seed(self, at_l):
    """pe -> per-seed perplexities at L (16x: twice that)."""
    return extrapolation.summarize({pe: [[{"mode": m, "length": n, "perplexity": v * (n // L),
                                           "status": "ok"} for m in extrapolation.MODES
                                          for n in (L, 2 * L)] for v in values]
                                    for pe, values in at_l.items()})

  def test_a_pe_no_better_than_nope_at_l_fails_its_control(self):
    summary = self._per_seed({"none": [12.9, 12.6, 12.8], "t5": [12.1, 12.5, 12.2],
                              "rope": [8.5, 8.3, 8.8], "alibi": [9.6, 9.5, 9.8]})
    statuses = {v.expectation.split(":")[1].split()[0]: v.status
                for v in extrapolation.control_verdicts(summary, train_len=L)}
    # T5's second seed is 12.5 vs NoPE's 12.6: x0.992, within the 2% margin.
    self.assertEqual(statuses, {"t5": expectations.NOT_HELD, "rope": expectations.HELD,
                                "alibi": expectations.HELD})
    self.assertEqual(extrapolation.control_verdicts(
        self._per_seed({"t5": [12.0]}), train_len=L), [])  # No NoPE: no control.

  def test_context_lost_is_zero_for_flat_one_at_unigram_and_none_without_gain(self):
    unigram = 3.248
    self.assertAlmostEqual(extrapolation.context_lost(9.4, 9.4, unigram), 0.0)
    self.assertAlmostEqual(extrapolation.context_lost(11.12, 25.74, unigram), 1.0, places=3)
    # The committed run's sinusoidal: x2.19, yet 93% of its context gain lost.
    self.assertAlmostEqual(extrapolation.context_lost(11.12, 24.35, unigram), 0.934, places=3)
    self.assertIsNone(extrapolation.context_lost(30.0, 40.0, unigram))  # Above unigram at L.
    self.assertIsNone(extrapolation.context_lost(None, 9.0, unigram))
    note = extrapolation.sinusoidal_headroom_note(
        _summary({"sinusoidal": {L: 11.12, 16 * L: 24.35}}), unigram=unigram, train_len=L,
        max_len=16 * L)
    self.assertIn("93% of the way from its perplexity at L (11.12) to the corpus's unigram "
                  "perplexity (25.74)", note)
    self.assertIn("no ratio much above x2.31", note)
    self.assertEqual(extrapolation.sinusoidal_headroom_note(
        _summary({"rope": {L: 8.0, 16 * L: 9.0}}), unigram=unigram, train_len=L,
        max_len=16 * L), "")

  def test_late_improvement_and_the_flatness_note(self):
    from experiments.study import trained_runs  # pylint: disable=g-import-not-at-top
    curve = [(100, 3.0), (200, 2.5), (300, 2.2), (400, 2.19)]
    # Last quarter of 400 steps: from the evaluation at step 300 (<= 300) to the end.
    self.assertAlmostEqual(trained_runs.late_improvement(curve), (2.2 - 2.19) / 2.2)
    self.assertAlmostEqual(trained_runs.late_improvement(curve, fraction=0.5),
                           (2.5 - 2.19) / 2.5)
    self.assertIsNone(trained_runs.late_improvement([(100, 3.0)]))
    with self.assertRaisesRegex(ValueError, "fraction must be in .0, 1., got 1.5"):
      trained_runs.late_improvement(curve, fraction=1.5)
    note = extrapolation.flatness_note({"rope": [0.004, 0.002], "t5": [0.05, 0.001],
                                        "alibi": [None, 0.0]}, 2000)
    self.assertIn("on every seed for 1 of 3 PEs; still falling: t5 (5.0%, 0.1%); too few "
                  "validation points to tell: alibi.", note)

  def test_full_mode_trains_longer_and_scores_32k_tokens_a_cell(self):
    options = study_options.StudyOptions()
    base = extrapolation.base_config(options)
    settings = extrapolation.settings_for(options, base)
    self.assertEqual((base.train.steps, settings.eval_tokens), (2000, 32768))
    quick = study_options.StudyOptions(quick=True)
    self.assertEqual(extrapolation.base_config(quick).train.steps, 100)


class SelectionTest(absltest.TestCase):
  """The study runs every registered PE; bounded tables are found by capability."""

  def test_every_registered_pe_and_the_bounded_tables(self):
    from pejax.nn import pe_names  # pylint: disable=g-import-not-at-top
    base = extrapolation.base_config(study_options.StudyOptions(quick=True))
    pes = extrapolation.study_pes(base)
    self.assertEqual(pes, pe_names())
    bounded = extrapolation.bounded_pes(base, pes)
    self.assertIn("learned", bounded)  # The learned table: data.train_len rows.
    self.assertEqual(set(bounded.values()), {int(base.data.train_len)})
    for pe in bounded:
      self.assertIsNotNone(pe_capabilities.pe_max_length(extrapolation.pe_config(base, pe, 0)))

  def test_bounded_default_comes_from_the_capability(self):
    # verdicts() without ``bounded`` finds the learned table from its PE class, not its name.
    statuses = _statuses({"learned": {L: 10.4, 16 * L: None}})
    self.assertEqual(list(statuses.values()), [expectations.HELD])
    self.assertEqual(extrapolation.verdicts(_summary({"rope": {L: 1.0, 16 * L: 2.0}}),
                                            train_len=L, max_len=16 * L,
                                            bounded={"rope": L})[0].status,
                     expectations.NOT_HELD)


class SmokeTest(absltest.TestCase):

  @pytest.mark.slow
  def test_tiny_run_writes_report_json_and_plots(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    options = study_options.StudyOptions(
        quick=True, workdir=str(tmp / "report"), runs_dir=str(tmp / "runs"), steps=2,
        command="test", overrides=_tiny_overrides(tmp))
    settings = extrapolation.Settings(train_len=L, steps=2, seeds=(0,), multipliers=(1, 2),
                                      eval_tokens=128, pes=("learned",))
    results = extrapolation.run(options, settings=settings, log=lambda _: None)
    report = (tmp / "report" / "report.md").read_text()
    self.assertIn("## Expectation vs measured", report)
    self.assertIn("cannot go past their table", report)
    self.assertIn("## Share of the context gain lost", report)
    self.assertIn("valid loss drop, last quarter", report)
    for mode in extrapolation.MODES:
      self.assertEqual((tmp / "report" / f"extrapolation_{mode}.png").read_bytes()[:4],
                       b"\x89PNG")
    payload = json.loads((tmp / "report" / "results.json").read_text())
    self.assertEqual(payload["verdicts"][0]["status"], expectations.HELD)
    # Provenance in the record and the report's header.
    record = payload["provenance"]
    self.assertEqual(record["commit"], provenance.code_version()["commit"])
    self.assertEqual(record["command"], payload["command"])
    self.assertIn("- versions: python ", report)
    self.assertIn(f"commit `{record['commit'][:12]}`" if record["commit"] else "- code: ",
                  report)
    learned = results["summary"]["learned"]["nonoverlap"]
    self.assertIsNotNone(learned[str(L)]["mean"])
    self.assertIsNone(learned[str(2 * L)]["mean"])  # Past the table: n/a, not a number.

  @pytest.mark.slow
  def test_shards_then_a_report_from_records_without_checkpoints(self):
    # What git keeps of a model is its records (config, status, metrics, cached evaluation):
    # a run split into shards, on machines that lose the checkpoints, still reports them all.
    tmp = pathlib.Path(self.create_tempdir().full_path)
    tiny = _tiny_overrides(tmp)
    settings = extrapolation.Settings(train_len=L, steps=2, seeds=(0, 1), multipliers=(1, 2),
                                      eval_tokens=128)

    def options(**kw):
      return study_options.StudyOptions(quick=True, workdir=str(tmp / "report"), steps=2,
                                        command="test", overrides=tiny, pes=("alibi", "rope"),
                                        **kw)

    lines = []
    for index in (0, 1):
      out = extrapolation.run(options(shard=(index, 2)), settings=settings, log=lines.append)
      self.assertEqual(out, {"shard": [index, 2], "models": 2})
    self.assertFalse((tmp / "report" / "results.json").exists())  # Shards write no report.
    models = tmp / "report" / "models"  # The default: beside the report, where git keeps it.
    self.assertLen(list(models.iterdir()), 4)
    for checkpoints in list(models.glob("*/checkpoints")):
      shutil.rmtree(checkpoints)
    lines.clear()
    results = extrapolation.run(options(), settings=settings, log=lines.append)
    self.assertEqual([x for x in lines if x.startswith("trained ")], [])  # All reused.
    self.assertEqual(list(results["settings"]["pes"]), ["alibi", "rope"])
    for pe in ("alibi", "rope"):
      cell = results["summary"][pe]["nonoverlap"][str(L)]
      self.assertLen(cell["seeds"], 2)
      self.assertTrue(all(v is not None and v > 1 for v in cell["seeds"]))
    # A record whose cached evaluation does not match, without weights: a clear error.
    other = dataclasses.replace(settings, eval_tokens=256)
    with self.assertRaisesRegex(FileNotFoundError, "weights were not kept"):
      extrapolation.run(options(), settings=other, log=lambda _: None)

  @pytest.mark.slow
  def test_a_signal_stops_the_study_and_nothing_of_the_unfinished_model_is_scored(self):
    # Found 2026-12-07: a study went on after SIGTERM, scored the step-1510 model of a 2000-step
    # run and cached the scores under the finished run's key; the resumed run reused them.
    tmp = pathlib.Path(self.create_tempdir().full_path)
    options = study_options.StudyOptions(
        quick=True, workdir=str(tmp / "report"), steps=4, command="test", pes=("alibi",),
        overrides={**_tiny_overrides(tmp), "train.checkpoint_every": 2})
    settings = extrapolation.Settings(train_len=L, steps=4, seeds=(0,), multipliers=(1, 2),
                                      eval_tokens=128)
    real = experiment.train_and_evaluate

    def stop_at_2(step, metrics):
      del metrics
      if step == 2:
        os.kill(os.getpid(), signal.SIGTERM)

    with mock.patch.object(experiment, "train_and_evaluate",
                           functools.partial(real, step_callbacks=[stop_at_2])):
      with self.assertRaisesRegex(experiment.TrainingInterrupted,
                                  r"stopped by SIGTERM at step 2 of 4 in .*re-run the same"):
        extrapolation.run(options, settings=settings, log=lambda _: None)
    (model_dir,) = (tmp / "report" / "models").iterdir()
    self.assertEqual(json.loads((model_dir / "status.json").read_text())["state"], "preempted")
    self.assertEqual(list(model_dir.glob("study_*")), [])  # No scores of the step-2 model.
    self.assertFalse((tmp / "report" / "results.json").exists())
    # The same command resumes it to the end, then scores the finished model.
    lines = []
    extrapolation.run(options, settings=settings, log=lines.append)
    self.assertTrue(any("resumed from checkpoint step 2" in x for x in lines), lines)
    self.assertLen(list(model_dir.glob("study_*_eval.json")), 1)
    self.assertEqual(json.loads((model_dir / "status.json").read_text())["state"], "finished")

  def test_pes_outside_the_study_are_named(self):
    with self.assertRaisesRegex(study_options.StudyOptionError,
                                r"--pes: bogus not among this study's PEs \(alibi, "):
      study_options.select_pes(("alibi", "rope"), ("rope", "bogus"))
    self.assertEqual(study_options.select_pes(("alibi", "rope"), ("rope",)), ("rope",))
    self.assertEqual(study_options.select_pes(("alibi", "rope"), ()), ("alibi", "rope"))


if __name__ == "__main__":
  absltest.main()
