"""Tests of pejax/eval/tensorboard_curves.py and of the evaluations' TensorBoard events of a run.

The event files are read back with TensorBoard's own ``EventAccumulator`` (the ``tensorboard``
package) when it is installed, which also applies TensorBoard's restart (purge) rule; without
it, the raw TFRecord framing is parsed with tensorboardX's protos.
"""

from __future__ import annotations

import json
import math
import pathlib
import shutil
import struct
import tempfile
from typing import Dict, List, Tuple
from unittest import mock

from absl.testing import absltest
import pytest

from pejax import compare
from pejax import experiment_config
from pejax.eval import tensorboard_curves
from pejax.eval.perplexity import LengthResult
from pejax.train import experiment
from pejax.train import metrics as metrics_lib

try:
  import tensorboardX  # pylint: disable=g-import-not-at-top,unused-import
except ImportError:
  tensorboardX = None
try:
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
except ImportError:
  event_accumulator = None


def _raw_events(logdir: pathlib.Path):
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  for path in sorted(logdir.glob("events.out.tfevents.*")):
    data = path.read_bytes()
    offset = 0
    while offset < len(data):  # uint64 length, uint32 crc, payload, uint32 crc.
      (length,) = struct.unpack("<Q", data[offset:offset + 8])
      event = event_pb2.Event()
      event.ParseFromString(data[offset + 12:offset + 12 + length])
      offset += 12 + length + 4
      yield event


def read_events(logdir: pathlib.Path) -> Tuple[Dict[str, List[Tuple[int, float]]], Dict[str, list]]:
  """``(tag -> [(step, value)], image tag -> [(step, width, height)])`` of one event folder."""
  if event_accumulator is not None:
    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0,
                                                                        "images": 0})
    acc.Reload()
    scalars = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]
               if acc.Scalars(t)}  # A tag whose events a restart purged is listed, empty.
    images = {t: [(e.step, e.width, e.height) for e in acc.Images(t)]
              for t in acc.Tags()["images"]}
    return scalars, images
  scalars, images = {}, {}
  for event in _raw_events(logdir):
    for value in event.summary.value:
      if value.HasField("image"):
        images.setdefault(value.tag, []).append(
            (event.step, value.image.width, value.image.height))
      else:
        scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
  return scalars, images


def _result(length, ppl, mode="nonoverlap", status="ok"):
  return LengthResult(length, mode, math.log(ppl), ppl, math.log2(ppl), 64, "dense", status)


TABLES = {
    "rope": [_result(32, 3.5), _result(32, 3.25, "sliding"), _result(64, 5.0),
             _result(64, 4.5, "sliding"), _result(128, float("nan"), status="n/a (table)")],
    "rope + zero-shot yarn x4": [_result(32, 3.75), _result(64, 4.0)],
}


class ScalarPointsTest(absltest.TestCase):

  def test_one_curve_per_mode_and_table_lengths_as_steps(self):
    self.assertEqual(tensorboard_curves.scalar_points(TABLES), {
        "perplexity_vs_length/nonoverlap": [(32, 3.5), (64, 5.0)],
        "perplexity_vs_length/sliding": [(32, 3.25), (64, 4.5)],
        "perplexity_vs_length/nonoverlap/zero-shot_yarn_x4": [(32, 3.75), (64, 4.0)]})

  def test_task_accuracy_and_bad_rows(self):
    rows = [{"length": 8, "accuracy": 1.0, "status": "ok"},
            {"length": 16, "accuracy": None, "status": "n/a (too long)"}]
    self.assertEqual(tensorboard_curves.scalar_points({"alibi": rows}),
                     {"accuracy_vs_length": [(8, 1.0)]})
    with self.assertRaisesRegex(TypeError, r"tables\['alibi'\] rows must be LengthResult.*float"):
      tensorboard_curves.scalar_points({"alibi": [1.0]})

  def test_variant_names_are_tag_safe(self):
    self.assertEqual(tensorboard_curves.variant_name("rope", "rope"), "")
    self.assertEqual(tensorboard_curves.variant_name("rope + zero-shot ntk x2.5", "rope"),
                     "zero-shot_ntk_x2.5")
    self.assertEqual(tensorboard_curves.variant_name("other (b)", "rope"), "other_b")


