"""Tests of KV-cache decoding: pre/post-rotation caching, chunked prefill, explicit positions."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import pytest

from pejax.encodings.rope_scaling import DynamicNTKScaling, LinearScaling, YaRNScaling
from pejax.nn import Decoder, DecoderConfig, KVCache
from pejax.nn.positional import LearnedConfig, RotaryConfig

TINY = dict(vocab_size=32, d_model=32, num_heads=4, num_kv_heads=2, num_layers=2, block_size=4)

_forward = nnx.jit(lambda model, tokens, positions: model(tokens, positions=positions))
_prefill = nnx.jit(lambda model, tokens, positions, cache: model.prefill(tokens, positions, cache))
_decode = nnx.jit(lambda model, token, position, cache: model.decode_step(token, position, cache))


def _tokens(batch, length, seed=0):
  return jax.random.randint(jax.random.key(seed), (batch, length), 0, 32, dtype=jnp.int32)


def _decode_from(model, tokens, positions, cache, *, start):
  """Decodes ``tokens[:, start:]`` one by one; returns their stacked logits and the cache."""
  steps = []
  for t in range(start, tokens.shape[1]):
    logits, cache = _decode(model, tokens[:, t:t + 1], positions[:, t:t + 1], cache)
    steps.append(logits)
  return jnp.concatenate(steps, axis=1), cache


def _decode_all(model, tokens, positions, *, prompt, capacity=None):
  """Prefills ``prompt`` tokens, decodes the rest one by one; returns stacked logits, cache."""
  batch, length = tokens.shape
  cache = model.init_cache(batch, capacity or length)
  logits, cache = _prefill(model, tokens[:, :prompt], positions[:, :prompt], cache)
  rest, cache = _decode_from(model, tokens, positions, cache, start=prompt)
  return jnp.concatenate([logits, rest], axis=1), cache


def _arange(batch, length, start=0):
  return jnp.tile(jnp.arange(start, start + length, dtype=jnp.int32)[None, :], (batch, 1))


class DynamicScalingCacheTest(parameterized.TestCase):
  """Dynamic NTK frequencies depend on the current length (original length 8, decoded to 24)."""

  def _model(self, *, cache_rotated_keys, num_layers=1):
    config = DecoderConfig(pe=RotaryConfig(scaling=DynamicNTKScaling(4.0, 8)),
                           cache_rotated_keys=cache_rotated_keys,
                           **{**TINY, "num_layers": num_layers})
    return Decoder(config, rngs=nnx.Rngs(0))

  @pytest.mark.slow
  def test_pre_rotation_cache_equals_full_forward_beyond_original_length(self):
    model = self._model(cache_rotated_keys=False)
    tokens, positions = _tokens(2, 24), _arange(2, 24)
    decoded, _ = _decode_all(model, tokens, positions, prompt=4)
    full = _forward(model, tokens, positions)
    # The last step sees all 24 keys, as the full pass does: same frequencies, same logits.
    chex.assert_trees_all_close(decoded[:, -1], full[:, -1], atol=2e-5, rtol=2e-5)
    # Every earlier step equals the full pass over its own prefix (frequencies of that length).
    prefix = _forward(model, tokens[:, :15], positions[:, :15])
    chex.assert_trees_all_close(decoded[:, 14], prefix[:, -1], atol=2e-5, rtol=2e-5)

  @pytest.mark.slow
  def test_post_rotation_cache_has_stale_keys(self):
    tokens, positions = _tokens(2, 24), _arange(2, 24)
    pre, _ = _decode_all(self._model(cache_rotated_keys=False), tokens, positions, prompt=4)
    post, _ = _decode_all(self._model(cache_rotated_keys=True), tokens, positions, prompt=4)
    # Same parameters (same seed); up to the original length nothing is scaled: identical.
    chex.assert_trees_all_close(post[:, :8], pre[:, :8], atol=2e-5, rtol=2e-5)
    # Past it, keys written at shorter lengths keep their old rotation: the logits differ.
    self.assertGreater(float(jnp.max(jnp.abs(post[:, -1] - pre[:, -1]))), 1e-2)

  @pytest.mark.slow
  def test_pre_rotation_is_closer_than_post_rotation_with_two_layers(self):
    tokens, positions = _tokens(2, 24), _arange(2, 24)
    errors = {}
    for rotated in (False, True):
      model = self._model(cache_rotated_keys=rotated, num_layers=2)
      decoded, _ = _decode_all(model, tokens, positions, prompt=4)
      errors[rotated] = float(jnp.max(jnp.abs(decoded[:, -1] - _forward(model, tokens,
                                                                        positions)[:, -1])))
    self.assertLess(errors[False], errors[True])


class CacheModesTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("rope_post_rotation", dict(pe="rope", cache_rotated_keys=True)),
      ("yarn_post_rotation", dict(
          pe=RotaryConfig(scaling=YaRNScaling(factor=4.0, original_max_position=8)),
          cache_rotated_keys=True)),
      ("linear_pre_rotation", dict(pe=RotaryConfig(scaling=LinearScaling(2.0)))),
      ("t5_post_rotation_flag", dict(pe="t5", cache_rotated_keys=True)),
  )
  @pytest.mark.slow
  def test_static_frequencies_decode_equals_full_forward_in_both_modes(self, options):
    model = Decoder(DecoderConfig(**{**TINY, **options}), rngs=nnx.Rngs(0))
    tokens, positions = _tokens(2, 12), _arange(2, 12, start=3)
    decoded, _ = _decode_all(model, tokens, positions, prompt=4, capacity=16)
    chex.assert_trees_all_close(decoded, _forward(model, tokens, positions), atol=2e-5,
                                rtol=2e-5)

  @parameterized.named_parameters(("alibi", "alibi"), ("rope", "rope"),
                                  ("learned", LearnedConfig(max_position=64)))
  @pytest.mark.slow
  def test_explicit_irregular_positions(self, pe):
    # Randomized-positions style: sorted, distinct, with gaps; different per row.
    model = Decoder(DecoderConfig(pe=pe, **TINY), rngs=nnx.Rngs(0))
    tokens = _tokens(2, 10)
    positions = jnp.array([[0, 2, 3, 7, 11, 12, 20, 21, 30, 41],
                           [1, 4, 5, 6, 9, 15, 16, 22, 40, 63]], jnp.int32)
    decoded, cache = _decode_all(model, tokens, positions, prompt=3)
    chex.assert_trees_all_close(decoded, _forward(model, tokens, positions), atol=2e-5,
                                rtol=2e-5)
    chex.assert_trees_all_equal(cache.positions, positions)

  @parameterized.named_parameters(("dense", "dense"), ("blockwise", "blockwise"))
  @pytest.mark.slow
  def test_chunked_prefill(self, attention):
    model = Decoder(DecoderConfig(pe="alibi", attention=attention, **TINY), rngs=nnx.Rngs(0))
    tokens = _tokens(2, 13)
    cache = model.init_cache(2, 16)
    first, cache = _prefill(model, tokens[:, :5], None, cache)
    second, cache = _prefill(model, tokens[:, 5:11], None, cache)  # positions continue at 5
    rest, cache = _decode_from(model, tokens, _arange(2, 13), cache, start=11)
    full = _forward(model, tokens, None)
    chex.assert_trees_all_close(jnp.concatenate([first, second, rest], axis=1), full,
                                atol=2e-5, rtol=2e-5)
    self.assertEqual(int(cache.length), 13)

  def test_decode_step_does_not_retrace(self):
    chex.clear_trace_counter()
    model = Decoder(DecoderConfig(pe="rope", **TINY), rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(model)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(state, token, position, cache):
      return nnx.merge(graphdef, state).decode_step(token, position, cache)

    cache = model.init_cache(2, 8)
    for t in range(5):
      _, cache = step(state, _tokens(2, 1, seed=t), jnp.full((2, 1), t, jnp.int32), cache)
    self.assertIsInstance(cache, KVCache)

  def test_cache_shapes_and_dtype(self):
    model = Decoder(DecoderConfig(pe="rope", dtype="bfloat16", **TINY), rngs=nnx.Rngs(0))
    cache = model.init_cache(3, 10)
    self.assertLen(cache.keys, 2)
    chex.assert_shape(cache.keys[0], (3, 10, 2, 8))
    chex.assert_type(cache.values[1], jnp.bfloat16)
    chex.assert_type(model.init_cache(3, 10, dtype=jnp.float32).keys[0], jnp.float32)
    self.assertEqual(cache.max_length, 10)


class CacheBadInputTest(parameterized.TestCase):

  def test_overflow(self):
    model = Decoder(DecoderConfig(pe="rope", **TINY), rngs=nnx.Rngs(0))
    cache = model.init_cache(1, 4)
    with self.assertRaisesRegex(ValueError, "max_length=4"):
      model.prefill(_tokens(1, 5), None, cache)
    # Under jit the fill length is traced: overflowing writes poison the logits with NaN.
    _, cache = _prefill(model, _tokens(1, 4), None, cache)
    logits, _ = _decode(model, _tokens(1, 1), jnp.full((1, 1), 4, jnp.int32), cache)
    self.assertTrue(bool(jnp.all(jnp.isnan(logits))))

  def test_malformed_arguments(self):
    model = Decoder(DecoderConfig(pe="rope", **TINY), rngs=nnx.Rngs(0))
    cache = model.init_cache(2, 8)
    with self.assertRaisesRegex(ValueError, r"token must have shape \[B, 1\]"):
      model.decode_step(_tokens(2, 2), jnp.zeros((2, 2), jnp.int32), cache)
    with self.assertRaisesRegex(ValueError, "position must be"):
      model.decode_step(_tokens(2, 1), None, cache)
    with self.assertRaisesRegex(ValueError, "cache batch"):
      model.prefill(_tokens(3, 2), None, cache)
    with self.assertRaisesRegex(ValueError, "cache must be a KVCache"):
      model.prefill(_tokens(2, 2), None, {"keys": ()})
    with self.assertRaisesRegex(ValueError, "max_length must be a positive integer"):
      model.init_cache(2, 0)


if __name__ == "__main__":
  absltest.main()
