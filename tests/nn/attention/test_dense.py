"""Tests of pejax.nn.attention.dense: the custom gradient against autodiff of the plain formula."""

from __future__ import annotations

import importlib
import math
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.nn.attention import causal_chunks
from pejax.nn.attention.mask import attention_mask
from pejax.nn.attention.dense import dense_attention, group_size

# The module (pejax.nn re-exports the function under the same name).
dense_module = importlib.import_module("pejax.nn.attention.dense")


def _plain_attention(q, k, v, *, bias, q_slots, k_slots, causal, kv_length, q_seg, k_seg):
  """The formula left to autodiff: float32 logits, finite mask value, ``jax.nn.softmax``."""
  groups = q.shape[2] // k.shape[2]
  k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
  logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
  if bias is not None:
    logits = logits + bias
  mask = attention_mask(q_slots, k_slots, causal=causal, kv_length=kv_length,
                        q_segment_ids=q_seg, k_segment_ids=k_seg)
  probs = jax.nn.softmax(jnp.where(mask, logits, -1e30), axis=-1)
  return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


def _case(batch, q_len, k_len, heads, kv_heads, dim=8, seed=0):
  keys = jax.random.split(jax.random.key(seed), 5)
  q = jax.random.normal(keys[0], (batch, q_len, heads, dim), jnp.float32)
  k = jax.random.normal(keys[1], (batch, k_len, kv_heads, dim), jnp.float32)
  v = jax.random.normal(keys[2], (batch, k_len, kv_heads, dim), jnp.float32)
  bias = jax.random.normal(keys[3], (1, heads, q_len, k_len), jnp.float32)
  cotangent = jax.random.normal(keys[4], (batch, q_len, heads, dim), jnp.float32)
  return q, k, v, bias, cotangent


