"""Tests of pejax/train/train_step.py: masked loss, the donated train step, the eval step."""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import pytest

from pejax.train import optimizer as optimizer_lib
from pejax.train import train_step as train_step_lib

VOCAB = 16
DIM = 8


class TinyLM(nnx.Module):
  """Stand-in decoder: embedding + dense, with the decoder call signature."""

  def __init__(self, *, vocab_size: int = VOCAB, d_model: int = DIM, rngs: nnx.Rngs):
    self.embed = nnx.Embed(vocab_size, d_model, rngs=rngs)
    self.out = nnx.Linear(d_model, vocab_size, rngs=rngs)

  def __call__(self, tokens, *, positions, segment_ids=None):
    del segment_ids
    hidden = self.embed(tokens) + 0.01 * positions[..., None].astype(jnp.float32)
    return self.out(hidden)


def _batch(seed: int = 0, batch_size: int = 2, length: int = 6) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, VOCAB, (batch_size, length + 1), dtype=np.int32)
  return {
      "inputs": tokens[:, :-1],
      "targets": tokens[:, 1:],
      "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (batch_size, length)).copy(),
      "loss_mask": np.ones((batch_size, length), np.float32),
  }


def _optim_config() -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      learning_rate=1e-2, warmup_steps=2, min_lr_ratio=0.1, weight_decay=0.1, b1=0.9, b2=0.98,
      clip_norm=1.0))


class MaskedLossTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_uniform_logits_golden(self):
    # Uniform logits over V classes: each scored token costs log(V).
    logits = jnp.zeros((1, 4, 4))
    targets = jnp.array([[0, 1, 2, 3]], jnp.int32)
    mask = jnp.array([[1.0, 1.0, 0.0, 1.0]])
    nll_sum, tokens = self.variant(train_step_lib.masked_nll)(logits, targets, mask)
    np.testing.assert_allclose(float(nll_sum), 3 * math.log(4), rtol=1e-6)
    np.testing.assert_allclose(float(tokens), 3.0)
    chex.assert_type([nll_sum, tokens], jnp.float32)

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.slow
  def test_mean_matches_optax_reference(self):
    logits = jax.random.normal(jax.random.key(0), (3, 5, 7))
    targets = jax.random.randint(jax.random.key(1), (3, 5), 0, 7)
    mask = (jax.random.uniform(jax.random.key(2), (3, 5)) > 0.4).astype(jnp.float32)
    loss, tokens = self.variant(train_step_lib.masked_mean_loss)(logits, targets, mask)
    per_token = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    expected = jnp.sum(per_token * mask) / jnp.sum(mask)
    np.testing.assert_allclose(float(loss), float(expected), rtol=1e-6)
    np.testing.assert_allclose(float(tokens), float(jnp.sum(mask)))

  @chex.variants(with_jit=True, without_jit=True)
  def test_unscored_positions_do_not_matter(self):
    logits = jax.random.normal(jax.random.key(0), (1, 4, 5))
    targets = jnp.array([[1, 2, 3, 4]], jnp.int32)
    mask = jnp.array([[1.0, 1.0, 0.0, 0.0]])
    base, _ = self.variant(train_step_lib.masked_mean_loss)(logits, targets, mask)
    other_logits = logits.at[:, 2:].set(100.0)
    padded_targets = targets.at[:, 2:].set(-1)  # Out-of-range padding ids are fine where unscored.
    changed, _ = self.variant(train_step_lib.masked_mean_loss)(
        other_logits, padded_targets, mask)
    np.testing.assert_allclose(float(changed), float(base), rtol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("too_large", 5), ("negative", -1))
  def test_out_of_range_scored_target_poisons_loss(self, bad_id):
    logits = jnp.zeros((1, 2, 5))
    targets = jnp.array([[1, bad_id]], jnp.int32)
    loss, _ = self.variant(train_step_lib.masked_mean_loss)(logits, targets, jnp.ones((1, 2)))
    self.assertTrue(math.isnan(float(loss)))

  @chex.variants(with_jit=True, without_jit=True)
  def test_empty_mask_gives_zero_loss_and_finite_grad(self):
    logits = jax.random.normal(jax.random.key(0), (1, 3, 4))
    targets = jnp.zeros((1, 3), jnp.int32)

    def loss_fn(logits):
      return train_step_lib.masked_mean_loss(logits, targets, jnp.zeros((1, 3)))[0]

    loss, grad = self.variant(jax.value_and_grad(loss_fn))(logits)
    self.assertEqual(float(loss), 0.0)
    chex.assert_tree_all_finite(grad)

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.slow
  def test_bfloat16_logits_give_float32_loss(self):
    logits = jax.random.normal(jax.random.key(0), (2, 3, 6))
    targets = jax.random.randint(jax.random.key(1), (2, 3), 0, 6)
    mask = jnp.ones((2, 3))
    loss_bf16, _ = self.variant(train_step_lib.masked_mean_loss)(
        logits.astype(jnp.bfloat16), targets, mask)
    loss_f32, _ = self.variant(train_step_lib.masked_mean_loss)(
        logits.astype(jnp.bfloat16).astype(jnp.float32), targets, mask)
    chex.assert_type(loss_bf16, jnp.float32)
    np.testing.assert_allclose(float(loss_bf16), float(loss_f32), rtol=1e-6)


