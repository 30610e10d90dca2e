"""Every registered PE, selected by capability (no per-name lists): the decoder's contracts.

A PE added as one file in pejax/nn/positional is picked up here without an edit. Per-PE
goldens and failure modes live in each PE's own test file; test_decoder.py covers the forward /
blockwise / packing / shift properties per PE, this file the rest of the contract: decoding
from several prompt lengths, parameter gradients dense vs blockwise, command-line round trips,
per-layer patterns, sliding windows and query scaling.
"""

from __future__ import annotations

import dataclasses

from absl import flags
from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax import decoder_from_config
from pejax import experiment_config
from pejax.nn import Decoder, DecoderConfig, pe_names
from pejax.nn.positional import registry

TINY = dict(vocab_size=32, d_model=32, num_heads=4, num_kv_heads=2, num_layers=2, block_size=4)
NAMES = pe_names()
CASES = tuple((name, name) for name in NAMES)


def _model(pe, **overrides) -> Decoder:
  config = DecoderConfig(**{**TINY, "pe": pe, **overrides})
  model = Decoder(config, rngs=nnx.Rngs(0))
  _randomize_pe_params(model)
  return model


def _randomize_pe_params(model: Decoder, seed: int = 1) -> None:
  """Unit-scale random PE parameters, so that zero-initialized tables do not hide a bug."""
  state = nnx.state(model.pes, nnx.Param)
  leaves, treedef = jax.tree.flatten(state)
  keys = jax.random.split(jax.random.key(seed), max(len(leaves), 1))
  new = [0.5 * jax.random.normal(key, leaf.shape, leaf.dtype) for key, leaf in zip(keys, leaves)]
  nnx.update(model.pes, jax.tree.unflatten(treedef, new))


def _tokens(batch, length, seed=0):
  return jax.random.randint(jax.random.key(seed), (batch, length), 0, TINY["vocab_size"],
                            dtype=jnp.int32)


_forward = nnx.jit(lambda model, tokens: model(tokens))
_prefill = nnx.jit(lambda model, tokens, cache: model.prefill(tokens, None, cache))
_decode = nnx.jit(lambda model, token, position, cache: model.decode_step(token, position, cache))
_forward_with = nnx.jit(
    lambda model, tokens, positions, segment_ids, attention: model(
        tokens, positions=positions, segment_ids=segment_ids, attention=attention),
    static_argnames="attention")
_gradients = nnx.jit(
    nnx.grad(lambda model, tokens, attention: jnp.mean(model(tokens, attention=attention) ** 2)),
    static_argnames="attention")


def _pe_class(name):
  return registry.get_pe_class(name)


