"""Issue 16: every input that used to give a silent wrong number now raises or gives NaN.

Policy (docs/decoder_and_pes.md, "Bad inputs: errors and NaN poison"): a concrete bad value
raises ``ValueError`` naming the argument and the value; a traced one (under ``jax.jit``) gives
NaN, never a finite wrong number. Each test below failed before the fix.
"""

from __future__ import annotations

import functools

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax import decoder_from_config
from pejax import experiment_config
from pejax.encodings.rope import apply_rope, rotate_with_angles
from pejax.encodings.rope_scaling import DynamicNTKScaling, LinearScaling, YaRNScaling
from pejax.nn import Decoder, DecoderConfig, pe_config, pe_names
from pejax.nn.positional import RotaryConfig
from pejax.nn.positional import registry
from pejax.nn.attention import attention
from pejax.nn.attention.blockwise import blockwise_attention

TINY = dict(vocab_size=16, d_model=16, num_heads=2, num_layers=1)

_forward = nnx.jit(lambda model, tokens: model(tokens))
_prefill = nnx.jit(lambda model, tokens, cache: model.prefill(tokens, None, cache))


@functools.lru_cache(maxsize=None)
def _model():
  return Decoder(DecoderConfig(**TINY), rngs=nnx.Rngs(0))


def _filled(cache, length):
  """``cache`` as if ``length`` tokens had been written (the checks only read the length)."""
  return cache._replace(length=jnp.asarray(length, jnp.int32))


class TokenRangeTest(parameterized.TestCase):
  """Token -1 used to give exactly the logits of token V - 1; token >= V gave NaN silently."""

  @parameterized.named_parameters(("negative", -1, "min -1"), ("vocab_size", 16, "max 16"),
                                  ("huge", 10 ** 6, "max 1000000"))
  def test_eager_out_of_range_token_raises(self, bad, detail):
    model = _model()
    tokens = jnp.array([[1, bad, 3]], jnp.int32)
    with self.assertRaisesRegex(ValueError, rf"tokens must be in \[0, vocab_size=16\).*{detail}"):
      model(tokens)
    cache = model.init_cache(1, 8)
    with self.assertRaisesRegex(ValueError, "tokens must be in"):
      model.prefill(tokens, None, cache)
    cache = _filled(cache, 2)
    with self.assertRaisesRegex(ValueError, "tokens must be in"):
      model.decode_step(jnp.array([[bad]], jnp.int32), jnp.array([[2]], jnp.int32), cache)

  def test_concrete_tokens_closed_over_by_a_jitted_function(self):
    # Concrete (not an argument) yet used inside a trace: checked eagerly, no tracer error.
    model = _model()
    good = jnp.array([[1, 15, 3]], jnp.int32)
    logits = nnx.jit(lambda m: m(good))(model)
    chex.assert_trees_all_close(logits, _forward(model, good), atol=1e-6)
    bad = jnp.array([[1, 16, 3]], jnp.int32)
    with self.assertRaisesRegex(ValueError, "tokens must be in"):
      nnx.jit(lambda m: m(bad))(model)

  def test_jit_negative_token_is_nan_not_token_v_minus_1(self):
    model = _model()
    good = jnp.array([[1, 15, 3]], jnp.int32)
    bad = jnp.array([[1, -1, 3]], jnp.int32)
    self.assertTrue(bool(jnp.all(jnp.isfinite(_forward(model, good)))))
    logits = _forward(model, bad)
    # The bad token's logits are NaN (before the fix: exactly those of token 15).
    self.assertTrue(bool(jnp.all(jnp.isnan(logits[0, 1]))))
    # Positions before it do not see it under causal attention but share the attention
    # weighted sum; whatever is finite is exactly the clean result.
    finite = jnp.isfinite(logits)
    np.testing.assert_array_equal(np.asarray(jnp.where(finite, logits, 0.0)),
                                  np.asarray(jnp.where(finite, _forward(model, good), 0.0)))

  def test_jit_token_at_vocab_size_is_nan(self):
    logits = _forward(_model(), jnp.array([[1, 16, 3]], jnp.int32))
    self.assertTrue(bool(jnp.all(jnp.isnan(logits[0, 1]))))

  def test_jit_bad_token_in_prefill_is_nan(self):
    model = _model()
    logits, _ = _prefill(model, jnp.array([[1, -1]], jnp.int32), model.init_cache(1, 3))
    self.assertTrue(bool(jnp.all(jnp.isnan(logits[0, 1]))))


