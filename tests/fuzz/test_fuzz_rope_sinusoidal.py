"""Fuzz properties of the 1-D transforms: sinusoidal, RoPE (config, frequencies, rotation,
layouts), ALiBi, T5 buckets, randomized positions (issue 16).

Each property: a draw raises ``ValueError`` naming the bad argument, or gives a finite result
equal to a NumPy reference; the jitted call gives the eager result, the same error or NaN.
"""

from __future__ import annotations

import math

from hypothesis import example
from hypothesis import given
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fuzz_support as fz
from pejax.encodings import alibi
from pejax.encodings import randomized
from pejax.encodings import rope
from pejax.encodings import rope_scaling
from pejax.encodings import sinusoidal
from pejax.encodings import t5_buckets

_INT32 = np.iinfo(np.int32)
# Positions: the full range of every integer dtype, int64 beyond int32 included (must raise).
_POSITIONS_1D = ((5,), (2, 5), (1, 3))
_BAD_LAYOUTS = ("half", "interleaved", "halves", "")
# Fewer integer dtypes where each one compiles: one narrow, int32, int64 (past int32), uint32.
_ALIBI_DTYPES = (np.int8, np.int32, np.int64, np.uint32)


def _fits_int32(x: np.ndarray) -> bool:
  return x.size == 0 or (int(x.min()) >= _INT32.min and int(x.max()) <= _INT32.max)


