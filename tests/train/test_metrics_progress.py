"""Tests of pejax/train/metrics.py, progress.py and signals.py."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
from unittest import mock

import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from pejax.train import metrics as metrics_lib
from pejax.train import progress as progress_lib
from pejax.train import signals as signals_lib


class MetricsWriterTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.workdir = self.create_tempdir().full_path
    self.path = os.path.join(self.workdir, metrics_lib.METRICS_FILENAME)

  def _lines(self) -> list[dict]:
    with open(self.path) as f:
      return [json.loads(line) for line in f]

  def test_records_are_strict_json(self):
    with metrics_lib.MetricsWriter(self.workdir) as writer:
      record = writer.write(3, "train", {
          "loss": np.float32(2.5), "tokens": np.int64(12), "lr": jnp.asarray(1e-3),
          "ppl": float("inf"), "nan": float("nan"), "nested": {"16": np.float64(1.25)},
          "list": np.arange(2)})
    lines = self._lines()
    self.assertEqual(lines, [record])
    self.assertEqual(lines[0]["step"], 3)
    self.assertEqual(lines[0]["split"], "train")
    self.assertIsInstance(lines[0]["wall_time"], float)
    metrics = lines[0]["metrics"]
    self.assertEqual(metrics["loss"], 2.5)
    self.assertEqual(metrics["tokens"], 12)
    np.testing.assert_allclose(metrics["lr"], 1e-3, rtol=1e-6)
    self.assertIsNone(metrics["ppl"])
    self.assertIsNone(metrics["nan"])
    self.assertEqual(metrics["nested"], {"16": 1.25})
    self.assertEqual(metrics["list"], [0, 1])

  def test_fresh_run_empties_file(self):
    with metrics_lib.MetricsWriter(self.workdir) as writer:
      writer.write(1, "train", {"loss": 1.0})
    with metrics_lib.MetricsWriter(self.workdir) as writer:
      writer.write(1, "train", {"loss": 2.0})
    self.assertEqual([r["metrics"]["loss"] for r in self._lines()], [2.0])

  def test_resume_keeps_records_up_to_step_and_appends(self):
    with metrics_lib.MetricsWriter(self.workdir) as writer:
      for step in (2, 4, 4, 6):
        writer.write(step, "train" if step != 4 else "eval", {"loss": float(step)})
    with open(self.path, "a") as f:
      f.write('{"step": 8, "split": "tr')  # A line cut short by a kill.
    with metrics_lib.MetricsWriter(self.workdir, resume_step=4) as writer:
      writer.write(5, "train", {"loss": 5.0})
    self.assertEqual([r["step"] for r in self._lines()], [2, 4, 4, 5])

  def test_read_metrics(self):
    self.assertEqual(metrics_lib.read_metrics(self.workdir), [])
    with metrics_lib.MetricsWriter(self.workdir) as writer:
      writer.write(1, "eval", {"loss": 1.0})
    self.assertEqual(metrics_lib.read_metrics(self.workdir), metrics_lib.read_metrics(self.path))
    self.assertEqual(metrics_lib.read_metrics(self.path)[0]["split"], "eval")


  def test_append_keeps_every_record(self):
    with metrics_lib.MetricsWriter(self.workdir) as writer:
      writer.write(4, "train", {"loss": 1.0})
    with metrics_lib.MetricsWriter(self.workdir, append=True) as writer:
      writer.write(4, "evaluation", {"name": "long", "ppl@64": 9.5})
    self.assertEqual([r["split"] for r in metrics_lib.read_metrics(self.workdir)],
                     ["train", "evaluation"])

  def test_tensorboard_events_when_installed_and_nothing_when_not(self):
    try:
      import tensorboardX  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      tensorboardX = None
    if tensorboardX is not None:
      with metrics_lib.MetricsWriter(self.workdir, tensorboard=True) as writer:
        self.assertTrue(writer.tensorboard_enabled)
        writer.write(1, "train", {"loss": 2.5, "nested": {"x": 1.0}, "name": "text"})
      events = os.listdir(os.path.join(self.workdir, metrics_lib.TENSORBOARD_SUBDIR))
      self.assertLen(events, 1)
      data = open(os.path.join(self.workdir, metrics_lib.TENSORBOARD_SUBDIR, events[0]),
                  "rb").read()
      self.assertIn(b"train/loss", data)
      self.assertIn(b"train/nested/x", data)
    other = self.create_tempdir().full_path
    with mock.patch.dict("sys.modules", {"tensorboardX": None}):  # Not installed.
      with metrics_lib.MetricsWriter(other, tensorboard=True) as writer:
        self.assertFalse(writer.tensorboard_enabled)
        writer.write(1, "train", {"loss": 2.5})
    self.assertFalse(os.path.exists(os.path.join(other, metrics_lib.TENSORBOARD_SUBDIR)))
    self.assertLen(metrics_lib.read_metrics(other), 1)

  def test_tensorboard_writers_in_the_same_second_keep_both_files(self):
    if importlib.util.find_spec("tensorboardX") is None:
      self.skipTest("tensorboardX not installed (optional)")
    # tensorboardX names event files by the second; a second writer then truncated the first.
    with mock.patch("time.time", return_value=1.7e9):
      for loss in (1.0, 2.0):
        with metrics_lib.MetricsWriter(self.workdir, append=True, tensorboard=True) as writer:
          writer.write(1, "train", {"loss": loss})
    logdir = os.path.join(self.workdir, metrics_lib.TENSORBOARD_SUBDIR)
    files = sorted(os.listdir(logdir))
    self.assertLen(files, 2)
    self.assertTrue(all(f.startswith("events.out.tfevents.1700000000.") for f in files))
    self.assertTrue(all(b"train/loss" in open(os.path.join(logdir, f), "rb").read()
                        for f in files))


class _FakeClock:

  def __init__(self):
    self.now = 0.0

  def __call__(self) -> float:
    return self.now


class ProgressMeterTest(parameterized.TestCase):

  def test_rates_exclude_first_step_and_eta(self):
    clock = _FakeClock()
    lines = []
    meter = progress_lib.ProgressMeter(
        total_steps=10, log_every=4, log_fn=lines.append, clock=clock)
    summaries = []
    for step in range(1, 11):
      clock.now = 100.0 if step == 1 else 100.0 + 0.5 * (step - 1)  # First step: compilation.
      summaries.append(meter.update(step, loss=float(step), tokens=64))
    logged = [(i + 1, s) for i, s in enumerate(summaries) if s is not None]
    self.assertEqual([step for step, _ in logged], [4, 8, 10])
    first = logged[0][1]
    self.assertEqual(first["loss"], 2.5)  # Mean of steps 1-4.
    self.assertEqual(first["steps_per_s"], 2.0)  # 3 timed steps in 1.5 s.
    self.assertEqual(first["tokens_per_s"], 128.0)
    self.assertEqual(first["eta_s"], 3.0)  # 6 steps left at 2 steps/s.
    self.assertEqual(logged[1][1]["loss"], 6.5)
    self.assertEqual(logged[2][1]["eta_s"], 0.0)
    self.assertLen(lines, 3)
    self.assertEqual(
        lines[0], "step  4/10 (40%) | loss 2.5000 | 128.0 tok/s | 2.00 steps/s | ETA 3s")

  def test_single_step_window_has_no_rate(self):
    lines = []
    meter = progress_lib.ProgressMeter(
        total_steps=5, log_every=1, start_step=2, log_fn=lines.append, clock=_FakeClock())
    summary = meter.update(3, loss=1.0, tokens=8, extra={"lr": 0.003})
    self.assertIsNone(summary["steps_per_s"])
    self.assertIsNone(summary["eta_s"])
    self.assertEqual(
        lines, ["step 3/5 (60%) | loss 1.0000 | ? tok/s | ? steps/s | ETA ? | lr 0.003"])

  def test_log_every_zero_logs_final_step_only(self):
    lines = []
    meter = progress_lib.ProgressMeter(total_steps=3, log_every=0, log_fn=lines.append)
    results = [meter.update(step, loss=1.0, tokens=1) for step in (1, 2, 3)]
    self.assertEqual([r is not None for r in results], [False, False, True])
    self.assertLen(lines, 1)

  @parameterized.named_parameters(
      ("seconds", 7.2, "7s"), ("minutes", 95.0, "1m35s"), ("hours", 3725.0, "1h02m05s"),
      ("unknown", None, "?"), ("infinite", float("inf"), "?"))
  def test_format_duration(self, seconds, expected):
    self.assertEqual(progress_lib.format_duration(seconds), expected)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "log_every"):
      progress_lib.ProgressMeter(total_steps=3, log_every=-1)
    with self.assertRaisesRegex(ValueError, "total_steps"):
      progress_lib.ProgressMeter(total_steps=0, log_every=1)


class StopRequestTest(parameterized.TestCase):

  @parameterized.named_parameters(("sigterm", signal.SIGTERM), ("sigint", signal.SIGINT))
  def test_signal_sets_flag_and_handlers_are_restored(self, signum):
    before = signal.getsignal(signum)
    with signals_lib.StopRequest() as stop:
      self.assertFalse(stop.requested)
      os.kill(os.getpid(), signum)  # Would end the process without the handler.
      self.assertTrue(stop.requested)
      self.assertEqual(stop.signal_name, signal.Signals(signum).name)
    self.assertIs(signal.getsignal(signum), before)

  def test_second_sigint_raises_keyboard_interrupt(self):
    with signals_lib.StopRequest() as stop:
      os.kill(os.getpid(), signal.SIGINT)
      self.assertTrue(stop.requested)
      with self.assertRaises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)


if __name__ == "__main__":
  absltest.main()
