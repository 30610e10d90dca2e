"""Fuzz properties of attention (dense / blockwise), the decoder's entry points (forward,
prefill, decode_step) and ``DecoderConfig`` (issue 16).

Attention is compared with a NumPy softmax reference; the decoder with its own eager / jitted
calls (bad token ids: ``ValueError`` eager, NaN under jit from the bad token on).
"""

from __future__ import annotations

import functools
import math

from flax import nnx
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np

import fuzz_support as fz
from pejax.encodings import alibi
from pejax.encodings import rope_scaling
from pejax.nn import Decoder, DecoderConfig, pe_config, pe_names
from pejax.nn.positional import RotaryConfig
from pejax.nn.positional import registry
from pejax.nn.attention import attention

# Attention and decoder draws compile (or dispatch a whole model eagerly): a quarter of the
# profile's draws (5 by default, 250 with --hypothesis-profile=long).
_FEWER = settings(max_examples=max(4, settings().max_examples // 4))
_SLOPES = np.asarray(alibi.alibi_slopes(2))


def _bias_fn(q_positions, k_positions):
  """A per-head distance bias of the positions, ``[B|1, 2, Lq, Lk]`` (ALiBi, non-causal form)."""
  return alibi.alibi_bias(q_positions, k_positions, _SLOPES, causal=False)


def _attention_ref(q, k, v, q_pos, k_pos, *, bias, causal, q_offset, q_seg, k_seg):
  q, k, v = (np.asarray(a.astype(jnp.float32), np.float64) for a in (q, k, v))
  groups = q.shape[2] // k.shape[2]
  k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
  logits = np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
  if bias:
    offset = -np.abs(k_pos.astype(np.float64)[:, None, :] - q_pos.astype(np.float64)[:, :, None])
    logits = logits + _SLOPES[None, :, None, None] * offset[:, None]
  mask = np.ones(logits.shape[-2:], bool)
  if causal:
    mask = np.arange(k.shape[1])[None, :] <= (q_offset + np.arange(q.shape[1]))[:, None]
  mask = np.broadcast_to(mask, logits.shape)
  if q_seg is not None:
    mask = mask & (q_seg[:, None, :, None] == k_seg[:, None, None, :])
  logits = np.where(mask, logits, -1e30)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs = np.where(mask, probs, 0.0) if np.any(mask.any(-1)) else probs
  rows_empty = ~mask.any(-1, keepdims=True)
  probs = np.where(rows_empty, 1.0, probs)  # a query that sees no key averages all values
  probs = probs / probs.sum(-1, keepdims=True)
  return np.einsum("bhqk,bkhd->bqhd", probs, v)


_ATTENTION_NAMES = ("q", "k", "v", "q_positions", "k_positions", "block_size", "implementation",
                    "segment_ids", "bias")
_jit_attention = jax.jit(attention, static_argnames=(
    "bias", "implementation", "causal", "q_offset", "block_size"))


@_FEWER
@given(lengths=st.sampled_from([(4, 4), (2, 4)]), kv_heads=st.sampled_from([1, 2]),
       dtype=st.sampled_from([jnp.float32, jnp.bfloat16]),
       q_pos=fz.int_arrays(((2, 4), (1, 4), (1, 2), (2, 3)), low=-2 ** 20, high=2 ** 20,
                           dtypes=(np.int32, np.int8)),
       k_pos=fz.int_arrays(((1, 4), (2, 4)), low=-2 ** 20, high=2 ** 20,
                           dtypes=(np.int32, np.int16)),
       bias=st.booleans(), causal=st.booleans(), segments=st.booleans(),
       implementation=st.sampled_from(["dense", "blockwise", "flash"]),
       block_size=fz.int_hyper(st.sampled_from([2, 3, 512]), huge=False),
       seed=st.integers(0, 100))
def test_attention(lengths, kv_heads, dtype, q_pos, k_pos, bias, causal, segments,
                   implementation, block_size, seed):
  q_len, k_len = lengths
  rng = np.random.default_rng(seed)
  q = jnp.asarray(rng.normal(size=(2, q_len, 2, 4)), dtype)
  k = jnp.asarray(rng.normal(size=(2, k_len, kv_heads, 4)), dtype)
  v = jnp.asarray(rng.normal(size=(2, k_len, kv_heads, 4)), dtype)
  k_seg = np.asarray([[0, 0, 1, 1], [0, 1, 1, 1]], np.int32)
  q_seg = k_seg[:, k_len - q_len:]
  q_offset = k_len - q_len
  kwargs = dict(q_positions=q_pos, k_positions=k_pos, bias=_bias_fn if bias else None,
                implementation=implementation, causal=causal, q_offset=q_offset,
                q_segment_ids=q_seg if segments else None,
                k_segment_ids=k_seg if segments else None, block_size=block_size)
  # Every check of attention is static (shapes, dtypes, choices), so jit and eager raise alike;
  # the eager call is made when it must raise (cheap), the jitted one always (an eager call
  # compiles its loops anyway).
  jitted = fz.run(lambda: _jit_attention(q, k, v, **kwargs), _ATTENTION_NAMES)
  if jitted.error is not None:
    assert fz.run(lambda: attention(q, k, v, **kwargs), _ATTENTION_NAMES).error is not None
    return
  fz.assert_finite(jitted.value)
  expected = _attention_ref(q, k, v, np.broadcast_to(q_pos, (2, q_len)),
                            np.broadcast_to(k_pos, (2, k_len)), bias=bias, causal=causal,
                            q_offset=q_offset, q_seg=q_seg if segments else None,
                            k_seg=k_seg if segments else None)
  fz.assert_close(jitted.value, expected, atol=1e-4 if dtype == jnp.float32 else 6e-2,
                  rtol=1e-3)


# --------------------------------------------------------------------------------------------
# The decoder.

V = 16


@functools.lru_cache(maxsize=None)
def _model() -> Decoder:
  return Decoder(DecoderConfig(vocab_size=V, d_model=16, num_heads=2, num_layers=1, pe="rope"),
                 rngs=nnx.Rngs(0))


_forward = nnx.jit(lambda model, tokens, positions: model(tokens, positions=positions))
_prefill = nnx.jit(lambda model, tokens, positions, cache: model.prefill(tokens, positions,
                                                                         cache))
_decode = nnx.jit(lambda model, token, position, cache: model.decode_step(token, position,
                                                                          cache))
_TOKEN_DTYPES = (np.int8, np.int32, np.int64, np.uint8, np.uint32)


def _first_bad(tokens: np.ndarray) -> np.ndarray:
  """Per row, the index of the first out-of-range token (the length if none)."""
  bad = (tokens.astype(np.int64) < 0) | (tokens.astype(np.int64) >= V)
  return np.where(bad.any(1), bad.argmax(1), tokens.shape[1])


_forward_with = nnx.jit(lambda model, tokens, positions, attention: model(
    tokens, positions=positions, attention=attention), static_argnums=3)


@_FEWER
@given(tokens=st.one_of(fz.int_arrays(((2, 6),), low=0, high=V - 1, dtypes=_TOKEN_DTYPES),
                        fz.int_arrays(((2, 6),), low=-3, high=V + 2, dtypes=_TOKEN_DTYPES),
                        fz.int_arrays(((2, 6), (6,)), low=-2 ** 40, high=2 ** 40,
                                      dtypes=(np.int64,))),
       positions=st.none() | fz.int_arrays(((2, 6), (1, 6), (2, 5)), low=-2 ** 31,
                                           high=2 ** 31, dtypes=(np.int32, np.int64)))
def test_decoder_forward(tokens, positions):
  """Bad ids or shapes: ``ValueError`` eagerly; under jit NaN from the first bad token of each
  row on, the earlier positions (which do not see it causally) equal to the run with the bad
  ids replaced by 0, or NaN. Valid draws: finite logits, dense == blockwise attention.

  Jitted calls take the same values as int32 ``[2, 6]`` arrays (one compilation); an eager
  forward pass dispatches op by op and is left to the decoder's own tests.
  """
  model = _model()
  names = ("tokens", "positions")
  shapes_ok = tokens.shape == (2, 6) and (positions is None or (
      positions.shape[-1] == 6 and _fits_int32(positions)))
  ids_ok = _fits_int32(tokens) and np.all(_first_bad(tokens) == tokens.shape[-1])
  if not (shapes_ok and ids_ok):
    assert fz.run(lambda: model(tokens, positions=positions), names).error is not None
  if not shapes_ok or not _fits_int32(tokens):
    return  # jax.jit itself would wrap int64 arguments (pass int32 under jit).
  tokens32 = tokens.astype(np.int32)
  positions32 = np.broadcast_to(np.arange(6, dtype=np.int32) if positions is None else
                                positions.astype(np.int32), (2, 6))
  jitted = np.asarray(_forward(model, tokens32, positions32))
  if ids_ok:
    fz.assert_finite(jitted)
    blockwise = _forward_with(model, tokens32, positions32, "blockwise")
    fz.assert_close(blockwise, jitted, atol=1e-4)
    return
  clean = np.where((tokens.astype(np.int64) < 0) | (tokens.astype(np.int64) >= V), 0,
                   tokens).astype(np.int32)
  reference = np.asarray(_forward(model, clean, positions32))
  for row, first in enumerate(_first_bad(tokens)):
    assert np.all(np.isnan(jitted[row, first:])), "bad token gave finite logits under jit"
    head = jitted[row, :first]
    finite = np.isfinite(head)
    np.testing.assert_allclose(head[finite], reference[row, :first][finite], atol=1e-5)


def _fits_int32(x: np.ndarray) -> bool:
  info = np.iinfo(np.int32)
  return x.size == 0 or (int(x.min()) >= info.min and int(x.max()) <= info.max)


@_FEWER
@given(capacity=st.sampled_from([4, 5, 6]),
       tokens=fz.int_arrays(((2, 6),), low=-1, high=V, dtypes=(np.int32,)),
       positions=fz.int_arrays(((2, 6),), low=-5, high=2 ** 20, dtypes=(np.int32,)))
def test_decoder_prefill_and_decode_step(capacity, tokens, positions):
  """Prefill 2 tokens, decode 4 one by one (any positions: negative, non-monotone, per row).

  Until a bad id or a cache overflow, the jitted steps equal the full forward pass over the same
  tokens and positions (RoPE: exact). At the first bad step the eager call raises ``ValueError``
  naming the argument (the eager cache is the jitted one, so the check runs on concrete values)
  and the jitted logits are NaN (all of them for an overflow, the bad rows for a bad id).
  """
  model = _model()
  names = ("tokens", "token", "max_length")
  full = np.asarray(_forward(model, np.clip(tokens, 0, V - 1), positions))
  cache = model.init_cache(2, capacity)
  for start, end in ((0, 2), (2, 3), (3, 4), (4, 5), (5, 6)):
    tok, pos = tokens[:, start:end], positions[:, start:end]
    step = model.prefill if start == 0 else model.decode_step
    bad_rows = np.any((tok < 0) | (tok >= V), axis=1)
    overflow = end > capacity
    jit_step = _prefill if start == 0 else _decode
    logits, next_cache = jit_step(model, tok, pos, cache)
    logits = np.asarray(logits)
    if overflow or bad_rows.any():
      raise_seen = fz.run(lambda: step(tok, pos, cache), names).error is not None
      assert raise_seen, "eager call accepted a bad id / an overflowing cache"
      poisoned = logits if overflow else logits[bad_rows]
      assert np.all(np.isnan(poisoned)), "jit gave finite logits for a bad step"
      return
    fz.assert_finite(logits)
    fz.assert_close(logits, full[:, start:end], atol=1e-4)
    cache = next_cache


# --------------------------------------------------------------------------------------------
# DecoderConfig: every field validated on construction.

_SCALINGS = (None, rope_scaling.LinearScaling(2.0), rope_scaling.YaRNScaling(4.0, 16))
# Fields of the PE configs, drawn for every PE and passed to those that have them.
_PE_FIELDS = dict(
    base=fz.float_hyper(st.just(10000.0)),
    fraction=fz.float_hyper(st.sampled_from([1.0, 0.5])) | st.just(1.5),
    scaling=st.sampled_from(_SCALINGS), max_position=fz.int_hyper(st.just(64)),
    num_buckets=fz.int_hyper(st.just(8)), max_distance=fz.int_hyper(st.just(32)))


def _decoder_config(pe, pe_fields, stray_scaling, fields):
  """``DecoderConfig`` with a PE config built from the drawn fields the PE has (a registered
  name; anything else goes to ``DecoderConfig`` as is); ``stray_scaling`` also passes the
  drawn RoPE scaling to a PE without that field (it must be rejected)."""
  if pe in pe_names():
    own = registry.get_pe_class(pe).config_class.field_types()
    chosen = {k: v for k, v in pe_fields.items() if k in own}
    if stray_scaling and "scaling" not in own:
      chosen["scaling"] = pe_fields["scaling"]
    pe = pe_config(pe, **chosen)
  return DecoderConfig(pe=pe, **fields)


@given(data=st.data())
def test_decoder_config(data):
  fields = dict(
      vocab_size=fz.int_hyper(st.just(32)), num_layers=fz.int_hyper(st.just(2)),
      d_model=fz.int_hyper(st.sampled_from([16, 24]), huge=False),
      num_heads=fz.int_hyper(st.sampled_from([2, 4]), huge=False),
      num_kv_heads=st.none() | fz.int_hyper(st.sampled_from([1, 2, 3]), huge=False),
      mlp=st.sampled_from(["swiglu", "gelu", "relu"]), mlp_ratio=fz.float_hyper(st.just(2.0)),
      dtype=st.sampled_from(["float32", "bfloat16", "float16"]),
      norm_epsilon=fz.float_hyper(st.just(1e-6)),
      attention=st.sampled_from(["auto", "dense", "blockwise", "flash"]),
      block_size=fz.int_hyper(st.just(8)), blockwise_threshold=fz.int_hyper(st.just(64)))
  drawn = {name: data.draw(strategy, name) for name, strategy in fields.items()}
  pe = data.draw(st.sampled_from(pe_names() + ("xyz",)), "pe")
  pe_fields = {name: data.draw(strategy, name) for name, strategy in _PE_FIELDS.items()}
  stray = data.draw(st.booleans(), "stray_scaling") and pe_fields["scaling"] is not None
  outcome = fz.run(lambda: _decoder_config(pe, pe_fields, stray, drawn),
                   tuple(fields) + tuple(_PE_FIELDS) + (
                       "pe", "head_dim", "rotary_dim", "d_model", "layout"))
  if outcome.error is not None:
    return
  config = outcome.value
  # Whatever was accepted is usable: the documented invariants hold.
  assert config.d_model % config.num_heads == 0
  assert config.num_heads % config.kv_heads == 0
  # A RoPE scaling given to a PE without a scaling field is never silently dropped.
  assert not (stray and "scaling" not in type(config.pe).field_types()), config
  assert config.pe_name == pe
  for name in ("vocab_size", "num_layers", "block_size", "blockwise_threshold"):
    value = getattr(config, name)
    assert isinstance(value, int) and not isinstance(value, bool) and value >= 1
  for name in ("mlp_ratio", "norm_epsilon"):
    assert math.isfinite(getattr(config, name)) and getattr(config, name) > 0
  if isinstance(config.pe, RotaryConfig):
    assert math.isfinite(config.pe.base) and config.pe.base > 1
    assert 0 < config.pe.fraction <= 1
