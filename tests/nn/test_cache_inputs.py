"""``pejax.nn.init_kv_cache`` and a decoder's cache argument: a cache that does not fit is an error
naming what differs (never an XLA shape error, never a silently wrong attention)."""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax.numpy as jnp

from pejax.nn import Decoder, DecoderConfig, init_kv_cache

BASE = dict(num_layers=1, batch_size=2, max_length=8, num_kv_heads=2, head_dim=4,
            dtype=jnp.float32)


def _decoder(**fields):
  config = dict(num_layers=1, d_model=16, num_heads=2, vocab_size=32)
  config.update(fields)
  return Decoder(DecoderConfig(**config), rngs=nnx.Rngs(0))


class InitKVCacheTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("zero_layers", dict(num_layers=0), "num_layers must be a positive integer, got 0"),
      ("float_batch", dict(batch_size=2.5), "batch_size must be a positive integer, got 2.5"),
      ("bool_length", dict(max_length=True), "max_length must be a positive integer, got True"),
      ("negative_heads", dict(num_kv_heads=-1), "num_kv_heads must be a positive integer"),
      ("zero_head_dim", dict(head_dim=0), "head_dim must be a positive integer, got 0"),
      ("features_per_layer", dict(feature_shapes=(None, (2,))),
       r"feature_shapes must have one entry per layer \(num_layers=1\), got 2"),
      ("feature_not_a_shape", dict(feature_shapes=(3,)),
       r"feature_shapes\[0\] must be None or a tuple of positive ints .*got 3"),
      ("feature_zero", dict(feature_shapes=((0,),)), r"feature_shapes\[0\] .*got \(0,\)"),
  )
  def test_bad_argument_is_named(self, change, message):
    with self.assertRaisesRegex(ValueError, message):
      init_kv_cache(**dict(BASE, **change))

  def test_feature_shapes_make_feature_arrays(self):
    cache = init_kv_cache(**dict(BASE, num_layers=2, feature_shapes=(None, (2,))))
    self.assertIsNone(cache.features[0])
    self.assertEqual(cache.features[1].shape, (2, 8, 2))


class ForeignCacheTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("layers", dict(num_layers=2), r"cache has 2 layers, this model 1"),
      ("heads", dict(num_heads=4, d_model=32), r"cache holds 4 key/value heads of dim 8, this "
                                               r"model 2 of dim 8"),
      ("head_dim", dict(d_model=32), r"cache holds 2 key/value heads of dim 16, this model 2 of "
                                     r"dim 8"),
      ("features", dict(pe="fox"), r"cache layer 0 has key features of shape \(2,\), this "
                                   r"model's PE needs None"),
  )
  def test_a_cache_of_another_model_is_refused(self, other, message):
    model = _decoder()
    cache = _decoder(**other).init_cache(1, 8)
    tokens = jnp.zeros((1, 3), jnp.int32)
    with self.assertRaisesRegex(ValueError, message):
      model.prefill(tokens, None, cache)
    with self.assertRaisesRegex(ValueError, message):
      model.decode_step(tokens[:, :1], jnp.zeros((1, 1), jnp.int32), cache)

  def test_a_content_aware_model_refuses_a_cache_without_its_features(self):
    model = _decoder(pe="fox")  # FoX caches its forget gates per key ([H] per token).
    with self.assertRaisesRegex(ValueError, r"cache layer 0 has key features of shape None, "
                                r"this model's PE needs \(2,\)"):
      model.prefill(jnp.zeros((1, 3), jnp.int32), None, _decoder().init_cache(1, 8))

  def test_its_own_cache_is_accepted(self):
    for pe in ("rope", "fox", "shaw"):
      model = _decoder(pe=pe)
      logits, cache = nnx.jit(lambda m, t, c: m.prefill(t, None, c))(  # Issue 44: 1 program.
          model, jnp.zeros((1, 3), jnp.int32), model.init_cache(1, 8))
      self.assertEqual((logits.shape, int(cache.length)), ((1, 3, 32), 3))


if __name__ == "__main__":
  absltest.main()