@pytest.mark.skipif(tensorboardX is None, reason="tensorboardX not installed (optional)")
class WriteEvaluationTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.logdir = pathlib.Path(self.create_tempdir().full_path) / "tb"

  def test_values_steps_and_the_plot_read_back(self):
    plot = self.logdir.parent / "plot.png"
    from pejax.eval import report  # pylint: disable=g-import-not-at-top
    report.plot_perplexity(TABLES, plot, train_len=32)
    tags = tensorboard_curves.write_evaluation(self.logdir, TABLES, step=7, plot=plot)
    scalars, images = read_events(self.logdir)
    self.assertEqual(sorted(scalars), tags)
    for tag, points in tensorboard_curves.scalar_points(TABLES).items():
      self.assertEqual([s for s, _ in scalars[tag]], [n for n, _ in points])
      for (_, got), (_, want) in zip(scalars[tag], points):
        self.assertAlmostEqual(got, want, delta=1e-6 * want)
    from PIL import Image  # pylint: disable=g-import-not-at-top
    with Image.open(plot) as image:
      self.assertEqual(images, {"perplexity_vs_length": [(7, *image.size)]})

  @pytest.mark.skipif(event_accumulator is None, reason="tensorboard not installed")
  def test_writing_again_shows_only_the_newest_evaluation(self):
    tensorboard_curves.write_evaluation(self.logdir, TABLES, step=7)
    tensorboard_curves.write_evaluation(self.logdir, {"rope": [_result(64, 9.0)]}, step=9)
    self.assertLen(list(self.logdir.glob("events.out.tfevents.*")), 2)  # Both kept on disk.
    scalars, _ = read_events(self.logdir)
    self.assertEqual(scalars, {"perplexity_vs_length/nonoverlap": [(64, 9.0)]})

  def test_nothing_without_tensorboardx(self):
    with mock.patch.dict("sys.modules", {"tensorboardX": None}):
      self.assertIsNone(tensorboard_curves.write_evaluation(self.logdir, TABLES, step=1))
    self.assertFalse(self.logdir.exists())


def _tiny_config(workdir) -> experiment_config.ml_collections.ConfigDict:
  config = experiment_config.get_default_config()
  config.workdir = str(workdir)
  config.model.num_layers, config.model.d_model, config.model.num_heads = 1, 16, 2
  config.data.train_len, config.data.batch_size = 32, 2
  config.train.steps, config.train.log_every = 2, 1
  config.train.eval_every, config.train.checkpoint_every = 2, 2
  config.optim.warmup_steps = 1
  config.eval.lens = "32,64"
  config.eval.num_tokens = 128
  return config


@pytest.mark.slow
@pytest.mark.skipif(tensorboardX is None, reason="tensorboardX not installed (optional)")
class RunEvaluationEventsTest(absltest.TestCase):
  """A trained run, evaluated at the end of training and again with ``--eval_only``."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = pathlib.Path(tempfile.mkdtemp(prefix="tensorboard_run"))
    cls.workdir = cls.root / "alibi"
    quiet = lambda line: None
    experiment.train_and_evaluate(_tiny_config(cls.workdir), log=quiet)
    experiment.evaluate_run(cls.workdir, overrides={"eval.lens": "64,128"}, name="long",
                            log=quiet)
    cls.tensorboard = cls.workdir / metrics_lib.TENSORBOARD_SUBDIR

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def _assert_events_equal_results(self, logdir, results_dir):
    results = json.loads((results_dir / "results.json").read_text())
    (rows,) = results["perplexity"].values()
    scalars, images = read_events(logdir)
    want = [(r["length"], r["perplexity"]) for r in rows if r["mode"] == "nonoverlap"]
    got = scalars["perplexity_vs_length/nonoverlap"]
    self.assertEqual([n for n, _ in got], [n for n, _ in want])
    for (_, a), (_, b) in zip(got, want):
      self.assertAlmostEqual(a, b, delta=1e-6 * b)  # float32 events, float64 JSON.
    self.assertEqual([s for s, _, _ in images["perplexity_vs_length"]],
                     [results["meta"]["steps"]])

  def test_first_and_later_evaluation_in_their_own_folders(self):
    self._assert_events_equal_results(self.tensorboard / "results", self.workdir)
    self._assert_events_equal_results(self.tensorboard / "evals" / "long",
                                      self.workdir / "evals" / "long")
    # The training scalars are where they were, with no evaluation tag among them.
    training, _ = read_events(self.tensorboard)
    self.assertIn("train/loss", training)
    self.assertFalse([t for t in training if t.startswith("perplexity_vs_length")])

  def test_compare_merges_both_evaluations(self):
    long = json.loads((self.workdir / "evals" / "long" / "results.json").read_text())
    (rows,) = long["perplexity"].values()
    text = compare.compare([self.workdir], write=False)
    self.assertIn(f"{rows[-1]['perplexity']:.3f} (evals/long)", text)
    self.assertIn("ppl@32 | ppl@64 | ppl@128", text)

  def test_no_events_when_the_run_says_so(self):
    config_path = self.workdir / "config.json"
    text = config_path.read_text()
    self.addCleanup(config_path.write_text, text)
    saved = json.loads(text)
    saved["train"]["tensorboard"] = False
    config_path.write_text(json.dumps(saved))
    experiment.evaluate_run(self.workdir, name="quiet", log=lambda line: None)
    self.assertTrue((self.workdir / "evals" / "quiet" / "results.json").exists())
    self.assertFalse((self.tensorboard / "evals" / "quiet").exists())


if __name__ == "__main__":
  absltest.main()
