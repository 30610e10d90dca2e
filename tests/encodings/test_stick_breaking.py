"""Tests for pejax.encodings.stick_breaking: goldens from the reference implementation (outputs and
gradients), the weights written out, blockwise == dense, masks and slots, failures."""

from __future__ import annotations

import json
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.stick_breaking import stick_breaking_attention
from pejax.encodings.stick_breaking import stick_breaking_log_weights

_GOLDENS = json.loads((pathlib.Path(__file__).parent /
                       "stick_breaking_goldens.json").read_text())["cases"]


# Jitted once for the file (issue 44): an eager call compiles each primitive on its own (~60
# programs a call); test_runs_op_by_op_outside_jit keeps one eager case.
_attention = jax.jit(stick_breaking_attention,
                     static_argnames=("attend_current", "remainder", "block_size"))


def _to_pejax(x):  # The reference's [B, H, L, D] -> [B, L, H, D].
  return np.swapaxes(np.asarray(x, np.float32), 1, 2)


def _inputs(seed=0, batch=2, length=10, heads=4, kv_heads=2, dim=8, value_dim=5):
  rng = np.random.default_rng(seed)
  q = (0.6 * rng.normal(size=(batch, length, heads, dim)) + 0.3).astype(np.float32)
  k = (0.6 * rng.normal(size=(batch, length, kv_heads, dim)) - 0.3).astype(np.float32)
  v = rng.normal(size=(batch, length, kv_heads, value_dim)).astype(np.float32)
  return q, k, v


