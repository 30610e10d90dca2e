"""Tests for the Sandwich PE (pejax.nn.positional.sandwich)."""

from __future__ import annotations

from absl.testing import absltest
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.sandwich import sandwich_bias
from pejax.nn.decoder import Decoder
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.positional.registry import registry_entry
from pejax.nn.positional.sandwich import SandwichConfig
from pejax.nn.positional.sandwich import SandwichPE

_TINY = dict(num_layers=3, d_model=32, num_heads=4, vocab_size=32)


class SandwichPETest(absltest.TestCase):

  def test_defaults_are_the_papers(self):
    config = registry_entry("sandwich").make_config()
    self.assertEqual(config, SandwichConfig(dim=128, base=10000.0))

  def test_rejects_bad_fields(self):
    with self.assertRaisesRegex(ValueError, "dim must be even, got 7"):
      SandwichConfig(dim=7)
    with self.assertRaisesRegex(ValueError, "dim must be a positive integer, got -2"):
      SandwichConfig(dim=-2)
    with self.assertRaisesRegex(ValueError, r"base must be > 1, got 1\.0"):
      SandwichConfig(base=1.0)

  def test_parameter_free_and_one_instance_for_all_layers(self):
    model = Decoder(DecoderConfig(pe="sandwich", **_TINY), rngs=nnx.Rngs(0))
    pes = model.layer_pes()
    self.assertLen({id(pe) for pe in pes}, 1)
    self.assertIsInstance(pes[0], SandwichPE)
    self.assertEmpty(jax.tree.leaves(nnx.state(pes[0], nnx.Param)))

  def test_bias_uses_the_models_heads_and_the_config(self):
    pe = SandwichPE(SandwichConfig(dim=16, base=100.0), DecoderConfig(pe="sandwich", **_TINY),
                    rngs=nnx.Rngs(0))
    positions = np.array([[0, 4, 9]], np.int32)
    bias = pe.bias(positions, positions)
    self.assertEqual(bias.shape, (1, 4, 3, 3))
    np.testing.assert_array_equal(
        bias, sandwich_bias(positions, positions, num_heads=4, dim=16, base=100.0))
    # Head 1 of 4 is the inner product divided by 8 * 1 / 4 = 2: d_bar / 2 / 2 on the diagonal.
    np.testing.assert_allclose(bias[0, 0, 0, 0], 16 / 2 / 2, rtol=1e-6)

  def test_model_logits_are_translation_invariant(self):
    model = Decoder(DecoderConfig(pe="sandwich", **_TINY), rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(0), (1, 10), 0, 32)
    positions = jnp.arange(10, dtype=jnp.int32)[None]
    np.testing.assert_allclose(model(tokens, positions=positions + 1000),
                               model(tokens, positions=positions), atol=2e-5, rtol=2e-5)


if __name__ == "__main__":
  absltest.main()