class EveryPETest(parameterized.TestCase):

  def test_registry_has_the_builtin_families(self):
    # Capability coverage, not names: at least one PE of each kind the interface serves.
    classes = [_pe_class(n) for n in NAMES]
    self.assertTrue(any(c.absolute for c in classes))
    self.assertTrue(any(c.translation_invariant for c in classes))

  @parameterized.named_parameters(*CASES)
  @pytest.mark.slow
  def test_dense_and_blockwise_parameter_gradients(self, name):
    model = _model(name)
    tokens = _tokens(2, 11)
    if not model.pe.supports_blockwise:
      with self.assertRaisesRegex(ValueError, f"pe='{name}' does not support blockwise"):
        _gradients(model, tokens, attention="blockwise")
      return
    dense = _gradients(model, tokens, attention="dense")
    blockwise = _gradients(model, tokens, attention="blockwise")
    chex.assert_trees_all_close(nnx.state(blockwise, nnx.Param), nnx.state(dense, nnx.Param),
                                atol=5e-5, rtol=5e-4)

  @parameterized.named_parameters(*CASES)
  def test_config_round_trips_through_the_command_line(self, name):
    entry = registry.registry_entry(name)
    default = entry.make_config()
    fields = default.fields()
    argv = ["launch.py", f"--pe={name}"] + [
        f"--config.pe.{key}={','.join(map(str, value)) if isinstance(value, tuple) else value}"
        for key, value in fields.items() if value is not None]  # None: unset = the default.
    config = self._parse(argv)
    self.assertEqual(decoder_from_config.pe_config_from(config), default)

  def _parse(self, argv):
    import launch  # pylint: disable=g-import-not-at-top
    values = flags.FlagValues()
    launch.define_flags(values, argv)
    values(argv)
    config, _, _ = launch.resolve_config(values)
    return config

  def test_a_field_of_another_pe_is_an_error_naming_both(self):
    config = experiment_config.get_default_config()
    owners = experiment_config.pe_fields_by_name()
    field, (kind, pes) = next((f, v) for f, v in sorted(owners.items())
                              if v[1] and "alibi" not in v[1])
    config.pe.name = "alibi"
    config.pe[field] = next(iter(pes.values()))
    with self.assertRaisesRegex(ValueError, rf"pe.{field}=.* has no effect with pe.name='alibi'"):
      decoder_from_config.pe_config_from(config)
    del kind

  @parameterized.named_parameters(*CASES)
  def test_unknown_field_is_named(self, name):
    with self.assertRaisesRegex(ValueError, "no field 'no_such_field'"):
      registry.pe_config(name, no_such_field=1)

  def test_unknown_pe_lists_the_names(self):
    with self.assertRaisesRegex(ValueError, "pe must be one of .*'rope'"):
      DecoderConfig(pe="nope")

  @parameterized.named_parameters(*CASES)
  def test_capabilities_are_declared(self, name):
    cls = _pe_class(name)
    for attribute in ("absolute", "translation_invariant", "length_dependent",
                      "supports_blockwise", "per_layer", "content_aware", "changes_key_dim",
                      "causal_only"):
      self.assertIsInstance(getattr(cls, attribute), bool, attribute)
    self.assertFalse(cls.absolute and cls.translation_invariant, "absolute and invariant")

  def test_overrides_names_the_hooks_of_each_family(self):
    expected = {"none": set(), "rope": {"rotate"}, "alibi": {"bias", "kernel_bias"},
                "t5": {"bias", "kernel_bias"}, "sinusoidal": {"embed"},
                "path": {"features", "attend"}, "stick_breaking": {"attend"}}
    from pejax.nn.positional.interface import PositionalEncoding  # pylint: disable=g-import-not-at-top
    every = PositionalEncoding._HOOKS  # pylint: disable=protected-access
    for name, hooks in expected.items():
      self.assertEqual({h for h in every if _pe_class(name).overrides(h)}, hooks, name)
    with self.assertRaisesRegex(ValueError, "hook must be one of .*got 'biases'"):
      _pe_class("alibi").overrides("biases")


class UserPETest(absltest.TestCase):
  """A PE registered from user code reaches DecoderConfig and the experiment config."""

  def test_register_from_user_code(self):
    # pylint: disable-next=g-import-not-at-top
    from pejax.nn.positional.interface import PEConfig, PositionalEncoding, register_pe

    @dataclasses.dataclass(frozen=True)
    class ScaledAlibiConfig(PEConfig):
      strength: float = 2.0

    class ScaledAlibi(PositionalEncoding):
      config_class = ScaledAlibiConfig
      translation_invariant = True

      def bias(self, q_positions, k_positions):
        distance = (q_positions[:, None, :, None] - k_positions[:, None, None, :])
        return -self.config.strength * jnp.abs(distance).astype(jnp.float32) * jnp.ones(
            (1, TINY["num_heads"], 1, 1), jnp.float32)

    register_pe("test_scaled_alibi", ScaledAlibi, overwrite=True)
    try:
      model = _model("test_scaled_alibi")
      self.assertEqual(model.config.pe_name, "test_scaled_alibi")
      chex.assert_tree_all_finite(_forward(model, _tokens(1, 5)))
      config = experiment_config.get_default_config()
      config.pe.name = "test_scaled_alibi"
      config.pe.strength = 0.5
      self.assertEqual(decoder_from_config.pe_config_from(config), ScaledAlibiConfig(0.5))
    finally:
      from pejax.nn.positional import interface  # pylint: disable=g-import-not-at-top
      interface._REGISTRY.pop("test_scaled_alibi", None)  # pylint: disable=protected-access