class DenseAttentionGradientTest(parameterized.TestCase):

  # group_elements 2**18: the whole batch in one group; 64: groups of one row (lax.map / scan).
  @parameterized.parameters(
      (2 ** 18, "none", True),
      (2 ** 18, "shared", True),
      (2 ** 18, "per_row", False),
      (64, "shared", False),
      (64, "per_row", True),
  )
  @pytest.mark.slow
  def test_value_and_gradients_match_autodiff(self, group_elements, bias_kind, chunked):
    batch, length, heads, kv_heads = 4, 10, 4, 2
    q, k, v, bias, cotangent = _case(batch, length, length, heads, kv_heads)
    if bias_kind == "none":
      bias = None
    elif bias_kind == "per_row":
      bias = bias * jnp.arange(1.0, batch + 1.0)[:, None, None, None]
    slots = jnp.arange(length, dtype=jnp.int32)
    chunks = (tuple((s, e, e) for s, e in ((0, 3), (3, 7), (7, 10))) if chunked
              else ((0, length, length),))
    # Rows 0-1: two packed segments; rows 2-3: one segment.
    segments = jnp.array([[0] * 4 + [1] * 6] * 2 + [[0] * 10] * 2, jnp.int32)

    def ours(q, k, v, bias):
      return dense_attention(q, k, v, bias=bias, q_slots=slots, k_slots=slots, causal=True,
                             chunks=chunks, q_segment_ids=segments, k_segment_ids=segments)

    def plain(q, k, v, bias):
      return _plain_attention(q, k, v, bias=bias, q_slots=slots, k_slots=slots, causal=True,
                              kv_length=None, q_seg=segments, k_seg=segments)

    with mock.patch.object(dense_module, "_GROUP_ELEMENTS", group_elements):
      out, vjp = jax.vjp(jax.jit(ours), q, k, v, bias)
      grads = vjp(cotangent)
    expected_out, expected_vjp = jax.vjp(jax.jit(plain), q, k, v, bias)
    expected = expected_vjp(cotangent)
    chex.assert_trees_all_close(out, expected_out, atol=2e-6, rtol=2e-6)
    chex.assert_trees_all_close(grads, expected, atol=2e-5, rtol=2e-5)
    if bias is not None:
      chex.assert_shape(grads[3], bias.shape)
      self.assertGreater(float(jnp.max(jnp.abs(grads[3]))), 0.0)

  @parameterized.parameters(2 ** 18, 64)
  @pytest.mark.slow
  def test_cache_offset_kv_length_and_fully_masked_rows(self, group_elements):
    # Queries at slots 5..7 of an 9-slot cache filled up to 7; row 1's second query has a segment
    # id no key has, so it sees nothing: it averages the values uniformly, in value and gradient.
    batch, heads = 2, 2
    q, k, v, _, cotangent = _case(batch, 3, 9, heads, heads, seed=1)
    q_slots, k_slots = 5 + jnp.arange(3, dtype=jnp.int32), jnp.arange(9, dtype=jnp.int32)
    q_seg = jnp.array([[0, 0, 0], [0, 7, 0]], jnp.int32)
    k_seg = jnp.zeros((batch, 9), jnp.int32)
    kwargs = dict(q_slots=q_slots, k_slots=k_slots, causal=True, kv_length=jnp.int32(7))

    def ours(q, k, v):
      return dense_attention(q, k, v, bias=None, chunks=((0, 3, 9),), q_segment_ids=q_seg,
                             k_segment_ids=k_seg, **kwargs)

    def plain(q, k, v):
      return _plain_attention(q, k, v, bias=None, q_seg=q_seg, k_seg=k_seg, **kwargs)

    with mock.patch.object(dense_module, "_GROUP_ELEMENTS", group_elements):
      out, vjp = jax.vjp(jax.jit(ours), q, k, v)
      grads = vjp(cotangent)
    expected_out, expected_vjp = jax.vjp(jax.jit(plain), q, k, v)
    chex.assert_trees_all_close(out, expected_out, atol=2e-6, rtol=2e-6)
    chex.assert_trees_all_close(grads, expected_vjp(cotangent), atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(out[1, 1], jnp.mean(v[1], axis=0), atol=1e-6)

  def test_bfloat16_inputs_keep_their_dtype_in_gradients(self):
    q, k, v, _, cotangent = _case(2, 6, 6, 2, 2)
    q, k, v = (a.astype(jnp.bfloat16) for a in (q, k, v))
    slots = jnp.arange(6, dtype=jnp.int32)
    out, vjp = jax.vjp(jax.jit(lambda q, k, v: dense_attention(
        q, k, v, bias=None, q_slots=slots, k_slots=slots, causal=True, chunks=((0, 6, 6),))),
                       q, k, v)
    grads = vjp(cotangent.astype(jnp.bfloat16))
    self.assertEqual(out.dtype, jnp.bfloat16)
    self.assertEqual([g.dtype for g in grads], [jnp.bfloat16] * 3)
    chex.assert_tree_all_finite(grads)

  def test_bad_chunks_and_bias_are_named(self):
    q, k, v, bias, _ = _case(2, 6, 6, 2, 2)
    slots = jnp.arange(6, dtype=jnp.int32)
    call = lambda chunks, bias=None: dense_attention(
        q, k, v, bias=bias, q_slots=slots, k_slots=slots, causal=True, chunks=chunks)
    for chunks in (((0, 4, 4),), ((0, 3, 3), (2, 6, 6)), ((0, 6, 7),), ()):
      with self.assertRaisesRegex(ValueError, r"chunks must be .*got"):
        call(chunks)
    with self.assertRaisesRegex(ValueError, r"bias must have shape \[1 or 2, 2, 6, 6\]"):
      call(((0, 6, 6),), bias[:, :, :5])

  @pytest.mark.slow
  def test_residuals_grow_linearly_with_length(self):
    # The backward pass keeps q, k, v, the output and per-row statistics, never [L, L] arrays:
    # doubling the length doubles what the VJP closure holds.
    def residual_bytes(length):
      q, k, v, _, _ = _case(2, length, length, 2, 2)
      slots = jnp.arange(length, dtype=jnp.int32)
      chunks = tuple((s, e, e) for s, e in causal_chunks(length))
      _, vjp = jax.vjp(jax.jit(lambda q, k, v: dense_attention(
          q, k, v, bias=None, q_slots=slots, k_slots=slots, causal=True, chunks=chunks)), q, k, v)
      return sum(x.nbytes for x in jax.tree.leaves(vjp) if hasattr(x, "nbytes"))

    small, large = residual_bytes(128), residual_bytes(256)
    self.assertGreater(small, 0)
    self.assertLessEqual(large, 2.1 * small)


class GroupSizeTest(parameterized.TestCase):

  @parameterized.parameters(
      # batch, heads, chunk queries, keys -> rows per group (1 MiB of float32 logits per chunk)
      (16, 4, 64, 256, 4),
      (16, 4, 128, 1024, 1),
      (12, 4, 64, 256, 4),
      (6, 4, 64, 256, 3),
      (7, 1, 8, 8, 7),
      (1, 64, 4096, 4096, 1),
  )
  def test_largest_divisor_within_the_target(self, batch, heads, queries, keys, expected):
    self.assertEqual(group_size(batch, heads, queries, keys), expected)


if __name__ == "__main__":
  absltest.main()
