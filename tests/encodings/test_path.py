"""Tests for pejax.encodings.path: PaTH goldens from fla's naive reference (outputs and gradients),
the product of transforms computed by brute force, chunk-size invariance, the key-by-key rows
form, properties of the transforms, failures."""

from __future__ import annotations

import functools
import json
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.path import chunk_wy_factor
from pejax.encodings.path import path_logits
from pejax.encodings.path import path_logits_rows

# The property tests call these: compiled once per shape (and chunk size) and shared, where an
# eager call compiles every primitive on its own (issue 44: this file compiled ~1500 programs,
# most of them single ops of eager calls). The golden test keeps an eager call: that is a
# claim (the transform runs without jit), on one case's output.
_logits = jax.jit(path_logits, static_argnames=("chunk_size",))
_wy_factor = jax.jit(chunk_wy_factor)

_GOLDENS = json.loads((pathlib.Path(__file__).parent / "path_goldens.json").read_text())["cases"]


def _inputs(seed=0, batch=2, length=11, heads=4, kv_heads=2, dim=5, beta_low=0.0):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(batch, length, heads, dim)).astype(np.float32)
  k = rng.normal(size=(batch, length, kv_heads, dim)).astype(np.float32)
  w = rng.normal(size=(batch, length, kv_heads, dim))
  w = (w / np.linalg.norm(w, axis=-1, keepdims=True)).astype(np.float32)
  beta = rng.uniform(beta_low, 2.0, size=(batch, length, kv_heads)).astype(np.float32)
  return q, k, w, beta


def _brute_force(q, k, w, beta):
  """q_i^T H_i ... H_{j+1} k_j with explicit D x D products (float64)."""
  batch, length, heads, dim = q.shape
  group = heads // k.shape[2]
  out = np.zeros((batch, heads, length, length))
  for b in range(batch):
    for h in range(heads):
      g = h // group
      for i in range(length):
        product = np.eye(dim)
        for j in range(i, -1, -1):
          out[b, h, i, j] = q[b, i, h] @ product @ k[b, j, g]
          product = product @ (np.eye(dim) - beta[b, j, g] * np.outer(w[b, j, g], w[b, j, g]))
        for j in range(i + 1, length):
          out[b, h, i, j] = q[b, i, h] @ k[b, j, g]
  return out


def _attention(q, k, v, w, beta, *, chunk_size):
  """Causal softmax attention over PaTH logits scaled by 1/sqrt(D) (fla's naive_path_attn)."""
  heads, dim, length = q.shape[2], q.shape[3], q.shape[1]
  logits = path_logits(q, k, w, beta, chunk_size=chunk_size) / np.sqrt(dim)
  logits = jnp.where(jnp.tril(jnp.ones((length, length), bool)), logits, -jnp.inf)
  v = jnp.repeat(v, heads // v.shape[2], axis=2)
  return jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(logits, axis=-1), v)


class PathGoldenTest(chex.TestCase):
  """Pinned to fla-org/flash-linear-attention's naive_path_attn (commit bc3b101, torch 2.13.0)."""

  @chex.variants(with_jit=True)
  @parameterized.named_parameters(*[(name, name) for name in _GOLDENS])
  def test_attention_output_and_gradients_match_fla(self, name):
    case = {key: np.asarray(value, np.float32) for key, value in _GOLDENS[name].items()
            if isinstance(value, list)}
    # pejax's chunks differ from the reference's (3 vs 4 / 8): the numbers must not depend on it.
    forward = functools.partial(_attention, v=case["v"], chunk_size=3)

    def loss(q, k, w, beta):
      return jnp.sum(forward(q, k, w=w, beta=beta) * case["cotangent"])

    out = self.variant(lambda q, k, w, beta: forward(q, k, w=w, beta=beta))(
        case["q"], case["k"], case["w"], case["beta"])
    chex.assert_trees_all_close(out, case["out"], rtol=1e-5, atol=1e-5)
    grads = self.variant(jax.grad(loss, argnums=(0, 1, 2, 3)))(
        case["q"], case["k"], case["w"], case["beta"])
    for got, key in zip(grads, ("dq", "dk", "dw", "dbeta")):
      chex.assert_trees_all_close(got, case[key], rtol=2e-5, atol=2e-5, custom_message=key)


  def test_eager_call_matches_fla(self):
    # The transform also runs op by op (no jit): one case's output, against the same golden.
    case = {key: np.asarray(value, np.float32)
            for key, value in _GOLDENS["one_chunk"].items() if isinstance(value, list)}
    out = _attention(case["q"], case["k"], case["v"], case["w"], case["beta"], chunk_size=3)
    chex.assert_trees_all_close(out, case["out"], rtol=1e-5, atol=1e-5)


class PathPropertyTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  @parameterized.parameters(1, 2, 4, 5, 11, 64)
  def test_chunked_logits_equal_the_explicit_products(self, chunk_size):
    q, k, w, beta = _inputs()
    expected = _brute_force(q, k, w, beta)
    got = _logits(q, k, w, beta, chunk_size=chunk_size)
    chex.assert_shape(got, (2, 4, 11, 11))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

  def test_rows_form_equals_the_explicit_products_for_any_query_slots(self):
    q, k, w, beta = _inputs(seed=1)
    expected = _brute_force(q, k, w, beta)
    rows = np.array([7, 2, 10])
    got = path_logits_rows(q[:, rows], k, w, beta, q_slots=rows)
    np.testing.assert_allclose(got, expected[:, :, rows], rtol=1e-5, atol=1e-5)

  def test_zero_strength_is_plain_attention(self):
    q, k, w, beta = _inputs(seed=2)
    got = _logits(q, k, w, 0.0 * beta, chunk_size=4)
    plain = np.einsum("bihd,bjhd->bhij", q, np.repeat(k, 2, axis=2))
    np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5)

  def test_reflections_preserve_norms(self):
    # beta = 2: every H_t is a reflection (orthogonal), so |A_ij| <= |q_i| |k_j|, and with
    # q_i = k_j the product is a rotation: A_ij = |q|^2 only when nothing lies between them.
    q, k, w, beta = _inputs(seed=3)
    got = np.asarray(_logits(q, k, w, 2.0 + 0.0 * beta, chunk_size=3))
    bound = (np.linalg.norm(q, axis=-1).transpose(0, 2, 1)[..., :, None]
             * np.repeat(np.linalg.norm(k, axis=-1), 2, axis=-1).transpose(0, 2, 1)[..., None, :])
    self.assertTrue(np.all(np.abs(got) <= bound + 1e-4))

  def test_wy_factor_reproduces_the_product_of_a_chunk(self):
    _, _, w, beta = _inputs(seed=4, length=6)
    t = np.asarray(_wy_factor(jnp.asarray(w[0, :, 0]), jnp.asarray(beta[0, :, 0])))
    product = np.eye(5)
    for s in range(6):
      product = product @ (np.eye(5) - beta[0, s, 0] * np.outer(w[0, s, 0], w[0, s, 0]))
    np.testing.assert_allclose(np.eye(5) - w[0, :, 0].T @ t @ w[0, :, 0], product, rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(np.tril(t, -1), 0.0)

  @parameterized.parameters(1, 13, 64, 128, 200)
  def test_wy_factor_is_accurate_for_long_chunks(self, size):
    # T = (I + diag(beta) triu(W W^T, 1))^{-1} diag(beta) against float64 substitution; a
    # Neumann series over the whole chunk lost 2e-3 at C = 128 (D = 16).
    rng = np.random.default_rng(size)
    w = rng.normal(size=(3, size, 16))
    w /= np.linalg.norm(w, axis=-1, keepdims=True)
    beta = rng.uniform(0.0, 2.0, size=(3, size))
    expected = [np.linalg.solve(np.eye(size) + b[:, None] * np.triu(x @ x.T, 1), np.diag(b))
                for x, b in zip(w, beta)]
    got = _wy_factor(jnp.asarray(w, jnp.float32), jnp.asarray(beta, jnp.float32))
    np.testing.assert_allclose(got, np.stack(expected), rtol=0, atol=5e-6)

  def test_bfloat16_inputs_give_float32(self):
    q, k, w, beta = (jnp.asarray(x, jnp.bfloat16) for x in _inputs(seed=5))
    got = _logits(q, k, w, beta, chunk_size=4)
    chex.assert_type(got, jnp.float32)
    chex.assert_tree_all_finite(got)

  def test_gradients_through_chunks_are_finite_for_near_reflections(self):
    q, k, w, beta = _inputs(seed=6, beta_low=1.99)
    loss = lambda w, beta: jnp.sum(path_logits(q, k, w, beta, chunk_size=4) ** 2)
    grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(w, beta)
    chex.assert_tree_all_finite(grads)


class PathFailureTest(parameterized.TestCase):

  def test_integer_queries(self):
    q, k, w, beta = _inputs()
    with self.assertRaisesRegex(ValueError, "q must be a float array"):
      path_logits(q.astype(np.int32), k, w, beta)

  def test_w_shape(self):
    q, k, w, beta = _inputs()
    with self.assertRaisesRegex(ValueError, "w must have the shape of k"):
      path_logits(q, k, w[:, :5], beta)

  def test_beta_shape(self):
    q, k, w, beta = _inputs()
    with self.assertRaisesRegex(ValueError, r"beta must have shape \(2, 11, 2\)"):
      path_logits(q, k, w, beta[..., None])

  def test_heads_not_a_multiple(self):
    q, k, w, beta = _inputs(heads=3)
    with self.assertRaisesRegex(ValueError, r"q's heads \(3\) must be a multiple"):
      path_logits(q, k, w, beta)

  def test_queries_not_the_keys(self):
    q, k, w, beta = _inputs()
    with self.assertRaisesRegex(ValueError, "use path_logits_rows"):
      path_logits(q[:, :4], k, w, beta)

  @parameterized.parameters(0, -3, 2.5, True)
  def test_bad_chunk_size(self, value):
    q, k, w, beta = _inputs()
    with self.assertRaisesRegex(ValueError, "chunk_size"):
      path_logits(q, k, w, beta, chunk_size=value)

  def test_rows_slots(self):
    q, k, w, beta = _inputs()
    with self.assertRaisesRegex(ValueError, r"q_slots must have shape \(2,\)"):
      path_logits_rows(q[:, :2], k, w, beta, q_slots=np.arange(3))
    with self.assertRaisesRegex(ValueError, "q_slots"):
      path_logits_rows(q[:, :2], k, w, beta, q_slots=np.array([0.0, 1.0]))


if __name__ == "__main__":
  absltest.main()
