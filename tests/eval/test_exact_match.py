"""answer_exact_match: a row is right only when every scored byte's argmax is its target;
answer_token_accuracy: the fraction of scored bytes whose argmax is the target."""

from absl.testing import absltest
from flax import nnx
import jax.numpy as jnp
import numpy as np

from pejax.eval import answer_exact_match
from pejax.eval import answer_token_accuracy


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


class TokenAccuracyTest(absltest.TestCase):

  def test_fraction_of_scored_bytes_and_agreement_with_exact_match(self):
    targets = jnp.array([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]])
    mask = jnp.array([[0, 1, 1, 1], [0, 1, 1, 1], [0, 1, 1, 1], [0, 0, 1, 0]], jnp.float32)
    # Row 0 wrong only where unscored; row 1 one of three wrong; row 2 all wrong; row 3 one
    # scored byte, right.
    model = _FixedLogits([[7, 2, 3, 4], [1, 2, 5, 4], [1, 5, 5, 5], [0, 0, 3, 0]])
    positions = jnp.zeros_like(targets)
    acc = answer_token_accuracy(model, targets, targets, positions, mask)
    self.assertEqual(acc.dtype, jnp.float32)
    np.testing.assert_allclose(acc, [1.0, 2 / 3, 0.0, 1.0], rtol=1e-6)
    # 1.0 exactly for the exact matches.
    exact = answer_exact_match(model, targets, targets, positions, mask)
    np.testing.assert_array_equal(np.asarray(acc) == 1.0, np.asarray(exact))

  def test_a_row_without_scored_bytes_is_nan_not_right_or_wrong(self):
    targets = jnp.array([[1, 2], [1, 2]])
    mask = jnp.array([[0, 0], [1, 1]], jnp.float32)
    acc = answer_token_accuracy(_FixedLogits([[1, 2], [1, 0]]), targets, targets,
                                jnp.zeros_like(targets), mask)
    self.assertTrue(np.isnan(acc[0]))
    self.assertAlmostEqual(float(acc[1]), 0.5)


if __name__ == "__main__":
  absltest.main()
