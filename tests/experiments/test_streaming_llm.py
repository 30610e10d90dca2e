"""Tests of the StreamingLLM study: policies, bucketing, the oracle's windows, the first-token
attention recomputation and the verdicts on made-up numbers, plus a tiny end-to-end run."""

from __future__ import annotations

import json
import math
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import streaming_llm
from experiments.study import expectations
from experiments.study import study_options
from pejax.nn import Decoder, DecoderConfig

SETTINGS = streaming_llm.Settings(
    train_len=16, steps=2, stream_tokens=128, cache_size=16, sink_tokens=2, chunk=32,
    full_tokens=64, recompute_stride=4, bucket=16, tail_tokens=64, sink_windows=2)


def _model(pe: str, layers: int = 2) -> Decoder:
  return Decoder(DecoderConfig(pe=pe, num_layers=layers, d_model=32, num_heads=2),
                 rngs=nnx.Rngs(0))


def _text(n: int) -> np.ndarray:
  return np.random.RandomState(0).randint(0, 256, size=n + 1).astype(np.int32)


class BucketingTest(absltest.TestCase):

  def test_buckets_cover_every_query_once_with_its_mean(self):
    nll = np.log(np.arange(1, 41, dtype=np.float32))  # Perplexity of one token = its index + 1.
    buckets = streaming_llm.bucket_perplexity(nll, 16)
    self.assertEqual([(b["start"], b["end"], b["tokens"]) for b in buckets],
                     [(0, 16, 16), (16, 32, 16), (32, 40, 8)])
    self.assertAlmostEqual(buckets[2]["perplexity"],
                           math.exp(np.mean(np.log(np.arange(33, 41)))), places=4)

  def test_range_past_the_measured_tokens_is_missing_not_truncated(self):
    nll = np.zeros(64, np.float32)
    self.assertEqual(streaming_llm.range_perplexity(nll, 0, 64), 1.0)
    self.assertIsNone(streaming_llm.range_perplexity(nll, 32, 65))

  def test_window_sinks_gap_is_the_largest_bucket_difference(self):
    make = lambda ppls: {"buckets": [{"perplexity": p} for p in ppls]}
    gap = streaming_llm.window_sinks_gap({"window": make([5.0, 6.6, 4.0]),
                                          "sinks": make([5.0, 6.0, 4.1])})
    self.assertAlmostEqual(gap, 10.0)

  def test_summary_ranges(self):
    ranges = streaming_llm.summary_ranges(SETTINGS)
    self.assertEqual(ranges, {"first": (0, 16), "second": (16, 32), "tail": (64, 128),
                              "evicted": (16, 128), "past_L": (16, 64)})
    summary = streaming_llm.summarize({"full": np.zeros(64), "sinks": np.zeros(128)}, SETTINGS)
    self.assertIsNone(summary["full"]["ranges"]["tail"])  # The full pass stops at 64.
    self.assertEqual(summary["sinks"]["ranges"]["tail"], 1.0)


class OracleWindowsTest(absltest.TestCase):

  def test_every_query_scored_once_with_at_least_window_minus_stride_context(self):
    n, window, stride = 48, 16, 4
    scored = np.zeros(n, int)
    for start, offset in streaming_llm.recompute_windows(n, window=window, stride=stride):
      for query in range(start + offset, start + window):
        scored[query] += 1
        if start > 0:
          self.assertGreaterEqual(query - start + 1, window - stride + 1)
    np.testing.assert_array_equal(scored, np.ones(n, int))

  def test_bad_stride_is_an_error(self):
    with self.assertRaisesRegex(ValueError, "stride=5"):
      streaming_llm.recompute_windows(48, window=16, stride=5)

  def test_first_window_equals_the_full_pass_and_later_queries_do_not(self):
    model, text = _model("rope"), _text(48)
    full = streaming_llm.full_nll(model, text, 48)
    oracle = streaming_llm.recompute_nll(model, text, window=16, stride=4, batch_size=4)
    np.testing.assert_allclose(oracle[:16], full[:16], atol=1e-4)
    self.assertGreater(np.max(np.abs(oracle[16:] - full[16:])), 1e-3)  # Shorter context.

  def test_settings_validation_names_the_field(self):
    with self.assertRaisesRegex(ValueError, "multiple of chunk"):
      streaming_llm.Settings(**{**SETTINGS.__dict__, "chunk": 48})
    with self.assertRaisesRegex(ValueError, "sink_tokens"):
      streaming_llm.Settings(**{**SETTINGS.__dict__, "sink_tokens": 16})


