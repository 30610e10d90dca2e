"""Tests for the PaTH PE (pejax.nn.positional.path): the layer's transform vectors (projection,
short convolution, normalization, strengths), the logits hook against pejax.encodings.path, KV-cache
decoding (linear and evicting caches), packed documents, blockwise == dense, config failures."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.nn.decoder import Decoder
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.positional.path import PathConfig
from pejax.nn.positional.path import PathPE
from pejax.nn.positional.registry import registry_entry
from tests.nn.positional.decoding_check import assert_decoding_matches

_TINY = dict(num_layers=2, d_model=32, num_heads=4, num_kv_heads=2, vocab_size=32)


def _model(**overrides) -> Decoder:
  return Decoder(DecoderConfig(pe="path", **{**_TINY, **overrides}), rngs=nnx.Rngs(0))


def _silu(x):
  return x / (1.0 + np.exp(-x))


class PathPETest(parameterized.TestCase):

  def test_defaults_are_the_reference_layers(self):
    config = registry_entry("path").make_config()
    self.assertEqual(config, PathConfig(w_rank=32, short_conv=3, chunk_size=64))
    pe = PathPE(config, DecoderConfig(pe=config, **_TINY), rngs=nnx.Rngs(0))
    self.assertTrue(pe.has_attend and pe.has_features)
    self.assertFalse(pe.has_rotate or pe.has_bias or pe.has_content_bias or pe.has_logits)
    self.assertTrue(pe.supports_blockwise and pe.has_attend)
    self.assertEqual(pe.key_feature_shape(), (2, 2 * 8 + 2))
    self.assertEqual(pe.w_down[...].shape, (32, 32))
    self.assertEqual(pe.w_up[...].shape, (32, 16))
    self.assertEqual(pe.conv[...].shape, (3, 16))
    self.assertEqual(pe.beta_kernel[...].shape, (32, 2))
    # torch's default initialization: uniform in +-1/sqrt(fan_in) (fan_in 3 for the conv).
    self.assertLessEqual(float(jnp.max(jnp.abs(pe.conv[...]))), 3 ** -0.5)
    self.assertGreater(float(jnp.max(jnp.abs(pe.conv[...]))), 0.8 * 3 ** -0.5)

  def test_features_follow_the_reference_layer(self):
    # w = l2norm(silu(causal depthwise conv(x W_down W_up))), beta = 2 sigmoid(x u + c).
    pe = PathPE(PathConfig(), DecoderConfig(pe="path", **_TINY), rngs=nnx.Rngs(1))
    x = np.asarray(jax.random.normal(jax.random.key(2), (1, 5, 32)))
    features, _ = pe.features(x, None, np.arange(5, dtype=np.int32)[None])
    raw = x @ np.asarray(pe.w_down[...]) @ np.asarray(pe.w_up[...])  # [1, 5, 16]
    conv = np.asarray(pe.conv[...])  # [3, 16]; tap 2 is the current token
    padded = np.concatenate([np.zeros((1, 2, 16)), raw], axis=1)
    mixed = sum(padded[:, tap:tap + 5] * conv[tap] for tap in range(3))
    w = _silu(mixed).reshape(1, 5, 2, 8)
    w = w / np.sqrt(np.sum(w * w, axis=-1, keepdims=True) + 1e-6)
    beta = 2.0 / (1.0 + np.exp(-(x @ np.asarray(pe.beta_kernel[...]) + np.asarray(
        pe.beta_bias[...]))))
    np.testing.assert_allclose(features[..., :8], w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(features[..., 8], beta, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(features[..., 9:17], raw.reshape(1, 5, 2, 8), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(features[0, :, 1, 17], np.arange(5))  # positions

  def test_convolution_does_not_reach_across_packed_documents(self):
    pe = PathPE(PathConfig(), DecoderConfig(pe="path", **_TINY), rngs=nnx.Rngs(1))
    x = jax.random.normal(jax.random.key(3), (1, 7, 32))
    features = nnx.jit(lambda pe, x, positions: pe.features(x, None, positions)[0])  # Issue 44.
    packed = features(pe, x, jnp.array([[0, 1, 2, 3, 0, 1, 2]], jnp.int32))
    alone = features(pe, x[:, 4:], jnp.arange(3, dtype=jnp.int32)[None])
    np.testing.assert_allclose(packed[:, 4:, :, :17], alone[..., :17], rtol=1e-6, atol=1e-6)

  def test_masked_calls_equal_the_full_sequence(self):
    # attend with a mask (queries at slots 4..6 of a cache, one key slot beyond the fill) gives
    # the rows of the full-sequence operator.
    pe = PathPE(PathConfig(chunk_size=3), DecoderConfig(pe="path", **_TINY), rngs=nnx.Rngs(1))
    x = jax.random.normal(jax.random.key(4), (2, 7, 32))
    q = jax.random.normal(jax.random.key(5), (2, 7, 4, 8))
    k = jax.random.normal(jax.random.key(6), (2, 8, 2, 8))  # slot 7 is empty
    v = jax.random.normal(jax.random.key(7), (2, 8, 2, 8))

    @nnx.jit  # One program (eagerly, each primitive compiles on its own: ~225 programs).
    def calls(pe, x, q, k, v):
      features, _ = pe.features(x, q, jnp.arange(7, dtype=jnp.int32)[None])
      k_features = jnp.concatenate([features, jnp.zeros_like(features[:, :1])], axis=1)
      full = pe.attend(q, k[:, :7], v[:, :7], q_features=features, k_features=features,
                       mask=None, q_slots=None, segment_ids=None, implementation="dense",
                       block_size=4)
      slots = jnp.arange(4, 7)
      mask = (jnp.arange(8)[None, :] <= slots[:, None])[None, None]
      rows = pe.attend(q[:, 4:], k, v, q_features=features[:, 4:], k_features=k_features,
                       mask=mask, q_slots=slots, segment_ids=None, implementation="dense",
                       block_size=4)
      blockwise = pe.attend(q, k[:, :7], v[:, :7], q_features=features, k_features=features,
                            mask=None, q_slots=None, segment_ids=None,
                            implementation="blockwise", block_size=2)
      return full, rows, blockwise

    full, rows, blockwise = calls(pe, x, q, k, v)
    np.testing.assert_allclose(rows, full[:, 4:], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(blockwise, full, rtol=1e-5, atol=1e-5)

  @pytest.mark.slow
  @parameterized.named_parameters(("linear", "none"), ("window", "window"))
  def test_decoding_equals_the_full_forward(self, eviction):
    tokens = jax.random.randint(jax.random.key(7), (2, 11), 0, 32, dtype=jnp.int32)
    assert_decoding_matches(_model(), tokens, eviction=eviction)

  @pytest.mark.slow
  def test_the_transforms_change_the_model(self):
    model = _model(num_layers=1)
    tokens = jax.random.randint(jax.random.key(8), (1, 9), 0, 32, dtype=jnp.int32)
    forward = nnx.jit(lambda m, t: m(t))
    with_transforms = forward(model, tokens)
    model.pes[0].beta_bias[...] = jnp.full((2,), -30.0)  # beta ~ 0: plain (NoPE) attention.
    model.pes[0].beta_kernel[...] = jnp.zeros_like(model.pes[0].beta_kernel[...])
    nope = Decoder(DecoderConfig(pe="none", **{**_TINY, "num_layers": 1}), rngs=nnx.Rngs(0))
    nnx.update(nope, nnx.filter_state(nnx.state(model, nnx.Param),
                                      lambda path, _: "pes" not in path))
    self.assertGreater(float(jnp.max(jnp.abs(with_transforms - forward(model, tokens)))), 1e-3)
    np.testing.assert_allclose(forward(model, tokens), forward(nope, tokens), rtol=1e-5,
                               atol=1e-5)

  @pytest.mark.slow
  def test_blockwise_runs_the_blockwise_operator_and_equals_dense(self):
    # block_size 4 over 13 tokens: four blocks, the last one padded, two packed documents.
    model = _model(block_size=4)
    tokens = jax.random.randint(jax.random.key(9), (2, 13), 0, 32, dtype=jnp.int32)
    segments = jnp.array([[1] * 6 + [2] * 7, [1] * 13], jnp.int32)
    positions = jnp.array([list(range(6)) + list(range(7)), list(range(13))], jnp.int32)
    run = nnx.jit(lambda m, t, attention: m(t, positions=positions, segment_ids=segments,
                                             attention=attention), static_argnames="attention")
    np.testing.assert_allclose(run(model, tokens, "blockwise"), run(model, tokens, "dense"),
                               rtol=2e-5, atol=2e-5)
    grads = [nnx.grad(lambda m: jnp.mean(run(m, tokens, attention) ** 2))(model)
             for attention in ("blockwise", "dense")]
    for got, expected in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1])):
      np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
    calls = []
    original = PathPE.attend
    try:
      PathPE.attend = lambda self, *a, **kw: calls.append(1) or original(self, *a, **kw)
      model(tokens, attention="blockwise")
    finally:
      PathPE.attend = original
    self.assertLen(calls, 2)  # One per layer: the blockwise operator, not the dense hook.

  @pytest.mark.slow
  @pytest.mark.xla_optimized
  def test_optimized_training_step_of_the_study_model_compiles_and_runs(self):
    # Regression: the extrapolation study's model (2 layers, d=128, 4 heads, batch 16, L=128)
    # failed XLA's HLO verifier ("Failed after simplification") when the WY factor squared a
    # matrix (x @ x) inside the optimized training step.
    model = Decoder(DecoderConfig(pe="path", num_layers=2, d_model=128, num_heads=4,
                                  vocab_size=64), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)
    tokens = jax.random.randint(jax.random.key(11), (16, 128), 0, 64, dtype=jnp.int32)
    step = jax.jit(jax.value_and_grad(lambda p: jnp.mean(nnx.merge(graphdef, p)(tokens) ** 2)))
    loss, grads = step(params)
    self.assertTrue(bool(jnp.isfinite(loss)))
    self.assertTrue(all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads)))

  @pytest.mark.slow
  @pytest.mark.xla_optimized
  def test_optimized_training_gradients_return_and_match_dense(self):
    # Regression: with a LAPACK triangular solve inside, the optimized CPU program of a 2-layer
    # blockwise gradient never returned (every thread waiting); the WY factor is now products.
    model = _model(block_size=64)
    graphdef, params = nnx.split(model, nnx.Param)
    tokens = jax.random.randint(jax.random.key(10), (1, 160), 0, 32, dtype=jnp.int32)
    grads = {}
    for attention in ("blockwise", "dense"):
      step = jax.jit(jax.grad(lambda p, a=attention: jnp.mean(
          nnx.merge(graphdef, p)(tokens, attention=a) ** 2)))
      grads[attention] = step(params)
      jax.block_until_ready(step(params))  # A second call returns too.
    for got, expected in zip(jax.tree.leaves(grads["blockwise"]), jax.tree.leaves(grads["dense"])):
      np.testing.assert_allclose(got, expected, rtol=2e-4, atol=1e-6)

  def test_failures_name_the_field(self):
    for kwargs, name in [(dict(w_rank=-1), "w_rank"), (dict(short_conv=1.5), "short_conv"),
                         (dict(chunk_size=0), "chunk_size"), (dict(chunk_size=True),
                                                              "chunk_size")]:
      with self.subTest(name=name, kwargs=kwargs):
        with self.assertRaisesRegex(ValueError, name):
          PathConfig(**kwargs)


if __name__ == "__main__":
  absltest.main()
