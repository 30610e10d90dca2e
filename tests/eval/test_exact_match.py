"""answer_exact_match: a row is right only when every scored byte's argmax is its target."""

from absl.testing import absltest
from flax import nnx
import jax.numpy as jnp
import numpy as np

from pejax.eval import answer_exact_match


class _FixedLogits(nnx.Module):
  """A stand-in model whose argmax at every position is ``predictions``."""

  def __init__(self, predictions):
    self.predictions = nnx.Variable(jnp.asarray(predictions))

  def __call__(self, inputs, *, positions, attention):
    del inputs, positions, attention
    return 10.0 * jnp.eye(8)[self.predictions[...]]


class ExactMatchTest(absltest.TestCase):

  def test_only_scored_bytes_count(self):
    targets = jnp.array([[1, 2, 3], [1, 2, 3], [1, 2, 3]])
    mask = jnp.array([[0, 1, 1], [0, 1, 1], [0, 1, 1]], jnp.float32)
    model = _FixedLogits([[7, 2, 3], [1, 2, 4], [1, 5, 3]])  # Row 0 wrong only where unscored.
    right = answer_exact_match(model, targets, targets, jnp.zeros_like(targets), mask)
    np.testing.assert_array_equal(right, [True, False, False])


if __name__ == "__main__":
  absltest.main()
