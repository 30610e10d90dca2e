"""Evaluation numbers of a fixed tiny model against a direct computation."""

import math

from absl.testing import absltest
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax import eval as eval_lib
from pejax.nn import Decoder
from pejax.nn import DecoderConfig
from pejax.nn.positional import LearnedConfig


def _tiny(pe="rope", **kwargs):
  return Decoder(DecoderConfig(num_layers=1, d_model=16, num_heads=2, pe=pe, **kwargs),
                 rngs=nnx.Rngs(0))


def _direct_nll(model, tokens, start, length):
  """NLL of tokens[start+1 : start+length+1] given tokens[start : start+length], no windowing."""
  inputs = jnp.asarray(tokens[start:start + length][None], jnp.int32)
  logits = model(inputs)
  log_probs = jax.nn.log_softmax(logits[0].astype(jnp.float32), axis=-1)
  targets = tokens[start + 1:start + length + 1]
  return -np.asarray(log_probs)[np.arange(length), targets]


class PerplexityTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.tokens = np.random.default_rng(0).integers(0, 256, size=1000).astype(np.uint8)
    self.model = _tiny()

  @pytest.mark.slow
  def test_nonoverlap_equals_direct_computation(self):
    (result,) = eval_lib.perplexity_at_lengths(
        self.model, self.tokens, lengths=[32], modes=["nonoverlap"], max_tokens=96,
        tokens_per_batch=64)
    direct = np.concatenate([_direct_nll(self.model, self.tokens, s, 32) for s in (0, 32, 64)])
    self.assertEqual(result.tokens, 96)
    np.testing.assert_allclose(result.nll, direct.mean(), rtol=1e-5)
    np.testing.assert_allclose(result.perplexity, math.exp(direct.mean()), rtol=1e-5)
    np.testing.assert_allclose(result.bits_per_byte, direct.mean() / math.log(2), rtol=1e-5)

  @pytest.mark.slow
  def test_sliding_scores_each_token_once_with_context(self):
    (result,) = eval_lib.perplexity_at_lengths(
        self.model, self.tokens, lengths=[32], modes=["sliding"], max_tokens=64,
        stride=lambda n: 8)
    # Window 0 scores targets 1..32; window k (start 8k) scores its last 8 targets.
    parts = [_direct_nll(self.model, self.tokens, 0, 32)]
    for k in range(1, 5):
      parts.append(_direct_nll(self.model, self.tokens, 8 * k, 32)[-8:])
    direct = np.concatenate(parts)
    self.assertEqual(result.tokens, 64)
    np.testing.assert_allclose(result.nll, direct.mean(), rtol=1e-5)

  @pytest.mark.slow
  def test_blockwise_above_threshold_gives_same_numbers(self):
    dense = eval_lib.perplexity_at_lengths(self.model, self.tokens, lengths=[64],
                                           modes=["nonoverlap"], max_tokens=128)
    blockwise = eval_lib.perplexity_at_lengths(self.model, self.tokens, lengths=[64],
                                               modes=["nonoverlap"], max_tokens=128,
                                               blockwise_threshold=32)
    self.assertEqual((dense[0].attention, blockwise[0].attention), ("dense", "blockwise"))
    np.testing.assert_allclose(blockwise[0].nll, dense[0].nll, rtol=1e-5)

  def test_learned_table_too_short_reports_na(self):
    model = _tiny(pe=LearnedConfig(max_position=32))
    results = eval_lib.perplexity_at_lengths(model, self.tokens, lengths=[32, 64],
                                             modes=["nonoverlap", "sliding"], max_tokens=128,
                                             max_length=32, unsupported_reason="table size 32")
    by_length = {(r.length, r.mode): r for r in results}
    self.assertEqual(by_length[(32, "nonoverlap")].status, "ok")
    self.assertEqual(by_length[(64, "sliding")].status, "n/a (table size 32)")
    table = eval_lib.format_table(results, train_len=32)
    self.assertIn("n/a (table size 32)", table)
    self.assertRegex(table.splitlines()[0],
                     r"^\| eval len \| x train \| +ppl nonoverlap \| bits/byte nonoverlap \|")
    self.assertIn("| x context |", eval_lib.format_table(results, train_len=32, token="token",
                                                       reference="context"))
    self.assertTrue(math.isnan(by_length[(64, "nonoverlap")].perplexity))

  def test_bad_mode(self):
    with self.assertRaisesRegex(ValueError, "modes must be one of"):
      eval_lib.perplexity_at_lengths(self.model, self.tokens, lengths=[32], modes=["strided"],
                                     max_tokens=64)


class PasskeyTest(chex.TestCase):

  def test_accuracy_cells_and_skips(self):
    model = _tiny()
    results = eval_lib.passkey_accuracy(model, lengths=[128], depths=[0.0, 1.0], examples=4)
    self.assertLen(results, 2)
    for r in results:
      self.assertEqual(r.status, "ok")
      self.assertBetween(r.accuracy, 0.0, 1.0)
    skipped = eval_lib.passkey_accuracy(model, lengths=[256], depths=[0.5], examples=2,
                                        max_length=128)
    self.assertEqual(skipped[0].status, "n/a (table size 128)")


if __name__ == "__main__":
  absltest.main()
