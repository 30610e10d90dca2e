"""Tests for pejax.encodings.query_scaling."""

from __future__ import annotations

import functools
import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.query_scaling import llama4_query_scale
from pejax.encodings.query_scaling import logn_query_scale
from pejax.encodings.query_scaling import ssmax_query_scale


def _qwen_logn_list(seq_length, size):
  """Qwen-1 modeling_qwen.py: the table indexed by the 0-based position."""
  return [math.log(i, seq_length) if i > seq_length else 1 for i in range(1, size + 1)]


class LognQueryScaleTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("t8", 8), ("t2", 2), ("t2048", 2048))
  def test_matches_qwen_table(self, train_len):
    positions = np.arange(4 * train_len + 3, dtype=np.int32)[None]
    scale = self.variant(functools.partial(logn_query_scale, train_len=train_len))(positions)
    chex.assert_shape(scale, positions.shape)
    chex.assert_type(scale, jnp.float32)
    np.testing.assert_allclose(scale[0], _qwen_logn_list(train_len, positions.shape[1]),
                               rtol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_golden_and_exactly_one_within_training_length(self):
    fn = self.variant(functools.partial(logn_query_scale, train_len=4))
    scale = np.asarray(fn(np.array([[0, 3, 15, 63], [1, 2, 4, 7]], np.int32)))
    np.testing.assert_array_equal(scale[:, :2], 1.0)
    np.testing.assert_allclose(scale[0, 2:], [2.0, 3.0], rtol=1e-6)  # log_4(16), log_4(64)
    np.testing.assert_allclose(scale[1, 2:], [math.log(5, 4), 1.5], rtol=1e-6)

  def test_non_decreasing_in_position(self):
    scale = np.asarray(logn_query_scale(np.arange(10_000, dtype=np.int32), train_len=100))
    self.assertTrue(np.all(np.diff(scale) >= 0))
    self.assertTrue(np.all(scale >= 1.0))

  def test_rejects_bad_inputs(self):
    p = np.arange(4, dtype=np.int32)[None]
    for bad in (1, 0, -5, 2.5, True):
      with self.assertRaisesRegex(ValueError, "train_len must be"):
        logn_query_scale(p, train_len=bad)
    with self.assertRaisesRegex(ValueError, r"positions must be >= 0 .*got min -2"):
      logn_query_scale(np.array([[-2, 0]], np.int32), train_len=8)
    with self.assertRaisesRegex(ValueError, "positions must be an integer array"):
      logn_query_scale(p.astype(np.float32), train_len=8)
    with self.assertRaisesRegex(ValueError, r"positions must have shape \[..., L\]"):
      logn_query_scale(np.int32(3), train_len=8)


class SsmaxQueryScaleTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  @chex.variants(with_jit=True, without_jit=True)
  def test_golden_values(self):
    s = np.array([0.5, 2.0], np.float32)
    scale = self.variant(ssmax_query_scale)(np.array([[0, 1, 9]], np.int32), s)
    chex.assert_shape(scale, (1, 3, 2))
    chex.assert_type(scale, jnp.float32)
    np.testing.assert_allclose(scale[0], [[0.0, 0.0], [0.5 * math.log(2), 2 * math.log(2)],
                                          [0.5 * math.log(10), 2 * math.log(10)]], rtol=1e-6)

  def test_scaled_queries_give_the_papers_ssmax_distribution(self):
    # SSMax(z)_i = n^(s z_i) / sum_j n^(s z_j) over the n keys a causal query sees.
    heads, dim, length = 2, 4, 9
    keys = jax.random.split(jax.random.key(0), 2)
    q = jax.random.normal(keys[0], (1, length, heads, dim))
    k = jax.random.normal(keys[1], (1, length, heads, dim))
    s = np.array([0.43, 1.3], np.float32)
    positions = np.arange(length, dtype=np.int32)[None]
    scaled_q = q * ssmax_query_scale(positions, s)[..., None]
    logits = jnp.einsum("bqhd,bkhd->bhqk", scaled_q, k) / math.sqrt(dim)
    mask = np.tril(np.ones((length, length), bool))
    ours = np.asarray(jax.nn.softmax(jnp.where(mask, logits, -jnp.inf), axis=-1))
    z = np.einsum("bqhd,bkhd->bhqk", np.asarray(q, np.float64),
                  np.asarray(k, np.float64)) / math.sqrt(dim)
    for h in range(heads):
      for i in range(length):
        n = i + 1
        weights = float(n) ** (s[h] * z[0, h, i, :n])
        np.testing.assert_allclose(ours[0, h, i, :n], weights / weights.sum(), rtol=1e-4,
                                   atol=1e-6)

  def test_neutral_initialization_is_one_at_training_length(self):
    train_len = 1024
    scale = ssmax_query_scale(np.array([[train_len - 1]], np.int32),
                              np.full((3,), 1 / math.log(train_len), np.float32))
    np.testing.assert_allclose(scale, 1.0, rtol=1e-6)

  def test_gradient_in_s_is_log_n(self):
    positions = np.arange(5, dtype=np.int32)[None]
    grad = jax.jit(jax.grad(lambda s: jnp.sum(ssmax_query_scale(positions, s))))(jnp.ones(2))
    np.testing.assert_allclose(grad, np.full(2, sum(math.log(n) for n in range(1, 6))),
                               rtol=1e-6)

  def test_rejects_bad_inputs(self):
    p = np.arange(4, dtype=np.int32)[None]
    with self.assertRaisesRegex(ValueError, r"s must be a 1-D floating array \[H\], got shape"):
      ssmax_query_scale(p, np.float32(0.5))
    with self.assertRaisesRegex(ValueError, "s must be a 1-D floating array.*int32"):
      ssmax_query_scale(p, np.ones(2, np.int32))
    with self.assertRaisesRegex(ValueError, r"positions must be >= 0 .*got min -1"):
      ssmax_query_scale(np.array([[-1, 0]], np.int32), np.ones(2, np.float32))


def _hf_llama4_scale(positions, floor_scale, attn_scale):
  """HF Llama4TextAttention's formula, in float32 numpy: log1p(floor((p + 1.0) / F)) * s + 1."""
  p = np.asarray(positions, np.float32)
  floor = np.floor((p + np.float32(1.0)) / np.float32(floor_scale))
  return np.log1p(floor) * np.float32(attn_scale) + np.float32(1.0)


class Llama4QueryScaleTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_golden_at_llama4_defaults(self):
    # 1 until p + 1 reaches F = 8192, then 1 + 0.1 log 2, 1 + 0.1 log 3 at 2F - 1, ...
    positions = np.array([[0, 8190, 8191, 16382, 16383, 32767]], np.int32)
    scale = self.variant(llama4_query_scale)(positions)
    chex.assert_shape(scale, positions.shape)
    chex.assert_type(scale, jnp.float32)
    np.testing.assert_allclose(
        scale[0], [1.0, 1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(2),
                   1 + 0.1 * math.log(3), 1 + 0.1 * math.log(5)], rtol=1e-7)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("f4", 4, 0.5), ("f1", 1, 0.1), ("f7", 7, 2.0))
  def test_matches_hugging_faces_formula(self, floor_scale, attn_scale):
    positions = np.arange(200, dtype=np.int32)[None]
    fn = functools.partial(llama4_query_scale, floor_scale=floor_scale, attn_scale=attn_scale)
    np.testing.assert_allclose(self.variant(fn)(positions),
                               _hf_llama4_scale(positions, floor_scale, attn_scale), rtol=1e-7)

  def test_rejects_bad_inputs(self):
    positions = np.array([[0, 1]], np.int32)
    with self.assertRaisesRegex(ValueError, "floor_scale must be a positive integer, got 0"):
      llama4_query_scale(positions, floor_scale=0)
    with self.assertRaisesRegex(ValueError, "attn_scale must be a finite number, got inf"):
      llama4_query_scale(positions, attn_scale=float("inf"))
    with self.assertRaisesRegex(ValueError, "positions must be >= 0"):
      llama4_query_scale(np.array([[-1, 0]], np.int32))
    poisoned = jax.jit(llama4_query_scale)(jnp.array([[-1, 0]], jnp.int32))
    self.assertTrue(bool(jnp.isnan(poisoned[0, 0])) and float(poisoned[0, 1]) == 1.0)


if __name__ == "__main__":
  absltest.main()
