"""Regenerates ``tests/encodings/hf_rope_goldens.json`` from Hugging Face ``transformers``.

Not run by the test suite (pejax never depends on torch/transformers). To reproduce::

    python -m venv /tmp/ref && /tmp/ref/bin/pip install torch transformers
    /tmp/ref/bin/python tests/golden/make_hf_rope_goldens.py > tests/encodings/hf_rope_goldens.json

Each case is a ``config.json``-style dict modeled on a released checkpoint family, and the
inverse frequencies / attention factor that ``transformers.modeling_rope_utils.
ROPE_INIT_FUNCTIONS`` returns for it at the listed ``seq_len`` values.
"""

import copy
import json

import numpy as np
import transformers
from transformers import modeling_rope_utils

_PHI3_SHORT = [float(x) for x in np.round(np.linspace(1.0, 1.3, 48), 4)]
_PHI3_LONG = [float(x) for x in np.round(np.geomspace(1.0, 60.0, 48), 4)]

CASES = {
    "llama3.1-8b (older form)": dict(
        hidden_size=4096, num_attention_heads=32, max_position_embeddings=131072,
        rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "qwen2.5-yarn (legacy 'type' key)": dict(
        hidden_size=3584, num_attention_heads=28, max_position_embeddings=32768,
        rope_theta=1000000.0,
        rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
    "deepseek-style yarn with mscale": dict(
        hidden_size=1024, num_attention_heads=16, head_dim=64, max_position_embeddings=163840,
        rope_theta=10000.0,
        rope_scaling={"type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.5,
                      "beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 4096}),
    "gpt-oss-style yarn, truncate false (newer form)": dict(
        hidden_size=2880, num_attention_heads=64, head_dim=64, max_position_embeddings=131072,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 4096}),
    "phi3-128k-style longrope (top-level original)": dict(
        hidden_size=3072, num_attention_heads=32, max_position_embeddings=131072,
        original_max_position_embeddings=4096, rope_theta=10000.0,
        rope_scaling={"type": "longrope", "short_factor": _PHI3_SHORT,
                      "long_factor": _PHI3_LONG}),
    "phi2-style partial rotary (older form)": dict(
        hidden_size=2560, num_attention_heads=32, max_position_embeddings=2048,
        rope_theta=10000.0, partial_rotary_factor=0.4),
    "partial rotary inside rope_parameters (newer form)": dict(
        hidden_size=512, num_attention_heads=8, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 50000.0,
                         "partial_rotary_factor": 0.5}),
    "dynamic ntk (older form)": dict(
        hidden_size=4096, num_attention_heads=32, max_position_embeddings=4096,
        rope_theta=10000.0, rope_scaling={"type": "dynamic", "factor": 2.0}),
    "linear (newer form)": dict(
        hidden_size=2048, num_attention_heads=16, max_position_embeddings=16384,
        rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}),
}
SEQ_LENS = [None, 4096, 5000, 70000]


def main():
  out = {}
  for name, config_dict in CASES.items():
    config = transformers.LlamaConfig(**copy.deepcopy(config_dict))
    config.standardize_rope_params()
    rope_type = config.rope_parameters["rope_type"]
    fn = modeling_rope_utils.ROPE_INIT_FUNCTIONS.get(rope_type)
    results = []
    for seq_len in SEQ_LENS:
      if rope_type == "default":
        # transformers 5 keeps the default init in each model; Phi's handles partial rotary.
        from transformers.models.phi import modeling_phi
        inv_freq, attention = modeling_phi.PhiRotaryEmbedding.compute_default_rope_parameters(
            config)
      else:
        inv_freq, attention = fn(config, "cpu", seq_len=seq_len)
      results.append({"seq_len": seq_len, "inv_freq": [float(v) for v in inv_freq.tolist()],
                      "attention_factor": float(attention)})
    out[name] = {"config": config_dict, "results": results}
  print(json.dumps({"transformers_version": transformers.__version__, "cases": out}, indent=1))


if __name__ == "__main__":
  main()
