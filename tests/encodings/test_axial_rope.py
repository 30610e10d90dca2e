"""Tests for pejax/encodings/axial_rope.py."""

from __future__ import annotations

from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.encodings import axial_rope as ar
from pejax.encodings import position_grids as pg
from pejax.encodings import rope

# 1-D RoPE (Su et al. 2021, arXiv 2104.09864) of x = [1..8] at position 3, head_dim 8, base 10000:
# "half" as Hugging Face's rotate_half, "interleaved" as the paper's (and Meta's) adjacent pairs.
_GOLDEN = {
    "half": [-1.6955925368997815, 0.1375517100168968, 2.7886816045815874, 3.97598203487184,
             -4.8088424749423595, 6.323059348691219, 7.086836734980443, 8.011963982593555],
    "interleaved": [-1.27223251272018, -1.8388649851410237, 1.6839286196854772,
                    4.70790658401419, 4.817777171652034, 6.147277700275833, 6.975968534880683,
                    8.020963969521036],
}


def _scores_by_offset(q_rot, k_rot, positions):
  """Scores q_n . k_m grouped by the position offset n - m: {offset: array of scores}."""
  scores = np.einsum("nd,md->nm", np.asarray(q_rot, np.float64), np.asarray(k_rot, np.float64))
  pos = np.asarray(positions)
  offsets = pos[:, None, :] - pos[None, :, :]
  groups = {}
  for n in range(len(pos)):
    for m in range(len(pos)):
      groups.setdefault(tuple(offsets[n, m]), []).append(scores[n, m])
  return {k: np.asarray(v) for k, v in groups.items()}


class AxialRopeTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("half", "half"), ("interleaved", "interleaved"))
  def test_one_axis_is_1d_rope_golden(self, layout):
    x = jnp.arange(1, 9, dtype=jnp.float32).reshape(1, 1, 8)
    out = self.variant(lambda x, p: ar.apply_axial_rope(x, p, layout=layout))(
        x, jnp.array([[3]]))
    chex.assert_trees_all_close(out[0, 0], np.array(_GOLDEN[layout], np.float32), atol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.slow
  def test_each_axis_is_1d_rope_on_its_sub_dim(self):
    # Interleaved layout keeps each axis' pairs contiguous: channels [0:4] see the row with a
    # 4-dim RoPE, channels [4:12] the column with an 8-dim RoPE.
    x = jax.random.normal(jax.random.key(0), (12, 2, 12))
    pos = pg.image_positions(3, 4)
    out = self.variant(lambda x, p: ar.apply_axial_rope(
        x, p, split=(4, 8), layout="interleaved", base=100.0))(x, pos)
    inv4 = rope.rope_inv_freq(rope.RopeConfig(4, base=100.0))[0]
    inv8 = rope.rope_inv_freq(rope.RopeConfig(8, base=100.0))[0]
    rows = rope.apply_rope(x[..., :4], pos[:, 0], inv4, layout="interleaved")
    cols = rope.apply_rope(x[..., 4:], pos[:, 1], inv8, layout="interleaved")
    chex.assert_trees_all_close(out, jnp.concatenate([rows, cols], -1), atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("half", "half"), ("interleaved", "interleaved"))
  def test_2d_scores_depend_only_on_row_and_column_offsets(self, layout):
    grid = (6, 7)
    pos = pg.grid_positions(grid)
    n = pos.shape[0]
    q = jnp.broadcast_to(jax.random.normal(jax.random.key(1), (16,)), (n, 1, 16))
    k = jnp.broadcast_to(jax.random.normal(jax.random.key(2), (16,)), (n, 1, 16))
    fn = self.variant(lambda x, p: ar.apply_axial_rope(x, p, base=100.0, layout=layout))
    groups = _scores_by_offset(fn(q, pos)[:, 0], fn(k, pos)[:, 0], pos)
    self.assertEqual(len(groups), (2 * 6 - 1) * (2 * 7 - 1))  # every (dr, dc) offset checked
    for offset, values in groups.items():
      np.testing.assert_allclose(values, values[0], atol=2e-5, err_msg=str(offset))
    # ... and the score really varies with each axis' offset (the encoding is not trivial).
    self.assertGreater(abs(groups[(1, 0)][0] - groups[(0, 0)][0]), 1e-3)
    self.assertGreater(abs(groups[(0, 1)][0] - groups[(0, 0)][0]), 1e-3)
    self.assertGreater(abs(groups[(1, 0)][0] - groups[(0, 1)][0]), 1e-3)

  def test_3d_scores_depend_only_on_offsets(self):
    pos = pg.video_positions(3, 3, 4)
    n = pos.shape[0]
    q = jnp.broadcast_to(jax.random.normal(jax.random.key(3), (12,)), (n, 1, 12))
    k = jnp.broadcast_to(jax.random.normal(jax.random.key(4), (12,)), (n, 1, 12))
    groups = _scores_by_offset(ar.apply_axial_rope(q, pos, base=50.0)[:, 0],
                               ar.apply_axial_rope(k, pos, base=50.0)[:, 0], pos)
    self.assertEqual(len(groups), 5 * 5 * 7)
    for offset, values in groups.items():
      np.testing.assert_allclose(values, values[0], atol=2e-5, err_msg=str(offset))

  @chex.variants(with_jit=True, without_jit=True)
  def test_norm_preserved_and_dtype(self):
    x = jax.random.normal(jax.random.key(5), (2, 9, 3, 8), jnp.bfloat16)
    out = self.variant(lambda x, p: ar.apply_axial_rope(x, p))(x, pg.image_positions(3, 3))
    chex.assert_type(out, jnp.bfloat16)
    chex.assert_trees_all_close(jnp.linalg.norm(out.astype(jnp.float32), axis=-1),
                                jnp.linalg.norm(x.astype(jnp.float32), axis=-1), rtol=2e-2)

  def test_partial_split_passes_rest_through(self):
    x = jax.random.normal(jax.random.key(6), (4, 1, 10))
    out = ar.apply_axial_rope(x, pg.image_positions(2, 2), split=(2, 4))
    np.testing.assert_array_equal(out[..., 6:], x[..., 6:])
    self.assertGreater(float(jnp.abs(out[..., :6] - x[..., :6]).max()), 1e-3)

  def test_default_split(self):
    self.assertEqual(ar.axial_split(64, 2), (32, 32))
    self.assertEqual(ar.axial_split(64, 3), (22, 22, 20))
    self.assertEqual(ar.axial_split(6, 3), (2, 2, 2))
    freqs = ar.axial_inv_freqs(8, num_axes=2, base=100.0)
    chex.assert_trees_all_close(freqs, (jnp.array([1.0, 0.1]), jnp.array([1.0, 0.1])), rtol=1e-6)

  def test_float_positions(self):
    x = jax.random.normal(jax.random.key(7), (6, 2, 8))
    pos = pg.image_positions(2, 3)
    chex.assert_trees_all_close(ar.apply_axial_rope(x, pos.astype(jnp.float32)),
                                ar.apply_axial_rope(x, pos), atol=1e-6)
    # Scaling positions by s equals scaling every frequency by s (position interpolation).
    half = ar.axial_rope_angles(pg.image_positions(2, 3, scale=0.5),
                                ar.axial_inv_freqs(8, num_axes=2))
    full = ar.axial_rope_angles(pos, ar.axial_inv_freqs(8, num_axes=2))
    chex.assert_trees_all_close(half, 0.5 * full, atol=1e-6)

  def test_batched_positions(self):
    x = jax.random.normal(jax.random.key(8), (2, 4, 1, 8))
    pos = jnp.stack([pg.image_positions(2, 2), pg.image_positions(2, 2) + 1])
    out = ar.apply_axial_rope(x, pos)
    for b in range(2):
      chex.assert_trees_all_close(out[b], ar.apply_axial_rope(x[b], pos[b]), atol=1e-6)


class ErrorsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("odd_part", (3, 4), "split must contain positive even ints"),
      ("too_long", (8, 8), "split must sum to at most head_dim"),
      ("wrong_count", (4,), "split must have one entry per axis"),
  )
  def test_bad_split(self, split, message):
    with self.assertRaisesRegex(ValueError, message):
      ar.apply_axial_rope(jnp.ones((4, 1, 8)), pg.image_positions(2, 2), split=split)

  def test_head_dim_too_small(self):
    with self.assertRaisesRegex(ValueError, "head_dim must give every axis"):
      ar.apply_axial_rope(jnp.ones((2, 1, 4)), pg.video_positions(1, 1, 2))
    with self.assertRaisesRegex(ValueError, "head_dim must be even"):
      ar.axial_split(7, 2)

  def test_bad_positions(self):
    with self.assertRaisesRegex(ValueError, "positions must be integer"):
      ar.apply_axial_rope(jnp.ones((4, 1, 8)), jnp.zeros((4, 2), jnp.bfloat16))
    with self.assertRaisesRegex(ValueError, "positions"):
      ar.apply_axial_rope(jnp.ones((4, 1, 8)), jnp.zeros((4,), jnp.int32))
    with self.assertRaisesRegex(ValueError, "inv_freqs must have one entry per position axis"):
      ar.axial_rope_angles(jnp.zeros((4, 2), jnp.int32), ar.axial_inv_freqs(8, num_axes=3))

  def test_bad_layout_and_length(self):
    with self.assertRaisesRegex(ValueError, "layout"):
      ar.apply_axial_rope(jnp.ones((4, 1, 8)), pg.image_positions(2, 2), layout="neox")
    with self.assertRaisesRegex(ValueError, "length"):
      ar.apply_axial_rope(jnp.ones((5, 1, 8)), pg.image_positions(2, 2))
