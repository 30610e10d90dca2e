"""``pejax.hf.from_pretrained``: logits equal transformers' for every family and RoPE type."""

from __future__ import annotations

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pejax.hf
from pejax.encodings import rope_scaling
from pejax.nn import RotaryConfig
import fixture_cases as fx


class ParityTest(parameterized.TestCase):

  @parameterized.named_parameters((name, name) for name in fx.CASES)
  def test_logits_equal_transformers(self, name):
    model = fx.load(name)
    logits = fx.logits(model, jnp.asarray(fx.PROMPTS))
    self.assertEqual(logits.dtype, jnp.float32)
    self.assertLess(fx.relative_error(logits, fx.reference_logits(name)), fx.PARITY_TOLERANCE)

  def test_families_and_rope_types_are_covered(self):
    families = {n.split("_")[0] for n in fx.CASES}
    self.assertEqual(families, set(pejax.hf.SUPPORTED_MODEL_TYPES))
    rope_types = set()
    for name in fx.CASES:
      scaling = pejax.hf.load_config(fx.path(name)).pe.scaling
      rope_types.add("default" if scaling is None else scaling.name)
    self.assertEqual(rope_types, {"default", "linear", "dynamic", "yarn", "longrope", "llama3"})


class ConfigMappingTest(absltest.TestCase):

  def test_family_options(self):
    self.assertFalse(fx.load("llama_default_untied").config.scale_embeddings)
    self.assertFalse(fx.load("llama_default_untied").config.tie_embeddings)
    self.assertTrue(fx.load("llama_linear_tied").config.tie_embeddings)
    qwen2 = fx.load("qwen2_biases").config
    self.assertEqual((qwen2.qkv_bias, qwen2.output_bias), (True, False))
    qwen3 = fx.load("qwen3_qk_norm_sharded").config
    self.assertEqual((qwen3.qk_norm, qwen3.head_dim, qwen3.d_model), (True, 32, 64))
    phi3 = fx.load("phi3_longrope_partial").config
    self.assertEqual(phi3.pe.fraction, 0.75)
    self.assertIsInstance(phi3.pe.scaling, rope_scaling.LongRoPEScaling)
    gemma = fx.load("gemma").config
    self.assertEqual((gemma.norm_offset, gemma.mlp, gemma.scale_embeddings, gemma.head_dim),
                     (1.0, "geglu", True, 32))
    self.assertEqual(fx.load("mistral_sliding_window").config.sliding_window, (4, 4))
    # The older config form (rope_theta + rope_scaling with the legacy "type" key) was read.
    self.assertIsInstance(fx.load("llama_yarn").config.pe.scaling, rope_scaling.YaRNScaling)

  def test_sharded_checkpoint_reads_every_shard(self):
    self.assertTrue((fx.path("qwen3_qk_norm_sharded") / "model.safetensors.index.json").exists())
    self.assertFalse((fx.path("qwen3_qk_norm_sharded") / "model.safetensors").exists())
    self.assertEqual(fx.load("qwen3_qk_norm_sharded").lm_head.kernel[...].shape, (64, 256))

  def test_qwen2_sliding_window_layers(self):
    hf = {"model_type": "qwen2", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8,
          "num_hidden_layers": 4, "num_attention_heads": 2, "rope_theta": 1e4,
          "use_sliding_window": True, "sliding_window": 16, "max_window_layers": 2}
    self.assertEqual(pejax.hf.decoder_config_from_hf(hf).sliding_window, (None, None, 16, 16))
    hf["use_sliding_window"] = False
    self.assertIsNone(pejax.hf.decoder_config_from_hf(hf).sliding_window)

  def test_real_config_files_without_rope_theta_or_with_use_mrope(self):
    # meta-llama/Llama-2-7b-hf's config.json has no rope_theta (transformers: 10000.0);
    # Qwen/Qwen2.5-* config.json files carry "use_mrope": false.
    hf = {"model_type": "llama", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8,
          "num_hidden_layers": 1, "num_attention_heads": 2, "rope_scaling": None}
    self.assertEqual(pejax.hf.decoder_config_from_hf(hf).pe.base, 10000.0)
    self.assertEqual(pejax.hf.decoder_config_from_hf({**hf, "rope_theta": 5e5}).pe.base, 5e5)
    qwen = {**hf, "model_type": "qwen2", "use_mrope": False, "use_sliding_window": False}
    self.assertEqual(pejax.hf.decoder_config_from_hf(qwen).pe.base, 10000.0)
    with self.assertRaisesRegex(ValueError, "'use_mrope' = True"):
      pejax.hf.decoder_config_from_hf({**qwen, "use_mrope": True})
    with self.assertRaisesRegex(ValueError, "'use_mrope'"):  # Unknown outside qwen2.
      pejax.hf.decoder_config_from_hf({**hf, "use_mrope": False})