class StreamTest(absltest.TestCase):
  """The chunked decode stream feeds each token at its position and scores the next one."""

  def test_window_stream_equals_a_sliding_window_forward_pass(self):
    import dataclasses  # pylint: disable=g-import-not-at-top
    model, text = _model("rope"), _text(48)
    nll = streaming_llm.stream_nll(model, text, cache_size=8, eviction="window", chunk=16,
                                   log=lambda _: None)
    # A ring of 8 slots: each token attends to the 8 cached ones and itself.
    windowed = Decoder(dataclasses.replace(model.config, sliding_window=9), rngs=nnx.Rngs(1))
    nnx.update(windowed, nnx.state(model))
    np.testing.assert_allclose(nll, streaming_llm.full_nll(windowed, text, 48), atol=1e-4)
    # Without a window the later queries see more: the numbers differ (the test can fail).
    self.assertGreater(np.max(np.abs(nll - streaming_llm.full_nll(model, text, 48))), 1e-3)

  def test_sinks_stream_equals_a_forward_pass_over_the_kept_tokens(self):
    # One layer: a sinks step equals a forward pass over sinks + recent tokens at positions
    # 0..T (deeper layers' cached values were computed with other contexts).
    model, text = _model("alibi", layers=1), _text(32)
    nll = streaming_llm.stream_nll(model, text, cache_size=8, eviction="sinks", sink_tokens=2,
                                   chunk=16, log=lambda _: None)
    for query in (8, 20, 31):
      kept = np.concatenate([text[:2], text[max(2, query - 6):query + 1]])
      expected = streaming_llm.full_nll(
          model, np.concatenate([kept, text[query + 1:query + 2]]), kept.shape[0])[-1]
      self.assertAlmostEqual(float(nll[query]), float(expected), places=4)


class FirstTokenAttentionTest(parameterized.TestCase):

  @parameterized.named_parameters(("rope", "rope"), ("alibi", "alibi"))
  def test_recomputed_probabilities_reproduce_the_attention_output(self, pe):
    model = _model(pe, layers=1)
    tokens = _text(24)[:24]
    (probs,) = streaming_llm.attention_probabilities(model, tokens)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    self.assertEqual(float(np.abs(np.triu(probs, 1)).max()), 0.0)  # Causal.
    block, pe_module = model.blocks[0], model.pes[0]
    positions = jnp.arange(24, dtype=jnp.int32)[None]
    x = model._embed(jnp.asarray(tokens[None]), positions)  # pylint: disable=protected-access
    h = block.attention_norm(x)
    _, _, v = block.attention._project(h)  # pylint: disable=protected-access
    out = jnp.einsum("hqk,khd->qhd", probs, v[0])[None]
    expected = block.attention(h, pe=pe_module, positions=positions, segment_ids=None,
                               bias=streaming_llm_bias(pe_module, positions),
                               implementation="dense")
    merged = block.attention._merge_heads(out)  # pylint: disable=protected-access
    np.testing.assert_allclose(merged, expected, atol=1e-4)

  def test_mass_and_uniform_reference(self):
    probs = np.zeros((1, 4, 4), np.float32)
    probs[0, :, 0] = 1.0  # Every query on token 0.
    self.assertEqual(streaming_llm.first_token_mass([probs], min_query=2), [1.0])
    self.assertAlmostEqual(streaming_llm.uniform_first_token_mass(4, min_query=2),
                           (1 / 3 + 1 / 4) / 2)


def streaming_llm_bias(pe, positions):
  from pejax.nn.self_attention import pe_bias  # pylint: disable=g-import-not-at-top
  return pe_bias(pe, positions, positions, "dense")


