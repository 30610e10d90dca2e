"""Tests of pejax/train/many.py (and the padding of pejax/train/stacked_batch.py): N models as
one vmapped program equal N runs of their own."""

from __future__ import annotations

import pathlib

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import numpy as np
import pytest

from pejax import decoder_from_config
from pejax import experiment_config
from pejax.nn import Decoder
from pejax.nn import pe_names
from pejax.train import many
from pejax.train import optimizer as optimizer_lib
from pejax.train import stacked_batch
from pejax.train import train_step as train_step_lib

TOTAL_STEPS = 6
STEPS = 4
BATCH = 4
POSITION_RANGE = 24


def _config(pe: str = "rope"):
  config = experiment_config.get_default_config()
  layers = len(pe.split(","))
  config.model.num_layers, config.model.d_model, config.model.num_heads = layers, 16, 2
  config.pe.name = pe
  config.optim.warmup_steps = 2
  return config


def _decoder_config(pe: str = "rope"):
  return decoder_from_config.decoder_config_from(_config(pe))


def _batch(rng: np.random.Generator, length: int) -> dict[str, np.ndarray]:
  """Random tokens, sorted randomized positions per row, a mask that skips some targets."""
  tokens = rng.integers(0, 256, size=(BATCH, length + 1))
  positions = np.sort(np.stack([rng.choice(POSITION_RANGE, size=length, replace=False)
                                for _ in range(BATCH)]), axis=1)
  mask = (rng.random((BATCH, length)) < 0.7).astype(np.float32)
  mask[:, -1] = 1.0
  return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "positions": positions,
          "loss_mask": mask}


def _leaves(tree) -> list[np.ndarray]:
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _alone(pe: str, *, seed: int, learning_rate: float, weight_decay: float, length: int):
  """The reference: one model trained by make_train_step + create_optimizer."""
  config = _config(pe)
  config.optim.learning_rate, config.optim.weight_decay = learning_rate, weight_decay
  model = Decoder(_decoder_config(pe), rngs=nnx.Rngs(params=seed))
  optimizer = optimizer_lib.create_optimizer(model, config.optim, total_steps=TOTAL_STEPS)
  schedule = optimizer_lib.schedule_from_config(config.optim, total_steps=TOTAL_STEPS)
  step = train_step_lib.make_train_step(learning_rate_fn=schedule)
  rng = np.random.default_rng([seed, 1])
  metrics, params = [], []
  for _ in range(STEPS):
    out = step(model, optimizer, train_step_lib.model_inputs(_batch(rng, length)))
    metrics.append({k: float(v) for k, v in out.items()})
    params.append(_leaves(nnx.state(model, nnx.Param)))
  return metrics, params, _leaves(nnx.state(optimizer))


class ModelStackEqualsRunsAloneTest(parameterized.TestCase):
  """Model i of a stack = the same model trained alone, at every step, to float32 tolerance."""

  def test_each_model_equals_its_run_alone_rope(self):
    self._check_equal_to_runs_alone("rope")

  @parameterized.named_parameters(
      ("bias_alibi", "alibi"), ("per_layer_rope_none", "rope,none"),
      ("content_aware_cope", "cope"), ("content_aware_fox", "fox"))
  @pytest.mark.slow
  def test_each_model_equals_its_run_alone(self, pe):
    self._check_equal_to_runs_alone(pe)

  def _check_equal_to_runs_alone(self, pe):
    # Two seeds, two learning rates and weight decays; row lengths 5 and 9: the first model's
    # batches are padded to 9 at every step.
    seeds, rates, decays, lengths = (0, 1), (3e-3, 1e-2), (0.1, 0.0), (5, 9)
    stack = many.ModelStack.from_config(_decoder_config(pe), _config(pe).optim, seeds=seeds,
                                        learning_rates=rates, weight_decays=decays,
                                        total_steps=TOTAL_STEPS)
    rngs = [np.random.default_rng([seed, 1]) for seed in seeds]
    stacked_metrics, stacked_params = [], []
    for _ in range(STEPS):
      out = jax.device_get(stack.step([_batch(r, n) for r, n in zip(rngs, lengths)]))
      stacked_metrics.append(out)
      stacked_params.append([_leaves(nnx.state(stack.member(i)[0], nnx.Param))
                             for i in range(2)])
    for i in range(2):
      metrics, params, opt_state = _alone(pe, seed=seeds[i], learning_rate=rates[i],
                                          weight_decay=decays[i], length=lengths[i])
      for t in range(STEPS):
        for name in ("loss", "grad_norm", "tokens", "learning_rate"):
          np.testing.assert_allclose(stacked_metrics[t][name][i], metrics[t][name], rtol=1e-5,
                                     err_msg=f"model {i} step {t} {name}")
        for a, b in zip(stacked_params[t][i], params[t]):
          np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6,
                                     err_msg=f"model {i} step {t} params")
      _, optimizer = stack.member(i)
      for a, b in zip(_leaves(nnx.state(optimizer)), opt_state):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7,
                                   err_msg=f"model {i} optimizer state")
    np.testing.assert_array_equal(stack.steps(), [STEPS, STEPS])


