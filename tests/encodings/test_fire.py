"""Tests for pejax.encodings.fire."""

from __future__ import annotations

import functools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.fire import fire_normalized_distance


def _reference(q_positions, k_positions, c, threshold, eps=1e-6):
  """Li et al. 2024 appendix code: log(|c (i - j)| + 1) / (log(|c max(i, L)| + 1) + eps)."""
  i = np.asarray(q_positions, np.float64)[:, None]
  j = np.asarray(k_positions, np.float64)[None, :]
  normalizer = np.log(np.abs(c * np.maximum(i, threshold)) + 1) + eps
  return np.log(np.abs(c * (i - j)) + 1) / normalizer


class FireNormalizedDistanceTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  @chex.variants(with_jit=True, without_jit=True)
  def test_golden_values_with_paper_defaults(self):
    # c = 0.1, L = 512: below L the normalizer is log(52.2).
    q = np.array([3, 1000], np.int32)
    k = np.array([0, 3], np.int32)
    out = self.variant(fire_normalized_distance)(q, k)
    chex.assert_shape(out, (2, 2))
    chex.assert_type(out, jnp.float32)
    np.testing.assert_allclose(
        out, [[np.log(1.3) / np.log(52.2), 0.0],
              [np.log(101.0) / np.log(101.0), np.log(100.7) / np.log(101.0)]], rtol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("defaults", 0.1, 512.0), ("short_threshold", 0.7, 3.0),
                                  ("large_c", 5.0, 100.0))
  def test_matches_numpy_reference(self, c, threshold):
    rng = np.random.default_rng(0)
    q = rng.integers(0, 4000, size=(2, 8)).astype(np.int32)
    k = rng.integers(0, 4000, size=(2, 5)).astype(np.int32)
    out = self.variant(functools.partial(fire_normalized_distance, c=c, threshold=threshold))(q, k)
    chex.assert_shape(out, (2, 8, 5))
    for b in range(2):
      np.testing.assert_allclose(out[b], _reference(q[b], k[b], c, threshold), rtol=2e-6,
                                 atol=1e-7)

  @chex.variants(with_jit=True, without_jit=True)
  def test_past_keys_map_into_unit_interval_increasing_with_distance(self):
    positions = np.arange(0, 3000, 7, dtype=np.int32)
    fn = self.variant(functools.partial(fire_normalized_distance, c=0.3, threshold=64.0))
    for query in (0, 10, 63, 64, 500, 2995):
      keys = positions[positions <= query]
      out = np.asarray(fn(np.array([query], np.int32), keys))[0, ::-1]  # nearest key first
      self.assertEqual(out[0] if query in keys else 0.0, 0.0)
      self.assertTrue(np.all(out >= 0) and np.all(out < 1.0))
      self.assertTrue(np.all(np.diff(out) > 0))
    # Beyond the threshold the farthest key (j = 0) sits at 1 (up to eps): the interpolation.
    far = np.asarray(fn(np.array([2995], np.int32), np.array([0], np.int32)))
    np.testing.assert_allclose(far, 1.0, rtol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  def test_translation_invariant_only_below_threshold(self):
    q = np.array([10, 20, 30], np.int32)
    k = np.array([0, 5, 10, 25], np.int32)
    fn = self.variant(functools.partial(fire_normalized_distance, threshold=100.0))
    base = fn(q, k)
    chex.assert_trees_all_equal(fn(q + 60, k + 60), base)  # every query still < L = 100
    shifted = fn(q + 500, k + 500)  # normalizer now psi(q + 500)
    self.assertTrue(np.all(np.asarray(shifted)[np.asarray(base) > 0]
                           < np.asarray(base)[np.asarray(base) > 0]))

  def test_gradients_in_c_and_threshold(self):
    q = np.arange(20, 40, dtype=np.int32)
    k = np.arange(40, dtype=np.int32)

    @jax.jit
    def total(c, threshold):
      return jnp.sum(fire_normalized_distance(q, k, c=c, threshold=threshold))

    dc, dthreshold = jax.grad(total, argnums=(0, 1))(jnp.float32(0.1), jnp.float32(30.0))
    chex.assert_tree_all_finite((dc, dthreshold))
    # A larger threshold enlarges the normalizer of queries below it: the sum decreases.
    self.assertLess(float(dthreshold), 0.0)
    eps = 1e-2
    numeric = (total(jnp.float32(0.1), jnp.float32(30.0 + eps))
               - total(jnp.float32(0.1), jnp.float32(30.0 - eps))) / (2 * eps)
    np.testing.assert_allclose(dthreshold, numeric, rtol=2e-2)

  def test_rejects_bad_inputs(self):
    q = np.arange(3, dtype=np.int32)
    for bad in (0.0, -0.1, float("nan"), float("inf")):
      with self.assertRaisesRegex(ValueError, f"c must be a positive finite number, got {bad}"):
        fire_normalized_distance(q, q, c=bad)
    with self.assertRaisesRegex(ValueError, "threshold must be a positive finite number, got 0"):
      fire_normalized_distance(q, q, threshold=0)
    with self.assertRaisesRegex(ValueError, "threshold must be a scalar number"):
      fire_normalized_distance(q, q, threshold=np.ones(2))
    with self.assertRaisesRegex(ValueError, "c must be a positive number, got True"):
      fire_normalized_distance(q, q, c=True)
    with self.assertRaisesRegex(ValueError, "eps must be a non-negative finite number, got -1"):
      fire_normalized_distance(q, q, eps=-1e-6)
    with self.assertRaisesRegex(ValueError, "q_positions must be an integer array"):
      fire_normalized_distance(q.astype(np.float32), q)
    with self.assertRaisesRegex(ValueError, r"c must be a scalar, got shape \(2,\)"):
      jax.jit(lambda c: fire_normalized_distance(q, q, c=c))(jnp.ones(2))


if __name__ == "__main__":
  absltest.main()