class UserPEModuleTest(absltest.TestCase):
  """launch.py --pe_module=<module> registers a user PE before the flags are defined."""

  def test_launch_reaches_a_user_pe_and_its_fields(self):
    import sys  # pylint: disable=g-import-not-at-top
    import launch  # pylint: disable=g-import-not-at-top
    from pejax.nn.positional import interface  # pylint: disable=g-import-not-at-top
    directory = self.create_tempdir()
    directory.create_file("pejax_user_pe_example.py", content=(
        "import dataclasses\n"
        "import jax.numpy as jnp\n"
        "from pejax.nn.positional.interface import PEConfig, PositionalEncoding, register_pe\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class DecayConfig(PEConfig):\n"
        "  decay_rate: float = 1.0\n"
        "@register_pe('user_decay')\n"
        "class DecayPE(PositionalEncoding):\n"
        "  config_class = DecayConfig\n"
        "  translation_invariant = True\n"
        "  def bias(self, q_positions, k_positions):\n"
        "    d = (q_positions[:, None, :, None] - k_positions[:, None, None, :])\n"
        "    return -self.config.decay_rate * jnp.abs(d).astype(jnp.float32)\n"))
    sys.path.insert(0, directory.full_path)
    try:
      argv = ["launch.py", "--pe_module=pejax_user_pe_example", "--pe=user_decay",
              "--config.pe.decay_rate=0.25"]
      values = flags.FlagValues()
      launch.define_flags(values, argv)
      values(argv)
      config, _, _ = launch.resolve_config(values)
      pe = decoder_from_config.pe_config_from(config)
      self.assertEqual((type(pe).__name__, pe.decay_rate), ("DecayConfig", 0.25))
      self.assertEqual(decoder_from_config.decoder_config_from(config).pe_name, "user_decay")
    finally:
      sys.path.remove(directory.full_path)
      interface._REGISTRY.pop("user_decay", None)  # pylint: disable=protected-access
      sys.modules.pop("pejax_user_pe_example", None)


