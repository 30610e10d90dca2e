"""Tests of pejax/train/optimizer.py: schedule values, decay mask, clipping, failure modes."""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import pytest

from pejax.train import optimizer as optimizer_lib


def _optim_config(**overrides) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict(dict(
      learning_rate=0.5, warmup_steps=0, min_lr_ratio=0.1, weight_decay=0.1, b1=0.9, b2=0.98,
      clip_norm=1.0))
  config.update(overrides)
  return config


class _TwoLayer(nnx.Module):
  """Kernel [3, 4] + bias [4] + LayerNorm scale/bias [4]: both ranks of parameters."""

  def __init__(self, *, rngs: nnx.Rngs):
    self.linear = nnx.Linear(3, 4, rngs=rngs)
    self.norm = nnx.LayerNorm(4, rngs=rngs)


class WarmupCosineScheduleTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      ("start", 0, 0.0),
      ("mid_warmup", 2, 1.0),
      ("peak", 4, 2.0),
      ("cosine_midpoint", 8, 0.2 + 1.8 * 0.5),
      ("cosine_quarter", 6, 0.2 + 1.8 * (1 + math.cos(math.pi / 4)) / 2),
      ("end", 12, 0.2),
      ("after_end", 20, 0.2),
  )
  def test_key_steps(self, step, expected):
    schedule = optimizer_lib.warmup_cosine_schedule(
        learning_rate=2.0, total_steps=12, warmup_steps=4, min_lr_ratio=0.1)
    value = self.variant(schedule)(jnp.asarray(step, jnp.int32))
    np.testing.assert_allclose(float(value), expected, rtol=1e-6, atol=1e-7)

  def test_no_warmup_starts_at_peak(self):
    schedule = optimizer_lib.warmup_cosine_schedule(
        learning_rate=3e-3, total_steps=10, warmup_steps=0, min_lr_ratio=0.0)
    np.testing.assert_allclose(float(schedule(0)), 3e-3, rtol=1e-6)
    np.testing.assert_allclose(float(schedule(10)), 0.0, atol=1e-9)

  @parameterized.named_parameters(("longer", 10), ("equal", 5))
  def test_run_ending_in_warmup(self, warmup_steps):
    schedule = optimizer_lib.warmup_cosine_schedule(
        learning_rate=2.0, total_steps=5, warmup_steps=warmup_steps, min_lr_ratio=0.1)
    np.testing.assert_allclose(
        [float(schedule(t)) for t in range(6)],
        [2.0 * t / warmup_steps for t in range(6)], rtol=1e-6)

  def test_monotonic_up_then_down(self):
    schedule = optimizer_lib.warmup_cosine_schedule(
        learning_rate=1.0, total_steps=50, warmup_steps=10, min_lr_ratio=0.2)
    values = np.array([float(schedule(t)) for t in range(51)])
    self.assertTrue(np.all(np.diff(values[:11]) > 0))
    self.assertTrue(np.all(np.diff(values[10:]) < 0))
    self.assertGreaterEqual(values.min(), 0.0)
    self.assertAlmostEqual(values.max(), 1.0, places=6)

  def test_from_config(self):
    schedule = optimizer_lib.schedule_from_config(
        _optim_config(learning_rate=1.0, warmup_steps=2, min_lr_ratio=0.5), total_steps=6)
    np.testing.assert_allclose(
        [float(schedule(t)) for t in (0, 1, 2, 4, 6)], [0.0, 0.5, 1.0, 0.75, 0.5], rtol=1e-6)

  @parameterized.named_parameters(
      ("zero_lr", dict(learning_rate=0.0), "learning_rate"),
      ("inf_lr", dict(learning_rate=float("inf")), "learning_rate"),
      ("zero_total", dict(total_steps=0), "total_steps"),
      ("negative_warmup", dict(warmup_steps=-1), "warmup_steps"),
      ("ratio_above_one", dict(min_lr_ratio=1.5), "min_lr_ratio"),
      ("ratio_negative", dict(min_lr_ratio=-0.1), "min_lr_ratio"),
  )
  def test_bad_arguments(self, overrides, name):
    kwargs = dict(learning_rate=1.0, total_steps=10, warmup_steps=2, min_lr_ratio=0.1)
    kwargs.update(overrides)
    with self.assertRaisesRegex(ValueError, name):
      optimizer_lib.warmup_cosine_schedule(**kwargs)


