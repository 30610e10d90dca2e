"""Chunked local attention (Llama 4's iRoPE layers) in every attention path.

A query at position p sees a key at position k only if ``k // C == p // C`` (and the causal,
length, segment and window masks hold). Checked: the mask against hand-written matrices, dense
and blockwise attention against the plain formula (values and gradients; tiles aligned with the
chunks and not), packed sequences, KV-cache offsets, which key tiles blockwise skips, the
combination with a sliding window, the dispatch's opt-in for kernels, and bad inputs.
"""

from __future__ import annotations

import importlib
import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.nn.attention import AttentionCall, Kernel, attention, attention_mask, blockwise_attention
from pejax.nn.attention import register_kernel, select_kernel, unregister_kernel
from pejax.nn.attention.mask import chunk_ids

blockwise_module = importlib.import_module("pejax.nn.attention.blockwise")


# Jitted once for the file (issue 44): eager attention compiles op by op (~50 programs a call).
_attention = jax.jit(attention, static_argnames=("implementation", "block_size", "chunk_size",
                                                 "window"))


@jax.jit
def _plain_given_mask(q, k, v, mask):
  groups = q.shape[2] // k.shape[2]
  k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
  logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
  probs = jax.nn.softmax(jnp.where(mask[:, None], logits, -1e30), axis=-1)
  return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


def _plain(q, k, v, **mask_args):
  """Softmax of the masked logits left to autodiff, with the mask built in numpy from positions."""
  return _plain_given_mask(q, k, v, _plain_mask(q, k, **mask_args))


