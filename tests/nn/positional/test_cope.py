"""Tests for the CoPE PE (pejax.nn.positional.cope): x-transformers parity through the hook,
dense only, zero init is NoPE, config."""

from __future__ import annotations

import json
import pathlib
import types

from absl.testing import absltest
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.nn.decoder import Decoder
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.positional.cope import CopeConfig
from pejax.nn.positional.cope import CopePE
from pejax.nn.positional.registry import registry_entry
import pytest

_GOLDENS = json.loads((pathlib.Path(__file__).parents[2] / "encodings" /
                       "xtransformers_goldens.json").read_text())["cope"]
_TINY = dict(num_layers=2, d_model=32, num_heads=4, num_kv_heads=2, vocab_size=32)


def _blhd(values) -> np.ndarray:
  return np.asarray(values, np.float32).transpose(0, 2, 1, 3)


class CopePETest(absltest.TestCase):

  def test_logits_hook_matches_x_transformers(self):
    for name, case in _GOLDENS.items():
      with self.subTest(name):
        q, k = _blhd(case["q"]), _blhd(case["k"])
        pos_emb = np.asarray(case["pos_emb"], np.float32)
        pe = CopePE(CopeConfig(max_position=pos_emb.shape[0]),
                    types.SimpleNamespace(num_heads=q.shape[2], head_dim=q.shape[3]),
                    rngs=nnx.Rngs(0))
        pe.pos_emb[...] = jnp.asarray(pos_emb)
        length = q.shape[1]
        logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
        logits = np.where(np.tril(np.ones((length, length), bool)), logits, -1e30)
        positions = np.arange(length, dtype=np.int32)[None]
        got = pe.logits(logits.astype(np.float32), q, k, positions, positions)
        np.testing.assert_allclose(got, np.asarray(case["bias"], np.float32), rtol=1e-5,
                                   atol=1e-5)

  @pytest.mark.slow
  def test_zero_initialized_cope_is_nope_and_trained_cope_sees_order(self):
    config = dict(_TINY, num_layers=1)
    cope = Decoder(DecoderConfig(pe="cope", **config), rngs=nnx.Rngs(0))
    nope = Decoder(DecoderConfig(pe="none", **config), rngs=nnx.Rngs(0))
    self.assertEqual(registry_entry("cope").make_config().max_position, 64)
    self.assertEqual(cope.pes[0].pos_emb.shape, (64, 8))
    tokens = jax.random.randint(jax.random.key(1), (2, 9), 0, 32, dtype=jnp.int32)
    np.testing.assert_allclose(cope(tokens), nope(tokens), rtol=1e-5, atol=1e-5)
    cope.pes[0].pos_emb[...] = jax.random.normal(jax.random.key(2), (64, 8))
    permuted = jnp.concatenate([tokens[:, np.array([3, 7, 0, 5, 1, 6, 2, 4])], tokens[:, 8:]], 1)
    difference = jnp.abs(cope(tokens)[:, -1] - cope(permuted)[:, -1])
    self.assertGreater(float(jnp.max(difference)), 1e-3)

  def test_blockwise_is_rejected_naming_the_pe(self):
    model = Decoder(DecoderConfig(pe="cope", **_TINY), rngs=nnx.Rngs(0))
    tokens = jnp.zeros((1, 5), jnp.int32)
    with self.assertRaisesRegex(ValueError, "pe='cope' does not support blockwise"):
      model(tokens, attention="blockwise")

  def test_failures_name_the_field(self):
    for bad in (0, -3, 2.5, True):
      with self.subTest(bad=bad):
        with self.assertRaisesRegex(ValueError, "max_position must be a positive integer"):
          CopeConfig(max_position=bad)


if __name__ == "__main__":
  absltest.main()
