"""Tests of pejax/train/checkpoint.py: round trip, config check, keep-last-N, atomic saves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
from orbax.checkpoint._src.handlers import json_checkpoint_handler
import pytest

from pejax.experiment_config import get_default_config
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import optimizer as optimizer_lib
from pejax.train import train_step as train_step_lib

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class TinyLM(nnx.Module):
  """Stand-in decoder: embedding + dense, with the decoder call signature."""

  def __init__(self, *, vocab_size: int, d_model: int, rngs: nnx.Rngs):
    self.embed = nnx.Embed(vocab_size, d_model, rngs=rngs)
    self.out = nnx.Linear(d_model, vocab_size, rngs=rngs)

  def __call__(self, tokens, *, positions, segment_ids=None):
    del positions, segment_ids
    return self.out(self.embed(tokens))


def _config(d_model: int = 8):
  config = get_default_config()
  config.model.vocab_size = 16
  config.model.d_model = d_model
  config.optim.warmup_steps = 1
  config.train.steps = 10
  return config


def _build(config, seed: int = 0):
  model = TinyLM(
      vocab_size=config.model.vocab_size, d_model=config.model.d_model, rngs=nnx.Rngs(seed))
  optimizer = optimizer_lib.create_optimizer(model, config.optim, total_steps=config.train.steps)
  return model, optimizer


def _train(model, optimizer, steps: int) -> None:
  rng = np.random.default_rng(0)
  step_fn = train_step_lib.make_train_step()
  for _ in range(steps):
    tokens = rng.integers(0, 16, (2, 5), dtype=np.int32)
    step_fn(model, optimizer, {
        "inputs": tokens, "targets": (tokens + 1) % 16,
        "positions": np.zeros((2, 5), np.int32), "loss_mask": np.ones((2, 5), np.float32)})


def _leaves(node) -> list[np.ndarray]:
  def to_numpy(x):
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
      x = jax.random.key_data(x)
    return np.asarray(x)
  return [to_numpy(x) for x in jax.tree.leaves(nnx.state(node))]


def _assert_same_state(test, a, b) -> None:
  leaves_a, leaves_b = _leaves(a), _leaves(b)
  test.assertEqual(len(leaves_a), len(leaves_b))
  for x, y in zip(leaves_a, leaves_b):
    np.testing.assert_array_equal(x, y)


class CheckpointerTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.directory = os.path.join(self.create_tempdir().full_path, "checkpoints")

  def test_round_trip_into_fresh_objects(self):
    config = _config()
    model, optimizer = _build(config, seed=0)
    _train(model, optimizer, 3)
    with checkpoint_lib.Checkpointer(self.directory, config=config) as checkpointer:
      self.assertTrue(checkpointer.save(
          3, model=model, optimizer=optimizer, data_state={"seed": 0, "step": 3}))
      self.assertFalse(checkpointer.save(3, model=model, optimizer=optimizer))  # Exists.
    other_model, other_optimizer = _build(config, seed=7)
    with checkpoint_lib.Checkpointer(self.directory, config=config) as checkpointer:
      self.assertEqual(checkpointer.latest_step(), 3)
      restored = checkpointer.restore(other_model, other_optimizer)
    self.assertEqual(restored.step, 3)
    self.assertEqual(restored.data_state, {"seed": 0, "step": 3})
    self.assertEqual(restored.config, checkpoint_lib.config_to_dict(config))
    self.assertEqual(int(other_optimizer.step[...]), 3)
    _assert_same_state(self, model, other_model)
    _assert_same_state(self, optimizer, other_optimizer)

  def test_model_only_restore(self):
    config = _config()
    model, optimizer = _build(config, seed=0)
    with checkpoint_lib.Checkpointer(self.directory, config=config) as checkpointer:
      checkpointer.save(1, model=model, optimizer=optimizer)
    other_model, _ = _build(config, seed=5)
    with checkpoint_lib.Checkpointer(self.directory, config=config) as checkpointer:
      checkpointer.restore(other_model)
    _assert_same_state(self, model, other_model)

  def test_rng_state_round_trip(self):
    # A model holding nnx.Rngs (typed PRNG keys plus counters) restores exactly.
    class WithRngs(nnx.Module):

      def __init__(self, seed):
        self.linear = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        self.rngs = nnx.Rngs(dropout=seed)

    model = WithRngs(1)
    model.rngs.dropout()  # Advance the counter.
    optimizer = nnx.Optimizer(model, optimizer_lib.adamw_from_config(
        _config().optim, total_steps=10), wrt=nnx.Param)
    with checkpoint_lib.Checkpointer(self.directory) as checkpointer:
      checkpointer.save(1, model=model, optimizer=optimizer)
    other = WithRngs(9)
    other_optimizer = nnx.Optimizer(other, optimizer_lib.adamw_from_config(
        _config().optim, total_steps=10), wrt=nnx.Param)
    with checkpoint_lib.Checkpointer(self.directory) as checkpointer:
      checkpointer.restore(other, other_optimizer)
    _assert_same_state(self, model, other)
    np.testing.assert_array_equal(
        jax.random.key_data(model.rngs.dropout()), jax.random.key_data(other.rngs.dropout()))

  def test_incompatible_config_names_field(self):
    saved_config = _config(d_model=16)
    model, optimizer = _build(saved_config)
    with checkpoint_lib.Checkpointer(self.directory, config=saved_config) as checkpointer:
      checkpointer.save(2, model=model, optimizer=optimizer)
    current = _config(d_model=8)
    current.pe.name = "alibi"
    current.train.steps = 99  # Allowed to differ.
    current.eval.lens = "1,2"  # Allowed to differ.
    new_model, new_optimizer = _build(current)
    before = _leaves(new_model)
    with checkpoint_lib.Checkpointer(self.directory, config=current) as checkpointer:
      with self.assertRaisesRegex(ValueError, "model.d_model: checkpoint has 16, current config"
                                  " has 8") as caught:
        checkpointer.restore(new_model, new_optimizer)
    self.assertIn("pe.name: checkpoint has 'rope', current config has 'alibi'",
                  str(caught.exception))
    self.assertNotIn("train.steps", str(caught.exception))
    self.assertNotIn("eval.lens", str(caught.exception))
    for x, y in zip(before, _leaves(new_model)):  # Nothing was written into the model.
      np.testing.assert_array_equal(x, y)

  def test_non_shape_sections_may_differ(self):
    config = _config()
    model, optimizer = _build(config)
    with checkpoint_lib.Checkpointer(self.directory, config=config) as checkpointer:
      checkpointer.save(2, model=model, optimizer=optimizer)
    current = _config()
    current.train.steps = 50
    current.optim.learning_rate = 1e-4
    current.eval.mode = "sliding"
    new_model, new_optimizer = _build(current, seed=3)
    with checkpoint_lib.Checkpointer(self.directory, config=current) as checkpointer:
      self.assertEqual(checkpointer.restore(new_model, new_optimizer).step, 2)
    _assert_same_state(self, model, new_model)

  def test_shape_mismatch_names_variable(self):
    model, optimizer = _build(_config(d_model=8))
    with checkpoint_lib.Checkpointer(self.directory) as checkpointer:  # No config to compare.
      checkpointer.save(1, model=model, optimizer=optimizer)
    bigger, bigger_optimizer = _build(_config(d_model=12))
    with checkpoint_lib.Checkpointer(self.directory) as checkpointer:
      with self.assertRaisesRegex(
          ValueError, r"model variable 'embed/embedding': checkpoint has float32\[16, 8\],"
          r" current model has float32\[16, 12\]"):
        checkpointer.restore(bigger, bigger_optimizer)

  def test_restore_without_config_checks_the_models_own_config(self):
    # A RoPE checkpoint has the same variables as an ALiBi decoder: only the PE tells them apart.
    from pejax.nn import Decoder, DecoderConfig  # pylint: disable=g-import-not-at-top
    config = _config(d_model=16)
    config.model.num_layers, config.model.num_heads = 1, 2
    small = dict(vocab_size=16, num_layers=1, d_model=16, num_heads=2)
    rope = Decoder(DecoderConfig(pe="rope", **small), rngs=nnx.Rngs(0))
    rope_optimizer = optimizer_lib.create_optimizer(rope, config.optim, total_steps=10)
    with checkpoint_lib.Checkpointer(self.directory, config=config) as checkpointer:
      checkpointer.save(1, model=rope, optimizer=rope_optimizer)
    alibi = Decoder(DecoderConfig(pe="alibi", **small), rngs=nnx.Rngs(1))
    with checkpoint_lib.Checkpointer(self.directory) as checkpointer:  # config=None.
      with self.assertRaisesRegex(
          ValueError, r"pe\.name: checkpoint has 'rope', current model has 'alibi'"):
        checkpointer.restore(alibi)
      wide = Decoder(DecoderConfig(pe="rope", **{**small, "d_model": 32}), rngs=nnx.Rngs(1))
      with self.assertRaisesRegex(ValueError, r"model\.d_model: checkpoint has 16"):
        checkpointer.restore(wide)
      same = Decoder(DecoderConfig(pe="rope", **small), rngs=nnx.Rngs(1))
      self.assertEqual(checkpointer.restore(same).step, 1)
    _assert_same_state(self, rope, same)

  @pytest.mark.slow
  def test_corrupt_newest_checkpoint_falls_back_with_a_warning(self):
    config = _config()
    model, optimizer = _build(config)
    with checkpoint_lib.Checkpointer(self.directory, config=config) as checkpointer:
      checkpointer.save(1, model=model, optimizer=optimizer, data_state={"step": 1})
      checkpointer.wait_until_finished()
      _train(model, optimizer, 1)
      checkpointer.save(2, model=model, optimizer=optimizer, data_state={"step": 2})
    # Truncate every file of step 2's model item (what an independent check did by hand).
    for root, _, files in os.walk(os.path.join(self.directory, "2", "model")):
      for name in files:
        with open(os.path.join(root, name), "r+b") as f:
          f.truncate(max(0, os.path.getsize(os.path.join(root, name)) // 3))
    fresh, fresh_optimizer = _build(config, seed=5)
    with checkpoint_lib.Checkpointer(self.directory, config=config) as checkpointer:
      with self.assertLogs(level="WARNING") as logs:
        restored = checkpointer.restore(fresh, fresh_optimizer)
      self.assertEqual(checkpointer.all_steps(), [1])  # Step 2 moved aside: it can be redone.
    self.assertEqual((restored.step, restored.skipped), (1, (2,)))
    self.assertEqual(restored.data_state, {"step": 1})
    self.assertRegex("\n".join(logs.output),
                     r"checkpoint step 2 in .* is unreadable .*previous committed checkpoint "
                     r"step 1")
    self.assertTrue(os.path.isdir(os.path.join(self.directory, "2.unreadable")))
    expected, _ = _build(config)
    _assert_same_state(self, expected, fresh)

  def test_missing_checkpoint(self):
    model, optimizer = _build(_config())
    with checkpoint_lib.Checkpointer(self.directory) as checkpointer:
      with self.assertRaisesRegex(FileNotFoundError, "no checkpoint"):
        checkpointer.restore(model, optimizer)
      checkpointer.save(1, model=model, optimizer=optimizer)
      checkpointer.wait_until_finished()
      with self.assertRaisesRegex(FileNotFoundError, "step 5"):
        checkpointer.restore(model, optimizer, step=5)

  @parameterized.named_parameters(("keep_two", 2, [4, 5]), ("keep_one", 1, [5]))
  @pytest.mark.slow
  def test_keep_last_n(self, keep, expected):
    model, optimizer = _build(_config())
    with checkpoint_lib.Checkpointer(self.directory, max_to_keep=keep) as checkpointer:
      for step in range(1, 6):
        checkpointer.save(step, model=model, optimizer=optimizer)
    with checkpoint_lib.Checkpointer(self.directory) as checkpointer:
      self.assertEqual(checkpointer.all_steps(), expected)
    self.assertEqual(sorted(int(name) for name in os.listdir(self.directory)), expected)

  def test_bad_max_to_keep(self):
    with self.assertRaisesRegex(ValueError, "max_to_keep"):
      checkpoint_lib.Checkpointer(self.directory, max_to_keep=0)

  def test_stray_temporary_directory_is_ignored(self):
    model, optimizer = _build(_config())
    with checkpoint_lib.Checkpointer(self.directory, max_to_keep=1) as checkpointer:
      checkpointer.save(2, model=model, optimizer=optimizer)
    stray = os.path.join(self.directory, "4.orbax-checkpoint-tmp-1234567")
    os.makedirs(os.path.join(stray, "model"))
    with open(os.path.join(stray, "model", "garbage"), "w") as f:
      f.write("half written")
    other, other_optimizer = _build(_config(), seed=4)
    with checkpoint_lib.Checkpointer(self.directory, max_to_keep=1) as checkpointer:
      self.assertEqual(checkpointer.latest_step(), 2)
      checkpointer.restore(other, other_optimizer)
    _assert_same_state(self, model, other)
    self.assertEqual(os.listdir(self.directory), ["2"])  # The stray was cleaned up.

  def test_a_read_only_reader_leaves_a_running_writers_files_alone(self):
    # --eval_only / pejax.load_run on a run that is still training: the writer's in-flight
    # temporary step folder, and a newest step it has not finished, must survive the reader.
    config = _config()
    model, optimizer = _build(config)
    with checkpoint_lib.Checkpointer(self.directory, config=config) as checkpointer:
      checkpointer.save(1, model=model, optimizer=optimizer)
      checkpointer.wait_until_finished()
      checkpointer.save(2, model=model, optimizer=optimizer)
    for root, _, files in os.walk(os.path.join(self.directory, "2", "model")):
      for name in files:  # Step 2 unreadable.
        os.truncate(os.path.join(root, name), 0)
    in_flight = os.path.join(self.directory, "3.orbax-checkpoint-tmp-1234567")
    os.makedirs(os.path.join(in_flight, "model"))
    before = sorted(os.listdir(self.directory))
    reader_model, _ = _build(config, seed=3)
    with checkpoint_lib.Checkpointer(self.directory, config=config,
                                     read_only=True) as reader:
      with self.assertLogs(level="WARNING"):
        self.assertEqual(reader.restore(reader_model).step, 1)
      with self.assertRaisesRegex(ValueError, "read_only=True.*cannot save step 4"):
        reader.save(4, model=model, optimizer=optimizer)
    self.assertEqual(sorted(os.listdir(self.directory)), before)
    self.assertTrue(os.path.isdir(in_flight))
    with self.assertRaisesRegex(FileNotFoundError, "no checkpoint directory"):
      checkpoint_lib.Checkpointer(self.directory + "-absent", read_only=True)
    self.assertFalse(os.path.exists(self.directory + "-absent"))  # Nothing created.

  def test_unserializable_data_state_fails_before_writing(self):
    model, optimizer = _build(_config())
    with checkpoint_lib.Checkpointer(self.directory) as checkpointer:
      with self.assertRaisesRegex(ValueError, "data_state must be JSON-serializable"):
        checkpointer.save(1, model=model, optimizer=optimizer, data_state={"bad": object()})
      self.assertEqual(checkpointer.all_steps(), [])
    self.assertEqual(os.listdir(self.directory), [])

  def test_failed_save_keeps_previous_checkpoint(self):
    model, optimizer = _build(_config())
    checkpointer = checkpoint_lib.Checkpointer(self.directory, max_to_keep=1)
    checkpointer.save(2, model=model, optimizer=optimizer, data_state={"step": 2})
    checkpointer.wait_until_finished()
    _train(model, optimizer, 1)

    async def fail(*args, **kwargs):
      raise OSError("disk full (simulated) in the middle of a save")

    # The JSON items are written in the background after the arrays: the save dies half-way.
    with mock.patch.object(json_checkpoint_handler.JsonCheckpointHandler, "_save_fn", fail):
      with self.assertRaisesRegex(OSError, "disk full"):
        checkpointer.save(3, model=model, optimizer=optimizer, data_state={"step": 3})
        checkpointer.wait_until_finished()
    fresh, fresh_optimizer = _build(_config(), seed=4)
    with checkpoint_lib.Checkpointer(self.directory, max_to_keep=1) as reopened:
      self.assertEqual(reopened.all_steps(), [2])
      restored = reopened.restore(fresh, fresh_optimizer)
    self.assertEqual(restored.data_state, {"step": 2})
    self.assertEqual(int(fresh_optimizer.step[...]), 0)

  @pytest.mark.slow
  def test_killed_save_keeps_previous_checkpoint(self):
    # A child process saves step 1, then is SIGKILLed in the middle of writing step 2.
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {REPO_ROOT!r})
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from orbax.checkpoint._src.handlers import json_checkpoint_handler
        import numpy as np
        from test_checkpoint import _build, _config, _leaves, _train
        from pejax.train import checkpoint as checkpoint_lib

        model, optimizer = _build(_config())
        np.savez({self.directory + "_step1.npz"!r}, *_leaves(model))
        checkpointer = checkpoint_lib.Checkpointer({self.directory!r}, max_to_keep=1)
        checkpointer.save(1, model=model, optimizer=optimizer, data_state={{"step": 1}})
        checkpointer.wait_until_finished()
        _train(model, optimizer, 1)

        async def die(*args, **kwargs):
          os.kill(os.getpid(), signal.SIGKILL)

        json_checkpoint_handler.JsonCheckpointHandler._save_fn = die
        checkpointer.save(2, model=model, optimizer=optimizer, data_state={{"step": 2}})
        checkpointer.wait_until_finished()
        print("not killed")
        """)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    child = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    self.assertEqual(child.returncode, -signal.SIGKILL, msg=child.stderr[-3000:])
    self.assertTrue(any(".orbax-checkpoint-tmp" in name for name in os.listdir(self.directory)))
    model, optimizer = _build(_config(), seed=6)
    with checkpoint_lib.Checkpointer(self.directory, max_to_keep=1) as checkpointer:
      self.assertEqual(checkpointer.all_steps(), [1])
      restored = checkpointer.restore(model, optimizer)
    self.assertEqual(restored.data_state, {"step": 1})
    # Step 1 holds the child's untrained parameters, bit for bit (compared with what the child
    # saved: initializing in another process may differ in the last bit).
    with np.load(self.directory + "_step1.npz") as saved:
      expected = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    actual = _leaves(model)
    self.assertEqual(len(expected), len(actual))
    for x, y in zip(expected, actual):
      np.testing.assert_array_equal(x, y)


