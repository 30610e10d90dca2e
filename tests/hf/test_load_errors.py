"""Loading fails loudly: unsupported families / fields name the field, bad files name the file."""

from __future__ import annotations

import json
import pathlib
import shutil

from absl.testing import absltest
from absl.testing import parameterized

import pejax.hf
import fixture_cases as fx

LLAMA = "llama_default_untied"


def _config(name: str = LLAMA) -> dict:
  return json.loads((fx.path(name) / "config.json").read_text())


class UnsupportedConfigTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("family", dict(model_type="gpt2"), "'model_type' = 'gpt2'"),
      ("mlp_bias", dict(mlp_bias=True), "'mlp_bias'"),
      ("activation", dict(hidden_act="gelu"), "'hidden_act' = 'gelu'"),
      ("unknown_field", dict(attn_logit_softcapping=50.0), "'attn_logit_softcapping'"),
      ("quantization", dict(quantization_config={"quant_method": "gptq"}),
       "'quantization_config'"),
      ("pretraining_tp", dict(pretraining_tp=2), "'pretraining_tp'"),
      ("partial_rotary_llama", dict(partial_rotary_factor=0.5), "partial_rotary_factor"),
      ("rope_type", dict(rope_parameters={"rope_type": "mrope", "rope_theta": 1e4}),
       "rope_type must be one of"),
      ("rope_key", dict(rope_parameters={"rope_type": "linear", "rope_theta": 1e4,
                                         "factor": 2.0, "beta_fats": 3}), "beta_fats"),
      ("bad_heads", dict(num_attention_heads=0), "'num_attention_heads'"),
  )
  def test_llama_field(self, change, message):
    config = _config()
    config.update(change)
    with self.assertRaisesRegex(ValueError, message):
      pejax.hf.decoder_config_from_hf(config)

  def test_gemma_bidirectional(self):
    config = _config("gemma")
    config["use_bidirectional_attention"] = True
    with self.assertRaisesRegex(ValueError, "'use_bidirectional_attention'"):
      pejax.hf.decoder_config_from_hf(config)

  def test_phi3_yarn_is_not_read_as_yarn(self):
    config = _config("phi3_default")
    config["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}
    with self.assertRaisesRegex(ValueError, "rope_type' = 'yarn'"):
      pejax.hf.decoder_config_from_hf(config)


class BadFilesTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = pathlib.Path(self.create_tempdir().full_path) / "model"
    shutil.copytree(fx.path(LLAMA), self.dir)

  def test_missing_directory(self):
    with self.assertRaisesRegex(ValueError, "existing checkpoint directory.*nowhere"):
      pejax.hf.from_pretrained(self.dir / "nowhere")

  def test_missing_config(self):
    (self.dir / "config.json").unlink()
    with self.assertRaisesRegex(ValueError, "config.json not found: .*model/config.json"):
      pejax.hf.from_pretrained(self.dir)

  def test_corrupted_config(self):
    (self.dir / "config.json").write_text("{not json")
    with self.assertRaisesRegex(ValueError, "config.json is not valid JSON: .*config.json"):
      pejax.hf.from_pretrained(self.dir)

  def test_missing_weights(self):
    (self.dir / "model.safetensors").unlink()
    with self.assertRaisesRegex(ValueError, "neither model.safetensors nor "
                                "model.safetensors.index.json"):
      pejax.hf.from_pretrained(self.dir)

  def test_truncated_weights(self):
    path = self.dir / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])
    with self.assertRaisesRegex(ValueError, "cannot read safetensors file .*model.safetensors"):
      pejax.hf.from_pretrained(self.dir)

  def test_weights_cut_inside_the_data(self):
    path = self.dir / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    with self.assertRaisesRegex(ValueError, "cannot read safetensors file .*model.safetensors"):
      pejax.hf.from_pretrained(self.dir)

  def test_garbage_weights(self):
    (self.dir / "model.safetensors").write_bytes(b"\x00" * 64)
    with self.assertRaisesRegex(ValueError, "cannot read safetensors file .*model.safetensors"):
      pejax.hf.from_pretrained(self.dir)

  def test_missing_and_unexpected_tensors(self):
    from safetensors.numpy import load_file, save_file
    path = self.dir / "model.safetensors"
    tensors = load_file(str(path))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(path))
    with self.assertRaisesRegex(ValueError, "'model.layers.1.mlp.up_proj.weight' is missing"):
      pejax.hf.from_pretrained(self.dir)
    tensors = load_file(str(fx.path(LLAMA) / "model.safetensors"))
    tensors["model.layers.0.self_attn.q_proj.bias"] = tensors["model.norm.weight"]
    save_file(tensors, str(path))
    with self.assertRaisesRegex(ValueError, "'model.layers.0.self_attn.q_proj.bias' in .*has no "
                                "place"):
      pejax.hf.from_pretrained(self.dir)

  def test_wrong_shape(self):
    config = _config()
    config["intermediate_size"] = 128
    (self.dir / "config.json").write_text(json.dumps(config))
    with self.assertRaisesRegex(ValueError, r"mlp.gate_proj.weight' in .* has shape \[96, 64\], "
                                r"config.json implies \[128, 64\]"):
      pejax.hf.from_pretrained(self.dir)

  def test_index_names_missing_shard(self):
    sharded = self.dir.parent / "sharded"
    shutil.copytree(fx.path("qwen3_qk_norm_sharded"), sharded)
    (sharded / "model-00002-of-00004.safetensors").unlink()
    with self.assertRaisesRegex(ValueError, "shard 'model-00002-of-00004.safetensors' listed in "
                                ".*model.safetensors.index.json"):
      pejax.hf.from_pretrained(sharded)


if __name__ == "__main__":
  absltest.main()
