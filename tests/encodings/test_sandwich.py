"""Tests for pejax.encodings.sandwich."""

from __future__ import annotations

import functools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.sandwich import sandwich_bias
from pejax.encodings.sandwich import sandwich_head_scales
from pejax.encodings.sinusoidal import sinusoidal_embedding


def _reference(q_positions, k_positions, num_heads, dim, base=10000.0):
  """Chi et al. 2023: p_m . p_n of (sin, cos) embeddings, head h divided by 8h / H (float64)."""
  def embed(positions):
    i = np.arange(dim // 2, dtype=np.float64)
    angles = np.asarray(positions, np.float64)[:, None] / base ** (2 * i / dim)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)
  inner = embed(q_positions) @ embed(k_positions).T
  ratios = np.arange(1, num_heads + 1, dtype=np.float64) * 8 / num_heads
  return inner[None] / ratios[:, None, None]


class SandwichTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  def test_head_scales_are_inverse_alibi_compression_ratios(self):
    np.testing.assert_allclose(sandwich_head_scales(8), 1.0 / np.arange(1, 9), rtol=1e-7)
    np.testing.assert_allclose(sandwich_head_scales(2), [1 / 4, 1 / 8], rtol=1e-7)
    np.testing.assert_allclose(np.asarray(sandwich_head_scales(16))[[0, -1]], [2.0, 0.125],
                               rtol=1e-7)

  @chex.variants(with_jit=True, without_jit=True)
  def test_golden_values(self):
    # dim 4: wave numbers 1 and 10000^(-1/2) = 0.01; one head: ratio 8.
    bias = self.variant(functools.partial(sandwich_bias, num_heads=1, dim=4))(
        np.array([0, 1], np.int32), np.array([0, 1, 3], np.int32))
    chex.assert_shape(bias, (1, 2, 3))
    chex.assert_type(bias, jnp.float32)
    def entry(d):
      return (np.cos(d) + np.cos(0.01 * d)) / 8
    np.testing.assert_allclose(bias[0], [[entry(0), entry(1), entry(3)],
                                         [entry(1), entry(0), entry(2)]], rtol=1e-6)
    np.testing.assert_allclose(bias[0, 0, 0], 0.25, rtol=1e-7)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("h8_d128", 8, 128), ("h3_d16", 3, 16), ("h12_d64", 12, 64))
  def test_matches_paper_inner_product(self, num_heads, dim):
    rng = np.random.default_rng(num_heads)
    q = rng.integers(0, 5000, size=(6,)).astype(np.int32)
    k = rng.integers(0, 5000, size=(10,)).astype(np.int32)
    bias = self.variant(functools.partial(sandwich_bias, num_heads=num_heads, dim=dim))(q, k)
    # float32 angles |m - n| w_i carry an error of about |m - n| w_i 2^-23 each (the rounding
    # of w_i and of the product); summed over i and scaled by the largest head factor H / 8.
    inv_freq = 10000.0 ** -(np.arange(0, dim, 2) / dim)
    bound = np.max(np.abs(q[:, None] - k[None])) * np.sum(inv_freq) * 2.0 ** -23
    np.testing.assert_allclose(bias, _reference(q, k, num_heads, dim),
                               atol=bound * max(num_heads / 8, 1) + 1e-5)

  def test_equals_inner_product_of_pejax_sinusoidal_embeddings(self):
    positions = np.arange(40, dtype=np.int32)
    table = np.asarray(sinusoidal_embedding(positions, 32), np.float64)
    bias = sandwich_bias(positions, positions, num_heads=4, dim=32)
    np.testing.assert_allclose(bias, (table @ table.T)[None] * np.asarray(
        sandwich_head_scales(4))[:, None, None], atol=2e-5)

  @chex.variants(with_jit=True, without_jit=True)
  def test_translation_invariant_and_symmetric(self):
    rng = np.random.default_rng(3)
    q = rng.integers(0, 1000, size=(2, 5)).astype(np.int32)
    k = rng.integers(0, 1000, size=(2, 7)).astype(np.int32)
    bias_fn = self.variant(functools.partial(sandwich_bias, num_heads=4))
    base = bias_fn(q, k)
    for shift in (1, 123, -600, 5_000_000):
      chex.assert_trees_all_equal(bias_fn(q + shift, k + shift), base)
    np.testing.assert_array_equal(base, np.swapaxes(bias_fn(k, q), -1, -2))

  def test_maximum_on_diagonal_and_decay_over_resolved_distances(self):
    num_heads, dim = 4, 128
    distances = np.arange(0, 2048, dtype=np.int32)
    bias = np.asarray(sandwich_bias(np.zeros(1, np.int32), distances, num_heads=num_heads,
                                    dim=dim))[:, 0]  # [H, distance]
    scales = np.asarray(sandwich_head_scales(num_heads))
    np.testing.assert_allclose(bias[:, 0], dim / 2 * scales, rtol=1e-6)
    self.assertTrue(np.all(bias[:, 1:] < bias[:, :1]))
    # The paper's "log-decaying" pattern: a running maximum that keeps falling with distance.
    tail_max = np.maximum.accumulate(bias[0, ::-1])[::-1]
    self.assertTrue(np.all(tail_max[[1, 10, 100, 1000]][:-1] > tail_max[[1, 10, 100, 1000]][1:]))
    # Head h is head 1 divided by h.
    np.testing.assert_allclose(bias[1:], bias[:1] / np.arange(2, num_heads + 1)[:, None],
                               rtol=1e-6, atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_leading_dims_broadcast_and_decode_row(self):
    q = np.arange(6, dtype=np.int32)[None]
    full = self.variant(functools.partial(sandwich_bias, num_heads=2))(q, q)
    chex.assert_shape(full, (1, 2, 6, 6))
    row = self.variant(functools.partial(sandwich_bias, num_heads=2))(q[:, 5:], q)
    np.testing.assert_array_equal(row, full[:, :, 5:])

  def test_rejects_bad_inputs(self):
    q = np.arange(3, dtype=np.int32)
    for bad in (0, -1, 2.0, True):
      with self.assertRaisesRegex(ValueError, "num_heads must be a positive integer"):
        sandwich_bias(q, q, num_heads=bad)
    with self.assertRaisesRegex(ValueError, "dim must be even, got 7"):
      sandwich_bias(q, q, num_heads=2, dim=7)
    with self.assertRaisesRegex(ValueError, "dim must be a positive integer, got 0"):
      sandwich_bias(q, q, num_heads=2, dim=0)
    with self.assertRaisesRegex(ValueError, r"base must be > 1, got 0\.5"):
      sandwich_bias(q, q, num_heads=2, base=0.5)
    with self.assertRaisesRegex(ValueError, "base must be a positive finite number, got inf"):
      sandwich_bias(q, q, num_heads=2, base=float("inf"))
    with self.assertRaisesRegex(ValueError, "k_positions must be an integer array"):
      sandwich_bias(q, q.astype(np.float32), num_heads=2)
    with self.assertRaisesRegex(ValueError, "broadcastable leading dims"):
      sandwich_bias(np.zeros((2, 3), np.int32), np.zeros((4, 3), np.int32), num_heads=2)


if __name__ == "__main__":
  absltest.main()
