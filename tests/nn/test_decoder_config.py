"""Tests of DecoderConfig validation and the PE registry (including adding a PE from outside)."""

from __future__ import annotations

import dataclasses
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.encodings.rope_scaling import LinearScaling
from pejax.nn import Decoder, DecoderConfig, PositionalEncoding, pe_names, register_pe
from pejax.nn.positional import interface
from pejax.nn.positional import LearnedConfig, PEConfig, RotaryConfig, T5Config
from pejax.nn.positional import registry

TINY = dict(vocab_size=32, d_model=32, num_heads=4, num_layers=1, block_size=4)


class DecoderConfigTest(parameterized.TestCase):

  def test_defaults_and_derived_fields(self):
    config = DecoderConfig(d_model=64, num_heads=8, num_kv_heads=2)
    self.assertEqual(config.head_dim, 8)
    self.assertEqual(config.kv_heads, 2)
    self.assertEqual(DecoderConfig(num_heads=4).kv_heads, 4)
    self.assertEqual(config.compute_dtype, jnp.float32)

  def test_frozen_and_hashable(self):
    a = DecoderConfig(pe=RotaryConfig(scaling=LinearScaling(2.0)))
    b = DecoderConfig(pe=RotaryConfig(scaling=LinearScaling(2.0)))
    self.assertEqual(hash(a), hash(b))
    self.assertEqual(a, b)
    with self.assertRaises(AttributeError):
      a.pe = "alibi"  # pytype: disable=not-writable
    with self.assertRaises(dataclasses.FrozenInstanceError):
      a.pe.base = 5.0  # pytype: disable=not-writable
    # A name is normalized to its default config: equal (and equally hashed) to the config.
    self.assertEqual(DecoderConfig(pe="rope"), DecoderConfig(pe=RotaryConfig()))
    self.assertEqual(hash(DecoderConfig(pe="rope")), hash(DecoderConfig(pe=RotaryConfig())))
    self.assertNotEqual(a, DecoderConfig(pe="rope"))

  @parameterized.named_parameters(
      ("unknown_pe", dict(pe="no_such_pe"),
       r"pe must be one of \['alibi', .*'learned', .*'none', .*'rope', .*got 'no_such_pe'"),
      ("kv_heads", dict(num_heads=4, num_kv_heads=3),
       "num_heads must be divisible by num_kv_heads"),
      ("kv_heads_zero", dict(num_kv_heads=0), "num_kv_heads must be a positive integer, got 0"),
      ("d_model_heads", dict(d_model=30, num_heads=4), "d_model must be divisible by num_heads"),
      ("odd_head_dim_rope", dict(pe="rope", d_model=28, num_heads=4),
       "head_dim must be even, got 7"),
      ("odd_rotary_dim", dict(pe=RotaryConfig(fraction=0.5), d_model=40, num_heads=4),
       "rotary_dim must be even, got 5"),
      ("rope_layout", dict(pe=lambda: RotaryConfig(layout="neox")), "layout must be one of"),
      ("odd_sinusoidal", dict(pe="sinusoidal", d_model=27, num_heads=3), "d_model must be even"),
      ("learned_table", dict(pe=lambda: LearnedConfig(max_position=0)),
       "max_position must be a positive"),
      ("t5_buckets", dict(pe=lambda: T5Config(num_buckets=8, max_distance=3)), "max_distance"),
      ("mlp", dict(mlp="relu"), "mlp must be one of"),
      ("dtype", dict(dtype="float16"), "dtype must be one of"),
      ("attention", dict(attention="flash"), "attention must be one of"),
      ("block_size", dict(block_size=0), "block_size must be a positive integer"),
      ("num_layers", dict(num_layers=1.5), "num_layers must be a positive integer"),
      ("chunk_size", dict(chunk_size=0), "chunk_size must be a positive integer, got 0"),
      ("chunk_size_layer", dict(num_layers=2, chunk_size=(8, -1)),
       "chunk_size must be a positive integer, got -1"),
      ("chunk_size_pattern", dict(num_layers=3, chunk_size=(8, None)),
       r"chunk_size must be one value or a tuple whose length divides num_layers \(3\)"),
      ("query_scaling_layer", dict(num_layers=2, query_scaling=("none", "llama")),
       "query_scaling must be one of .*got 'llama'"),
      ("qk_norm", dict(qk_norm="rms"), "qk_norm must be False, True or 'l2'.*got 'rms'"),
      ("floor_unused", dict(query_scaling_floor=16),
       "query_scaling_floor=16 has no effect with query_scaling='none'"),
      ("strength_unused", dict(query_scaling="logn", query_scaling_length=8,
                               query_scaling_strength=0.2),
       "query_scaling_strength=0.2 has no effect with query_scaling='logn'"),
      ("floor_bad", dict(query_scaling="llama4", query_scaling_floor=0),
       "query_scaling_floor must be a positive integer, got 0"),
      ("strength_bad", dict(query_scaling="llama4", query_scaling_strength="0.1"),
       "query_scaling_strength must be a finite number, got '0.1'"),
      ("length_llama4", dict(query_scaling="llama4", query_scaling_length=128),
       "query_scaling_length=128 has no effect with query_scaling='llama4'"),
  )
  def test_invalid_field_names_the_field(self, options, message):
    with self.assertRaisesRegex(ValueError, message):
      # A PE config validates itself on construction (a lambda defers it into the check).
      DecoderConfig(**{k: v() if callable(v) else v for k, v in options.items()})

  def test_per_layer_attention_options(self):
    config = DecoderConfig(num_layers=4, chunk_size=(8, None), query_scaling=("none", "llama4"),
                           qk_norm=("l2", False), query_scaling_floor=16)
    self.assertEqual(config.layer_chunk_sizes, (8, None, 8, None))
    self.assertEqual(config.layer_query_scalings, ("none", "llama4") * 2)
    self.assertEqual(config.layer_qk_norms, ("l2", False) * 2)
    self.assertEqual((config.llama4_floor_scale, config.llama4_attn_scale), (16, 0.1))
    # A uniform tuple is stored as its one value (what the HF writer and launch compare).
    uniform = DecoderConfig(num_layers=2, chunk_size=[8, 8], query_scaling=("none", "none"),
                            qk_norm=(True, True))
    self.assertEqual((uniform.chunk_size, uniform.query_scaling, uniform.qk_norm),
                     (8, "none", True))
    hash(config)  # A jit static.

  def test_per_layer_attention_options_reach_the_layers(self):
    model = Decoder(DecoderConfig(**{**TINY, "num_layers": 2}, chunk_size=(4, None),
                                  query_scaling=("llama4", "none"), qk_norm=(True, "l2")),
                    rngs=nnx.Rngs(0))
    first, second = (block.attention for block in model.blocks)
    self.assertEqual((first.chunk_size, second.chunk_size), (4, None))
    self.assertEqual((first.query_scaling, second.query_scaling), ("llama4", "none"))
    # A learned QK-norm scale on layer 0 only; "l2" has no parameter.
    self.assertIsNotNone(first.query_norm)
    self.assertIsNone(second.query_norm)
    self.assertTrue(second.qk_l2_norm)

  def test_l2_qk_norm_normalizes_each_head(self):
    # "l2": q and k of every head have mean square 1 (up to eps) before the rotation.
    model = Decoder(DecoderConfig(**TINY, qk_norm="l2"), rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(0), (1, 5, TINY["d_model"]))
    q, k, _ = model.blocks[0].attention._project(x)  # pylint: disable=protected-access
    for t in (q, k):
      np.testing.assert_allclose(jnp.mean(t * t, axis=-1), 1.0, rtol=1e-4)

  def test_odd_head_dim_is_fine_without_rope(self):
    self.assertEqual(DecoderConfig(pe="alibi", d_model=28, num_heads=4).head_dim, 7)


