"""``save_pretrained``: a :class:`~pejax.nn.Decoder` -> a Hugging Face checkpoint directory.

Writes ``config.json`` (the newer ``rope_parameters`` form) and ``model.safetensors`` with the
names, layouts (``[out, in]`` linear weights, Phi-3's fused projections) and dtype of the
family, so transformers' ``AutoModelForCausalLM.from_pretrained(path)`` computes the same logits
(checked once against transformers: ``tests/golden/check_hf_loads_saved.py``), and
:func:`pejax.hf.from_pretrained` reads back the same parameters bit for bit.

A model trained in pejax (``scale_embeddings=True``, untied) is written as a ``llama``: the
sqrt(d_model) input scale is folded into the stored embedding (``W * sqrt(E)``, the product the
decoder computes for every token, so the logits are unchanged; reading it back gives a
``scale_embeddings=False`` config). Tied embeddings cannot be folded (the output head would
change): an error names the field.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Optional

from flax import nnx
import numpy as np

from pejax.hf import config_mapping
from pejax.hf import safetensors_files as files_lib
from pejax.hf import weight_mapping
from pejax.nn.decoder import Decoder


def save_pretrained(model: Decoder, path: Any, *, model_type: Optional[str] = None,
                    max_position_embeddings: Optional[int] = None,
                    extra_config: Optional[dict] = None) -> str:
  """Writes ``model`` as a Hugging Face checkpoint directory.

  Args:
    model: the decoder (its PE one RoPE config in the ``"half"`` layout).
    path: the directory (created; existing ``config.json`` / ``model.safetensors`` are
      overwritten).
    model_type: the family to write (``"llama"``, ``"mistral"``, ``"qwen2"``, ``"qwen3"``,
      ``"phi3"``, ``"gemma"``); ``None`` infers it from the config.
    max_position_embeddings: written to ``config.json`` (default: the RoPE scaling's length, or
      4096).
    extra_config: further ``config.json`` keys (e.g. ``{"eos_token_id": 2}``).

  Returns:
    The absolute directory path.

  Raises:
    ValueError: naming the :class:`~pejax.nn.DecoderConfig` field that the family cannot
      express (see :func:`pejax.hf.decoder_config_to_hf`).
  """
  if not isinstance(model, Decoder):
    raise ValueError(f"model must be a pejax.nn.Decoder, got {type(model).__name__}")
  config = model.config
  fold_scale = config.scale_embeddings and (model_type or config_mapping.infer_model_type(
      config)) != "gemma"
  hf_source = config
  if fold_scale:
    import dataclasses  # pylint: disable=g-import-not-at-top
    if config.tie_embeddings:
      config_mapping.decoder_config_to_hf(config, model_type=model_type)  # Raises, naming it.
    hf_source = dataclasses.replace(config, scale_embeddings=False)
  hf = config_mapping.decoder_config_to_hf(hf_source, model_type=model_type,
                                           max_position_embeddings=max_position_embeddings)
  if extra_config:
    hf.update(extra_config)
  model_type = hf["model_type"]
  entries = weight_mapping.weight_entries(config, model_type)
  flat = {tuple(p): v for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
  tensors: dict[str, np.ndarray] = {}
  fused: dict[str, list] = {}
  for entry in entries:
    value = np.asarray(flat[entry.path][...])
    if entry.path == ("embed", "embedding") and fold_scale:
      # The product the decoder computes for each token, in the compute dtype.
      value = (value * np.asarray(math.sqrt(config.d_model), value.dtype)).astype(value.dtype)
    if entry.transpose:
      value = value.T
    if entry.rows is None:
      tensors[entry.name] = np.ascontiguousarray(value)
    else:
      fused.setdefault(entry.name, []).append((entry.rows[0], value))
  for name, blocks in fused.items():
    tensors[name] = np.ascontiguousarray(np.concatenate([b for _, b in sorted(
        blocks, key=lambda x: x[0])], axis=0))
  dtypes = {str(v.dtype) for v in tensors.values()}
  hf["torch_dtype"] = "bfloat16" if dtypes == {"bfloat16"} else "float32"
  directory = os.path.abspath(os.path.expanduser(os.fspath(path)))
  os.makedirs(directory, exist_ok=True)
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  save_file(tensors, os.path.join(directory, files_lib.WEIGHTS_FILE), metadata={"format": "pt"})
  with open(os.path.join(directory, files_lib.CONFIG_FILE), "w", encoding="utf-8") as f:
    json.dump(hf, f, indent=2, sort_keys=True)
    f.write("\n")
  index = os.path.join(directory, files_lib.INDEX_FILE)
  if os.path.exists(index):  # A stale index would shadow the new single file.
    os.remove(index)
  return directory