def _plain_mask(q, k, *, q_positions, k_positions, chunk_size, window=None, q_seg=None,
                k_seg=None, q_offset=0, kv_length=None):
  qp, kp = np.asarray(q_positions), np.asarray(k_positions)
  q_slots = q_offset + np.arange(q.shape[1])
  k_slots = np.arange(k.shape[1])
  mask = (k_slots[None, :] <= q_slots[:, None])[None]
  if kv_length is not None:
    mask = mask & (k_slots < kv_length)[None, None, :]
  if window is not None:
    mask = mask & (k_slots[None, :] > q_slots[:, None] - window)[None]
  mask = mask & (kp[:, None, :] // chunk_size == qp[:, :, None] // chunk_size)
  if q_seg is not None:
    mask = mask & (np.asarray(q_seg)[:, :, None] == np.asarray(k_seg)[:, None, :])
  return jnp.asarray(mask)


def _qkv(batch, q_len, k_len, heads=4, kv_heads=2, dim=8, seed=0):
  keys = jax.random.split(jax.random.key(seed), 3)
  return (jax.random.normal(keys[0], (batch, q_len, heads, dim), jnp.float32),
          jax.random.normal(keys[1], (batch, k_len, kv_heads, dim), jnp.float32),
          jax.random.normal(keys[2], (batch, k_len, kv_heads, dim), jnp.float32))


class ChunkMaskTest(absltest.TestCase):

  def test_chunk_mask_golden(self):
    # C = 3 over positions 0..6: blocks [0, 3), [3, 6), [6, 7), each causal within itself.
    positions = jnp.arange(7, dtype=jnp.int32)[None]
    ids = chunk_ids(positions, 3)
    mask = attention_mask(jnp.arange(7), jnp.arange(7), causal=True, q_chunk_ids=ids,
                          k_chunk_ids=ids)
    expected = np.array([
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [0, 0, 0, 1, 0, 0, 0],
        [0, 0, 0, 1, 1, 0, 0],
        [0, 0, 0, 1, 1, 1, 0],
        [0, 0, 0, 0, 0, 0, 1],
    ], bool)
    np.testing.assert_array_equal(np.asarray(mask[0, 0]), expected)

  def test_chunks_follow_positions_not_slots(self):
    # Two packed documents whose positions restart: the second's chunks start at its own start
    # (slot 5), as Hugging Face chunks packed sequences by their position ids.
    positions = jnp.array([[0, 1, 2, 3, 4, 0, 1, 2]], jnp.int32)
    segments = jnp.array([[1, 1, 1, 1, 1, 2, 2, 2]], jnp.int32)
    ids = chunk_ids(positions, 2)
    mask = attention_mask(jnp.arange(8), jnp.arange(8), causal=True, q_segment_ids=segments,
                          k_segment_ids=segments, q_chunk_ids=ids, k_chunk_ids=ids)
    self.assertTrue(bool(mask[0, 0, 6, 5]))   # positions 1 and 0 of document 2: one chunk.
    self.assertFalse(bool(mask[0, 0, 7, 6]))  # positions 2 and 1: chunks 1 and 0.
    self.assertFalse(bool(mask[0, 0, 5, 4]))  # another document.
    self.assertTrue(bool(mask[0, 0, 4, 4]))   # position 4 alone in chunk 2 of document 1.
    self.assertFalse(bool(mask[0, 0, 4, 3]))

  def test_window_and_chunk_intersect(self):
    ids = chunk_ids(jnp.arange(8, dtype=jnp.int32)[None], 4)
    both = attention_mask(jnp.arange(8), jnp.arange(8), causal=True, window=2, q_chunk_ids=ids,
                          k_chunk_ids=ids)[0, 0]
    window = attention_mask(jnp.arange(8), jnp.arange(8), causal=True, window=2)[0, 0]
    chunk = attention_mask(jnp.arange(8), jnp.arange(8), causal=True, q_chunk_ids=ids,
                           k_chunk_ids=ids)[0, 0]
    np.testing.assert_array_equal(both, window & chunk)
    self.assertFalse(bool(both[4, 3]))  # In the window, not in the chunk.
    self.assertFalse(bool(both[3, 1]))  # In the chunk, not in the window.

  def test_chunk_ids_floor_negative_positions(self):
    np.testing.assert_array_equal(chunk_ids(jnp.array([[-4, -1, 0, 3, 4]]), 4),
                                  [[-1, -1, 0, 0, 1]])

  def test_chunk_ids_must_come_together(self):
    ids = jnp.zeros((1, 3), jnp.int32)
    with self.assertRaisesRegex(ValueError, "q_chunk_ids and k_chunk_ids must be given together"):
      attention_mask(jnp.arange(3), jnp.arange(3), causal=True, q_chunk_ids=ids)


class ChunkedAttentionTest(parameterized.TestCase):

  # Tiles aligned with the chunks (block = C, 2C), misaligned (block 5 or 7 with C = 4), and a
  # length that is not a multiple of the tile.
  @parameterized.named_parameters(
      ("aligned", 4, 4, 24), ("two_chunks_a_tile", 4, 8, 24), ("misaligned", 4, 5, 23),
      ("chunk_longer_than_tile", 6, 4, 21), ("chunk_1", 1, 4, 9))
  def test_dense_and_blockwise_match_the_formula_and_each_other(self, chunk, block, length):
    q, k, v = _qkv(2, length, length)
    positions = jnp.arange(length, dtype=jnp.int32)[None]
    args = dict(q_positions=positions, k_positions=positions, chunk_size=chunk)

    def loss(impl):
      def f(q, k, v):
        out = attention(q, k, v, implementation=impl, block_size=block, **args)
        return jnp.sum(out * jnp.cos(out)), out
      return jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2), has_aux=True))(q, k, v)

    mask = _plain_mask(q, k, **args)

    def plain_loss(q, k, v):
      out = _plain_given_mask(q, k, v, mask)
      return jnp.sum(out * jnp.cos(out)), out

    (_, expected), expected_grads = jax.jit(jax.value_and_grad(
        plain_loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    for impl in ("dense", "blockwise"):
      (_, out), grads = loss(impl)
      chex.assert_trees_all_close(out, expected, atol=2e-6)
      chex.assert_trees_all_close(grads, expected_grads, atol=2e-5)

  def test_chunking_changes_the_output(self):
    # The claim is not vacuous: positions past the first chunk attend differently.
    q, k, v = _qkv(1, 12, 12)
    positions = jnp.arange(12, dtype=jnp.int32)[None]
    chunked = _attention(q, k, v, q_positions=positions, k_positions=positions, chunk_size=4)
    full = _attention(q, k, v, q_positions=positions, k_positions=positions)
    np.testing.assert_allclose(chunked[:, :4], full[:, :4], atol=1e-6)
    self.assertGreater(float(jnp.abs(chunked[:, 4:] - full[:, 4:]).min(axis=(0, 2, 3)).min()),
                       1e-4)

  @parameterized.parameters("dense", "blockwise")
  def test_packed_sequences(self, impl):
    positions = jnp.array([[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 0, 1, 2],
                           [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]], jnp.int32)
    segments = jnp.array([[1] * 6 + [2] * 5 + [3] * 3, [1] * 14], jnp.int32)
    q, k, v = _qkv(2, 14, 14, seed=3)
    out = _attention(q, k, v, q_positions=positions, k_positions=positions, chunk_size=3,
                     q_segment_ids=segments, k_segment_ids=segments, implementation=impl,
                     block_size=4)
    expected = _plain(q, k, v, q_positions=positions, k_positions=positions, chunk_size=3,
                      q_seg=segments, k_seg=segments)
    np.testing.assert_allclose(out, expected, atol=2e-6)

  @parameterized.parameters("dense", "blockwise")
  def test_kv_cache_offset(self, impl):
    # Queries at slots 9..11 of a 16-slot cache with 12 filled: chunk 2 (positions 8..11).
    q, k, v = _qkv(1, 3, 16, seed=5)
    k_positions = jnp.concatenate([jnp.arange(12), jnp.zeros(4, jnp.int32)])[None]
    q_positions = jnp.arange(9, 12, dtype=jnp.int32)[None]
    out = _attention(q, k, v, q_positions=q_positions, k_positions=k_positions, chunk_size=4,
                     q_offset=jnp.int32(9), kv_length=jnp.int32(12), implementation=impl,
                     block_size=4)
    expected = _plain(q, k, v, q_positions=q_positions, k_positions=k_positions, chunk_size=4,
                      q_offset=9, kv_length=12)
    np.testing.assert_allclose(out, expected, atol=2e-6)

  @parameterized.parameters("dense", "blockwise")
  def test_with_sliding_window(self, impl):
    q, k, v = _qkv(1, 17, 17, seed=7)
    positions = jnp.arange(17, dtype=jnp.int32)[None]
    out = _attention(q, k, v, q_positions=positions, k_positions=positions, chunk_size=6,
                     window=4, implementation=impl, block_size=4)
    expected = _plain(q, k, v, q_positions=positions, k_positions=positions, chunk_size=6,
                      window=4)
    np.testing.assert_allclose(out, expected, atol=2e-6)


class BlockwiseTileSkippingTest(absltest.TestCase):

  def _kinds(self, *, length, block, chunk, positions=None):
    if positions is None:
      positions = jnp.arange(length, dtype=jnp.int32)[None]
    tiles = -(-length // block)
    pad = lambda x: blockwise_module._pad_axis(x, block, 1, "edge")
    ids = blockwise_module._tiles(pad(chunk_ids(positions, chunk)), block)
    static = blockwise_module._Static(causal=True, segments=False, bq=block, bk=block,
                                      head_dim=8, prescaled=True, bias_fn=None)
    return np.array([[int(blockwise_module._tile_kind(static, i, j, 0, length, ids[i], ids[j]))
                      for j in range(tiles)] for i in range(tiles)])

  def test_aligned_tiles_are_diagonal_and_mask_free_off_the_diagonal_chunks(self):
    # C = 8, tiles of 4: a chunk is two tiles. Kinds: 0 skipped, 1 no mask, 2 masked.
    np.testing.assert_array_equal(self._kinds(length=16, block=4, chunk=8), [
        [2, 0, 0, 0],
        [1, 2, 0, 0],
        [0, 0, 2, 0],
        [0, 0, 1, 2],
    ])

  def test_misaligned_tiles_keep_the_tiles_a_chunk_crosses(self):
    # C = 6, tiles of 4 over 16 tokens: chunks [0, 6), [6, 12), [12, 16).
    np.testing.assert_array_equal(self._kinds(length=16, block=4, chunk=6), [
        [2, 0, 0, 0],
        [2, 2, 0, 0],
        [0, 2, 2, 0],
        [0, 0, 0, 2],
    ])

  def test_skipping_follows_positions(self):
    # Two packed documents of 8: the second restarts at position 0, so its first tile shares
    # chunk 0 with the first tile of the first document (only the segment mask separates them).
    positions = jnp.concatenate([jnp.arange(8), jnp.arange(8)]).astype(jnp.int32)[None]
    kinds = self._kinds(length=16, block=4, chunk=4, positions=positions)
    self.assertEqual(kinds[2, 0], 1)
    self.assertEqual(kinds[3, 1], 1)
    self.assertEqual(kinds[2, 1], 0)


class ChunkedDispatchTest(absltest.TestCase):

  def test_only_chunk_aware_kernels_get_chunked_calls(self):
    # A kernel written before chunk_size existed (it checks the window but not the chunk) would
    # compute full attention: the dispatch never offers it a chunked call.
    register_kernel(Kernel(name="chunk_blind", serves=lambda call: call.window is None,
                           run=lambda call: call.q, priority=1000))
    try:
      q, k, v = _qkv(1, 8, 8)
      positions = jnp.arange(8, dtype=jnp.int32)[None]
      call = AttentionCall(
          q=q, k=k, v=v, q_positions=positions, k_positions=positions, bias=None,
          kernel_bias=None, bias_grad=False, schedule="dense", causal=True, q_offset=0,
          kv_length=None, q_segment_ids=None, k_segment_ids=None, block_size=8, window=None,
          q_features=None, k_features=None, logits_fn=None, platform="cpu")
      self.assertEqual(select_kernel(call), "chunk_blind")
      self.assertEqual(select_kernel(call._replace(chunk_size=4)), "dense")
      self.assertEqual(select_kernel(call._replace(chunk_size=4, schedule="blockwise")),
                       "blockwise")
    finally:
      unregister_kernel("chunk_blind")


class ChunkedErrorsTest(parameterized.TestCase):

  @parameterized.parameters(0, -3, 2.5, True)
  def test_bad_chunk_size_names_the_argument(self, chunk):
    q, k, v = _qkv(1, 4, 4)
    positions = jnp.arange(4, dtype=jnp.int32)[None]
    with self.assertRaisesRegex(ValueError, f"chunk_size must be a positive integer, got "
                                f"{chunk!r}"):
      attention(q, k, v, q_positions=positions, k_positions=positions, chunk_size=chunk)
    with self.assertRaisesRegex(ValueError, "chunk_size must be a positive integer"):
      blockwise_attention(q, k, v, q_positions=positions, k_positions=positions,
                          chunk_size=chunk)


if __name__ == "__main__":
  absltest.main()
