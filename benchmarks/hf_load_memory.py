"""Peak resident memory of ``pejax.hf.from_pretrained`` against the checkpoint's size.

Writes a synthetic Llama checkpoint (random float32 weights, untied, default ~0.67 GB: hidden
1024, 8 layers, vocabulary 32000, MLP 2816; ``--shards`` files), then loads it in a fresh
subprocess per dtype and reads the process's peak RSS (``VmHWM`` of ``/proc/self/status``)
after JAX has started (baseline) and after the load::

    python benchmarks/hf_load_memory.py [--layers=8] [--keep=DIR]

Prints one JSON line per dtype: file bytes, baseline, peak, peak - baseline, and the ratios of
the increase to the file size. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, os, sys, time
def status(key):
  for line in open("/proc/self/status"):
    if line.startswith(key + ":"):
      return int(line.split()[1]) * 1024
import jax, jax.numpy as jnp
jnp.zeros(1).block_until_ready()
import pejax.hf
baseline = status("VmHWM")
start = time.time()
model = pejax.hf.from_pretrained(sys.argv[1], dtype=None if sys.argv[2] == "none" else sys.argv[2])
jax.block_until_ready(jax.tree.leaves(__import__("flax").nnx.state(model)))
print(json.dumps({"baseline": baseline, "peak": status("VmHWM"), "rss_after": status("VmRSS"),
                  "seconds": time.time() - start}))
"""


def write_checkpoint(path: pathlib.Path, *, layers: int, hidden: int, vocab: int, mlp: int,
                     shards: int) -> int:
  """Writes config.json + safetensors shards; returns the total bytes of the weight files."""
  from safetensors.numpy import save_file
  rng = np.random.default_rng(0)
  path.mkdir(parents=True, exist_ok=True)
  heads = hidden // 64
  config = {"model_type": "llama", "vocab_size": vocab, "hidden_size": hidden,
            "intermediate_size": mlp, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": heads, "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False, "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
  (path / "config.json").write_text(json.dumps(config))
  groups = [{"model.embed_tokens.weight": (vocab, hidden)}]
  for i in range(layers):
    p = f"model.layers.{i}."
    groups.append({p + "self_attn.q_proj.weight": (hidden, hidden),
                   p + "self_attn.k_proj.weight": (hidden, hidden),
                   p + "self_attn.v_proj.weight": (hidden, hidden),
                   p + "self_attn.o_proj.weight": (hidden, hidden),
                   p + "mlp.gate_proj.weight": (mlp, hidden),
                   p + "mlp.up_proj.weight": (mlp, hidden),
                   p + "mlp.down_proj.weight": (hidden, mlp),
                   p + "input_layernorm.weight": (hidden,),
                   p + "post_attention_layernorm.weight": (hidden,)})
  groups.append({"model.norm.weight": (hidden,), "lm_head.weight": (vocab, hidden)})
  per_shard = -(-len(groups) // shards)
  weight_map, total = {}, 0
  for s in range(shards):
    name = ("model.safetensors" if shards == 1 else
            f"model-{s + 1:05d}-of-{shards:05d}.safetensors")
    tensors = {k: rng.standard_normal(shape, dtype=np.float32) * 0.02
               for group in groups[s * per_shard:(s + 1) * per_shard] for k, shape in group.items()}
    save_file(tensors, str(path / name))
    weight_map.update({k: name for k in tensors})
    total += (path / name).stat().st_size
  if shards > 1:
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
  return total


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--layers", type=int, default=8)
  parser.add_argument("--shards", type=int, default=1)
  parser.add_argument("--keep", default="")
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as tmp:
    path = pathlib.Path(args.keep or tmp) / "llama"
    size = write_checkpoint(path, layers=args.layers, hidden=1024, vocab=32000, mlp=2816,
                            shards=args.shards)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    for dtype in ("none", "bfloat16"):
      out = subprocess.run([sys.executable, "-c", _CHILD, str(path), dtype], env=env,
                           capture_output=True, text=True, check=True)
      r = json.loads(out.stdout.strip().splitlines()[-1])
      increase = r["peak"] - r["baseline"]
      print(json.dumps({"dtype": "float32 (file)" if dtype == "none" else dtype,
                        "file_bytes": size, "shards": args.shards, "baseline_rss": r["baseline"],
                        "peak_rss": r["peak"], "peak_increase": increase,
                        "increase_over_file": round(increase / size, 3),
                        "peak_over_file": round(r["peak"] / size, 3),
                        "load_seconds": round(r["seconds"], 2)}))


if __name__ == "__main__":
  main()
