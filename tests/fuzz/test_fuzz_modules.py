"""Fuzz properties of the parameterized PE modules (learned table, T5 bias) and of the Hugging
Face RoPE config round trip (issue 16)."""

from __future__ import annotations

import functools

from flax import nnx
from hypothesis import example
from hypothesis import given
from hypothesis import strategies as st
import numpy as np

import fuzz_support as fz
from pejax.encodings import rope
from pejax.encodings import rope_hf
from pejax.encodings import rope_scaling
from pejax.encodings import t5_buckets
from pejax.encodings.learned_position import LearnedPositionEmbedding
from pejax.encodings.t5_bias import T5RelativeBias

N = 8


@functools.lru_cache(maxsize=None)
def _learned() -> LearnedPositionEmbedding:
  return LearnedPositionEmbedding(N, 3, rngs=nnx.Rngs(0))


@functools.lru_cache(maxsize=None)
def _t5() -> T5RelativeBias:
  return T5RelativeBias(2, num_buckets=8, max_distance=16, bidirectional=True, rngs=nnx.Rngs(0))


_jit_learned = nnx.jit(lambda module, positions: module(positions))
_jit_t5 = nnx.jit(lambda module, q, k: module(q, k))


@given(positions=st.one_of(fz.int_arrays(((5,), (2, 5)), low=0, high=N - 1),
                           fz.int_arrays(((5,), (2, 5)), low=-2, high=N + 1),
                           fz.int_arrays(((5,),), low=-2 ** 40, high=2 ** 40,
                                         dtypes=(np.int64,))))
def test_learned_position_embedding(positions):
  """In range: the table rows. Out of range: ``ValueError`` eagerly, NaN rows under jit."""
  module = _learned()
  eager = fz.run(lambda: module(positions), ("positions",))
  table = np.asarray(module.table[...])
  in_range = (positions.astype(np.int64) >= 0) & (positions.astype(np.int64) < N)
  if eager.error is None:
    assert np.all(in_range)
    fz.assert_close(eager.value, table[positions.astype(np.int64)], atol=0)
  else:
    assert not np.all(in_range)
  if positions.min() >= np.iinfo(np.int32).min and positions.max() <= np.iinfo(np.int32).max:
    jitted = np.asarray(_jit_learned(module, positions.astype(np.int32)))
    assert np.all(np.isnan(jitted[~in_range]))
    np.testing.assert_array_equal(jitted[in_range], table[positions[in_range].astype(np.int64)])


@given(q=fz.int_arrays(((4,), (2, 4)), low=-2 ** 31, high=2 ** 31, dtypes=(np.int32, np.int64)),
       k=fz.int_arrays(((2, 3),), low=-2 ** 31, high=2 ** 31, dtypes=(np.int32, np.uint32)))
@example(q=np.full((4,), -2 ** 31, np.int32), k=np.zeros((3,), np.int32))  # k - q wrapped
def test_t5_relative_bias(q, k):
  """The table row of the bucket of the exact (int64) distance ``k - q``, whatever the range."""
  module = _t5()
  eager = fz.run(lambda: module(q, k), ("q_positions", "k_positions"))
  fits = all(x.min() >= np.iinfo(np.int32).min and x.max() <= np.iinfo(np.int32).max
             for x in (q, k))
  if eager.error is not None:
    assert not fits
    return
  relative = np.clip(k.astype(np.int64)[..., None, :] - q.astype(np.int64)[..., :, None],
                     -2 ** 30, 2 ** 30)
  buckets = np.asarray(t5_buckets.t5_relative_position_bucket(
      relative.astype(np.int32), bidirectional=True, num_buckets=8, max_distance=16))
  expected = np.moveaxis(np.asarray(module.table[...])[buckets], -1, -3)
  fz.assert_close(eager.value, expected, atol=0)
  fz.check_jit(lambda: _jit_t5(module, q.astype(np.int64), k.astype(np.int64)), eager,
               ("q_positions",), atol=0)


_SCALINGS = (None, rope_scaling.LinearScaling(2.0), rope_scaling.NTKScaling(2.0),
             rope_scaling.DynamicNTKScaling(2.0, 32), rope_scaling.YaRNScaling(4.0, 32),
             rope_scaling.Llama3Scaling(8.0, 1.0, 4.0, 32),
             rope_scaling.LongRoPEScaling((1.0,) * 4, (2.0,) * 4, 32, factor=4.0))


@given(scaling=st.sampled_from(_SCALINGS), base=st.sampled_from([10000.0, 500000.0]),
       rotary_dim=st.sampled_from([None, 8]), form=st.sampled_from(["rope_parameters",
                                                                      "rope_scaling", "bogus"]))
def test_rope_config_hf_round_trip(scaling, base, rotary_dim, form):
  """``rope_config_from_hf(rope_config_to_hf(c)) == c`` with the same frequencies."""
  if isinstance(scaling, rope_scaling.LongRoPEScaling) and rotary_dim is None:
    rotary_dim = 8
  config = rope.RopeConfig(16, base=base, rotary_dim=rotary_dim, scaling=scaling)
  as_hf = fz.run(lambda: rope_hf.rope_config_to_hf(config, form=form,
                                                   max_position_embeddings=32),
                 ("form", "config.scaling"))
  if as_hf.error is not None:
    return
  back = rope_hf.rope_config_from_hf({**as_hf.value, "head_dim": 16})
  for seq_len in (None, 100):
    expected, factor = rope.rope_inv_freq(config, seq_len=seq_len)
    actual, back_factor = rope.rope_inv_freq(back, seq_len=seq_len)
    fz.assert_close(actual, expected, atol=0, rtol=1e-6)
    assert abs(back_factor - factor) <= 1e-6 * factor
