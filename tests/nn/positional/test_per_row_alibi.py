"""Tests for the per-row data-dependent ALiBi PE (pejax.nn.positional.per_row_alibi): x-transformers
parity through the hooks, KV-cache continuation (linear and evicting caches), the blockwise
refusal, config failures."""

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
import pytest

from pejax.nn.decoder import Decoder
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.positional.per_row_alibi import PerRowAlibiConfig
from pejax.nn.positional.per_row_alibi import PerRowAlibiPE
from pejax.nn.positional.registry import registry_entry
from tests.nn.positional.decoding_check import assert_decoding_matches

_GOLDENS = json.loads((pathlib.Path(__file__).parents[2] / "encodings" /
                       "xtransformers_goldens.json").read_text())["per_row_data_dependent_alibi"]
_TINY = dict(num_layers=2, d_model=32, num_heads=4, num_kv_heads=2, vocab_size=32)


def _model(**overrides) -> Decoder:
  model = Decoder(DecoderConfig(pe="per_row_alibi", **{**_TINY, **overrides}), rngs=nnx.Rngs(0))
  for pe in model.pes:  # Large gates so that the bias matters.
    pe.gate_kernel[...] = 0.5 * jax.random.normal(jax.random.key(3), pe.gate_kernel[...].shape)
  return model


class PerRowAlibiPETest(parameterized.TestCase):

  def test_defaults_are_x_transformers(self):
    config = registry_entry("per_row_alibi").make_config()
    self.assertEqual(config, PerRowAlibiConfig(gate_dim=8, post_log_scale=1.0))
    pe = PerRowAlibiPE(config, DecoderConfig(pe=config, **_TINY), rngs=nnx.Rngs(0))
    self.assertFalse(pe.has_rotate or pe.has_bias or pe.has_embed)
    self.assertTrue(pe.has_content_bias)
    self.assertFalse(pe.supports_blockwise)
    self.assertEqual(pe.key_feature_shape(), (4, 9))
    kernel = np.asarray(pe.gate_kernel[...])
    self.assertEqual(kernel.shape, (32, 64))
    # torch.nn.Linear's default: uniform in +-1/sqrt(fan_in).
    self.assertLessEqual(np.abs(kernel).max(), 32 ** -0.5)
    self.assertGreater(np.abs(kernel).max(), 0.9 * 32 ** -0.5)

  @parameterized.named_parameters(*[(name, name) for name in _GOLDENS])
  def test_hooks_match_x_transformers(self, name):
    case = _GOLDENS[name]
    weight = np.asarray(case["weight"], np.float32)  # [2 * H * d, E]
    expected = np.asarray(case["bias"], np.float32)
    heads = expected.shape[1]
    config = PerRowAlibiConfig(gate_dim=case["dim_head"], post_log_scale=case["post_log_scale"])
    pe = PerRowAlibiPE(config, types.SimpleNamespace(num_heads=heads, d_model=weight.shape[1],
                                                     head_dim=4), rngs=nnx.Rngs(0))
    pe.gate_kernel[...] = jnp.asarray(weight.T)
    x = np.asarray(case["x"], np.float32)
    positions = np.arange(x.shape[1], dtype=np.int32)[None]
    q_features, k_features = pe.features(x, None, positions)
    bias = pe.content_bias(positions, positions, q_features, k_features)
    np.testing.assert_allclose(bias, expected, rtol=1e-5, atol=1e-5)

  def test_features_carry_the_text_index_from_the_cache(self):
    pe = PerRowAlibiPE(PerRowAlibiConfig(gate_dim=2), DecoderConfig(pe="per_row_alibi", **_TINY),
                       rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(2), (2, 3, 32))
    positions = jnp.zeros((1, 3), jnp.int32)  # Positions are not what orders the tokens.
    cached = jnp.zeros((2, 10, 4, 3)).at[:, :5, :, -1].set(jnp.arange(1.0, 6.0)[:, None])
    cached = cached.at[:, 7, :, -1].set(99.0)  # A slot past the fill length does not count.
    q_features, k_features = pe.features(x, None, positions, cache=(cached, jnp.int32(5)))
    np.testing.assert_array_equal(q_features[0, :, 0, -1], [6.0, 7.0, 8.0])
    np.testing.assert_array_equal(k_features[1, :, 3, -1], [6.0, 7.0, 8.0])
    # An evicting cache's view: the newest token (index 40) is last, empty slots hold 0.
    view = jnp.zeros((2, 10, 4, 3)).at[:, 4:, :, -1].set(jnp.arange(35.0, 41.0)[:, None])
    q_features, _ = pe.features(x, None, positions, cache=(view, jnp.int32(10)))
    np.testing.assert_array_equal(q_features[1, :, 2, -1], [41.0, 42.0, 43.0])

  @pytest.mark.slow
  @parameterized.named_parameters(("linear", "none"), ("window", "window"))
  def test_decoding_equals_the_full_forward(self, eviction):
    tokens = jax.random.randint(jax.random.key(4), (2, 11), 0, 32, dtype=jnp.int32)
    assert_decoding_matches(_model(), tokens, eviction=eviction)

  @pytest.mark.slow
  def test_the_bias_changes_the_model_and_blockwise_is_refused_by_name(self):
    model = _model(num_layers=1)
    tokens = jax.random.randint(jax.random.key(5), (1, 8), 0, 32, dtype=jnp.int32)
    forward = nnx.jit(lambda m, t: m(t))
    with_gates = forward(model, tokens)
    model.pes[0].gate_kernel[...] = jnp.full_like(model.pes[0].gate_kernel[...], 0.0)
    # Zero gate vectors: every gate is 1/2, a constant ALiBi-like decay of log 2 per token.
    flat = forward(model, tokens)
    self.assertGreater(float(jnp.max(jnp.abs(with_gates - flat))), 1e-3)
    with self.assertRaisesRegex(ValueError, "pe='per_row_alibi' does not support blockwise"):
      model(tokens, attention="blockwise")

  def test_jitted_gradients_are_finite(self):
    # Regression: a flip-cumsum-flip reverse sum crashed XLA's unoptimized CPU compiler (an
    # abort in AlgebraicSimplifier::HandleReverse) when differentiated under jit.
    model = _model(num_layers=1)
    tokens = jax.random.randint(jax.random.key(6), (2, 7), 0, 32, dtype=jnp.int32)
    grads = nnx.jit(nnx.grad(lambda m: jnp.mean(m(tokens) ** 2)))(model)
    leaves = jax.tree.leaves(nnx.state(grads, nnx.Param))
    self.assertTrue(all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in leaves))
    self.assertGreater(float(jnp.max(jnp.abs(grads.pes[0].gate_kernel[...]))), 0.0)

  def test_failures_name_the_field(self):
    for kwargs, name in [(dict(gate_dim=0), "gate_dim"), (dict(gate_dim=2.5), "gate_dim"),
                         (dict(post_log_scale=float("inf")), "post_log_scale"),
                         (dict(post_log_scale="1"), "post_log_scale")]:
      with self.subTest(name=name, kwargs=kwargs):
        with self.assertRaisesRegex(ValueError, name):
          PerRowAlibiConfig(**kwargs)


if __name__ == "__main__":
  absltest.main()
