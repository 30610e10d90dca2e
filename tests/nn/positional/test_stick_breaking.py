"""Tests for the stick-breaking PE (pejax.nn.positional.stick_breaking): the decoder's layer equals
the pure function, decoding equals the full forward pass (linear and window caches), blockwise
equals dense, windows, config failures."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.nn.decoder import Decoder
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.positional.registry import registry_entry
from pejax.nn.positional.stick_breaking import StickBreakingConfig
from pejax.nn.positional.stick_breaking import StickBreakingPE
from tests.nn.positional.decoding_check import assert_decoding_matches

_TINY = dict(num_layers=2, d_model=32, num_heads=4, num_kv_heads=2, vocab_size=32, block_size=4)


def _model(pe="stick_breaking", **overrides) -> Decoder:
  return Decoder(DecoderConfig(pe=pe, **{**_TINY, **overrides}), rngs=nnx.Rngs(0))


class StickBreakingPETest(parameterized.TestCase):

  def test_defaults_and_hooks(self):
    config = registry_entry("stick_breaking").make_config()
    self.assertEqual(config, StickBreakingConfig(attend_current=False, remainder="value"))
    pe = StickBreakingPE(config, DecoderConfig(pe=config, **_TINY), rngs=nnx.Rngs(0))
    self.assertTrue(pe.has_attend and pe.supports_blockwise and pe.causal_only)
    self.assertFalse(pe.has_rotate or pe.has_bias or pe.has_features or pe.has_logits)
    self.assertEmpty(jax.tree.leaves(nnx.state(pe, nnx.Param)))

  @pytest.mark.slow
  @parameterized.named_parameters(("linear", "none"), ("window", "window"))
  def test_decoding_equals_the_full_forward(self, eviction):
    tokens = jax.random.randint(jax.random.key(1), (2, 11), 0, 32, dtype=jnp.int32)
    assert_decoding_matches(_model(pe=StickBreakingConfig(attend_current=True)), tokens, eviction=eviction)

  @pytest.mark.slow
  def test_blockwise_equals_dense_with_packing_and_differs_from_softmax(self):
    model = _model()
    tokens = jax.random.randint(jax.random.key(2), (2, 13), 0, 32, dtype=jnp.int32)
    segments = jnp.array([[1] * 6 + [2] * 7, [1] * 13], jnp.int32)
    positions = jnp.array([list(range(6)) + list(range(7)), list(range(13))], jnp.int32)
    run = nnx.jit(lambda m, t, attention: m(t, positions=positions, segment_ids=segments,
                                             attention=attention), static_argnames="attention")
    dense = run(model, tokens, "dense")
    np.testing.assert_allclose(run(model, tokens, "blockwise"), dense, rtol=2e-5, atol=2e-5)
    nope = _model(pe="none")
    nnx.update(nope, nnx.state(model, nnx.Param))
    self.assertGreater(float(jnp.max(jnp.abs(run(nope, tokens, "dense") - dense))), 1e-3)

  @pytest.mark.slow
  def test_a_window_limits_what_a_token_sees(self):
    model = _model(sliding_window=3, num_layers=1)
    tokens = jax.random.randint(jax.random.key(3), (1, 9), 0, 32, dtype=jnp.int32)
    changed = tokens.at[:, 0].set((tokens[:, 0] + 1) % 32)
    forward = nnx.jit(lambda m, t: m(t))
    np.testing.assert_allclose(forward(model, changed)[:, 3:], forward(model, tokens)[:, 3:],
                               rtol=1e-6, atol=1e-6)
    self.assertGreater(float(jnp.max(jnp.abs(forward(model, changed)[:, :3]
                                             - forward(model, tokens)[:, :3]))), 1e-4)

  def test_failures_name_the_field(self):
    with self.assertRaisesRegex(ValueError, "attend_current must be a bool, got 'yes'"):
      StickBreakingConfig(attend_current="yes")
    with self.assertRaisesRegex(ValueError, "remainder must be one of"):
      StickBreakingConfig(remainder="key")


if __name__ == "__main__":
  absltest.main()