class KVCacheOverflowTest(absltest.TestCase):
  """An eager overflow used to return NaN logits and a cache length above the capacity."""

  def test_eager_prefill_past_capacity_raises(self):
    model = _model()
    cache = _filled(model.init_cache(1, 4), 3)
    with self.assertRaisesRegex(ValueError, r"cache.length \(3\).*\(2\).*max_length=4"):
      model.prefill(jnp.array([[1, 2]], jnp.int32), None, cache)

  def test_eager_decode_step_on_full_cache_raises(self):
    model = _model()
    cache = _filled(model.init_cache(1, 4), 4)
    with self.assertRaisesRegex(ValueError, "max_length=4"):
      model.decode_step(jnp.array([[5]], jnp.int32), jnp.array([[4]], jnp.int32), cache)

  def test_jit_overflow_is_nan_and_stays_nan(self):
    model = _model()
    logits, cache = _prefill(model, jnp.array([[1, 2]], jnp.int32), model.init_cache(1, 3))
    self.assertTrue(bool(jnp.all(jnp.isfinite(logits))))
    logits, cache = _prefill(model, jnp.array([[1, 2]], jnp.int32), cache)
    self.assertTrue(bool(jnp.all(jnp.isnan(logits))))
    logits, _ = _prefill(model, jnp.array([[1, 2]], jnp.int32), cache)
    self.assertTrue(bool(jnp.all(jnp.isnan(logits))))


def _qkv(q_len=8, k_len=8):
  rng = np.random.default_rng(0)
  return tuple(jnp.asarray(rng.normal(size=(1, n, 2, 4)), jnp.float32)
               for n in (q_len, k_len, k_len))


def _distance_bias(q_positions, k_positions):
  return -0.5 * jnp.abs(q_positions[:, None, :, None] - k_positions[:, None, None, :]).astype(
      jnp.float32) * jnp.ones((1, 2, 1, 1))


class BlockwiseArgumentsTest(parameterized.TestCase):
  """Wrong-length positions with a bias gave outputs 0.13-0.22 off; bad tiles crashed."""

  @parameterized.named_parameters(
      ("short_q", 5, 8, "q_positions must have shape \\[1, 8\\], got \\(1, 5\\)"),
      ("long_k", 8, 11, "k_positions must have shape \\[1, 8\\], got \\(1, 11\\)"))
  def test_positions_length_must_match(self, q_pos_len, k_pos_len, message):
    q, k, v = _qkv()
    kwargs = dict(q_positions=jnp.arange(q_pos_len)[None], k_positions=jnp.arange(k_pos_len)[None],
                  bias_fn=_distance_bias, block_size=4)
    with self.assertRaisesRegex(ValueError, message):
      blockwise_attention(q, k, v, **kwargs)
    with self.assertRaisesRegex(ValueError, message):
      jax.jit(lambda q, k, v: blockwise_attention(q, k, v, **kwargs))(q, k, v)
    for implementation in ("dense", "blockwise"):
      with self.assertRaisesRegex(ValueError, message):
        attention(q, k, v, q_positions=kwargs["q_positions"],
                  k_positions=kwargs["k_positions"], bias=_distance_bias,
                  implementation=implementation, block_size=4)

  @parameterized.parameters(0, -3, 2.5)
  def test_block_size_must_be_positive(self, block_size):
    q, k, v = _qkv()
    with self.assertRaisesRegex(ValueError, f"block_size must be a positive integer, got "
                                            f"{block_size}"):
      blockwise_attention(q, k, v, q_positions=jnp.arange(8)[None],
                          k_positions=jnp.arange(8)[None], block_size=block_size)

  def test_float_positions_are_rejected(self):
    q, k, v = _qkv()
    with self.assertRaisesRegex(ValueError, "q_positions must be an integer array"):
      blockwise_attention(q, k, v, q_positions=jnp.arange(8.0)[None],
                          k_positions=jnp.arange(8)[None])