def _summary(window, sinks, oracle, full):
  """pe -> policy -> {"ranges"} with every range of a policy at one perplexity."""
  names = ("first", "second", "tail", "evicted", "past_L")
  make = lambda v: {"ranges": {n: v for n in names}}
  return {"rope": {"window": make(window), "sinks": make(sinks), "recompute": make(oracle),
                   "full": make(full)},
          "alibi": {"window": make(window), "sinks": make(sinks), "recompute": make(oracle),
                    "full": make(oracle)}}


class VerdictTest(absltest.TestCase):

  def _statuses(self, summary, masses=None):
    return [(v.expectation.split(":")[0], v.status) for v in
            streaming_llm.verdicts(summary, SETTINGS, sink_mass=masses)]

  def test_published_shape_holds(self):
    statuses = self._statuses(_summary(window=40.0, sinks=5.2, oracle=5.0, full=30.0),
                              {"rope": [0.05, 0.6], "alibi": [0.05, 0.3]})
    self.assertLen(statuses, 8)
    self.assertTrue(all(s == expectations.HELD for _, s in statuses), statuses)

  def test_no_collapse_and_drift_do_not_hold(self):
    # Window only 1.3x sinks; sinks 1.2x the oracle; RoPE full cache only 1.1x the oracle.
    verdicts = streaming_llm.verdicts(_summary(window=6.5, sinks=6.0, oracle=5.0, full=5.5),
                                      SETTINGS, sink_mass={"rope": [0.05, 0.1]})
    by_claim = {v.expectation: v for v in verdicts}
    rope = [v for e, v in by_claim.items() if e.startswith("rope")]
    self.assertEqual([v.status for v in rope], [expectations.NOT_HELD] * 4)
    collapse = rope[0]
    self.assertIn("no strong attention sink", collapse.note)
    self.assertIn("1.0e-01", collapse.note)  # The measured mass is quoted.

  def test_margin_is_inclusive_and_missing_numbers_are_not_measurable(self):
    verdicts = streaming_llm.verdicts(_summary(window=7.5, sinks=5.0, oracle=5.0, full=7.5),
                                      SETTINGS)
    self.assertEqual(verdicts[0].status, expectations.HELD)  # Exactly 1.5x: a collapse.
    self.assertEqual(verdicts[2].status, expectations.HELD)  # Exactly 1.5x: degraded.
    summary = _summary(window=40.0, sinks=5.0, oracle=5.0, full=30.0)
    summary["rope"]["full"]["ranges"]["past_L"] = None
    claims = {v.expectation: v.status for v in streaming_llm.verdicts(summary, SETTINGS)}
    self.assertEqual([s for e, s in claims.items() if "full (dense)" in e],
                     [expectations.NOT_MEASURED])


class SmokeTest(absltest.TestCase):

  @pytest.mark.slow
  def test_tiny_run_writes_report_json_and_plot(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    corpus = tmp / "corpus.txt"
    corpus.write_text(pathlib.Path(streaming_llm.__file__).read_text() * 3)
    options = study_options.StudyOptions(
        quick=True, workdir=str(tmp / "report"), runs_dir=str(tmp / "runs"), steps=2,
        command="test", overrides={
            "model.num_layers": 1, "model.d_model": 32, "model.num_heads": 2,
            "data.train_len": 16, "data.batch_size": 2, "data.name": str(corpus),
            "optim.warmup_steps": 1})
    results = streaming_llm.run(options, settings=SETTINGS, log=lambda _: None)
    report = (tmp / "report" / "report.md").read_text()
    self.assertIn("## Expectation vs measured", report)
    self.assertEqual((tmp / "report" / "streaming_perplexity.png").read_bytes()[:4], b"\x89PNG")
    payload = json.loads((tmp / "report" / "results.json").read_text())
    self.assertLen(payload["verdicts"], 8)
    for pe in ("rope", "alibi"):
      # Before the first eviction every policy computes the same numbers as the full pass.
      for policy, diff in results["agreement_before_eviction"][pe].items():
        self.assertLess(diff, 1e-3, (pe, policy))
      self.assertLen(results["summary"][pe]["sinks"]["buckets"], 128 // 16)


if __name__ == "__main__":
  absltest.main()
