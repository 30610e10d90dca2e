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
  )
  def test_invalid_field_names_the_field(self, options, message):
    with self.assertRaisesRegex(ValueError, message):
      # A PE config validates itself on construction (a lambda defers it into the check).
      DecoderConfig(**{k: v() if callable(v) else v for k, v in options.items()})

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
