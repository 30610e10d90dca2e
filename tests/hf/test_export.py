"""``python -m pejax.hf.export RUN OUT``: a run -> a Hugging Face checkpoint with its tokenizer.

The fast tests export runs written directly (config.json + a checkpoint, no training); the slow
one trains a tiny run with ``launch.run``, samples from it, exports it, reads it back and
evaluates the export with ``launch.py --init_from_hf --eval_only``. That transformers loads an
export to the same logits and ids is checked against transformers itself by
tests/golden/check_hf_loads_saved.py (tests/hf/transformers_loads_saved.json).
"""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import tempfile
import shutil

from absl.testing import absltest
from flax import nnx
import jax.numpy as jnp
import numpy as np
import pytest

import pejax
import pejax.hf
from pejax import decoder_from_config
from pejax import experiment_config
from pejax.hf import export
from pejax.nn import Decoder
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import optimizer as optimizer_lib
from pejax.train import run_directory
import fixture_cases as fx

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXTS = ("def main():\n    return 0", "héllo wörld", "日本語 🙂", "\x00\t  x")


def make_run(workdir: pathlib.Path, **overrides) -> None:
  """A run directory with one checkpoint (step 1) of a 1-layer, d_model 16 decoder."""
  config = experiment_config.get_default_config()
  config.workdir = str(workdir)
  config.model.num_layers, config.model.d_model, config.model.num_heads = 1, 16, 2
  config.data.train_len = 16
  config.update_from_flattened_dict(overrides)
  run_directory.open_run(config)
  if config.train.init_from_hf:
    model_config, _ = decoder_from_config.pretrained_setup(config)
  else:
    model_config = decoder_from_config.decoder_config_from(config)
  model = Decoder(model_config, rngs=nnx.Rngs(params=0))
  optimizer = optimizer_lib.create_optimizer(model, config.optim, total_steps=100)
  with checkpoint_lib.Checkpointer(workdir / checkpoint_lib.CHECKPOINT_SUBDIR, config=config,
                                   async_save=False) as checkpointer:
    checkpointer.save(1, model=model, optimizer=optimizer)


def _main(*argv):
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      status = export.main(list(argv))
    except SystemExit as e:
      status = e.code
  return status, out.getvalue(), err.getvalue()




def assert_same_model_and_tokenizer(test, run, directory, *, atol=1e-6):
  """The export reads back (pejax) to the run's logits and the run tokenizer's ids."""
  loaded = pejax.hf.from_pretrained(directory)
  tokenizer = pejax.hf.load_tokenizer(directory)
  every = []
  for text in TEXTS:
    ids = [int(i) for i in run.tokenizer.encode(text)]
    test.assertEqual(tokenizer.encode(text).tolist(), ids, text)
    every += ids
  tokens = jnp.asarray([every], jnp.int32)  # One jitted forward pass per model.
  np.testing.assert_allclose(np.asarray(fx.logits(loaded, tokens)),
                             np.asarray(fx.logits(run.model, tokens)), rtol=1e-6, atol=atol)


class ExportTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = pathlib.Path(tempfile.mkdtemp(prefix="pejax_export_"))
    cls.addClassCleanup(shutil.rmtree, cls.root)
    cls.workdir = cls.root / "rope"
    make_run(cls.workdir)  # launch.py's default model: tied, sqrt(d_model) scale.

  def test_default_model_exports_untied_with_the_same_logits_and_ids(self):
    out = self.root / "hf_rope"
    result = export.export_run(self.workdir, out)
    self.assertEqual(result.files, ("config.json", "generation_config.json",
                                    "model.safetensors", "tokenizer.json",
                                    "tokenizer_config.json"))
    self.assertEqual(sorted(p.name for p in out.iterdir()), list(result.files))
    self.assertEqual((result.model_type, result.step), ("llama", 1))
    self.assertIn("written untied", result.summary)
    self.assertIn("W * 4", result.summary)  # sqrt(16).
    written = json.loads((out / "config.json").read_text())
    self.assertFalse(written["tie_word_embeddings"])
    self.assertEqual(written["max_position_embeddings"], 16)  # The training length.
    self.assertEqual(json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"],
                     "PreTrainedTokenizerFast")
    run = pejax.load_run(self.workdir)
    assert_same_model_and_tokenizer(self, run, out)
    params = pejax.hf.from_pretrained(out)
    embedding = np.asarray(run.model.embed.embedding[...])
    np.testing.assert_array_equal(np.asarray(params.lm_head.kernel[...]), embedding.T)
    np.testing.assert_array_equal(np.asarray(params.embed.embedding[...]),
                                  embedding * np.float32(4.0))

  def test_existing_files_need_overwrite(self):
    out = self.root / "twice"
    export.export_run(self.workdir, out)
    with self.assertRaisesRegex(ValueError, "already holds config.json, .*pass --overwrite"):
      export.export_run(self.workdir, out)
    (out / "special_tokens_map.json").write_text("{}")  # As a checkpoint's tokenizer has.
    (out / "notes.txt").write_text("mine")
    self.assertEqual(export.export_run(self.workdir, out, overwrite=True).step, 1)
    # A stale tokenizer file would change what AutoTokenizer reads; other files stay.
    self.assertFalse((out / "special_tokens_map.json").exists())
    self.assertEqual((out / "notes.txt").read_text(), "mine")

  def test_bfloat16(self):
    out = self.root / "bf16"
    result = export.export_run(self.workdir, out, dtype="bfloat16")
    self.assertIn("bfloat16", result.summary)
    loaded = pejax.hf.from_pretrained(out)
    self.assertEqual(loaded.config.dtype, "bfloat16")
    self.assertEqual(loaded.embed.embedding[...].dtype, jnp.bfloat16)

  def test_unexpressible_run_names_the_field_and_writes_nothing(self):
    workdir = self.root / "alibi"
    make_run(workdir, **{"pe.name": "alibi"})
    out = self.root / "hf_alibi"
    with self.assertRaisesRegex(ValueError, "DecoderConfig.pe = 'alibi' .*alibi has no Hugging "
                                "Face llama equivalent"):
      export.export_run(workdir, out)
    self.assertFalse(out.exists())

  def test_command_line(self):
    status, out, err = _main(str(self.workdir), str(self.root / "cli"), "--step", "1")
    self.assertEqual(status, 0, err)
    self.assertRegex(out, r"^wrote .*cli: llama \(LlamaForCausalLM\), 1 layers, d_model 16")
    for args, message in (
        ([str(self.root), str(self.root / "x")], "is not a run directory"),
        ([str(self.workdir), str(self.root / "x"), "--step", "5"],
         r"step 5 has no checkpoint .*available steps \[1\]"),
        ([str(self.workdir), str(self.root / "x"), "--dtype", "float16"],
         "argument --dtype: invalid choice"),
        ([str(self.workdir), str(self.root / "x"), "--model_type", "gpt2"],
         "model_type must be one of"),
    ):
      status, out, err = _main(*args)
      self.assertEqual(status, 2, args)
      self.assertEqual(err.count("\n"), 1, err)
      self.assertRegex(err, "^python -m pejax.hf.export: error: .*" + message)

  def test_run_from_a_phi3_checkpoint_stays_phi3(self):
    # Phi-3 with full rotary (what inference alone would write as a llama), given a byte-level
    # tokenizer.json so that launch.py can start a run from it.
    source = self.root / "phi3_source"
    shutil.copytree(fx.path("phi3_default"), source)
    pejax.hf.ByteTokenizer().save(source)
    workdir = self.root / "phi3_run"
    make_run(workdir, **{"train.init_from_hf": str(source)})
    out = self.root / "hf_phi3"
    result = export.export_run(workdir, out)
    self.assertEqual(result.model_type, "phi3")
    self.assertIn(f"tokenizer: copied from {source}", result.summary)
    self.assertEqual(json.loads((out / "config.json").read_text()),
                     json.loads((source / "config.json").read_text()))
    from safetensors import safe_open
    with safe_open(out / "model.safetensors", "np") as a, safe_open(
        source / "model.safetensors", "np") as b:
      self.assertEqual(set(a.keys()), set(b.keys()))
      self.assertIn("model.layers.0.self_attn.qkv_proj.weight", set(a.keys()))
    assert_same_model_and_tokenizer(self, pejax.load_run(workdir), out)


class EndToEndTest(absltest.TestCase):

  @pytest.mark.slow
  def test_train_load_sample_export_read_back_and_evaluate(self):
    import launch  # pylint: disable=g-import-not-at-top
    from pejax import sample  # pylint: disable=g-import-not-at-top
    root = pathlib.Path(self.create_tempdir().full_path)
    workdir, out = root / "run", root / "hf"
    status = launch.run(["launch.py", "--steps=3", "--train_len=16",
                         "--config.model.num_layers=1", "--config.model.d_model=32",
                         "--config.model.num_heads=2", "--config.data.batch_size=2",
                         "--config.optim.warmup_steps=1", "--config.train.checkpoint_every=3",
                         "--config.eval.num_tokens=64", "--eval_lens=16",
                         f"--workdir={workdir}"])
    self.assertEqual(status, 0)
    run = pejax.load_run(workdir)
    self.assertEqual(run.step, 3)
    text = sample.sample(run, "def ", max_new_tokens=8, temperature=0.0)
    self.assertTrue(text.startswith("def "))
    result = export.export_run(workdir, out)
    self.assertIn("written untied", result.summary)
    assert_same_model_and_tokenizer(self, run, out)
    data = root / "text.txt"
    data.write_text("the quick brown fox jumps over the lazy dog. " * 20)
    status = launch.run(["launch.py", f"--init_from_hf={out}", "--eval_only", f"--data={data}",
                         "--eval_lens=16", f"--workdir={root / 'evaluated'}"])
    self.assertEqual(status, 0)
    self.assertLen(list((root / "evaluated" / "evals").glob("*/results.json")), 1)


if __name__ == "__main__":
  absltest.main()
