"""Tests for pejax/encodings/rope_mixed.py."""

from __future__ import annotations

from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.encodings import axial_rope as ar
from pejax.encodings import position_grids as pg
from pejax.encodings import rope_mixed as rm


class InitTest(parameterized.TestCase):

  def test_random_init_matches_paper_formula(self):
    # Official init_random_2d_freqs: mag = theta^(-4i / D), per head one angle t:
    # fx = [mag cos t, mag cos(pi/2 + t)], fy = [mag sin t, mag sin(pi/2 + t)].
    head_dim, heads, theta = 16, 4, 10.0
    freqs = np.asarray(rm.rope_mixed_init_freqs(jax.random.key(0), head_dim, heads, base=theta))
    self.assertEqual(freqs.shape, (2, heads, head_dim // 2))
    mag = theta ** (-np.arange(0, head_dim, 4) / head_dim)
    angles = []
    for h in range(heads):
      t = np.arctan2(freqs[1, h, 0], freqs[0, h, 0])
      angles.append(t)
      fx = np.concatenate([mag * np.cos(t), mag * np.cos(np.pi / 2 + t)])
      fy = np.concatenate([mag * np.sin(t), mag * np.sin(np.pi / 2 + t)])
      np.testing.assert_allclose(freqs[0, h], fx, atol=1e-6)
      np.testing.assert_allclose(freqs[1, h], fy, atol=1e-6)
    self.assertGreater(np.ptp(np.mod(angles, 2 * np.pi)), 0.1)  # heads get different angles

  @parameterized.named_parameters(
      ("random_2d", "random", 2), ("per_freq_2d", "random_per_frequency", 2),
      ("random_3d", "random", 3), ("per_freq_3d", "random_per_frequency", 3), ("axial", "axial", 2))
  @pytest.mark.slow
  def test_magnitudes_are_axial_frequencies(self, init, num_axes):
    freqs = np.asarray(rm.rope_mixed_init_freqs(jax.random.key(1), 12, 3, num_axes=num_axes,
                                                init=init))
    norms = np.sqrt(np.sum(freqs ** 2, axis=0))  # [H, P]
    mags = np.concatenate([np.asarray(f) for f in ar.axial_inv_freqs(12, num_axes=num_axes,
                                                                      base=10.0)])
    np.testing.assert_allclose(norms, np.broadcast_to(mags, norms.shape), rtol=1e-5)

  def test_per_frequency_directions_differ_within_a_head(self):
    head = rm.rope_mixed_init_freqs(jax.random.key(2), 16, 1, init="random_per_frequency")
    directions = np.asarray(head[:, 0, :4] / jnp.linalg.norm(head[:, 0, :4], axis=0, keepdims=True))
    self.assertGreater(np.abs(directions[:, 0] - directions[:, 1]).max(), 1e-3)
    shared = rm.rope_mixed_init_freqs(jax.random.key(2), 16, 1, init="random")
    directions = np.asarray(
        shared[:, 0, :4] / jnp.linalg.norm(shared[:, 0, :4], axis=0, keepdims=True))
    np.testing.assert_allclose(directions, np.broadcast_to(directions[:, :1], (2, 4)), atol=1e-6)

  def test_axial_init_is_axis_aligned(self):
    freqs = np.asarray(rm.rope_mixed_init_freqs(jax.random.key(0), 8, 2, init="axial",
                                                base=100.0))
    np.testing.assert_allclose(freqs[0], [[1.0, 0.1, 0, 0]] * 2, atol=1e-7)
    np.testing.assert_allclose(freqs[1], [[0, 0, 1.0, 0.1]] * 2, atol=1e-7)


class AnglesTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_angles_golden(self):
    freqs = jnp.array([[[1.0, 0.5]], [[2.0, -1.0]]])  # [A=2, H=1, P=2]
    angles = self.variant(rm.rope_mixed_angles)(jnp.array([[2, 3], [0, 1]]), freqs)
    chex.assert_shape(angles, (2, 1, 2))
    chex.assert_trees_all_close(angles[:, 0], jnp.array([[8.0, -2.0], [2.0, -1.0]]))

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "freqs must have shape"):
      rm.rope_mixed_angles(jnp.zeros((3, 2), jnp.int32), jnp.ones((2, 4)))
    with self.assertRaisesRegex(ValueError, r"positions must have shape \[..., N, 2\]"):
      rm.rope_mixed_angles(jnp.zeros((3, 3), jnp.int32), jnp.ones((2, 1, 4)))


class RopeMixedModuleTest(chex.TestCase):

  @parameterized.named_parameters(
      ("2d_half", 2, "half", None), ("2d_interleaved", 2, "interleaved", None),
      ("3d_half", 3, "half", None), ("2d_split", 2, "half", (4, 8)))
  @pytest.mark.slow
  def test_axial_init_reduces_to_axial_rope(self, num_axes, layout, split):
    head_dim, heads = 12, 3
    module = rm.RopeMixed(head_dim, heads, num_axes=num_axes, base=100.0, split=split,
                          init="axial", layout=layout, rngs=nnx.Rngs(0))
    pos = pg.grid_positions((3, 4) if num_axes == 2 else (2, 3, 2))
    x = jax.random.normal(jax.random.key(3), (2, pos.shape[0], heads, head_dim))
    expected = ar.apply_axial_rope(x, pos, base=100.0, split=split, layout=layout)
    chex.assert_trees_all_close(module(x, pos), expected, atol=1e-6)

  def test_scores_depend_only_on_offset_per_head(self):
    module = rm.RopeMixed(8, 2, rngs=nnx.Rngs(4))
    pos = pg.image_positions(5, 5)
    n = pos.shape[0]
    q = jnp.broadcast_to(jax.random.normal(jax.random.key(5), (2, 8)), (n, 2, 8))
    k = jnp.broadcast_to(jax.random.normal(jax.random.key(6), (2, 8)), (n, 2, 8))
    qr, kr = np.asarray(module(q, pos), np.float64), np.asarray(module(k, pos), np.float64)
    offsets = np.asarray(pos)[:, None, :] - np.asarray(pos)[None, :, :]
    for h in range(2):
      scores = qr[:, h] @ kr[:, h].T
      for dr, dc in [(0, 0), (1, 1), (-2, 3), (4, -4), (0, -1)]:
        sel = (offsets[..., 0] == dr) & (offsets[..., 1] == dc)
        np.testing.assert_allclose(scores[sel], scores[sel][0], atol=2e-5)

  def test_mixed_directions_are_not_axial(self):
    # With a random init a pure row shift and a pure column shift both move every pair
    # (no pair is driven by one axis only), unlike axial RoPE.
    module = rm.RopeMixed(8, 1, rngs=nnx.Rngs(7))
    angles_row = module.angles(jnp.array([[1, 0]]))
    angles_col = module.angles(jnp.array([[0, 1]]))
    self.assertTrue(bool(jnp.all(jnp.abs(angles_row) > 1e-4)))
    self.assertTrue(bool(jnp.all(jnp.abs(angles_col) > 1e-4)))

  def test_jit_and_gradients_reach_frequencies(self):
    module = rm.RopeMixed(8, 2, rngs=nnx.Rngs(8))
    pos = pg.image_positions(3, 3)
    x = jax.random.normal(jax.random.key(9), (9, 2, 8))
    y = jax.random.normal(jax.random.key(10), (9, 2, 8))

    @nnx.jit
    def loss_fn(m):
      q = m(x, pos)
      k = m(y, pos)
      return jnp.sum(jnp.einsum("nhd,mhd->hnm", q, k) ** 2)

    grads = nnx.grad(loss_fn)(module)
    g = grads.freqs[...]
    chex.assert_shape(g, (2, 2, 4))
    chex.assert_tree_all_finite(g)
    self.assertGreater(float(jnp.abs(g).max()), 1e-4)

  def test_dtype_follows_input(self):
    module = rm.RopeMixed(8, 2, rngs=nnx.Rngs(0))
    x = jnp.ones((4, 2, 8), jnp.bfloat16)
    chex.assert_type(module(x, pg.image_positions(2, 2)), jnp.bfloat16)

  def test_module_errors(self):
    module = rm.RopeMixed(8, 2, rngs=nnx.Rngs(0))
    with self.assertRaisesRegex(ValueError, r"x must have shape \[..., N, 2, 8\]"):
      module(jnp.ones((4, 3, 8)), pg.image_positions(2, 2))
    with self.assertRaisesRegex(ValueError, "positions"):
      module(jnp.ones((4, 2, 8)), pg.video_positions(1, 2, 2))
    with self.assertRaisesRegex(ValueError, "init must be one of"):
      rm.RopeMixed(8, 2, init="sincos", rngs=nnx.Rngs(0))
    with self.assertRaisesRegex(ValueError, "head_dim must be even"):
      rm.RopeMixed(7, 2, rngs=nnx.Rngs(0))
    with self.assertRaisesRegex(ValueError, "layout"):
      rm.RopeMixed(8, 2, layout="x", rngs=nnx.Rngs(0))
