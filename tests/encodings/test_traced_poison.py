"""Under ``jax.jit`` a parameter the eager call rejects gives the documented NaN poison, never a
finite wrong number (docs/decoder_and_pes.md, "Bad inputs: errors and NaN poison").

KERPLE's per-head r1 / r2, FIRE's c and threshold, and the query-scaling positions are often
traced (learned parameters, positions computed in the model): the eager value checks cannot see
them, so each function poisons exactly the affected heads / entries, and valid values pass
unchanged (compared with the eager result).
"""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import fire_kernel_bias
from pejax.encodings import fire_normalized_distance
from pejax.encodings import kerple_bias
from pejax.encodings import kerple_kernel_bias
from pejax.encodings.query_scaling import logn_query_scale
from pejax.encodings.query_scaling import ssmax_query_scale
from pejax.nn import DecoderConfig

Q = jnp.arange(5)[None]
K = jnp.arange(5)[None]
_KERPLE = jax.jit(lambda r1, r2, kind: kerple_bias(Q, K, r1, r2, kind=kind), static_argnums=2)
_FIRE = jax.jit(lambda c, threshold: fire_normalized_distance(Q, K, c=c, threshold=threshold))


class KerpleTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("log_negative_r1", "log", [0.5, -0.5], [1.0, 1.0]),
      ("log_zero_r2", "log", [0.5, 0.5], [1.0, 0.0]),
      ("log_nan_r1", "log", [0.5, np.nan], [1.0, 1.0]),
      ("power_r2_above_2", "power", [0.5, 0.5], [1.0, 2.5]),
      ("power_inf_r2", "power", [0.5, 0.5], [1.0, np.inf]),
  )
  def test_an_invalid_traced_head_is_nan_and_the_valid_head_unchanged(self, kind, r1, r2):
    r1, r2 = jnp.asarray(r1, jnp.float32), jnp.asarray(r2, jnp.float32)
    with self.assertRaisesRegex(ValueError, "r[12]"):  # Eager: an error.
      kerple_bias(Q, K, r1, r2, kind=kind)
    bias = np.asarray(_KERPLE(r1, r2, kind))  # [1, H, L, L]
    self.assertTrue(np.isnan(bias[:, 1]).all())
    expected = kerple_bias(Q, K, r1[:1], r2[:1], kind=kind)
    np.testing.assert_array_equal(bias[:, :1], expected)

  def test_valid_traced_parameters_equal_the_eager_result(self):
    r1, r2 = jnp.array([0.5, 2.0]), jnp.array([1.0, 2.0])
    for kind in ("log", "power"):
      np.testing.assert_array_equal(_KERPLE(r1, r2, kind), kerple_bias(Q, K, r1, r2, kind=kind))

  def test_in_kernel_parameters_are_poisoned_per_head(self):
    description = jax.jit(lambda r1, r2: kerple_kernel_bias(r1, r2, kind="power").params)(
        jnp.array([1.0, 1.0]), jnp.array([1.0, 3.0]))
    self.assertTrue(np.isnan(description[1]).any())
    self.assertTrue(np.isfinite(description[0]).all())


class FireTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("negative_c", -0.1, 512.0), ("zero_c", 0.0, 512.0), ("nan_c", np.nan, 512.0),
      ("negative_threshold", 0.1, -1.0), ("inf_threshold", 0.1, np.inf))
  def test_invalid_traced_scalars_give_nan(self, c, threshold):
    with self.assertRaisesRegex(ValueError, "c must|threshold must"):
      fire_normalized_distance(Q, K, c=c, threshold=threshold)
    self.assertTrue(np.isnan(_FIRE(jnp.float32(c), jnp.float32(threshold))).all())
    params = jax.jit(lambda c_, t: fire_kernel_bias(
        jnp.ones(2), jnp.zeros(2), jnp.ones((2, 3)), jnp.zeros(3), c_, t, eps=1e-6).params)(
            jnp.float32(c), jnp.float32(threshold))
    self.assertTrue(np.isnan(params).any())

  def test_valid_traced_scalars_equal_the_eager_result(self):
    np.testing.assert_array_equal(_FIRE(jnp.float32(0.1), jnp.float32(3.0)),
                                  fire_normalized_distance(Q, K, c=0.1, threshold=3.0))


class QueryScalingTest(absltest.TestCase):

  def test_a_traced_negative_position_is_nan_the_others_unchanged(self):
    positions = jnp.array([[-1, 0, 7]])
    with self.assertRaisesRegex(ValueError, "positions must be >= 0"):
      logn_query_scale(positions, train_len=4)
    logn = np.asarray(jax.jit(lambda p: logn_query_scale(p, train_len=4))(positions))
    self.assertTrue(np.isnan(logn[0, 0]))
    np.testing.assert_allclose(logn[0, 1:], logn_query_scale(positions[:, 1:], train_len=4)[0])
    ssmax = np.asarray(jax.jit(lambda p: ssmax_query_scale(p, jnp.ones(2)))(positions))
    self.assertTrue(np.isnan(ssmax[0, 0]).all())
    np.testing.assert_allclose(ssmax[0, 1:], ssmax_query_scale(positions[:, 1:], jnp.ones(2))[0])

  def test_query_scaling_length_is_checked_for_every_scaling(self):
    for scaling, length, message in (
        ("ssmax", -5, "query_scaling_length must be a non-negative integer, got -5"),
        ("ssmax", 1, "must be >= 2 for query_scaling='ssmax'"),
        ("logn", 0, "query_scaling_length must be a positive integer, got 0"),
        ("logn", 2.5, "got 2.5"),
        ("none", 128, "query_scaling_length=128 has no effect with query_scaling='none'"),
        ("none", -1, "non-negative integer, got -1"),
    ):
      with self.subTest(scaling=scaling, length=length):
        with self.assertRaisesRegex(ValueError, message):
          DecoderConfig(query_scaling=scaling, query_scaling_length=length)
    self.assertEqual(DecoderConfig(query_scaling="ssmax").query_scaling_length, 0)  # 512 used.


if __name__ == "__main__":
  absltest.main()