def _angles_ref(positions: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
  """float32 angles with the library's single rounding, as float64 for the trig reference."""
  return (positions.astype(np.float32)[..., None] * inv_freq.astype(np.float32)).astype(
      np.float64)


# --------------------------------------------------------------------------------------------
# Sinusoidal.

def _sinusoid_ref(positions: np.ndarray, dim: int, base: float) -> np.ndarray:
  inv_freq = (base ** -(np.arange(0, dim, 2, dtype=np.float64) / dim)).astype(np.float32)
  angles = _angles_ref(positions, inv_freq)
  return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(positions.shape + (dim,))


_DIMS = fz.int_hyper(st.sampled_from([2, 4, 6]), huge=False) | st.sampled_from([3, 7])
_BASES = fz.float_hyper(st.sampled_from([10000.0, 10.0, 1.5])) | st.sampled_from([1.0, 0.9])

_jit_sinusoidal = jax.jit(sinusoidal.sinusoidal_embedding, static_argnames=("dim", "base",
                                                                            "dtype"))


@given(positions=fz.int_arrays(_POSITIONS_1D, low=-2 ** 40, high=2 ** 40), dim=_DIMS,
       base=_BASES, dtype=st.sampled_from(fz.FLOAT_DTYPES))
def test_sinusoidal_embedding(positions, dim, base, dtype):
  names = ("positions", "dim", "base")
  eager = fz.run(lambda: sinusoidal.sinusoidal_embedding(positions, dim, base=base, dtype=dtype),
                 names)
  if eager.error is None:
    fz.assert_finite(eager.value)
    fz.assert_close(eager.value, _sinusoid_ref(positions, dim, base), atol=fz.atol_for(dtype))
  else:
    assert _fits_int32(positions) is False or "dim" in str(eager.error) or "base" in str(
        eager.error)
  if _fits_int32(positions):  # jax.jit itself converts int64 arguments to int32 (wrapping).
    fz.check_jit(lambda: _jit_sinusoidal(positions, dim=dim, base=base, dtype=dtype), eager,
                 names, atol=fz.atol_for(dtype))


@given(num_positions=fz.int_hyper(st.integers(1, 9)), dim=_DIMS, base=_BASES)
def test_sinusoidal_table(num_positions, dim, base):
  eager = fz.run(lambda: sinusoidal.sinusoidal_table(num_positions, dim, base=base),
                 ("num_positions", "dim", "base"))
  if eager.error is None:
    fz.assert_close(eager.value, _sinusoid_ref(np.arange(num_positions), dim, base), atol=2e-6)


# --------------------------------------------------------------------------------------------
# RoPE: config, scalings and frequencies.

def _scaling(draw):
  kind = draw(st.sampled_from(["none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope"]))
  factor = draw(fz.float_hyper(st.sampled_from([1.0, 2.0, 8.0, 1.5])))
  original = draw(fz.int_hyper(st.sampled_from([8, 64])))
  if kind == "none":
    return None
  if kind == "linear":
    return rope_scaling.LinearScaling(factor)
  if kind == "ntk":
    return rope_scaling.NTKScaling(factor)
  if kind == "dynamic":
    return rope_scaling.DynamicNTKScaling(factor, original)
  if kind == "yarn":
    return rope_scaling.YaRNScaling(
        factor, original, beta_fast=draw(fz.float_hyper(st.just(32.0))),
        beta_slow=draw(fz.float_hyper(st.just(1.0))),
        attention_factor=draw(st.none() | fz.float_hyper(st.just(0.7))))
  if kind == "llama3":
    return rope_scaling.Llama3Scaling(factor, draw(fz.float_hyper(st.just(1.0))),
                                      draw(fz.float_hyper(st.just(4.0))), original)
  n = draw(st.sampled_from([2, 4]))
  long = tuple(draw(fz.float_hyper(st.just(2.0))) for _ in range(n))
  return rope_scaling.LongRoPEScaling((1.0,) * n, long, original,
                                      attention_factor=draw(st.none() | fz.float_hyper(
                                          st.just(1.2))))


_CONFIG_NAMES = ("head_dim", "base", "rotary_dim", "scaling", "layout", "factor",
                 "original_max_position", "beta_fast", "beta_slow", "attention_factor",
                 "low_freq_factor", "high_freq_factor", "short_factor", "long_factor",
                 "seq_len", "NTK", "mscale")
_rope_inv_freq_traced = jax.jit(lambda config, seq_len: rope.rope_inv_freq(config,
                                                                           seq_len=seq_len)[0],
                                static_argnums=0)


@given(data=st.data())
def test_rope_config_and_inv_freq(data):
  head_dim = data.draw(fz.int_hyper(st.sampled_from([4, 8]), huge=False) | st.just(6 + 1), "head_dim")
  base = data.draw(_BASES, "base")
  rotary_dim = data.draw(st.none() | st.sampled_from([2, 4, 3, 16, 0]), "rotary_dim")
  layout = data.draw(st.sampled_from(_BAD_LAYOUTS), "layout")
  seq_len = data.draw(st.none() | fz.int_hyper(st.sampled_from([4, 100])), "seq_len")

  def build():
    return rope.RopeConfig(head_dim, base=base, rotary_dim=rotary_dim, scaling=_scaling(
        data.draw), layout=layout)

  config = fz.run(build, _CONFIG_NAMES)
  if config.error is not None:
    return
  config = config.value
  eager = fz.run(lambda: rope.rope_inv_freq(config, seq_len=seq_len), _CONFIG_NAMES)
  if eager.error is not None:
    return
  inv_freq, factor = eager.value
  r = config.num_rotated
  assert inv_freq.shape == (r // 2,) and inv_freq.dtype == jnp.float32
  fz.assert_finite(inv_freq)
  assert np.all(np.asarray(inv_freq) > 0)
  assert isinstance(factor, float) and math.isfinite(factor) and factor > 0
  exponents = np.arange(0, r, 2, dtype=np.float64) / r
  if config.scaling is None:
    fz.assert_close(inv_freq, base ** -exponents, atol=0, rtol=1e-6)
  elif isinstance(config.scaling, rope_scaling.LinearScaling):
    fz.assert_close(inv_freq, base ** -exponents / config.scaling.factor, atol=0, rtol=1e-6)
  elif isinstance(config.scaling, rope_scaling.NTKScaling):
    scaled = base * config.scaling.factor ** (r / (r - 2))
    fz.assert_close(inv_freq, scaled ** -exponents, atol=0, rtol=1e-5)
  if isinstance(seq_len, int) and not isinstance(seq_len, bool) and 0 < seq_len < 2 ** 31:
    # A traced length (a jitted decode loop) gives the eager frequencies.
    fz.check_jit(lambda: _rope_inv_freq_traced(config, jnp.int32(seq_len)),
                 fz.Outcome(value=inv_freq), _CONFIG_NAMES, atol=0, rtol=2e-6)


# --------------------------------------------------------------------------------------------
# RoPE: angles and rotation.

_X_SHAPES = ((5, 2, 4), (2, 5, 1, 6))
_FACTORS = fz.float_hyper(st.sampled_from([1.0, 0.5, 1.3]))
_ROPE_NAMES = ("x", "positions", "inv_freq", "layout", "attention_factor", "rotated dims",
               "angles")
_jit_rope = jax.jit(lambda x, positions, inv_freq, factor, layout: rope.apply_rope(
    x, positions, inv_freq, layout=layout, attention_factor=factor), static_argnums=4)


@given(x=fz.float_arrays(_X_SHAPES), positions=fz.int_arrays(
    _POSITIONS_1D + ((7,),), low=-2 ** 31, high=2 ** 31, dtypes=_ALIBI_DTYPES),
       half=st.sampled_from([1, 2, 3]), base=st.sampled_from([10000.0, 2.0]),
       layout=st.sampled_from(_BAD_LAYOUTS), factor=_FACTORS)
# Regressions the fuzzer found: int64 positions past int32 (wrapped silently), a factor that
# overflows float32 (jax.jit warns when it casts 1e300 to float32: the traced value is inf).
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@example(x=jnp.ones((5, 2, 4)), positions=np.full((5,), 2 ** 31, np.int64), half=1, base=2.0,
         layout="half", factor=1.0)
@example(x=jnp.ones((5, 2, 4)), positions=np.arange(5), half=1, base=2.0, layout="half",
         factor=1e300)
def test_apply_rope(x, positions, half, base, layout, factor):
  inv_freq = jnp.asarray(base ** -(np.arange(half) / half), jnp.float32)
  eager = fz.run(lambda: rope.apply_rope(x, positions, inv_freq, layout=layout,
                                         attention_factor=factor), _ROPE_NAMES)
  scale = 8 * max(1.0, abs(factor) if math.isfinite(factor) else 1.0)
  if eager.error is None:
    fz.assert_finite(eager.value)
    assert eager.value.dtype == x.dtype and eager.value.shape == x.shape
    expected = fz.rotate_reference(x, _angles_ref(positions, np.asarray(inv_freq)), layout,
                                   factor)
    fz.assert_close(eager.value, expected, atol=fz.atol_for(x.dtype) * scale)
  if _fits_int32(positions) and layout in ("half", "interleaved"):
    # int32 positions (the same values) keep the number of compilations small.
    fz.check_jit(lambda: _jit_rope(x, positions.astype(np.int32), inv_freq, factor, layout),
                 eager, _ROPE_NAMES, atol=fz.atol_for(x.dtype) * scale)


@given(x=fz.float_arrays(((5, 2, 4),)), angle_shape=st.sampled_from([(5, 2), (5, 2, 2),
                                                                     (5, 1, 2), (4, 2), (5, 3)]),
       per_head=st.booleans(), layout=st.sampled_from(["half", "interleaved"]),
       factor=_FACTORS, seed=st.integers(0, 100))
def test_rotate_with_angles(x, angle_shape, per_head, layout, factor, seed):
  angles = jnp.asarray(np.random.default_rng(seed).uniform(-50, 50, angle_shape), jnp.float32)
  eager = fz.run(lambda: rope.rotate_with_angles(x, angles, layout=layout,
                                                 attention_factor=factor, per_head=per_head),
                 _ROPE_NAMES)
  if eager.error is None:
    fz.assert_finite(eager.value)
    expected = fz.rotate_reference(x, np.asarray(angles, np.float64), layout, factor,
                                   per_head=per_head)
    fz.assert_close(eager.value, expected, atol=fz.atol_for(x.dtype) * 8 * max(1.0, factor))


@given(head_dim=fz.int_hyper(st.sampled_from([4, 6, 8]), huge=False),
       rotary_dim=st.none() | st.sampled_from([2, 4, 3, 10]), num_heads=fz.int_hyper(
           st.sampled_from([1, 2]), huge=False), layouts=st.sampled_from([("half", "interleaved"),
                                                              ("interleaved", "half"),
                                                              ("half", "x")]))
def test_layout_permutation_and_weights(head_dim, rotary_dim, num_heads, layouts):
  names = ("head_dim", "rotary_dim", "num_heads", "from_layout", "to_layout", "w")
  perm = fz.run(lambda: rope.rope_layout_permutation(head_dim, rotary_dim=rotary_dim), names)
  if perm.error is not None:
    return
  perm = perm.value
  assert sorted(perm.tolist()) == list(range(head_dim))
  heads = num_heads if isinstance(num_heads, int) and 0 < num_heads < 8 else 1
  w = np.random.default_rng(0).normal(size=(3, heads * head_dim)).astype(np.float32)
  moved = fz.run(lambda: rope.permute_rope_weights(
      w, num_heads=num_heads, head_dim=head_dim, rotary_dim=rotary_dim, from_layout=layouts[0],
      to_layout=layouts[1]), names)
  if moved.error is not None:
    return
  back = rope.permute_rope_weights(moved.value, num_heads=num_heads, head_dim=head_dim,
                                   rotary_dim=rotary_dim, from_layout=layouts[1],
                                   to_layout=layouts[0])
  np.testing.assert_array_equal(back, w)
  # The two layouts are the same rotation up to the channel permutation (NumPy reference).
  r = head_dim if rotary_dim is None else rotary_dim
  x = np.random.default_rng(1).normal(size=(4, 1, head_dim))
  angles = np.arange(4)[:, None] * 10.0 ** -(np.arange(r // 2) / max(r // 2, 1))
  half = fz.rotate_reference(x, angles, "half", 1.0)
  interleaved = fz.rotate_reference(x[..., perm], angles, "interleaved", 1.0)
  np.testing.assert_allclose(interleaved, half[..., perm], atol=1e-12)


# --------------------------------------------------------------------------------------------
# ALiBi.

def _slopes_ref(n: int) -> np.ndarray:
  def power_of_two(m):
    return [2.0 ** (-8.0 * (i + 1) / m) for i in range(m)]
  c = 2 ** int(math.floor(math.log2(n)))
  slopes = power_of_two(c) + power_of_two(2 * c)[0::2][:n - c]
  return np.asarray(slopes[:n])


@given(num_heads=fz.int_hyper(st.integers(1, 40), huge=False))
def test_alibi_slopes(num_heads):
  eager = fz.run(lambda: alibi.alibi_slopes(num_heads), ("num_heads",))
  if eager.error is None:
    fz.assert_close(eager.value, _slopes_ref(num_heads), atol=0, rtol=1e-6)


_jit_alibi = jax.jit(alibi.alibi_bias, static_argnames="causal")


@given(q=fz.int_arrays(((4,), (2, 4)), low=-2 ** 31, high=2 ** 31, dtypes=_ALIBI_DTYPES),
       k=fz.int_arrays(((2, 5), (3, 5)), low=-2 ** 31, high=2 ** 31, dtypes=_ALIBI_DTYPES),
       num_heads=st.sampled_from([1, 3]), causal=st.booleans())
@example(q=np.array([2 ** 31 - 1, 0, 0, 0], np.int32), k=np.full((2, 5), -2 ** 31, np.int32),
         num_heads=1, causal=True)  # k - q overflowed int32: a bias of 0.004 instead of -8e6
def test_alibi_bias(q, k, num_heads, causal):
  slopes = alibi.alibi_slopes(num_heads)
  names = ("q_positions", "k_positions", "slopes")
  eager = fz.run(lambda: alibi.alibi_bias(q, k, slopes, causal=causal), names)
  if eager.error is None:
    fz.assert_finite(eager.value)
    offset = k.astype(np.float64)[..., None, :] - q.astype(np.float64)[..., :, None]
    if not causal:
      offset = -np.abs(offset)
    expected = np.asarray(slopes, np.float64)[:, None, None] * offset[..., None, :, :]
    fz.assert_close(eager.value, expected, atol=1e-6, rtol=2e-7)
  else:
    assert not (_fits_int32(q) and _fits_int32(k)) or "broadcast" in str(eager.error)
  if _fits_int32(q) and _fits_int32(k):
    fz.check_jit(lambda: _jit_alibi(q.astype(np.int64), k.astype(np.int64), slopes,
                                    causal=causal), eager, names, atol=1e-6,
                 rtol=2e-7)


# --------------------------------------------------------------------------------------------
# T5 buckets: properties (the HF float32 op order is pinned by golden tests elsewhere).

@given(relative=fz.int_arrays(((9,), (2, 5)), low=-2 ** 40, high=2 ** 40),
       bidirectional=st.booleans(), num_buckets=fz.int_hyper(st.sampled_from([2, 4, 8, 32]), huge=False),
       max_distance=fz.int_hyper(st.sampled_from([3, 20, 128])))
def test_t5_relative_position_bucket(relative, bidirectional, num_buckets, max_distance):
  names = ("relative_position", "num_buckets", "max_distance")
  eager = fz.run(lambda: t5_buckets.t5_relative_position_bucket(
      relative, bidirectional=bidirectional, num_buckets=num_buckets,
      max_distance=max_distance), names)
  if eager.error is not None:
    return
  buckets = np.asarray(eager.value)
  assert buckets.shape == relative.shape and buckets.dtype == np.int32
  assert np.all((buckets >= 0) & (buckets < num_buckets))
  rel = relative.astype(np.int64)
  per_direction = num_buckets // 2 if bidirectional else num_buckets
  exact = per_direction // 2
  offset = np.where(rel > 0, per_direction, 0) if bidirectional else 0
  distance = np.abs(rel) if bidirectional else np.maximum(-rel, 0)
  in_direction = buckets - offset
  small = distance < exact
  np.testing.assert_array_equal(in_direction[small], distance[small])
  np.testing.assert_array_equal(in_direction[distance >= max_distance], per_direction - 1)
  # Monotone in the distance within each direction.
  for sign in ((rel > 0), (rel <= 0)):
    order = np.argsort(distance[sign], kind="stable")
    assert np.all(np.diff(in_direction[sign][order]) >= 0)


# --------------------------------------------------------------------------------------------
# Randomized positions.

@given(length=fz.int_hyper(st.sampled_from([1, 3]), huge=False), max_position=fz.int_hyper(
    st.sampled_from([6, 50]), huge=False), batch_shape=st.sampled_from([(2,), (0,), (-1,), 3]),
       seed=st.integers(0, 2 ** 16))
def test_randomized_positions(length, max_position, batch_shape, seed):
  eager = fz.run(lambda: randomized.randomized_positions(
      jax.random.key(seed), length, max_position=max_position, batch_shape=batch_shape),
                 ("length", "max_position", "batch_shape"))
  if eager.error is None:
    positions = np.asarray(eager.value)
    assert positions.shape == tuple(batch_shape) + (length,) and positions.dtype == np.int32
    assert np.all(positions >= 0) and np.all(positions < max_position)
    assert np.all(np.diff(positions, axis=-1) > 0)
