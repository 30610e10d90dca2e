"""Tests of the quantized-cache study: windows, relative changes, verdicts on made-up numbers, the
cache path (prefill reads the quantized values back) and a tiny end-to-end run."""

from __future__ import annotations

import json
import pathlib

from absl.testing import absltest
from flax import nnx
import numpy as np
import pytest

from experiments import kv_quantization
from experiments.study import expectations
from experiments.study import study_options
from pejax.nn import Decoder, DecoderConfig

L = 16


def _row(ref, int8):
  return {"float32": {"perplexity": ref}, "int8": {"perplexity": int8}}


class NumbersTest(absltest.TestCase):

  def test_windows_are_disjoint_and_shifted_by_one(self):
    tokens = np.arange(100)
    inputs, targets = kv_quantization.windows_of(tokens, 16, 64)
    self.assertEqual(inputs.shape, (4, 16))
    np.testing.assert_array_equal(inputs.reshape(-1), np.arange(64))
    np.testing.assert_array_equal(targets.reshape(-1), np.arange(1, 65))
    with self.assertRaisesRegex(ValueError, "shorter than one window of 128"):
      kv_quantization.windows_of(tokens, 128, 1000)

  def test_relative_change(self):
    self.assertAlmostEqual(kv_quantization.relative_change(10.1, 10.0), 1.0)
    self.assertAlmostEqual(kv_quantization.relative_change(9.9, 10.0), -1.0)
    self.assertIsNone(kv_quantization.relative_change(None, 10.0))

  def test_verdict_per_length_with_the_one_percent_target(self):
    table = {"rope": {L: _row(10.0, 10.05), 2 * L: _row(10.0, 10.2)},
             "alibi": {L: _row(10.0, 9.85), 2 * L: _row(10.0, None)}}
    statuses = [v.status for v in kv_quantization.verdicts(table, train_len=L)]
    self.assertEqual(statuses, [expectations.HELD, expectations.NOT_HELD,
                                expectations.NOT_HELD, expectations.NOT_MEASURED])


class CachePathTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = Decoder(DecoderConfig(pe="rope", num_layers=1, d_model=32, num_heads=2),
                        rngs=nnx.Rngs(0))
    cls.tokens = np.random.RandomState(0).randint(0, 256, size=200).astype(np.int32)

  def _ppl(self, dtype):
    return kv_quantization.cache_perplexity(self.model, self.tokens, length=32, dtype=dtype,
                                            max_tokens=128)["perplexity"]

  def test_float32_cache_equals_the_forward_pass(self):
    self.assertAlmostEqual(self._ppl("float32"), self._ppl(None), delta=1e-4 * self._ppl(None))

  def test_quantized_caches_change_the_scores_a_little(self):
    # The prefill attends over what the cache holds: a quantized cache changes the numbers
    # (so the study measures something), but only a little.
    ref = self._ppl("float32")
    for dtype in ("bfloat16", "int8", "fp8"):
      change = abs(kv_quantization.relative_change(self._ppl(dtype), ref))
      self.assertGreater(change, 0.0, dtype)
      self.assertLess(change, 5.0, dtype)


class SmokeTest(absltest.TestCase):

  @pytest.mark.slow
  def test_tiny_run_writes_report_json_and_plot(self):
    tmp = pathlib.Path(self.create_tempdir().full_path)
    corpus = tmp / "corpus.txt"
    corpus.write_text(pathlib.Path(kv_quantization.__file__).read_text() * 3)
    options = study_options.StudyOptions(
        quick=True, workdir=str(tmp / "report"), runs_dir=str(tmp / "runs"), steps=2,
        command="test", overrides={
            "model.num_layers": 1, "model.d_model": 32, "model.num_heads": 2,
            "data.train_len": L, "data.batch_size": 2, "data.name": str(corpus),
            "optim.warmup_steps": 1})
    settings = kv_quantization.Settings(train_len=L, multipliers=(1, 2), eval_tokens=128)
    results = kv_quantization.run(options, settings=settings, log=lambda _: None)
    self.assertEqual((tmp / "report" / "kv_quantization.png").read_bytes()[:4], b"\x89PNG")
    payload = json.loads((tmp / "report" / "results.json").read_text())
    self.assertLen(payload["verdicts"], 4)  # 2 PEs x 2 lengths.
    for pe in ("rope", "alibi"):
      changes = results["relative_change_percent"][pe][str(2 * L)]
      self.assertEqual(changes["float32"], 0.0)
      self.assertLess(abs(changes["no cache"]), 0.01)


if __name__ == "__main__":
  absltest.main()
