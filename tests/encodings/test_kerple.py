"""Tests for pejax.encodings.kerple."""

from __future__ import annotations

import functools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.alibi import alibi_bias
from pejax.encodings.kerple import kerple_bias


def _reference(q_positions, k_positions, r1, r2, kind):
  """KERPLE eqs. (Chi et al. 2022), one entry at a time in float64."""
  q_positions, k_positions = np.asarray(q_positions), np.asarray(k_positions)
  out = np.zeros((len(r1), len(q_positions), len(k_positions)))
  for h in range(len(r1)):
    for a, m in enumerate(q_positions):
      for b, n in enumerate(k_positions):
        d = abs(float(m) - float(n))
        if kind == "log":
          out[h, a, b] = -r1[h] * np.log(1.0 + r2[h] * d)
        else:
          out[h, a, b] = -r1[h] * d ** r2[h]
  return out


_R1 = np.array([0.5, 1.7, 0.01], np.float32)
_R2 = np.array([1.0, 0.3, 2.0], np.float32)


class KerpleBiasTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  @chex.variants(with_jit=True, without_jit=True)
  def test_golden_values(self):
    q, k = np.array([0, 3], np.int32), np.array([0, 1, 3], np.int32)
    r1, r2 = np.array([2.0], np.float32), np.array([0.5], np.float32)
    log = self.variant(functools.partial(kerple_bias, kind="log"))(q, k, r1, r2)
    power = self.variant(functools.partial(kerple_bias, kind="power"))(q, k, r1, r2)
    chex.assert_shape(log, (1, 2, 3))
    chex.assert_type(log, jnp.float32)
    # -2 log(1 + 0.5 d) and -2 d^0.5 for d = |q - k|.
    np.testing.assert_allclose(
        log[0], [[0.0, -0.8109302, -1.8325815], [-1.8325815, -1.3862944, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(
        power[0], [[0.0, -2.0, -3.4641016], [-3.4641016, -2.8284271, 0.0]], rtol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("log", "log"), ("power", "power"))
  def test_matches_numpy_reference(self, kind):
    rng = np.random.default_rng(0)
    q = rng.integers(-50, 3000, size=(7,)).astype(np.int32)
    k = rng.integers(-50, 3000, size=(9,)).astype(np.int32)
    bias = self.variant(functools.partial(kerple_bias, kind=kind))(q, k, _R1, _R2)
    chex.assert_shape(bias, (3, 7, 9))
    np.testing.assert_allclose(bias, _reference(q, k, _R1.astype(np.float64),
                                                _R2.astype(np.float64), kind),
                               rtol=2e-6, atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("log", "log"), ("power", "power"))
  def test_translation_invariant(self, kind):
    rng = np.random.default_rng(1)
    q = rng.integers(0, 1000, size=(2, 5)).astype(np.int32)
    k = rng.integers(0, 1000, size=(2, 6)).astype(np.int32)
    bias_fn = self.variant(functools.partial(kerple_bias, kind=kind))
    base = bias_fn(q, k, _R1, _R2)
    for shift in (1, 77, -400, 1_000_000):
      chex.assert_trees_all_equal(bias_fn(q + shift, k + shift, _R1, _R2), base)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("log", "log"), ("power", "power"))
  def test_zero_on_diagonal_and_strictly_decreasing_with_distance(self, kind):
    positions = np.arange(64, dtype=np.int32)
    bias = np.asarray(self.variant(functools.partial(kerple_bias, kind=kind))(
        positions[-1:], positions, _R1, _R2))[:, 0, ::-1]  # [H, distance 0 .. 63]
    np.testing.assert_array_equal(bias[:, 0], 0.0)
    self.assertTrue(np.all(np.diff(bias, axis=-1) < 0))

  @chex.variants(with_jit=True, without_jit=True)
  def test_symmetric_in_query_and_key(self):
    rng = np.random.default_rng(2)
    q = rng.integers(0, 100, size=(4,)).astype(np.int32)
    k = rng.integers(0, 100, size=(6,)).astype(np.int32)
    bias_fn = self.variant(functools.partial(kerple_bias, kind="log"))
    np.testing.assert_array_equal(bias_fn(q, k, _R1, _R2),
                                  np.swapaxes(bias_fn(k, q, _R1, _R2), -1, -2))

  def test_power_with_exponent_one_is_bidirectional_alibi(self):
    positions = np.arange(12, dtype=np.int32)
    slopes = np.array([0.5, 0.0625], np.float32)
    power = kerple_bias(positions, positions, slopes, np.ones(2, np.float32), kind="power")
    np.testing.assert_allclose(power, alibi_bias(positions, positions, slopes, causal=False),
                               rtol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_leading_dims_broadcast(self):
    q = np.array([[[0, 5]], [[2, 9]]], np.int32)  # [2, 1, 2]
    k = np.arange(4, dtype=np.int32)[None, None].repeat(3, axis=1)  # [1, 3, 4]
    bias = self.variant(functools.partial(kerple_bias, kind="power"))(q, k, _R1, _R2)
    chex.assert_shape(bias, (2, 3, 3, 2, 4))
    np.testing.assert_array_equal(bias[1, 2], kerple_bias(q[1, 0], k[0, 2], _R1, _R2,
                                                          kind="power"))

  @parameterized.named_parameters(("log", "log"), ("power", "power"))
  def test_gradients_finite_including_zero_distance(self, kind):
    positions = np.arange(6, dtype=np.int32)

    @jax.jit
    def loss(r1, r2):
      return jnp.sum(kerple_bias(positions, positions, r1, r2, kind=kind))

    grads = jax.grad(loss, argnums=(0, 1))(jnp.asarray(_R1), jnp.asarray(_R2))
    chex.assert_tree_all_finite(grads)
    # d/dr1 of -r1 k(d) is -k(d) summed: equal to the bias divided by r1.
    np.testing.assert_allclose(grads[0], np.sum(np.asarray(
        kerple_bias(positions, positions, _R1, _R2, kind=kind)), axis=(1, 2)) / _R1, rtol=1e-5)

  def test_rejects_bad_inputs(self):
    q = np.arange(3, dtype=np.int32)
    with self.assertRaisesRegex(ValueError, r"kind must be one of \['log', 'power'\], got 'exp'"):
      kerple_bias(q, q, _R1, _R2, kind="exp")
    with self.assertRaisesRegex(ValueError, r"r1 must be finite and > 0.*-0\.5"):
      kerple_bias(q, q, np.array([1.0, -0.5]), np.ones(2), kind="log")
    with self.assertRaisesRegex(ValueError, r"r2 must be finite and > 0.*0\.0"):
      kerple_bias(q, q, np.ones(2), np.array([1.0, 0.0]), kind="power")
    with self.assertRaisesRegex(ValueError, r"r2 must be finite and > 0.*nan"):
      kerple_bias(q, q, np.ones(1), np.array([np.nan]), kind="log")
    with self.assertRaisesRegex(ValueError, r"r2 of the power kernel must be <= 2.*2\.5"):
      kerple_bias(q, q, np.ones(2), np.array([1.0, 2.5]), kind="power")
    kerple_bias(q, q, np.ones(2), np.array([1.0, 2.5]), kind="log")  # log: r2 is unbounded.
    with self.assertRaisesRegex(ValueError, r"r1 must be 1-D \[H\], got shape \(\)"):
      kerple_bias(q, q, 1.0, np.ones(1), kind="log")
    with self.assertRaisesRegex(ValueError, r"same shape \[H\], got \(2,\) and \(3,\)"):
      kerple_bias(q, q, np.ones(2), np.ones(3), kind="log")
    with self.assertRaisesRegex(ValueError, "r1 must be a floating-point array"):
      kerple_bias(q, q, np.ones(2, np.int32), np.ones(2), kind="log")
    with self.assertRaisesRegex(ValueError, "q_positions must be an integer array"):
      kerple_bias(q.astype(np.float32), q, np.ones(2), np.ones(2), kind="log")
    with self.assertRaisesRegex(ValueError, r"broadcastable leading dims"):
      kerple_bias(np.zeros((2, 3), np.int32), np.zeros((3, 3), np.int32), np.ones(2),
                  np.ones(2), kind="log")

  def test_traced_parameters_skip_value_checks(self):
    q = np.arange(3, dtype=np.int32)
    bias = jax.jit(lambda r1, r2: kerple_bias(q, q, r1, r2, kind="log"))(
        jnp.ones(2), jnp.full((2,), 0.5))
    chex.assert_shape(bias, (2, 3, 3))


if __name__ == "__main__":
  absltest.main()
