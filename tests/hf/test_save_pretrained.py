"""``pejax.hf.save_pretrained``: save -> load is bit-exact; what cannot be written is an error.

That transformers loads the saved directories to the same logits is checked against transformers
itself by tests/golden/check_hf_loads_saved.py (result: tests/hf/transformers_loads_saved.json).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

import pejax.hf
from pejax.encodings import rope_scaling
from pejax.nn import Decoder, DecoderConfig, RotaryConfig
import fixture_cases as fx


def _params(model):
  return {tuple(p): np.asarray(v[...]) for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def _assert_bitwise_equal(test, a, b):
  pa, pb = _params(a), _params(b)
  test.assertEqual(set(pa), set(pb))
  for path in pa:
    test.assertEqual(pa[path].dtype, pb[path].dtype, path)
    np.testing.assert_array_equal(pa[path], pb[path], err_msg=str(path))


class RoundTripTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = pathlib.Path(self.create_tempdir().full_path)

  @parameterized.named_parameters((name, name) for name in fx.CASES)
  def test_save_then_load_is_bitwise(self, name):
    model = fx.load(name)
    path = pejax.hf.save_pretrained(model, self.dir / name)
    loaded = pejax.hf.from_pretrained(path)
    self.assertEqual(loaded.config, model.config)
    _assert_bitwise_equal(self, loaded, model)
    written = json.loads((self.dir / name / "config.json").read_text())
    source = json.loads((fx.path(name) / "config.json").read_text())
    # Phi-3 with full rotation and no LongRoPE is a llama.
    expected_type = "llama" if name == "phi3_default" else source["model_type"]
    self.assertEqual(written["model_type"], expected_type)

  def test_phi3_fused_tensors_are_written_fused(self):
    from safetensors import safe_open
    path = pejax.hf.save_pretrained(fx.load("phi3_longrope_partial"), self.dir / "phi3")
    with safe_open(f"{path}/model.safetensors", "np") as saved, safe_open(
        fx.path("phi3_longrope_partial") / "model.safetensors", "np") as source:
      self.assertEqual(set(saved.keys()), set(source.keys()))
      for key in ("model.layers.0.self_attn.qkv_proj.weight",
                  "model.layers.1.mlp.gate_up_proj.weight"):
        np.testing.assert_array_equal(saved.get_tensor(key), source.get_tensor(key))

  def test_bfloat16_round_trip(self):
    model = fx.load("qwen2_biases", dtype=jnp.bfloat16)
    path = pejax.hf.save_pretrained(model, self.dir / "bf16")
    self.assertEqual(json.loads((self.dir / "bf16" / "config.json").read_text())["torch_dtype"],
                     "bfloat16")
    loaded = pejax.hf.from_pretrained(path)  # dtype=None keeps the file's bfloat16.
    self.assertEqual(loaded.config.dtype, "bfloat16")
    _assert_bitwise_equal(self, loaded, model)

  def test_pejax_model_folds_its_embedding_scale(self):
    config = DecoderConfig(num_layers=1, d_model=32, num_heads=2, tie_embeddings=False,
                           pe=RotaryConfig(scaling=rope_scaling.YaRNScaling(2.0, 16)))
    model = Decoder(config, rngs=nnx.Rngs(0))
    loaded = pejax.hf.from_pretrained(pejax.hf.save_pretrained(model, self.dir / "native"))
    self.assertFalse(loaded.config.scale_embeddings)
    for field in ("kv_heads", "head_dim", "mlp_hidden", "pe", "norm_epsilon", "tie_embeddings"):
      self.assertEqual(getattr(loaded.config, field), getattr(config, field), field)
    # The stored embedding is the product the decoder computes per token (W * sqrt(E) in
    # float32), so the logits are unchanged; every other parameter is copied bit for bit.
    before, after = _params(model), _params(loaded)
    embedding = ("embed", "embedding")
    np.testing.assert_array_equal(after.pop(embedding),
                                  before.pop(embedding) * np.float32(np.sqrt(32)))
    self.assertEqual(set(before), set(after))
    for path in before:
      np.testing.assert_array_equal(after[path], before[path])


class UnwritableTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("tied_scaled", dict(), "scale_embeddings"),
      ("alibi", dict(pe="alibi", tie_embeddings=False), "DecoderConfig.pe "),
      ("interleaved", dict(pe=RotaryConfig(layout="interleaved"), scale_embeddings=False),
       "pe.layout"),
      ("query_scaling", dict(query_scaling="logn", query_scaling_length=64,
                             scale_embeddings=False), "query_scaling"),
      ("per_layer_window", dict(num_layers=2, sliding_window=(4, None), scale_embeddings=False),
       "sliding_window"),
      ("gelu_mlp", dict(mlp="gelu", scale_embeddings=False), "DecoderConfig.mlp"),
  )
  def test_error_names_the_field(self, fields, field):
    config = DecoderConfig(num_layers=fields.pop("num_layers", 1), d_model=32, num_heads=2,
                           **fields)
    with self.assertRaisesRegex(ValueError, field):
      pejax.hf.decoder_config_to_hf(config)

  def test_wrong_family_for_a_config(self):
    config = fx.load("qwen3_qk_norm_sharded").config
    with self.assertRaisesRegex(ValueError, "qk_norm = True cannot be written as a Hugging Face "
                                "llama"):
      pejax.hf.decoder_config_to_hf(config, model_type="llama")
    with self.assertRaisesRegex(ValueError, "model_type must be one of"):
      pejax.hf.decoder_config_to_hf(config, model_type="gpt2")


if __name__ == "__main__":
  absltest.main()
