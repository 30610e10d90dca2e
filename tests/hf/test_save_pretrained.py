"""``pejax.hf.save_pretrained``: save -> load is bit-exact; what cannot be written is an error.

That transformers loads the saved directories to the same logits is checked against transformers
itself by tests/golden/check_hf_loads_saved.py (result: tests/hf/transformers_loads_saved.json).
"""

from __future__ import annotations

import json
import pathlib
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
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

  @parameterized.named_parameters((name, name) for name in fx.CASES)
  def test_round_trip_keeps_family_tensor_names_and_config_json(self, name):
    # The family (phi3_default: full rotary, still phi3 with fused tensors, not a llama), the
    # tensor names and every config.json key and value come back: keys pejax does not read
    # (ids, transformers_version, dropout), the RoPE form (rope_scaling + rope_theta or
    # rope_parameters) and the dtype key's name ("dtype" in these transformers-5 files).
    from safetensors import safe_open
    path = pejax.hf.save_pretrained(fx.load(name), self.dir / name)
    written = json.loads((self.dir / name / "config.json").read_text())
    source = json.loads((fx.path(name) / "config.json").read_text())
    self.assertEqual(written, source)
    names = set()
    for file in fx.path(name).glob("*.safetensors"):
      with safe_open(file, "np") as f:
        names |= set(f.keys())
    with safe_open(f"{path}/model.safetensors", "np") as f:
      self.assertEqual(set(f.keys()), names)

  def test_explicit_model_type_overrides_the_source_family(self):
    model = fx.load("phi3_default")
    path = pejax.hf.save_pretrained(model, self.dir / "as_llama", model_type="llama")
    written = json.loads((self.dir / "as_llama" / "config.json").read_text())
    self.assertEqual(written["model_type"], "llama")
    self.assertNotIn("resid_pdrop", written)  # A phi3 key is not carried into a llama.
    loaded = pejax.hf.from_pretrained(path)
    np.testing.assert_array_equal(np.asarray(fx.logits(loaded, fx.PROMPTS)),
                                  np.asarray(fx.logits(model, fx.PROMPTS)))

  def test_a_new_rope_scaling_is_written_not_the_sources(self):
    model = pejax.hf.with_rope_scaling(fx.load("llama_linear_tied"),
                                       rope_scaling.YaRNScaling(2.0, 32))
    self.assertEqual(model.hf_source, fx.load("llama_linear_tied").hf_source)
    path = pejax.hf.save_pretrained(model, self.dir / "yarn")
    written = json.loads((self.dir / "yarn" / "config.json").read_text())
    self.assertEqual(written["rope_parameters"]["rope_type"], "yarn")
    self.assertNotIn("rope_scaling", written)  # The source's linear scaling is not kept.
    self.assertEqual(written["bos_token_id"], 1)  # Uninterpreted keys still are.
    self.assertEqual(pejax.hf.from_pretrained(path).config.pe, model.config.pe)

  def test_source_record_is_static_not_state(self):
    model = fx.load("phi3_default")
    self.assertEqual(model.hf_source.model_type, "phi3")
    self.assertEqual(model.hf_source.config["resid_pdrop"], 0.0)
    paths = [tuple(p) for p, _ in nnx.to_flat_state(nnx.state(model))]
    self.assertFalse(any("hf_source" in map(str, p) for p in paths))
    graphdef, state = nnx.split(model)
    self.assertEqual(nnx.merge(graphdef, state).hf_source, model.hf_source)
    hash(graphdef)  # A jit static: must stay hashable.

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
    # The source's key name ("dtype", transformers 5), the written tensors' dtype.
    self.assertEqual(json.loads((self.dir / "bf16" / "config.json").read_text())["dtype"],
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


  def test_tied_scaled_model_is_written_untied_with_the_same_logits(self):
    # launch.py's default model: tied embeddings and pejax's sqrt(d_model) input scale.
    config = DecoderConfig(num_layers=1, d_model=32, num_heads=2)
    self.assertTrue(config.tie_embeddings and config.scale_embeddings)
    model = Decoder(config, rngs=nnx.Rngs(0))
    loaded = pejax.hf.from_pretrained(pejax.hf.save_pretrained(model, self.dir / "tied"))
    self.assertFalse(loaded.config.tie_embeddings)
    self.assertFalse(loaded.config.scale_embeddings)
    tokens = jnp.asarray(fx.PROMPTS % 256)
    np.testing.assert_allclose(np.asarray(fx.logits(loaded, tokens)),
                               np.asarray(fx.logits(model, tokens)), rtol=1e-6, atol=1e-6)
    before, after = _params(model), _params(loaded)
    embedding = before.pop(("embed", "embedding"))
    np.testing.assert_array_equal(after.pop(("embed", "embedding")),
                                  embedding * np.float32(np.sqrt(32)))
    np.testing.assert_array_equal(after.pop(("lm_head", "kernel")), embedding.T)  # Unscaled.
    self.assertEqual(set(before), set(after))
    written = json.loads((self.dir / "tied" / "config.json").read_text())
    self.assertFalse(written["tie_word_embeddings"])
    self.assertEqual(written["model_type"], "llama")

  def test_dtype_argument_casts_the_stored_tensors(self):
    model = Decoder(DecoderConfig(num_layers=1, d_model=32, num_heads=2), rngs=nnx.Rngs(0))
    path = pejax.hf.save_pretrained(model, self.dir / "bf16", dtype="bfloat16")
    self.assertEqual(json.loads((self.dir / "bf16" / "config.json").read_text())["torch_dtype"],
                     "bfloat16")
    loaded = pejax.hf.from_pretrained(path)
    self.assertEqual(loaded.config.dtype, "bfloat16")
    np.testing.assert_array_equal(
        np.asarray(loaded.lm_head.kernel[...]),
        np.asarray(model.embed.embedding[...]).T.astype(jnp.bfloat16))
    with self.assertRaisesRegex(ValueError, "dtype must be None, float32 or bfloat16, got "
                                "'int8'"):
      pejax.hf.save_pretrained(model, self.dir / "int8", dtype="int8")
    self.assertFalse((self.dir / "int8").exists())


class FailedSaveTest(parameterized.TestCase):
  """A save that fails leaves the directory's previous checkpoint as it was."""

  @parameterized.named_parameters(
      ("not_json", {"eos_token_id": object()}, "config.json key 'eos_token_id'"),
      ("nan", {"initializer_range": float("nan")}, "config.json key 'initializer_range'"),
  )
  def test_previous_files_are_intact(self, extra_config, message):
    directory = pathlib.Path(self.create_tempdir().full_path)
    first = Decoder(DecoderConfig(num_layers=1, d_model=32, num_heads=2), rngs=nnx.Rngs(0))
    pejax.hf.save_pretrained(first, directory)
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    second = Decoder(DecoderConfig(num_layers=1, d_model=32, num_heads=2), rngs=nnx.Rngs(1))
    with self.assertRaisesRegex(ValueError, message):
      pejax.hf.save_pretrained(second, directory, extra_config=extra_config)
    self.assertEqual({p.name: p.read_bytes() for p in directory.iterdir()}, before)

  @parameterized.named_parameters(
      ("negative_length", {"max_position_embeddings": -5}, ValueError,
       r"extra_config\['max_position_embeddings'\]=-5 would override .*max_position_embeddings="),
      ("other_length", {"max_position_embeddings": 100}, ValueError,
       r"extra_config\['max_position_embeddings'\]=100 would override"),
      ("model_size", {"hidden_size": 64}, ValueError,
       r"extra_config\['hidden_size'\]=64 would override .*\(32\)"),
      ("rope_theta", {"rope_theta": 5.0}, ValueError, r"extra_config\['rope_theta'\]=5.0"),
      ("family", {"model_type": "qwen2"}, ValueError,
       r"extra_config\['model_type'\]='qwen2' would override .*model_type= argument"),
      ("dtype", {"torch_dtype": "bfloat16"}, ValueError, r"extra_config\['torch_dtype'\]"),
      ("not_a_dict", [("eos_token_id", 3)], TypeError, r"extra_config must be a dict .*list"),
      ("key_not_a_string", {3: 4}, TypeError, r"extra_config keys must be strings, got 3"),
  )
  def test_extra_config_cannot_describe_another_model(self, extra_config, error, message):
    directory = pathlib.Path(self.create_tempdir().full_path)
    model = Decoder(DecoderConfig(num_layers=1, d_model=32, num_heads=2), rngs=nnx.Rngs(0))
    pejax.hf.save_pretrained(model, directory)
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    with self.assertRaisesRegex(error, message):
      pejax.hf.save_pretrained(model, directory, extra_config=extra_config)
    self.assertEqual({p.name: p.read_bytes() for p in directory.iterdir()}, before)

  def test_extra_config_keys_pejax_does_not_read_and_numpy_scalars_are_written(self):
    directory = pathlib.Path(self.create_tempdir().full_path)
    model = Decoder(DecoderConfig(num_layers=1, d_model=32, num_heads=2), rngs=nnx.Rngs(0))
    written = json.loads(pathlib.Path(pejax.hf.save_pretrained(model, directory)).joinpath(
        "config.json").read_text())
    pejax.hf.save_pretrained(model, directory, extra_config={
        "eos_token_id": np.int64(2), "initializer_range": np.float32(0.5),
        "hidden_size": written["hidden_size"]})  # Repeating a computed value is fine.
    config = json.loads((directory / "config.json").read_text())
    self.assertEqual((config["eos_token_id"], config["initializer_range"]), (2, 0.5))
    self.assertIsInstance(config["eos_token_id"], int)

  @parameterized.named_parameters(("zero", 0), ("negative", -1), ("float", 2.5), ("bool", True))
  def test_max_position_embeddings_must_be_a_positive_integer(self, value):
    model = Decoder(DecoderConfig(num_layers=1, d_model=32, num_heads=2), rngs=nnx.Rngs(0))
    directory = pathlib.Path(self.create_tempdir().full_path) / "out"
    with self.assertRaisesRegex(ValueError, rf"max_position_embeddings must be a positive "
                                rf"integer, got {value!r}"):
      pejax.hf.save_pretrained(model, directory, max_position_embeddings=value)
    self.assertFalse(directory.exists())

  def test_failure_while_writing_removes_the_temporary_files(self):
    directory = pathlib.Path(self.create_tempdir().full_path)
    model = Decoder(DecoderConfig(num_layers=1, d_model=32, num_heads=2), rngs=nnx.Rngs(0))
    pejax.hf.save_pretrained(model, directory)
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    with mock.patch("os.replace", side_effect=OSError("disk full")):
      with self.assertRaisesRegex(OSError, "disk full"):
        pejax.hf.save_pretrained(model, directory, extra_config={"eos_token_id": 3})
    self.assertEqual({p.name: p.read_bytes() for p in directory.iterdir()}, before)


class TransformersRecordTest(absltest.TestCase):
  """tests/hf/transformers_loads_saved.json: what transformers made of pejax's files, recorded
  by tests/golden/check_hf_loads_saved.py (re-run it after changing what is written)."""

  RECORD = pathlib.Path(__file__).resolve().parent / "transformers_loads_saved.json"
  EXPORTS = ("run_export_launch_default", "run_export_phi3_finetuned")

  def test_every_saved_model_has_transformers_logits(self):
    record = json.loads(self.RECORD.read_text())
    self.assertRegex(record["transformers"], r"^\d+\.\d+")
    self.assertRegex(record["torch"], r"^\d+\.\d+")
    models = record["models"]
    expected = set(fx.CASES) | {"pejax_native_untied", "pejax_native_yarn_qwen3"} | set(
        self.EXPORTS)
    self.assertEqual(set(models), expected)
    for name, entry in models.items():
      self.assertLess(entry["max_rel_logit_diff"], fx.PARITY_TOLERANCE, name)

  def test_fixtures_keep_their_family_in_transformers(self):
    models = json.loads(self.RECORD.read_text())["models"]
    for name in fx.CASES:
      source = json.loads((fx.path(name) / "config.json").read_text())["model_type"]
      self.assertEqual(models[name]["model_type"], source, name)  # phi3_default: phi3.

  def test_exports_tokenize_as_pejax(self):
    models = json.loads(self.RECORD.read_text())["models"]
    self.assertEqual(models["run_export_launch_default"]["model_type"], "llama")
    self.assertEqual(models["run_export_phi3_finetuned"]["model_type"], "phi3")
    for name in self.EXPORTS:
      entry = models[name]
      self.assertTrue(entry["tokenizer_ids_equal"], name)
      self.assertTrue(entry["tokenizer_decodes_back"], name)
      self.assertEqual(entry["tokenizer_texts"], 5, name)


class UnwritableTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("tied_scaled", dict(), "scale_embeddings"),
      ("alibi", dict(pe="alibi", tie_embeddings=False),
       "DecoderConfig.pe = 'alibi' .*alibi has no Hugging Face llama equivalent"),
      ("interleaved", dict(pe=RotaryConfig(layout="interleaved"), scale_embeddings=False),
       "pe.layout"),
      ("query_scaling", dict(query_scaling="logn", query_scaling_length=64,
                             scale_embeddings=False), "query_scaling"),
      ("per_layer_window", dict(num_layers=2, sliding_window=(4, None), scale_embeddings=False),
       "sliding_window"),
      ("gelu_mlp", dict(mlp="gelu", scale_embeddings=False), "DecoderConfig.mlp"),
      ("chunked", dict(chunk_size=8, scale_embeddings=False), "DecoderConfig.chunk_size = 8"),
      ("llama4_scaling", dict(query_scaling="llama4", scale_embeddings=False), "query_scaling"),
      ("l2_qk_norm", dict(qk_norm="l2", scale_embeddings=False), "qk_norm = 'l2'"),
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
