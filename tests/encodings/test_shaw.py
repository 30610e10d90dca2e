"""Tests for pejax.encodings.shaw."""

from __future__ import annotations

import functools

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.shaw import shaw_bias_from_scores
from pejax.encodings.shaw import shaw_key_bias
from pejax.encodings.shaw import shaw_query_scores
from pejax.encodings.shaw import shaw_relative_index


def _reference_logits(q, k, table, q_positions, k_positions):
  """Shaw et al. eq. (4): e_ij = q_i . (k_j + a^K_ij) / sqrt(D), a^K_ij = w^K_clip(j - i, k)."""
  q, k, table = (np.asarray(x, np.float64) for x in (q, k, table))
  batch, lq, heads, dim = q.shape
  lk = k.shape[1]
  max_distance = (table.shape[-2] - 1) // 2
  out = np.zeros((batch, heads, lq, lk))
  for b in range(batch):
    for h in range(heads):
      for i in range(lq):
        for j in range(lk):
          rel = int(k_positions[min(b, len(k_positions) - 1)][j]) - int(
              q_positions[min(b, len(q_positions) - 1)][i])
          w = table[..., max(-max_distance, min(max_distance, rel)) + max_distance, :]
          w = w[h] if table.ndim == 3 else w
          out[b, h, i, j] = q[b, i, h] @ (k[b, j, h] + w) / np.sqrt(dim)
  return out


class ShawRelativeIndexTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  @chex.variants(with_jit=True, without_jit=True)
  def test_golden_clipped_indices(self):
    positions = np.arange(5, dtype=np.int32)
    index = self.variant(functools.partial(shaw_relative_index, max_distance=2))(
        positions, positions)
    chex.assert_type(index, jnp.int32)
    np.testing.assert_array_equal(index, [[2, 3, 4, 4, 4],
                                          [1, 2, 3, 4, 4],
                                          [0, 1, 2, 3, 4],
                                          [0, 0, 1, 2, 3],
                                          [0, 0, 0, 1, 2]])

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("k0", 0), ("k1", 1), ("k16", 16), ("k100", 100))
  def test_matches_clip_formula_and_translation_invariant(self, max_distance):
    rng = np.random.default_rng(max_distance)
    q = rng.integers(-300, 300, size=(2, 9)).astype(np.int32)
    k = rng.integers(-300, 300, size=(2, 11)).astype(np.int32)
    fn = self.variant(functools.partial(shaw_relative_index, max_distance=max_distance))
    index = fn(q, k)
    expected = np.clip(k[:, None, :] - q[:, :, None], -max_distance, max_distance) + max_distance
    np.testing.assert_array_equal(index, expected)
    for shift in (1, -1000, 2 ** 30):
      chex.assert_trees_all_equal(fn(q + shift, k + shift), index)

  @chex.variants(with_jit=True, without_jit=True)
  def test_exact_at_int32_extremes(self):
    big, small = np.iinfo(np.int32).max, np.iinfo(np.int32).min
    q = np.array([big, small, big - 3, 0], np.int32)
    k = np.array([small, big, big, big - 5, 3], np.int32)
    index = self.variant(functools.partial(shaw_relative_index, max_distance=4))(q, k)
    expected = np.clip(k.astype(np.int64)[None] - q.astype(np.int64)[:, None], -4, 4) + 4
    np.testing.assert_array_equal(index, expected)

  def test_traced_uint32_positions_above_int32_range(self):
    q = np.array([2 ** 32 - 1, 0], np.uint32)
    k = np.array([2 ** 32 - 3, 2 ** 32 - 1, 1], np.uint32)
    index = jax.jit(functools.partial(shaw_relative_index, max_distance=3))(q, k)
    np.testing.assert_array_equal(index, [[1, 3, 0], [6, 6, 4]])

  def test_rejects_bad_inputs(self):
    q = np.arange(3, dtype=np.int32)
    for bad in (-1, 1.5, True, None):
      with self.assertRaisesRegex(ValueError, "max_distance must be a non-negative integer"):
        shaw_relative_index(q, q, max_distance=bad)
    with self.assertRaisesRegex(ValueError, r"max_distance must be <= 536870912, got 536870913"):
      shaw_relative_index(q, q, max_distance=2 ** 29 + 1)
    with self.assertRaisesRegex(ValueError, "q_positions must be an integer array"):
      shaw_relative_index(q.astype(np.float32), q)


class ShawKeyBiasTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  def _inputs(self, seed, batch=2, lq=5, lk=7, heads=3, dim=8, rows=7, per_head=False):
    keys = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(keys[0], (batch, lq, heads, dim))
    k = jax.random.normal(keys[1], (batch, lk, heads, dim))
    table = jax.random.normal(keys[2], ((heads,) if per_head else ()) + (rows, dim))
    return q, k, table

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("shared", False), ("per_head", True))
  def test_bias_plus_content_logits_match_paper_equation(self, per_head):
    q, k, table = self._inputs(0, per_head=per_head)
    q_positions = np.array([[3, 4, 5, 9, 10]], np.int32)
    k_positions = np.array([[0, 1, 3, 4, 5, 9, 10]], np.int32)
    bias = self.variant(shaw_key_bias)(q, table, q_positions, k_positions)
    chex.assert_shape(bias, (2, 3, 5, 7))
    chex.assert_type(bias, jnp.float32)
    content = np.einsum("bqhd,bkhd->bhqk", np.asarray(q, np.float64),
                        np.asarray(k, np.float64)) / np.sqrt(8)
    np.testing.assert_allclose(
        np.asarray(bias) + content,
        _reference_logits(q, k, table, q_positions, k_positions), rtol=1e-5, atol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  def test_batched_positions_and_translation_invariance(self):
    q, _, table = self._inputs(1, lq=4, lk=4, rows=5)
    positions = np.array([[0, 1, 2, 3], [0, 1, 0, 1]], np.int32)  # second row: packed segments
    fn = self.variant(shaw_key_bias)
    bias = fn(q, table, positions, positions)
    chex.assert_trees_all_equal(fn(q, table, positions + 100, positions + 100), bias)
    np.testing.assert_allclose(
        bias, _reference_logits(q, np.zeros((2, 4, 3, 8)), table, positions, positions),
        rtol=1e-5, atol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  def test_distances_beyond_clip_share_the_last_row(self):
    q, _, table = self._inputs(2, batch=1, lq=1, lk=6, rows=3)
    bias = np.asarray(self.variant(shaw_key_bias)(
        q, table, np.array([[100]], np.int32), np.array([[0, 50, 98, 99, 100, 101]], np.int32)))
    np.testing.assert_array_equal(bias[..., 0], bias[..., 1])
    np.testing.assert_array_equal(bias[..., 0], bias[..., 3])
    self.assertFalse(np.any(bias[..., 3] == bias[..., 4]))

  def test_decode_row_equals_full_row(self):
    q, _, table = self._inputs(3, batch=1, lq=6, lk=6)
    positions = np.arange(6, dtype=np.int32)[None]
    full = shaw_key_bias(q, table, positions, positions)
    row = shaw_key_bias(q[:, 5:], table, positions[:, 5:], positions)
    np.testing.assert_array_equal(row, full[:, :, 5:])

  @chex.variants(with_jit=True, without_jit=True)
  def test_scores_gathered_per_tile_equal_the_full_bias(self):
    q, _, table = self._inputs(6, batch=2, lq=8, lk=8, rows=5)
    positions = np.arange(8, dtype=np.int32)[None]
    scores = self.variant(shaw_query_scores)(q, table)
    chex.assert_shape(scores, (2, 8, 3, 5))
    np.testing.assert_allclose(
        scores, np.einsum("blhd,rd->blhr", np.asarray(q, np.float64),
                          np.asarray(table, np.float64)) / np.sqrt(8), rtol=1e-5, atol=1e-6)
    full = shaw_key_bias(q, table, positions, positions)
    gather = self.variant(shaw_bias_from_scores)
    for rows in (slice(0, 4), slice(4, 8)):
      for cols in (slice(0, 4), slice(4, 8)):
        tile = gather(scores[:, rows], positions[:, rows], positions[:, cols])
        np.testing.assert_array_equal(tile, full[:, :, rows, cols])

  def test_gradient_reaches_only_used_table_rows(self):
    q, _, table = self._inputs(4, batch=1, lq=3, lk=3, rows=9)  # k = 4; offsets -2 .. 2 used
    positions = np.arange(3, dtype=np.int32)[None]
    grad = jax.grad(lambda t: jnp.sum(shaw_key_bias(q, t, positions, positions)))(table)
    used = np.any(np.asarray(grad) != 0, axis=-1)
    np.testing.assert_array_equal(used, [False, False, True, True, True, True, True, False,
                                         False])

  def test_rejects_bad_inputs(self):
    q, _, table = self._inputs(5)
    p = np.arange(5, dtype=np.int32)[None]
    pk = np.arange(7, dtype=np.int32)[None]
    with self.assertRaisesRegex(ValueError, r"q must have shape \[B, Lq, H, D\], got shape"):
      shaw_key_bias(q[0], table, p, pk)
    with self.assertRaisesRegex(ValueError, r"table must have shape .*got shape \(6, 8\)"):
      shaw_key_bias(q, table[:6], p, pk)
    with self.assertRaisesRegex(ValueError, r"D = 8 .*got shape \(7, 4\)"):
      shaw_key_bias(q, table[:, :4], p, pk)
    with self.assertRaisesRegex(ValueError, r"H = 3 .*got shape \(2, 7, 8\)"):
      shaw_key_bias(q, jnp.stack([table, table]), p, pk)
    with self.assertRaisesRegex(ValueError, r"q_positions must have shape \[B \| 1, L\]"):
      shaw_key_bias(q, table, p[0], pk[0])
    with self.assertRaisesRegex(ValueError, r"q_positions must have Lq = 5 entries"):
      shaw_key_bias(q, table, pk, pk)
    with self.assertRaisesRegex(ValueError, r"must broadcast with the queries. batch"):
      shaw_key_bias(q, table, np.zeros((3, 5), np.int32), np.zeros((3, 7), np.int32))
    with self.assertRaisesRegex(ValueError, "k_positions must be an integer array"):
      shaw_key_bias(q, table, p, pk.astype(np.float32))
    with self.assertRaisesRegex(ValueError, r"scores must have shape \[B, Lq, H, 2k \+ 1\]"):
      shaw_bias_from_scores(jnp.zeros((2, 5, 3, 6)), p, pk)


if __name__ == "__main__":
  absltest.main()
