"""Tests for the PoPE PE (pejax.nn.positional.pope): x-transformers parity through the hook, GQA,
the 2D key dim, config."""

from __future__ import annotations

import json
import math
import pathlib
import types

from absl.testing import absltest
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.nn.decoder import Decoder
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.positional.pope import PopeConfig
from pejax.nn.positional.pope import PopePE

_GOLDEN = json.loads((pathlib.Path(__file__).parents[2] / "encodings" /
                      "xtransformers_goldens.json").read_text())["pope"]["h2_d6"]
_TINY = dict(num_layers=2, d_model=32, num_heads=4, num_kv_heads=2, vocab_size=32)


def _blhd(values) -> np.ndarray:
  return np.asarray(values, np.float32).transpose(0, 2, 1, 3)


def _softplus(x):
  return np.logaddexp(0.0, x)


class PopePETest(absltest.TestCase):

  def test_logits_match_x_transformers(self):
    # x-transformers: keys carry +delta, logits = q~ . k~ / sqrt(D). The PE puts -delta on the
    # queries and pre-scales them so that the decoder's 1 / sqrt(2 D) gives the same logits.
    model = types.SimpleNamespace(num_heads=2, head_dim=6)
    pe = PopePE(PopeConfig(), model, rngs=nnx.Rngs(0))
    pe.phase_bias[...] = jnp.asarray(_GOLDEN["learned_bias"], jnp.float32)
    q, k = _blhd(_GOLDEN["q"]), _blhd(_GOLDEN["k"])
    positions = np.arange(q.shape[1], dtype=np.int32)[None]
    q_out, k_out = pe.rotate(q, k, positions, positions)
    self.assertEqual((q_out.shape[-1], k_out.shape[-1]), (12, 12))
    logits = jnp.einsum("bqhd,bkhd->bhqk", q_out, k_out) / math.sqrt(12)
    expected = np.asarray(_GOLDEN["scores"], np.float32) / math.sqrt(6)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)

  def test_grouped_query_heads_get_their_own_phase_bias(self):
    pe = PopePE(PopeConfig(phase_bias_init="uniform"), DecoderConfig(pe="pope", **_TINY),
                rngs=nnx.Rngs(0))
    delta = np.asarray(pe.phase_bias[...], np.float64)  # [H=4, D=8]
    self.assertTrue(np.all((delta >= -2 * np.pi) & (delta <= 0.0)))
    self.assertGreater(np.ptp(delta), 1.0)
    keys = jax.random.split(jax.random.key(0), 2)
    q = jax.random.normal(keys[0], (1, 3, 4, 8))
    k = jax.random.normal(keys[1], (1, 4, 2, 8))
    q_pos, k_pos = np.array([[5, 6, 9]], np.int32), np.array([[0, 2, 5, 9]], np.int32)
    q_out, k_out = pe.rotate(q, k, q_pos, k_pos)
    got = jnp.einsum("bqhd,bkhd->bhqk", q_out, jnp.repeat(k_out, 2, axis=2)) / math.sqrt(16)
    theta = 10000.0 ** (-np.arange(8) / 8)
    mu_q, mu_k = _softplus(np.asarray(q, np.float64)), _softplus(np.asarray(k, np.float64))
    mu_k = np.repeat(mu_k, 2, axis=2)  # Query head h reads key head h // 2.
    angle = (k_pos[0][None, :] - q_pos[0][:, None])[None, :, :, None] * theta + delta[:, None,
                                                                                      None, :]
    expected = np.einsum("qhc,khc,hqkc->hqk", mu_q[0], mu_k[0], np.cos(angle)) / math.sqrt(8)
    np.testing.assert_allclose(got[0], expected, rtol=1e-5, atol=1e-5)

  def test_decoder_runs_and_rejects_rotated_key_cache(self):
    model = Decoder(DecoderConfig(pe="pope", **_TINY), rngs=nnx.Rngs(0))
    self.assertEqual(model.pes[0].phase_bias.shape, (4, 8))
    self.assertLen(model.pes, 2)  # Per layer.
    tokens = jax.random.randint(jax.random.key(1), (2, 7), 0, 32, dtype=jnp.int32)
    self.assertTrue(bool(jnp.all(jnp.isfinite(nnx.jit(lambda m, t: m(t))(model, tokens)))))
    with self.assertRaisesRegex(ValueError, "cache_rotated_keys=True cannot serve pe='pope'"):
      DecoderConfig(pe="pope", cache_rotated_keys=True, **_TINY)

  def test_failures_name_the_field(self):
    with self.assertRaisesRegex(ValueError, "phase_bias_init must be one of"):
      PopeConfig(phase_bias_init="normal")
    with self.assertRaisesRegex(ValueError, "base must be greater than 1"):
      PopeConfig(base=1.0)


if __name__ == "__main__":
  absltest.main()
