"""Tests for pejax.encodings.path_attention: the blockwise PaTH operator equals masked softmax over
path_logits (values and gradients, any block size, packed segments, GQA), the dense form, failures."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings.path import path_logits
from pejax.encodings.path_attention import path_attention

_B, _L, _H, _K, _D = 2, 19, 4, 2, 8
_SEGMENTS = np.array([[1] * 7 + [2] * 12, [3] * 19], np.int32)


def _inputs(seed=0, value_dim=6):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(_B, _L, _H, _D)).astype(np.float32)
  k = rng.normal(size=(_B, _L, _K, _D)).astype(np.float32)
  v = rng.normal(size=(_B, _L, _K, value_dim)).astype(np.float32)
  w = rng.normal(size=(_B, _L, _K, _D))
  w = (w / np.linalg.norm(w, axis=-1, keepdims=True)).astype(np.float32)
  beta = rng.uniform(0.0, 2.0, size=(_B, _L, _K)).astype(np.float32)
  return q, k, v, w, beta


# Jitted once for the file (issue 44: an eager call compiles op by op, ~100 programs a call);
# the eager path keeps one case (test_runs_op_by_op_outside_jit).
_path_attention = jax.jit(path_attention, static_argnames=("block_size", "dense"))


@jax.jit
def _reference(q, k, v, w, beta, segment_ids=None):
  """Masked softmax over the whole PaTH logits, written out (float32)."""
  logits = path_logits(q, k, w, beta, chunk_size=5) / np.sqrt(_D)
  mask = np.tril(np.ones((_L, _L), bool))[None, None]
  if segment_ids is not None:
    mask = mask & (segment_ids[:, None, :, None] == segment_ids[:, None, None, :])
  probs = jax.nn.softmax(jnp.where(mask, logits, -jnp.inf), axis=-1)
  return jnp.einsum("bhij,bjhd->bihd", probs, jnp.repeat(v, _H // _K, axis=2))


class PathAttentionTest(chex.TestCase):

  @parameterized.parameters((1, None), (4, None), (7, _SEGMENTS), (19, _SEGMENTS), (64, None))
  def test_equals_softmax_over_path_logits(self, block_size, segment_ids):
    q, k, v, w, beta = _inputs()
    got = _path_attention(q, k, v, w, beta, block_size=block_size, segment_ids=segment_ids)
    chex.assert_shape(got, (_B, _L, _H, 6))
    np.testing.assert_allclose(got, _reference(q, k, v, w, beta, segment_ids), rtol=1e-5,
                               atol=1e-5)

  def test_runs_op_by_op_outside_jit(self):
    q, k, v, w, beta = _inputs()
    got = path_attention(q, k, v, w, beta, block_size=7, segment_ids=_SEGMENTS)
    np.testing.assert_allclose(got, _reference(q, k, v, w, beta, _SEGMENTS), rtol=1e-5,
                               atol=1e-5)

  def test_dense_form_equals_blockwise(self):
    q, k, v, w, beta = _inputs(seed=1)
    blockwise = _path_attention(q, k, v, w, beta, block_size=4, segment_ids=_SEGMENTS)
    dense = _path_attention(q, k, v, w, beta, block_size=4, segment_ids=_SEGMENTS, dense=True)
    np.testing.assert_allclose(blockwise, dense, rtol=1e-5, atol=1e-5)

  def test_gradients_equal_the_reference(self):
    q, k, v, w, beta = _inputs(seed=2)
    cotangent = np.random.default_rng(3).normal(size=(_B, _L, _H, 6)).astype(np.float32)
    loss = lambda fn: (lambda *a: jnp.sum(fn(*a) * cotangent))
    got = jax.jit(jax.grad(loss(lambda *a: path_attention(*a, block_size=4,
                                                          segment_ids=_SEGMENTS)),
                           argnums=(0, 1, 2, 3, 4)))(q, k, v, w, beta)
    expected = jax.jit(jax.grad(loss(lambda *a: _reference(*a, _SEGMENTS)),
                                argnums=(0, 1, 2, 3, 4)))(q, k, v, w, beta)
    for name, g, e in zip(("dq", "dk", "dv", "dw", "dbeta"), got, expected):
      np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5, err_msg=name)

  def test_a_document_does_not_see_the_one_packed_before_it(self):
    q, k, v, w, beta = _inputs(seed=4)
    packed = _path_attention(q, k, v, w, beta, block_size=4, segment_ids=_SEGMENTS)
    alone = _path_attention(q[:1, 7:], k[:1, 7:], v[:1, 7:], w[:1, 7:], beta[:1, 7:],
                            block_size=4)
    np.testing.assert_allclose(packed[:1, 7:], alone, rtol=1e-5, atol=1e-5)

  def test_bfloat16_in_bfloat16_out(self):
    q, k, v, w, beta = (jnp.asarray(x, jnp.bfloat16) for x in _inputs(seed=5))
    got = _path_attention(q, k, v, w, beta, block_size=8)
    chex.assert_type(got, jnp.bfloat16)
    chex.assert_tree_all_finite(got)


class PathAttentionFailureTest(parameterized.TestCase):

  def test_value_shape(self):
    q, k, v, w, beta = _inputs()
    with self.assertRaisesRegex(ValueError, r"v must have shape \[B, L, K, Dv\]"):
      path_attention(q, k, v[:, :, :1], w, beta)

  def test_segment_ids(self):
    q, k, v, w, beta = _inputs()
    with self.assertRaisesRegex(ValueError, r"segment_ids must have shape \(2, 19\)"):
      path_attention(q, k, v, w, beta, segment_ids=_SEGMENTS[:, :5])
    with self.assertRaisesRegex(ValueError, "segment_ids"):
      path_attention(q, k, v, w, beta, segment_ids=_SEGMENTS.astype(np.float32))

  def test_unbatched_queries(self):
    q, k, v, w, beta = _inputs()
    with self.assertRaisesRegex(ValueError, r"q must have shape \[B, L, H, D\]"):
      path_attention(q[0], k[0], v[0], w[0], beta[0])

  @parameterized.parameters(0, -1, 1.5)
  def test_block_size(self, value):
    q, k, v, w, beta = _inputs()
    with self.assertRaisesRegex(ValueError, "block_size"):
      path_attention(q, k, v, w, beta, block_size=value)


if __name__ == "__main__":
  absltest.main()