class ModelInputsTest(parameterized.TestCase):

  def test_keeps_known_keys_only(self):
    batch = {**_batch(), "segment_ids": np.zeros((2, 6), np.int32), "text": "ignored"}
    self.assertEqual(
        sorted(train_step_lib.model_inputs(batch)),
        ["inputs", "loss_mask", "positions", "segment_ids", "targets"])

  def test_missing_key(self):
    batch = _batch()
    del batch["loss_mask"]
    with self.assertRaisesRegex(ValueError, "loss_mask"):
      train_step_lib.model_inputs(batch)

  def test_shape_mismatch(self):
    batch = _batch()
    batch["targets"] = batch["targets"][:, :-1]
    with self.assertRaisesRegex(ValueError, "targets"):
      train_step_lib.model_inputs(batch)


  def test_positions_shared_by_every_row_travel_as_one_row(self):
    batch = _batch()
    shared = train_step_lib.model_inputs(batch)["positions"]
    np.testing.assert_array_equal(shared, batch["positions"][:1])
    per_row = batch["positions"].copy()
    per_row[1] += 1  # Rows differ (packed or offset rows): kept per row.
    got = train_step_lib.model_inputs({**batch, "positions": per_row})["positions"]
    np.testing.assert_array_equal(got, per_row)
    one_row = train_step_lib.model_inputs({**batch, "positions": batch["positions"][:1]})
    self.assertEqual(one_row["positions"].shape, (1, 6))
    with self.assertRaisesRegex(ValueError, r"positions.*\[1, L\]"):
      train_step_lib.model_inputs({**batch, "positions": batch["positions"][:1, :-1]})

