"""Tests of pejax/train/loop.py: exact resume, graceful stop, NaN guard, keep-N, metrics, eval."""

from __future__ import annotations

import json
import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import pytest

from pejax.experiment_config import get_default_config
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import loop as loop_lib
from pejax.train import metrics as metrics_lib
from pejax.train import optimizer as optimizer_lib

VOCAB = 16
LENGTH = 6
BATCH = 2


class TinyLM(nnx.Module):
  """Stand-in decoder: embedding + dense, with the decoder call signature."""

  def __init__(self, *, vocab_size: int, d_model: int, rngs: nnx.Rngs):
    self.embed = nnx.Embed(vocab_size, d_model, rngs=rngs)
    self.out = nnx.Linear(d_model, vocab_size, rngs=rngs)

  def __call__(self, tokens, *, positions, segment_ids=None):
    del segment_ids
    hidden = self.embed(tokens) + 0.01 * positions[..., None].astype(jnp.float32)
    return self.out(hidden)


class TinyIterator:
  """Stand-in data iterator: batch `i` is a pure function of `(seed, i)`.

  Args:
    seed: Data seed.
    poison_batch: Index of a batch whose loss mask is NaN (0-based), or None.
    crash_batch: Index of a batch whose fetch raises RuntimeError, or None.
    num_batches: Length of the data (StopIteration after it), or None for endless.
  """

  def __init__(self, seed: int = 0, *, poison_batch=None, crash_batch=None, num_batches=None):
    self.seed = seed
    self.step = 0
    self.poison_batch = poison_batch
    self.crash_batch = crash_batch
    self.num_batches = num_batches

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    if self.num_batches is not None and self.step >= self.num_batches:
      raise StopIteration
    if self.step == self.crash_batch:
      raise RuntimeError(f"simulated crash fetching batch {self.step}")
    rng = np.random.default_rng([self.seed, self.step])
    tokens = rng.integers(0, VOCAB, (BATCH, LENGTH + 1), dtype=np.int32)
    mask = np.ones((BATCH, LENGTH), np.float32)
    if self.step == self.poison_batch:
      mask[0, 0] = np.nan
    self.step += 1
    return {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "positions": np.broadcast_to(np.arange(LENGTH, dtype=np.int32), (BATCH, LENGTH)).copy(),
        "loss_mask": mask,
    }

  def get_state(self) -> dict[str, int]:
    return {"seed": self.seed, "step": self.step}

  def set_state(self, state: dict[str, int]) -> None:
    self.seed = state["seed"]
    self.step = state["step"]


def _config(steps: int = 6, **train_overrides):
  config = get_default_config()
  config.model.vocab_size = VOCAB
  config.model.d_model = 8
  config.data.train_len = LENGTH
  config.data.batch_size = BATCH
  config.optim.warmup_steps = 2
  config.optim.learning_rate = 1e-2
  config.train.steps = steps
  config.train.log_every = 2
  config.train.eval_every = 0
  config.train.checkpoint_every = 3
  config.train.keep_checkpoints = 2
  config.train.resume = True
  config.train.update(train_overrides)
  return config


def _build(config, seed: int = 0):
  model = TinyLM(
      vocab_size=config.model.vocab_size, d_model=config.model.d_model, rngs=nnx.Rngs(seed))
  optimizer = optimizer_lib.create_optimizer(model, config.optim, total_steps=config.train.steps)
  return model, optimizer


def _leaves(node) -> list[np.ndarray]:
  return [np.asarray(x) for x in jax.tree.leaves(nnx.state(node))]


def _quiet(line: str) -> None:
  del line


class TrainLoopTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.root = self.create_tempdir().full_path

  def _straight_run(self, config, steps_tag="straight"):
    model, optimizer = _build(config)
    result = loop_lib.train(
        model, optimizer, TinyIterator(), config=config,
        workdir=os.path.join(self.root, steps_tag), log_fn=_quiet)
    return model, optimizer, result

  def test_completes_and_checkpoints(self):
    config = _config(steps=6)
    model, optimizer, result = self._straight_run(config)
    self.assertEqual(result.final_step, 6)
    self.assertIsNone(result.stop_reason)
    self.assertLen(result.losses, 6)
    self.assertTrue(all(np.isfinite(result.losses)))
    self.assertEqual(result.last_loss, result.losses[-1])
    self.assertEqual(int(optimizer.step[...]), 6)
    with checkpoint_lib.Checkpointer(os.path.join(self.root, "straight", "checkpoints")) as c:
      self.assertEqual(c.all_steps(), [3, 6])
    del model

  @parameterized.named_parameters(
      ("sigterm", "SIGTERM"), ("sigint", "SIGINT"), ("crash", "crash"))
  @pytest.mark.slow
  def test_resume_is_bitwise_identical(self, interruption):
    config = _config(steps=6)
    straight_model, straight_optimizer, straight = self._straight_run(config)

    workdir = os.path.join(self.root, "interrupted")
    model, optimizer = _build(config)
    if interruption == "crash":
      # Batch index 4 is fetched (prefetched) while step 4 runs: the checkpoint of step 3 is the
      # last one, and the process state is lost.
      with self.assertRaisesRegex(RuntimeError, "simulated crash"):
        loop_lib.train(model, optimizer, TinyIterator(crash_batch=4), config=config,
                       workdir=workdir, log_fn=_quiet)
    else:
      signum = getattr(signal, interruption)

      def send_signal(step, metrics):
        del metrics
        if step == 3:
          os.kill(os.getpid(), signum)

      first = loop_lib.train(
          model, optimizer, TinyIterator(), config=config, workdir=workdir,
          step_callbacks=[send_signal], log_fn=_quiet)
      self.assertEqual(first.stop_reason, interruption)
      self.assertEqual(first.final_step, 3)
      self.assertEqual(first.last_checkpoint_step, 3)
      self.assertEqual(first.losses, straight.losses[:3])

    # A fresh process state: new model (other seed), optimizer and iterator.
    resumed_model, resumed_optimizer = _build(config, seed=123)
    second = loop_lib.train(
        resumed_model, resumed_optimizer, TinyIterator(), config=config, workdir=workdir,
        log_fn=_quiet)
    self.assertEqual(second.start_step, 3)
    self.assertEqual(second.final_step, 6)
    self.assertIsNone(second.stop_reason)
    self.assertEqual(second.losses, straight.losses[3:])
    for a, b in zip(_leaves(straight_model), _leaves(resumed_model)):
      np.testing.assert_array_equal(a, b)
    for a, b in zip(_leaves(straight_optimizer), _leaves(resumed_optimizer)):
      np.testing.assert_array_equal(a, b)

  def test_signal_handlers_are_restored(self):
    sentinel = lambda signum, frame: None
    previous = signal.signal(signal.SIGTERM, sentinel)
    try:
      config = _config(steps=2)
      self._straight_run(config)
      self.assertIs(signal.getsignal(signal.SIGTERM), sentinel)
    finally:
      signal.signal(signal.SIGTERM, previous)

  @pytest.mark.slow
  def test_resume_with_more_steps(self):
    workdir = os.path.join(self.root, "grow")
    model, optimizer = _build(_config(steps=4))
    loop_lib.train(model, optimizer, TinyIterator(), config=_config(steps=4), workdir=workdir,
                   log_fn=_quiet)
    longer = _config(steps=7)
    model, optimizer = _build(longer, seed=9)
    data = TinyIterator()
    result = loop_lib.train(model, optimizer, data, config=longer, workdir=workdir,
                            log_fn=_quiet)
    self.assertEqual((result.start_step, result.final_step), (4, 7))
    self.assertLen(result.losses, 3)
    self.assertEqual(data.step, 7)
    self.assertEqual(int(optimizer.step[...]), 7)

  @pytest.mark.slow
  def test_already_finished_run_returns_immediately(self):
    config = _config(steps=3)
    self._straight_run(config, "done")
    model, optimizer = _build(config, seed=5)
    result = loop_lib.train(model, optimizer, TinyIterator(), config=config,
                            workdir=os.path.join(self.root, "done"), log_fn=_quiet)
    self.assertEqual((result.start_step, result.final_step, result.losses), (3, 3, []))

  @parameterized.named_parameters(
      ("at_checkpoint_step", 4, 2), ("between_checkpoints", 5, 4), ("before_any", 1, None))
  @pytest.mark.slow
  def test_nan_guard_keeps_last_good_checkpoint(self, bad_step, expected_checkpoint):
    config = _config(steps=8, checkpoint_every=2, keep_checkpoints=5)
    workdir = os.path.join(self.root, "nan")
    model, optimizer = _build(config)
    with self.assertRaisesRegex(
        loop_lib.NonFiniteLossError, rf"non-finite training loss nan .* at step {bad_step};"
    ) as caught:
      loop_lib.train(model, optimizer, TinyIterator(poison_batch=bad_step - 1), config=config,
                     workdir=workdir, log_fn=_quiet)
    self.assertEqual(caught.exception.step, bad_step)
    self.assertEqual(caught.exception.last_checkpoint_step, expected_checkpoint)
    with checkpoint_lib.Checkpointer(os.path.join(workdir, "checkpoints")) as checkpointer:
      self.assertEqual(checkpointer.latest_step(), expected_checkpoint)
      if expected_checkpoint is not None:
        self.assertIn(f"last good checkpoint is step {expected_checkpoint}",
                      str(caught.exception))
        restored_model, restored_optimizer = _build(config, seed=1)
        checkpointer.restore(restored_model, restored_optimizer)
        for leaf in _leaves(restored_model) + _leaves(restored_optimizer):
          self.assertTrue(np.all(np.isfinite(leaf)))
    records = metrics_lib.read_metrics(workdir)
    self.assertTrue(all(r["step"] < bad_step for r in records))

  @pytest.mark.slow
  def test_keep_last_n(self):
    config = _config(steps=5, checkpoint_every=1, keep_checkpoints=2)
    self._straight_run(config, "keep")
    directory = os.path.join(self.root, "keep", "checkpoints")
    self.assertEqual(sorted(int(name) for name in os.listdir(directory)), [4, 5])

  def test_existing_checkpoints_without_resume(self):
    config = _config(steps=3)
    self._straight_run(config, "noresume")
    config.train.resume = False
    model, optimizer = _build(config)
    with self.assertRaisesRegex(ValueError, "resume"):
      loop_lib.train(model, optimizer, TinyIterator(), config=config,
                     workdir=os.path.join(self.root, "noresume"), log_fn=_quiet)

  def test_incompatible_config_on_resume(self):
    config = _config(steps=3)
    self._straight_run(config, "mismatch")
    other = _config(steps=6)
    other.model.d_model = 4
    model, optimizer = _build(other)
    with self.assertRaisesRegex(ValueError, "model.d_model: checkpoint has 8, current config"
                                " has 4"):
      loop_lib.train(model, optimizer, TinyIterator(), config=other,
                     workdir=os.path.join(self.root, "mismatch"), log_fn=_quiet)

  def test_bad_train_config(self):
    config = _config()
    config.train.log_every = -1
    model, optimizer = _build(config)
    with self.assertRaisesRegex(ValueError, "config.train.log_every"):
      loop_lib.train(model, optimizer, TinyIterator(), config=config, workdir=self.root)

  def test_data_exhausted_saves_and_stops(self):
    config = _config(steps=6)
    model, optimizer = _build(config)
    result = loop_lib.train(model, optimizer, TinyIterator(num_batches=4), config=config,
                            workdir=os.path.join(self.root, "short"), log_fn=_quiet)
    self.assertEqual((result.final_step, result.stop_reason), (4, "data_exhausted"))
    self.assertEqual(result.last_checkpoint_step, 4)

  def test_metrics_eval_and_progress(self):
    config = _config(steps=6, eval_every=4, log_every=2)
    workdir = os.path.join(self.root, "metrics")
    model, optimizer = _build(config)
    lines = []
    eval_steps = []

    def eval_fn(model):
      eval_steps.append(int(optimizer.step[...]))
      return {"loss": 1.5, "perplexity": float("inf"), "by_length": {"12": 2.0}}

    result = loop_lib.train(model, optimizer, TinyIterator(), config=config, workdir=workdir,
                            eval_fn=eval_fn, log_fn=lines.append)
    self.assertEqual(eval_steps, [4, 6])  # Every eval_every steps and at the end.
    with open(os.path.join(workdir, metrics_lib.METRICS_FILENAME)) as f:
      records = [json.loads(line) for line in f]  # Every line is strict JSON.
    self.assertEqual(records, result.history)
    self.assertEqual(
        [(r["step"], r["split"]) for r in records],
        [(2, "train"), (4, "train"), (4, "eval"), (6, "train"), (6, "eval")])
    for record in records:
      self.assertEqual(sorted(record), ["metrics", "split", "step", "wall_time"])
      self.assertIsInstance(record["wall_time"], float)
    train_metrics = records[0]["metrics"]
    np.testing.assert_allclose(train_metrics["loss"], np.mean(result.losses[:2]), rtol=1e-12)
    for key in ("grad_norm", "learning_rate", "tokens_per_s", "steps_per_s", "eta_s"):
      self.assertIn(key, train_metrics)
    self.assertEqual(records[2]["metrics"], {"loss": 1.5, "perplexity": None,
                                             "by_length": {"12": 2.0}})
    progress = [line for line in lines if line.startswith("step ") and "tok/s" in line]
    self.assertLen(progress, 3)
    self.assertTrue(progress[0].startswith("step 2/6"))
    self.assertIn("ETA", progress[1])

  @pytest.mark.slow
  def test_metrics_file_reads_as_one_run_after_resume(self):
    config = _config(steps=6, log_every=1, checkpoint_every=3)
    workdir = os.path.join(self.root, "append")
    model, optimizer = _build(config)
    with self.assertRaisesRegex(RuntimeError, "simulated crash"):
      # Steps 1-4 are logged, the checkpoint is at 3, the crash comes while step 5 prefetches.
      loop_lib.train(model, optimizer, TinyIterator(crash_batch=5), config=config,
                     workdir=workdir, log_fn=_quiet)
    self.assertEqual([r["step"] for r in metrics_lib.read_metrics(workdir)], [1, 2, 3, 4])
    model, optimizer = _build(config)
    loop_lib.train(model, optimizer, TinyIterator(), config=config, workdir=workdir,
                   log_fn=_quiet)
    self.assertEqual([r["step"] for r in metrics_lib.read_metrics(workdir)],
                     [1, 2, 3, 4, 5, 6])


if __name__ == "__main__":
  absltest.main()
