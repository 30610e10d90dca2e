"""Tests of pejax.nn.token_linear: nnx.Linear's numbers and parameters, flattened tokens."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import pytest

from pejax.nn.token_linear import TokenLinear


class TokenLinearTest(parameterized.TestCase):

  @parameterized.parameters(((5,),), ((3, 5),), ((2, 3, 5),), ((2, 1, 3, 5),))
  @pytest.mark.slow
  def test_matches_nnx_linear_value_and_gradients(self, shape):
    ours = TokenLinear(5, 7, use_bias=True, rngs=nnx.Rngs(0))
    theirs = nnx.Linear(5, 7, use_bias=True, rngs=nnx.Rngs(0))
    chex.assert_trees_all_equal(nnx.state(ours, nnx.Param), nnx.state(theirs, nnx.Param))
    x = jax.random.normal(jax.random.key(1), shape)

    def loss(model, x):
      return jnp.sum(jnp.sin(model(x)))

    chex.assert_trees_all_close(ours(x), theirs(x), atol=1e-6, rtol=1e-6)
    chex.assert_shape(ours(x), shape[:-1] + (7,))
    ours_grad = nnx.grad(loss, argnums=(0, 1))(ours, x)
    theirs_grad = nnx.grad(loss, argnums=(0, 1))(theirs, x)
    chex.assert_trees_all_close(nnx.state(ours_grad[0]), nnx.state(theirs_grad[0]),
                                atol=1e-5, rtol=1e-5)
    chex.assert_trees_all_close(ours_grad[1], theirs_grad[1], atol=1e-5, rtol=1e-5)

  def test_wrong_input_width_is_named(self):
    layer = TokenLinear(5, 7, use_bias=False, rngs=nnx.Rngs(0))
    with self.assertRaisesRegex(ValueError, r"input width 5.*\(2, 3, 4\)"):
      layer(jnp.zeros((2, 3, 4)))


if __name__ == "__main__":
  absltest.main()
