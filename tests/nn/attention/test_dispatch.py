"""Tests of pejax.nn.attention: dense and blockwise against a naive reference and each other."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.encodings.alibi import alibi_bias, alibi_slopes
from pejax.nn.attention import AttentionCall, attention, choose_implementation, select_kernel
from pejax.nn.attention.mask import attention_mask


def _naive_attention(q, k, v, *, bias=None, q_offset=0, kv_length=None, q_segment_ids=None,
                     k_segment_ids=None):
  """Textbook causal softmax attention in numpy float64 (GQA by repeating key/value heads)."""
  q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
  groups = q.shape[2] // k.shape[2]
  k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
  logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
  if bias is not None:
    logits = logits + np.asarray(bias, np.float64)
  q_slots = q_offset + np.arange(q.shape[1])
  k_slots = np.arange(k.shape[1])
  mask = k_slots[None, :] <= q_slots[:, None]
  if kv_length is not None:
    mask = mask & (k_slots < kv_length)[None, :]
  mask = mask[None, None]
  if q_segment_ids is not None:
    mask = mask & (np.asarray(q_segment_ids)[:, None, :, None] ==
                   np.asarray(k_segment_ids)[:, None, None, :])
  logits = np.where(mask, logits, -np.inf)
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights = weights / weights.sum(-1, keepdims=True)
  return np.einsum("bhqk,bkhd->bqhd", weights, v)


def _inputs(batch=2, q_len=13, k_len=13, heads=4, kv_heads=2, dim=8, seed=0):
  keys = jax.random.split(jax.random.key(seed), 3)
  q = jax.random.normal(keys[0], (batch, q_len, heads, dim), jnp.float32)
  k = jax.random.normal(keys[1], (batch, k_len, kv_heads, dim), jnp.float32)
  v = jax.random.normal(keys[2], (batch, k_len, kv_heads, dim), jnp.float32)
  return q, k, v


def _alibi_fn(num_heads):
  slopes = alibi_slopes(num_heads)
  return lambda qp, kp: alibi_bias(qp, kp, slopes)


class AttentionTest(chex.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      ("dense", "dense", 512),
      ("blockwise_one_tile", "blockwise", 512),
      ("blockwise_tile_4", "blockwise", 4),
      ("blockwise_tile_5", "blockwise", 5),
  )
  @pytest.mark.slow
  def test_matches_naive_reference_with_bias_gqa_and_segments(self, implementation, block_size):
    q, k, v = _inputs()
    positions = jnp.arange(13, dtype=jnp.int32)[None, :]
    segments = jnp.array([[1] * 5 + [2] * 8, [3] * 13], jnp.int32)
    bias_fn = _alibi_fn(4)

    @self.variant
    def run(q, k, v):
      return attention(q, k, v, q_positions=positions, k_positions=positions, bias=bias_fn,
                       implementation=implementation, q_segment_ids=segments,
                       k_segment_ids=segments, block_size=block_size)

    out = run(q, k, v)
    expected = _naive_attention(q, k, v, bias=bias_fn(positions, positions),
                                q_segment_ids=segments, k_segment_ids=segments)
    chex.assert_shape(out, (2, 13, 4, 8))
    chex.assert_trees_all_close(out, expected.astype(np.float32), atol=2e-6, rtol=2e-6)

  @parameterized.named_parameters(("dense_chunked", "dense"), ("blockwise", "blockwise"))
  @pytest.mark.slow
  def test_long_causal_chunked_path_matches_reference(self, implementation):
    """L >= 128 takes dense attention's causal chunking (queries split, upper triangle skipped)."""
    q, k, v = _inputs(batch=1, q_len=200, k_len=200, dim=4, seed=3)
    positions = jnp.arange(200, dtype=jnp.int32)[None, :]
    segments = jnp.concatenate([jnp.ones((1, 70), jnp.int32), 2 * jnp.ones((1, 130), jnp.int32)],
                               axis=1)
    bias_fn = _alibi_fn(4)
    run = jax.jit(lambda q, k, v: attention(
        q, k, v, q_positions=positions, k_positions=positions, bias=bias_fn,
        implementation=implementation, q_segment_ids=segments, k_segment_ids=segments,
        block_size=64))
    expected = _naive_attention(q, k, v, bias=bias_fn(positions, positions),
                                q_segment_ids=segments, k_segment_ids=segments)
    chex.assert_trees_all_close(run(q, k, v), expected.astype(np.float32), atol=2e-6, rtol=2e-6)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("dense", "dense"), ("blockwise", "blockwise"))
  @pytest.mark.slow
  def test_offset_queries_over_partially_filled_cache(self, implementation):
    # 3 new queries at slots 4..6 of a 16-slot cache holding 7 valid keys.
    q, _, _ = _inputs(q_len=3, seed=1)
    _, k, v = _inputs(k_len=16, seed=2)
    q_positions = jnp.array([[4, 5, 6]], jnp.int32)
    k_positions = jnp.arange(16, dtype=jnp.int32)[None, :]
    bias_fn = _alibi_fn(4)

    @self.variant
    def run(q, k, v):
      return attention(q, k, v, q_positions=q_positions, k_positions=k_positions, bias=bias_fn,
                       implementation=implementation, q_offset=4, kv_length=7, block_size=4)

    expected = _naive_attention(q, k, v, bias=bias_fn(q_positions, k_positions), q_offset=4,
                                kv_length=7)
    chex.assert_trees_all_close(run(q, k, v), expected.astype(np.float32), atol=2e-6, rtol=2e-6)

  @pytest.mark.slow
  def test_garbage_past_kv_length_is_ignored(self):
    q, k, v = _inputs(q_len=1, k_len=12)
    positions_q = jnp.array([[5]], jnp.int32)
    positions_k = jnp.arange(12, dtype=jnp.int32)[None, :]
    poisoned_k = k.at[:, 6:].set(1e4)
    poisoned_v = v.at[:, 6:].set(1e4)
    for implementation in ("dense", "blockwise"):
      run = lambda k, v: attention(q, k, v, q_positions=positions_q, k_positions=positions_k,
                                   implementation=implementation, q_offset=5, kv_length=6,
                                   block_size=4)
      chex.assert_trees_all_close(run(k, v), run(poisoned_k, poisoned_v), atol=1e-6)

  @pytest.mark.slow
  def test_blockwise_gradients_match_dense(self):
    q, k, v = _inputs(q_len=11, k_len=11)
    positions = jnp.arange(11, dtype=jnp.int32)[None, :]
    bias_fn = _alibi_fn(4)

    def loss(q, k, v, implementation):
      out = attention(q, k, v, q_positions=positions, k_positions=positions, bias=bias_fn,
                      implementation=implementation, block_size=4)
      return jnp.sum(jnp.sin(out))

    dense = jax.grad(loss, argnums=(0, 1, 2))(q, k, v, "dense")
    blockwise = jax.jit(jax.grad(loss, argnums=(0, 1, 2)), static_argnums=3)(q, k, v, "blockwise")
    chex.assert_trees_all_close(blockwise, dense, atol=5e-6, rtol=5e-6)
    chex.assert_tree_all_finite(blockwise)

  @pytest.mark.slow
  def test_gradient_of_batch_shared_learned_bias(self):
    # A [1, H, L, L] bias shared by the batch gets the batch-summed gradient (dense: in its
    # custom VJP; blockwise: broadcast_batch), a [B, H, L, L] bias one per row. Both must give
    # autodiff's gradient for the bias parameter.
    q, k, v = _inputs(q_len=11, k_len=11)
    positions = jnp.arange(11, dtype=jnp.int32)[None, :]
    scale = jnp.array([0.5, 1.0, 1.5, 2.0], jnp.float32)

    def loss(scale, implementation, shared):
      def bias_fn(qp, kp):
        bias = scale[None, :, None, None] * alibi_bias(qp, kp, alibi_slopes(4))
        return bias if shared else jnp.broadcast_to(bias, (2,) + bias.shape[1:])
      out = attention(q, k, v, q_positions=positions, k_positions=positions, bias=bias_fn,
                      implementation=implementation, block_size=4)
      return jnp.sum(jnp.sin(out))

    expected = jax.grad(loss)(scale, "dense", False)
    self.assertGreater(float(jnp.min(jnp.abs(expected))), 0.0)
    for implementation in ("dense", "blockwise"):
      grad = jax.jit(jax.grad(loss), static_argnums=(1, 2))(scale, implementation, True)
      chex.assert_trees_all_close(grad, expected, atol=1e-5, rtol=1e-5)

  @pytest.mark.slow
  def test_blockwise_gradient_of_a_bias_closing_over_float_and_integer_arrays(self):
    # Like T5: a learned float table indexed by an integer array the bias function closes over.
    q, k, v = _inputs(q_len=9, k_len=9)
    positions = jnp.arange(9, dtype=jnp.int32)[None, :]
    buckets = jnp.arange(17, dtype=jnp.int32) % 5

    def loss(table, implementation):
      def bias_fn(qp, kp):
        relative = jnp.clip(kp[:, None, :] - qp[:, :, None] + 8, 0, 16)  # [1, Lq, Lk]
        return jnp.moveaxis(table[buckets[relative]], -1, 1)  # [1, H, Lq, Lk]
      out = attention(q, k, v, q_positions=positions, k_positions=positions, bias=bias_fn,
                      implementation=implementation, block_size=4)
      return jnp.sum(jnp.sin(out))

    table = jax.random.normal(jax.random.key(3), (5, 4))
    expected = jax.jit(jax.grad(loss), static_argnums=1)(table, "dense")
    got = jax.jit(jax.grad(loss), static_argnums=1)(table, "blockwise")
    self.assertGreater(float(jnp.min(jnp.abs(expected))), 0.0)
    chex.assert_trees_all_close(got, expected, atol=1e-5, rtol=1e-5)

  @pytest.mark.slow
  def test_blockwise_backward_memory_grows_linearly(self):
    # Forward + backward temporaries (compile only): O(L), not O(L^2 / tile).
    def temp_bytes(length):
      shape = jax.ShapeDtypeStruct((1, length, 2, 8), jnp.float32)
      positions = jnp.arange(length, dtype=jnp.int32)[None, :]

      def grads(q, k, v):
        return jax.grad(lambda q, k, v: jnp.sum(attention(
            q, k, v, q_positions=positions, k_positions=positions, implementation="blockwise",
            block_size=64)), argnums=(0, 1, 2))(q, k, v)

      return jax.jit(grads).lower(shape, shape, shape).compile().memory_analysis(
      ).temp_size_in_bytes

    small, large = temp_bytes(512), temp_bytes(2048)
    self.assertLess(large, 5 * small)  # 4x the length: linear is 4x, quadratic would be 16x.

  @pytest.mark.slow
  def test_bfloat16_keeps_dtype_and_is_close(self):
    q, k, v = (a.astype(jnp.bfloat16) for a in _inputs())
    positions = jnp.arange(13, dtype=jnp.int32)[None, :]
    expected = _naive_attention(q, k, v)
    for implementation in ("dense", "blockwise"):
      out = attention(q, k, v, q_positions=positions, k_positions=positions,
                      implementation=implementation, block_size=4)
      chex.assert_type(out, jnp.bfloat16)
      np.testing.assert_allclose(np.asarray(out, np.float32), expected, atol=3e-2)

  def test_mask_shapes(self):
    slots = jnp.arange(4, dtype=jnp.int32)
    mask = attention_mask(slots, slots, causal=True)
    chex.assert_shape(mask, (1, 1, 4, 4))
    np.testing.assert_array_equal(mask[0, 0], np.tril(np.ones((4, 4), bool)))
    segments = jnp.array([[1, 1, 2, 2]], jnp.int32)
    mask = attention_mask(slots, slots, causal=False, q_segment_ids=segments,
                          k_segment_ids=segments)
    np.testing.assert_array_equal(mask[0, 0], np.kron(np.eye(2, dtype=bool), np.ones((2, 2), bool)))

  def test_choose_implementation(self):
    self.assertEqual(choose_implementation("auto", 1024, platform_name="cpu"), "dense")
    self.assertEqual(choose_implementation("auto", 1025, platform_name="cpu"), "blockwise")
    self.assertEqual(choose_implementation("auto", 2048, platform_name="tpu"), "dense")
    self.assertEqual(choose_implementation("auto", 10**6, supports_blockwise=False), "dense")
    self.assertEqual(choose_implementation("blockwise", 8, supports_blockwise=False), "blockwise")
    self.assertEqual(choose_implementation("auto", 2048, blockwise_threshold=2048), "dense")
    self.assertEqual(choose_implementation("auto", 2049, blockwise_threshold=2048), "blockwise")
    self.assertEqual(choose_implementation("dense", 10**6, blockwise_threshold=2048), "dense")
    with self.assertRaisesRegex(ValueError, "attention must be one of"):
      choose_implementation("flash", 10, blockwise_threshold=2048)

  def test_kernel_table_dispatch(self):
    # Predicates read shapes and dtypes only: abstract arrays are enough (no compile).
    def call(dtype=jnp.bfloat16, schedule="dense", platform="cuda", **overrides):
      q = jax.ShapeDtypeStruct((2, 16, 4, 32), dtype)
      kv = jax.ShapeDtypeStruct((2, 16, 2, 32), dtype)
      fields = dict(q=q, k=kv, v=kv, q_positions=None, k_positions=None, bias=None,
                    kernel_bias=None, bias_grad=True, schedule=schedule, causal=True, q_offset=0, kv_length=None,
                    q_segment_ids=None, k_segment_ids=None, block_size=8, window=None,
                    q_features=None, k_features=None, logits_fn=None, platform=platform)
      fields.update(overrides)
      return AttentionCall(**fields)

    fixed_bias = jnp.zeros((1, 4, 16, 16))
    self.assertEqual(select_kernel(call()), "cudnn")
    self.assertEqual(select_kernel(call(schedule="blockwise", window=4)), "cudnn")
    self.assertEqual(select_kernel(call(bias=fixed_bias, bias_grad=False)), "cudnn")
    # What cuDNN cannot serve falls through to the portable schedules.
    self.assertEqual(select_kernel(call(bias=fixed_bias)), "dense")  # bias with a gradient
    self.assertEqual(select_kernel(call(schedule="blockwise", bias=lambda qp, kp: qp,
                                        bias_grad=False)), "blockwise")  # would materialize
    # Then the Pallas flash kernel (GPU and TPU): no bias or a PE's own bias hook (computed
    # inside the kernel), static query offsets, segment ids, float32.
    self.assertEqual(select_kernel(call(dtype=jnp.float32)), "pallas")
    self.assertEqual(select_kernel(call(q_offset=3)), "pallas")  # A static chunk offset.
    self.assertEqual(select_kernel(call(q_segment_ids=1, k_segment_ids=1)), "pallas")
    self.assertEqual(select_kernel(call(platform="rocm")), "pallas")
    self.assertEqual(select_kernel(call(platform="tpu", dtype=jnp.float32)), "pallas")
    from pejax.nn import DecoderConfig  # pylint: disable=g-import-not-at-top
    from pejax.nn.positional.registry import build_pe, pe_config  # pylint: disable=g-import-not-at-top
    model = DecoderConfig(vocab_size=32, d_model=128, num_heads=4, num_layers=1, pe="alibi")
    alibi = build_pe(pe_config("alibi"), model, rngs=nnx.Rngs(0))
    served = dict(bias=alibi.bias, kernel_bias=alibi.kernel_bias())  # What the decoder passes.
    self.assertEqual(select_kernel(call(platform="tpu", **served)), "pallas")
    # A bias function without its kernel description is not the kernel's to compute.
    self.assertEqual(select_kernel(call(platform="tpu", bias=alibi.bias)), "dense")
    self.assertEqual(select_kernel(call(platform="tpu", q_offset=jnp.int32(3), **served)),
                     "dense")  # A traced KV-cache length: the portable schedule.
    self.assertEqual(select_kernel(call(platform="tpu", bias=fixed_bias)), "dense")  # An array.
    self.assertEqual(select_kernel(call(platform="cpu", **served)), "dense")
    self.assertEqual(select_kernel(call(logits_fn=jnp.tanh)), "logit_hook")
    self.assertEqual(select_kernel(call(platform="cpu", schedule="blockwise")), "blockwise")

  def test_auto_resolves_by_length_and_keeps_array_biases_dense(self):
    q, k, v = _inputs(batch=1, q_len=9, k_len=9)
    positions = jnp.arange(9, dtype=jnp.int32)[None, :]
    bias = _alibi_fn(4)(positions, positions)
    got = attention(q, k, v, q_positions=positions, k_positions=positions, bias=bias,
                    implementation="auto")
    np.testing.assert_allclose(got, _naive_attention(q, k, v, bias=bias), atol=1e-5)

  def test_bad_inputs(self):
    q, k, v = _inputs()
    positions = jnp.arange(13, dtype=jnp.int32)[None, :]
    bias = _alibi_fn(4)(positions, positions)
    with self.assertRaisesRegex(ValueError, "bias must be a function of positions"):
      attention(q, k, v, q_positions=positions, k_positions=positions, bias=bias,
                implementation="blockwise")
    with self.assertRaisesRegex(ValueError, "implementation must be one of"):
      attention(q, k, v, q_positions=positions, k_positions=positions, implementation="flash")
    q3, k3, v3 = _inputs(heads=4, kv_heads=3)
    with self.assertRaisesRegex(ValueError, "multiple of key/value heads"):
      attention(q3, k3, v3, q_positions=positions, k_positions=positions)


if __name__ == "__main__":
  absltest.main()
