"""``python -m pejax.sample``: text from a run, and its one-line usage errors (exit 2).

The run is written directly (config.json + one checkpoint of a 1-layer decoder), not trained;
tests/hf/test_export.py samples from a trained one.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax

import pejax
from pejax import decoder_from_config
from pejax import experiment_config
from pejax import sample as sample_lib
from pejax.nn import Decoder
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import optimizer as optimizer_lib
from pejax.train import run_directory


def make_run(workdir: pathlib.Path, **overrides) -> None:
  """A run directory with one checkpoint (step 1) of a 1-layer, d_model 16 decoder."""
  config = experiment_config.get_default_config()
  config.workdir = str(workdir)
  config.model.num_layers, config.model.d_model, config.model.num_heads = 1, 16, 2
  config.data.train_len = 16
  config.update_from_flattened_dict(overrides)
  run_directory.open_run(config)
  model = Decoder(decoder_from_config.decoder_config_from(config), rngs=nnx.Rngs(params=0))
  optimizer = optimizer_lib.create_optimizer(model, config.optim, total_steps=100)
  with checkpoint_lib.Checkpointer(workdir / checkpoint_lib.CHECKPOINT_SUBDIR, config=config,
                                   async_save=False) as checkpointer:
    checkpointer.save(1, model=model, optimizer=optimizer)


def _main(*argv):
  """``(exit status, stdout, stderr)`` of ``python -m pejax.sample argv``."""
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      status = sample_lib.main(list(argv))
    except SystemExit as e:
      status = e.code
  return status, out.getvalue(), err.getvalue()


class SampleTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    root = pathlib.Path(tempfile.mkdtemp(prefix="pejax_sample_"))
    cls.addClassCleanup(shutil.rmtree, root)
    cls.workdir = root / "rope"
    make_run(cls.workdir)
    cls.learned = root / "learned"
    make_run(cls.learned, **{"pe.name": "learned"})  # A 16-position table.
    cls.loaded = pejax.load_run(cls.workdir)

  def test_greedy_text_is_the_prompt_then_generate_decoded(self):
    prompt = "déf "
    ids = self.loaded.tokenizer.encode(prompt)
    new = pejax.generate(self.loaded.model, [ids], max_new_tokens=6)
    expected = prompt + self.loaded.tokenizer.decode(ids + [int(t) for t in new[0]])[len(prompt):]
    text = sample_lib.sample(self.loaded, prompt, max_new_tokens=6, temperature=0.0)
    self.assertEqual(text, expected)

  def test_sampling_follows_the_seed(self):
    settings = dict(max_new_tokens=8, temperature=1.0, top_p=0.9, top_k=50)
    first = sample_lib.sample(self.loaded, "x", seed=1, **settings)
    self.assertEqual(sample_lib.sample(self.loaded, "x", seed=1, **settings), first)
    ids = [int(t) for t in pejax.generate(
        self.loaded.model, [[ord("x")]], max_new_tokens=8, temperature=1.0, top_p=0.9, top_k=50,
        rng=jax.random.PRNGKey(1))[0]]
    self.assertEqual(first, "x" + self.loaded.tokenizer.decode([ord("x")] + ids)[1:])

  def test_command_prints_prompt_and_continuation(self):
    status, out, err = _main(str(self.workdir), "--prompt", "import ", "--max_new_tokens=4",
                             "--temperature=0", "--step=1")
    self.assertEqual(status, 0, err)
    expected = sample_lib.sample(self.loaded, "import ", max_new_tokens=4, temperature=0.0)
    self.assertEqual(out, expected + "\n")

  @parameterized.named_parameters(
      ("negative_temperature", ["--temperature=-0.5"], "temperature must be a finite number "
       ">= 0, got -0.5"),
      ("nan_temperature", ["--temperature=nan"], "temperature must be a finite number >= 0, "
       "got nan"),
      ("top_p_zero", ["--top_p=0"], r"top_p must be in \(0, 1\] \(1: off\), got 0.0"),
      ("top_p_above_one", ["--top_p=1.5"], r"top_p must be in \(0, 1\].* got 1.5"),
      ("no_new_tokens", ["--max_new_tokens=0"], "max_new_tokens must be an integer >= 1, got 0"),
      ("negative_top_k", ["--top_k=-1"], "top_k must be an integer >= 0"),
      ("filter_with_greedy", ["--temperature=0", "--top_k=5"],
       "top_k=5 / top_p=1.0 only apply when sampling"),
      ("missing_step", ["--step=9"], r"step 9 has no checkpoint in .*available steps \[1\]"),
      ("empty_prompt", ["--prompt="], "prompt must be at least one token"),
  )
  def test_bad_argument_is_one_line_exit_2(self, args, message):
    status, out, err = _main(str(self.workdir), "--prompt", "x", *args)
    self.assertEqual(status, 2)
    self.assertEqual(out, "")
    self.assertEqual(err.count("\n"), 1, err)
    self.assertRegex(err, "^python -m pejax.sample: error: " + message)

  def test_not_a_run_is_one_line_exit_2(self):
    empty = self.create_tempdir().full_path
    status, _, err = _main(empty, "--prompt", "x")
    self.assertEqual(status, 2)
    self.assertRegex(err, "^python -m pejax.sample: error: .* is not a run directory")

  def test_prompt_longer_than_a_learned_table(self):
    status, _, err = _main(str(self.learned), "--prompt", "x" * 14, "--max_new_tokens=3")
    self.assertEqual(status, 2)
    self.assertRegex(err, r"prompt of 14 tokens plus max_new_tokens=3 is longer than the model "
                     r"takes \(16 positions.*generate at most 2 tokens")
    # Exactly the table: 14 + 2 positions.
    text = sample_lib.sample(pejax.load_run(self.learned), "x" * 14, max_new_tokens=2,
                             temperature=0.0)
    self.assertTrue(text.startswith("x" * 14))


if __name__ == "__main__":
  absltest.main()
