"""Tests for pejax.encodings.randomized."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import numpy as np

from pejax.encodings.randomized import randomized_positions

_STATIC = ("length", "max_position", "batch_shape")


class RandomizedPositionsTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      ("unbatched", 16, 100, ()),
      ("batch_2d", 8, 1000, (2, 3)),
      ("full_range", 9, 9, (2,)),
  )
  def test_sorted_distinct_in_range(self, length, max_position, batch_shape):
    sample = self.variant(randomized_positions, static_argnames=_STATIC)
    positions = np.asarray(sample(jax.random.key(0), length=length, max_position=max_position,
                                  batch_shape=batch_shape))
    chex.assert_shape(positions, (*batch_shape, length))
    self.assertEqual(positions.dtype, np.int32)
    self.assertTrue(np.all(np.diff(positions, axis=-1) > 0))  # strictly increasing => distinct
    self.assertTrue(np.all((positions >= 0) & (positions < max_position)))

  @chex.variants(with_jit=True, without_jit=True)
  def test_length_equal_to_max_position_gives_every_position(self):
    sample = self.variant(randomized_positions, static_argnames=_STATIC)
    positions = sample(jax.random.key(3), length=7, max_position=7, batch_shape=(2,))
    np.testing.assert_array_equal(positions, np.tile(np.arange(7), (2, 1)))

  @chex.variants(with_jit=True, without_jit=True)
  def test_deterministic_per_key_and_keys_differ(self):
    sample = self.variant(randomized_positions, static_argnames=_STATIC)
    kwargs = dict(length=16, max_position=1024, batch_shape=(4,))
    first = sample(jax.random.key(7), **kwargs)
    np.testing.assert_array_equal(first, sample(jax.random.key(7), **kwargs))
    self.assertFalse(np.array_equal(first, sample(jax.random.key(8), **kwargs)))
    # Rows of one batch are independent draws, not copies.
    self.assertLen({tuple(row) for row in np.asarray(first)}, 4)

  def test_legacy_uint32_key_works(self):
    positions = randomized_positions(jax.random.PRNGKey(0), 16, max_position=100)
    chex.assert_shape(positions, (16,))
    self.assertTrue(np.all(np.diff(positions) > 0))

  def test_jit_equals_eager(self):
    key = jax.random.key(11)
    eager = randomized_positions(key, 16, max_position=1024, batch_shape=(4,))
    jitted = jax.jit(randomized_positions, static_argnames=_STATIC)(
        key, length=16, max_position=1024, batch_shape=(4,))
    np.testing.assert_array_equal(eager, jitted)

  def test_coverage_is_roughly_uniform(self):
    num_samples, length, max_position = 2000, 16, 64
    positions = randomized_positions(jax.random.key(42), length, max_position=max_position,
                                     batch_shape=(num_samples,))
    counts = np.bincount(np.ravel(positions), minlength=max_position)
    # Expected 500 per position, std ~19: +-100 is about 5 sigma.
    expected = num_samples * length / max_position
    self.assertTrue(np.all(np.abs(counts - expected) < 100), msg=f"counts {counts}")
    # The smallest position is not biased to 0: its mean is max_position / (length + 1) - 1 ~ 2.8.
    mean_first = np.mean(np.asarray(positions)[:, 0])
    self.assertAlmostEqual(mean_first, (max_position + 1) / (length + 1) - 1, delta=0.5)

  def test_rejects_bad_arguments(self):
    key = jax.random.key(0)
    with self.assertRaisesRegex(ValueError, "length must be <= max_position \\(8\\).*got 9"):
      randomized_positions(key, 9, max_position=8)
    with self.assertRaisesRegex(ValueError, "length.*got 0"):
      randomized_positions(key, 0, max_position=8)
    with self.assertRaisesRegex(ValueError, "max_position.*got 0"):
      randomized_positions(key, 1, max_position=0)
    with self.assertRaisesRegex(ValueError, "batch_shape"):
      randomized_positions(key, 4, max_position=8, batch_shape=3)
    with self.assertRaisesRegex(ValueError, "batch_shape\\[1\\]"):
      randomized_positions(key, 4, max_position=8, batch_shape=(2, -1))


if __name__ == "__main__":
  absltest.main()
