"""``launch.py --init_from_hf=DIR --eval_only``: perplexity vs length of a pretrained model."""

from __future__ import annotations

import json
import os
import pathlib

from absl.testing import absltest
import pytest

import launch
from pejax import experiment_config
from pejax.train import pretrained
import fixture_cases as fx

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = fx.path("llama_default_untied")


def _config(**eval_fields):
  config = experiment_config.get_default_config()
  config.data.name = str(ROOT / "README.md")
  config.eval.lens = "32,96"
  config.eval.num_tokens = 192
  for key, value in eval_fields.items():
    config.eval[key] = value
  return config


class PretrainedEvalTest(absltest.TestCase):

  @pytest.mark.slow
  def test_tables_for_the_model_and_each_scaling(self):
    config = _config(rope_scaling="yarn,linear")
    config.workdir = self.create_tempdir().full_path
    result = pretrained.evaluate_pretrained(MODEL, config, name="e1", log=lambda line: None)
    self.assertEqual(list(result.tables), [
        "llama_default_untied", "llama_default_untied + zero-shot yarn x1.5",
        "llama_default_untied + zero-shot linear x1.5"])
    payload = json.loads((result.workdir / "results.json").read_text())
    base = payload["perplexity"]["llama_default_untied"]
    self.assertEqual([r["length"] for r in base], [32, 96])
    self.assertTrue(all(r["status"] == "ok" and r["tokens"] > 0 for r in base))
    # Model tokens, not bytes: the tokenizer's vocabulary (320) bounds a random model's ppl.
    self.assertLess(base[0]["perplexity"], 5 * 320)
    self.assertEqual(payload["meta"]["train_len"], 64)  # The checkpoint's context.
    # Per model token, over the checkpoint's context: no "bits/byte" or "x train" header.
    header = result.text.splitlines()[1]
    self.assertRegex(header, r"\| eval len \| x context \| ppl nonoverlap \| "
                             r"bits/token nonoverlap \|")
    self.assertRegex(result.text, r"\|\s+96 \|\s+1.5 \|")
    with self.assertRaisesRegex(experiment_config.ConfigError, "already exists"):
      pretrained.evaluate_pretrained(MODEL, config, name="e1", log=lambda line: None)

  def test_default_directory_is_in_the_runs_tree_not_the_current_directory(self):
    cwd = pathlib.Path(self.create_tempdir().full_path)
    previous = os.getcwd()
    os.chdir(cwd)
    self.addCleanup(os.chdir, previous)
    config = _config(lens="32", mode="nonoverlap", num_tokens=64)
    result = pretrained.evaluate_pretrained(MODEL, config, name="e", log=lambda line: None)
    self.assertEqual(result.workdir,
                     pathlib.Path("runs", "pretrained", "llama_default_untied", "evals", "e"))
    self.assertEqual(pretrained.default_workdir(MODEL),
                     pathlib.Path("runs", "pretrained", "llama_default_untied"))
    self.assertTrue((cwd / result.workdir / "results.json").exists())
    self.assertEqual([p.name for p in cwd.iterdir()], ["runs"])

  def test_usage_errors(self):
    with self.assertRaisesRegex(experiment_config.ConfigError, "needs --eval_lens"):
      pretrained.evaluate_pretrained(MODEL, _config(lens=""))
    config = _config()
    config.data.name = "copy"
    with self.assertRaisesRegex(experiment_config.ConfigError, "synthetic byte task"):
      pretrained.evaluate_pretrained(MODEL, config)
    with self.assertRaisesRegex(experiment_config.ConfigError, "tokenizer.json not found"):
      pretrained.evaluate_pretrained(fx.path("gemma"), _config())
    with self.assertRaisesRegex(launch.app.UsageError, "synthetic byte task"):
      launch.run(["launch.py", f"--init_from_hf={MODEL}", "--data=copy"])

  @pytest.mark.slow
  def test_fine_tuning_starts_from_the_checkpoint(self):
    # One step at learning rate 0 (the first warm-up step) keeps the checkpoint's weights: the
    # run's perplexity must then equal the pretrained evaluation with the same YaRN scaling.
    workdir = self.create_tempdir().full_path
    common = [f"--data={ROOT}/README.md", "--config.eval.num_tokens=192", "--eval_lens=32,96"]
    self.assertEqual(launch.run([
        "launch.py", f"--init_from_hf={MODEL}", "--train_len=32", "--steps=1",
        "--rope_scaling=yarn", "--rope_factor=1.5", "--config.data.batch_size=2",
        f"--workdir={workdir}/run", *common]), 0)
    run = json.loads((pathlib.Path(workdir) / "run" / "results.json").read_text())
    config = _config(rope_scaling="yarn", rope_factor=1.5)
    config.workdir = f"{workdir}/pretrained"
    result = pretrained.evaluate_pretrained(MODEL, config, name="e", log=lambda line: None)
    scaled = result.tables["llama_default_untied + zero-shot yarn x1.5"]
    (fine_tuned,) = run["perplexity"].values()
    self.assertEqual([r["length"] for r in fine_tuned], [32, 96])
    for a, b in zip(fine_tuned, scaled):
      self.assertAlmostEqual(a["perplexity"], b.perplexity, delta=1e-4 * b.perplexity)


if __name__ == "__main__":
  absltest.main()
