"""Tests of experiments/algorithmic/batched_fit.py: the seeds of a variant trained as one program
write the records, weights and curves their runs alone write, stop one by one, and resume."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
from unittest import mock

from absl.testing import absltest
import jax
import numpy as np
import pytest

from experiments.algorithmic import batched_fit
from experiments.algorithmic import convergence
from experiments.algorithmic import fit_records
from experiments.algorithmic import model_runs
from experiments.algorithmic import scoring
from experiments.algorithmic import sweep
from pejax import experiment_config

REPO_ROOT = str(pathlib.Path(__file__).resolve().parents[2])


def _config(seed: int = 0, learning_rate: float = 3e-3):
  config = experiment_config.get_default_config()
  config.model.num_layers, config.model.d_model, config.model.num_heads = 1, 16, 2
  config.data.batch_size = 4
  config.pe.name = "rope"
  config.optim.warmup_steps = 2
  config.seed = seed
  config.optim.learning_rate = learning_rate
  return config


def _make_batch(rng, step):
  del step
  tokens = rng.integers(0, 256, size=(4, 9))
  return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
          "positions": np.broadcast_to(np.arange(8), (4, 8)),
          "loss_mask": np.ones((4, 8), np.float32)}


def _fits_at(step_of_fit):
  """A held-out check that reports a fit from ``step_of_fit`` on (counting its calls)."""
  calls = []

  def check(model):
    del model
    calls.append(1)
    return 1.0 if 2 * len(calls) >= step_of_fit else 0.0

  return check


def _params(run_dir):
  with np.load(pathlib.Path(run_dir) / fit_records.PARAMS_FILE) as stored:
    return [stored[name] for name in sorted(stored.files, key=lambda n: int(n[4:]))]


class TrainUntilManyTest(absltest.TestCase):

  def test_each_model_equals_its_run_alone_and_stops_at_its_own_fit(self):
    recipe = convergence.Recipe(max_steps=6, check_every=2, check_examples=1)
    configs = [_config(0, 3e-3), _config(1, 1e-2)]
    keys = [{"what": "batched-test", "seed": c.seed} for c in configs]
    labels = ["m-s0", "m-s1"]
    together_dir = pathlib.Path(self.create_tempdir().full_path)
    lines = []
    together = batched_fit.train_until_many(
        configs, recipe, keys=keys, runs_dir=together_dir, labels=labels,
        make_batches=[_make_batch] * 2, checks=[_fits_at(2), _fits_at(99)], log=lines.append)
    # Model 0 fits at its first check and stops; model 1 trains to the cap, alone in a
    # repacked program after step 2.
    self.assertEqual([(r.steps, r.steps_to_fit, r.models_together) for r in together],
                     [(2, 2, 2), (6, None, 2)])
    self.assertIn("m-s0: step 2/6 held-out 1.000", "\n".join(lines))
    alone_dir = pathlib.Path(self.create_tempdir().full_path)
    for index, config in enumerate(configs):
      alone = convergence.train_until(
          config, recipe, key=keys[index], runs_dir=alone_dir, label=labels[index],
          make_batch=_make_batch, check=[_fits_at(2), _fits_at(99)][index], log=lambda _: None)
      mine = together[index]
      self.assertEqual(mine.run_dir.name, alone.run_dir.name)  # Same key, same directory.
      self.assertEqual((mine.steps, mine.steps_to_fit, mine.best_step),
                       (alone.steps, alone.steps_to_fit, alone.best_step))
      self.assertEqual([c[:2] for c in mine.curve], [c[:2] for c in alone.curve])
      np.testing.assert_allclose([c[2] for c in mine.curve], [c[2] for c in alone.curve],
                                 rtol=1e-5)
      for a, b in zip(_params(mine.run_dir), _params(alone.run_dir)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
      stored = json.loads((mine.run_dir / fit_records.RESULT_FILE).read_text())
      self.assertEqual(stored["result"]["models_together"], 2)
      self.assertNotIn("models_together",
                       json.loads((alone.run_dir / fit_records.RESULT_FILE).read_text())["result"])
      for name in (fit_records.PROGRESS_FILE, fit_records.PROGRESS_META):
        self.assertFalse((mine.run_dir / name).exists())
    # Records are interchangeable: the single trainer reuses the batched ones, and vice versa.
    self.assertTrue(convergence.train_until(
        configs[1], recipe, key=keys[1], runs_dir=together_dir, label=labels[1],
        make_batch=_make_batch, check=_fits_at(99)).reused)
    again = batched_fit.train_until_many(
        configs, recipe, keys=keys, runs_dir=alone_dir, labels=labels,
        make_batches=[_make_batch] * 2, checks=[_fits_at(2), _fits_at(99)])
    self.assertEqual([r.reused for r in again], [True, True])
    self.assertEqual([r.models_together for r in again], [1, 1])

  def test_bad_inputs_name_the_argument(self):
    recipe = convergence.Recipe(max_steps=2)
    runs = self.create_tempdir().full_path

    def call(configs, **kwargs):
      arguments = dict(keys=[{"k": i} for i in range(len(configs))],
                       labels=[f"m{i}" for i in range(len(configs))],
                       make_batches=[_make_batch] * len(configs),
                       checks=[_fits_at(2)] * len(configs))
      arguments.update(kwargs)
      return batched_fit.train_until_many(configs, recipe, runs_dir=runs, **arguments)

    with self.assertRaisesRegex(ValueError, r"configs must hold at least one config, got \[\]"):
      call([])
    with self.assertRaisesRegex(ValueError, r"got lengths \{'configs': 2, 'keys': 1"):
      call([_config(0), _config(1)], keys=[{"k": 0}])
    wide = _config(1)
    wide.model.d_model = 32
    with self.assertRaisesRegex(ValueError, r"configs\[1\] differs from configs\[0\] in "
                                r"model.d_model \(32 vs 16\)"):
      call([_config(0), wide])
    with self.assertRaisesRegex(ValueError, r"keys and labels must name distinct models, got "
                                r".*m-[0-9a-f]{10} twice"):
      call([_config(0), _config(1)], keys=[{"k": 0}] * 2, labels=["m", "m"])
    with self.assertRaisesRegex(ValueError, r"learning_rates\[1\] must be a positive finite "
                                r"number, got -0.001"):
      call([_config(0), _config(1, -1e-3)])
    with self.assertRaisesRegex(ValueError, r"seeds must not repeat a value, got \[0, 0\]"):
      batched_fit.sweep_configs(_config(), seeds=(0, 0))
    configs = batched_fit.sweep_configs(_config(), seeds=(0, 1), learning_rates=(1e-3, 3e-3))
    self.assertEqual([(c.seed, c.optim.learning_rate) for c in configs],
                     [(0, 1e-3), (0, 3e-3), (1, 1e-3), (1, 3e-3)])

  @pytest.mark.slow
  def test_task_models_equal_their_runs_alone(self):
    # The real batches and held-out check of train_to_fit, one size per batch (rows of
    # different lengths padded in the program).
    recipe = convergence.Recipe(max_steps=4, check_every=2, check_examples=8,
                                one_size_per_batch=True)
    configs = [_config(0), _config(1)]
    arguments = dict(task="reverse_string", train_sizes=(1, 8))
    together = batched_fit.train_to_fit_many(
        configs, recipe, runs_dir=self.create_tempdir().full_path, labels=["r-s0", "r-s1"],
        log=lambda _: None, **arguments)
    alone_dir = self.create_tempdir().full_path
    for config, mine in zip(configs, together):
      alone = convergence.train_to_fit(config, recipe, runs_dir=alone_dir,
                                       label=mine.run_dir.name[:-11], log=lambda _: None,
                                       **arguments)
      self.assertEqual(mine.run_dir.name, alone.run_dir.name)
      self.assertEqual([c[:2] for c in mine.curve], [c[:2] for c in alone.curve])
      np.testing.assert_allclose([c[2] for c in mine.curve], [c[2] for c in alone.curve],
                                 rtol=1e-5)
      for a, b in zip(_params(mine.run_dir), _params(alone.run_dir)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


_SCRIPT = textwrap.dedent("""
    import os, pathlib, signal, sys
    sys.path.insert(0, {root!r})
    sys.path.insert(0, {here!r})
    from test_batched_fit import _config, _make_batch
    from experiments.algorithmic import batched_fit, convergence

    mode, runs = sys.argv[1], sys.argv[2]

    def make_batch(rng, step):
      if mode == "killed" and step == 5:  # After both models wrote their progress at step 4.
        os.kill(os.getpid(), signal.SIGKILL)
      return _make_batch(rng, step)

    batched_fit.train_until_many(
        [_config(0, 3e-3), _config(1, 1e-2)], convergence.Recipe(max_steps=8, check_every=2,
        check_examples=1), keys=[{{"kill": 0}}, {{"kill": 1}}], runs_dir=runs,
        labels=["k-s0", "k-s1"], make_batches=[make_batch] * 2,
        checks=[lambda model: 0.0] * 2)
    print("finished")
    """)


class KilledRunTest(absltest.TestCase):

  def _run(self, mode, runs):
    script = _SCRIPT.format(root=REPO_ROOT, here=os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, "-c", script, mode, runs],
                          env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True,
                          text=True, timeout=600)

  @pytest.mark.slow
  def test_sigkilled_run_resumes_to_the_params_of_an_uninterrupted_one(self):
    whole_dir, cut_dir = (self.create_tempdir().full_path for _ in range(2))
    whole = self._run("whole", whole_dir)
    self.assertEqual(whole.returncode, 0, msg=whole.stderr[-3000:])
    killed = self._run("killed", cut_dir)
    self.assertEqual(killed.returncode, -signal.SIGKILL, msg=killed.stderr[-3000:])
    for name in ("k-s0", "k-s1"):
      (run_dir,) = pathlib.Path(cut_dir).glob(f"{name}-*")
      meta = json.loads((run_dir / fit_records.PROGRESS_META).read_text())
      self.assertEqual(meta["step"], 4)
      self.assertFalse((run_dir / fit_records.RESULT_FILE).exists())
    resumed = self._run("resumed", cut_dir)
    self.assertEqual(resumed.returncode, 0, msg=resumed.stderr[-3000:])
    self.assertIn("k-s0: resuming at step 4 of 8", resumed.stdout)
    for name in ("k-s0", "k-s1"):
      (a,) = pathlib.Path(whole_dir).glob(f"{name}-*")
      (b,) = pathlib.Path(cut_dir).glob(f"{name}-*")
      self.assertEqual(a.name, b.name)
      for x, y in zip(_params(a), _params(b)):
        np.testing.assert_array_equal(x, y)  # Bit for bit.
      curve_a = json.loads((a / fit_records.RESULT_FILE).read_text())["result"]["curve"]
      curve_b = json.loads((b / fit_records.RESULT_FILE).read_text())["result"]["curve"]
      self.assertEqual(curve_a, curve_b)


class ModelRunsTest(absltest.TestCase):

  def test_models_are_grouped_by_task_and_variant_within_a_shard(self):
    calls = []

    def fake_result(label, recipe, fits):
      return fit_records.FitResult(run_dir=pathlib.Path("/nonexistent") / label,
                                   steps=recipe.max_steps, steps_to_fit=1 if fits else None,
                                   in_dist=0.5, best_in_dist=0.5, best_step=1, curve=(),
                                   train_seconds=1.0)

    def fake_many(configs, recipe, *, labels, **kwargs):
      del configs, kwargs
      calls.append(("together", tuple(labels)))
      return [fake_result(label, recipe, "alibi" in label) for label in labels]

    def fake_alone(config, recipe, *, label, **kwargs):
      del config, kwargs
      calls.append(("alone", label))
      return fake_result(label, recipe, "alibi" in label)

    settings = sweep.Settings(
        tasks=(sweep.TaskSpec("copy", 2, (1, 3)), sweep.TaskSpec("parity", 2, (1, 3))),
        variants=("rope", "alibi"), seeds=(0, 1, 2), recipe=convergence.Recipe(max_steps=10),
        rescue_steps=20, batched=True)
    runs = pathlib.Path(self.create_tempdir().full_path)
    with mock.patch.object(batched_fit, "train_to_fit_many", fake_many), \
        mock.patch.object(convergence, "train_to_fit", fake_alone), \
        mock.patch.object(scoring, "evaluate", lambda *a, **k: {"arange": {"1": 1.0, "3": 0.5}}):
      out = model_runs.run_models(_config(), settings, runs_dir=runs, log=lambda _: None,
                                  shard=(0, 2))
    # Seed-major order, every second model: copy-rope-s0, parity-rope-s0, copy-rope-s1,
    # parity-rope-s1, copy-rope-s2, parity-rope-s2 (alibi falls in the other shard).
    self.assertEqual(sorted(out), sorted((t, "rope", s) for t in ("copy", "parity")
                                         for s in (0, 1, 2)))
    self.assertEqual(calls, [
        ("together", ("copy-rope-s0", "copy-rope-s1", "copy-rope-s2")),
        ("together", ("copy-rope-s0-cap20", "copy-rope-s1-cap20", "copy-rope-s2-cap20")),
        ("together", ("parity-rope-s0", "parity-rope-s1", "parity-rope-s2")),
        ("together", ("parity-rope-s0-cap20", "parity-rope-s1-cap20", "parity-rope-s2-cap20"))])
    self.assertEqual(out[("copy", "rope", 1)].fit.run_dir.name, "copy-rope-s1-cap20")
    self.assertEqual(out[("copy", "rope", 1)].first.run_dir.name, "copy-rope-s1")
    calls.clear()
    with mock.patch.object(batched_fit, "train_to_fit_many", fake_many), \
        mock.patch.object(convergence, "train_to_fit", fake_alone), \
        mock.patch.object(scoring, "evaluate", lambda *a, **k: {"arange": {"1": 1.0, "3": 0.5}}):
      model_runs.run_models(_config(), dataclasses.replace(settings, seeds=(0,)),
                            runs_dir=runs, log=lambda _: None)
    # By default (batched=None), as one program on an accelerator only.
    automatic = dataclasses.replace(settings, batched=None)
    for backend, together in (("cpu", False), ("gpu", True), ("tpu", True)):
      with mock.patch.object(jax, "default_backend", lambda backend=backend: backend):
        self.assertEqual(automatic.trains_together, together)
    # One seed: every model trains alone (alibi fits at once, rope runs again).
    self.assertEqual(calls, [("alone", "copy-rope-s0"), ("alone", "copy-rope-s0-cap20"),
                             ("alone", "copy-alibi-s0"), ("alone", "parity-rope-s0"),
                             ("alone", "parity-rope-s0-cap20"), ("alone", "parity-alibi-s0")])

  @pytest.mark.slow
  def test_the_seeds_of_a_variant_and_their_second_runs_train_together(self):
    runs = pathlib.Path(self.create_tempdir().full_path)
    settings = sweep.Settings(
        tasks=(sweep.TaskSpec("copy", 2, (1, 3)),), variants=("rope",), seeds=(0, 1),
        recipe=convergence.Recipe(max_steps=2, check_every=2, check_examples=4,
                                  fit_threshold=1.0),
        examples=4, rescue_steps=4, batched=True)
    lines = []
    out = model_runs.run_models(_config(), settings, runs_dir=runs, log=lines.append)
    self.assertEqual(sorted(out), [("copy", "rope", 0), ("copy", "rope", 1)])
    text = "\n".join(lines)
    self.assertIn("training 2 models as one program: copy-rope-s0, copy-rope-s1", text)
    self.assertIn("training 2 models as one program: copy-rope-s0-cap4, copy-rope-s1-cap4",
                  text)
    for outcome in out.values():
      self.assertIsNotNone(outcome.first)  # A 2-step cap does not fit: both ran again.
      self.assertEqual((outcome.first.models_together, outcome.fit.models_together), (2, 2))
      self.assertTrue(outcome.fit.run_dir.name.startswith(f"copy-rope-s{outcome.seed}-cap4-"))
    # One model after another (batched=False) reuses every record the batched run wrote.
    again = model_runs.run_models(_config(), dataclasses.replace(settings, batched=False),
                                  runs_dir=runs, log=lambda _: None)
    for key, outcome in again.items():
      self.assertTrue(outcome.fit.reused and outcome.first.reused)
      self.assertEqual(outcome.evals, out[key].evals)


if __name__ == "__main__":
  absltest.main()
