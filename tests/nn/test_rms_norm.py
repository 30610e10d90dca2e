"""Tests of pejax.nn.rms_norm: nnx.RMSNorm's numbers and autodiff's gradients, Gemma's offset."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.nn.rms_norm import RMSNorm, rms_norm


def _reference(x, scale, epsilon, offset):
  x32 = x.astype(jnp.float32)
  inv = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + epsilon)
  return x32 * inv * (scale + offset).reshape((1,) * (x.ndim - 1) + (-1,))


class RMSNormTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  def test_module_equals_nnx_rmsnorm_with_the_same_parameter(self):
    x = jax.random.normal(jax.random.key(0), (2, 5, 16))
    ours = RMSNorm(16, epsilon=1e-6, rngs=nnx.Rngs(0))
    theirs = nnx.RMSNorm(16, epsilon=1e-6, rngs=nnx.Rngs(0))
    # Same parameter path and init: a checkpoint of one restores into the other.
    self.assertEqual(jax.tree.structure(nnx.state(ours, nnx.Param)),
                     jax.tree.structure(nnx.state(theirs, nnx.Param)))
    chex.assert_trees_all_equal(nnx.state(ours, nnx.Param), nnx.state(theirs, nnx.Param))
    scale = jax.random.normal(jax.random.key(1), (16,))
    ours.scale[...] = scale
    theirs.scale[...] = scale
    chex.assert_trees_all_close(ours(x), theirs(x), atol=1e-6, rtol=1e-6)

  @parameterized.parameters(0.0, 1.0)
  def test_gradients_equal_autodiff(self, offset):
    x = jax.random.normal(jax.random.key(0), (3, 7, 16)) * 3.0
    scale = jax.random.normal(jax.random.key(1), (16,))
    weights = jax.random.normal(jax.random.key(2), (3, 7, 16))
    loss = lambda f: lambda x, s: jnp.sum(jnp.sin(f(x, s)) * weights)
    ours = jax.grad(loss(lambda x, s: rms_norm(x, s, scale_offset=offset)), argnums=(0, 1))
    ref = jax.grad(loss(lambda x, s: _reference(x, s, 1e-6, offset)), argnums=(0, 1))
    chex.assert_trees_all_close(jax.jit(ours)(x, scale), ref(x, scale), atol=2e-5, rtol=2e-5)

  def test_gemma_offset_starts_at_unit_scale_and_bfloat16_output(self):
    norm = RMSNorm(8, scale_offset=1.0, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(norm.scale[...], np.zeros(8))
    x = jax.random.normal(jax.random.key(0), (4, 8))
    out = norm(x)
    chex.assert_type(out, jnp.bfloat16)
    np.testing.assert_allclose(np.asarray(out, np.float32),
                               _reference(x, jnp.zeros(8), 1e-6, 1.0), atol=1e-2)

  def test_bad_inputs_are_named(self):
    with self.assertRaisesRegex(ValueError, "scale must have shape"):
      rms_norm(jnp.ones((2, 4)), jnp.ones((3,)))
    with self.assertRaisesRegex(ValueError, "epsilon"):
      rms_norm(jnp.ones((2, 4)), jnp.ones((4,)), epsilon=0.0)


if __name__ == "__main__":
  absltest.main()
