"""Several processes on one host, as on a cluster: ``launch.py`` under ``jax.distributed``.

Each run below is the real command line, started by :mod:`pejax.parallel.local_cluster` (a
coordinator on 127.0.0.1, 4 fake CPU devices per process, a deadline that kills a hung job).
The class runs them once, in order, then checks one claim per test:

  two_proc       2 processes x 4 devices, mesh data=4,model=2 (the reference multi-process run)
  one_proc       1 process x 8 devices, the same mesh
  one_device     this test process (1 device, no mesh), through ``launch.run``
  restore_2_to_1 a copy of two_proc without its last checkpoint, resumed by 1 process x 8
  restore_1_to_2 a copy of one_proc without its last checkpoint, resumed by 2 processes
  preempted      two_proc's command in a fresh workdir, SIGTERM to process 1 while training
  resumed        the same commands again: they resume and finish
  lost           2 processes, process 1 killed (SIGKILL) while training, heartbeat timeout 5 s

The model is tiny (1 layer, d=32) and runs 12 steps; the class takes about a minute warm.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import sys
import tempfile
import time

from absl.testing import absltest
from flax import nnx
import jax
import numpy as np
import pytest

import launch
from pejax import decoder_from_config
from pejax.nn import Decoder
from pejax.parallel import local_cluster
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import experiment
from pejax.train import optimizer as optimizer_lib
from pejax.train import run_directory

ROOT = pathlib.Path(__file__).resolve().parents[2]
STEPS = 12
MESH = "--mesh=data=4,model=2"
HEARTBEAT_S = 5
TINY = ["--config.model.num_layers=1", "--config.model.d_model=32",
        "--config.model.num_heads=2", "--train_len=32", "--config.data.batch_size=8",
        f"--steps={STEPS}", "--config.train.log_every=1", "--config.train.eval_every=0",
        "--config.train.checkpoint_every=4", "--config.train.keep_checkpoints=0",
        "--config.optim.warmup_steps=1", "--eval_lens=32", "--config.eval.num_tokens=128",
        "--config.train.tensorboard=False"]
RUN_TIMEOUT_S = 240  # Per run; a hung collective fails the test instead of the suite.


def _env() -> dict[str, str]:
  env = dict(os.environ, PEJAX_NO_RUNTIME_ENV="1")  # One interpreter start per process.
  env.pop("PEJAX_RUNTIME_ENV_APPLIED", None)
  # This process's compiler setting (tests/conftest.py), not launch.py's full pipeline: processes
  # other than 0 never hit the persistent compilation cache (JAX writes it from process 0 only,
  # and the CPU topology fingerprint in the key differs per process), so each of them compiles
  # every program afresh; with the full pipeline that costs ~10 s per run on 2 cores.
  env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = str(int(jax.config.read("jax_disable_most_optimizations")))
  env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {os.environ.get('PEJAX_TEST_XLA_FLAGS', '')}".strip()
  return env


def _cluster(workdir: pathlib.Path, *extra: str, num_processes: int = 2,
             devices: int = 4) -> local_cluster.LocalCluster:
  """launch.py on ``num_processes`` processes (the distributed flags only when more than one)."""
  return local_cluster.LocalCluster(
      [sys.executable, str(ROOT / "launch.py"), MESH, f"--workdir={workdir}", *TINY, *extra],
      num_processes=num_processes, devices_per_process=devices, cwd=str(ROOT), env=_env(),
      append_flags=num_processes > 1)


def _run(workdir: pathlib.Path, *extra: str, **kwargs) -> list[local_cluster.ProcessResult]:
  with _cluster(workdir, *extra, **kwargs) as cluster:
    results = cluster.wait(RUN_TIMEOUT_S)
  for r in results:
    if r.returncode:
      raise AssertionError(f"process {r.process_id} exited {r.returncode}:\n{r.output[-4000:]}")
  return results


def _train_records(workdir: pathlib.Path) -> list[dict]:
  lines = (workdir / "metrics.jsonl").read_text().splitlines()
  return [json.loads(line) for line in lines if json.loads(line)["split"] == "train"]


def _losses(workdir: pathlib.Path) -> np.ndarray:
  return np.array([r["metrics"]["loss"] for r in _train_records(workdir)])


def _drop_last_checkpoint(source: pathlib.Path, target: pathlib.Path) -> None:
  """A copy of a finished run as it was after step 8: checkpoint 12 and the results removed."""
  shutil.copytree(source, target)
  shutil.rmtree(target / checkpoint_lib.CHECKPOINT_SUBDIR / str(STEPS))
  for name in ("results.json", "results.md", "results.csv", "status.json"):
    (target / name).unlink(missing_ok=True)


@pytest.mark.slow
class MultiProcessLaunchTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls._tmp = tempfile.TemporaryDirectory()
    tmp = pathlib.Path(cls._tmp.name)
    cls.dirs = {name: tmp / name for name in (
        "two_proc", "one_proc", "one_device", "restore_2_to_1", "restore_1_to_2", "preempted",
        "lost")}
    cls.seconds = {}

    def timed(name, fn):
      start = time.monotonic()
      result = fn()
      cls.seconds[name] = time.monotonic() - start
      return result

    d = cls.dirs
    cls.two_proc = timed("two_proc", lambda: _run(d["two_proc"]))
    cls.one_proc = timed("one_proc", lambda: _run(d["one_proc"], num_processes=1, devices=8))
    cls.one_device_status = timed("one_device", lambda: launch.run(
        ["launch.py", f"--workdir={d['one_device']}", *TINY]))
    _drop_last_checkpoint(d["two_proc"], d["restore_2_to_1"])
    cls.restore_2_to_1 = timed("restore_2_to_1", lambda: _run(
        d["restore_2_to_1"], num_processes=1, devices=8))
    _drop_last_checkpoint(d["one_proc"], d["restore_1_to_2"])
    cls.restore_1_to_2 = timed("restore_1_to_2", lambda: _run(d["restore_1_to_2"]))
    cls.preempted, cls.preemption = timed("preempted", lambda: cls._preempt(d["preempted"]))
    cls.preempted_results_existed = (d["preempted"] / "results.json").exists()
    cls.preempted_status = json.loads((d["preempted"] / "status.json").read_text())
    cls.preempted_checkpoints = sorted(
        int(p.name) for p in (d["preempted"] / checkpoint_lib.CHECKPOINT_SUBDIR).iterdir()
        if p.name.isdigit())
    cls.resumed = timed("resumed", lambda: _run(d["preempted"]))
    cls.lost, cls.loss_detected_s = timed("lost", lambda: cls._lose_process(d["lost"]))
    print("multi-process figures:", json.dumps(cls._figures()))

  @classmethod
  def _figures(cls):
    """What the tests check, as numbers (printed with ``pytest -s``)."""
    d = cls.dirs

    def rel(a, b):
      return float(np.max(np.abs(a - b) / np.abs(b)))

    figures = {"seconds": {k: round(v, 1) for k, v in cls.seconds.items()},
               "lost_process_detected_after_s": round(cls.loss_detected_s, 2),
               "preemption": dict(cls.preemption, stopped_at_step=cls.preempted_status.get("step"),
                                  signal_after_step=1)}
    try:
      two = _losses(d["two_proc"])
      figures["max_rel_loss_diff"] = {
          "two_proc_vs_one_proc_8dev": rel(two, _losses(d["one_proc"])),
          "two_proc_vs_one_device": rel(two, _losses(d["one_device"])),
          "restore_2_to_1_vs_two_proc_steps_9_12": rel(_losses(d["restore_2_to_1"])[8:], two[8:]),
          "restore_1_to_2_vs_one_proc_steps_9_12": rel(_losses(d["restore_1_to_2"])[8:],
                                                       _losses(d["one_proc"])[8:]),
          "resumed_vs_two_proc": rel(_losses(d["preempted"]), two)}
      figures["losses_two_proc"] = [round(float(x), 6) for x in two]
    except (OSError, ValueError) as e:  # The tests report what is missing.
      figures["error"] = str(e)
    return figures

  @classmethod
  def _preempt(cls, workdir):
    """SIGTERM to process 1 once process 0 has logged step 1; returns results and timings."""
    with _cluster(workdir) as cluster:
      if not cluster.wait_for_output(0, f"step  1/{STEPS}", timeout_s=RUN_TIMEOUT_S):
        cluster.close()
        raise AssertionError(f"no training step logged:\n{cluster.output(0)[-4000:]}")
      sent = time.monotonic()
      cluster.send_signal(1, signal.SIGTERM)
      results = cluster.wait(RUN_TIMEOUT_S)
      timing = {"exit_after_signal_s": [round(r.seconds - (sent - cluster.started_at), 2)
                                         for r in results]}
    return results, timing

  @classmethod
  def _lose_process(cls, workdir):
    """SIGKILL to process 1 once process 0 has logged step 1; seconds until process 0 exits."""
    with _cluster(workdir, f"--heartbeat_timeout={HEARTBEAT_S}") as cluster:
      if not cluster.wait_for_output(0, f"step  1/{STEPS}", timeout_s=RUN_TIMEOUT_S):
        cluster.close()
        raise AssertionError(f"no training step logged:\n{cluster.output(0)[-4000:]}")
      killed = time.monotonic()
      cluster.kill(1)
      results = cluster.wait(HEARTBEAT_S + 60)  # Raises LocalClusterTimeout on a hang.
    return results, results[0].seconds - (killed - cluster.started_at)

  @classmethod
  def tearDownClass(cls):
    cls._tmp.cleanup()
    super().tearDownClass()

  # --- 2. Two processes train like one process with 8 devices and like one device. -----------

  def test_two_processes_train_like_one_process_with_eight_devices(self):
    two, one = _losses(self.dirs["two_proc"]), _losses(self.dirs["one_proc"])
    self.assertLen(two, STEPS)
    np.testing.assert_allclose(two, one, rtol=1e-5, atol=0)
    self.assertGreater(two[0] - two[-1], 0.5)  # It trained (losses that move, not constants).

  def test_two_processes_train_like_one_device(self):
    self.assertEqual(self.one_device_status, 0)
    np.testing.assert_allclose(_losses(self.dirs["two_proc"]), _losses(self.dirs["one_device"]),
                               rtol=1e-5, atol=0)

  def test_each_process_loads_only_its_rows_of_the_global_batch(self):
    for r, rows in zip(self.two_proc, ("0:4", "4:8")):
      self.assertIn(f"data: process {r.process_id} of 2 loads rows {rows} of each global batch "
                    "of 8", r.output)
      self.assertIn(f"jax.distributed: process {r.process_id} of 2, 4 local / 8 global devices",
                    r.output)

  def test_only_process_zero_writes_metrics_and_reports(self):
    workdir = self.dirs["two_proc"]
    steps = [r["step"] for r in _train_records(workdir)]
    self.assertEqual(steps, list(range(1, STEPS + 1)))  # Each step once, not once per process.
    self.assertEqual(sorted(p.name for p in workdir.iterdir() if p.is_dir()),
                     ["checkpoints"])  # No process_1/ beside it.
    self.assertIn("wrote ", self.two_proc[0].output)
    worker = self.two_proc[1].output
    self.assertNotIn("wrote ", worker)
    self.assertIsNone(re.search(r"^step +\d+/", worker, re.M), worker[-2000:])
    self.assertTrue(run_directory.is_finished(workdir))

  # --- 3. Checkpoints cross between process counts. -------------------------------------------

  def test_checkpoint_of_two_processes_restores_in_one_process(self):
    self.assertIn("resumed from checkpoint step 8", self.restore_2_to_1[0].output)
    np.testing.assert_allclose(_losses(self.dirs["restore_2_to_1"])[8:],
                               _losses(self.dirs["two_proc"])[8:], rtol=1e-5, atol=0)

  def test_checkpoint_of_one_process_restores_in_two_processes(self):
    self.assertIn("resumed from checkpoint step 8", self.restore_1_to_2[0].output)
    np.testing.assert_allclose(_losses(self.dirs["restore_1_to_2"])[8:],
                               _losses(self.dirs["one_proc"])[8:], rtol=1e-5, atol=0)

  # --- 4. Preemption: one signal, every process stops at the same step. -----------------------

  def test_sigterm_to_one_process_stops_every_process_at_one_step(self):
    codes = [r.returncode for r in self.preempted]
    self.assertEqual(codes, [experiment.EXIT_CODES["SIGTERM"]] * 2,
                     "\n".join(r.output[-3000:] for r in self.preempted))
    status = self.preempted_status
    self.assertEqual(status["state"], "preempted")
    stopped = status["step"]
    self.assertLess(stopped, STEPS)
    self.assertIn(f"stopped by SIGTERM at step {stopped}", self.preempted[0].output)
    self.assertIn("evaluation skipped", self.preempted[0].output)
    self.assertFalse(self.preempted_results_existed)

  def test_preemption_saves_one_consistent_checkpoint(self):
    stopped = self.preempted_status["step"]
    self.assertEqual(self.preempted_checkpoints[-1], stopped)
    for r in self.preempted:  # Every process says where it stopped.
      self.assertIn(f"process {r.process_id} of 2: stopped by SIGTERM at step {stopped}",
                    r.output)
    self.assertIn(f"resumed from checkpoint step {stopped}", self.resumed[0].output)
    # The checkpoint both processes wrote restores here, on one device, as one state.
    config = run_directory.load_run_config(self.dirs["preempted"])
    model = Decoder(decoder_from_config.decoder_config_from(config), rngs=nnx.Rngs(params=1))
    optimizer = optimizer_lib.create_optimizer(model, config.optim, total_steps=STEPS)
    with checkpoint_lib.Checkpointer(self.dirs["preempted"] / checkpoint_lib.CHECKPOINT_SUBDIR,
                                     config=config) as ckpt:
      restored = ckpt.restore(model, optimizer, step=stopped)
    self.assertEqual(restored.data_state["step"], stopped)
    self.assertEqual(int(optimizer.step[...]), stopped)

  def test_same_commands_resume_and_finish_bit_identical(self):
    resumed = _train_records(self.dirs["preempted"])
    reference = _train_records(self.dirs["two_proc"])
    self.assertEqual([r["step"] for r in resumed], list(range(1, STEPS + 1)))
    self.assertEqual([r["metrics"]["loss"] for r in resumed],
                     [r["metrics"]["loss"] for r in reference])
    self.assertEqual([r["metrics"]["grad_norm"] for r in resumed],
                     [r["metrics"]["grad_norm"] for r in reference])
    self.assertTrue(run_directory.is_finished(self.dirs["preempted"]))

  # --- 5. A lost process stops the others with an error that names it. -----------------------

  def test_lost_process_makes_the_others_exit_naming_it(self):
    survivor = self.lost[0]
    self.assertNotEqual(survivor.returncode, 0)
    self.assertFalse(survivor.killed)
    self.assertRegex(survivor.output, r"stopped sending heartbeats\):\s*1\b")
    self.assertLess(self.loss_detected_s, HEARTBEAT_S + 30)


if __name__ == "__main__":
  absltest.main()