class AttentionFactorTest(parameterized.TestCase):
  """attention_factor=nan returned NaN and 0 returned zeros, without an error."""

  @parameterized.named_parameters(("nan", float("nan")), ("zero", 0.0), ("negative", -1.0),
                                  ("inf", float("inf")))
  def test_concrete_bad_factor_raises(self, factor):
    x = jnp.ones((1, 4, 2, 4))
    with self.assertRaisesRegex(ValueError, f"attention_factor must be a positive finite number, "
                                            f"got {factor}"):
      apply_rope(x, jnp.arange(4), jnp.ones(2), layout="half", attention_factor=factor)
    with self.assertRaisesRegex(ValueError, "attention_factor"):
      rotate_with_angles(x, jnp.zeros((4, 2)), layout="interleaved", attention_factor=factor)

  def test_traced_bad_factor_is_nan(self):
    x = jnp.ones((1, 4, 2, 4))
    rope = jax.jit(lambda factor: apply_rope(x, jnp.arange(4), jnp.ones(2), layout="half",
                                             attention_factor=factor))
    np.testing.assert_allclose(np.asarray(rope(2.0)),
                               np.asarray(apply_rope(x, jnp.arange(4), jnp.ones(2),
                                                     layout="half", attention_factor=2.0)),
                               rtol=1e-6)
    for factor in (0.0, -1.0, float("nan"), float("inf")):
      self.assertTrue(bool(jnp.all(jnp.isnan(rope(factor)))), factor)


# Every registered PE whose config has no RoPE ``scaling`` field (read from the registry).
NON_ROTARY = tuple(name for name in pe_names()
                   if "scaling" not in registry.get_pe_class(name).config_class.field_types())


class RopeScalingWithoutRopeTest(parameterized.TestCase):
  """DecoderConfig(pe="alibi", rope_scaling=YaRNScaling(...)) was accepted and ignored.

  A scaling is now a field of the rotary PE's config: a PE without that field rejects it by
  name, and swapping the scaling of a non-rotary PE (zero-shot extension) raises.
  """

  def test_the_builtin_non_rotary_pes_are_selected(self):
    self.assertContainsSubset(("alibi", "t5", "none", "sinusoidal", "learned"), NON_ROTARY)
    self.assertNotIn("rope", NON_ROTARY)

  @parameterized.parameters(*NON_ROTARY)
  def test_scaling_on_a_non_rotary_pe_raises(self, pe):
    scaling = YaRNScaling(factor=4.0, original_max_position=8)
    with self.assertRaisesRegex(ValueError, "has no field 'scaling'"):
      pe_config(pe, scaling=scaling)
    with self.assertRaisesRegex(experiment_config.ConfigError, "a RoPE scaling needs a rotary PE"):
      decoder_from_config.with_rope_scaling(pe_config(pe), "yarn", factor=4.0, original_max_position=8,
                                   head_dim=8)

  @parameterized.parameters(LinearScaling(2.0), DynamicNTKScaling(2.0, 8),
                            YaRNScaling(factor=4.0, original_max_position=8))
  def test_scaling_on_rope_is_accepted(self, scaling):
    self.assertIs(DecoderConfig(pe=RotaryConfig(scaling=scaling)).pe.scaling, scaling)
    self.assertIs(pe_config("rope", scaling=scaling).scaling, scaling)


if __name__ == "__main__":
  absltest.main()