class DtypeTest(absltest.TestCase):

  def test_bfloat16_load_halves_parameters_and_stays_close(self):
    f32 = fx.load("llama_default_untied")
    bf16 = fx.load("llama_default_untied", dtype=jnp.bfloat16)
    self.assertEqual(bf16.config.dtype, "bfloat16")
    leaves = jax.tree.leaves(nnx.state(bf16, nnx.Param))
    self.assertTrue(all(x.dtype == jnp.bfloat16 for x in leaves))
    bytes_of = lambda m: sum(x.nbytes for x in jax.tree.leaves(nnx.state(m, nnx.Param)))
    self.assertEqual(bytes_of(bf16) * 2, bytes_of(f32))
    logits = fx.logits(bf16, jnp.asarray(fx.PROMPTS))
    self.assertEqual(logits.dtype, jnp.float32)
    # bfloat16 has 8 mantissa bits: close to the float32 reference, not equal.
    error = fx.relative_error(logits, fx.reference_logits("llama_default_untied"))
    self.assertLess(error, 0.05)
    self.assertGreater(error, 1e-4)

  def test_bad_dtype_names_the_argument(self):
    with self.assertRaisesRegex(ValueError, "dtype must be None, float32 or bfloat16"):
      pejax.hf.from_pretrained(fx.path("llama_default_untied"), dtype=jnp.float16)


class StreamingTest(absltest.TestCase):

  def test_tensors_are_read_aligned_and_placed_without_a_copy(self):
    # The memory claim of a load (model + about one tensor; benchmarks/hf_load_memory.py: peak
    # RSS increase 1.05x the file in float32, 0.55x in bfloat16) rests on these two facts.
    from pejax.hf import safetensors_files as files_lib
    file = str(fx.path("llama_default_untied") / "model.safetensors")
    start, spans = files_lib.data_offsets(file)
    name = "model.layers.0.mlp.down_proj.weight"
    array = files_lib.read_tensor(file, start, spans[name][0], dtype="F32", shape=(64, 96),
                                  transpose=True, target=np.dtype(np.float32))
    self.assertEqual(array.ctypes.data % 64, 0)
    from safetensors.numpy import load_file
    np.testing.assert_array_equal(array, load_file(file)[name].T)
    if jax.default_backend() == "cpu":
      self.assertEqual(jax.device_put(array).unsafe_buffer_pointer(), array.ctypes.data)


class RopeScalingTest(absltest.TestCase):

  def test_with_rope_scaling_keeps_weights_and_changes_long_logits_only(self):
    model = fx.load("llama_default_untied")
    scaled = pejax.hf.with_rope_scaling(model, rope_scaling.YaRNScaling(4.0, 16))
    self.assertIsInstance(scaled.config.pe.scaling, rope_scaling.YaRNScaling)
    self.assertIs(scaled.embed.embedding[...], model.embed.embedding[...])
    tokens = jnp.asarray(fx.PROMPTS)
    # YaRN keeps the highest frequencies; the logits differ (the attention factor alone).
    self.assertGreater(float(jnp.abs(fx.logits(scaled, tokens) - fx.logits(model, tokens)).max()),
                       1e-3)
    with self.assertRaisesRegex(ValueError, "one RoPE config"):
      pejax.hf.with_rope_scaling(dataclasses.replace, None)

  def test_overrides_reach_the_decoder_config(self):
    model = pejax.hf.from_pretrained(fx.path("llama_linear_tied"), attention="dense",
                                     pe=RotaryConfig(base=5e5))
    self.assertEqual((model.config.attention, model.config.pe.base), ("dense", 5e5))


if __name__ == "__main__":
  absltest.main()
