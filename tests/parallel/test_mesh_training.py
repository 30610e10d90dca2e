"""Training on an 8-device ``data=4,model=2`` mesh equals training on one device.

The 8 fake CPU devices need ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` before JAX
starts, so ``mesh_worker.py`` runs once in a subprocess (class setup) and reports JSON; the
one-device halves of the checkpoint and experiment comparisons run here, in this process.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import ml_collections
import numpy as np
import pytest

from pejax.nn import Decoder, DecoderConfig, pe_config
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import experiment
from pejax.train import optimizer as optimizer_lib
from pejax.train import train_step as train_step_lib

WORKER = pathlib.Path(__file__).with_name("mesh_worker.py")
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run_worker(mode: str, out: pathlib.Path) -> dict:
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
  # The worker adds its own device count. The same compiler settings as this process
  # (tests/conftest.py), whose one-device halves the worker's results are compared with (the
  # compilation cache comes through os.environ).
  env["XLA_FLAGS"] = os.environ.get("PEJAX_TEST_XLA_FLAGS", "")
  env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = str(int(jax.config.read("jax_disable_most_optimizations")))
  proc = subprocess.run([sys.executable, str(WORKER), mode, str(out)], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=900)
  if proc.returncode:
    raise AssertionError(f"mesh_worker {mode} failed:\n{proc.stderr[-4000:]}")
  return json.loads((out / f"{mode}.json").read_text())


# The 8-device worker runs once per session: under `pytest -n 2 --dist loadscope` (setup.cfg)
# a class stays on one xdist worker instead of starting the subprocess on each.
@pytest.mark.slow
class MeshTrainingTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls._tmp = tempfile.TemporaryDirectory()
    cls.out = pathlib.Path(cls._tmp.name)
    cls.results = _run_worker("check", cls.out)

  @classmethod
  def tearDownClass(cls):
    cls._tmp.cleanup()
    super().tearDownClass()

  def test_worker_used_eight_devices(self):
    self.assertEqual(self.results["devices"], 8)
    self.assertEqual(self.results["mesh"], {"data": 4, "fsdp": 1, "model": 2})

  @parameterized.parameters("rope", "alibi", "t5")
  def test_one_step_matches_one_device(self, pe):
    r = self.results["step"][pe]
    np.testing.assert_allclose(r["loss_mesh"], r["loss_single"], rtol=1e-6)
    np.testing.assert_allclose(r["grad_norm_mesh"], r["grad_norm_single"], rtol=1e-5)
    # Every parameter moved by >= 1e-3 while the mesh and one-device updates agree to 1e-6.
    self.assertGreater(r["min_param_change"], 1e-3)
    self.assertLess(r["max_param_diff"], 1e-6)

  @parameterized.parameters("rope", "alibi", "t5")
  def test_parameters_are_sharded_on_the_mesh(self, pe):
    r = self.results["step"][pe]
    self.assertEqual(r["query_spec"], "P('fsdp', 'model')")
    self.assertEqual(r["query_devices"], 8)

  def test_eval_step_on_a_batch_the_data_axis_does_not_divide(self):
    np.testing.assert_allclose(self.results["eval"]["mesh"], self.results["eval"]["single"],
                               rtol=1e-6)

  def test_blockwise_attention_on_the_mesh(self):
    self.assertLess(self.results["blockwise_max_logit_diff"], 1e-4)

  def test_mesh_checkpoint_restores_on_another_mesh_and_continues(self):
    r = self.results["checkpoint"]
    self.assertEqual(r["other_mesh"], {"data": 1, "fsdp": 4, "model": 2})
    self.assertEqual(r["other_mesh_query_spec"], "P('fsdp', 'model')")
    self.assertIn("P('fsdp', 'model')", r["other_mesh_moment_specs"])  # Adam moments sharded.
    np.testing.assert_allclose(r["other_mesh_loss"], r["losses"][2], rtol=1e-5)

  def test_mesh_checkpoint_restores_on_one_device_and_continues(self):
    r = self.results["checkpoint"]
    fields = dict(r["model_config"])
    pe = pe_config(fields.pop("pe"), **fields.pop("pe_fields"))
    config = DecoderConfig(**fields, pe=pe)
    optim = ml_collections.ConfigDict(r["optim_config"])
    model = Decoder(config, rngs=nnx.Rngs(params=123))  # Other values: the restore must win.
    optimizer = optimizer_lib.create_optimizer(model, optim, total_steps=r["total_steps"])
    with checkpoint_lib.Checkpointer(r["directory"]) as ckpt:
      restored = ckpt.restore(model, optimizer)
    self.assertEqual(restored.step, 2)
    self.assertEqual(int(optimizer.step[...]), 2)
    kernel = model.blocks[0].attention.query.kernel[...]
    self.assertLen(kernel.sharding.device_set, 1)
    step = train_step_lib.make_train_step(
        learning_rate_fn=optimizer_lib.schedule_from_config(optim, total_steps=r["total_steps"]))
    batch = dict(np.load(r["batch"]))
    loss = float(step(model, optimizer, train_step_lib.model_inputs(batch))["loss"])
    np.testing.assert_allclose(loss, r["losses"][2], rtol=1e-5)
    self.assertNotAlmostEqual(loss, r["losses"][1], places=3)  # Step 3 differs from step 2.

  def test_experiment_on_the_mesh_matches_one_device(self):
    r = self.results["experiment"]
    self.assertLen(r["mesh_line"], 1)
    self.assertIn("'data': 4", r["mesh_line"][0])
    for name in ("checkpoints", "metrics.jsonl", "results.json", "results.md"):
      self.assertIn(name, r["files"])
    config = ml_collections.ConfigDict(r["config"])
    config.mesh.spec = ""
    config.workdir = str(self.out / "run_one_device")
    run = experiment.train_and_evaluate(config, log=lambda line: None)
    np.testing.assert_allclose(r["losses"][0], run.train.losses[0], rtol=1e-6)
    # Later steps: AdamW divides by per-entry gradient magnitudes, rounding grows a little.
    np.testing.assert_allclose(r["losses"], run.train.losses, rtol=1e-3)


if __name__ == "__main__":
  absltest.main()
