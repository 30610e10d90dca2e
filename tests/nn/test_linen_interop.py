"""The pure PE transforms work unchanged inside a ``flax.linen`` module.

A small Linen ``@nn.compact`` attention layer calls ``apply_rope`` / ``alibi_bias`` directly; with
the same weights it must give the numbers of the NNX :class:`SelfAttention` (which reaches the
same functions through the PE hooks) and of a hand-written numpy computation.
"""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax import linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.encodings.alibi import alibi_bias, alibi_slopes
from pejax.encodings.rope import RopeConfig, apply_rope, rope_inv_freq
from pejax.nn import DecoderConfig, SelfAttention, build_pe

NUM_HEADS, HEAD_DIM, WIDTH, LENGTH = 4, 8, 32, 10


class LinenAttention(nn.Module):
  """Causal multi-head attention with RoPE or ALiBi, written the Linen way."""

  num_heads: int
  head_dim: int
  pe: str

  @nn.compact
  def __call__(self, x: jax.Array, positions: jax.Array) -> jax.Array:
    dense = lambda name: nn.DenseGeneral((self.num_heads, self.head_dim), use_bias=False,
                                         name=name)
    q, k, v = dense("query")(x), dense("key")(x), dense("value")(x)  # [B, L, H, D]
    bias = None
    if self.pe == "rope":
      inv_freq, factor = rope_inv_freq(RopeConfig(self.head_dim))
      q = apply_rope(q, positions, inv_freq, layout="half", attention_factor=factor)
      k = apply_rope(k, positions, inv_freq, layout="half", attention_factor=factor)
    elif self.pe == "alibi":
      bias = alibi_bias(positions, positions, alibi_slopes(self.num_heads))  # [B, H, L, L]
    out = jax.nn.dot_product_attention(q, k, v, bias=bias, is_causal=True)
    return nn.DenseGeneral(x.shape[-1], axis=(-2, -1), use_bias=False, name="output")(out)


def _numpy_reference(params, x, positions, pe):
  """The same layer by hand in float64: projections, rotate_half RoPE or ALiBi, softmax."""
  x = np.asarray(x, np.float64)
  project = lambda name: np.einsum("ble,ehd->blhd", x, np.asarray(params[name]["kernel"]))
  q, k, v = project("query"), project("key"), project("value")
  pos = np.asarray(positions, np.float64)
  logits_bias = 0.0
  if pe == "rope":
    inv_freq = 1.0 / 10000.0 ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    angles = pos[..., None] * inv_freq  # [B, L, D/2]
    cos = np.concatenate([np.cos(angles)] * 2, -1)[:, :, None, :]
    sin = np.concatenate([np.sin(angles)] * 2, -1)[:, :, None, :]
    rotate_half = lambda t: np.concatenate([-t[..., HEAD_DIM // 2:], t[..., :HEAD_DIM // 2]], -1)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
  elif pe == "alibi":
    slopes = 2.0 ** (-8.0 * np.arange(1, NUM_HEADS + 1) / NUM_HEADS)  # power-of-two head count
    logits_bias = -slopes[None, :, None, None] * (pos[:, None, :, None] - pos[:, None, None, :])
  logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(HEAD_DIM) + logits_bias
  logits = np.where(np.tril(np.ones((LENGTH, LENGTH), bool)), logits, -np.inf)
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  out = np.einsum("bhqk,bkhd->bqhd", weights, v)
  return np.einsum("bqhd,hde->bqe", out, np.asarray(params["output"]["kernel"]))


class LinenInteropTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(jax.numpy_rank_promotion("raise"))
    self.x = jax.random.normal(jax.random.key(0), (2, LENGTH, WIDTH), jnp.float32)
    self.positions = jnp.array([np.arange(LENGTH), np.arange(LENGTH) + 5], jnp.int32)

  def _linen(self, pe):
    module = LinenAttention(NUM_HEADS, HEAD_DIM, pe)
    params = module.init(jax.random.key(1), self.x, self.positions)["params"]
    return module, params

  @parameterized.named_parameters(("rope", "rope"), ("alibi", "alibi"))
  @pytest.mark.slow
  def test_linen_matches_numpy_reference(self, pe):
    module, params = self._linen(pe)
    out = jax.jit(module.apply)({"params": params}, self.x, self.positions)
    np.testing.assert_allclose(out, _numpy_reference(params, self.x, self.positions, pe),
                               atol=2e-5, rtol=2e-5)

  @parameterized.named_parameters(("rope", "rope"), ("alibi", "alibi"))
  @pytest.mark.slow
  def test_linen_matches_nnx_self_attention(self, pe):
    module, params = self._linen(pe)
    config = DecoderConfig(pe=pe, d_model=WIDTH, num_heads=NUM_HEADS, num_layers=1)
    layer = SelfAttention(config, rngs=nnx.Rngs(0))
    # Same weights: Linen DenseGeneral kernels [E, H, D] / [H, D, E] -> NNX Linear [E, H*D] / ...
    for name in ("query", "key", "value"):
      getattr(layer, name).kernel[...] = params[name]["kernel"].reshape(WIDTH, -1)
    layer.output.kernel[...] = params["output"]["kernel"].reshape(-1, WIDTH)
    pe_module = build_pe(config.pe, config, rngs=nnx.Rngs(0))
    bias = pe_module.bias(self.positions, self.positions) if pe_module.has_bias else None
    nnx_out = layer(self.x, pe=pe_module, positions=self.positions, segment_ids=None, bias=bias,
                    implementation="dense")
    linen_out = module.apply({"params": params}, self.x, self.positions)
    chex.assert_trees_all_close(linen_out, nnx_out, atol=1e-5, rtol=1e-5)


if __name__ == "__main__":
  absltest.main()
