"""Tests for pejax.encodings.learned_position."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from pejax.encodings.learned_position import LearnedPositionEmbedding


@nnx.jit
def _jitted_lookup(module: LearnedPositionEmbedding, positions: jax.Array) -> jax.Array:
  return module(positions)


class LearnedPositionEmbeddingTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  def test_shapes_dtype_and_init_scale(self):
    module = LearnedPositionEmbedding(256, 64, rngs=nnx.Rngs(0), dtype=jnp.bfloat16)
    table = np.asarray(module.table[...])
    self.assertEqual(table.shape, (256, 64))
    self.assertEqual(table.dtype, np.float32)
    self.assertAlmostEqual(float(table.std()), 0.02, delta=0.002)
    self.assertAlmostEqual(float(table.mean()), 0.0, delta=0.002)
    out = module(np.zeros((2, 3, 5), np.int32))
    chex.assert_shape(out, (2, 3, 5, 64))
    chex.assert_type(out, jnp.bfloat16)

  @parameterized.named_parameters(("eager", False), ("nnx_jit", True))
  def test_gathers_table_rows(self, use_jit):
    module = LearnedPositionEmbedding(10, 4, rngs=nnx.Rngs(1))
    positions = np.array([[0, 9, 3], [3, 3, 1]], np.int32)
    out = _jitted_lookup(module, positions) if use_jit else module(positions)
    np.testing.assert_array_equal(out, np.asarray(module.table[...])[positions])

  @parameterized.named_parameters(
      ("past_end", [0, 1, 8], "got 8"),
      ("far_past_end", [100, 2], "got 100"),
      ("negative", [0, -1, 3], "got -1"),
  )
  def test_concrete_out_of_range_raises(self, positions, message):
    module = LearnedPositionEmbedding(8, 4, rngs=nnx.Rngs(0))
    with self.assertRaisesRegex(ValueError, rf"positions.*\[0, 8\).*num_positions=8.*{message}"):
      module(np.array(positions, np.int32))
    with self.assertRaisesRegex(ValueError, "positions.*got 8"):
      module(jnp.array([[8]], jnp.int32))  # concrete jax arrays are checked too

  def test_traced_out_of_range_is_nan_not_clamped(self):
    module = LearnedPositionEmbedding(8, 4, rngs=nnx.Rngs(0), dtype=jnp.bfloat16)
    out = np.asarray(_jitted_lookup(module, jnp.array([7, 8, 1000, -1, 0], jnp.int32)),
                     np.float32)
    table = np.asarray(module.table[...].astype(jnp.bfloat16), np.float32)
    np.testing.assert_array_equal(out[0], table[7])
    np.testing.assert_array_equal(out[4], table[0])
    self.assertTrue(np.all(np.isnan(out[1:4])))  # not table[7] (clamp) nor table[-1] (wrap)

  def test_nan_poisons_the_loss_under_jit(self):
    module = LearnedPositionEmbedding(4, 2, rngs=nnx.Rngs(0))

    @nnx.jit
    def loss(m, positions):
      return jnp.mean(m(positions) ** 2)

    self.assertTrue(np.isfinite(loss(module, jnp.arange(4, dtype=jnp.int32))))
    self.assertTrue(np.isnan(loss(module, jnp.arange(5, dtype=jnp.int32))))

  def test_gradient_step_updates_only_used_rows(self):
    module = LearnedPositionEmbedding(6, 3, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(module, optax.sgd(0.5), wrt=nnx.Param)
    before = np.array(module.table[...])
    positions = jnp.array([[1, 4]], jnp.int32)

    @nnx.jit
    def train_step(m, opt, positions):
      grads = nnx.grad(lambda m: jnp.sum(m(positions)))(m)
      opt.update(m, grads)
      return grads

    grads = train_step(module, optimizer, positions)
    expected_grad = np.zeros((6, 3), np.float32)
    expected_grad[[1, 4]] = 1.0
    np.testing.assert_array_equal(grads.table[...], expected_grad)
    np.testing.assert_allclose(np.asarray(module.table[...]), before - 0.5 * expected_grad,
                               rtol=1e-6)

  def test_rejects_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "num_positions.*got 0"):
      LearnedPositionEmbedding(0, 4, rngs=nnx.Rngs(0))
    with self.assertRaisesRegex(ValueError, "features.*got -2"):
      LearnedPositionEmbedding(4, -2, rngs=nnx.Rngs(0))
    with self.assertRaisesRegex(ValueError, "param_dtype"):
      LearnedPositionEmbedding(4, 2, rngs=nnx.Rngs(0), param_dtype=jnp.int32)
    module = LearnedPositionEmbedding(4, 2, rngs=nnx.Rngs(0))
    with self.assertRaisesRegex(ValueError, "positions must be an integer array"):
      module(np.array([0.0, 1.0]))
    with self.assertRaisesRegex(ValueError, "positions must be an integer array"):
      _jitted_lookup(module, jnp.array([0.0, 1.0]))


if __name__ == "__main__":
  absltest.main()