class RegistryTest(parameterized.TestCase):

  def test_builtin_names(self):
    names = pe_names()
    self.assertEqual(names, tuple(sorted(set(names))))
    # The original six are always there; every file of the package adds its own.
    self.assertContainsSubset(("alibi", "learned", "none", "rope", "sinusoidal", "t5"), names)
    for name in names:
      pe_class = registry.get_pe_class(name)
      self.assertTrue(issubclass(pe_class, PositionalEncoding), name)
      config = registry.pe_config(name)
      self.assertIsInstance(config, PEConfig)
      self.assertEqual(registry.pe_name_of(config), name)  # The name round-trips.
      self.assertEqual(DecoderConfig(pe=name, **TINY).pe_name, name)

  def test_register_rejects_duplicates_and_non_pe_classes(self):
    with self.assertRaisesRegex(ValueError, "already registered"):
      register_pe("rope", PositionalEncoding)
    with self.assertRaisesRegex(ValueError, "pe_class must be a PositionalEncoding subclass"):
      register_pe("mine", dict)

  @pytest.mark.slow
  def test_new_pe_in_one_class_plus_registration(self):
    """A KERPLE-log-like bias with a learned parameter, added without touching pejax.nn."""

    @dataclasses.dataclass(frozen=True)
    class LogDistanceConfig(PEConfig):
      low: float = 0.5

    class LogDistanceBias(PositionalEncoding):
      config_class = LogDistanceConfig

      def __init__(self, config, model, *, rngs):
        super().__init__(config, model, rngs=rngs)
        self.scale = nnx.Param(jnp.linspace(config.low, 2.0, model.num_heads))

      def bias(self, q_positions, k_positions):
        distance = jnp.abs(q_positions[..., :, None] - k_positions[..., None, :])
        log_distance = jnp.log1p(distance.astype(jnp.float32))[..., None, :, :]
        return -self.scale[...][:, None, None] * log_distance

    with mock.patch.dict(interface._REGISTRY):  # pylint: disable=protected-access
      register_pe("log_distance", LogDistanceBias)
      self.assertIn("log_distance", pe_names())
      model = Decoder(DecoderConfig(pe="log_distance", **TINY), rngs=nnx.Rngs(0))
      tokens = jax.random.randint(jax.random.key(0), (2, 11), 0, 32, dtype=jnp.int32)
      forward = nnx.jit(lambda m, t, attention: m(t, attention=attention),
                        static_argnames="attention")
      dense = forward(model, tokens, "dense")
      blockwise = forward(model, tokens, "blockwise")
      chex.assert_trees_all_close(blockwise, dense, atol=2e-5)
      # Its parameter is trained like any other.
      grads = nnx.jit(nnx.grad(lambda m: m(tokens).sum()))(model)
      self.assertGreater(float(jnp.abs(grads.pes[0].scale[...]).max()), 0.0)
    self.assertNotIn("log_distance", pe_names())


if __name__ == "__main__":
  absltest.main()
