"""Tests for pejax/encodings/sinusoidal_2d.py."""

from __future__ import annotations

from absl.testing import parameterized
import chex
import jax.numpy as jnp
import numpy as np

from pejax.encodings import position_grids as pg
from pejax.encodings import sinusoidal
from pejax.encodings import sinusoidal_2d as s2


class Sinusoidal2DTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_golden(self):
    # (row, col) = (1, 2), D = 8: each half is the 4-dim sinusoid, wave numbers 1 and 0.01.
    out = self.variant(lambda p: s2.sinusoidal_2d_embedding(p, 8))(jnp.array([[1, 2]]))
    expected = [np.sin(1), np.cos(1), np.sin(0.01), np.cos(0.01),
                np.sin(2), np.cos(2), np.sin(0.02), np.cos(0.02)]
    chex.assert_trees_all_close(out[0], np.array(expected, np.float32), atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("square", 4, 4, 16), ("wide", 3, 7, 32), ("tall", 6, 2, 8))
  def test_halves_reproduce_1d_tables(self, height, width, dim):
    table = np.asarray(self.variant(lambda: s2.sinusoidal_2d_table(height, width, dim))())
    chex.assert_shape(table, (height * width, dim))
    rows = np.asarray(sinusoidal.sinusoidal_table(height, dim // 2))
    cols = np.asarray(sinusoidal.sinusoidal_table(width, dim // 2))
    grid = table.reshape(height, width, dim)
    np.testing.assert_array_equal(grid[..., :dim // 2],
                                  np.broadcast_to(rows[:, None, :], (height, width, dim // 2)))
    np.testing.assert_array_equal(grid[..., dim // 2:],
                                  np.broadcast_to(cols[None, :, :], (height, width, dim // 2)))

  @chex.variants(with_jit=True, without_jit=True)
  def test_3d_blocks(self):
    pos = pg.video_positions(2, 3, 4)
    out = np.asarray(self.variant(lambda p: s2.sinusoidal_nd_embedding(p, 24))(pos))
    for a in range(3):
      np.testing.assert_array_equal(
          out[:, 8 * a:8 * (a + 1)], sinusoidal.sinusoidal_embedding(pos[:, a], 8))

  def test_dot_product_depends_only_on_offset(self):
    pos = pg.image_positions(6, 6)
    pe = np.asarray(s2.sinusoidal_2d_embedding(pos, 32), np.float64)
    gram = pe @ pe.T
    offsets = np.asarray(pos)[:, None, :] - np.asarray(pos)[None, :, :]
    for dr, dc in [(0, 0), (1, 0), (0, 3), (-2, 1), (4, -5), (5, 5)]:
      sel = (offsets[..., 0] == dr) & (offsets[..., 1] == dc)
      values = gram[sel]
      self.assertGreater(values.size, 0)
      np.testing.assert_allclose(values, values[0], atol=1e-5)

  def test_float_positions_match_integer_path(self):
    pos = pg.image_positions(3, 5)
    exact = s2.sinusoidal_2d_embedding(pos, 16)
    real = s2.sinusoidal_2d_embedding(pos.astype(jnp.float32), 16)
    chex.assert_trees_all_close(real, exact, atol=1e-6)
    half = s2.sinusoidal_2d_embedding(pg.image_positions(2, 2, scale=0.5), 4)
    chex.assert_trees_all_close(
        half[3], np.array([np.sin(.5), np.cos(.5), np.sin(.5), np.cos(.5)], np.float32),
        atol=1e-6)

  def test_output_dtype_and_batch(self):
    pos = jnp.broadcast_to(pg.image_positions(2, 2), (3, 4, 2))
    out = s2.sinusoidal_2d_embedding(pos, 8, dtype=jnp.bfloat16)
    chex.assert_type(out, jnp.bfloat16)
    chex.assert_shape(out, (3, 4, 8))


class ErrorsTest(parameterized.TestCase):

  @parameterized.named_parameters(("not_multiple_of_4", 6), ("zero", 0), ("odd", 9))
  def test_bad_dim(self, dim):
    with self.assertRaisesRegex(ValueError, "dim"):
      s2.sinusoidal_2d_embedding(pg.image_positions(2, 2), dim)

  def test_bad_positions(self):
    with self.assertRaisesRegex(ValueError, r"positions must have shape \[..., N, 2\]"):
      s2.sinusoidal_2d_embedding(jnp.zeros((4, 3), jnp.int32), 8)
    with self.assertRaisesRegex(ValueError, "positions"):
      s2.sinusoidal_2d_embedding(jnp.zeros((4,), jnp.int32), 8)
    with self.assertRaisesRegex(ValueError, "positions must be integer"):
      s2.sinusoidal_2d_embedding(jnp.zeros((4, 2), jnp.float16), 8)
    with self.assertRaisesRegex(ValueError, "multiple of 2 \\* num_axes = 6"):
      s2.sinusoidal_nd_embedding(jnp.zeros((4, 3), jnp.int32), 8)

  def test_bad_base(self):
    with self.assertRaisesRegex(ValueError, "base"):
      s2.sinusoidal_2d_embedding(pg.image_positions(2, 2), 8, base=1.0)
