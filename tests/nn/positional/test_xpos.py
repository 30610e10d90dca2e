"""Tests for the xPos PE (pejax.nn.positional.xpos): the rotate hook, causality, config."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.rope import RopeConfig, rope_inv_freq
from pejax.encodings.xpos import apply_xpos, xpos_zeta
from pejax.nn.decoder import Decoder
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.positional.registry import registry_entry
from pejax.nn.positional.xpos import XposConfig
from pejax.nn.positional.xpos import XposPE
import pytest

_TINY = dict(num_layers=2, d_model=32, num_heads=4, num_kv_heads=2, vocab_size=32)


class XposPETest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))
    keys = jax.random.split(jax.random.key(0), 2)
    self.q = jax.random.normal(keys[0], (2, 6, 4, 8))
    self.k = jax.random.normal(keys[1], (2, 6, 2, 8))

  def _scores(self, pe, q_positions, k_positions):
    q, k = pe.rotate(self.q, self.k, q_positions, k_positions)
    return jnp.einsum("bqhd,bkhd->bhqk", q, jnp.repeat(k, 2, axis=2))

  def test_defaults_are_the_papers(self):
    config = registry_entry("xpos").make_config()
    self.assertEqual((config.scale_base, config.gamma, config.base), (512.0, 0.4, 10000.0))
    self.assertTrue(XposPE.causal_only)
    self.assertTrue(XposPE.translation_invariant)

  @parameterized.named_parameters(("centered", True), ("raw", False))
  def test_scores_are_rope_scores_times_the_decay(self, centered):
    config = XposConfig(scale_base=4.0, centered=centered)
    pe = XposPE(config, DecoderConfig(pe=config, **_TINY), rngs=nnx.Rngs(0))
    positions = jnp.arange(6, dtype=jnp.int32)[None] + 40
    got = self._scores(pe, positions, positions)
    # Reference: the pure transform with center 0 (the center cancels).
    inv_freq, _ = rope_inv_freq(RopeConfig(8))
    q = apply_xpos(self.q, positions, inv_freq, is_key=False, layout="half", scale_base=4.0)
    k = apply_xpos(self.k, positions, inv_freq, is_key=True, layout="half", scale_base=4.0)
    expected = jnp.einsum("bqhd,bkhd->bhqk", q, jnp.repeat(k, 2, axis=2))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    # q = k = e_0 (pair 0, frequency 1) at distance 3: the RoPE score cos(3) times the decay
    # zeta_0 ** (3 / B).
    unit = jnp.zeros((1, 6, 4, 8)).at[..., 0].set(1.0)
    q1, k1 = pe.rotate(unit, unit[:, :, :2], jnp.zeros((1, 6), jnp.int32) + 3,
                       jnp.zeros((1, 6), jnp.int32))
    zeta0 = float(xpos_zeta(8)[0])
    np.testing.assert_allclose(jnp.einsum("bqhd,bkhd->bqk", q1[:, :, :1], k1[:, :, :1]),
                               np.full((1, 6, 6), zeta0 ** (3 / 4.0) * np.cos(3.0)), rtol=1e-5)

  def test_centered_scales_stay_finite_far_out(self):
    # Uncentered, a key at 60000 is scaled by (1.4 / 0.4) ** (60000 / 512) > 1e63: inf in
    # float32. Centered at the row's middle the scores are finite.
    pe = XposPE(XposConfig(), DecoderConfig(pe="xpos", **_TINY), rngs=nnx.Rngs(0))
    positions = jnp.arange(6, dtype=jnp.int32)[None] + 60000
    self.assertTrue(bool(jnp.all(jnp.isfinite(self._scores(pe, positions, positions)))))
    raw = XposPE(XposConfig(centered=False), DecoderConfig(pe="xpos", **_TINY),
                 rngs=nnx.Rngs(0))
    self.assertFalse(bool(jnp.all(jnp.isfinite(self._scores(raw, positions, positions)))))

  def test_failures_name_the_field(self):
    with self.assertRaisesRegex(ValueError, "pe='xpos' is causal only"):
      XposConfig(bidirectional=True)
    for kwargs, name in [(dict(gamma=0.0), "gamma"), (dict(scale_base=-1.0), "scale_base"),
                         (dict(layout="neox"), "layout"), (dict(base=1.0), "base"),
                         (dict(centered=1), "centered")]:
      with self.subTest(name=name):
        with self.assertRaisesRegex(ValueError, name):
          XposConfig(**kwargs)
    with self.assertRaisesRegex(ValueError, "head_dim must be even, got 9"):
      DecoderConfig(pe="xpos", vocab_size=32, d_model=36, num_heads=4)


if __name__ == "__main__":
  absltest.main()