class TrainStepTest(parameterized.TestCase):

  def _setup(self):
    model = TinyLM(rngs=nnx.Rngs(0))
    optimizer = optimizer_lib.create_optimizer(model, _optim_config(), total_steps=10)
    return model, optimizer

  @pytest.mark.slow
  def test_metrics_and_learning_rate(self):
    model, optimizer = self._setup()
    schedule = optimizer_lib.schedule_from_config(_optim_config(), total_steps=10)
    step_fn = train_step_lib.make_train_step(learning_rate_fn=schedule)
    batch = train_step_lib.model_inputs(_batch())
    expected_loss = float(train_step_lib.masked_mean_loss(
        model(batch["inputs"], positions=batch["positions"]), batch["targets"],
        batch["loss_mask"])[0])
    grads = nnx.grad(lambda m: train_step_lib.masked_mean_loss(
        m(batch["inputs"], positions=batch["positions"]), batch["targets"],
        batch["loss_mask"])[0])(model)
    expected_norm = float(optax.tree.norm(grads))
    learning_rates = []
    for step in range(3):
      metrics = step_fn(model, optimizer, batch)
      if step == 0:
        np.testing.assert_allclose(float(metrics["loss"]), expected_loss, rtol=1e-5)
        np.testing.assert_allclose(float(metrics["grad_norm"]), expected_norm, rtol=1e-5)
        self.assertEqual(float(metrics["tokens"]), 12.0)
      learning_rates.append(float(metrics["learning_rate"]))
    # The learning rate of update t is schedule(t): 0, lr/2, lr with warmup_steps=2.
    np.testing.assert_allclose(learning_rates, [0.0, 5e-3, 1e-2], rtol=1e-6)
    self.assertEqual(int(optimizer.step[...]), 3)

  def test_loss_decreases_on_fixed_batch(self):
    model, optimizer = self._setup()
    step_fn = train_step_lib.make_train_step()
    batch = train_step_lib.model_inputs(_batch())
    losses = [float(step_fn(model, optimizer, batch)["loss"]) for _ in range(10)]
    self.assertLess(losses[-1], losses[1])

  @parameterized.named_parameters(("donated", True), ("kept", False))
  def test_donation(self, donate):
    model, optimizer = self._setup()
    step_fn = train_step_lib.make_train_step(donate=donate)
    batch = train_step_lib.model_inputs(_batch())
    step_fn(model, optimizer, batch)  # Compile and leave the initial buffers behind.
    old_kernel = model.out.kernel[...]
    old_step = optimizer.step[...]
    step_fn(model, optimizer, batch)
    self.assertEqual(old_kernel.is_deleted(), donate)
    self.assertEqual(old_step.is_deleted(), donate)
    self.assertFalse(model.out.kernel[...].is_deleted())
    self.assertEqual(int(optimizer.step[...]), 2)

  def test_bound_step_updates_the_originals_bit_identically(self):
    # Two copies of the same start; one trained through bind_train_step, one called directly.
    direct_model, direct_opt = self._setup()
    bound_model, bound_opt = self._setup()
    direct = train_step_lib.make_train_step()
    bound = train_step_lib.bind_train_step(train_step_lib.make_train_step(), bound_model,
                                           bound_opt)
    for seed in range(4):
      batch = train_step_lib.model_inputs(_batch(seed))
      direct_metrics = direct(direct_model, direct_opt, batch)
      bound_metrics = bound(batch)
      chex.assert_trees_all_equal(jax.device_get(bound_metrics), jax.device_get(direct_metrics))
    # The objects the caller holds carry the updates (shared Variables, not copies).
    chex.assert_trees_all_equal(nnx.state(bound_model), nnx.state(direct_model))
    self.assertEqual(int(bound_opt.step[...]), 4)
    # Values set from outside between bound calls are what the next call reads.
    nnx.update(bound_model, jax.tree.map(jnp.copy, nnx.state(direct_model)))  # Own buffers.
    bound_model.out.bias[...] = bound_model.out.bias[...] + 1.0
    direct_model.out.bias[...] = direct_model.out.bias[...] + 1.0
    batch = train_step_lib.model_inputs(_batch(9))
    chex.assert_trees_all_equal(jax.device_get(bound(batch)),
                                jax.device_get(direct(direct_model, direct_opt, batch)))

  def test_runs_under_strict_rank_promotion(self):
    model, optimizer = self._setup()
    with jax.numpy_rank_promotion("raise"):
      metrics = train_step_lib.make_train_step()(
          model, optimizer, train_step_lib.model_inputs(_batch()))
    chex.assert_tree_all_finite(metrics)


class EvalStepTest(parameterized.TestCase):

  def test_eval_matches_loss_and_leaves_params(self):
    model = TinyLM(rngs=nnx.Rngs(1))
    before = jax.tree.map(np.asarray, nnx.to_pure_dict(nnx.state(model)))
    batch = train_step_lib.model_inputs(_batch(3))
    out = train_step_lib.eval_step(model, batch)
    loss, tokens = train_step_lib.masked_mean_loss(
        model(batch["inputs"], positions=batch["positions"]), batch["targets"],
        batch["loss_mask"])
    np.testing.assert_allclose(float(out["nll_sum"] / out["tokens"]), float(loss), rtol=1e-6)
    self.assertEqual(float(out["tokens"]), float(tokens))
    chex.assert_trees_all_equal(before, jax.tree.map(np.asarray, nnx.to_pure_dict(
        nnx.state(model))))

  def test_evaluate_batches_is_token_weighted(self):
    model = TinyLM(rngs=nnx.Rngs(2))
    whole = _batch(4, batch_size=4)
    whole["loss_mask"][0, 3:] = 0.0
    halves = [{k: v[:2] for k, v in whole.items()}, {k: v[2:] for k, v in whole.items()}]
    result_whole = train_step_lib.evaluate_batches(model, [whole])
    result_halves = train_step_lib.evaluate_batches(model, halves)
    np.testing.assert_allclose(result_halves["loss"], result_whole["loss"], rtol=1e-6)
    self.assertEqual(result_whole["tokens"], 21.0)
    np.testing.assert_allclose(
        result_whole["perplexity"], math.exp(result_whole["loss"]), rtol=1e-12)

  def test_evaluate_batches_without_tokens(self):
    model = TinyLM(rngs=nnx.Rngs(2))
    batch = _batch()
    batch["loss_mask"][:] = 0.0
    with self.assertRaisesRegex(ValueError, "batches"):
      train_step_lib.evaluate_batches(model, [batch])


if __name__ == "__main__":
  absltest.main()