class ConfigDifferencesTest(parameterized.TestCase):

  def test_lists_every_difference(self):
    saved = {"model": {"d_model": 128, "mlp": "swiglu"}, "pe": {"name": "rope"},
             "train": {"steps": 10}}
    current = {"model": {"d_model": 64, "mlp": "swiglu", "extra": 1}, "pe": {"name": "rope"},
               "train": {"steps": 20}}
    self.assertEqual(checkpoint_lib.config_differences(saved, current), [
        "model.d_model: checkpoint has 128, current config has 64",
        "model.extra: checkpoint has <missing>, current config has 1",
    ])

  def test_a_field_unset_on_one_side_and_missing_on_the_other_is_no_difference(self):
    # A PE registered after the checkpoint was written adds its fields, unset (None), to every
    # config; resuming must not refuse. A value set on one side still counts.
    saved = {"pe": {"name": "alibi"}}
    self.assertEqual(checkpoint_lib.config_differences(
        saved, {"pe": {"name": "alibi", "decay_rate": None}}), [])
    self.assertEqual(checkpoint_lib.config_differences(
        {"pe": {"name": "alibi", "decay_rate": None}}, saved), [])
    self.assertEqual(checkpoint_lib.config_differences(
        saved, {"pe": {"name": "alibi", "decay_rate": 0.5}}),
        ["pe.decay_rate: checkpoint has <missing>, current config has 0.5"])

  def test_sections_are_selectable(self):
    saved = {"train": {"steps": 10}}
    current = {"train": {"steps": 20}}
    self.assertEqual(checkpoint_lib.config_differences(saved, current), [])
    self.assertEqual(
        checkpoint_lib.config_differences(saved, current, sections=("train",)),
        ["train.steps: checkpoint has 10, current config has 20"])

  def test_config_to_dict_is_json_round_trip(self):
    config = get_default_config()
    as_dict = checkpoint_lib.config_to_dict(config)
    self.assertEqual(as_dict["model"]["d_model"], config.model.d_model)
    self.assertEqual(checkpoint_lib.config_differences(as_dict, config.to_dict()), [])


if __name__ == "__main__":
  absltest.main()
