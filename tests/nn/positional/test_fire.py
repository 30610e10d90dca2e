"""Tests for the FIRE PE (pejax.nn.positional.fire)."""

from __future__ import annotations

from absl.testing import absltest
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.nn.decoder import Decoder
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.positional.fire import FireConfig
from pejax.nn.positional.fire import FirePE
from pejax.nn.positional.registry import registry_entry
import pytest

_TINY = dict(num_layers=3, d_model=32, num_heads=4, vocab_size=32)


def _reference_bias(pe, q_positions, k_positions):
  """Li et al. 2024 appendix code, in float64 NumPy, with the module's parameters."""
  c = abs(float(pe.c[...]))
  threshold = abs(float(pe.threshold_multiplier[...]) * pe.config.init_threshold)
  i = np.asarray(q_positions, np.float64)[0][:, None]
  j = np.asarray(k_positions, np.float64)[0][None, :]
  distance = np.log(np.abs(c * (i - j)) + 1) / (
      np.log(np.abs(c * np.maximum(i, threshold)) + 1) + pe.config.eps)
  w1, b1 = (np.asarray(x, np.float64) for x in (pe.kernel_1[...], pe.bias_1[...]))
  w2, b2 = (np.asarray(x, np.float64) for x in (pe.kernel_2[...], pe.bias_2[...]))
  hidden = np.maximum(distance[..., None] * w1 + b1, 0.0)
  return np.moveaxis(hidden @ w2 + b2, -1, 0)[None]  # [1, H, Lq, Lk]


def _pe(config=None, seed=0):
  return FirePE(config or FireConfig(), DecoderConfig(pe="fire", **_TINY), rngs=nnx.Rngs(seed))


class FireConfigTest(absltest.TestCase):

  def test_defaults_are_the_papers(self):
    config = registry_entry("fire").make_config()
    self.assertEqual((config.mlp_width, config.init_c, config.init_threshold, config.eps),
                     (32, 0.1, 512.0, 1e-6))
    self.assertTrue(config.learn_threshold)

  def test_rejects_bad_fields(self):
    with self.assertRaisesRegex(ValueError, "mlp_width must be a positive integer, got 0"):
      FireConfig(mlp_width=0)
    with self.assertRaisesRegex(ValueError, "init_c must be a positive finite number, got -0.1"):
      FireConfig(init_c=-0.1)
    with self.assertRaisesRegex(ValueError, "init_threshold must be a positive finite number"):
      FireConfig(init_threshold=0.0)
    with self.assertRaisesRegex(ValueError, "learn_threshold must be a bool, got 'yes'"):
      FireConfig(learn_threshold="yes")
    with self.assertRaisesRegex(ValueError, "eps must be a non-negative finite number, got -1"):
      FireConfig(eps=-1.0)


class FirePETest(absltest.TestCase):

  def test_initial_parameters(self):
    pe = _pe()
    self.assertEqual(float(pe.c[...]), np.float32(0.1))
    self.assertEqual(float(pe.threshold()), 512.0)
    self.assertEqual(pe.kernel_1.shape, (32,))
    self.assertEqual(pe.kernel_2.shape, (32, 4))
    # PyTorch nn.Linear initialization of the paper's code: +-1 for fan-in 1, +-1/sqrt(32).
    self.assertTrue(np.all(np.abs(pe.kernel_1[...]) <= 1.0) and np.ptp(pe.kernel_1[...]) > 1.0)
    self.assertTrue(np.all(np.abs(pe.bias_1[...]) <= 1.0) and np.ptp(pe.bias_1[...]) > 1.0)
    self.assertTrue(np.all(np.abs(pe.kernel_2[...]) <= 32 ** -0.5))

  def test_bias_matches_the_papers_code(self):
    pe = _pe(FireConfig(init_threshold=6.0, init_c=0.7))
    pe.threshold_multiplier[...] = jnp.float32(1.5)  # L = 9
    q = np.array([[0, 3, 8, 9, 30]], np.int32)
    k = np.array([[0, 1, 3, 8, 29, 30]], np.int32)
    bias = pe.bias(q, k)
    self.assertEqual(bias.shape, (1, 4, 5, 6))
    self.assertEqual(bias.dtype, jnp.float32)
    np.testing.assert_allclose(bias, _reference_bias(pe, q, k), rtol=2e-5, atol=2e-6)

  def test_one_instance_with_its_own_parameters_per_layer(self):
    model = Decoder(DecoderConfig(pe="fire", **_TINY), rngs=nnx.Rngs(0))
    pes = model.layer_pes()
    self.assertLen({id(pe) for pe in pes}, 3)
    self.assertFalse(np.allclose(pes[0].kernel_2[...], pes[1].kernel_2[...]))

  @pytest.mark.slow
  def test_gradients_reach_c_threshold_and_mlp_of_every_layer(self):
    model = Decoder(DecoderConfig(pe="fire", **_TINY, attention="dense"), rngs=nnx.Rngs(0))
    for pe in model.layer_pes():
      pe.threshold_multiplier[...] = jnp.float32(4.0 / 512)  # L = 4 < the sequence length
    tokens = jax.random.randint(jax.random.key(0), (2, 12), 0, 32)
    grads = nnx.jit(nnx.grad(lambda m: jnp.mean(m(tokens) ** 2)))(model)
    names = ("c", "threshold_multiplier", "kernel_1", "bias_1", "kernel_2", "bias_2")
    found = {}
    for path, value in jax.tree_util.tree_leaves_with_path(nnx.state(grads.pes, nnx.Param)):
      keys = [str(getattr(p, "key", p)) for p in path]
      name = next((n for n in names if n in keys), None)
      if name:
        found.setdefault(name, []).append(np.asarray(value))
    self.assertEqual(sorted(found), sorted(names))
    for name, values in found.items():
      self.assertLen(values, 3, name)
      for value in values:
        self.assertTrue(np.all(np.isfinite(value)) and np.any(value != 0), name)

  def test_fixed_threshold_is_not_a_parameter(self):
    pe = _pe(FireConfig(learn_threshold=False))
    leaves = jax.tree_util.tree_leaves_with_path(nnx.state(pe, nnx.Param))
    self.assertFalse(any("threshold_multiplier" in str(path) for path, _ in leaves))
    self.assertEqual(float(pe.threshold()), 512.0)

  def test_translation_invariant_below_the_threshold_only(self):
    model = Decoder(DecoderConfig(pe="fire", **_TINY), rngs=nnx.Rngs(0))  # L = 512
    tokens = jax.random.randint(jax.random.key(0), (1, 10), 0, 32)
    positions = jnp.arange(10, dtype=jnp.int32)[None]
    forward = nnx.jit(lambda m, p: m(tokens, positions=p))  # One program (issue 44).
    base = forward(model, positions)
    np.testing.assert_allclose(forward(model, positions + 400), base, atol=2e-5, rtol=2e-5)
    beyond = forward(model, positions + 5000)
    self.assertGreater(float(jnp.max(jnp.abs(beyond - base))), 1e-3)


if __name__ == "__main__":
  absltest.main()
