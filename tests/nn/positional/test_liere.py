"""Tests for the LieRE and ComRoPE PEs (pejax.nn.positional.liere / comrope): hook and configs.

The generic contracts (decode == full forward, dense == blockwise values and gradients, packing,
shifts, command-line round trips) run for both from tests/nn/positional/test_every_pe.py and
tests/nn/test_decoder.py; this file checks what is particular to them.
"""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import liere
from pejax.nn import Decoder
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.positional.comrope import ComRoPEConfig
from pejax.nn.positional.comrope import ComRoPEPE
from pejax.nn.positional.liere import LieREConfig
from pejax.nn.positional.liere import LieREPE
from pejax.nn.positional.registry import get_pe_class
from pejax.nn.positional.registry import registry_entry
from pejax.nn.positional.rope import RotaryConfig
from pejax.nn.positional.rope import RotaryPE

_TINY = dict(num_layers=2, d_model=64, num_heads=4, num_kv_heads=2, vocab_size=32)  # D = 16.
_CONFIGS = (("liere", LieREConfig, LieREPE), ("comrope", ComRoPEConfig, ComRoPEPE))


def _pe(pe_class, config):
  return pe_class(config, DecoderConfig(pe=config, **_TINY), rngs=nnx.Rngs(0))


# Jitted once for the file (issue 44): an eager rotate or gradient compiles op by op.
_rotate = nnx.jit(lambda pe, q, k, q_positions, k_positions: pe.rotate(q, k, q_positions,
                                                                        k_positions))
_apply_liere = jax.jit(liere.apply_liere)


@nnx.jit
def _grads_of_mean_square(model, tokens):
  return nnx.grad(lambda m: jnp.mean(m(tokens) ** 2))(model)


def _randomize(pe, seed=0):
  state = nnx.state(pe, nnx.Param)
  leaves, treedef = jax.tree.flatten(state)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  nnx.update(pe, jax.tree.unflatten(
      treedef, [jax.random.normal(key, leaf.shape) for key, leaf in zip(keys, leaves)]))


