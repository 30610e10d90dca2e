"""Tests of the cache kinds: quantized (int8 / fp8), ring buffer (window) and attention sinks."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pejax
from pejax.nn import Decoder, DecoderConfig, pe_names
from pejax.nn import kv_eviction
from pejax.nn import kv_quantization
from pejax.encodings.rope_scaling import YaRNScaling
from pejax.nn.positional import RotaryConfig
from pejax.nn.positional import registry

TINY = dict(vocab_size=32, d_model=32, num_heads=4, num_kv_heads=2, num_layers=2, block_size=4)
LENGTH = 15

_forward = nnx.jit(lambda model, tokens: model(tokens))
_prefill = nnx.jit(lambda model, tokens, cache: model.prefill(tokens, None, cache))
_decode = nnx.jit(lambda model, token, position, cache: model.decode_step(token, position, cache))


def _model(**overrides) -> Decoder:
  model = Decoder(DecoderConfig(**{**TINY, **overrides}), rngs=nnx.Rngs(0))
  state = nnx.state(model.pes, nnx.Param)  # Random PE tables: zeros could hide a bug.
  leaves, treedef = jax.tree.flatten(state)
  keys = jax.random.split(jax.random.key(1), max(len(leaves), 1))
  nnx.update(model.pes, jax.tree.unflatten(
      treedef, [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)]))
  return model


def _tokens(batch=2, length=LENGTH, seed=0):
  return jax.random.randint(jax.random.key(seed), (batch, length), 0, TINY["vocab_size"],
                            dtype=jnp.int32)


def _stream(model, tokens, cache, *, prompt):
  """Prefills ``prompt`` tokens, decodes the rest one by one: stacked logits and the cache."""
  logits, cache = _prefill(model, tokens[:, :prompt], cache)
  steps = [logits]
  for t in range(prompt, tokens.shape[1]):
    logits, cache = _decode(model, tokens[:, t:t + 1],
                            jnp.full((tokens.shape[0], 1), t, jnp.int32), cache)
    steps.append(logits)
  return jnp.concatenate(steps, axis=1), cache


def _cache_bytes(cache) -> int:
  return sum(x.nbytes for x in jax.tree.leaves(cache))


def _relative(name: str) -> bool:
  cls = registry.get_pe_class(name)
  return cls.translation_invariant and not cls.absolute and not cls.length_dependent


class SlotAlgebraTest(parameterized.TestCase):
  """The ring / sink slot formulas against a direct simulation of the cache."""

  @parameterized.product(capacity=(1, 4, 7), sinks=(0, 2), chunk=(1, 3, 9))
  def test_view_and_writes_match_a_simulated_cache(self, capacity, sinks, chunk):
    if sinks >= capacity:
      return
    slots = [None] * capacity  # Text index held by each slot.
    seen = 0
    for _ in range(6):
      source, valid = kv_eviction.chronological_view(seen, capacity=capacity, sink_tokens=sinks)
      held = sorted(t for t in slots if t is not None)
      view = [slots[s] for s, ok in zip(np.asarray(source), np.asarray(valid)) if ok]
      self.assertEqual(view, held)  # Valid entries: every cached token, in text order ...
      self.assertTrue(np.all(np.asarray(valid)[capacity - len(held):]))  # ... right-aligned.
      written, index = kv_eviction.written_slots(seen, chunk, capacity=capacity,
                                                 sink_tokens=sinks)
      for t in range(seen, seen + chunk):  # The simulated cache: sinks, then a ring.
        slot = t if t < sinks else sinks + (t - sinks) % (capacity - sinks)
        slots[slot] = t
      for s in range(capacity):
        if written[s]:
          self.assertEqual(slots[s], seen + int(index[s]))
        elif slots[s] is not None:
          self.assertLess(slots[s], seen)  # Unwritten slots keep older tokens.
      seen += chunk


class QuantizationTest(parameterized.TestCase):

  @parameterized.parameters(("int8", 0.5 / 127), ("float8_e4m3fn", 2.0 ** -4))
  def test_round_trip_error_is_bounded_per_vector(self, name, bound):
    x = jax.random.normal(jax.random.key(0), (3, 5, 2, 64)) * jnp.array([1e-3, 1.0, 1e3])[
        :, None, None, None]
    q, scale = kv_quantization.quantize(x, name)
    self.assertEqual(q.dtype, kv_quantization.STORAGE_DTYPES[name])  # fp8: its bits as uint8.
    chex.assert_shape(scale, (3, 5, 2))
    error = jnp.abs(kv_quantization.dequantize(q, scale, jnp.float32) - x)
    amax = jnp.max(jnp.abs(x), axis=-1, keepdims=True)
    # int8: half a step of amax / 127; fp8 e4m3: 3 mantissa bits, relative 2^-4 of the value,
    # never more than 2^-4 of amax.
    self.assertTrue(bool(jnp.all(error <= bound * amax * 1.0001)))

  def test_fp8_bits_are_the_float8_values(self):
    x = jnp.array([[0.0, 1.0, -2.5, 448.0, 1e-3, -7.0]])
    q, scale = kv_quantization.quantize(x, "float8_e4m3fn")
    as_float8 = jax.lax.bitcast_convert_type(q, jnp.float8_e4m3fn)
    chex.assert_trees_all_equal(as_float8, (x / scale[..., None]).astype(jnp.float8_e4m3fn))
    chex.assert_trees_all_equal(kv_quantization.dequantize(q, scale, jnp.float32),
                                kv_quantization.dequantize(as_float8, scale, jnp.float32))

  def test_zero_and_nan_vectors(self):
    x = jnp.zeros((1, 2, 8)).at[0, 1, 3].set(jnp.nan)
    for name in ("int8", "float8_e4m3fn"):
      q, scale = kv_quantization.quantize(x, name)
      back = kv_quantization.dequantize(q, scale, jnp.float32)
      chex.assert_trees_all_equal(back[0, 0], jnp.zeros(8))  # Exact zeros, no 0/0.
      self.assertTrue(bool(jnp.all(jnp.isnan(back[0, 1]))))  # A poisoned token stays NaN.

  def test_dtype_names(self):
    self.assertEqual(kv_quantization.quantized_dtype_name("fp8"), "float8_e4m3fn")
    self.assertEqual(kv_quantization.quantized_dtype_name(jnp.int8), "int8")
    self.assertIsNone(kv_quantization.quantized_dtype_name(jnp.bfloat16))
    self.assertIsNone(kv_quantization.quantized_dtype_name(None))
    for bad in ("int4", jnp.int16, "bogus", jnp.uint8):
      with self.assertRaisesRegex(ValueError, "dtype must be"):
        kv_quantization.quantized_dtype_name(bad)

  @parameterized.parameters("int8", "fp8")
  def test_quantized_decode_equals_quantized_prefill_and_stays_close(self, dtype):
    # Prefill reads back the quantized keys / values it wrote, so token-by-token decoding
    # through the same cache kind gives the same logits; against the float cache the logits
    # move by the quantization error only.
    model = _model(pe="rope")
    tokens = _tokens()
    prefilled, cache = _prefill(model, tokens, model.init_cache(2, LENGTH, dtype=dtype))
    name = kv_quantization.quantized_dtype_name(dtype)
    self.assertEqual(cache.keys[0].dtype, kv_quantization.STORAGE_DTYPES[name])
    self.assertEqual(kv_quantization.quantized_name_of_storage(cache.keys[0].dtype), name)
    decoded, _ = _stream(model, tokens, model.init_cache(2, LENGTH, dtype=dtype), prompt=3)
    chex.assert_trees_all_close(decoded, prefilled, atol=2e-5, rtol=2e-5)
    difference = float(jnp.max(jnp.abs(prefilled - _forward(model, tokens))))
    self.assertGreater(difference, 0.0)  # The cache really is quantized ...
    self.assertLess(difference, 0.05 if dtype == "int8" else 0.3)  # ... and close.

  @parameterized.named_parameters(*((n, n) for n in pe_names()))
  @pytest.mark.slow
  def test_every_pe(self, name):
    # One layer: what a PE changes in the quantized cache is per layer; the two-layer fast-tier
    # tests above cover a cache of several layers (half the tracing and lowering per PE).
    model = _model(pe=name, num_layers=1)
    tokens = _tokens()
    prefilled, _ = _prefill(model, tokens, model.init_cache(2, LENGTH, dtype="int8"))
    decoded, _ = _stream(model, tokens, model.init_cache(2, LENGTH, dtype="int8"), prompt=3)
    tolerance = 1e-4 if model.pe.length_dependent else 2e-5
    if model.pe.length_dependent:  # Frequencies of the current length: the last step.
      prefilled, decoded = prefilled[:, -1], decoded[:, -1]
    chex.assert_trees_all_close(decoded, prefilled, atol=tolerance, rtol=tolerance)
    self.assertLess(float(jnp.max(jnp.abs(prefilled - _forward(model, tokens)[
        :, -1 if model.pe.length_dependent else slice(None)]))), 0.05)

  def test_keys_are_quantized_before_rotation(self):
    # The default cache keeps unrotated keys: a token's stored int8 key is the same whatever its
    # position (rotation happens when read).
    model = _model(pe="rope")
    tokens = jnp.tile(_tokens(1, 1), (1, 2))
    cache = model.init_cache(1, 4, dtype="int8")
    _, cache = _prefill(model, tokens, cache)
    chex.assert_trees_all_equal(cache.keys[0][0, 0], cache.keys[0][0, 1])

  def test_bytes_per_token(self):
    model = _model(pe="rope", d_model=128, num_heads=2, num_kv_heads=1)  # D = 64.
    float_bytes = _cache_bytes(model.init_cache(1, 8, dtype=jnp.bfloat16).keys)
    int8_bytes = _cache_bytes(model.init_cache(1, 8, dtype="int8").keys)
    scale_bytes = _cache_bytes(model.init_cache(1, 8, dtype="int8").key_scales)
    self.assertEqual(float_bytes, 2 * 8 * 64 * 2)  # Two layers, 8 tokens, 1 head of 64, bf16.
    self.assertEqual(int8_bytes + scale_bytes, 2 * 8 * (64 + 4))  # 0.53x of bf16.


class WindowRingBufferTest(parameterized.TestCase):
  """``eviction="window"``: W slots decode a sliding-window model exactly, for every PE."""

  def _check(self, name, *, window=5, capacity=5, **options):
    model = _model(pe=name, sliding_window=window, **options)
    tokens = _tokens()
    full = _forward(model, tokens)
    decoded, cache = _stream(model, tokens, model.init_cache(2, capacity, eviction="window"),
                             prompt=3)
    tolerance = 1e-4 if model.pe.length_dependent else 2e-5
    chex.assert_trees_all_close(decoded, full, atol=tolerance, rtol=tolerance)
    self.assertEqual(int(cache.length), LENGTH)
    chex.assert_shape(cache.keys[0], (2, capacity, TINY["num_kv_heads"], model.config.head_dim))
    # A chunked prefill longer than the ring, then another chunk.
    cache = model.init_cache(2, capacity, eviction="window")
    first, cache = _prefill(model, tokens[:, :9], cache)
    second, cache = _prefill(model, tokens[:, 9:], cache)
    chex.assert_trees_all_close(jnp.concatenate([first, second], axis=1), full,
                                atol=tolerance, rtol=tolerance)

  @parameterized.parameters("rope", "alibi")
  def test_fast_tier(self, name):
    self._check(name)

  @parameterized.named_parameters(*((n, n) for n in pe_names()))
  @pytest.mark.slow
  def test_every_pe(self, name):
    if registry.get_pe_class(name).length_dependent:  # Frequencies of the whole length.
      return
    # More slots than the window: the mask still applies it. One layer, as for quantization.
    self._check(name, capacity=7, num_layers=1)

  @pytest.mark.slow
  def test_rotated_keys(self):
    self._check("rope", cache_rotated_keys=True)

  def test_int8_ring_equals_int8_linear_cache(self):
    model = _model(pe="alibi", sliding_window=5)
    tokens = _tokens()
    ring, _ = _stream(model, tokens, model.init_cache(2, 5, eviction="window", dtype="int8"),
                      prompt=3)
    linear, _ = _stream(model, tokens, model.init_cache(2, LENGTH, dtype="int8"), prompt=3)
    chex.assert_trees_all_close(ring, linear, atol=2e-5, rtol=2e-5)

  def test_memory_is_independent_of_the_generated_length(self):
    model = _model(pe="rope", sliding_window=4)
    cache = model.init_cache(1, 4, eviction="window")
    before = _cache_bytes(cache)
    _, cache = _stream(model, _tokens(1, 40), cache, prompt=2)
    self.assertEqual(int(cache.length), 40)  # Never overflows ...
    self.assertEqual(_cache_bytes(cache), before)  # ... and never grows.
    self.assertEqual(sorted(np.asarray(cache.positions[0]).tolist()), [36, 37, 38, 39])

  def test_generate_with_a_ring_buffer_equals_the_full_cache(self):
    model = _model(pe="rope", sliding_window=6)
    prompts = np.asarray(_tokens(2, 9))
    full = pejax.generate(model, prompts, max_new_tokens=12)
    ring = pejax.generate(model, prompts, max_new_tokens=12, cache_eviction="window",
                          cache_size=6)
    chex.assert_trees_all_equal(ring, full)

  @pytest.mark.slow
  def test_ragged_prompts_in_a_ring_buffer(self):
    # Left padding takes ring slots too: each row still generates what it would alone.
    model = _model(pe="rope", sliding_window=6)
    ragged = [[1, 2, 3, 4, 5, 6, 7, 8, 9], [4, 5, 6], [7]]
    ring = pejax.generate(model, ragged, max_new_tokens=12, cache_eviction="window",
                          cache_size=6)
    for row, prompt in enumerate(ragged):
      alone = pejax.generate(model, [prompt], max_new_tokens=12)
      chex.assert_trees_all_equal(ring[row], alone[0])


class AttentionSinksTest(parameterized.TestCase):
  """``eviction="sinks"``: the first S tokens plus a ring, positions assigned in the cache."""

  def _check_one_layer(self, name, *, sinks=2, capacity=6):
    # One layer: the cached keys/values are projections of the token embeddings alone, so every
    # step equals a full forward pass over the tokens the cache keeps (sinks + the most recent,
    # positions 0 .. T in that order), the definition of StreamingLLM.
    model = _model(pe=name, num_layers=1)
    tokens = _tokens()
    decoded, cache = _stream(
        model, tokens, model.init_cache(2, capacity, eviction="sinks", sink_tokens=sinks),
        prompt=3)
    recent = capacity - sinks
    chex.assert_tree_all_finite(decoded)
    if model.pe.has_features and model.pe.key_feature_shape() is not None:
      # FoX: the forget gates of evicted tokens stay in the decay; PaTH: a kept token's transform
      # came from its own neighbours (the short convolution), not from the kept ones (documented).
      return
    for t in range(3, LENGTH):
      kept = list(range(min(sinks, t))) + list(range(max(sinks, t - recent), t + 1))
      expected = _forward(model, tokens[:, jnp.array(kept)])[:, -1]
      chex.assert_trees_all_close(decoded[:, t], expected, atol=2e-5, rtol=2e-5)
    self.assertEqual(_cache_bytes(cache), _cache_bytes(
        model.init_cache(2, capacity, eviction="sinks", sink_tokens=sinks)))

  @parameterized.parameters("rope", "alibi")
  def test_fast_tier(self, name):
    self._check_one_layer(name)

  @parameterized.named_parameters(*((n, n) for n in pe_names() if _relative(n)))
  @pytest.mark.slow
  def test_every_relative_pe(self, name):
    self._check_one_layer(name)

  def test_rope_scaling_and_int8(self):
    self._check_one_layer(RotaryConfig(scaling=YaRNScaling(factor=4.0, original_max_position=4)))
    model = _model(pe="alibi", num_layers=1)
    tokens = _tokens()
    quantized, _ = _stream(model, tokens, model.init_cache(2, 6, eviction="sinks",
                                                           sink_tokens=2, dtype="int8"), prompt=3)
    exact, _ = _stream(model, tokens, model.init_cache(2, 6, eviction="sinks", sink_tokens=2),
                       prompt=3)
    self.assertLess(float(jnp.max(jnp.abs(quantized - exact))), 0.05)

  def test_deep_model_equals_full_forward_until_the_first_eviction(self):
    model = _model(pe="rope", num_layers=3)
    tokens = _tokens()
    decoded, _ = _stream(model, tokens, model.init_cache(2, 8, eviction="sinks", sink_tokens=2),
                         prompt=3)
    full = _forward(model, tokens)
    chex.assert_trees_all_close(decoded[:, :9], full[:, :9], atol=2e-5, rtol=2e-5)
    self.assertGreater(float(jnp.max(jnp.abs(decoded[:, 10:] - full[:, 10:]))), 1e-3)
    chex.assert_tree_all_finite(decoded)

  def test_bad_settings(self):
    model = _model(pe="rope")
    with self.assertRaisesRegex(ValueError, "sink_tokens must be in"):
      model.init_cache(1, 4, eviction="sinks", sink_tokens=4)
    with self.assertRaisesRegex(ValueError, "sink_tokens applies to eviction='sinks'"):
      model.init_cache(1, 4, eviction="window", sink_tokens=1)
    with self.assertRaisesRegex(ValueError, "eviction must be one of"):
      model.init_cache(1, 4, eviction="lru")
    with self.assertRaisesRegex(ValueError, "dtype must be"):
      model.init_cache(1, 4, dtype="int4")
    rotated = _model(pe="rope", cache_rotated_keys=True)
    with self.assertRaisesRegex(ValueError, "cache_rotated_keys=False"):
      rotated.init_cache(1, 4, eviction="sinks", sink_tokens=1)
    rotated.init_cache(1, 4, eviction="window")  # Text positions: rotated keys are fine.
    _model(pe="alibi", cache_rotated_keys=True).init_cache(1, 4, eviction="sinks",
                                                           sink_tokens=1)

  def test_generate_settings_are_checked_before_tracing(self):
    model = _model(pe="rope")
    prompt = np.zeros((1, 3), np.int32)
    with self.assertRaisesRegex(ValueError, "cache_size must be given"):
      pejax.generate(model, prompt, max_new_tokens=2, cache_eviction="sinks", sink_tokens=1)
    with self.assertRaisesRegex(ValueError, r"cache_size \(4\) must hold"):
      pejax.generate(model, prompt, max_new_tokens=2, cache_size=4)
    with self.assertRaisesRegex(ValueError, "cache_dtype.*dtype must be"):
      pejax.generate(model, prompt, max_new_tokens=2, cache_dtype="int4")
    out = pejax.generate(model, prompt, max_new_tokens=9, cache_eviction="sinks",
                         cache_size=4, sink_tokens=1, cache_dtype="fp8")
    chex.assert_shape(out, (1, 9))


if __name__ == "__main__":
  absltest.main()
