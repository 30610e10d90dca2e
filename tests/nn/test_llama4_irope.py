"""pejax's iRoPE decoder reproduces Hugging Face's Llama 4 text model, layer by layer and logits.

The golden (``llama4_irope_goldens.json``, made by ``tests/golden/make_llama4_irope_goldens.py``
with transformers 5.25.0 / torch 2.13.0 CPU) is a tiny random ``Llama4ForCausalLM`` with dense
MLPs: layers 0-2 RoPE (interleaved) + chunked attention (C = 8) + L2 QK-norm, layer 3 global NoPE
with attention-temperature tuning (floor_scale 4, attn_scale 0.5 so it acts within 24 tokens).
Its float16-exact weights are loaded into ``Decoder(DecoderConfig(..., **irope_pattern(4, ...)))``
and the hidden state after every layer and the logits must match to float32 rounding, with dense
and blockwise attention, and token-by-token KV-cache decoding must give the same logits.
"""

from __future__ import annotations

import base64
import functools
import json
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.hf.weight_mapping import weight_entries
from pejax.nn import Decoder, DecoderConfig, irope_pattern

GOLDEN = pathlib.Path(__file__).with_name("llama4_irope_goldens.json")
# Float32 rounding over 4 layers (measured max |diff|, dense and blockwise: 8.5e-6 on hidden
# states, 4.5e-6 on logits of magnitude up to 4.4).
ATOL = 2e-5


def _decode(entry: dict, key: str) -> np.ndarray:
  dtype = np.dtype(np.float16 if key == "float16" else np.float32).newbyteorder("<")
  array = np.frombuffer(base64.b64decode(entry[key]), dtype=dtype)
  return array.reshape(entry["shape"]).astype(np.float32)


@functools.lru_cache(maxsize=None)
def _golden() -> dict:
  return json.loads(GOLDEN.read_text())


def _config(**overrides) -> DecoderConfig:
  hf = _golden()["config"]
  fields = irope_pattern(hf["num_hidden_layers"], chunk_size=hf["attention_chunk_size"],
                         floor_scale=hf["floor_scale"], attn_scale=hf["attn_scale"])
  fields.update(overrides)
  return DecoderConfig(
      vocab_size=hf["vocab_size"], num_layers=hf["num_hidden_layers"],
      d_model=hf["hidden_size"], num_heads=hf["num_attention_heads"],
      num_kv_heads=hf["num_key_value_heads"], explicit_head_dim=hf["head_dim"],
      mlp="swiglu", mlp_dim=hf["intermediate_size_mlp"], tie_embeddings=False,
      scale_embeddings=False, norm_epsilon=hf["rms_norm_eps"], **fields)


def _model(**overrides) -> Decoder:
  """The golden's weights in a pejax decoder (HF Llama names, ``feed_forward`` for ``mlp``)."""
  config = _config(**overrides)
  weights = _golden()["weights"]
  entries = {e.path: e for e in weight_entries(config, "llama")}
  model = Decoder(config, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(model)
  leaves = []
  used = set()
  for path, variable in nnx.to_flat_state(state):
    entry = entries[tuple(path)]
    name = entry.name.replace(".mlp.", ".feed_forward.")
    value = _decode(weights[name], "float16")
    used.add(name)
    leaves.append((path, variable.replace(jnp.asarray(value.T if entry.transpose else value))))
  assert used == set(weights), sorted(set(weights) - used)  # Every HF weight has its place.
  return nnx.merge(graphdef, nnx.from_flat_state(leaves))


class Llama4GoldenTest(parameterized.TestCase):

  def test_pattern_is_hugging_faces(self):
    hf = _golden()["config"]
    config = _config()
    self.assertEqual([pe != "none" for pe in config.pe_name.split(",")],
                     [bool(x) for x in hf["no_rope_layers"]])
    self.assertEqual(config.layer_chunk_sizes,
                     tuple(8 if kind == "chunked_attention" else None
                           for kind in hf["layer_types"]))
    self.assertEqual(config.layer_qk_norms, ("l2", "l2", "l2", False))
    self.assertEqual(config.layer_query_scalings, ("none", "none", "none", "llama4"))

  @parameterized.named_parameters(("dense", "dense", 512), ("blockwise_misaligned", "blockwise", 5),
                                  ("blockwise_aligned", "blockwise", 8))
  def test_every_layer_and_the_logits_match(self, attention, block_size):
    golden = _golden()
    model = _model(block_size=block_size)
    tokens = jnp.asarray(golden["tokens"], jnp.int32)
    hidden = _decode(golden["hidden_states"], "float32")  # [N + 1, B, L, E]
    positions = jnp.arange(tokens.shape[1], dtype=jnp.int32)[None]

    @jax.jit
    def layers(tokens):
      x = model.embed(tokens)
      outs = [x]
      for block, pe in zip(model.blocks, model.layer_pes()):
        x = block(x, pe=pe, positions=positions, segment_ids=None, bias=None,
                  implementation=attention)
        outs.append(x)
      return outs

    outs = layers(tokens)
    # HF's last hidden state is after the final norm; the layer outputs before it are raw.
    outs[-1] = model.final_norm(outs[-1])
    for layer, out in enumerate(outs):  # 0: embedding, 1-3: RoPE + chunks, 4: NoPE + temperature.
      np.testing.assert_allclose(out, hidden[layer], atol=ATOL, err_msg=f"hidden state {layer}")
    logits = jax.jit(lambda t: model(t, attention=attention))(tokens)
    np.testing.assert_allclose(logits, _decode(golden["logits"], "float32"), atol=ATOL)

  def test_chunks_and_temperature_matter(self):
    # Without chunks or without the temperature the logits move far from HF's: both are tested.
    golden = _golden()
    tokens = jnp.asarray(golden["tokens"], jnp.int32)
    expected = _decode(golden["logits"], "float32")
    for overrides in (dict(chunk_size=None), dict(query_scaling_strength=0.0)):
      logits = nnx.jit(lambda m, t: m(t, attention="dense"))(_model(**overrides), tokens)
      self.assertGreater(float(jnp.abs(logits - expected).max()), 1e-2, overrides)

  def test_kv_cache_decoding_matches_hf(self):
    golden = _golden()
    model = _model()
    tokens = jnp.asarray(golden["tokens"], jnp.int32)
    batch, length = tokens.shape
    cache = model.init_cache(batch_size=batch, max_length=length)
    prefill = nnx.jit(lambda m, t, c: m.prefill(t, None, c))
    step = nnx.jit(lambda m, t, p, c: m.decode_step(t, p, c))
    logits, cache = prefill(model, tokens[:, :5], cache)  # Crosses the chunk boundary at 8.
    outs = [logits]
    for t in range(5, length):
      logits, cache = step(model, tokens[:, t:t + 1], jnp.full((batch, 1), t, jnp.int32), cache)
      outs.append(logits)
    np.testing.assert_allclose(jnp.concatenate(outs, axis=1),
                               _decode(golden["logits"], "float32"), atol=ATOL)


if __name__ == "__main__":
  absltest.main()
