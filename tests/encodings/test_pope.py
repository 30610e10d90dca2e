"""Tests for pejax.encodings.pope: x-transformers goldens, the polar score, failures."""

from __future__ import annotations

import functools
import json
import math
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.pope import clamp_phase_bias
from pejax.encodings.pope import pope_inv_freq
from pejax.encodings.pope import pope_transform

_GOLDENS = json.loads(
    (pathlib.Path(__file__).parent / "xtransformers_goldens.json").read_text())["pope"]


def _blhd(values) -> np.ndarray:
  """x-transformers' [B, H, L, D] to pejax's [B, L, H, D]."""
  return np.asarray(values, np.float32).transpose(0, 2, 1, 3)


def _softplus(x):
  return np.logaddexp(0.0, x)


class PopeGoldenTest(chex.TestCase):
  """Pinned to x-transformers' PolarEmbedding + apply_polar_pos_emb."""

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(*[(name, name) for name in _GOLDENS])
  def test_matches_x_transformers(self, name):
    case = _GOLDENS[name]
    q, k = _blhd(case["q"]), _blhd(case["k"])
    positions = np.arange(q.shape[1], dtype=np.int32)
    inv_freq = pope_inv_freq(case["head_dim"])
    bias = clamp_phase_bias(np.asarray(case["learned_bias"], np.float32))
    transform = self.variant(pope_transform)
    q_out = transform(q, positions, inv_freq)
    k_out = transform(k, positions, inv_freq, bias)
    chex.assert_shape(q_out, q.shape[:-1] + (2 * case["head_dim"],))
    chex.assert_trees_all_close(q_out, _blhd(case["q_out"]), rtol=1e-6, atol=1e-6)
    chex.assert_trees_all_close(k_out, _blhd(case["k_out"]), rtol=1e-6, atol=1e-6)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q_out, k_out)
    chex.assert_trees_all_close(scores, np.asarray(case["scores"], np.float32), rtol=1e-5,
                                atol=1e-5)

  def test_inv_freq_golden(self):
    # D frequencies 10000 ** (-c / D), c = 0..D-1: for D = 4, (1, 0.1, 0.01, 0.001).
    np.testing.assert_allclose(pope_inv_freq(4), [1.0, 0.1, 0.01, 0.001], rtol=1e-6)

  def test_clamp_range(self):
    got = clamp_phase_bias(np.array([1.0, -1.0, -7.0, 0.0], np.float32))
    np.testing.assert_allclose(got, [0.0, -1.0, -2 * math.pi, 0.0], rtol=1e-7)


class PopePropertyTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    self.q = jax.random.normal(keys[0], (2, 5, 3, 6))
    self.k = jax.random.normal(keys[1], (2, 5, 3, 6))
    self.bias = clamp_phase_bias(jax.random.uniform(keys[2], (3, 6), minval=-7.0, maxval=1.0))
    self.inv_freq = pope_inv_freq(6, base=50.0)

  def _scores(self, q_pos, k_pos):
    q = pope_transform(self.q, q_pos, self.inv_freq)
    k = pope_transform(self.k, k_pos, self.inv_freq, self.bias)
    return jnp.einsum("bqhd,bkhd->bhqk", q, k)

  def test_dot_product_is_the_polar_score(self):
    q_pos = np.array([0, 3, 4, 10, 11], np.int32)
    k_pos = np.array([2, 2, 5, 9, 20], np.int32)
    got = self._scores(q_pos, k_pos)
    theta = np.asarray(self.inv_freq, np.float64)
    delta = np.asarray(self.bias, np.float64)  # [H, D]
    mu_q = _softplus(np.asarray(self.q, np.float64))
    mu_k = _softplus(np.asarray(self.k, np.float64))
    angle = ((k_pos[None, :] - q_pos[:, None])[None, :, :, None] * theta +
             delta[:, None, None, :])  # [H, Lq, Lk, D]: (s - t) theta_c + delta_c
    expected = np.einsum("bqhc,bkhc,hqkc->bhqk", mu_q, mu_k, np.cos(angle))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

  def test_scores_depend_only_on_distance(self):
    positions = jnp.arange(5, dtype=jnp.int32)
    np.testing.assert_allclose(self._scores(positions, positions),
                               self._scores(positions + 300, positions + 300), rtol=2e-4,
                               atol=2e-4)

  def test_magnitude_is_softplus_of_content(self):
    out = np.asarray(pope_transform(self.q, jnp.arange(5, dtype=jnp.int32) * 7, self.inv_freq,
                                    self.bias), np.float64)
    radius = np.hypot(out[..., :6], out[..., 6:])
    np.testing.assert_allclose(radius, _softplus(np.asarray(self.q, np.float64)), rtol=1e-6)

  def test_per_row_positions_and_dtype(self):
    x = self.q.astype(jnp.bfloat16)
    positions = jnp.stack([jnp.arange(5), jnp.arange(5) + 9]).astype(jnp.int32)
    out = pope_transform(x, positions, self.inv_freq)
    chex.assert_type(out, jnp.bfloat16)
    row1 = pope_transform(x[1:], positions[1:], self.inv_freq)
    np.testing.assert_array_equal(out[1:], row1)


class PopeFailureTest(parameterized.TestCase):

  def test_bad_inputs_name_the_argument(self):
    x = np.zeros((1, 4, 2, 6), np.float32)
    positions = np.arange(4, dtype=np.int32)
    inv_freq = pope_inv_freq(6)
    with self.assertRaisesRegex(ValueError, r"inv_freq must have shape \[D\] = \[6\]"):
      pope_transform(x, positions, inv_freq[:3])
    with self.assertRaisesRegex(ValueError, "inv_freq must be float32"):
      pope_transform(x, positions, inv_freq.astype(jnp.bfloat16))
    with self.assertRaisesRegex(ValueError, "phase_bias must have shape"):
      pope_transform(x, positions, inv_freq, np.zeros((3, 6), np.float32))
    with self.assertRaisesRegex(ValueError, "phase_bias must be a float"):
      pope_transform(x, positions, inv_freq, np.zeros((2, 6), np.int32))
    with self.assertRaisesRegex(ValueError, "positions must be an integer"):
      pope_transform(x, positions.astype(np.float32), inv_freq)
    with self.assertRaisesRegex(ValueError, "positions length"):
      pope_transform(x, positions[:3], inv_freq)
    with self.assertRaisesRegex(ValueError, "base must be greater than 1"):
      pope_inv_freq(6, base=0.5)
    with self.assertRaisesRegex(ValueError, "head_dim"):
      pope_inv_freq(0)


if __name__ == "__main__":
  absltest.main()
