"""Tests for the Shaw et al. PE (pejax.nn.positional.shaw): content-aware hooks, config."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.nn.decoder import Decoder
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.positional.registry import registry_entry
from pejax.nn.positional.shaw import ShawConfig
from pejax.nn.positional.shaw import ShawPE
import pytest

_TINY = dict(num_layers=3, d_model=32, num_heads=4, vocab_size=32)


def _reference_bias(q, table, q_positions, k_positions):
  """Shaw et al. eq. (4), key term: q_i . w^K_{clip(j - i, k)} / sqrt(D), float64."""
  q, table = np.asarray(q, np.float64), np.asarray(table, np.float64)
  max_distance = (table.shape[-2] - 1) // 2
  batch, lq, heads, dim = q.shape
  lk = k_positions.shape[-1]
  out = np.zeros((batch, heads, lq, lk))
  for b in range(batch):
    for h in range(heads):
      for i in range(lq):
        for j in range(lk):
          rel = int(k_positions[0, j]) - int(q_positions[0, i])
          row = max(-max_distance, min(max_distance, rel)) + max_distance
          w = table[h, row] if table.ndim == 3 else table[row]
          out[b, h, i, j] = q[b, i, h] @ w / np.sqrt(dim)
  return out


class ShawPETest(parameterized.TestCase):

  def test_defaults_and_failures(self):
    self.assertEqual(registry_entry("shaw").make_config(),
                     ShawConfig(max_distance=16, per_head_tables=False))
    with self.assertRaisesRegex(ValueError, "max_distance must be a non-negative integer, got -1"):
      ShawConfig(max_distance=-1)
    with self.assertRaisesRegex(ValueError, "per_head_tables must be a bool, got 1"):
      ShawConfig(per_head_tables=1)

  @parameterized.named_parameters(("shared", False, (9, 8)), ("per_head", True, (4, 9, 8)))
  def test_features_and_content_bias_are_the_key_term(self, per_head, table_shape):
    pe = ShawPE(ShawConfig(max_distance=4, per_head_tables=per_head),
                DecoderConfig(pe="shaw", **_TINY), rngs=nnx.Rngs(0))
    self.assertEqual(pe.table.shape, table_shape)
    self.assertIsNone(pe.key_feature_shape())
    q = jax.random.normal(jax.random.key(1), (2, 7, 4, 8))
    positions = np.array([[0, 1, 2, 3, 10, 11, 12]], np.int32)
    q_features, k_features = pe.features(jnp.zeros((2, 7, 32)), q, positions)
    self.assertIsNone(k_features)
    self.assertEqual(q_features.shape, (2, 7, 4, 9))
    bias = pe.content_bias(positions, positions, q_features, None)
    np.testing.assert_allclose(bias, _reference_bias(q, pe.table[...], positions, positions),
                               rtol=1e-5, atol=1e-5)
    # A tile (query rows 4..6, keys 0..3) gathers the same numbers from the tile's features.
    tile = pe.content_bias(positions[:, 4:], positions[:, :4], q_features[:, 4:], None)
    np.testing.assert_array_equal(tile, bias[:, :, 4:, :4])

  def test_one_table_per_layer_and_gradients_reach_it(self):
    model = Decoder(DecoderConfig(pe="shaw", **_TINY), rngs=nnx.Rngs(0))
    pes = model.layer_pes()
    self.assertLen({id(pe) for pe in pes}, 3)
    self.assertFalse(np.allclose(pes[0].table[...], pes[1].table[...]))
    tokens = jax.random.randint(jax.random.key(0), (2, 12), 0, 32)
    grads = nnx.jit(nnx.grad(lambda m: jnp.mean(m(tokens) ** 2)))(model)
    tables = [np.asarray(v) for path, v in jax.tree_util.tree_leaves_with_path(
        nnx.state(grads.pes, nnx.Param)) if "table" in str(path)]
    self.assertLen(tables, 3)
    for grad in tables:
      # 12 tokens reach offsets -11 .. 0: rows 5 .. 16 of 33; the future rows get no gradient.
      used = np.any(grad != 0, axis=-1)
      self.assertTrue(np.all(used[5:17]) and not np.any(used[17:]))

  @pytest.mark.slow
  def test_model_depends_on_positions_only_through_offsets(self):
    model = Decoder(DecoderConfig(pe="shaw", **_TINY), rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(0), (1, 20), 0, 32)
    positions = jnp.arange(20, dtype=jnp.int32)[None]
    forward = nnx.jit(lambda model, positions: model(tokens, positions=positions))
    base = forward(model, positions)
    np.testing.assert_allclose(forward(model, positions + 777), base, atol=2e-5, rtol=2e-5)
    # Clipping: offsets beyond 16 look alike, spreading the positions apart changes the logits.
    spread = forward(model, positions * 3)
    self.assertGreater(float(jnp.max(jnp.abs(spread - base))), 1e-3)


if __name__ == "__main__":
  absltest.main()
