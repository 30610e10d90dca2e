"""Tests for pejax.encodings.cope: x-transformers goldens, the paper's formula, the clamp,
failures."""

from __future__ import annotations

import json
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.cope import cope_bias
from pejax.encodings.cope import cope_positions

_GOLDENS = json.loads(
    (pathlib.Path(__file__).parent / "xtransformers_goldens.json").read_text())["cope"]

_MASKED = -1e30  # pejax's mask value (x-transformers uses -finfo(float32).max).


def _blhd(values) -> np.ndarray:
  """x-transformers' [B, H, L, D] to pejax's [B, L, H, D]."""
  return np.asarray(values, np.float32).transpose(0, 2, 1, 3)


def _causal_logits(q, k):
  length, dim = q.shape[1], q.shape[-1]
  logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(dim)
  return np.where(np.tril(np.ones((length, length), bool)), logits, _MASKED).astype(np.float32)


def _reference(logits, q, pos_emb):
  """The paper's formula, loop by loop in float64."""
  logits, q, pos_emb = (np.asarray(a, np.float64) for a in (logits, q, pos_emb))
  batch, heads, lq, lk = logits.shape
  max_pos = pos_emb.shape[0]
  out = np.zeros(logits.shape)
  gates = 1.0 / (1.0 + np.exp(-np.maximum(logits, -700.0)))
  for b in range(batch):
    for h in range(heads):
      for i in range(lq):
        for j in range(lk):
          p = min(gates[b, h, i, j:].sum(), max_pos - 1)
          lo, hi = int(np.floor(p)), int(np.ceil(p))
          e = (p - lo) * pos_emb[hi] + (1 - p + lo) * pos_emb[lo]
          out[b, h, i, j] = q[b, i, h] @ e
  return out


class CopeGoldenTest(chex.TestCase):
  """Pinned to x-transformers' CoPE (Golovneva et al. 2024, Appendix B)."""

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(*[(name, name) for name in _GOLDENS])
  def test_matches_x_transformers(self, name):
    case = _GOLDENS[name]
    q, k = _blhd(case["q"]), _blhd(case["k"])
    got = self.variant(cope_bias)(_causal_logits(q, k), q, np.asarray(case["pos_emb"],
                                                                       np.float32))
    chex.assert_trees_all_close(got, np.asarray(case["bias"], np.float32), rtol=1e-5, atol=1e-5)

  def test_positions_golden(self):
    # Gates of 1 (logit +30) count every visible key: p_ij = i - j + 1, clamped to P - 1 = 3.
    causal = np.tril(np.ones((5, 5), bool))
    logits = np.where(causal, 30.0, _MASKED).astype(np.float32)
    got = np.asarray(cope_positions(logits, max_pos=4))
    expected = np.minimum(np.arange(5)[:, None] - np.arange(5)[None, :] + 1, 3) * causal
    np.testing.assert_allclose(got, expected, atol=1e-6)
    # Gates of 1/2 (logit 0) count half: p_ij = (i - j + 1) / 2.
    half = np.asarray(cope_positions(np.where(causal, 0.0, _MASKED).astype(np.float32),
                                     max_pos=100))
    np.testing.assert_allclose(half, (np.arange(5)[:, None] - np.arange(5)[None, :] + 1) / 2 *
                               causal, atol=1e-6)


class CopePropertyTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    self.q = np.asarray(2.0 * jax.random.normal(keys[0], (2, 7, 3, 4)))
    self.k = np.asarray(jax.random.normal(keys[1], (2, 7, 3, 4)))
    self.pos_emb = np.asarray(jax.random.normal(keys[2], (5, 4)))
    self.logits = _causal_logits(self.q, self.k)

  def test_matches_the_paper_formula(self):
    got = cope_bias(self.logits, self.q, self.pos_emb)
    np.testing.assert_allclose(got, _reference(self.logits, self.q, self.pos_emb), rtol=1e-5,
                               atol=1e-5)

  def test_positions_are_clamped_to_max_pos_minus_one(self):
    positions = np.asarray(cope_positions(self.logits, max_pos=3))
    self.assertLessEqual(positions.max(), 2.0)
    self.assertGreaterEqual(positions.min(), 0.0)
    # With one embedding every (clamped) position reads e[0]: bias = q . e[0].
    one = cope_bias(self.logits, self.q, self.pos_emb[:1])
    expected = np.einsum("bqhd,d->bhq", self.q, self.pos_emb[0])[..., None]
    np.testing.assert_allclose(one, np.broadcast_to(expected, one.shape), rtol=1e-5, atol=1e-5)

  def test_masked_keys_are_not_counted(self):
    # Causal: the visible part of the first 4 rows is that of the 4-token prefix, so the keys
    # behind the mask (columns 4..6) add nothing to the positions; -inf masks as -1e30 does.
    full = np.asarray(cope_bias(self.logits, self.q, self.pos_emb))
    prefix_logits = _causal_logits(self.q[:, :4], self.k[:, :4])
    prefix = np.asarray(cope_bias(prefix_logits, self.q[:, :4], self.pos_emb))
    lower = np.tril(np.ones((4, 4), bool))
    np.testing.assert_allclose(full[:, :, :4, :4][..., lower], prefix[..., lower], rtol=1e-6,
                               atol=1e-6)
    inf_masked = np.where(self.logits == _MASKED, -np.inf, self.logits).astype(np.float32)
    np.testing.assert_array_equal(cope_bias(inf_masked, self.q, self.pos_emb), full)

  def test_gradients_are_finite_and_reach_every_input(self):
    def loss(logits, q, pos_emb):
      return jnp.sum(jnp.tanh(cope_bias(logits, q, pos_emb)))

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(self.logits, self.q, self.pos_emb)
    chex.assert_tree_all_finite(grads)
    for g in grads:
      self.assertGreater(float(jnp.abs(g).max()), 0.0)

  def test_hand_written_gradient_equals_autodiff_of_the_formula(self):
    """The custom VJP against autodiff of the gather formula (take_along_axis), with logits
    that put positions on integers (gates 0 or 1), on the clamp P - 1 and in between."""

    def reference(logits, q, pos_emb):
      positions = cope_positions(logits, max_pos=pos_emb.shape[0])
      z = jnp.einsum("bqhd,pd->bhqp", q, pos_emb, precision=jax.lax.Precision.HIGHEST)
      z = jnp.broadcast_to(z, logits.shape[:3] + (pos_emb.shape[0],))
      floor = jnp.floor(positions)
      w = positions - floor
      lo = jnp.take_along_axis(z, floor.astype(jnp.int32), axis=-1)
      hi = jnp.take_along_axis(z, jnp.ceil(positions).astype(jnp.int32), axis=-1)
      return hi * w + lo * (1.0 - w)

    rng = np.random.default_rng(3)
    b, h, l, d, p = 2, 3, 9, 4, 4
    logits = rng.normal(size=(b, h, l, l)).astype(np.float32) * 2
    # Gates of exactly 1 and 0 (sigmoid saturates): integer positions, and (row 8, many 1s) the
    # clamp at P - 1 = 3.
    logits[:, :, 2] = 40.0
    logits[:, :, 5, ::2] = -40.0
    logits[:, :, 8] = 40.0
    logits = np.where(np.tril(np.ones((l, l), bool)), logits, _MASKED).astype(np.float32)
    q = rng.normal(size=(b, l, h, d)).astype(np.float32)
    pos_emb = rng.normal(size=(p, d)).astype(np.float32)
    positions = np.asarray(cope_positions(logits, max_pos=p))
    self.assertTrue(np.any(positions == p - 1) and np.any(positions == 1.0)
                    and np.any(positions % 1 != 0))
    weights = rng.normal(size=logits.shape).astype(np.float32)
    for q_in in (q, q[:1]):  # Also a query batch of 1 broadcast over the logits' batch.
      # Jitted: one program each, not one per primitive (issue 44).
      np.testing.assert_allclose(jax.jit(cope_bias)(logits, q_in, pos_emb),
                                 jax.jit(reference)(logits, q_in, pos_emb), rtol=1e-6, atol=1e-6)
      got = jax.jit(jax.grad(lambda *a: jnp.sum(weights * cope_bias(*a)), argnums=(0, 1, 2)))(
          logits, q_in, pos_emb)
      want = jax.jit(jax.grad(lambda *a: jnp.sum(weights * reference(*a)), argnums=(0, 1, 2)))(
          logits, q_in, pos_emb)
      for name, g, w in zip(("logits", "q", "pos_emb"), got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)

  def test_query_batch_broadcasts(self):
    got = cope_bias(self.logits, self.q[:1], self.pos_emb)
    tiled = cope_bias(self.logits, np.broadcast_to(self.q[:1], self.q.shape), self.pos_emb)
    np.testing.assert_array_equal(got, tiled)


class CopeFailureTest(absltest.TestCase):

  def test_bad_inputs_name_the_argument(self):
    logits = np.zeros((1, 2, 3, 3), np.float32)
    q = np.zeros((1, 3, 2, 4), np.float32)
    pos_emb = np.zeros((5, 4), np.float32)
    with self.assertRaisesRegex(ValueError, r"pos_emb must have shape \[P, D\] with D = 4"):
      cope_bias(logits, q, pos_emb[:, :3])
    with self.assertRaisesRegex(ValueError, "logits must have shape"):
      cope_bias(logits[0], q, pos_emb)
    with self.assertRaisesRegex(ValueError, "does not match logits"):
      cope_bias(logits, q[:, :2], pos_emb)
    with self.assertRaisesRegex(ValueError, "max_pos must be a positive integer, got 0"):
      cope_positions(logits, max_pos=0)
    with self.assertRaisesRegex(ValueError, "logits must be a float"):
      cope_positions(logits.astype(np.int32), max_pos=4)


if __name__ == "__main__":
  absltest.main()
