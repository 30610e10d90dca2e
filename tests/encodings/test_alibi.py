"""Tests for pejax.encodings.alibi."""

from __future__ import annotations

import functools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.alibi import alibi_bias
from pejax.encodings.alibi import alibi_slopes

# Press et al.'s `get_slopes` (the ALiBi paper's reference code), float64, per head count.
_SLOPES_8 = [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
_GOLDEN_SLOPES = {
    8: _SLOPES_8,
    12: _SLOPES_8 + [0.7071067811865476, 0.35355339059327384, 0.17677669529663692,
                     0.08838834764831849],
    6: [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125],
    5: [0.25, 0.0625, 0.015625, 0.00390625, 0.5],
    3: [0.0625, 0.00390625, 0.25],
    1: [0.00390625],
}


class AlibiSlopesTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(*[(f"heads{n}", n) for n in _GOLDEN_SLOPES])
  def test_golden_slopes(self, num_heads):
    slopes = self.variant(functools.partial(alibi_slopes, num_heads))()
    chex.assert_type(slopes, jnp.float32)
    np.testing.assert_array_equal(slopes, np.asarray(_GOLDEN_SLOPES[num_heads], np.float32))

  @parameterized.named_parameters(("h2", 2), ("h4", 4), ("h16", 16), ("h32", 32))
  def test_power_of_two_is_geometric_down_to_2_pow_minus_8(self, num_heads):
    slopes = np.asarray(alibi_slopes(num_heads), np.float64)
    np.testing.assert_allclose(slopes[0], 2.0 ** (-8 / num_heads), rtol=1e-7)
    np.testing.assert_allclose(slopes[1:] / slopes[:-1], slopes[0], rtol=1e-6)
    np.testing.assert_allclose(slopes[-1], 2.0 ** -8, rtol=1e-6)

  def test_non_power_of_two_extends_the_power_of_two_prefix(self):
    for num_heads in (3, 5, 6, 7, 12, 20, 24):
      closest = 2 ** int(np.floor(np.log2(num_heads)))
      slopes = np.asarray(alibi_slopes(num_heads))
      np.testing.assert_array_equal(slopes[:closest], alibi_slopes(closest))
      np.testing.assert_array_equal(
          slopes[closest:], np.asarray(alibi_slopes(2 * closest))[0::2][:num_heads - closest])
      self.assertLen(np.unique(slopes), num_heads)

  def test_rejects_bad_num_heads(self):
    for bad in (0, -3, 2.0, True, None):
      with self.assertRaisesRegex(ValueError, "num_heads"):
        alibi_slopes(bad)


class AlibiBiasTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  @chex.variants(with_jit=True, without_jit=True)
  def test_golden_causal_and_bidirectional(self):
    q, k = np.arange(3, dtype=np.int32), np.arange(4, dtype=np.int32)
    slopes = np.array([0.5, 0.25], np.float32)
    causal = self.variant(functools.partial(alibi_bias, causal=True))(q, k, slopes)
    bidir = self.variant(functools.partial(alibi_bias, causal=False))(q, k, slopes)
    # -(q - k): keys after the query come out positive (the attention mask drops them).
    expected_causal_h0 = np.array([[0.0, 0.5, 1.0, 1.5],
                                   [-0.5, 0.0, 0.5, 1.0],
                                   [-1.0, -0.5, 0.0, 0.5]], np.float32)
    expected_bidir_h0 = np.array([[0.0, -0.5, -1.0, -1.5],
                                  [-0.5, 0.0, -0.5, -1.0],
                                  [-1.0, -0.5, 0.0, -0.5]], np.float32)
    chex.assert_shape(causal, (2, 3, 4))
    chex.assert_type(causal, jnp.float32)
    np.testing.assert_array_equal(causal, np.stack([expected_causal_h0, expected_causal_h0 / 2]))
    np.testing.assert_array_equal(bidir, np.stack([expected_bidir_h0, expected_bidir_h0 / 2]))

  @chex.variants(with_jit=True, without_jit=True)
  def test_decode_step_with_offset_positions(self):
    # One new query at position 5 attending to the 6 cached keys 0..5.
    bias = self.variant(alibi_bias)(np.array([5], np.int32), np.arange(6, dtype=np.int32),
                                    alibi_slopes(1))
    np.testing.assert_array_equal(
        bias, (-(5.0 - np.arange(6)) * 2.0 ** -8).astype(np.float32)[None, None, :])

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("causal", True), ("bidirectional", False))
  def test_shift_invariance(self, causal):
    rng = np.random.default_rng(0)
    q = rng.integers(0, 1000, size=(2, 5)).astype(np.int32)
    k = rng.integers(0, 1000, size=(2, 7)).astype(np.int32)
    bias_fn = self.variant(functools.partial(alibi_bias, causal=causal))
    slopes = alibi_slopes(4)
    base = bias_fn(q, k, slopes)
    for shift in (1, 37, 1_000_000, -500):
      chex.assert_trees_all_equal(bias_fn(q + shift, k + shift, slopes), base)

  @chex.variants(with_jit=True, without_jit=True)
  def test_bidirectional_is_symmetric(self):
    rng = np.random.default_rng(1)
    q = rng.integers(0, 50, size=(6,)).astype(np.int32)
    k = rng.integers(0, 50, size=(9,)).astype(np.int32)
    bias_fn = self.variant(functools.partial(alibi_bias, causal=False))
    slopes = alibi_slopes(3)
    np.testing.assert_array_equal(bias_fn(q, k, slopes),
                                  np.swapaxes(bias_fn(k, q, slopes), -1, -2))
    square = bias_fn(q, q, slopes)
    np.testing.assert_array_equal(square, np.swapaxes(square, -1, -2))

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("causal", True), ("bidirectional", False))
  def test_zero_on_diagonal_and_nonpositive_for_past_keys(self, causal):
    positions = np.array([[0, 3, 4, 10, 11]], np.int32)
    bias = self.variant(functools.partial(alibi_bias, causal=causal))(
        positions, positions, alibi_slopes(5))
    chex.assert_shape(bias, (1, 5, 5, 5))
    np.testing.assert_array_equal(np.diagonal(bias, axis1=-2, axis2=-1), 0.0)
    lower = np.tril(np.ones((5, 5), bool), k=-1)
    self.assertTrue(np.all(np.asarray(bias)[..., lower] < 0))

  @chex.variants(with_jit=True, without_jit=True)
  def test_causal_and_bidirectional_agree_on_past_keys(self):
    positions = np.arange(7, dtype=np.int32)
    slopes = alibi_slopes(2)
    causal = self.variant(functools.partial(alibi_bias, causal=True))(positions, positions,
                                                                       slopes)
    bidir = self.variant(functools.partial(alibi_bias, causal=False))(positions, positions,
                                                                      slopes)
    lower = np.tril(np.ones((7, 7), bool))
    np.testing.assert_array_equal(np.asarray(causal)[..., lower], np.asarray(bidir)[..., lower])

  @chex.variants(with_jit=True, without_jit=True)
  def test_leading_dims_broadcast_and_head_axis_before_lq(self):
    rng = np.random.default_rng(2)
    q = rng.integers(0, 100, size=(2, 1, 3)).astype(np.int32)
    k = rng.integers(0, 100, size=(1, 4, 5)).astype(np.int32)
    slopes = alibi_slopes(6)
    bias = self.variant(alibi_bias)(q, k, slopes)
    chex.assert_shape(bias, (2, 4, 6, 3, 5))
    for b in range(2):
      for c in range(4):
        np.testing.assert_array_equal(bias[b, c], alibi_bias(q[b, 0], k[0, c], slopes))
    # Unbatched queries broadcast against batched keys.
    chex.assert_shape(self.variant(alibi_bias)(q[0, 0], k, slopes), (1, 4, 6, 3, 5))

  @chex.variants(with_jit=True, without_jit=True)
  def test_unsigned_positions_do_not_wrap(self):
    q, k = np.array([1, 3], np.uint32), np.array([0, 2, 5], np.uint32)
    bias = self.variant(alibi_bias)(q, k, np.array([1.0], np.float32))
    np.testing.assert_array_equal(bias[0], [[-1.0, 1.0, 4.0], [-3.0, -1.0, 2.0]])

  def test_same_softmax_as_bloom_key_only_form(self):
    # BLOOM adds slope * k; ours differs by -slope * q per row, which softmax cancels.
    length, num_heads = 6, 4
    positions = np.arange(length, dtype=np.int32)
    slopes = alibi_slopes(num_heads)
    logits = jax.random.normal(jax.random.key(0), (num_heads, length, length))
    mask = np.tril(np.ones((length, length), bool))[None]
    bloom = slopes[:, None, None] * positions[None, None, :].astype(np.float32)
    ours = alibi_bias(positions, positions, slopes)
    @jax.jit
    def attn(bias):
      return jax.nn.softmax(jnp.where(mask, logits + bias, -jnp.inf), axis=-1)
    chex.assert_trees_all_close(attn(ours), attn(bloom), atol=1e-6)

  def test_rejects_bad_inputs(self):
    q = np.arange(3, dtype=np.int32)
    slopes = alibi_slopes(2)
    with self.assertRaisesRegex(ValueError, "slopes must be 1-D"):
      alibi_bias(q, q, slopes[None])
    with self.assertRaisesRegex(ValueError, "slopes must be 1-D"):
      alibi_bias(q, q, 0.5)
    with self.assertRaisesRegex(ValueError, "q_positions must be an integer array"):
      alibi_bias(q.astype(np.float32), q, slopes)
    with self.assertRaisesRegex(ValueError, "k_positions must be an integer array"):
      jax.jit(alibi_bias)(q, q.astype(np.float32), slopes)
    with self.assertRaisesRegex(ValueError, "q_positions"):
      alibi_bias(np.int32(3), q, slopes)
    with self.assertRaisesRegex(ValueError, r"broadcastable leading dims.*\(2, 3\).*\(3, 3\)"):
      alibi_bias(np.zeros((2, 3), np.int32), np.zeros((3, 3), np.int32), slopes)


if __name__ == "__main__":
  absltest.main()
