"""pejax.kv_cache_memory: golden figures, properties, agreement with the real cache, bad inputs.

GiB = 2^30 bytes, TiB = 2^40. Llama-2-7B (32 layers x 32 KV heads x head dim 128) holds 512 KiB
per token in 16-bit floats: 2 GiB at 4K tokens, 16 GiB at 32K, 64 GiB at 128K, 1 TiB for a batch
of 16 at 128K.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

import pejax
from pejax.hf import kv_cache_memory_table as table
from pejax.nn import Decoder, DecoderConfig

GIB, TIB = 2**30, 2**40
ROOT = pathlib.Path(__file__).resolve().parents[2]

# A tiny GQA model: 2 layers, 4 query heads, 2 KV heads, head dim 8.
TINY = DecoderConfig(vocab_size=16, num_layers=2, d_model=32, num_heads=4, num_kv_heads=2)
TINY_HF = {"model_type": "qwen2", "vocab_size": 8, "hidden_size": 32, "intermediate_size": 8,
           "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
           "rope_theta": 1e4, "use_sliding_window": True, "sliding_window": 16,
           "max_window_layers": 2}


def memory(config, seq_len, batch_size=1, dtype="bfloat16"):
  return pejax.kv_cache_memory(config, seq_len=seq_len, batch_size=batch_size, dtype=dtype)


class GoldenTest(parameterized.TestCase):

  @parameterized.named_parameters(("4k", 4096, 2 * GIB), ("32k", 32768, 16 * GIB),
                                  ("128k", 131072, 64 * GIB))
  def test_llama_2_7b_in_16_bit_floats(self, seq_len, expected):
    for dtype in ("bfloat16", "float16", jnp.bfloat16, np.float16):
      self.assertEqual(memory(table.LLAMA_2_7B, seq_len, dtype=dtype), expected)
    self.assertEqual(memory(table.LLAMA_2_7B, seq_len, dtype="float32"), 2 * expected)

  def test_llama_2_7b_batch_16_at_128k_is_one_tib(self):
    self.assertEqual(memory(table.LLAMA_2_7B, 131072, batch_size=16), TIB)

  def test_other_models(self):
    # The example of docs/long_context.md (Llama-3.1-8B, 8 KV heads) and its table.
    self.assertEqual(memory(table.LLAMA_3_1_8B, 131072), 16 * GIB)
    self.assertEqual(memory(table.LLAMA_3_1_8B, 131072, dtype="int8"), 8.25 * GIB)
    self.assertEqual(memory(table.QWEN2_5_7B, 131072), 7 * GIB)  # 28 x 4 x 128, all global.
    self.assertEqual(memory(table.MISTRAL_7B_V0_3, 131072), 16 * GIB)
    # Mistral-7B-v0.1: a 4096-token window in each of its 32 layers (8 KV heads).
    self.assertEqual(memory(table.MISTRAL_7B_V0_1, 1000), 32 * 2 * 1000 * 8 * 128 * 2)
    for seq_len in (4096, 32768, 131072):
      self.assertEqual(memory(table.MISTRAL_7B_V0_1, seq_len), GIB // 2)

  def test_known_configs_hold_the_published_shapes(self):
    shapes = {name: tuple(c.get(k) for k in ("num_hidden_layers", "num_attention_heads",
                                             "num_key_value_heads", "hidden_size"))
              for name, c in table.KNOWN_CONFIGS.items()}
    self.assertEqual(shapes, {"Llama-2-7B": (32, 32, 32, 4096), "Llama-3.1-8B": (32, 32, 8, 4096),
                              "Qwen2.5-7B": (28, 28, 4, 3584),
                              "Mistral-7B-v0.1": (32, 32, 8, 4096),
                              "Mistral-7B-v0.3": (32, 32, 8, 4096)})
    self.assertEqual((table.MISTRAL_7B_V0_1["sliding_window"],
                      table.MISTRAL_7B_V0_3["sliding_window"]), (4096, None))
    self.assertFalse(table.QWEN2_5_7B["use_sliding_window"])
    self.assertNotIn("rope_theta", table.LLAMA_2_7B)  # As in the real file.


class PropertyTest(parameterized.TestCase):

  @parameterized.product(config=(TINY, TINY_HF), dtype=("float32", "bfloat16", "int8", "int4"))
  def test_linear_in_batch(self, config, dtype):
    for seq_len in (5, 40):
      self.assertEqual(memory(config, seq_len, 3, dtype), 3 * memory(config, seq_len, 1, dtype))

  @parameterized.parameters("float32", "bfloat16", "int8", "fp8", "int4")
  def test_linear_in_length_for_global_layers(self, dtype):
    self.assertEqual(memory(TINY, 2000, dtype=dtype), 2 * memory(TINY, 1000, dtype=dtype))

  def test_windowed_layers_stop_growing_at_the_window(self):
    windowed = DecoderConfig(vocab_size=16, num_layers=2, d_model=32, num_heads=4,
                             num_kv_heads=2, sliding_window=16)
    per_token = 2 * 2 * 2 * 8 * 2  # Layers x (keys, values) x K x D x bytes.
    self.assertEqual(memory(windowed, 10), 10 * per_token)
    self.assertEqual(memory(windowed, 16), 16 * per_token)
    self.assertEqual(memory(windowed, 17), memory(windowed, 16))
    self.assertEqual(memory(windowed, 10**6), memory(windowed, 16))

  def test_qwen2_window_layers_follow_transformers(self):
    # Qwen2Config: layers with index >= max_window_layers slide, only if use_sliding_window.
    per_layer_token = 2 * 2 * 8 * 2  # (keys, values) x K x D x bytes.
    self.assertEqual(memory(TINY_HF, 64), (2 * 64 + 2 * 16) * per_layer_token)
    layer_types = ["sliding_attention", "full_attention"] * 2
    self.assertEqual(memory({**TINY_HF, "layer_types": layer_types}, 64),
                     (2 * 64 + 2 * 16) * per_layer_token)
    off = {**TINY_HF, "use_sliding_window": False}
    self.assertEqual(memory(off, 64), 4 * 64 * per_layer_token)
    self.assertEqual(memory({**off, "layer_types": layer_types}, 64), 4 * 64 * per_layer_token)

  @parameterized.parameters("int8", "float8_e4m3fn", "fp8", jnp.int8, jnp.float8_e4m3fn)
  def test_one_byte_is_half_of_bf16_plus_scales(self, dtype):
    for config, layers, kv_heads in ((TINY, 2, 2), (table.LLAMA_2_7B, 32, 32)):
      scales = layers * 2 * 3 * 100 * kv_heads * 4  # N x (k, v) x B x T x K x float32.
      self.assertEqual(memory(config, 100, 3, dtype), memory(config, 100, 3) // 2 + scales)

  def test_int4_is_a_quarter_of_bf16_plus_scales(self):
    scales = 2 * 2 * 100 * 2 * 4
    self.assertEqual(memory(TINY, 100, dtype="int4"), memory(TINY, 100) // 4 + scales)
    self.assertEqual(memory(TINY, 100, dtype=jnp.int4), memory(TINY, 100, dtype="int4"))
    # Two per byte along the head dim: an odd head dim rounds up (7 -> 4 bytes).
    odd = DecoderConfig(vocab_size=16, num_layers=1, d_model=28, num_heads=4, pe="alibi")
    self.assertEqual(memory(odd, 10, dtype="int4"), 2 * 10 * 4 * (4 + 4))

  def test_gqa_divides_by_the_group_size(self):
    mha = DecoderConfig(vocab_size=16, num_layers=2, d_model=64, num_heads=8)
    for kv_heads in (8, 4, 2, 1):
      gqa = DecoderConfig(vocab_size=16, num_layers=2, d_model=64, num_heads=8,
                          num_kv_heads=kv_heads)
      for dtype in ("bfloat16", "int8"):
        self.assertEqual(memory(gqa, 50, dtype=dtype) * (8 // kv_heads),
                         memory(mha, 50, dtype=dtype))
    hf = {**table.LLAMA_2_7B, "num_key_value_heads": 8}
    self.assertEqual(memory(hf, 4096) * 4, memory(table.LLAMA_2_7B, 4096))

  def test_explicit_head_dim(self):
    # Qwen3-style: head_dim 128 with hidden 1024 / 16 heads (= 64 otherwise).
    qwen3 = {"model_type": "qwen3", "vocab_size": 8, "hidden_size": 1024, "intermediate_size": 8,
             "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 8,
             "head_dim": 128, "rope_theta": 1e6}
    self.assertEqual(memory(qwen3, 10), 2 * 2 * 10 * 8 * 128 * 2)
    self.assertEqual(memory({**qwen3, "head_dim": None}, 10), 2 * 2 * 10 * 8 * 64 * 2)


class AgreesWithTheCacheTest(parameterized.TestCase):

  @parameterized.parameters("float32", "bfloat16", "float16", "int8", "float8_e4m3fn")
  def test_equals_the_bytes_of_init_cache(self, dtype):
    # Keys and values [B, T, K, D], plus float32 scales [B, T, K] when quantized.
    model = Decoder(TINY, rngs=nnx.Rngs(0))
    for batch, seq_len in ((1, 7), (3, 40)):
      cache = model.init_cache(batch, seq_len, dtype=dtype)
      nbytes = sum(x.nbytes for x in jax.tree.leaves(
          (cache.keys, cache.values, cache.key_scales, cache.value_scales)))
      self.assertEqual(memory(TINY, seq_len, batch, dtype), nbytes)

  @parameterized.parameters("bfloat16", "int8")
  def test_equals_a_ring_buffer_of_the_window(self, dtype):
    windowed = DecoderConfig(vocab_size=16, num_layers=2, d_model=32, num_heads=4,
                             num_kv_heads=2, sliding_window=6)
    cache = Decoder(windowed, rngs=nnx.Rngs(0)).init_cache(2, 6, dtype=dtype, eviction="window")
    nbytes = sum(x.nbytes for x in jax.tree.leaves(
        (cache.keys, cache.values, cache.key_scales, cache.value_scales)))
    for seq_len in (6, 100, 10 ** 6):
      self.assertEqual(memory(windowed, seq_len, 2, dtype), nbytes)

  def test_mixed_windows_take_max_length_slots_in_every_layer(self):
    # pejax's cache shares its slots across layers; the figure counts min(T, W) per layer.
    windowed = DecoderConfig(vocab_size=16, num_layers=2, d_model=32, num_heads=4,
                             num_kv_heads=2, sliding_window=(4, None))
    cache = Decoder(windowed, rngs=nnx.Rngs(0)).init_cache(1, 40, dtype=jnp.bfloat16)
    nbytes = sum(x.nbytes for x in jax.tree.leaves((cache.keys, cache.values)))
    self.assertEqual(memory(windowed, 40), nbytes * (4 + 40) // (40 + 40))


class BadInputTest(parameterized.TestCase):

  @parameterized.parameters(0, -1, 1.5, True, "4096", None)
  def test_seq_len(self, value):
    with self.assertRaisesRegex(ValueError, f"seq_len must be a positive integer, got "
                                f"{value!r}"):
      memory(TINY, value)

  @parameterized.parameters(0, -2, 2.0, False)
  def test_batch_size(self, value):
    with self.assertRaisesRegex(ValueError, f"batch_size must be a positive integer, got "
                                f"{value!r}"):
      memory(TINY, 8, value)

  @parameterized.parameters("float64", "int2", "FP8", "bf16", None, np.float64, jnp.int16,
                            object())
  def test_dtype(self, value):
    pattern = r"dtype must be one of .*got " + re.escape(repr(value))
    with self.assertRaisesRegex(ValueError, pattern):
      memory(TINY, 8, dtype=value)

  @parameterized.parameters((None,), ([1, 2],), ("config.json",), (7,))
  def test_config_of_another_type(self, value):
    with self.assertRaisesRegex(ValueError, "config must be a pejax.nn.DecoderConfig or a "
                                f"Hugging Face config.json dict, got {type(value).__name__}"):
      memory(value, 8)

  def test_config_json_missing_a_field(self):
    config = {k: v for k, v in table.LLAMA_2_7B.items() if k != "num_hidden_layers"}
    with self.assertRaisesRegex(ValueError, "config .*must contain 'num_hidden_layers'"):
      memory(config, 8)
    with self.assertRaisesRegex(ValueError, "'num_key_value_heads' must be a positive integer"):
      memory({**table.LLAMA_2_7B, "num_key_value_heads": 0}, 8)

  def test_config_json_of_an_unread_family(self):
    with self.assertRaisesRegex(ValueError, "config .*'model_type' = 'gemma2' is not supported"):
      memory({**table.LLAMA_2_7B, "model_type": "gemma2"}, 8)


class DocumentedTableTest(absltest.TestCase):

  def test_long_context_guide_holds_the_printed_table(self):
    guide = (ROOT / "docs" / "long_context.md").read_text()
    start, end = "<!-- kv_cache_memory_table:start -->\n", "<!-- kv_cache_memory_table:end -->"
    self.assertIn(start, guide)
    copy = guide.split(start, 1)[1].split(end, 1)[0]
    with contextlib.redirect_stdout(io.StringIO()) as out:
      self.assertEqual(table.main([]), 0)
    self.assertEqual(out.getvalue(), copy)
    self.assertEqual(copy, table.markdown_table())
    self.assertIn("| Llama-2-7B | 32 x 32 x 128 | none | 2.00 | 16.00 | 64.00 |", copy)
    self.assertIn("batch 16 at 128K tokens: 1024.00 GiB (= 1.00 TiB)", copy)
    self.assertIn("python -m pejax.hf.kv_cache_memory_table", guide)

  def test_main_rejects_arguments(self):
    with contextlib.redirect_stderr(io.StringIO()):
      self.assertEqual(table.main(["--seq_len=8"]), 2)


if __name__ == "__main__":
  absltest.main()
