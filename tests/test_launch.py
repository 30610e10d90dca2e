"""End-to-end tests of `python launch.py` and `train_and_evaluate` with tiny settings."""

import json
import os
import pathlib
import signal
import subprocess
import sys

from absl.testing import absltest
from flax import nnx
import jax
import numpy as np

from pejax import experiment_config
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import experiment

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _tiny_config(workdir, **overrides):
  config = experiment_config.get_default_config()
  config.workdir = str(workdir)
  config.model.num_layers, config.model.d_model, config.model.num_heads = 1, 32, 2
  config.data.train_len, config.data.batch_size = 32, 4
  config.train.steps, config.train.log_every = 8, 4
  config.train.eval_every, config.train.checkpoint_every = 4, 4
  config.optim.warmup_steps = 2
  config.eval.lens = "32,64"
  config.eval.num_tokens = 256
  for path, value in overrides.items():
    node = config
    *parents, leaf = path.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = value
  return config


def _run_launch(*args, timeout=300, reexec=True):
  """Runs launch.py; ``reexec=False`` skips its allocator re-execution (usage-error tests)."""
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("PEJAX_RUNTIME_ENV_APPLIED", None)
  if not reexec:
    env["PEJAX_NO_RUNTIME_ENV"] = "1"
  return subprocess.run([sys.executable, str(ROOT / "launch.py"), *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=timeout)


def _params(workdir, config):
  """The model parameters of the latest checkpoint in ``workdir`` as numpy leaves."""
  model = experiment.Decoder(experiment.decoder_config_from(config), rngs=nnx.Rngs(123))
  with checkpoint_lib.Checkpointer(pathlib.Path(workdir) / "checkpoints",
                                   config=config) as ckpt:
    restored = ckpt.restore(model)
  leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
  return restored.step, [np.asarray(x) for x in leaves]


class LaunchTest(absltest.TestCase):

  def test_end_to_end_through_launch(self):
    workdir = self.create_tempdir().full_path
    proc = _run_launch("--pe=alibi", "--steps=12", "--train_len=32", "--batch_size=4",
                       "--num_layers=1", "--d_model=32", "--num_heads=2", "--eval_lens=32,64",
                       "--eval_tokens=256", f"--workdir={workdir}", "--eval_mode=both")
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn("ppl nonoverlap", proc.stdout)
    self.assertIn("ppl sliding", proc.stdout)
    for name in ("results.json", "results.csv", "perplexity_vs_length.png", "metrics.jsonl",
                 "config.json", "results.md"):
      self.assertTrue((pathlib.Path(workdir) / name).exists(), name)
    results = json.loads((pathlib.Path(workdir) / "results.json").read_text())
    rows = results["perplexity"]["alibi"]
    self.assertEqual(sorted({(r["length"], r["mode"]) for r in rows}),
                     [(32, "nonoverlap"), (32, "sliding"), (64, "nonoverlap"), (64, "sliding")])
    self.assertTrue(all(r["perplexity"] > 1 for r in rows))
    metrics = [json.loads(line) for line in
               (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    self.assertTrue(any(m["split"] == "eval" for m in metrics))

  def test_bad_flags_give_one_line_usage_errors(self):
    for args, expected in ((["--pe=foo"], "alibi"), (["--rope_scaling=magic"], "yarn"),
                           (["--steps=0"], "steps"), (["--eval_mode=both,sliding"], "nonoverlap"),
                           (["--eval_lens=64,abc", "--steps=1"], "eval_lens")):
      proc = _run_launch(*args, timeout=120, reexec=False)
      self.assertNotEqual(proc.returncode, 0, args)
      self.assertIn(expected, proc.stderr, args)
      self.assertNotIn("Traceback", proc.stderr, args)

  def test_bad_data_name_is_a_usage_error(self):
    proc = _run_launch("--data=/no/such/corpus", "--steps=1", timeout=120, reexec=False)
    self.assertNotEqual(proc.returncode, 0)
    self.assertIn("stdlib", proc.stderr)
    self.assertNotIn("Traceback", proc.stderr)


class ExperimentTest(absltest.TestCase):

  def test_resume_after_sigterm_equals_uninterrupted_run(self):
    straight_dir = self.create_tempdir().full_path
    straight = _tiny_config(straight_dir)
    experiment.train_and_evaluate(straight, log=lambda s: None)

    stopped_dir = self.create_tempdir().full_path
    config = _tiny_config(stopped_dir)

    def stop_at_3(step, metrics):
      if step == 3:
        os.kill(os.getpid(), signal.SIGTERM)

    first = experiment.train_and_evaluate(config, log=lambda s: None, step_callbacks=[stop_at_3])
    self.assertEqual(first.train.stop_reason, "SIGTERM")
    self.assertEqual(first.train.final_step, 3)
    second = experiment.train_and_evaluate(config, log=lambda s: None)
    self.assertEqual(second.train.start_step, 3)
    step_a, params_a = _params(straight_dir, straight)
    step_b, params_b = _params(stopped_dir, config)
    self.assertEqual((step_a, step_b), (8, 8))
    for a, b in zip(params_a, params_b):
      np.testing.assert_array_equal(a, b)

  def test_incompatible_checkpoint_names_the_field(self):
    workdir = self.create_tempdir().full_path
    experiment.train_and_evaluate(_tiny_config(workdir, **{"train.steps": 2}), log=lambda s: None)
    with self.assertRaisesRegex(ValueError, "model.d_model"):
      experiment.train_and_evaluate(_tiny_config(workdir, **{"model.d_model": 16}),
                                    log=lambda s: None)

  def test_learned_pe_past_table_and_zero_shot_scaling(self):
    workdir = self.create_tempdir().full_path
    result = experiment.train_and_evaluate(
        _tiny_config(workdir, **{"pe.name": "learned", "train.steps": 2}), log=lambda s: None)
    self.assertIn("n/a (table size 32)", result.text)
    workdir = self.create_tempdir().full_path
    result = experiment.train_and_evaluate(
        _tiny_config(workdir, **{"train.steps": 2, "eval.rope_scaling": "yarn"}),
        log=lambda s: None)
    self.assertIn("zero-shot yarn x2", result.text)
    self.assertLen(result.tables, 2)

  def test_fine_tune_from_another_run_with_scaling_and_longer_length(self):
    source = self.create_tempdir().full_path
    experiment.train_and_evaluate(_tiny_config(source, **{"train.steps": 2}), log=lambda s: None)
    lines = []
    target = self.create_tempdir().full_path
    result = experiment.train_and_evaluate(
        _tiny_config(target, **{"train.steps": 2, "train.init_from": source,
                                "pe.rope_scaling": "yarn", "pe.rope_factor": 2.0,
                                "pe.rope_original_max_position": 32, "data.train_len": 64,
                                "eval.lens": "64"}), log=lines.append)
    self.assertTrue(any(line.startswith("initialized from") for line in lines))
    self.assertEqual(result.train.final_step, 2)
    with self.assertRaisesRegex(ValueError, "model.d_model"):
      experiment.train_and_evaluate(
          _tiny_config(self.create_tempdir().full_path,
                       **{"train.init_from": source, "model.d_model": 16}), log=lambda s: None)

  def test_eval_rope_scaling_needs_rope(self):
    with self.assertRaisesRegex(experiment.ConfigError, "needs pe=rope"):
      experiment.train_and_evaluate(
          _tiny_config(self.create_tempdir().full_path,
                       **{"pe.name": "alibi", "eval.rope_scaling": "yarn"}), log=lambda s: None)

  def test_synthetic_task_reports_accuracy(self):
    workdir = self.create_tempdir().full_path
    result = experiment.train_and_evaluate(
        _tiny_config(workdir, **{"data.name": "reverse", "train.steps": 2}), log=lambda s: None)
    rows = result.tables["rope"]
    self.assertEqual([r["length"] for r in rows], [32, 64])
    self.assertTrue(all(0.0 <= r["accuracy"] <= 1.0 for r in rows))


if __name__ == "__main__":
  absltest.main()
