"""Tests for the FoX PE (pejax.nn.positional.fox): x-transformers parity through the hooks,
KV-cache continuation, NoPE / RoPE, config."""

from __future__ import annotations

import json
import pathlib
import types

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.rope import RopeConfig, apply_rope, rope_inv_freq
from pejax.nn.decoder import Decoder
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.positional.fox import FoxConfig
from pejax.nn.positional.fox import FoxPE
from pejax.nn.positional.registry import registry_entry
import pytest

_GOLDENS = json.loads((pathlib.Path(__file__).parents[2] / "encodings" /
                       "xtransformers_goldens.json").read_text())["data_dependent_alibi"]
_TINY = dict(num_layers=2, d_model=32, num_heads=4, num_kv_heads=2, vocab_size=32)


class FoxPETest(parameterized.TestCase):

  def test_defaults_are_the_papers(self):
    config = registry_entry("fox").make_config()
    self.assertEqual(config, FoxConfig(use_rope=False, gate_bias_init=0.0, gate_init_std=0.02))
    pe = FoxPE(config, DecoderConfig(pe=config, **_TINY), rngs=nnx.Rngs(0))
    self.assertFalse(pe.has_rotate)
    self.assertTrue(pe.has_content_bias)
    self.assertEqual(pe.key_feature_shape(), (4,))
    np.testing.assert_array_equal(pe.gate_bias[...], 0.0)
    self.assertAlmostEqual(float(jnp.std(pe.gate_kernel[...])), 0.02, delta=0.005)

  @parameterized.named_parameters(*[(name, name) for name in _GOLDENS])
  def test_hooks_match_x_transformers(self, name):
    case = _GOLDENS[name]
    weight = np.asarray(case["weight"], np.float32)  # [H, E]
    heads, width = weight.shape
    pe = FoxPE(FoxConfig(), types.SimpleNamespace(num_heads=heads, d_model=width, head_dim=4),
               rngs=nnx.Rngs(0))
    pe.gate_kernel[...] = jnp.asarray(weight.T)
    pe.gate_bias[...] = jnp.asarray(case["bias_param"], jnp.float32)
    x = np.asarray(case["x"], np.float32)
    positions = np.arange(x.shape[1], dtype=np.int32)[None]
    q_features, k_features = pe.features(x, None, positions)
    bias = pe.content_bias(positions, positions, q_features, k_features)
    np.testing.assert_allclose(bias, np.asarray(case["bias"], np.float32), rtol=1e-6, atol=1e-6)

  def test_features_continue_from_the_cache(self):
    pe = FoxPE(FoxConfig(), DecoderConfig(pe="fox", **_TINY), rngs=nnx.Rngs(0))
    pe.gate_kernel[...] = jax.random.normal(jax.random.key(1), (32, 4))
    x = jax.random.normal(jax.random.key(2), (2, 9, 32))
    positions = jnp.arange(9, dtype=jnp.int32)[None]
    full, _ = pe.features(x, None, positions)
    buffer = jnp.zeros((2, 12, 4), jnp.float32)  # Capacity T = 12.
    empty, _ = pe.features(x[:, :5], None, positions[:, :5], cache=(buffer, jnp.int32(0)))
    np.testing.assert_allclose(empty, full[:, :5], rtol=1e-6, atol=1e-6)
    buffer = buffer.at[:, :5].set(empty)
    rest, _ = pe.features(x[:, 5:], None, positions[:, 5:], cache=(buffer, jnp.int32(5)))
    np.testing.assert_allclose(rest, full[:, 5:], rtol=1e-5, atol=1e-5)

  @pytest.mark.slow
  def test_decoder_without_pe_still_sees_order(self):
    # NoPE attention is permutation-invariant over earlier tokens; the forget gates are not.
    model = Decoder(DecoderConfig(pe="fox", **{**_TINY, "num_layers": 1}), rngs=nnx.Rngs(0))
    model.pes[0].gate_kernel[...] = jax.random.normal(jax.random.key(3), (32, 4))
    tokens = jax.random.randint(jax.random.key(4), (2, 9), 0, 32, dtype=jnp.int32)
    permuted = jnp.concatenate([tokens[:, np.array([3, 7, 0, 5, 1, 6, 2, 4])], tokens[:, 8:]], 1)
    last = nnx.jit(lambda m, t: m(t)[:, -1])  # One compiled call, not op-by-op dispatch.
    difference = jnp.abs(last(model, tokens) - last(model, permuted))
    self.assertGreater(float(jnp.max(difference)), 1e-3)

  def test_use_rope_rotates_with_the_papers_base(self):
    config = FoxConfig(use_rope=True)
    pe = FoxPE(config, DecoderConfig(pe=config, **_TINY), rngs=nnx.Rngs(0))
    self.assertTrue(pe.has_rotate)
    q = jax.random.normal(jax.random.key(0), (1, 4, 4, 8))
    positions = np.array([[0, 1, 7, 30]], np.int32)
    q_out, _ = pe.rotate(q, q[:, :, :2], positions, positions)
    inv_freq, _ = rope_inv_freq(RopeConfig(8, base=500000.0))
    np.testing.assert_allclose(q_out, apply_rope(q, positions, inv_freq, layout="half"),
                               rtol=1e-6, atol=1e-6)

  def test_failures_name_the_field(self):
    for kwargs, name in [(dict(use_rope=1), "use_rope"), (dict(gate_init_std=0.0),
                                                           "gate_init_std"),
                         (dict(gate_bias_init=float("nan")), "gate_bias_init"),
                         (dict(base=0.5), "base")]:
      with self.subTest(name=name):
        with self.assertRaisesRegex(ValueError, name):
          FoxConfig(**kwargs)
    with self.assertRaisesRegex(ValueError, "head_dim must be even, got 9"):
      DecoderConfig(pe=FoxConfig(use_rope=True), vocab_size=32, d_model=36, num_heads=4)


if __name__ == "__main__":
  absltest.main()
