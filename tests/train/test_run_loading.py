"""``pejax.load_run``: a run directory -> its decoder at a checkpoint, config and tokenizer.

The runs here are written directly (``config.json`` + two Orbax checkpoints of a 1-layer
decoder whose parameters differ per step), not trained: what is checked is which arrays come
back, not what training makes of them (tests/hf/test_export.py trains one end to end).
"""

from __future__ import annotations

import pathlib
import shutil
import tempfile

from absl.testing import absltest
from flax import nnx
import numpy as np

import pejax
import pejax.hf
from pejax import decoder_from_config
from pejax import experiment_config
from pejax.nn import Decoder
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import optimizer as optimizer_lib
from pejax.train import run_directory
from pejax.train import run_loading

ROOT = pathlib.Path(__file__).resolve().parents[2]
HF_FIXTURE = ROOT / "tests" / "hf" / "fixtures" / "llama_default_untied"


def _params(model) -> dict:
  return {tuple(p): np.asarray(v[...]) for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def make_run(workdir: pathlib.Path, *, steps=(2, 3), **overrides) -> dict:
  """A run directory with a checkpoint per step (embedding + step); its params per step."""
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
  model = Decoder(model_config, rngs=nnx.Rngs(params=1))
  optimizer = optimizer_lib.create_optimizer(model, config.optim, total_steps=100)
  saved = {}
  with checkpoint_lib.Checkpointer(workdir / checkpoint_lib.CHECKPOINT_SUBDIR, config=config,
                                   async_save=False) as checkpointer:
    for step in steps:
      model.embed.embedding[...] = model.embed.embedding[...] + step
      checkpointer.save(step, model=model, optimizer=optimizer)
      saved[step] = _params(model)
  return saved


class LoadRunTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = pathlib.Path(tempfile.mkdtemp(prefix="pejax_run_loading_"))
    cls.addClassCleanup(shutil.rmtree, cls.root)
    cls.workdir = cls.root / "run"
    cls.saved = make_run(cls.workdir)

  def assert_params(self, model, expected):
    got = _params(model)
    self.assertEqual(set(got), set(expected))
    for path, value in expected.items():
      np.testing.assert_array_equal(got[path], value, err_msg=str(path))

  def test_latest_checkpoint_with_config_and_byte_tokenizer(self):
    run = pejax.load_run(str(self.workdir))
    self.assertIsInstance(run, pejax.LoadedRun)
    self.assertEqual(run.step, 3)
    self.assert_params(run.model, self.saved[3])
    self.assertEqual(run.workdir, self.workdir.absolute())
    self.assertEqual(run.config.model.d_model, 16)
    self.assertEqual(run.model.config.d_model, 16)
    self.assertIsInstance(run.tokenizer, pejax.hf.ByteTokenizer)
    self.assertEqual(run.tokenizer.encode("é"), [195, 169])
    self.assertIsNone(getattr(run.model, "hf_source", None))

  def test_chosen_step(self):
    run = pejax.load_run(self.workdir, step=2)
    self.assertEqual(run.step, 2)
    self.assert_params(run.model, self.saved[2])

  def test_missing_step_lists_the_available_ones(self):
    with self.assertRaisesRegex(ValueError, r"step 7 has no checkpoint in .*; available steps "
                                r"\[2, 3\]"):
      pejax.load_run(self.workdir, step=7)
    for bad in ("3", 3.0, True):
      with self.assertRaisesRegex(ValueError, "step must be an integer checkpoint step"):
        pejax.load_run(self.workdir, step=bad)

  def test_not_a_run(self):
    with self.assertRaisesRegex(ValueError, "is not a directory"):
      pejax.load_run(self.root / "nowhere")
    empty = pathlib.Path(self.create_tempdir().full_path)
    with self.assertRaisesRegex(ValueError, "is not a run directory \\(no config.json"):
      pejax.load_run(empty)
    with self.assertRaisesRegex(ValueError, "workdir must be a run directory path, got int"):
      pejax.load_run(3)

  def test_run_without_checkpoint_is_an_error_and_stays_untouched(self):
    workdir = pathlib.Path(self.create_tempdir().full_path) / "fresh"
    config = experiment_config.get_default_config()
    config.workdir = str(workdir)
    run_directory.open_run(config)
    before = sorted(p.name for p in workdir.iterdir())
    with self.assertRaisesRegex(ValueError, "has no checkpoint yet"):
      pejax.load_run(workdir)
    self.assertEqual(sorted(p.name for p in workdir.iterdir()), before)  # No checkpoints/ made.
    self.assertEqual(run_loading.checkpoint_steps(workdir), [])

  def test_half_written_step_is_not_counted(self):
    self.assertEqual(run_loading.checkpoint_steps(self.workdir), [2, 3])
    workdir = self.root / "with_tmp"
    make_run(workdir, steps=(1,))
    (workdir / "checkpoints" / "5.orbax-checkpoint-tmp-1").mkdir()
    self.assertEqual(run_loading.checkpoint_steps(workdir), [1])

  def test_unregistered_pe_names_the_recorded_module(self):
    workdir = pathlib.Path(self.create_tempdir().full_path) / "user_pe"
    make_run(workdir, steps=(1,))
    record = workdir / "config.json"
    text = record.read_text().replace('"name": "rope"', '"name": "my_missing_pe"').replace(
        '"pe_modules": ""', '"pe_modules": "my_pe_module"')
    record.write_text(text)
    with self.assertRaisesRegex(ValueError, "cannot rebuild the decoder of .*my_missing_pe.*"
                                "--pe_module=my_pe_module"):
      pejax.load_run(workdir)


class HFInitializedRunTest(absltest.TestCase):

  def test_checkpoint_tokenizer_and_family(self):
    workdir = pathlib.Path(self.create_tempdir().full_path) / "finetuned"
    saved = make_run(workdir, steps=(4,), **{"train.init_from_hf": str(HF_FIXTURE)})
    run = pejax.load_run(workdir)
    self.assertEqual(run.step, 4)
    got = _params(run.model)
    for path, value in saved[4].items():
      np.testing.assert_array_equal(got[path], value)
    self.assertIsInstance(run.tokenizer, pejax.hf.Tokenizer)
    self.assertEqual(run.tokenizer.vocab_size, 320)
    self.assertEqual(run.tokenizer.eos_token_ids, (2,))
    self.assertEqual(run.model.hf_source.model_type, "llama")
    self.assertEqual(run.model.hf_source.config["bos_token_id"], 1)


if __name__ == "__main__":
  absltest.main()