class BlockRotationPETest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))
    keys = jax.random.split(jax.random.key(0), 2)
    self.q = jax.random.normal(keys[0], (2, 5, 4, 16))
    self.k = jax.random.normal(keys[1], (2, 5, 2, 16))
    self.positions = np.array([[3, 4, 9, 20, 21]], np.int32)

  @parameterized.named_parameters(*_CONFIGS)
  def test_registered_with_honest_capabilities(self, config_class, pe_class):
    name = {LieREConfig: "liere", ComRoPEConfig: "comrope"}[config_class]
    self.assertIs(get_pe_class(name), pe_class)
    self.assertEqual(registry_entry(name).make_config(), config_class())
    self.assertTrue(pe_class.translation_invariant)  # 1-D: one generator per block.
    self.assertTrue(pe_class.per_layer)
    self.assertFalse(pe_class.absolute)
    self.assertFalse(pe_class.length_dependent)
    self.assertFalse(pe_class.content_aware)

  @parameterized.named_parameters(*_CONFIGS)
  def test_default_init_is_interleaved_rope(self, config_class, pe_class):
    # init="rope": before training the PE rotates exactly as RoPE (interleaved pairs) does.
    got = _rotate(_pe(pe_class, config_class(base=500.0)), self.q, self.k, self.positions,
                  self.positions)
    rope_config = RotaryConfig(base=500.0, layout="interleaved")
    want = _rotate(RotaryPE(rope_config, DecoderConfig(pe=rope_config, **_TINY),
                            rngs=nnx.Rngs(0)), self.q, self.k, self.positions, self.positions)
    for a, b in zip(got, want):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5)

  @parameterized.named_parameters(*_CONFIGS)
  def test_learned_logits_depend_on_offsets_only(self, config_class, pe_class):
    pe = _pe(pe_class, config_class(block_size=8, init="random"))
    _randomize(pe)
    far = self.positions + 100

    def logits(positions):
      q, k = _rotate(pe, self.q, self.k, positions, positions)
      k = jnp.repeat(k, 2, axis=2)  # Query head h reads key head h // 2.
      return jnp.einsum("blhd,bmhd->bhlm", q, k)

    # Unit-normal generators: ||121 G||_1 ~ 1e3, float32 rotations good to ~1e-4 (the error
    # grows like eps * ||p G||_1, see pejax.encodings.liere); logits are up to ~10.
    np.testing.assert_allclose(np.asarray(logits(far)), np.asarray(logits(self.positions)),
                               atol=2e-3, rtol=1e-4)
    self.assertGreater(float(jnp.max(jnp.abs(logits(self.positions) - jnp.einsum(
        "blhd,bmhd->bhlm", self.q, jnp.repeat(self.k, 2, axis=2))))), 0.1)

  def test_query_heads_use_their_key_heads_generators(self):
    pe = _pe(LieREPE, LieREConfig(block_size=4, init="random"))
    _randomize(pe)
    generators = pe.rotation.generators()  # [1, K=2, M=4, 4, 4]
    self.assertEqual(generators.shape, (1, 2, 4, 4, 4))
    q, _ = _rotate(pe, self.q, self.k, self.positions, self.positions)
    per_query_head = jnp.repeat(generators, 2, axis=1)  # Heads 0, 1 -> K head 0; 2, 3 -> 1.
    want = _apply_liere(self.q, self.positions[..., None], per_query_head)
    np.testing.assert_allclose(np.asarray(q), np.asarray(want), atol=1e-6)

  def test_comrope_ld_is_ap_with_scaled_matrices_in_1d(self):
    ld = _pe(ComRoPEPE, ComRoPEConfig(kind="ld", block_size=4, init="random"))
    ap = _pe(ComRoPEPE, ComRoPEConfig(kind="ap", block_size=4, init="random"))
    _randomize(ld, seed=1)
    theta = ld.rotation.multipliers[...]  # [1, M]
    ap.rotation.generator_params[...] = ld.rotation.generator_params[...] * theta[0][None, :,
                                                                                      None, None]
    for a, b in zip(_rotate(ld, self.q, self.k, self.positions, self.positions),
                    _rotate(ap, self.q, self.k, self.positions, self.positions)):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4)  # Rounding order.

  @parameterized.named_parameters(*_CONFIGS)
  def test_every_layer_learns_its_own_generators(self, config_class, pe_class):
    del pe_class
    model = Decoder(DecoderConfig(pe=config_class(block_size=4), **_TINY), rngs=nnx.Rngs(0))
    self.assertLen(model.pes, _TINY["num_layers"])
    tokens = jax.random.randint(jax.random.key(2), (2, 12), 0, 32, dtype=jnp.int32)
    grads = _grads_of_mean_square(model, tokens)
    for layer in range(_TINY["num_layers"]):
      g = grads.pes[layer].rotation.generator_params[...]
      self.assertGreater(float(jnp.max(jnp.abs(g))), 0.0, f"layer {layer}")

  @parameterized.named_parameters(*_CONFIGS)
  def test_block_size_must_fit_the_head(self, config_class, pe_class):
    with self.assertRaisesRegex(ValueError, "block_size must be in \\[2, head_dim=16\\], got 32"):
      DecoderConfig(pe=config_class(block_size=32), **_TINY)
    # 16 = 2 * 6 + 4: with b = 6 (random init) the last 4 channels pass through.
    config = config_class(block_size=6, init="random")
    pe = _pe(pe_class, config)
    q, _ = _rotate(pe, self.q, self.k, self.positions, self.positions)
    np.testing.assert_array_equal(np.asarray(q[..., 12:]), np.asarray(self.q[..., 12:]))

  @parameterized.named_parameters(*_CONFIGS)
  def test_bad_fields_name_the_field(self, config_class, pe_class):
    del pe_class
    cases = [(dict(block_size=1), "block_size"), (dict(block_size=5), "block_size"),
             (dict(block_size=2.5), "block_size"), (dict(init="orthogonal"), "init"),
             (dict(base=1.0), "base"), (dict(init_scale=0.0), "init_scale"),
             (dict(position_table=0), "position_table"),
             (dict(position_table=3.5), "position_table")]
    if config_class is ComRoPEConfig:
      cases.append((dict(kind="xy"), "kind"))
    for fields, name in cases:
      with self.subTest(fields=fields):
        with self.assertRaisesRegex(ValueError, name):
          config_class(**fields)
    config_class(block_size=5, init="random")  # Odd blocks are fine without the RoPE init.


  @parameterized.named_parameters(*_CONFIGS)
  def test_a_position_table_gives_the_same_model(self, config_class, pe_class):
    # Per-row positions (randomized positions): the table changes the cost, not the numbers.
    plain, tabled = _pe(pe_class, config_class()), _pe(pe_class, config_class(position_table=24))
    _randomize(plain)
    nnx.update(tabled, nnx.state(plain, nnx.Param))
    positions = np.array([[0, 2, 5, 9, 20], [1, 3, 4, 22, 23]], np.int32)
    for got, want in zip(_rotate(tabled, self.q, self.k, positions, positions),
                         _rotate(plain, self.q, self.k, positions, positions)):
      np.testing.assert_allclose(got, want, atol=1e-6)
    q, _ = jax.jit(tabled.rotate)(self.q, self.k, positions + 4, positions)  # 26 >= 24.
    self.assertTrue(bool(jnp.all(jnp.isnan(q[1, 3:]))))
    self.assertFalse(bool(jnp.any(jnp.isnan(q[:, :3]))))


if __name__ == "__main__":
  absltest.main()
