"""Tests for pejax.encodings.p_rope: golden frequencies, what is kept and what is not rotated."""

from __future__ import annotations

import functools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.p_rope import p_rope_inv_freq
from pejax.encodings.p_rope import p_rope_mask
from pejax.encodings.p_rope import p_rope_num_kept
from pejax.encodings.rope import RopeConfig
from pejax.encodings.rope import apply_rope
from pejax.encodings.rope import rope_inv_freq


class PRopeGoldenTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_golden_inv_freq(self):
    # D = 8, base 10000: RoPE's 10000 ** (-2i/8) = (1, 0.1, 0.01, 0.001); p = 0.5 keeps 2.
    got = self.variant(functools.partial(p_rope_inv_freq, 8, p=0.5))()
    chex.assert_type(got, jnp.float32)
    np.testing.assert_allclose(got, [1.0, 0.1, 0.0, 0.0], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(got)[2:], 0.0)

  @parameterized.named_parameters(
      ("quarter_of_64", 32, 0.25, 8), ("three_quarters_of_64", 32, 0.75, 24),
      ("float_error_absorbed", 10, 0.3, 3), ("none", 8, 0.0, 0), ("all", 8, 1.0, 8),
      ("floor", 8, 0.2, 1))
  def test_num_kept_is_floor_of_p_times_frequencies(self, num_frequencies, p, expected):
    self.assertEqual(p_rope_num_kept(num_frequencies, p=p), expected)
    mask = np.asarray(p_rope_mask(num_frequencies, p=p))
    np.testing.assert_array_equal(mask, np.arange(num_frequencies) < expected)


class PRopePropertyTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))
    self.x = jax.random.normal(jax.random.PRNGKey(0), (2, 7, 3, 16))
    self.positions = jnp.arange(7, dtype=jnp.int32) * 5 + 3

  def test_p_one_is_rope_and_p_zero_is_nope(self):
    rope, _ = rope_inv_freq(RopeConfig(16, base=500.0))
    np.testing.assert_array_equal(p_rope_inv_freq(16, p=1.0, base=500.0), rope)
    nope = apply_rope(self.x, self.positions, p_rope_inv_freq(16, p=0.0), layout="half")
    np.testing.assert_array_equal(nope, self.x)

  def test_keeps_the_highest_frequencies_of_full_width_rope(self):
    rope, _ = rope_inv_freq(RopeConfig(16))
    got = np.asarray(p_rope_inv_freq(16, p=0.5))
    np.testing.assert_array_equal(got[:4], np.asarray(rope)[:4])
    self.assertTrue(np.all(np.asarray(rope)[4:] > 0))
    # Not partial rotary: rotary_dim = 8 re-spreads 8 channels over base ** (-2i / 8).
    partial, _ = rope_inv_freq(RopeConfig(16, rotary_dim=8))
    self.assertFalse(np.allclose(got[:4], np.asarray(partial)))

  @parameterized.named_parameters(("half", "half"), ("interleaved", "interleaved"))
  def test_truncated_pairs_are_not_rotated(self, layout):
    out = np.asarray(apply_rope(self.x, self.positions, p_rope_inv_freq(16, p=0.25),
                                layout=layout))
    x = np.asarray(self.x)
    kept = 2  # floor(0.25 * 8).
    if layout == "half":
      still = np.r_[kept:8, 8 + kept:16]
    else:
      still = np.arange(2 * kept, 16)
    np.testing.assert_array_equal(out[..., still], x[..., still])
    moved = np.setdiff1d(np.arange(16), still)
    self.assertFalse(np.allclose(out[..., moved], x[..., moved]))

  def test_scores_stay_relative(self):
    inv_freq = p_rope_inv_freq(16, p=0.5)
    q, k = self.x, jnp.roll(self.x, 1, axis=0)

    def scores(shift):
      positions = self.positions + shift
      return jnp.einsum("bqhd,bkhd->bhqk", apply_rope(q, positions, inv_freq, layout="half"),
                        apply_rope(k, positions, inv_freq, layout="half"))

    np.testing.assert_allclose(scores(0), scores(1000), rtol=1e-3, atol=1e-3)


class PRopeFailureTest(parameterized.TestCase):

  @parameterized.named_parameters(("negative", -0.1), ("above_one", 1.5), ("nan", float("nan")),
                                  ("bool", True), ("string", "half"), ("none", None))
  def test_bad_p_names_the_argument(self, p):
    with self.assertRaisesRegex(ValueError, "p must be a number in"):
      p_rope_inv_freq(16, p=p)

  def test_bad_head_dim_and_base(self):
    with self.assertRaisesRegex(ValueError, "head_dim must be even, got 15"):
      p_rope_inv_freq(15)
    with self.assertRaisesRegex(ValueError, "base"):
      p_rope_inv_freq(16, base=1.0)
    with self.assertRaisesRegex(ValueError, "num_frequencies"):
      p_rope_mask(0)


if __name__ == "__main__":
  absltest.main()
