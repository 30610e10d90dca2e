"""The memory table of docs/long_context.md: KV-cache GiB of four open 7-8B models.

``python -m pejax.hf.kv_cache_memory_table`` prints it; ``tests/hf/test_kv_cache_memory.py``
checks that docs/long_context.md holds the printed text between its ``kv_cache_memory``
markers. The model configs are the fields of their Hugging Face ``config.json`` files (values
as published on the Hub), read by :func:`pejax.hf.decoder_config_from_hf` as the files
themselves would be.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import sys
from typing import Any, Optional

from pejax.hf.config_mapping import decoder_config_from_hf
from pejax.hf.kv_cache_memory import kv_cache_memory
from pejax.nn.decoder_config import DecoderConfig

# The config.json fields of four open models that set the shape of their KV cache (plus the
# rest of the architecture, so that decoder_config_from_hf reads them as it reads the files).
LLAMA_2_7B = {  # meta-llama/Llama-2-7b-hf (no rope_theta in the file: 10000.0).
    "model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
    "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 32, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
    "rope_scaling": None, "hidden_act": "silu", "pretraining_tp": 1,
    "tie_word_embeddings": False, "torch_dtype": "float16",
}
LLAMA_3_1_8B = {  # meta-llama/Llama-3.1-8B.
    "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "pretraining_tp": 1,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
QWEN2_5_7B = {  # Qwen/Qwen2.5-7B (sliding_window is set but use_sliding_window is false).
    "model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
    "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "max_position_embeddings": 131072, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 131072, "use_sliding_window": False,
    "max_window_layers": 28, "use_mrope": False, "hidden_act": "silu",
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
MISTRAL_7B_V0_1 = {  # mistralai/Mistral-7B-v0.1 (a 4096-token window in every layer).
    "model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0, "sliding_window": 4096, "hidden_act": "silu",
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
MISTRAL_7B_V0_3 = {  # mistralai/Mistral-7B-v0.3: v0.1's shape without the window.
    **MISTRAL_7B_V0_1, "vocab_size": 32768, "rope_theta": 1000000.0, "sliding_window": None,
}
KNOWN_CONFIGS = {
    "Llama-2-7B": LLAMA_2_7B,
    "Llama-3.1-8B": LLAMA_3_1_8B,
    "Qwen2.5-7B": QWEN2_5_7B,
    "Mistral-7B-v0.1": MISTRAL_7B_V0_1,
    "Mistral-7B-v0.3": MISTRAL_7B_V0_3,
}

# Context lengths of the table: 4K, 32K and 128K tokens.
TABLE_LENGTHS = (4096, 32768, 131072)
GIB = 2**30


def _gib(num_bytes: int) -> str:
  return f"{num_bytes / GIB:.2f}"


def _window_text(decoder: DecoderConfig) -> str:
  windows = set(decoder.layer_windows)
  if windows == {None}:
    return "none"
  return ", ".join("global" if w is None else str(w) for w in sorted(windows, key=str))


def markdown_table(configs: Optional[Mapping[str, Mapping[str, Any]]] = None, *,
                   lengths: Sequence[int] = TABLE_LENGTHS) -> str:
  """The docs/long_context.md table: KV-cache GiB per model and length, batch 1, bfloat16 and int8.

  Args:
    configs: model name -> ``config.json`` dict; default :data:`KNOWN_CONFIGS`.
    lengths: the context lengths (tokens) of the columns.

  Returns:
    A Markdown table plus one line for Llama-2-7B at batch 16 and the longest length (when
    Llama-2-7B is among the configs), ending with a newline.
  """
  configs = KNOWN_CONFIGS if configs is None else configs
  names = [f"{n // 1024}K" if n % 1024 == 0 else str(n) for n in lengths]
  header = (["model", "N x K x D", "window"] + [f"bf16 {n}" for n in names]
            + [f"int8 {n}" for n in names])
  lines = ["| " + " | ".join(header) + " |",
           "|:--|:--|:--|" + "--:|" * (2 * len(lengths))]
  for model, config in configs.items():
    decoder = decoder_config_from_hf(config)
    cells = [model, f"{decoder.num_layers} x {decoder.kv_heads} x {decoder.head_dim}",
             _window_text(decoder)]
    for dtype in ("bfloat16", "int8"):
      cells += [_gib(kv_cache_memory(config, seq_len=n, dtype=dtype)) for n in lengths]
    lines.append("| " + " | ".join(cells) + " |")
  if "Llama-2-7B" in configs:
    config, n = configs["Llama-2-7B"], max(lengths)
    bf16 = kv_cache_memory(config, seq_len=n, batch_size=16, dtype="bfloat16")
    int8 = kv_cache_memory(config, seq_len=n, batch_size=16, dtype="int8")
    lines += ["", f"Llama-2-7B, batch 16 at {names[lengths.index(n)]} tokens: {_gib(bf16)} GiB "
              f"(= {bf16 / 2**40:.2f} TiB) in bf16, {_gib(int8)} GiB in int8."]
  return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Prints :func:`markdown_table` (``python -m pejax.hf.kv_cache_memory_table``).

  Args:
    argv: command-line words after the program name; none are accepted.

  Returns:
    The exit status: 0, or 2 for unexpected arguments.
  """
  argv = sys.argv[1:] if argv is None else list(argv)
  if argv:
    print(f"usage: python -m pejax.hf.kv_cache_memory_table (no arguments), got {argv}",
          file=sys.stderr)
    return 2
  print(markdown_table(), end="")
  return 0


if __name__ == "__main__":
  sys.exit(main())
