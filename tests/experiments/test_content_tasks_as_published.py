"""The content-task study's claims as their papers test them (issue 45 part 5): CoPE against RoPE
and NoPE on selective copy and counting; flip-flop glitch rates under other task options
(``condition_scores``), their verdicts on hand-made records, and a tiny run."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from unittest import mock

from absl.testing import absltest
import numpy as np
import pytest

from experiments import content_tasks
from experiments.algorithmic import condition_scores
from experiments.algorithmic import convergence
from experiments.algorithmic import model_runs
from experiments.algorithmic import seed_summary
from experiments.algorithmic import sweep
from experiments.study import study_options

SPEC = sweep.TaskSpec("flip_flop", 20, (30, 40, 60, 80), train_min=2)
SPARSE, DENSE = content_tasks.GLITCH_CONDITIONS[1].name, content_tasks.GLITCH_CONDITIONS[2].name


def _rates(by_variant):
  """``{variant: [sparse error per seed]}`` -> glitch records (dense = sparse / 2)."""
  out = {}
  for variant, errors in by_variant.items():
    out[variant] = {}
    for seed, e in enumerate(errors):
      cell = {"sequence_error": e, "token_error": e / 10, "examples": 2000, "scored": 9000}
      dense = dict(cell, sequence_error=e / 2)
      out[variant][str(seed)] = {
          c.name: {str(s): (dense if c.name == DENSE else cell)
                   for s in content_tasks.glitch_sizes(SPEC)}
          for c in content_tasks.GLITCH_CONDITIONS}
  return out


class GlitchVerdictTest(absltest.TestCase):

  def test_sizes_are_the_training_length_twice_it_and_the_longest(self):
    self.assertEqual(content_tasks.glitch_sizes(SPEC), (20, 40, 80))
    self.assertEqual(content_tasks.glitch_sizes(sweep.TaskSpec("flip_flop", 8, (12, 24))),
                     (8, 24))

  def test_cope_below_every_seed_of_rope_and_learned_holds(self):
    rates = _rates({"cope": [0.01, 0.02, 0.0], "rope": [0.30, 0.25, 0.4],
                    "learned": [0.5, 0.6, 0.55]})
    verdicts = content_tasks.glitch_verdicts(rates, SPEC, examples=2000)
    self.assertLen(verdicts, 2)  # sparse and dense
    self.assertTrue(all(v.held for v in verdicts), [v.to_json() for v in verdicts])
    self.assertIn("sparse FFL(0.98)", verdicts[0].expectation)
    self.assertIn("resolution 0.0005", verdicts[0].criterion)
    # Sequence accuracy = 1 - glitch rate is what is compared (higher is better).
    self.assertIn("cope 0.990 [0.980-1.000]", verdicts[0].measured)

  def test_overlapping_seeds_do_not_hold(self):
    rates = _rates({"cope": [0.01, 0.35, 0.0], "rope": [0.30, 0.25, 0.4]})
    (sparse, dense) = content_tasks.glitch_verdicts(rates, SPEC, examples=2000)
    self.assertIs(sparse.held, False)
    self.assertIs(dense.held, False)

  def test_every_model_glitching_on_every_sequence_is_the_floor(self):
    rates = _rates({"cope": [1.0, 1.0], "rope": [1.0, 1.0]})
    for v in content_tasks.glitch_verdicts(rates, SPEC, examples=2000)[:1]:
      self.assertEqual(v.status, "not measurable (floor)")

  def test_no_verdict_without_cope_or_a_compared_pe_or_measurements(self):
    self.assertEqual(content_tasks.glitch_verdicts(_rates({"rope": [0.1]}), SPEC,
                                                   examples=10), [])
    self.assertEqual(content_tasks.glitch_verdicts(_rates({"cope": [0.1]}), SPEC,
                                                   examples=10), [])
    unmeasured = {"cope": {"0": None}, "rope": {"0": None}}
    self.assertEqual(content_tasks.glitch_verdicts(unmeasured, SPEC, examples=10), [])


class CopeVerdictTest(absltest.TestCase):

  def _entry(self, values, fit=True):
    return seed_summary.summarize_variant([
        {"fit": fit, "in_dist": 1.0, "best_in_dist": 1.0, "steps": 10, "steps_to_fit": 10,
         "ood": v, "ood_2x": v, "ood_far": v} for v in values])

  def test_cope_against_rope_and_nope_per_published_task(self):
    entries = {"cope": self._entry([0.6, 0.7, 0.8]), "rope": self._entry([0.1, 0.2, 0.3]),
               "none": self._entry([0.65, 0.7, 0.9])}
    settings = sweep.Settings(tasks=(), variants=(), seeds=(0, 1, 2),
                              recipe=convergence.Recipe(max_steps=10))
    summary = {"count_increments": entries, "selective_copy": entries, "count_symbol": entries}
    verdicts = content_tasks.cope_verdicts(summary, settings)
    self.assertEqual([v.expectation.split(":")[0] for v in verdicts],
                     ["selective_copy", "selective_copy", "count_increments",
                      "count_increments"])
    by_claim = {v.expectation: v for v in verdicts}
    self.assertIs(by_claim["count_increments: CoPE beats rope out of distribution (Golovneva "
                           "et al. 2024)"].held, True)
    self.assertIs(by_claim["count_increments: CoPE beats none out of distribution (Golovneva "
                           "et al. 2024)"].held, False)
    # The study's verdicts carry them after the group claims.
    self.assertLen(content_tasks.verdicts(summary, settings, None), 3 + 4)
    self.assertEqual(content_tasks.cope_verdicts({"count_increments": {"rope": entries["rope"]}},
                                                 settings), [])


class ErrorRatesTest(absltest.TestCase):

  def test_token_error_weights_rows_by_their_scored_bytes(self):
    batch = {"inputs": np.zeros((3, 16), np.int32),
             "loss_mask": np.array([[1] * 1 + [0] * 15, [1] * 3 + [0] * 13, [1] * 6 + [0] * 10],
                                   np.float32)}
    with mock.patch.object(convergence, "token_accuracy",
                           return_value=np.array([1.0, 2 / 3, 0.5])):
      rates = condition_scores.error_rates(None, batch)
    self.assertAlmostEqual(rates["sequence_error"], 2 / 3)
    self.assertAlmostEqual(rates["token_error"], 1 - (1 + 2 + 3) / 10)
    self.assertEqual((rates["examples"], rates["scored"]), (3, 10))

  def test_one_pass_gives_the_exact_match_of_the_two_pass_scoring(self):
    from flax import nnx  # pylint: disable=g-import-not-at-top
    from pejax.nn import Decoder, DecoderConfig  # pylint: disable=g-import-not-at-top
    model = Decoder(DecoderConfig(vocab_size=256, d_model=16, num_heads=2, num_layers=1),
                    rngs=nnx.Rngs(0))
    batch = condition_scores.condition_batch("flip_flop", np.random.default_rng(0), size=8,
                                             examples=64, options={"ignore_prob": 0.1})
    # An untrained model gets some rows wholly right only if their reads are few: make the
    # targets of half the rows the model's own argmax, so both outcomes occur.
    logits = np.asarray(model(batch["inputs"], positions=batch["positions"]))
    batch["targets"] = np.where(np.arange(64)[:, None] % 2 == 0, logits.argmax(-1),
                                batch["targets"]).astype(np.int32)
    rates = condition_scores.error_rates(model, batch)
    exact = convergence.exact_match(model, batch)
    self.assertTrue(0 < exact.mean() < 1)
    self.assertAlmostEqual(rates["sequence_error"], 1.0 - exact.mean())

  def test_condition_batch_uses_the_options_and_names_unknown_ones(self):
    rng = np.random.default_rng(0)
    sparse = condition_scores.condition_batch("flip_flop", rng, size=40, examples=200,
                                              options={"ignore_prob": 0.98})
    dense = condition_scores.condition_batch("flip_flop", rng, size=40, examples=200,
                                             options={"ignore_prob": 0.1})
    # Reads are the scored bytes: ~1% of the middle instructions when sparse, ~45% when dense.
    self.assertLess(sparse["loss_mask"].sum(), dense["loss_mask"].sum() / 10)
    self.assertEqual(sparse["positions"].shape, sparse["inputs"].shape)
    with self.assertRaisesRegex(ValueError, r"task 'flip_flop' accepts options \['ignore_prob'\], "
                                r"got unknown \['density'\]"):
      condition_scores.condition_batch("flip_flop", rng, size=4, examples=1,
                                       options={"density": 0.5})

  def test_bad_arguments_are_named(self):
    fake = mock.Mock(run_dir="/nonexistent", steps=1)  # The checks come before any reading.
    conditions = content_tasks.GLITCH_CONDITIONS
    with self.assertRaisesRegex(ValueError, "condition names must be distinct"):
      condition_scores.condition_scores(fake, None, SPEC, conditions[:1] * 2, sizes=(20,),
                                        examples=2)
    with self.assertRaisesRegex(ValueError, "examples must be an int >= 1, got 0"):
      condition_scores.condition_scores(fake, None, SPEC, conditions, sizes=(20,), examples=0)
    with self.assertRaisesRegex(ValueError, "sizes must not be empty"):
      condition_scores.condition_scores(fake, None, SPEC, conditions, sizes=(), examples=2)
    with self.assertRaisesRegex(ValueError, "name of a Condition must be a non-empty str"):
      condition_scores.Condition("", {})


class PositionRangeTest(absltest.TestCase):

  def test_counting_has_its_own_range_and_leaves_the_other_tasks_models_alone(self):
    options = study_options.StudyOptions()
    base = content_tasks.base_config(options)
    settings = content_tasks.settings_for(options, base)
    ranges = {t.name: settings.position_range_for(t) for t in settings.tasks}
    counting = ranges.pop("count_increments")
    # The four tasks of the committed records keep the range (and configs) they were trained
    # with; counting programs of 160 statements need their own, longer one.
    self.assertEqual(set(ranges.values()), {settings.position_range})
    without = dataclasses.replace(settings, tasks=tuple(
        t for t in settings.tasks if t.name != "count_increments"))
    self.assertEqual(without.position_range, settings.position_range)
    self.assertEqual(counting, sweep.test_row_len("count_increments", 160))
    self.assertGreater(counting, settings.position_range)
    order = {(spec.name, variant, seed): config for seed, spec, variant, config, _ in
             model_runs.model_order(base, dataclasses.replace(settings, variants=("learned",),
                                                              seeds=(0,)))}
    self.assertEqual(int(order[("count_increments", "learned", 0)].data.train_len), counting)
    self.assertEqual(int(order[("mqar", "learned", 0)].data.train_len),
                     settings.position_range)


class TinyRunTest(absltest.TestCase):

  @pytest.mark.slow
  def test_tiny_run_reports_glitches_and_rewrites_them_without_weights(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    tiny = {"model.d_model": 16, "model.num_layers": 1, "model.num_heads": 2,
            "data.batch_size": 4, "optim.warmup_steps": 1}
    options = study_options.StudyOptions(quick=True, workdir=str(tmp / "r"),
                                        runs_dir=str(tmp / "m"), overrides=tiny, command="t")
    settings = sweep.Settings(
        tasks=(sweep.TaskSpec("flip_flop", 4, (5, 8), train_min=2),), variants=("rope", "cope"),
        seeds=(0,), recipe=convergence.Recipe(max_steps=2, check_every=2, check_examples=4),
        examples=2)
    content_tasks.run(options, settings=settings, log=lambda _: None)
    payload = json.loads((tmp / "r" / "results.json").read_text())["results"]
    glitches = payload["flip_flop_glitches"]
    self.assertEqual((glitches["examples"], glitches["sizes"]),
                     (content_tasks.QUICK_GLITCH_EXAMPLES, [4, 8]))
    cell = glitches["by_variant"]["cope"]["0"][SPARSE]["8"]
    self.assertEqual(cell["examples"], content_tasks.QUICK_GLITCH_EXAMPLES)
    self.assertTrue(0.0 <= cell["sequence_error"] <= 1.0 and 0.0 <= cell["token_error"] <= 1.0)
    report = (tmp / "r" / "report.md").read_text()
    self.assertIn("## Flip-flop glitches", report)
    self.assertIn("glitches less than rope", report)
    # What git keeps: the records and conditions.json, no weights; the report is the same.
    for params in (tmp / "m").rglob(convergence.PARAMS_FILE):
      params.unlink()
    self.assertLen(list((tmp / "m").rglob(condition_scores.CONDITIONS_FILE)), 2)
    content_tasks.run(options, settings=settings, log=lambda _: None)
    again = json.loads((tmp / "r" / "results.json").read_text())["results"]
    self.assertEqual(again["flip_flop_glitches"], glitches)

  @pytest.mark.slow
  def test_shards_record_glitches_before_their_weights_are_gone(self):
    # Each shard measures its flip-flop models' glitch rates as it trains them, so the report,
    # written later from records without weights (another machine), still has every model's.
    tmp = pathlib.Path(self.create_tempdir().full_path)
    tiny = {"model.d_model": 16, "model.num_layers": 1, "model.num_heads": 2,
            "data.batch_size": 4, "optim.warmup_steps": 1}
    settings = sweep.Settings(
        tasks=(sweep.TaskSpec("flip_flop", 4, (5, 8), train_min=2),), variants=("rope", "cope"),
        seeds=(0,), recipe=convergence.Recipe(max_steps=2, check_every=2, check_examples=4),
        examples=2)
    lines = []
    for index in (0, 1):
      options = study_options.StudyOptions(quick=True, workdir=str(tmp / "r"),
                                          runs_dir=str(tmp / "m"), overrides=tiny, command="t",
                                          shard=(index, 2))
      content_tasks.run(options, settings=settings, log=lines.append)
    self.assertFalse((tmp / "r" / "results.json").exists())  # Shards write no report.
    self.assertLen(list((tmp / "m").rglob(condition_scores.CONDITIONS_FILE)), 2)
    self.assertLen([x for x in lines if "glitch rates recorded" in x], 2)
    for params in (tmp / "m").rglob(convergence.PARAMS_FILE):
      params.unlink()
    lines.clear()
    options = study_options.StudyOptions(quick=True, workdir=str(tmp / "r"),
                                        runs_dir=str(tmp / "m"), overrides=tiny, command="t")
    content_tasks.run(options, settings=settings, log=lines.append)
    by_variant = json.loads((tmp / "r" / "results.json").read_text())["results"][
        "flip_flop_glitches"]["by_variant"]
    self.assertCountEqual(by_variant, ["rope", "cope"])
    for variant in ("rope", "cope"):
      cell = by_variant[variant]["0"][SPARSE]["8"]
      self.assertEqual(cell["examples"], content_tasks.QUICK_GLITCH_EXAMPLES)
    self.assertFalse([x for x in lines if "not measured" in x])


if __name__ == "__main__":
  absltest.main()
