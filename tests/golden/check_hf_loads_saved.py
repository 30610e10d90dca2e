"""Checks that transformers loads what pejax writes (save_pretrained, export) to the same numbers.

Two steps, two environments (pejax never depends on torch/transformers)::

    python tests/golden/check_hf_loads_saved.py write /tmp/saved          # pejax's venv
    /tmp/ref/bin/python tests/golden/check_hf_loads_saved.py check /tmp/saved \
        > tests/hf/transformers_loads_saved.json                           # torch + transformers

``write`` re-saves every fixture of ``tests/hf/fixtures`` (loaded with pejax: each is written
back as its own family, Phi-3 with fused tensors), two models built in pejax itself (an untied
one with pejax's sqrt(d_model) embedding scale, folded into the stored embedding, and a YaRN
one), and two trained runs exported with :func:`pejax.hf.export.export_run`: launch.py's default
model (tied embeddings with the scale: written untied) trained 3 steps on the byte-level stdlib
corpus, and a run fine-tuned 2 steps from the Phi-3 fixture with full rotary (given a byte-level
``tokenizer.json``). Each directory gets pejax's float32 logits of the fixture prompts, and the
exported ones pejax's token ids of a few strings (non-ASCII included).

``check`` loads each directory with ``AutoModelForCausalLM`` (float32, eager attention) and
prints the max relative logit difference per model (max |diff| / max |logit|), the family
transformers read, and for the exports whether ``AutoTokenizer`` gives pejax's ids and decodes
them back to the strings.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "hf" / "fixtures"
TOKEN_IDS_FILE = "pejax_token_ids.json"
# Strings whose ids the exported tokenizers must reproduce (ASCII, 2-, 3- and 4-byte UTF-8,
# control bytes, repeated spaces).
TEXTS = ("def main():\n    return 0", "héllo wörld", "日本語のテキスト", "emoji 🙂👍🏽",
         "\x00\x01\t  two  spaces\r\n")
# A tiny launch.py run: what the doc's "from a run to a Hugging Face checkpoint" trains.
TINY_RUN = ["--steps=3", "--train_len=16", "--config.model.num_layers=1",
            "--config.model.d_model=32", "--config.model.num_heads=2",
            "--config.data.batch_size=2", "--config.optim.warmup_steps=1",
            "--config.train.checkpoint_every=3", "--config.eval.num_tokens=64", "--eval_lens=16"]


def _train_runs(scratch: pathlib.Path) -> dict:
  """Trains the two runs (launch.py in-process); returns ``{export name: run directory}``."""
  sys.path.insert(0, str(ROOT))
  import launch  # pylint: disable=g-import-not-at-top
  import pejax.hf  # pylint: disable=g-import-not-at-top
  runs = {"run_export_launch_default": scratch / "launch_default"}
  if launch.run(["launch.py", *TINY_RUN, f"--workdir={runs['run_export_launch_default']}"]):
    raise RuntimeError("training the launch.py run failed")
  source = scratch / "phi3_with_byte_tokenizer"
  shutil.copytree(FIXTURES / "phi3_default", source)
  pejax.hf.ByteTokenizer().save(source)
  text = scratch / "text.txt"  # Small: fine-tuning tokenizes the whole corpus first.
  text.write_text("def main():\n    return 'héllo wörld'\n" * 200, encoding="utf-8")
  runs["run_export_phi3_finetuned"] = scratch / "phi3_finetuned"
  if launch.run(["launch.py", f"--init_from_hf={source}", f"--data={text}", "--steps=2",
                 "--train_len=16",
                 "--config.data.batch_size=2", "--config.optim.warmup_steps=1",
                 "--config.train.checkpoint_every=2", "--config.eval.num_tokens=64",
                 "--eval_lens=16", f"--workdir={runs['run_export_phi3_finetuned']}"]):
    raise RuntimeError("fine-tuning from the Phi-3 fixture failed")
  return runs


def write(out: pathlib.Path) -> None:
  import jax.numpy as jnp
  from flax import nnx
  import pejax
  import pejax.hf
  from pejax.encodings.rope_scaling import YaRNScaling
  from pejax.hf import export
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
  with tempfile.TemporaryDirectory() as scratch:
    for name, workdir in _train_runs(pathlib.Path(scratch)).items():
      result = export.export_run(workdir, out / name)
      run = pejax.load_run(workdir)
      np.save(out / name / "pejax_logits.npy", np.asarray(run.model(prompts)))
      ids = {text: [int(i) for i in run.tokenizer.encode(text)] for text in TEXTS}
      (out / name / TOKEN_IDS_FILE).write_text(json.dumps(ids, ensure_ascii=False, indent=1))
      print(result.summary)


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
    entry = {"model_type": model.config.model_type,
             "max_rel_logit_diff": float(np.abs(logits - ref).max() / np.abs(ref).max())}
    if (path / TOKEN_IDS_FILE).exists():
      tokenizer = transformers.AutoTokenizer.from_pretrained(path)
      ids = json.loads((path / TOKEN_IDS_FILE).read_text())
      entry["tokenizer_class"] = type(tokenizer).__name__
      entry["tokenizer_ids_equal"] = all(
          tokenizer(text)["input_ids"] == want
          and tokenizer(text, add_special_tokens=False)["input_ids"] == want
          for text, want in ids.items())
      entry["tokenizer_decodes_back"] = all(
          tokenizer.decode(want) == text for text, want in ids.items())
      entry["tokenizer_texts"] = len(ids)
    results["models"][path.name] = entry
  print(json.dumps(results, indent=1))


if __name__ == "__main__":
  {"write": write, "check": check}[sys.argv[1]](pathlib.Path(sys.argv[2]))
