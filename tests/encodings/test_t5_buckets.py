"""Tests for pejax.encodings.t5_buckets."""

from __future__ import annotations

import functools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.t5_buckets import t5_relative_position_bucket

# The output of Hugging Face T5's `_relative_position_bucket` (the reference implementation of
# Raffel et al. 2020), 32 buckets, max_distance 128.
_RELATIVE = [-1000, -200, -128, -127, -100, -64, -63, -33, -32, -31, -17, -16, -15, -9, -8, -7,
             -1, 0, 1, 2, 7, 8, 9, 11, 12, 15, 16, 17, 22, 23, 31, 32, 45, 46, 63, 64, 90, 91,
             127, 128, 200]
_BIDIRECTIONAL = [15, 15, 15, 15, 15, 14, 13, 12, 12, 11, 10, 10, 9, 8, 8, 7, 1, 0, 17, 18, 23,
                  24, 24, 24, 25, 25, 26, 26, 26, 27, 27, 28, 28, 29, 29, 30, 30, 31, 31, 31, 31]
_CAUSAL = [31, 31, 31, 31, 30, 26, 26, 21, 21, 21, 16, 16, 15, 9, 8, 7, 1, 0] + [0] * 23

_CONFIGS = (("b32_d128", 32, 128), ("b8_d20", 8, 20), ("b64_d1000", 64, 1000))


class T5BucketsTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  def _bucket_fn(self, **kwargs):
    return self.variant(functools.partial(t5_relative_position_bucket, **kwargs))

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("bidirectional", True, _BIDIRECTIONAL),
                                  ("causal", False, _CAUSAL))
  def test_golden_hf_buckets(self, bidirectional, expected):
    buckets = self._bucket_fn(bidirectional=bidirectional)(np.array(_RELATIVE, np.int32))
    chex.assert_type(buckets, jnp.int32)
    np.testing.assert_array_equal(buckets, np.array(expected, np.int32))

  @chex.variants(with_jit=True, without_jit=True)
  def test_keeps_shape(self):
    relative = np.arange(-12, 12, dtype=np.int32).reshape(2, 3, 4)
    buckets = self._bucket_fn()(relative)
    chex.assert_shape(buckets, (2, 3, 4))
    np.testing.assert_array_equal(
        np.ravel(buckets), t5_relative_position_bucket(np.ravel(relative)))

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(*_CONFIGS)
  def test_bidirectional_structure(self, num_buckets, max_distance):
    half, max_exact = num_buckets // 2, num_buckets // 4
    distance = np.arange(0, 4 * max_distance, dtype=np.int32)
    bucket_fn = self._bucket_fn(num_buckets=num_buckets, max_distance=max_distance)
    past, future = np.asarray(bucket_fn(-distance)), np.asarray(bucket_fn(distance))
    # Keys at or before the query use [0, half); keys after it use [half, num_buckets).
    self.assertTrue(np.all((past >= 0) & (past < half)))
    self.assertTrue(np.all((future[1:] >= half) & (future[1:] < num_buckets)))
    self.assertEqual(future[0], 0)
    np.testing.assert_array_equal(future[1:] - half, past[1:])  # same distances, mirrored
    # Exact buckets for small distances, then non-decreasing, saturating at max_distance.
    np.testing.assert_array_equal(past[:max_exact], distance[:max_exact])
    self.assertTrue(np.all(np.diff(past) >= 0))
    np.testing.assert_array_equal(past[max_distance:], half - 1)
    self.assertLess(past[max_exact], half - 1)
    np.testing.assert_array_equal(np.unique(past), np.arange(half))  # every bucket is used

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(*_CONFIGS)
  def test_causal_structure(self, num_buckets, max_distance):
    max_exact = num_buckets // 2
    distance = np.arange(0, 4 * max_distance, dtype=np.int32)
    bucket_fn = self._bucket_fn(bidirectional=False, num_buckets=num_buckets,
                                max_distance=max_distance)
    past, future = np.asarray(bucket_fn(-distance)), np.asarray(bucket_fn(distance))
    np.testing.assert_array_equal(future, 0)  # every future key shares bucket 0
    np.testing.assert_array_equal(past[:max_exact], distance[:max_exact])
    self.assertTrue(np.all(np.diff(past) >= 0))
    np.testing.assert_array_equal(past[max_distance:], num_buckets - 1)
    np.testing.assert_array_equal(np.unique(past), np.arange(num_buckets))

  @chex.variants(with_jit=True, without_jit=True)
  def test_extreme_distances_saturate_without_overflow(self):
    relative = np.array([-2**31 + 1, -2**30 - 5, 2**30 + 5, 2**31 - 1], np.int32)
    np.testing.assert_array_equal(self._bucket_fn()(relative), [15, 15, 31, 31])
    np.testing.assert_array_equal(self._bucket_fn(bidirectional=False)(relative), [31, 31, 0, 0])

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("int8", np.int8), ("int16", np.int16), ("int64", np.int64))
  def test_accepts_signed_integer_dtypes(self, dtype):
    relative = np.array([-100, -9, -1, 0, 1, 2, 100], dtype)
    np.testing.assert_array_equal(self._bucket_fn()(relative), [15, 8, 1, 0, 17, 18, 31])

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("uint8", np.uint8), ("uint32", np.uint32))
  def test_unsigned_input_is_never_negative(self, dtype):
    relative = np.array([0, 1, 5, 200], dtype)
    np.testing.assert_array_equal(self._bucket_fn()(relative), [0, 17, 21, 31])

  def test_rejects_bad_arguments(self):
    relative = np.arange(-3, 3, dtype=np.int32)
    with self.assertRaisesRegex(ValueError, "relative_position must be an integer array"):
      t5_relative_position_bucket(relative.astype(np.float32))
    with self.assertRaisesRegex(ValueError, "relative_position must be an integer array"):
      jax.jit(t5_relative_position_bucket)(relative.astype(bool))
    with self.assertRaisesRegex(ValueError, "num_buckets must be >= 2, got 1"):
      t5_relative_position_bucket(relative, bidirectional=False, num_buckets=1)
    for bad in (2, 31):
      with self.assertRaisesRegex(ValueError, f"num_buckets must be even and >= 4.*{bad}"):
        t5_relative_position_bucket(relative, bidirectional=True, num_buckets=bad)
    with self.assertRaisesRegex(ValueError, "num_buckets"):
      t5_relative_position_bucket(relative, num_buckets=0)
    # 32 causal buckets have 16 exact ones: max_distance must exceed 16 (HF returns garbage).
    with self.assertRaisesRegex(ValueError, "max_distance must be > 16.*got 16"):
      t5_relative_position_bucket(relative, bidirectional=False, max_distance=16)
    with self.assertRaisesRegex(ValueError, "max_distance must be > 8.*got 8"):
      t5_relative_position_bucket(relative, bidirectional=True, max_distance=8)
    with self.assertRaisesRegex(ValueError, "max_distance"):
      t5_relative_position_bucket(relative, max_distance=0)


if __name__ == "__main__":
  absltest.main()
