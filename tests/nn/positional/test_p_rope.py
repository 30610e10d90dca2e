"""Tests for the p-RoPE PE (pejax.nn.positional.p_rope): the rotate hook and config."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import numpy as np

from pejax.encodings.p_rope import p_rope_inv_freq
from pejax.encodings.rope import apply_rope
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.positional.p_rope import PRopeConfig
from pejax.nn.positional.p_rope import PRopePE
from pejax.nn.positional.registry import registry_entry
from pejax.nn.positional.rope import RotaryConfig
from pejax.nn.positional.rope import RotaryPE

_TINY = dict(num_layers=2, d_model=64, num_heads=4, num_kv_heads=2, vocab_size=32)  # D = 16.


class PRopePETest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))
    keys = jax.random.split(jax.random.key(0), 2)
    self.q = jax.random.normal(keys[0], (2, 5, 4, 16))
    self.k = jax.random.normal(keys[1], (2, 5, 2, 16))
    self.positions = np.array([[3, 4, 9, 20, 21]], np.int32)

  def _pe(self, **fields):
    config = PRopeConfig(**fields)
    return PRopePE(config, DecoderConfig(pe=config, **_TINY), rngs=nnx.Rngs(0))

  def test_default_keeps_a_quarter_of_the_frequencies(self):
    self.assertEqual(registry_entry("p_rope").make_config(), PRopeConfig(p=0.25))
    q, k = self._pe().rotate(self.q, self.k, self.positions, self.positions)
    # D = 16: 8 pairs, 2 kept; half layout pairs (i, i + 8): channels 2..7 and 10..15 stay.
    still = np.r_[2:8, 10:16]
    np.testing.assert_array_equal(np.asarray(q)[..., still], np.asarray(self.q)[..., still])
    np.testing.assert_array_equal(np.asarray(k)[..., still], np.asarray(self.k)[..., still])
    expected = apply_rope(self.q, self.positions, p_rope_inv_freq(16, p=0.25), layout="half")
    np.testing.assert_allclose(q, expected, rtol=1e-6, atol=1e-6)

  def test_p_one_is_the_rope_pe(self):
    got = self._pe(p=1.0, base=500.0).rotate(self.q, self.k, self.positions, self.positions)
    rope_config = RotaryConfig(base=500.0)
    rope = RotaryPE(rope_config, DecoderConfig(pe=rope_config, **_TINY), rngs=nnx.Rngs(0))
    expected = rope.rotate(self.q, self.k, self.positions, self.positions)
    for a, b in zip(got, expected):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)

  def test_failures_name_the_field(self):
    for kwargs, name in [(dict(p=1.5), "p must be"), (dict(p=-0.1), "p must be"),
                         (dict(base=0.5), "base"), (dict(layout="x"), "layout")]:
      with self.subTest(name=name, kwargs=kwargs):
        with self.assertRaisesRegex(ValueError, name):
          PRopeConfig(**kwargs)
    with self.assertRaisesRegex(ValueError, "head_dim must be even, got 9"):
      DecoderConfig(pe="p_rope", vocab_size=32, d_model=36, num_heads=4)


if __name__ == "__main__":
  absltest.main()