class PatternsTest(parameterized.TestCase):
  """Per-layer PE patterns, sliding windows and query scaling, on every attention path."""

  def _check_paths(self, model, length=13, window=None):
    tokens = _tokens(2, length)
    dense = _forward_with(model, tokens, None, None, attention="dense")
    chex.assert_tree_all_finite(dense)
    blockwise = _forward_with(model, tokens, None, None, attention="blockwise")
    chex.assert_trees_all_close(blockwise, dense, atol=3e-5, rtol=3e-5)
    cache = model.init_cache(2, length)
    logits, cache = _prefill(model, tokens[:, :5], cache)
    pieces = [logits]
    for t in range(5, length):
      logits, cache = _decode(model, tokens[:, t:t + 1], jnp.full((2, 1), t, jnp.int32), cache)
      pieces.append(logits)
    chex.assert_trees_all_close(jnp.concatenate(pieces, axis=1), dense, atol=3e-5, rtol=3e-5)
    segments = jnp.array([[0] * 6 + [1] * (length - 6)] * 2, jnp.int32)
    positions = jnp.array([list(range(6)) + list(range(length - 6))] * 2, jnp.int32)
    packed = _forward_with(model, tokens, positions, segments, attention=None)
    separate = _forward_with(model, tokens[:, 6:], None, None, attention=None)
    chex.assert_trees_all_close(packed[:, 6:], separate, atol=3e-5, rtol=3e-5)
    return dense

  def test_rnope_swa_pattern(self):
    model = _model(("rope", "none"), sliding_window=(4, None))
    self.assertEqual([type(pe).__name__ for pe in model.layer_pes()], ["RotaryPE", "NoPE"])
    self.assertEqual(model.config.pe_name, "rope,none")
    self._check_paths(model)

  def test_two_rope_bases_as_gemma3(self):
    from pejax.nn import pe_config  # pylint: disable=g-import-not-at-top
    local, global_ = pe_config("rope", base=10000.0), pe_config("rope", base=1e6)
    model = _model((local, global_), sliding_window=(4, None))
    self.assertEqual([pe.rope.base for pe in model.layer_pes()], [10000.0, 1e6])
    self._check_paths(model)

  def test_pattern_length_must_divide_the_layers(self):
    with self.assertRaisesRegex(ValueError, "pe must be one value or a tuple whose length"):
      DecoderConfig(**{**TINY, "num_layers": 3}, pe=("rope", "none"))

  @parameterized.named_parameters(("w1", 1), ("w3", 3), ("w5", 5))
  def test_sliding_window_equals_a_masked_reference(self, window):
    model = _model("alibi", sliding_window=window)
    dense = self._check_paths(model)
    # Changing a token that every later query sees only through > window steps changes nothing.
    tokens = _tokens(2, 13)
    changed = tokens.at[:, 0].set((tokens[:, 0] + 1) % TINY["vocab_size"])
    # Layer 2 widens the receptive field to 2 * (window - 1) tokens back.
    horizon = 2 * (window - 1) + 1
    changed = _forward_with(model, changed, None, None, attention="dense")
    chex.assert_trees_all_close(changed[:, horizon:], dense[:, horizon:], atol=1e-5)
    if horizon < 13:
      self.assertGreater(float(jnp.abs(changed[:, :horizon] - dense[:, :horizon]).max()), 1e-4)

  def test_sliding_window_skips_blockwise_tiles(self):
    from pejax.nn.attention.blockwise import blockwise_attention  # pylint: disable=g-import-not-at-top
    q = jax.random.normal(jax.random.key(0), (1, 64, 2, 8))
    k = jax.random.normal(jax.random.key(1), (1, 64, 2, 8))
    positions = jnp.arange(64, dtype=jnp.int32)[None]
    out = blockwise_attention(q, k, k, q_positions=positions, k_positions=positions,
                              block_size=8, window=8)
    # Tile kinds (0 skipped, 1 unmasked, 2 masked) for query tile 5 (slots 40..47), window 8:
    # key tiles 0-3 lie entirely before every query's window and are skipped, tile 4 (32..39)
    # and tile 5 (the diagonal) are partly visible, tiles 6-7 are in the future.
    import importlib  # pylint: disable=g-import-not-at-top
    bw = importlib.import_module("pejax.nn.attention.blockwise")
    # pylint: disable=protected-access
    static = bw._Static(causal=True, segments=False, bq=8, bk=8, head_dim=8, prescaled=True,
                        bias_fn=None, window=8)
    kinds = [int(bw._tile_kind(static, 5, j, 0, 64)) for j in range(8)]
    # pylint: enable=protected-access
    self.assertEqual(kinds, [0, 0, 0, 0, 2, 2, 0, 0])
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(8.0)
    i, j = np.arange(64)[:, None], np.arange(64)[None]
    mask = (j <= i) & (j > i - 8)
    want = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(jnp.where(mask, logits, -1e30)), k)
    chex.assert_trees_all_close(out, want, atol=2e-5)

  def test_irope_pattern(self):
    # Llama 4's pattern on 2 layers: RoPE + chunks of 4 + L2 QK-norm, then NoPE with the
    # temperature (floor 3, so it acts within 13 tokens). Dense == blockwise (tiles of 4 over
    # chunks of 4), decoding across the chunk boundaries at 8 and 12, packed sequences.
    from pejax.nn import irope_pattern  # pylint: disable=g-import-not-at-top
    fields = irope_pattern(2, nope_every=2, chunk_size=4, floor_scale=3, attn_scale=0.5)
    model = _model(fields.pop("pe"), **fields)
    self.assertEqual(model.config.pe_name, "rope,none")
    self._check_paths(model)
    # The chunk size and the temperature both change the numbers (the paths above would agree
    # with each other even if one of them were ignored everywhere).
    dense = _forward(model, _tokens(2, 13))
    for off in (dict(chunk_size=None), dict(query_scaling_strength=0.0)):
      other = _model(model.config.pe, **{**fields, **off})
      self.assertGreater(float(jnp.abs(_forward(other, _tokens(2, 13)) - dense).max()), 1e-4)

  @parameterized.named_parameters(("c1", 1), ("c3", 3), ("c5", 5))
  def test_chunked_attention_isolates_chunks(self, chunk):
    # With every layer chunked, no information crosses a chunk boundary, however deep the model:
    # changing the first chunk's tokens changes no later logit (unlike a window, whose receptive
    # field grows by W - 1 per layer) and changes every logit in the first chunk.
    model = _model("alibi", chunk_size=chunk)
    dense = self._check_paths(model)
    tokens = _tokens(2, 13)
    changed = tokens.at[:, :chunk].set((tokens[:, :chunk] + 1) % TINY["vocab_size"])
    changed = _forward_with(model, changed, None, None, attention="dense")
    chex.assert_trees_all_close(changed[:, chunk:], dense[:, chunk:], atol=1e-5)
    self.assertGreater(float(jnp.abs(changed[:, :chunk] - dense[:, :chunk]).min(axis=-1).max()),
                       1e-4)

  @parameterized.named_parameters(*CASES)
  @pytest.mark.slow
  def test_chunk_size_with_every_pe(self, name):
    # Every PE, in every schedule it supports: the first chunk's logits are those of global
    # attention (its queries see the same keys), later ones differ, and dense == blockwise.
    # A PE whose per-token features are made only from its own token keeps the chunks isolated
    # (changing the first chunk changes no later logit: no leak through masked keys, CoPE's
    # logit hook included); features may legitimately read neighbours (PaTH's causal
    # convolution), so the isolation is not claimed for PEs with a features hook.
    from pejax.nn.positional.interface import PositionalEncoding  # pylint: disable=g-import-not-at-top
    pe_class = _pe_class(name)
    chunked, plain = _model(name, chunk_size=4), _model(name)
    tokens = _tokens(2, 11)
    changed = tokens.at[:, :4].set((tokens[:, :4] + 1) % TINY["vocab_size"])
    schedules = ("dense", "blockwise") if pe_class.supports_blockwise else ("dense",)
    outputs = []
    for attention in schedules:
      base = _forward_with(chunked, tokens, None, None, attention=attention)
      chex.assert_tree_all_finite(base)
      full = _forward_with(plain, tokens, None, None, attention=attention)
      chex.assert_trees_all_close(base[:, :4], full[:, :4], atol=1e-5)
      self.assertGreater(float(jnp.abs(base[:, 4:] - full[:, 4:]).max()), 1e-4)
      if not pe_class.overrides("features"):
        moved = _forward_with(chunked, changed, None, None, attention=attention)
        chex.assert_trees_all_close(moved[:, 4:], base[:, 4:], atol=1e-5)
      outputs.append(base)
    chex.assert_trees_all_close(outputs[-1], outputs[0], atol=3e-5, rtol=3e-5)

  @parameterized.named_parameters(("logn", "logn"), ("ssmax", "ssmax"))
  @pytest.mark.slow
  def test_query_scaling_combines_with_any_pe(self, scaling):
    for name in ("rope", "alibi"):
      model = _model(name, query_scaling=scaling, query_scaling_length=4)
      self._check_paths(model)
    plain = _forward(_model("alibi"), _tokens(2, 13))
    scaled = _forward(_model("alibi", query_scaling=scaling, query_scaling_length=4),
                      _tokens(2, 13))
    # Inside the training length (n <= 4) log-n leaves queries alone; beyond, it sharpens.
    if scaling == "logn":
      chex.assert_trees_all_close(scaled[:, :1], plain[:, :1], atol=1e-5)
    self.assertGreater(float(jnp.abs(scaled - plain).max()), 1e-4)

  def test_bad_window_and_scaling_name_the_field(self):
    with self.assertRaisesRegex(ValueError, "sliding_window must be a positive integer"):
      DecoderConfig(sliding_window=0)
    with self.assertRaisesRegex(ValueError, "query_scaling must be one of"):
      DecoderConfig(query_scaling="log")
    with self.assertRaisesRegex(ValueError, "query_scaling_length must be"):
      DecoderConfig(query_scaling="logn")
    with self.assertRaisesRegex(ValueError, "chunk_size must be a positive integer, got 0"):
      DecoderConfig(chunk_size=(8, 0))


if __name__ == "__main__":
  absltest.main()


@pytest.mark.slow  # A subprocess (the fast tier's rule, docs/tests.md).
def test_configs_do_not_start_the_xla_backend():
  """A multi-process run calls jax.distributed.initialize after building its config; JAX refuses
  once any computation has started the backend, so config validation must be plain Python."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  code = ("from jax._src import xla_bridge\n"
          "from pejax import experiment_config\n"
          "from pejax.nn.positional import registry\n"
          "experiment_config.get_default_config()\n"
          "for name in registry.pe_names():\n"
          "  registry.pe_config(name)\n"
          "  assert not xla_bridge.backends_are_initialized(), name\n"
          "print('ok')\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
