"""Tests for the KERPLE PEs (pejax.nn.positional.kerple): config, parameters, per-layer bias."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.nn.decoder import Decoder
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.positional.kerple import KerpleConfig
from pejax.nn.positional.kerple import KerplePE
from pejax.nn.positional.registry import registry_entry
import pytest


def _model(pe, **kwargs):
  fields = dict(num_layers=3, d_model=32, num_heads=4, vocab_size=32)
  return DecoderConfig(pe=pe, **{**fields, **kwargs})


class KerpleConfigTest(parameterized.TestCase):

  def test_registry_names_preset_the_kind(self):
    self.assertEqual(registry_entry("kerple_log").make_config().kind, "log")
    self.assertEqual(registry_entry("kerple_power").make_config().kind, "power")
    self.assertIs(registry_entry("kerple_power").pe_class, KerplePE)

  def test_default_initialization_ranges_are_the_official_codes(self):
    self.assertEqual(KerpleConfig(kind="log").init_maxima(), (2.0, 1.0))
    self.assertEqual(KerpleConfig(kind="power").init_maxima(), (1.0, 2.0))
    self.assertEqual(KerpleConfig(kind="log", r2_init_max=0.5).init_maxima(), (2.0, 0.5))

  def test_rejects_bad_fields(self):
    with self.assertRaisesRegex(ValueError, r"kind must be one of \['log', 'power'\], got 'exp'"):
      KerpleConfig(kind="exp")
    with self.assertRaisesRegex(ValueError, "min_value must be a positive finite number, got 0"):
      KerpleConfig(min_value=0)
    with self.assertRaisesRegex(ValueError, "r1_init_max must be a positive finite number"):
      KerpleConfig(r1_init_max=-1.0)
    with self.assertRaisesRegex(ValueError, r"r2_init_max must exceed 2 \* min_value = 0.02"):
      KerpleConfig(r2_init_max=0.015)
    with self.assertRaisesRegex(ValueError, "power kernel needs r2_init_max <= 2.*got r2_init_max 3"):
      KerpleConfig(kind="power", r2_init_max=3.0)
    KerpleConfig(kind="log", r2_init_max=3.0)  # The log kernel's r2 is unbounded.


class KerplePETest(parameterized.TestCase):

  @parameterized.named_parameters(("log", "kerple_log"), ("power", "kerple_power"))
  def test_one_instance_with_its_own_parameters_per_layer(self, name):
    model = Decoder(_model(name), rngs=nnx.Rngs(0))
    pes = model.layer_pes()
    self.assertLen(pes, 3)
    self.assertLen({id(pe) for pe in pes}, 3)
    r1s = [np.asarray(pe.kernel_params()[0]) for pe in pes]
    self.assertFalse(np.allclose(r1s[0], r1s[1]))

  @parameterized.named_parameters(("log", "log", 2.0, 1.0), ("power", "power", 1.0, 2.0))
  def test_initial_parameters_within_the_official_ranges(self, kind, r1_max, r2_max):
    pe = KerplePE(KerpleConfig(kind=kind), _model(f"kerple_{kind}", num_heads=64, d_model=128),
                  rngs=nnx.Rngs(3))
    r1, r2 = (np.asarray(x) for x in pe.kernel_params())
    for value, high in ((r1, r1_max), (r2, r2_max)):
      self.assertEqual(value.shape, (64,))
      self.assertTrue(np.all(value >= 0.02 - 1e-6) and np.all(value <= high))
      self.assertGreater(np.ptp(value), high / 4)  # spread over the range, not a constant

  @parameterized.named_parameters(("log", "log"), ("power", "power"))
  def test_constraints_hold_for_any_raw_values(self, kind):
    pe = KerplePE(KerpleConfig(kind=kind), _model(f"kerple_{kind}"), rngs=nnx.Rngs(0))
    pe.r1_raw[...] = jnp.array([-1e4, -30.0, 0.0, 1e4])
    pe.r2_raw[...] = jnp.array([-1e4, -30.0, 0.0, 1e4])
    r1, r2 = (np.asarray(x) for x in pe.kernel_params())
    self.assertTrue(np.all(r1 >= 0.01) and np.all(r2 >= 0.01))
    if kind == "power":
      self.assertTrue(np.all(r2 <= 2.0))
      np.testing.assert_allclose(r2[-1], 2.0)
    positions = np.arange(8, dtype=np.int32)[None]
    self.assertTrue(np.all(np.isfinite(pe.bias(positions, positions))))

  @parameterized.named_parameters(("log", "log"), ("power", "power"))
  def test_bias_is_the_paper_kernel_of_the_layer_parameters(self, kind):
    pe = KerplePE(KerpleConfig(kind=kind), _model(f"kerple_{kind}"), rngs=nnx.Rngs(1))
    r1, r2 = (np.asarray(x, np.float64) for x in pe.kernel_params())
    q = np.array([[3, 7, 20]], np.int32)
    k = np.array([[0, 3, 5, 20, 21]], np.int32)
    bias = np.asarray(pe.bias(q, k))
    self.assertEqual(bias.shape, (1, 4, 3, 5))
    distance = np.abs(q[0][:, None] - k[0][None]).astype(np.float64)
    for h in range(4):
      expected = (-r1[h] * np.log1p(r2[h] * distance) if kind == "log"
                  else -r1[h] * distance ** r2[h])
      np.testing.assert_allclose(bias[0, h], expected, rtol=2e-6, atol=1e-6)

  @parameterized.named_parameters(("log", "kerple_log"), ("power", "kerple_power"))
  @pytest.mark.slow
  def test_gradients_reach_every_layers_parameters(self, name):
    model = Decoder(_model(name), rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(0), (2, 12), 0, 32)

    def loss(model):
      return jnp.mean(model(tokens) ** 2)

    grads = nnx.jit(nnx.grad(loss))(model)
    flat = {"/".join(map(str, path)): np.asarray(value)
            for path, value in jax.tree_util.tree_leaves_with_path(nnx.state(grads))
            if any("r1_raw" in str(p) or "r2_raw" in str(p) for p in path)}
    self.assertLen(flat, 6)  # r1 and r2 of 3 layers
    for path, grad in flat.items():
      self.assertTrue(np.all(np.isfinite(grad)), path)
      self.assertTrue(np.any(grad != 0), path)


if __name__ == "__main__":
  absltest.main()
