"""Checks that transformers loads what ``pejax.hf.save_pretrained`` writes, to the same logits.

Two steps, two environments (pejax never depends on torch/transformers)::

    python tests/golden/check_hf_loads_saved.py write /tmp/saved          # pejax's venv
    /tmp/ref/bin/python tests/golden/check_hf_loads_saved.py check /tmp/saved \
        > tests/hf/transformers_loads_saved.json                           # torch + transformers

``write`` re-saves every fixture of ``tests/hf/fixtures`` (loaded with pejax) and two models
built in pejax itself (an untied one with pejax's sqrt(d_model) embedding scale, folded into the
stored embedding, and a YaRN one), each with pejax's float32 logits of the fixture prompts.
``check`` loads each directory with ``AutoModelForCausalLM`` (float32, eager attention) and
prints the max relative logit difference per model (max |diff| / max |logit|).
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "hf" / "fixtures"


def write(out: pathlib.Path) -> None:
  import jax.numpy as jnp
  from flax import nnx
  import pejax.hf
  from pejax.encodings.rope_scaling import YaRNScaling
  from pejax.nn import Decoder, DecoderConfig, RotaryConfig
  expected = json.loads((FIXTURES / "expected.json").read_text())
  prompts = jnp.asarray(expected["prompts"], jnp.int32)
  models = {name: pejax.hf.from_pretrained(FIXTURES / name) for name in expected["cases"]}
  models["pejax_native_untied"] = Decoder(
      DecoderConfig(num_layers=2, d_model=64, num_heads=4, num_kv_heads=2,
                    tie_embeddings=False), rngs=nnx.Rngs(0))
  models["pejax_native_yarn_qwen3"] = Decoder(
      DecoderConfig(num_layers=2, d_model=64, num_heads=4, explicit_head_dim=32, qk_norm=True,
                    scale_embeddings=False, mlp_dim=80,
                    pe=RotaryConfig(base=1e6, scaling=YaRNScaling(4.0, 16))), rngs=nnx.Rngs(1))
  for name, model in models.items():
    path = pejax.hf.save_pretrained(model, out / name)
    np.save(pathlib.Path(path) / "pejax_logits.npy", np.asarray(model(prompts)))
    print(name, path)


def check(out: pathlib.Path) -> None:
  import torch
  import transformers
  expected = json.loads((FIXTURES / "expected.json").read_text())
  results = {"transformers": transformers.__version__, "torch": torch.__version__, "models": {}}
  for path in sorted(p for p in out.iterdir() if p.is_dir()):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
      logits = model(torch.tensor(expected["prompts"])).logits.float().numpy()
    ref = np.load(path / "pejax_logits.npy")
    results["models"][path.name] = {
        "model_type": model.config.model_type,
        "max_rel_logit_diff": float(np.abs(logits - ref).max() / np.abs(ref).max())}
  print(json.dumps(results, indent=1))


if __name__ == "__main__":
  {"write": write, "check": check}[sys.argv[1]](pathlib.Path(sys.argv[2]))
