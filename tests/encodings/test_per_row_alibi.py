"""Tests for pejax.encodings.per_row_alibi: x-transformers PerRowDataDependentAlibi goldens, the
sum of per-row log gates, text-index masking (caches, empty slots), failures."""

from __future__ import annotations

import json
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.per_row_alibi import per_row_alibi_bias

_GOLDENS = json.loads((pathlib.Path(__file__).parent / "xtransformers_goldens.json").read_text())[
    "per_row_data_dependent_alibi"]


def _log_sigmoid(x):
  return -np.logaddexp(0.0, -x)


def _gates_from_torch_weight(x, weight, heads, dim_head):
  """x-transformers' Linear + Rearrange('b n (qk h d) -> qk b h n d') as [B, L, H, d] pairs."""
  projected = x @ weight.T  # [B, L, 2 * H * d]
  both = projected.reshape(x.shape[0], x.shape[1], 2, heads, dim_head)
  return both[:, :, 0], both[:, :, 1]


class PerRowAlibiGoldenTest(chex.TestCase):
  """Pinned to x-transformers 2.31.10's PerRowDataDependentAlibi (causal)."""

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(*[(name, name) for name in _GOLDENS])
  def test_matches_x_transformers(self, name):
    case = _GOLDENS[name]
    x = np.asarray(case["x"], np.float32)
    weight = np.asarray(case["weight"], np.float32)
    expected = np.asarray(case["bias"], np.float32)  # [B, H, L, L]
    a, b = _gates_from_torch_weight(x, weight, expected.shape[1], case["dim_head"])
    got = self.variant(lambda a, b: per_row_alibi_bias(
        a, b, post_log_scale=case["post_log_scale"]))(a, b)
    chex.assert_shape(got, expected.shape)
    chex.assert_trees_all_close(got, expected, rtol=1e-5, atol=1e-5)

  def test_small_golden(self):
    # One head, d = 1, a_i b_l = 0 (gate 1/2) except a_2 b_0 = log 3 (gate 3/4).
    a = np.array([[[[1.0]], [[1.0]], [[1.0]]]], np.float32)  # [B=1, L=3, H=1, d=1]
    b = np.array([[[[np.log(3.0)]], [[0.0]], [[0.0]]]], np.float32)
    a[0, 1] = 0.0
    got = np.asarray(per_row_alibi_bias(a, b))[0, 0]
    # Row 1: keys 0 .. 0 -> log sigmoid(0); row 2: key 0 log(3/4), key 1 log(1/2).
    np.testing.assert_allclose(got, [[0.0, 0.0, 0.0],
                                     [np.log(0.5), 0.0, 0.0],
                                     [np.log(0.75) + np.log(0.5), np.log(0.5), 0.0]],
                               rtol=1e-6, atol=1e-7)


class PerRowAlibiPropertyTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    self.a = 1.5 * jax.random.normal(keys[0], (2, 9, 3, 4))
    self.b = 1.5 * jax.random.normal(keys[1], (2, 9, 3, 4))

  def test_bias_is_the_sum_of_the_rows_log_gates_from_the_key_to_before_the_query(self):
    got = np.asarray(per_row_alibi_bias(self.a, self.b, post_log_scale=0.7))
    logits = np.einsum("bihd,bjhd->bhij", np.asarray(self.a), np.asarray(self.b)) / 2.0
    log_gates = 0.7 * _log_sigmoid(logits)
    for i in range(9):
      for j in range(9):
        expected = log_gates[:, :, i, j:i].sum(-1) if j < i else 0.0
        np.testing.assert_allclose(got[:, :, i, j], expected, rtol=1e-5, atol=1e-6)

  def test_non_positive_and_monotone_towards_older_keys(self):
    got = np.asarray(per_row_alibi_bias(self.a, self.b))
    lower = np.tril(np.ones((9, 9), bool))
    self.assertTrue(np.all(got[..., lower] <= 0.0))
    # Older keys forget more: along a row the bias is non-decreasing from key 0 to the diagonal.
    for i in range(9):
      self.assertTrue(np.all(np.diff(got[:, :, i, :i + 1], axis=-1) >= -1e-6))

  def test_cache_rows_equal_full_rows_and_empty_slots_add_nothing(self):
    full = np.asarray(per_row_alibi_bias(self.a, self.b))
    # Decode rows 6..8 against a cache of 12 slots: 9 tokens then 3 empty (index 0, junk gates).
    junk = 9.0 * jnp.ones((2, 3, 3, 4))
    cache_b = jnp.concatenate([self.b, junk], axis=1)
    k_index = jnp.concatenate([jnp.arange(1, 10.0), jnp.zeros(3)])[None].repeat(2, 0)
    q_index = jnp.arange(7, 10.0)[None].repeat(2, 0)
    got = np.asarray(per_row_alibi_bias(self.a[:, 6:], cache_b, q_index=q_index,
                                        k_index=k_index))
    np.testing.assert_allclose(got[..., :9], full[:, :, 6:], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got[..., 9:], 0.0)

  def test_keys_after_the_query_in_text_order_do_not_enter_the_sums(self):
    # A packed second document after the first: the first document's rows are unchanged.
    alone = np.asarray(per_row_alibi_bias(self.a[:, :5], self.b[:, :5]))
    packed = np.asarray(per_row_alibi_bias(self.a, self.b))
    np.testing.assert_allclose(packed[:, :, :5, :5], alone, rtol=1e-6, atol=1e-6)

  def test_no_batch_axis_and_bfloat16_inputs(self):
    got = per_row_alibi_bias(self.a[0].astype(jnp.bfloat16), self.b[0].astype(jnp.bfloat16))
    chex.assert_type(got, jnp.float32)
    chex.assert_shape(got, (3, 9, 9))


class PerRowAlibiFailureTest(parameterized.TestCase):

  def test_integer_gates(self):
    with self.assertRaisesRegex(ValueError, "q_gates must be a float array"):
      per_row_alibi_bias(np.zeros((4, 2, 3), np.int32), np.zeros((4, 2, 3), np.float32))

  def test_low_rank(self):
    with self.assertRaisesRegex(ValueError, "k_gates"):
      per_row_alibi_bias(np.zeros((4, 2, 3), np.float32), np.zeros((2, 3), np.float32))

  def test_head_or_gate_dims_differ(self):
    with self.assertRaisesRegex(ValueError, r"must agree on \[H, d\]"):
      per_row_alibi_bias(np.zeros((4, 2, 3), np.float32), np.zeros((4, 2, 4), np.float32))

  def test_lengths_differ_without_indices(self):
    with self.assertRaisesRegex(ValueError, "Lq=3 and Lk=4"):
      per_row_alibi_bias(np.zeros((3, 2, 3), np.float32), np.zeros((4, 2, 3), np.float32))

  def test_one_index_without_the_other(self):
    with self.assertRaisesRegex(ValueError, "q_index and k_index must be given together"):
      per_row_alibi_bias(np.zeros((3, 2, 3), np.float32), np.zeros((3, 2, 3), np.float32),
                         q_index=np.arange(1, 4))

  def test_index_shape(self):
    with self.assertRaisesRegex(ValueError, r"k_index must have shape \(4,\)"):
      per_row_alibi_bias(np.zeros((3, 2, 3), np.float32), np.zeros((4, 2, 3), np.float32),
                         q_index=np.arange(1, 4), k_index=np.arange(1, 4))

  @parameterized.parameters(float("nan"), float("inf"), True, "1")
  def test_bad_post_log_scale(self, value):
    with self.assertRaisesRegex(ValueError, "post_log_scale must be a finite number"):
      per_row_alibi_bias(np.zeros((3, 2, 3), np.float32), np.zeros((3, 2, 3), np.float32),
                         post_log_scale=value)


if __name__ == "__main__":
  absltest.main()
