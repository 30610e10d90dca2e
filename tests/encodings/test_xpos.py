"""Tests for pejax.encodings.xpos: x-transformers goldens, the decay property, failures."""

from __future__ import annotations

import functools
import json
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.rope import RopeConfig
from pejax.encodings.rope import apply_rope
from pejax.encodings.rope import rope_inv_freq
from pejax.encodings.xpos import apply_xpos
from pejax.encodings.xpos import xpos_scale
from pejax.encodings.xpos import xpos_zeta

_GOLDENS = json.loads(
    (pathlib.Path(__file__).parent / "xtransformers_goldens.json").read_text())["xpos"]


def _blhd(values) -> np.ndarray:
  """x-transformers' [B, H, L, D] to pejax's [B, L, H, D]."""
  return np.asarray(values, np.float32).transpose(0, 2, 1, 3)


def _inv_freq(head_dim, rotary_dim=None):
  return rope_inv_freq(RopeConfig(head_dim, rotary_dim=rotary_dim))[0]


@functools.partial(jax.jit, static_argnames=("scale_base", "layout"))
def _xpos_scores(q, k, q_pos, k_pos, inv_freq, center, *, scale_base, layout):
  """xPos query-key scores, jitted: one program a shape (issue 44; eagerly ~40 programs)."""
  apply = functools.partial(apply_xpos, layout=layout, scale_base=scale_base, center=center)
  q = apply(q, q_pos, inv_freq, is_key=False)
  k = apply(k, k_pos, inv_freq, is_key=True)
  return jnp.einsum("bqhd,bkhd->bhqk", q, k)


class XposGoldenTest(chex.TestCase):
  """Pinned to x-transformers' RotaryEmbedding(use_xpos=True) + apply_rotary_pos_emb."""

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(*[(name, name) for name in _GOLDENS])
  def test_matches_x_transformers(self, name):
    case = _GOLDENS[name]
    q, k = _blhd(case["q"]), _blhd(case["k"])
    positions = np.arange(q.shape[1], dtype=np.int32)
    inv_freq = _inv_freq(case["head_dim"], case["rotary_dim"])
    apply = functools.partial(apply_xpos, layout="interleaved", scale_base=case["scale_base"],
                              center=case["center"])
    q_out = self.variant(functools.partial(apply, is_key=False))(q, positions, inv_freq)
    k_out = self.variant(functools.partial(apply, is_key=True))(k, positions, inv_freq)
    chex.assert_trees_all_close(q_out, _blhd(case["q_out"]), rtol=1e-6, atol=1e-6)
    chex.assert_trees_all_close(k_out, _blhd(case["k_out"]), rtol=1e-6, atol=1e-6)
    scale = xpos_scale(positions, rotary_dim=case["rotary_dim"], scale_base=case["scale_base"],
                       center=case["center"])
    chex.assert_trees_all_close(scale, np.asarray(case["scale"], np.float32), rtol=1e-6)

  def test_zeta_golden(self):
    # (2i + 0.4 R) / (1.4 R) for R = 8: (3.2, 5.2, 7.2, 9.2) / 11.2.
    np.testing.assert_allclose(xpos_zeta(8), np.array([3.2, 5.2, 7.2, 9.2]) / 11.2, rtol=1e-7)


class XposPropertyTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))
    key_q, key_k = jax.random.split(jax.random.PRNGKey(0))
    self.q = jax.random.normal(key_q, (2, 6, 3, 16))
    self.k = jax.random.normal(key_k, (2, 6, 3, 16))
    self.inv_freq = _inv_freq(16)

  def _scores(self, q_pos, k_pos, *, center=0, scale_base=8.0, layout="half"):
    return _xpos_scores(self.q, self.k, q_pos, k_pos, self.inv_freq, center,
                        scale_base=scale_base, layout=layout)

  def test_score_is_rope_score_times_zeta_power_of_distance(self):
    positions = jnp.arange(6, dtype=jnp.int32) * 3
    scale_base = 8.0
    got = self._scores(positions, positions, scale_base=scale_base)
    q = np.asarray(apply_rope(self.q, positions, self.inv_freq, layout="half"), np.float64)
    k = np.asarray(apply_rope(self.k, positions, self.inv_freq, layout="half"), np.float64)
    zeta = np.asarray(xpos_zeta(16), np.float64)
    dist = np.asarray(positions)[:, None] - np.asarray(positions)[None, :]  # n - m
    factor = zeta[None, None, :] ** (dist[:, :, None] / scale_base)  # [Lq, Lk, 8]
    # Pair i of the half layout is channels (i, i + 8).
    pair_scores = (np.einsum("bqhi,bkhi->bhqki", q[..., :8], k[..., :8]) +
                   np.einsum("bqhi,bkhi->bhqki", q[..., 8:], k[..., 8:]))
    expected = np.sum(pair_scores * factor[None, None], axis=-1)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)

  @parameterized.named_parameters(("half", "half"), ("interleaved", "interleaved"))
  def test_scores_depend_only_on_distance(self, layout):
    positions = jnp.arange(6, dtype=jnp.int32)
    base = self._scores(positions, positions, layout=layout)
    shifted = self._scores(positions + 37, positions + 37, layout=layout)
    np.testing.assert_allclose(base, shifted, rtol=1e-4, atol=1e-4)

  def test_center_cancels_in_scores(self):
    positions = jnp.arange(6, dtype=jnp.int32) + 100
    np.testing.assert_allclose(self._scores(positions, positions, center=0),
                               self._scores(positions, positions, center=103), rtol=1e-5,
                               atol=1e-5)

  def test_center_per_row(self):
    positions = jnp.stack([jnp.arange(6), jnp.arange(6) + 50]).astype(jnp.int32)
    center = jnp.array([[3], [53]], jnp.int32)
    np.testing.assert_allclose(self._scores(positions, positions, center=center),
                               self._scores(positions, positions), rtol=1e-5, atol=1e-5)

  def test_decays_with_distance(self):
    # Same content at every position: without xPos (RoPE) the score of pair 0 alone would only
    # rotate; with xPos its magnitude shrinks by zeta_0 ** (1 / B) per step.
    q = jnp.zeros((1, 5, 1, 8)).at[..., 0].set(1.0)
    positions = jnp.arange(5, dtype=jnp.int32)
    zero = jnp.zeros((4,), jnp.float32)  # No rotation: isolates the scale.
    q_out = apply_xpos(q, positions, zero, is_key=False, layout="half", scale_base=2.0)
    k_out = apply_xpos(q, jnp.zeros(5, jnp.int32), zero, is_key=True, layout="half",
                       scale_base=2.0)
    scores = jnp.einsum("bqhd,bkhd->bqk", q_out, k_out)[0, :, 0]
    zeta0 = 0.4 / 1.4
    np.testing.assert_allclose(scores, zeta0 ** (np.arange(5) / 2.0), rtol=1e-6)

  def test_unrotated_channels_pass_through_and_dtype_follows(self):
    x = jax.random.normal(jax.random.PRNGKey(3), (1, 4, 2, 12)).astype(jnp.bfloat16)
    out = apply_xpos(x, jnp.arange(4, dtype=jnp.int32), _inv_freq(12, 8), is_key=True,
                     layout="half")
    chex.assert_type(out, jnp.bfloat16)
    chex.assert_shape(out, x.shape)
    np.testing.assert_array_equal(out[..., 8:], x[..., 8:])
    self.assertFalse(np.allclose(np.asarray(out[..., :8], np.float32),
                                 np.asarray(x[..., :8], np.float32)))

  def test_jit_does_not_retrace_for_new_positions(self):
    def rotate(x, positions, inv_freq):
      return apply_xpos(x, positions, inv_freq, is_key=False, layout="half")

    fn = jax.jit(chex.assert_max_traces(rotate, n=1))
    for offset in range(3):
      fn(self.q, jnp.arange(6, dtype=jnp.int32) + offset, self.inv_freq)


class XposFailureTest(parameterized.TestCase):

  def test_bad_hyper_parameters_name_the_argument(self):
    positions = np.arange(4, dtype=np.int32)
    for kwargs, name in [(dict(rotary_dim=7), "rotary_dim"), (dict(rotary_dim=0), "rotary_dim"),
                         (dict(rotary_dim=8, gamma=0.0), "gamma"),
                         (dict(rotary_dim=8, gamma=-1.0), "gamma"),
                         (dict(rotary_dim=8, scale_base=0.0), "scale_base"),
                         (dict(rotary_dim=8, scale_base=float("inf")), "scale_base"),
                         (dict(rotary_dim=8, center=1.5), "center")]:
      with self.subTest(name=name, kwargs=kwargs):
        with self.assertRaisesRegex(ValueError, name):
          xpos_scale(positions, **kwargs)

  def test_bad_inputs(self):
    x = np.zeros((1, 4, 2, 8), np.float32)
    inv_freq = _inv_freq(8)
    positions = np.arange(4, dtype=np.int32)
    with self.assertRaisesRegex(ValueError, "positions must be an integer"):
      apply_xpos(x, positions.astype(np.float32), inv_freq, is_key=False, layout="half")
    with self.assertRaisesRegex(ValueError, "layout"):
      apply_xpos(x, positions, inv_freq, is_key=False, layout="neox")
    with self.assertRaisesRegex(ValueError, "is_key"):
      apply_xpos(x, positions, inv_freq, is_key="yes", layout="half")
    with self.assertRaisesRegex(ValueError, "x must have shape"):
      apply_xpos(x[0, 0], positions, inv_freq, is_key=False, layout="half")


if __name__ == "__main__":
  absltest.main()
