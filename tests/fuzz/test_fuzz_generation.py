"""Fuzz properties of the newer APIs (issue 44): sampling and generation, the KV cache and its
memory figure, the Hugging Face save / load round trip, and the learned-parameter PE functions.

The oracle is fuzz_support's: a draw raises a ``ValueError`` (or ``TypeError``) naming the
argument, or returns the reference result; under ``jax.jit`` a value the eager call rejects gives
NaN, never a finite wrong number. Models are tiny and built once per module (their programs
compile once per shape), so the default profile runs in seconds.
"""

from __future__ import annotations

import functools
import math
import pathlib
import tempfile

from flax import nnx
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np

import fuzz_support as fz
import pejax.hf
from pejax.encodings import fire_normalized_distance
from pejax.encodings import kerple_bias
from pejax.nn import Decoder, DecoderConfig, generate, init_kv_cache, sample_logits

# Every draw here runs a model or writes files: a quarter of the profile's draws.
_FEWER = settings(max_examples=max(4, settings().max_examples // 4), deadline=None)
_VOCAB = 16


@functools.lru_cache(maxsize=None)
def _model(pe: str = "rope") -> Decoder:
  return Decoder(DecoderConfig(num_layers=1, d_model=16, num_heads=2, vocab_size=_VOCAB, pe=pe),
                 rngs=nnx.Rngs(0))


@nnx.jit
def _forward(model: Decoder, tokens: jax.Array) -> jax.Array:
  """The oracles' forward pass: one program a shape, not one per primitive (issue 44: eager
  calls here were most of this file's programs)."""
  return model(tokens)


_SAMPLING_NAMES = ("temperature", "top_k", "top_p", "logits", "key")


@st.composite
def _logit_rows(draw):
  shape = draw(st.sampled_from([(1, _VOCAB), (3, _VOCAB)]))
  logits = np.random.default_rng(draw(st.integers(0, 2 ** 16))).normal(size=shape)
  logits = logits.astype(np.float32)
  poison = draw(st.sampled_from(["none", "nan", "all_inf", "some_inf"]))
  if poison == "nan":
    logits[0, 3] = np.nan
  elif poison == "all_inf":
    logits[0] = -np.inf
  elif poison == "some_inf":
    logits[0, : _VOCAB // 2] = -np.inf
  return logits


@given(logits=_logit_rows(),
       temperature=st.one_of(st.sampled_from([0.0, 0.5, 1.0, 2.0]),
                             st.sampled_from([-1.0, math.nan, math.inf, True, "1"])),
       top_k=st.one_of(st.none(), st.integers(1, _VOCAB + 2),
                       st.sampled_from([0, -1, 2.5, True])),
       top_p=st.one_of(st.none(), st.sampled_from([0.1, 0.5, 0.9, 1.0]),
                       st.sampled_from([0.0, -0.1, 1.5, math.nan, True])),
       seed=st.integers(0, 100))
@settings(deadline=None)
def test_sample_logits(logits, temperature, top_k, top_p, seed):
  key = jax.random.key(seed)
  outcome = fz.run(lambda: sample_logits(jnp.asarray(logits), key, temperature=temperature,
                                         top_k=top_k, top_p=top_p), _SAMPLING_NAMES)
  if outcome.error is not None:
    return
  tokens = np.asarray(outcome.value)
  assert tokens.shape == (logits.shape[0],)
  for row, token in zip(logits, tokens):
    if np.isnan(row).any() or not np.isfinite(row).any():
      assert token == -1, f"a poisoned row must sample -1, got {token}"  # Documented.
      continue
    assert 0 <= token < _VOCAB and np.isfinite(row[token]), (token, row)
    if temperature == 0:
      assert token == int(np.argmax(row))
      continue
    finite = np.sort(row[np.isfinite(row)])[::-1]
    if top_k is not None:  # The token is among the k most likely.
      assert row[token] >= finite[min(top_k, finite.size) - 1]
    if top_p is not None:  # ... and inside the nucleus of mass top_p.
      probs = np.exp((finite - finite[0]) / temperature)
      probs = probs / probs.sum()
      kept = int(np.searchsorted(np.cumsum(probs), top_p - 1e-6)) + 1
      assert row[token] >= finite[min(kept, finite.size) - 1] - 1e-6


@given(shape=st.sampled_from([(1, 3), (2, 4)]),
       max_new_tokens=st.one_of(st.integers(1, 3), st.sampled_from([0, -1, 2.5, True])),
       bad_token=st.sampled_from([None, -1, _VOCAB]),
       seed=st.integers(0, 100))
@_FEWER
def test_generate_greedy_equals_repeated_forward_argmax(shape, max_new_tokens, bad_token, seed):
  model = _model()
  prompt = np.random.default_rng(seed).integers(0, _VOCAB, size=shape).astype(np.int32)
  if bad_token is not None:
    prompt[0, 1] = bad_token
  outcome = fz.run(lambda: generate(model, jnp.asarray(prompt), max_new_tokens=max_new_tokens),
                   ("max_new_tokens", "prompt_tokens", "token"))
  if outcome.error is not None:
    return
  out = np.asarray(outcome.value)  # The new tokens only.
  assert out.shape == (shape[0], max_new_tokens) and out.dtype == np.int32
  tokens = prompt
  for _ in range(max_new_tokens):  # The oracle: a full forward pass per new token.
    logits = _forward(model, jnp.asarray(tokens))
    tokens = np.concatenate([tokens, np.argmax(np.asarray(logits[:, -1]), -1)[:, None]], 1)
  np.testing.assert_array_equal(out, tokens[:, shape[1]:])


_SIZE = st.one_of(st.integers(1, 4), st.sampled_from([0, -2, 2.5, True]))


@given(num_layers=_SIZE, batch_size=_SIZE, max_length=_SIZE, num_kv_heads=_SIZE,
       head_dim=_SIZE, dtype=st.sampled_from(["float32", "bfloat16", "int8", "fp8", "int3"]),
       features=st.sampled_from([(), "per_layer", "wrong_count", "bad_shape"]))
@settings(deadline=None)
def test_init_kv_cache_shapes_or_a_named_error(num_layers, batch_size, max_length,
                                                num_kv_heads, head_dim, dtype, features):
  layers = num_layers if isinstance(num_layers, int) and num_layers > 0 else 1
  feature_shapes = {(): (), "per_layer": ((2,),) * layers, "wrong_count": ((2,),) * (layers + 1),
                    "bad_shape": ((-2,),) * layers}[features]
  outcome = fz.run(lambda: init_kv_cache(
      num_layers=num_layers, batch_size=batch_size, max_length=max_length,
      num_kv_heads=num_kv_heads, head_dim=head_dim, dtype=dtype, feature_shapes=feature_shapes),
      ("num_layers", "batch_size", "max_length", "num_kv_heads", "head_dim", "dtype",
       "feature_shapes"))
  if outcome.error is not None:
    return
  cache = outcome.value
  assert len(cache.keys) == len(cache.values) == num_layers
  for array in (*cache.keys, *cache.values):
    assert array.shape == (batch_size, max_length, num_kv_heads, head_dim)
  assert cache.positions.shape == (batch_size, max_length) and int(cache.length) == 0
  for array in cache.features:
    assert array is None or array.shape == (batch_size, max_length, 2)


@given(num_layers=st.integers(1, 3), num_heads=st.sampled_from([2, 4]),
       kv_divisor=st.sampled_from([1, 2]), seq_len=_SIZE, batch_size=_SIZE,
       dtype=st.sampled_from(["float32", "bfloat16", "int8", "fp8"]))
@settings(deadline=None)
def test_kv_cache_memory_is_what_init_cache_allocates(num_layers, num_heads, kv_divisor,
                                                      seq_len, batch_size, dtype):
  config = DecoderConfig(num_layers=num_layers, d_model=8 * num_heads, num_heads=num_heads,
                         num_kv_heads=num_heads // kv_divisor, vocab_size=_VOCAB)
  outcome = fz.run(lambda: pejax.hf.kv_cache_memory(config, seq_len=seq_len,
                                                   batch_size=batch_size, dtype=dtype),
                   ("seq_len", "batch_size", "dtype"))
  if outcome.error is not None:
    return
  cache = init_kv_cache(num_layers=num_layers, batch_size=batch_size, max_length=seq_len,
                        num_kv_heads=config.kv_heads, head_dim=config.head_dim, dtype=dtype)
  allocated = sum(a.nbytes for a in (*cache.keys, *cache.values, *cache.key_scales,
                                     *cache.value_scales))
  assert outcome.value == allocated, (outcome.value, allocated)


@given(num_layers=st.integers(1, 2), num_heads=st.sampled_from([2, 4]),
       kv_divisor=st.sampled_from([1, 2]), tie=st.booleans(),
       base=st.sampled_from([10000.0, 500.0]), seed=st.integers(0, 2 ** 16),
       model_type=st.sampled_from([None, "llama", "qwen2", "mistral"]))
@_FEWER
def test_save_then_load_gives_the_same_logits(num_layers, num_heads, kv_divisor, tie, base,
                                              seed, model_type):
  from pejax.nn.positional import RotaryConfig  # pylint: disable=g-import-not-at-top
  config = DecoderConfig(num_layers=num_layers, d_model=8 * num_heads, num_heads=num_heads,
                         num_kv_heads=num_heads // kv_divisor, vocab_size=_VOCAB,
                         tie_embeddings=tie, scale_embeddings=False,
                         pe=RotaryConfig(base=base))
  model = Decoder(config, rngs=nnx.Rngs(seed))
  tokens = jnp.asarray(np.random.default_rng(seed).integers(0, _VOCAB, (1, 5)), jnp.int32)
  with tempfile.TemporaryDirectory() as directory:
    outcome = fz.run(lambda: pejax.hf.save_pretrained(model, directory, model_type=model_type),
                     ("model_type", "tie", "qwen2"))
    if outcome.error is not None:
      return
    loaded = pejax.hf.from_pretrained(directory)
    assert not any(pathlib.Path(directory).glob("*.tmp-*"))  # No temporary file left.
  np.testing.assert_array_equal(np.asarray(_forward(loaded, tokens)),
                                np.asarray(_forward(model, tokens)))


_Q = jnp.arange(6)[None]


@given(r1=fz.float_arrays([(2,)], dtypes=[jnp.float32]),
       r2=fz.float_arrays([(2,)], dtypes=[jnp.float32]),
       kind=st.sampled_from(["log", "power"]))
@settings(deadline=None)
def test_kerple_traced_parameters(r1, r2, kind):
  eager = fz.run(lambda: kerple_bias(_Q, _Q, r1, r2, kind=kind), ("r1", "r2"))
  if eager.error is None:
    fz.assert_finite(eager.value)
  # Per head: the jitted bias equals the eager one on valid heads and is NaN on invalid ones.
  jitted = np.asarray(jax.jit(lambda a, b: kerple_bias(_Q, _Q, a, b, kind=kind))(r1, r2))
  for head in range(2):
    head_eager = fz.run(lambda h=head: kerple_bias(_Q, _Q, r1[h:h + 1], r2[h:h + 1], kind=kind),
                        ("r1", "r2"))
    if head_eager.error is None:
      np.testing.assert_allclose(jitted[:, head:head + 1], head_eager.value, rtol=1e-6)
    else:
      assert np.isnan(jitted[:, head]).all()


@given(c=st.one_of(st.floats(0.01, 2.0), st.sampled_from(fz.BAD_FLOATS)),
       threshold=st.one_of(st.floats(1.0, 600.0), st.sampled_from(fz.BAD_FLOATS)))
@settings(deadline=None)
def test_fire_traced_scalars(c, threshold):
  eager = fz.run(lambda: fire_normalized_distance(_Q, _Q, c=c, threshold=threshold),
                 ("c", "threshold"))
  fz.check_jit(lambda: jax.jit(lambda a, b: fire_normalized_distance(_Q, _Q, c=a, threshold=b))(
      jnp.float32(c), jnp.float32(threshold)), eager, ("c", "threshold"), atol=1e-6)
