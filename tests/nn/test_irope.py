"""Tests of pejax.nn.irope_pattern: Llama 4's per-layer pattern as DecoderConfig fields."""

from __future__ import annotations

from absl import flags
from absl.testing import absltest
from absl.testing import parameterized

from pejax import decoder_from_config
from pejax.nn import DecoderConfig, NoPEConfig, RotaryConfig, irope_pattern


def _hf_no_rope_layers(num_layers: int, interval: int) -> list[int]:
  """Hugging Face Llama4TextConfig's default: 1 (RoPE) unless (i + 1) % interval == 0."""
  return [int((i + 1) % interval != 0) for i in range(num_layers)]


class IropePatternTest(parameterized.TestCase):

  def test_llama4_defaults(self):
    fields = irope_pattern(8)
    rope = RotaryConfig(base=500000.0, layout="interleaved")
    self.assertEqual(fields["pe"], (rope,) * 3 + (NoPEConfig(),) + (rope,) * 3 + (NoPEConfig(),))
    self.assertEqual(fields["chunk_size"], (8192,) * 3 + (None,) + (8192,) * 3 + (None,))
    self.assertEqual(fields["qk_norm"], ("l2",) * 3 + (False,) + ("l2",) * 3 + (False,))
    self.assertEqual(fields["query_scaling"], ("none",) * 3 + ("llama4",) + ("none",) * 3
                     + ("llama4",))
    self.assertEqual((fields["query_scaling_floor"], fields["query_scaling_strength"]),
                     (8192, 0.1))
    config = DecoderConfig(num_layers=8, **fields)
    self.assertEqual(config.pe_name, "rope,rope,rope,none,rope,rope,rope,none")

  @parameterized.parameters((4, 4), (6, 4), (5, 2), (3, 3), (7, 1))
  def test_nope_layers_are_hugging_faces(self, num_layers, every):
    config = DecoderConfig(num_layers=num_layers,
                           **irope_pattern(num_layers, nope_every=every, chunk_size=16))
    rope_layers = [int(isinstance(pe, RotaryConfig)) for pe in config.layer_pes]
    self.assertEqual(rope_layers, _hf_no_rope_layers(num_layers, every))
    self.assertEqual([c is not None for c in config.layer_chunk_sizes],
                     [bool(r) for r in rope_layers])
    self.assertEqual([s == "llama4" for s in config.layer_query_scalings],
                     [not r for r in rope_layers])

  def test_options(self):
    fields = irope_pattern(4, chunk_size=None, temperature_tuning=False, qk_norm=False,
                           rope=RotaryConfig(base=1e4))
    self.assertEqual(fields["chunk_size"], None)  # One value when every layer agrees.
    self.assertEqual(fields["qk_norm"], False)
    self.assertNotIn("query_scaling", fields)
    self.assertEqual(fields["pe"][0], RotaryConfig(base=1e4))
    # Every layer NoPE with nope_every=1.
    self.assertEqual(irope_pattern(2, nope_every=1)["pe"], NoPEConfig())

  @parameterized.named_parameters(
      ("num_layers", dict(num_layers=0), "num_layers must be a positive integer, got 0"),
      ("nope_every", dict(nope_every=0), "nope_every must be a positive integer, got 0"),
      ("too_sparse", dict(nope_every=5), r"nope_every must be <= num_layers \(4\) .*got 5"),
      ("chunk_size", dict(chunk_size=-8), "chunk_size must be a positive integer, got -8"),
      ("floor_scale", dict(floor_scale=0.5), "floor_scale must be a positive integer"),
      ("attn_scale", dict(attn_scale=float("nan")), "attn_scale must be a finite number"),
      ("qk_norm", dict(qk_norm="rms"), "qk_norm must be False, True or 'l2', got 'rms'"),
      ("rope", dict(rope="rope"), "rope must be a RotaryConfig, got 'rope'"),
      ("temperature", dict(temperature_tuning="yes"), "temperature_tuning must be a bool"),
  )
  def test_bad_arguments_name_themselves(self, options, message):
    options = {"num_layers": 4, **options}
    with self.assertRaisesRegex(ValueError, message):
      irope_pattern(options.pop("num_layers"), **options)


IROPE_COMMAND = [
    "launch.py", "--pe=rope,rope,rope,none", "--config.pe.layout=interleaved",
    "--config.pe.base=500000", "--config.model.num_layers=4",
    "--config.model.chunk_size=64,64,64,0", "--config.model.query_scaling=none,none,none,llama4",
    "--config.model.qk_norm=l2,l2,l2,off"]


class IropeCommandLineTest(parameterized.TestCase):
  """The command-line form of iRoPE (docs/decoder_and_pes.md) builds irope_pattern's decoder."""

  def _decoder_config(self, argv):
    import launch  # pylint: disable=g-import-not-at-top
    values = flags.FlagValues()
    launch.define_flags(values, argv)
    values(argv)
    config, _, _ = launch.resolve_config(values)
    return decoder_from_config.decoder_config_from(config)

  def test_overrides_give_the_pattern(self):
    config = self._decoder_config(IROPE_COMMAND)
    fields = irope_pattern(4, chunk_size=64)
    for name in ("pe", "chunk_size", "qk_norm", "query_scaling"):
      self.assertEqual(getattr(config, name), fields[name], name)
    # Unset on the command line: Llama 4's defaults, as irope_pattern's.
    self.assertEqual((config.llama4_floor_scale, config.llama4_attn_scale),
                     (fields["query_scaling_floor"], fields["query_scaling_strength"]))

  def test_floor_and_strength(self):
    config = self._decoder_config(IROPE_COMMAND + ["--config.model.query_scaling_floor=256",
                                                   "--config.model.query_scaling_strength=0.2"])
    self.assertEqual((config.llama4_floor_scale, config.llama4_attn_scale), (256, 0.2))

  @parameterized.named_parameters(
      ("chunk", "--config.model.chunk_size=abc",
       "model.chunk_size must be comma-separated integers, got 'abc'"),
      ("qk_norm", "--config.model.qk_norm=rms", "model.qk_norm must be 'off', 'on' or 'l2'"),
      ("scaling", "--config.model.query_scaling=none,llama", "query_scaling must be one of"))
  def test_bad_values_name_the_field(self, flag, message):
    with self.assertRaisesRegex(ValueError, message):
      self._decoder_config(IROPE_COMMAND + [flag])


if __name__ == "__main__":
  absltest.main()
