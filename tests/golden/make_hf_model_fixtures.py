"""Regenerates ``tests/hf/fixtures/``: tiny random Hugging Face decoders and transformers' outputs.

Not run by the test suite (pejax never depends on torch/transformers). To reproduce::

    python -m venv /tmp/ref && /tmp/ref/bin/pip install torch transformers safetensors tokenizers
    /tmp/ref/bin/python tests/golden/make_hf_model_fixtures.py

For each case (a family x RoPE type, 2 layers, hidden 64) the script builds the model with
transformers from a seeded random init, perturbs every parameter (so biases, norm weights and
QK-norms are not their trivial init and a wrong mapping shows), saves it as a real HF directory
(``config.json`` + ``model.safetensors``; one case sharded with ``model.safetensors.index.json``;
some cases rewritten to the older ``rope_theta`` + ``rope_scaling`` config form; one with a
``tokenizer.json`` built with the ``tokenizers`` package), reloads it from disk with eager
attention in float32, and records in ``expected.json``:

* ``logits``: float32 logits ``[2, 12, V]`` of ``PROMPTS`` (no padding);
* ``greedy``: ``generate(do_sample=False, max_new_tokens=8)`` of ``GEN_PROMPTS`` (three prompts
  of different lengths, left-padded with an attention mask; no stop token), the new tokens only.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import shutil

import numpy as np
import torch
import transformers

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "hf" / "fixtures"
VOCAB = 256
PROMPTS = np.random.RandomState(0).randint(3, VOCAB, size=(2, 12)).tolist()
GEN_PROMPTS = [[5, 17, 99, 200, 33, 7, 250], [42, 8, 120], [3, 77, 91, 15, 60]]
NEW_TOKENS = 8

_COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
               max_position_embeddings=64, bos_token_id=1, eos_token_id=2, pad_token_id=0)
_LONG_SHORT = [1.0, 1.05, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6]
_LONG_LONG = [1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 12.0, 16.0]

# name -> (model class name, config kwargs, options). Options: "older_form" rewrites the saved
# config.json to rope_theta + rope_scaling; "sharded" saves in several files; "tokenizer" adds a
# tokenizer.json.
CASES = {
    "llama_default_untied": ("LlamaForCausalLM", dict(
        tie_word_embeddings=False, vocab_size=320,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        {"tokenizer"}),
    "llama_linear_tied": ("LlamaForCausalLM", dict(
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}),
        {"older_form"}),
    "llama_dynamic": ("LlamaForCausalLM", dict(
        tie_word_embeddings=False, max_position_embeddings=8,
        rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}), set()),
    "llama_yarn": ("LlamaForCausalLM", dict(
        tie_word_embeddings=False, max_position_embeddings=32,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 8}), {"older_form"}),
    "llama_longrope": ("LlamaForCausalLM", dict(
        tie_word_embeddings=False, max_position_embeddings=64,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                         "short_factor": _LONG_SHORT, "long_factor": _LONG_LONG,
                         "original_max_position_embeddings": 8}), set()),
    "llama_llama3": ("LlamaForCausalLM", dict(
        tie_word_embeddings=True, max_position_embeddings=64,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8}), set()),
    "llama_attention_bias": ("LlamaForCausalLM", dict(
        tie_word_embeddings=False, attention_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), set()),
    "mistral_sliding_window": ("MistralForCausalLM", dict(
        tie_word_embeddings=False, sliding_window=4,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), set()),
    "qwen2_biases": ("Qwen2ForCausalLM", dict(
        tie_word_embeddings=True, max_position_embeddings=32,
        rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                         "original_max_position_embeddings": 8}), set()),
    "qwen3_qk_norm_sharded": ("Qwen3ForCausalLM", dict(
        tie_word_embeddings=False, head_dim=32,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), {"sharded"}),
    "phi3_longrope_partial": ("Phi3ForCausalLM", dict(
        tie_word_embeddings=True, num_key_value_heads=4, max_position_embeddings=64,
        original_max_position_embeddings=8,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.75,
                         "short_factor": _LONG_SHORT[:6], "long_factor": _LONG_LONG[:6]}),
        set()),
    "phi3_default": ("Phi3ForCausalLM", dict(
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), set()),
    "gemma": ("GemmaForCausalLM", dict(
        tie_word_embeddings=True, head_dim=32, num_key_value_heads=1, rms_norm_eps=1e-6,
        hidden_act="gelu_pytorch_tanh",
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), set()),
}


def _config(class_name: str, kwargs: dict):
  config_class = getattr(transformers, class_name.replace("ForCausalLM", "Config"))
  fields = copy.deepcopy(_COMMON)
  fields.update(copy.deepcopy(kwargs))
  config = config_class(**fields)
  config._attn_implementation = "eager"  # pylint: disable=protected-access
  return config


def _perturb(model, gemma: bool) -> None:
  generator = torch.Generator().manual_seed(1)
  with torch.no_grad():
    for name, param in model.named_parameters():
      noise = torch.randn(param.shape, generator=generator) * 0.1
      if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
        param.copy_(noise if gemma else 1.0 + noise)
      else:
        param.copy_(noise * 1.5)


def _older_form(path: pathlib.Path) -> None:
  """Rewrites config.json from rope_parameters to top-level rope_theta + rope_scaling."""
  config = json.loads((path / "config.json").read_text())
  params = config.pop("rope_parameters")
  config["rope_theta"] = params.pop("rope_theta")
  if "partial_rotary_factor" in params:
    config["partial_rotary_factor"] = params.pop("partial_rotary_factor")
  params["type"] = params.pop("rope_type")  # The legacy key, as in older checkpoints.
  config["rope_scaling"] = None if params["type"] == "default" else params
  (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _tokenizer(path: pathlib.Path, vocab: int) -> None:
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  tokenizer = Tokenizer(models.BPE())
  tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tokenizer.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
      vocab_size=vocab, special_tokens=["<pad>", "<s>", "</s>"], show_progress=False,
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  text = (ROOT / "README.md").read_text(encoding="utf-8")
  tokenizer.train_from_iterator([text], trainer=trainer)
  tokenizer.save(str(path / "tokenizer.json"))
  (path / "tokenizer_config.json").write_text(json.dumps(
      {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}, indent=2) + "\n")


def _left_pad(prompts):
  width = max(len(p) for p in prompts)
  ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
  mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
  return ids, mask


def main():
  torch.manual_seed(0)
  if OUT.exists():
    shutil.rmtree(OUT)
  OUT.mkdir(parents=True)
  expected = {"transformers": transformers.__version__, "torch": torch.__version__,
              "prompts": PROMPTS, "gen_prompts": GEN_PROMPTS, "new_tokens": NEW_TOKENS,
              "cases": {}}
  for name, (class_name, kwargs, options) in CASES.items():
    torch.manual_seed(0)
    model_class = getattr(transformers, class_name)
    config = _config(class_name, kwargs)
    vocab = config.vocab_size
    model = model_class(config).eval()
    _perturb(model, gemma=class_name.startswith("Gemma"))
    path = OUT / name
    model.save_pretrained(path, max_shard_size="150KB" if "sharded" in options else "1GB")
    if "older_form" in options:
      _older_form(path)
    if "tokenizer" in options:
      _tokenizer(path, vocab)
    (path / "generation_config.json").unlink(missing_ok=True)
    model = model_class.from_pretrained(path, attn_implementation="eager",
                                        dtype=torch.float32).eval()
    with torch.no_grad():
      logits = model(torch.tensor(PROMPTS)).logits.float().numpy()
    model = model_class.from_pretrained(path, attn_implementation="eager",
                                        dtype=torch.float32).eval()
    ids, mask = _left_pad(GEN_PROMPTS)
    model.generation_config.eos_token_id = None
    with torch.no_grad():
      out = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                           pad_token_id=0, eos_token_id=None)
    greedy = out[:, ids.shape[1]:].tolist()
    np.save(path / "logits.npy", logits.astype(np.float32))
    expected["cases"][name] = {"greedy": greedy, "max_abs_logit": float(np.abs(logits).max()),
                               "files": sorted(os.listdir(path))}
    print(f"{name}: {sorted(os.listdir(path))} max|logit| {np.abs(logits).max():.3f} "
          f"greedy {greedy[0]}")
  (OUT / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
  main()
