"""Regenerates ``tests/nn/llama4_irope_goldens.json`` from Hugging Face ``transformers``' Llama 4.

Not run by the test suite (pejax never depends on torch/transformers). To reproduce (the
versions the committed file was made with: torch 2.13.0 CPU, transformers 5.25.0)::

    /work/refvenv/bin/python tests/golden/make_llama4_irope_goldens.py \
        > tests/nn/llama4_irope_goldens.json

A tiny random ``Llama4ForCausalLM`` (text only, every layer a dense SwiGLU MLP: ``moe_layers=[]``)
with Llama 4's iRoPE: layers 0-2 use interleaved (complex-form) RoPE, chunked attention
(``attention_chunk_size=8``) and the weightless L2 QK-norm; layer 3 is global NoPE with
attention-temperature tuning. ``floor_scale=4`` and ``attn_scale=0.5`` make the tuning change
the queries within 24 tokens (Llama 4's own 8192 / 0.1 would leave it at 1), and 24 tokens make
three chunks. Eager attention, float32.

The weights are the model's random initialization (``initializer_range=0.2``, so that attention
is far from uniform; norm weights drawn around 1) rounded to float16, so that the JSON can hold
them exactly as base64 float16 (little-endian) and pejax loads the very numbers HF ran with. The
JSON holds the token ids, every weight under its HF name with its shape, HF's logits and the
hidden state after each layer (base64 float32), plus the config.
"""

import base64
import json

import numpy as np
import torch
import transformers
from transformers import Llama4ForCausalLM, Llama4TextConfig

SEED = 0
BATCH, LENGTH = 2, 24


def _b64(array: np.ndarray, dtype) -> str:
  return base64.b64encode(np.ascontiguousarray(array, dtype=np.dtype(dtype).newbyteorder("<"))
                          .tobytes()).decode("ascii")


def main() -> None:
  torch.manual_seed(SEED)
  config = Llama4TextConfig(
      vocab_size=64, hidden_size=32, intermediate_size=64, intermediate_size_mlp=64,
      num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
      max_position_embeddings=256, rms_norm_eps=1e-5, initializer_range=0.2,
      tie_word_embeddings=False, moe_layers=[], use_qk_norm=True, no_rope_layer_interval=4,
      attention_chunk_size=8, attn_temperature_tuning=True, floor_scale=4, attn_scale=0.5,
      rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
      attn_implementation="eager")
  model = Llama4ForCausalLM(config).eval()
  weights = {}
  with torch.no_grad():
    for name, param in model.named_parameters():
      if name.endswith("norm.weight"):
        param.copy_(1.0 + 0.2 * torch.randn_like(param))
      param.copy_(param.to(torch.float16).to(torch.float32))
      weights[name] = param.detach().numpy().astype(np.float16)
  tokens = torch.randint(0, config.vocab_size, (BATCH, LENGTH), generator=torch.Generator()
                         .manual_seed(SEED + 1))
  with torch.no_grad():
    out = model(tokens, output_hidden_states=True)
  logits = out.logits.numpy().astype(np.float32)
  hidden = np.stack([h.numpy() for h in out.hidden_states]).astype(np.float32)  # [N + 1, B, L, E]
  payload = {
      "source": (f"transformers {transformers.__version__}, torch {torch.__version__}: "
                 "Llama4ForCausalLM, tests/golden/make_llama4_irope_goldens.py"),
      "config": {key: getattr(config, key) for key in (
          "vocab_size", "hidden_size", "intermediate_size_mlp", "num_hidden_layers",
          "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
          "no_rope_layers", "layer_types", "attention_chunk_size", "use_qk_norm",
          "attn_temperature_tuning", "floor_scale", "attn_scale", "tie_word_embeddings")},
      "rope_theta": config.rope_parameters["rope_theta"],
      "tokens": tokens.tolist(),
      "weights": {name: {"shape": list(w.shape), "float16": _b64(w, np.float16)}
                  for name, w in weights.items()},
      "logits": {"shape": list(logits.shape), "float32": _b64(logits, np.float32)},
      "hidden_states": {"shape": list(hidden.shape), "float32": _b64(hidden, np.float32)},
  }
  print(json.dumps(payload, indent=1))


if __name__ == "__main__":
  main()
