"""Tests for pejax.encodings.sinusoidal."""

from __future__ import annotations

import functools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.sinusoidal import sinusoidal_embedding
from pejax.encodings.sinusoidal import sinusoidal_table


def _reference_table(positions: np.ndarray, dim: int, base: float) -> np.ndarray:
  """The paper's formula in float64 numpy."""
  w = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
  angles = positions.astype(np.float64)[:, None] * w[None, :]
  table = np.zeros((positions.shape[0], dim))
  table[:, 0::2] = np.sin(angles)
  table[:, 1::2] = np.cos(angles)
  return table


def _shift_matrix(shift: int, dim: int, base: float) -> np.ndarray:
  """Block-diagonal M_k with PE(i + k) = M_k PE(i); depends on k only."""
  w = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
  m = np.zeros((dim, dim))
  for j, wj in enumerate(w):
    c, s = np.cos(shift * wj), np.sin(shift * wj)
    # [sin(a + b), cos(a + b)] = [[cos b, sin b], [-sin b, cos b]] @ [sin a, cos a]
    m[2 * j:2 * j + 2, 2 * j:2 * j + 2] = [[c, s], [-s, c]]
  return m


class SinusoidalTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  @chex.variants(with_jit=True, without_jit=True)
  def test_position_zero_is_sin0_cos0(self):
    table = self.variant(functools.partial(sinusoidal_table, 4, 10))()
    np.testing.assert_array_equal(table[0], np.array([0.0, 1.0] * 5, np.float32))

  @chex.variants(with_jit=True, without_jit=True)
  def test_golden_row(self):
    table = self.variant(functools.partial(sinusoidal_table, 3, 4))()
    # w = [1, 0.01]: row 1 = [sin 1, cos 1, sin 0.01, cos 0.01]; row 2 doubles the angles.
    expected = np.array([[0.0, 1.0, 0.0, 1.0],
                         [0.8414709848, 0.5403023059, 0.0099998333, 0.9999500004],
                         [0.9092974268, -0.4161468365, 0.0199986667, 0.9998000067]])
    chex.assert_trees_all_close(table, expected.astype(np.float32), atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      ("dim8", 8, 10000.0),
      ("dim64", 64, 10000.0),
      ("dim6_base500", 6, 500.0),
  )
  def test_matches_float64_formula(self, dim, base):
    positions = np.array([0, 1, 2, 17, 100, 511], np.int32)
    embed = self.variant(sinusoidal_embedding, static_argnames=("dim", "base", "dtype"))
    out = embed(positions, dim=dim, base=base)
    chex.assert_shape(out, (6, dim))
    chex.assert_type(out, jnp.float32)
    np.testing.assert_allclose(out, _reference_table(positions, dim, base), atol=1e-4, rtol=0)

  @chex.variants(with_jit=True, without_jit=True)
  def test_embedding_gathers_table_rows_with_batch_dims(self):
    positions = np.array([[[3, 0, 7]], [[1, 1, 6]]], np.int32)  # [2, 1, 3]
    embed = self.variant(sinusoidal_embedding, static_argnames=("dim",))
    out = embed(positions, dim=16)
    chex.assert_shape(out, (2, 1, 3, 16))
    table = sinusoidal_table(8, 16)
    chex.assert_trees_all_close(out, np.asarray(table)[positions], atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("k1", 1), ("k5", 5), ("k37", 37), ("k300", 300))
  def test_shift_is_the_same_rotation_at_every_position(self, shift):
    dim, base = 16, 10000.0
    starts = np.array([0, 3, 64, 250, 700], np.int32)
    embed = self.variant(sinusoidal_embedding, static_argnames=("dim",))
    pe_i = np.asarray(embed(starts, dim=dim), np.float64)
    pe_shifted = np.asarray(embed(starts + shift, dim=dim), np.float64)
    m = _shift_matrix(shift, dim, base)  # one matrix for all starting positions
    np.testing.assert_allclose(pe_i @ m.T, pe_shifted, atol=2e-4, rtol=0)

  @chex.variants(with_jit=True, without_jit=True)
  def test_similarity_decays_with_distance(self):
    dim, num_queries = 64, 256
    table = np.asarray(self.variant(functools.partial(sinusoidal_table, 1280, dim))(),
                       np.float64)
    table /= np.linalg.norm(table, axis=-1, keepdims=True)
    starts = np.arange(num_queries)

    def mean_similarity(distances):
      return np.mean([np.sum(table[starts] * table[starts + d], axis=-1) for d in distances])

    bins = [range(1, 4), range(4, 16), range(16, 64), range(64, 256), range(256, 1024)]
    means = [mean_similarity(b) for b in bins]
    self.assertTrue(np.all(np.diff(means) < 0), msg=f"not decreasing: {means}")

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("bf16", jnp.bfloat16), ("f16", jnp.float16))
  def test_dtype_follows_and_angles_stay_float32(self, dtype):
    make = self.variant(functools.partial(sinusoidal_table, 2048, 16, dtype=dtype))
    out = make()
    chex.assert_type(out, dtype)
    # Angles are float32 whatever the output dtype: only the final rounding differs.
    np.testing.assert_array_equal(out, sinusoidal_table(2048, 16).astype(dtype))

  def test_rejects_bad_arguments(self):
    positions = jnp.arange(4, dtype=jnp.int32)
    with self.assertRaisesRegex(ValueError, "dim must be even, got 7"):
      sinusoidal_table(4, 7)
    with self.assertRaisesRegex(ValueError, "dim"):
      sinusoidal_embedding(positions, 0)
    with self.assertRaisesRegex(ValueError, "dim"):
      sinusoidal_embedding(positions, 1)
    with self.assertRaisesRegex(ValueError, "num_positions.*0"):
      sinusoidal_table(0, 8)
    with self.assertRaisesRegex(ValueError, "positions must be an integer array"):
      sinusoidal_embedding(positions.astype(jnp.float32), 8)
    with self.assertRaisesRegex(ValueError, "positions must be an integer array"):
      jax.jit(lambda p: sinusoidal_embedding(p, 8))(positions.astype(jnp.bfloat16))
    for base in (0.0, -10.0, float("inf"), float("nan"), 1.0, "big"):
      with self.assertRaisesRegex(ValueError, "base"):
        sinusoidal_table(4, 8, base=base)


if __name__ == "__main__":
  absltest.main()