class WeightDecayMaskTest(parameterized.TestCase):

  def test_mask_selects_matrices_only(self):
    params = nnx.state(_TwoLayer(rngs=nnx.Rngs(0)), nnx.Param)
    mask = nnx.to_pure_dict(optimizer_lib.weight_decay_mask(nnx.as_pure(params)))
    self.assertEqual(mask, {
        "linear": {"kernel": True, "bias": False},
        "norm": {"scale": False, "bias": False},
    })

  @pytest.mark.slow
  def test_zero_gradient_update_decays_only_matrices(self):
    # With zero gradients Adam's update is exactly 0, so only decoupled decay moves parameters:
    # p <- p - lr * wd * p for rank >= 2, unchanged otherwise.
    model = _TwoLayer(rngs=nnx.Rngs(0))
    model.linear.bias[...] = jnp.full((4,), 0.5)
    model.norm.scale[...] = jnp.full((4,), 2.0)
    before = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    optimizer = optimizer_lib.create_optimizer(
        model, _optim_config(learning_rate=0.5, weight_decay=0.1), total_steps=10)
    grads = jax.tree.map(jnp.zeros_like, nnx.state(model, nnx.Param))
    optimizer.update(model, grads)
    after = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    chex.assert_trees_all_close(
        after["linear"]["kernel"], before["linear"]["kernel"] * (1 - 0.5 * 0.1), rtol=1e-6)
    for path in (("linear", "bias"), ("norm", "scale"), ("norm", "bias")):
      np.testing.assert_array_equal(after[path[0]][path[1]], before[path[0]][path[1]])
    self.assertEqual(int(optimizer.step[...]), 1)


class AdamWFromConfigTest(parameterized.TestCase):

  def _two_updates(self, clip_norm: float) -> np.ndarray:
    # A huge first gradient then a small one: clipping bounds the first gradient's share of the
    # second moment, so the second update differs with clipping and matches without it.
    tx = optimizer_lib.adamw_from_config(
        _optim_config(clip_norm=clip_norm, weight_decay=0.0), total_steps=10)
    params = {"w": jnp.ones((2, 2))}
    state = tx.init(params)
    _, state = tx.update({"w": jnp.full((2, 2), 1000.0)}, state, params)
    updates, _ = tx.update({"w": jnp.full((2, 2), 0.01)}, state, params)
    return np.asarray(updates["w"])

  @pytest.mark.slow
  def test_clipping_acts_above_threshold_only(self):
    unclipped = self._two_updates(0.0)
    np.testing.assert_allclose(self._two_updates(1e9), unclipped, rtol=1e-6)
    self.assertFalse(np.allclose(self._two_updates(1.0), unclipped, rtol=1e-3))

  def test_state_structure_does_not_depend_on_clipping(self):
    params = {"w": jnp.ones((2, 2))}
    with_clip = optimizer_lib.adamw_from_config(_optim_config(clip_norm=1.0), total_steps=10)
    without = optimizer_lib.adamw_from_config(_optim_config(clip_norm=0.0), total_steps=10)
    self.assertEqual(
        jax.tree.structure(with_clip.init(params)), jax.tree.structure(without.init(params)))

  @parameterized.named_parameters(
      ("negative_decay", dict(weight_decay=-0.1), "weight_decay"),
      ("b1_one", dict(b1=1.0), "b1"),
      ("b2_negative", dict(b2=-0.5), "b2"),
      ("negative_clip", dict(clip_norm=-1.0), "clip_norm"),
      ("nan_clip", dict(clip_norm=float("nan")), "clip_norm"),
  )
  def test_bad_config(self, overrides, name):
    with self.assertRaisesRegex(ValueError, name):
      optimizer_lib.adamw_from_config(_optim_config(**overrides), total_steps=10)


if __name__ == "__main__":
  absltest.main()