# One stack for the tests below (one compilation): rope, two seeds, fixed row length.
_STACK = {}


def _stack() -> many.ModelStack:
  if "stack" not in _STACK:
    _STACK["stack"] = many.ModelStack.from_config(
        _decoder_config(), _config().optim, seeds=(0, 1), total_steps=TOTAL_STEPS)
  return _STACK["stack"]


class MaskedStoppingTest(absltest.TestCase):

  def test_a_stopped_model_does_not_change_while_the_others_train(self):
    stack = _stack()
    rng = np.random.default_rng(0)
    stack.step([_batch(rng, 7), _batch(rng, 7)])
    before = [_leaves(nnx.split(stack.member(i))[1]) for i in range(2)]
    steps = stack.steps()
    stack.step([_batch(rng, 7), _batch(rng, 7)], active=[False, True])
    stack.step([None, _batch(rng, 7)])  # No batch: inactive as well.
    after = [_leaves(nnx.split(stack.member(i))[1]) for i in range(2)]
    for a, b in zip(before[0], after[0]):
      np.testing.assert_array_equal(a, b)  # Parameters, moments and step count, bit for bit.
    changed = [not np.array_equal(a, b) for a, b in zip(before[1], after[1])]
    self.assertGreater(sum(changed), len(changed) // 2)
    np.testing.assert_array_equal(stack.steps(), steps + [0, 2])

  def test_member_round_trip_and_select(self):
    stack = _stack()
    model, optimizer = stack.member(1)
    clone = stack.select([1, 0])
    np.testing.assert_array_equal(clone.steps(), stack.steps()[::-1])
    for a, b in zip(_leaves(nnx.split(clone.member(0))[1]), _leaves(nnx.split((model,
                                                                               optimizer))[1])):
      np.testing.assert_array_equal(a, b)
    clone.set_member(1, model, optimizer)
    for a, b in zip(_leaves(nnx.split(clone.member(1))[1]), _leaves(nnx.split(clone.member(0))
                                                                    [1])):
      np.testing.assert_array_equal(a, b)
    # The member's optimizer is its own (a run alone continues with its learning rate).
    self.assertIsNot(optimizer.tx, stack.member(0)[1].tx)

  def test_save_and_restore_are_bit_identical(self):
    stack = _stack()
    path = pathlib.Path(self.create_tempdir().full_path) / "stack.npz"
    stack.save(path)
    fresh = many.ModelStack.from_config(_decoder_config(), _config().optim, seeds=(0, 1),
                                        total_steps=TOTAL_STEPS)
    fresh.restore(path)
    for a, b in zip(_leaves(fresh._state), _leaves(stack._state)):
      np.testing.assert_array_equal(a, b)
    other = many.ModelStack.from_config(_decoder_config(), _config().optim, seeds=(0, 1),
                                        learning_rates=(1e-3, 2e-3), total_steps=TOTAL_STEPS)
    with self.assertRaisesRegex(ValueError, "holds a stack with"):
      other.restore(path)
    self.assertEqual(sorted(p.name for p in path.parent.iterdir()), ["stack.npz"])


class BadInputTest(absltest.TestCase):

  def _make(self, **kwargs):
    arguments = dict(seeds=(0, 1), total_steps=TOTAL_STEPS)
    arguments.update(kwargs)
    return many.ModelStack.from_config(_decoder_config(), _config().optim, **arguments)

  def test_sweeps_are_checked_naming_the_argument_and_value(self):
    with self.assertRaisesRegex(ValueError, r"seeds must name at least one model, got \[\]"):
      self._make(seeds=())
    with self.assertRaisesRegex(ValueError, r"learning_rates must have one value per model "
                                r"\(2\), got 3"):
      self._make(learning_rates=(1e-3, 2e-3, 3e-3))
    with self.assertRaisesRegex(ValueError, r"weight_decays must have one value per model"):
      self._make(weight_decays=(0.1,))
    for bad in (0.0, -1e-3, float("nan")):
      with self.assertRaisesRegex(ValueError, rf"learning_rates\[1\] must be a positive.*"
                                  rf"{bad!r}"):
        self._make(learning_rates=(1e-3, bad))
    with self.assertRaisesRegex(ValueError, r"weight_decays\[0\] must be a non-negative finite "
                                r"number, got -0.1"):
      self._make(weight_decays=(-0.1, 0.1))
    with self.assertRaisesRegex(ValueError, r"total_steps"):
      self._make(total_steps=0)
    with self.assertRaisesRegex(ValueError, r"models 0 and 2 are both \(0, 0.003, 0.1\)"):
      self._make(seeds=(0, 1, 0), learning_rates=(3e-3, 3e-3, 3e-3))
    self.assertEqual(self._make(seeds=(0, 0), learning_rates=(3e-3, 1e-2)).size, 2)

  def test_models_of_other_architectures_are_refused(self):
    small = Decoder(_decoder_config(), rngs=nnx.Rngs(params=0))
    config = _config()
    config.model.d_model = 32
    wide = Decoder(decoder_from_config.decoder_config_from(config), rngs=nnx.Rngs(params=0))
    with self.assertRaisesRegex(ValueError, r"models must share one architecture: models\[1\]"):
      many.ModelStack([small, wide], config.optim, total_steps=TOTAL_STEPS)
    with self.assertRaisesRegex(ValueError, "models must hold at least one model"):
      many.ModelStack([], config.optim, total_steps=TOTAL_STEPS)

  def test_steps_and_indices_are_checked(self):
    stack = _stack()
    rng = np.random.default_rng(0)
    with self.assertRaisesRegex(ValueError, r"one batch per model \(2\), got 1"):
      stack.step([_batch(rng, 5)])
    with self.assertRaisesRegex(ValueError, r"active models \[0\] have no batch"):
      stack.step([None, _batch(rng, 5)], active=[True, True])
    with self.assertRaisesRegex(ValueError, r"active must hold one flag per model"):
      stack.step([_batch(rng, 5), _batch(rng, 5)], active=[True])
    with self.assertRaisesRegex(ValueError, r"index must be an int in \[0, 2\), got 2"):
      stack.member(2)
    with self.assertRaisesRegex(ValueError, r"indices must be distinct"):
      stack.select([0, 0])


class StackBatchesTest(absltest.TestCase):

  def test_padding_is_masked_and_repeats_the_last_position(self):
    rng = np.random.default_rng(0)
    short, long = _batch(rng, 3), _batch(rng, 5)
    out = stacked_batch.stack_batches([short, None, long])
    self.assertEqual(out["inputs"].shape, (3, BATCH, 5))
    self.assertEqual(out["inputs"].dtype, np.int32)
    np.testing.assert_array_equal(out["inputs"][0, :, :3], short["inputs"])
    np.testing.assert_array_equal(out["inputs"][0, :, 3:], 0)
    np.testing.assert_array_equal(out["loss_mask"][0, :, 3:], 0.0)
    np.testing.assert_array_equal(out["loss_mask"][1], 0.0)  # The placeholder scores nothing.
    np.testing.assert_array_equal(out["positions"][0, :, 3:],
                                  np.repeat(short["positions"][:, -1:], 2, axis=1))
    np.testing.assert_array_equal(out["positions"][2], long["positions"])

  def test_shared_position_rows_stay_one_row(self):
    plain = {"inputs": np.ones((2, 4), int), "targets": np.ones((2, 4), int),
             "positions": np.tile(np.arange(4), (2, 1)), "loss_mask": np.ones((2, 4))}
    out = stacked_batch.stack_batches([plain, dict(plain)])
    self.assertEqual(out["positions"].shape, (2, 1, 4))
    with self.assertRaisesRegex(ValueError, r"one batch size B, got sizes \[2, 3\]"):
      stacked_batch.stack_batches([plain, {k: np.ones((3, 4), int) for k in plain}])
    with self.assertRaisesRegex(ValueError, r"batches\[1\]: batch must contain keys"):
      stacked_batch.stack_batches([plain, {"inputs": plain["inputs"]}])
    with self.assertRaisesRegex(ValueError, "segment_ids in some"):
      stacked_batch.stack_batches([plain, {**plain, "segment_ids": np.zeros((2, 4), int)}])
    with self.assertRaisesRegex(ValueError, "at least one batch"):
      stacked_batch.stack_batches([None])


@pytest.mark.slow
class PaddingInvarianceTest(parameterized.TestCase):
  """Every registered PE: logits of the real tokens do not change when rows are padded."""

  @parameterized.named_parameters(*[(name, name) for name in pe_names()],
                                  ("rope_dynamic_ntk", "rope", "dynamic"))
  def test_logits_of_real_tokens_unchanged(self, pe, scaling=None):
    config = _config(pe)
    if scaling:  # Length-dependent: its frequencies follow the largest position.
      config.pe.scaling, config.pe.factor, config.pe.original_max_position = scaling, 2.0, 8
    model = Decoder(decoder_from_config.decoder_config_from(config), rngs=nnx.Rngs(params=0))
    rng = np.random.default_rng(0)
    short = _batch(rng, 6)
    padded = stacked_batch.stack_batches([short, _batch(rng, 11)])
    expected = model(short["inputs"], positions=short["positions"])
    actual = model(padded["inputs"][0], positions=padded["positions"][0])
    np.testing.assert_allclose(np.asarray(actual)[:, :6], np.asarray(expected), rtol=1e-6,
                               atol=1e-6)


if __name__ == "__main__":
  absltest.main()
