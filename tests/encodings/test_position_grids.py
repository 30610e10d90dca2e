"""Tests for pejax/encodings/position_grids.py."""

from __future__ import annotations

from absl.testing import parameterized
import chex
import jax.numpy as jnp
import numpy as np

from pejax.encodings import position_grids as pg


class GridPositionsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_image_golden(self):
    pos = self.variant(lambda: pg.image_positions(2, 3))()
    chex.assert_type(pos, jnp.int32)
    np.testing.assert_array_equal(pos, [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]])

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("image", (5, 7)), ("video", (3, 4, 2)), ("line", (6,)))
  def test_row_major(self, shape):
    pos = np.asarray(self.variant(lambda: pg.grid_positions(shape))())
    self.assertEqual(pos.shape, (int(np.prod(shape)), len(shape)))
    np.testing.assert_array_equal(pos, np.stack(np.unravel_index(np.arange(len(pos)), shape), -1))

  def test_video_golden(self):
    pos = pg.video_positions(2, 1, 2)
    np.testing.assert_array_equal(pos, [[0, 0, 0], [0, 0, 1], [1, 0, 0], [1, 0, 1]])

  def test_scale(self):
    pos = pg.image_positions(2, 2, scale=(0.5, 2.0))
    chex.assert_type(pos, jnp.float32)
    np.testing.assert_array_equal(pos, [[0, 0], [0, 2], [0.5, 0], [0.5, 2]])
    np.testing.assert_array_equal(pg.grid_positions((3,), scale=0.25), [[0], [0.25], [0.5]])

  def test_interpolation_scale_maps_into_train_range(self):
    scale = pg.interpolation_scale((4, 4), (8, 16))
    self.assertEqual(scale, (0.5, 0.25))
    pos = np.asarray(pg.grid_positions((8, 16), scale=scale))
    np.testing.assert_allclose(pos.max(0), [3.5, 3.75])
    np.testing.assert_array_equal(pos.min(0), [0, 0])


class ResizeGridTableTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_nearest_upsample_repeats_cells(self):
    table = jnp.arange(4 * 3, dtype=jnp.float32).reshape(4, 3)  # 2x2 grid, 3 features
    out = self.variant(lambda t: pg.resize_grid_table(t, (2, 2), (4, 4), method="nearest"))(table)
    chex.assert_shape(out, (16, 3))
    grid = np.asarray(out).reshape(4, 4, 3)
    expected = np.repeat(np.repeat(np.asarray(table).reshape(2, 2, 3), 2, 0), 2, 1)
    np.testing.assert_array_equal(grid, expected)

  @chex.variants(with_jit=True, without_jit=True)
  def test_bilinear_golden_1d(self):
    # Half-pixel centres: [0, 1] resized to 4 -> [0, 0.25, 0.75, 1] (edges clamp).
    table = jnp.array([[0.0], [1.0]])
    out = self.variant(lambda t: pg.resize_grid_table(t, (1, 2), (1, 4)))(table)
    chex.assert_trees_all_close(out[:, 0], jnp.array([0.0, 0.25, 0.75, 1.0]), atol=1e-6)

  def test_same_size_identity_and_batch(self):
    table = jnp.asarray(np.random.default_rng(0).normal(size=(2, 6, 4)), jnp.float32)
    out = pg.resize_grid_table(table, (2, 3), (2, 3))
    chex.assert_trees_all_close(out, table, atol=1e-6)

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "table must have prod"):
      pg.resize_grid_table(jnp.ones((5, 2)), (2, 2), (4, 4))
    with self.assertRaisesRegex(ValueError, "new_grid must have as many axes"):
      pg.resize_grid_table(jnp.ones((4, 2)), (2, 2), (4, 4, 1))


class ErrorsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("zero", (0, 3)), ("negative", (2, -1)), ("int", 4), ("empty", ()), ("float", (2.0, 2)))
  def test_bad_grid_shape(self, shape):
    with self.assertRaisesRegex(ValueError, "grid_shape"):
      pg.grid_positions(shape)

  def test_bad_scale(self):
    with self.assertRaisesRegex(ValueError, "scale"):
      pg.grid_positions((2, 2), scale=-1.0)
    with self.assertRaisesRegex(ValueError, "scale must have one entry per grid axis"):
      pg.grid_positions((2, 2), scale=(1.0,))

  def test_bad_sizes(self):
    with self.assertRaisesRegex(ValueError, "height"):
      pg.image_positions(0, 2)
    with self.assertRaisesRegex(ValueError, "frames"):
      pg.video_positions(0, 2, 2)

  def test_check_grid_positions(self):
    with self.assertRaisesRegex(ValueError, "positions must be integer .* or float32"):
      pg.check_grid_positions(jnp.zeros((3, 2), jnp.bfloat16))
    with self.assertRaisesRegex(ValueError, r"positions must have shape \[..., N, 2\]"):
      pg.check_grid_positions(jnp.zeros((3, 3), jnp.int32), num_axes=2)
    with self.assertRaisesRegex(ValueError, "rank >= 2"):
      pg.check_grid_positions(jnp.zeros((3,), jnp.int32))
    chex.assert_type(pg.check_grid_positions(np.zeros((2, 2), np.float64)), jnp.float32)
