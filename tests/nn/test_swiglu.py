"""Tests of pejax.nn.swiglu: the custom gradient equals autodiff of ``silu(a) * b``."""

from __future__ import annotations

from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp

from pejax.nn.swiglu import swiglu


class SwigluTest(absltest.TestCase):

  def test_values_and_gradients_equal_autodiff(self):
    a = jax.random.normal(jax.random.key(0), (3, 5, 12)) * 4.0
    b = jax.random.normal(jax.random.key(1), (3, 5, 12))
    w = jax.random.normal(jax.random.key(2), (3, 5, 12))
    ref = lambda a, b: jax.nn.silu(a) * b
    chex.assert_trees_all_close(swiglu(a, b), ref(a, b), atol=1e-6)
    grad = lambda f: jax.grad(lambda a, b: jnp.sum(jnp.cos(f(a, b)) * w), argnums=(0, 1))
    chex.assert_trees_all_close(jax.jit(grad(swiglu))(a, b), grad(ref)(a, b), atol=1e-5,
                                rtol=1e-5)

  def test_bfloat16_gradients_keep_the_dtype(self):
    a, b = (jnp.ones((2, 4), jnp.bfloat16),) * 2
    da, db = jax.grad(lambda a, b: jnp.sum(swiglu(a, b).astype(jnp.float32)), argnums=(0, 1))(a, b)
    chex.assert_type((da, db), jnp.bfloat16)


if __name__ == "__main__":
  absltest.main()