def _written_out(q, k, v, *, attend_current, remainder):
  """A_ij = sigmoid(z_ij) prod_{j < l < i} (1 - sigmoid(z_il)) with explicit loops (float64)."""
  batch, length, heads, dim = q.shape
  group = heads // k.shape[2]
  out = np.zeros((batch, length, heads, v.shape[-1]))
  sig = lambda x: 1.0 / (1.0 + np.exp(-x))
  for b in range(batch):
    for h in range(heads):
      kk, vv = k[b, :, h // group].astype(np.float64), v[b, :, h // group].astype(np.float64)
      for i in range(length):
        last = i if attend_current else i - 1
        stick, total = 1.0, 0.0
        for j in range(last, -1, -1):
          beta = sig(q[b, i, h] @ kk[j] / np.sqrt(dim))
          out[b, i, h] += stick * beta * vv[j]
          total += stick * beta
          stick *= 1.0 - beta
        if remainder == "value":
          out[b, i, h] += (1.0 - total) * vv[i]
  return out


class StickBreakingGoldenTest(chex.TestCase):
  """Pinned to shawntan/stickbreaking-attention's sb_ref (commit 3147a38, torch 2.13.0)."""

  @parameterized.product(name=tuple(_GOLDENS), block_size=(None, 3))
  def test_output_and_gradients_match_the_reference(self, name, block_size):
    case = _GOLDENS[name]
    q, k, v = (_to_pejax(case[key]) for key in ("q", "k", "v"))
    cotangent = _to_pejax(case["cotangent"])
    run = lambda q, k, v: _attention(q, k, v, attend_current=case["attend_current"],
                                     block_size=block_size)
    chex.assert_trees_all_close(run(q, k, v), _to_pejax(case["out"]), rtol=1e-5, atol=1e-5)
    grads = jax.jit(jax.grad(lambda *a: jnp.sum(run(*a) * cotangent), argnums=(0, 1, 2)))(
        q, k, v)
    for got, key in zip(grads, ("dq", "dk", "dv")):
      chex.assert_trees_all_close(got, _to_pejax(case[key]), rtol=1e-5, atol=1e-5,
                                  custom_message=key)

  def test_runs_op_by_op_outside_jit(self):
    name = next(iter(_GOLDENS))
    case = _GOLDENS[name]
    q, k, v = (_to_pejax(case[key]) for key in ("q", "k", "v"))
    got = stick_breaking_attention(q, k, v, attend_current=case["attend_current"], block_size=3)
    chex.assert_trees_all_close(got, _to_pejax(case["out"]), rtol=1e-5, atol=1e-5)


class StickBreakingPropertyTest(parameterized.TestCase):

  @parameterized.product(attend_current=(False, True), remainder=("value", "none"),
                         block_size=(None, 1, 4, 64))
  def test_equals_the_weights_written_out(self, attend_current, remainder, block_size):
    q, k, v = _inputs()
    got = _attention(q, k, v, attend_current=attend_current, remainder=remainder,
                                   block_size=block_size)
    np.testing.assert_allclose(got, _written_out(q, k, v, attend_current=attend_current,
                                                 remainder=remainder), rtol=1e-5, atol=1e-5)

  def test_weights_are_a_broken_stick(self):
    logits = jnp.asarray(np.random.default_rng(1).normal(size=(3, 6, 6)) * 3.0, jnp.float32)
    mask = jnp.tril(jnp.ones((6, 6), bool), -1)
    weights = np.exp(np.asarray(jax.jit(stick_breaking_log_weights)(logits, mask)))
    self.assertTrue(np.all(weights >= 0.0))
    self.assertTrue(np.all(weights.sum(-1) <= 1.0 + 1e-6))
    np.testing.assert_array_equal(weights[:, ~np.asarray(mask)], 0.0)
    # The nearest key takes its share of a whole stick.
    beta = 1.0 / (1.0 + np.exp(-np.asarray(logits)))
    for i in range(1, 6):
      np.testing.assert_allclose(weights[:, i, i - 1], beta[:, i, i - 1], rtol=1e-6)

  def test_packed_documents_are_independent_in_both_schedules(self):
    q, k, v = _inputs(seed=2)
    segments = np.array([[1] * 4 + [2] * 6, [5] * 10], np.int32)
    for block_size in (None, 3):
      packed = _attention(q, k, v, segment_ids=segments, block_size=block_size)
      alone = _attention(q[:1, 4:], k[:1, 4:], v[:1, 4:], block_size=block_size)
      np.testing.assert_allclose(packed[:1, 4:], alone, rtol=1e-5, atol=1e-5)

  def test_masked_rows_at_slots_equal_the_full_sequence(self):
    q, k, v = _inputs(seed=3)
    full = _attention(q, k, v)
    slots = jnp.arange(6, 10)
    keys = jnp.arange(12)  # two empty slots after the text: masked, junk values
    k12 = jnp.concatenate([k, 9.0 + jnp.zeros_like(k[:, :2])], axis=1)
    v12 = jnp.concatenate([v, 9.0 + jnp.zeros_like(v[:, :2])], axis=1)
    mask = ((keys[None, :] <= slots[:, None]) & (keys[None, :] < 10))[None, None]
    got = _attention(q[:, 6:], k12, v12, mask=mask, q_slots=slots)
    np.testing.assert_allclose(got, full[:, 6:], rtol=1e-5, atol=1e-5)

  def test_bfloat16_in_bfloat16_out(self):
    q, k, v = (jnp.asarray(x, jnp.bfloat16) for x in _inputs(seed=4))
    for block_size in (None, 4):
      got = _attention(q, k, v, block_size=block_size)
      chex.assert_type(got, jnp.bfloat16)
      chex.assert_tree_all_finite(got)


class StickBreakingFailureTest(parameterized.TestCase):

  def test_remainder(self):
    q, k, v = _inputs()
    with self.assertRaisesRegex(ValueError, "remainder must be one of"):
      stick_breaking_attention(q, k, v, remainder="key")

  def test_attend_current(self):
    q, k, v = _inputs()
    with self.assertRaisesRegex(ValueError, "attend_current must be a bool, got 1"):
      stick_breaking_attention(q, k, v, attend_current=1)

  def test_shapes(self):
    q, k, v = _inputs()
    with self.assertRaisesRegex(ValueError, "do not agree"):
      stick_breaking_attention(q, k, v[:, :4])
    with self.assertRaisesRegex(ValueError, r"q must have shape \[B, L, heads, dim\]"):
      stick_breaking_attention(q[0], k, v)
    with self.assertRaisesRegex(ValueError, r"q's heads \(3\)"):
      stick_breaking_attention(q[:, :, :3], k, v)

  def test_blockwise_needs_a_full_sequence(self):
    q, k, v = _inputs()
    mask = jnp.ones((1, 1, 10, 10), bool)
    with self.assertRaisesRegex(ValueError, "block_size .* needs a full sequence"):
      stick_breaking_attention(q, k, v, mask=mask, block_size=4)
    with self.assertRaisesRegex(ValueError, "queries must be the keys"):
      stick_breaking_attention(q[:, :3], k, v)

  def test_mask_and_slots(self):
    q, k, v = _inputs()
    with self.assertRaisesRegex(ValueError, "mask must be a bool"):
      stick_breaking_attention(q, k, v, mask=jnp.ones((1, 1, 10, 10)))
    with self.assertRaisesRegex(ValueError, r"q_slots must have shape \(10,\)"):
      stick_breaking_attention(q, k, v, mask=jnp.ones((1, 1, 10, 10), bool),
                               q_slots=jnp.arange(3))
    with self.assertRaisesRegex(ValueError, "q_slots needs a mask"):
      stick_breaking_attention(q, k, v, q_slots=jnp.arange(10))

  @parameterized.parameters(0, -2, 2.5)
  def test_block_size(self, value):
    q, k, v = _inputs()
    with self.assertRaisesRegex(ValueError, "block_size"):
      stick_breaking_attention(q, k, v, block_size=value)


if __name__ == "__main__":
  absltest.main()
