"""Tests for pejax.encodings.t5_bias."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from pejax.encodings.t5_bias import T5RelativeBias
from pejax.encodings.t5_buckets import t5_relative_position_bucket


@nnx.jit
def _jitted_bias(module: T5RelativeBias, q: jax.Array, k: jax.Array) -> jax.Array:
  return module(q, k)


class T5RelativeBiasTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  def test_shapes_and_dtype(self):
    module = T5RelativeBias(3, num_buckets=16, rngs=nnx.Rngs(0), dtype=jnp.bfloat16)
    self.assertEqual(module.table[...].shape, (16, 3))
    bias = module(np.zeros((2, 4), np.int32), np.zeros((2, 6), np.int32))
    chex.assert_shape(bias, (2, 3, 4, 6))
    chex.assert_type(bias, jnp.bfloat16)
    # Unbatched queries broadcast against batched keys.
    chex.assert_shape(module(np.arange(4, dtype=np.int32), np.zeros((5, 6), np.int32)),
                      (5, 3, 4, 6))

  @parameterized.named_parameters(
      ("causal_eager", False, False), ("bidirectional_eager", True, False),
      ("causal_nnx_jit", False, True), ("bidirectional_nnx_jit", True, True))
  def test_entries_are_table_rows_of_bucket_k_minus_q(self, bidirectional, use_jit):
    module = T5RelativeBias(2, num_buckets=8, max_distance=20, bidirectional=bidirectional,
                            rngs=nnx.Rngs(1))
    q = np.array([0, 5, 30], np.int32)
    k = np.array([0, 1, 3, 4, 9, 60], np.int32)
    bias = np.asarray(_jitted_bias(module, q, k) if use_jit else module(q, k))
    table = np.asarray(module.table[...])
    buckets = np.asarray(t5_relative_position_bucket(
        k[None, :] - q[:, None], bidirectional=bidirectional, num_buckets=8, max_distance=20))
    for i in range(len(q)):
      for j in range(len(k)):
        np.testing.assert_array_equal(bias[:, i, j], table[buckets[i, j]])

  @parameterized.named_parameters(("causal", False), ("bidirectional", True))
  def test_depends_only_on_k_minus_q(self, bidirectional):
    module = T5RelativeBias(4, bidirectional=bidirectional, rngs=nnx.Rngs(2))
    rng = np.random.default_rng(0)
    q = rng.integers(0, 300, size=(2, 7)).astype(np.int32)
    k = rng.integers(0, 300, size=(2, 9)).astype(np.int32)
    base = module(q, k)
    for shift in (1, 123, 100_000):
      chex.assert_trees_all_equal(module(q + shift, k + shift), base)

  def test_unsigned_positions_do_not_wrap(self):
    module = T5RelativeBias(2, bidirectional=True, rngs=nnx.Rngs(6))
    q, k = np.array([3, 7], np.uint32), np.array([0, 5, 9], np.uint32)
    chex.assert_trees_all_equal(module(q, k), module(q.astype(np.int32), k.astype(np.int32)))

  def test_causal_future_keys_use_bucket_zero(self):
    module = T5RelativeBias(3, bidirectional=False, rngs=nnx.Rngs(3))
    positions = np.arange(10, dtype=np.int32)
    bias = np.asarray(module(positions, positions))  # [H, L, L]
    table = np.asarray(module.table[...])
    upper = np.triu(np.ones((10, 10), bool))  # k >= q
    np.testing.assert_array_equal(bias[:, upper], np.broadcast_to(table[0][:, None],
                                                                  (3, upper.sum())))
    # Past keys at distance 1 use bucket 1, not bucket 0.
    np.testing.assert_array_equal(bias[:, 5, 4], table[1])

  def test_bidirectional_separates_directions_and_saturates(self):
    module = T5RelativeBias(2, bidirectional=True, rngs=nnx.Rngs(4))
    table = np.asarray(module.table[...])
    q = np.array([1000], np.int32)
    k = np.array([999, 1001, 1000 - 500, 1000 - 5000, 1000 + 500, 1000 + 5000], np.int32)
    bias = np.asarray(module(q, k))[:, 0, :]
    np.testing.assert_array_equal(bias[:, 0], table[1])    # key one step before
    np.testing.assert_array_equal(bias[:, 1], table[17])   # key one step after
    np.testing.assert_array_equal(bias[:, 2], table[15])   # far past saturates ...
    np.testing.assert_array_equal(bias[:, 3], table[15])   # ... in one bucket
    np.testing.assert_array_equal(bias[:, 4], table[31])
    np.testing.assert_array_equal(bias[:, 5], table[31])

  def test_gradient_step_updates_used_buckets(self):
    module = T5RelativeBias(2, num_buckets=8, max_distance=16, rngs=nnx.Rngs(5))
    optimizer = nnx.Optimizer(module, optax.sgd(0.1), wrt=nnx.Param)
    before = np.array(module.table[...])
    positions = jnp.arange(3, dtype=jnp.int32)  # causal distances 0, 1, 2 -> buckets 0, 1, 2

    @nnx.jit
    def train_step(m, opt):
      grads = nnx.grad(lambda m: jnp.sum(m(positions, positions)))(m)
      opt.update(m, grads)
      return grads

    grads = np.asarray(train_step(module, optimizer).table[...])
    # Bucket 0 holds the diagonal (3) and the future keys (3) per head; distance 1 twice, 2 once.
    expected = np.zeros((8, 2), np.float32)
    expected[0], expected[1], expected[2] = 6.0, 2.0, 1.0
    np.testing.assert_array_equal(grads, expected)
    np.testing.assert_allclose(np.asarray(module.table[...]), before - 0.1 * expected, rtol=1e-6)

  def test_rejects_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "num_heads.*got 0"):
      T5RelativeBias(0, rngs=nnx.Rngs(0))
    with self.assertRaisesRegex(ValueError, "num_buckets must be even"):
      T5RelativeBias(2, num_buckets=7, bidirectional=True, rngs=nnx.Rngs(0))
    with self.assertRaisesRegex(ValueError, "max_distance"):
      T5RelativeBias(2, num_buckets=32, max_distance=10, rngs=nnx.Rngs(0))
    module = T5RelativeBias(2, rngs=nnx.Rngs(0))
    q = np.arange(3, dtype=np.int32)
    with self.assertRaisesRegex(ValueError, "q_positions must be an integer array"):
      module(q.astype(np.float32), q)
    with self.assertRaisesRegex(ValueError, "k_positions must be an integer array"):
      _jitted_bias(module, q, q.astype(np.float32))
    with self.assertRaisesRegex(ValueError, "k_positions"):
      module(q, np.int32(1))
    with self.assertRaisesRegex(ValueError, "broadcastable leading dims"):
      module(np.zeros((2, 3), np.int32), np.zeros((4, 3), np.int32))


if __name__ == "__main__":
  absltest.main()
