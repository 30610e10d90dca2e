"""``save_pretrained``: a :class:`~pejax.nn.Decoder` -> a Hugging Face checkpoint directory.

Writes ``config.json`` and ``model.safetensors`` with the names, layouts (``[out, in]`` linear
weights, Phi-3's fused projections) and dtype of the family, so transformers'
``AutoModelForCausalLM.from_pretrained(path)`` computes the same logits (checked once against
transformers: ``tests/golden/check_hf_loads_saved.py``), and :func:`pejax.hf.from_pretrained`
reads back the same parameters bit for bit.

The family: a model loaded by :func:`pejax.hf.from_pretrained` is written as the family it came
from (its ``hf_source``: Phi-3 stays Phi-3 with fused ``qkv_proj`` / ``gate_up_proj`` even with
full rotary), with the ``config.json`` keys pejax does not interpret copied back
(:func:`pejax.hf.config_mapping.with_source_keys`); any other model as the family its config
implies (:func:`pejax.hf.config_mapping.infer_model_type`).

pejax's own embedding scale (``scale_embeddings=True``: token embeddings times sqrt(d_model)) has
no llama-family equivalent, so it is folded into the stored input embedding (``W * sqrt(E)``,
the product the decoder computes for every token; reading it back gives a
``scale_embeddings=False`` config with the same logits). With tied embeddings (launch.py's
default model) the output head must keep the unscaled ``W``, so such a model is written
**untied**: ``model.embed_tokens.weight = W * sqrt(E)``, ``lm_head.weight = W`` (``V x E`` more
parameters on disk, identical logits). Gemma keeps its own scale and tying.

Files are written under temporary names in the target directory and renamed at the end: a save
that fails (a value ``json`` cannot encode, a full disk) leaves the previous files intact.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Optional

from flax import nnx
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks
from pejax.hf import config_mapping
from pejax.hf import safetensors_files as files_lib
from pejax.hf import weight_mapping
from pejax.nn.decoder import Decoder
from pejax.nn.decoder_config import DecoderConfig

_DTYPES = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(jnp.bfloat16)}


@dataclasses.dataclass(frozen=True)
class EmbeddingLayout:
  """How the token embedding of a decoder is written in a Hugging Face family.

  Attributes:
    fold_scale: the sqrt(d_model) input scale is folded into the stored input embedding.
    untie: a tied embedding is written as separate input embedding and output head.
    hf_config: the :class:`DecoderConfig` the written checkpoint reads back as (its
      ``scale_embeddings`` / ``tie_embeddings`` after folding and untying).
  """

  fold_scale: bool
  untie: bool
  hf_config: DecoderConfig


def embedding_layout(config: DecoderConfig, model_type: str) -> EmbeddingLayout:
  """Whether writing ``config`` as ``model_type`` folds the embedding scale and unties.

  Args:
    config: the decoder config.
    model_type: the family written.

  Returns:
    The :class:`EmbeddingLayout`: outside Gemma, ``scale_embeddings=True`` is folded, and a tied
    embedding with it is untied.
  """
  fold = config.scale_embeddings and model_type != "gemma"
  untie = fold and config.tie_embeddings
  hf_config = config
  if fold:
    hf_config = dataclasses.replace(config, scale_embeddings=False,
                                    tie_embeddings=config.tie_embeddings and not untie)
  return EmbeddingLayout(fold_scale=fold, untie=untie, hf_config=hf_config)


def chosen_model_type(model: Decoder, model_type: Optional[str]) -> str:
  """The family :func:`save_pretrained` writes: ``model_type``, the source's, or inferred.

  Args:
    model: the decoder (its ``hf_source``, when loaded from a checkpoint, names the family).
    model_type: an explicit family, or ``None``.

  Returns:
    The ``model_type`` string.
  """
  if model_type is not None:
    return model_type
  source = getattr(model, "hf_source", None)
  if isinstance(source, config_mapping.HFSource):
    return source.model_type
  return config_mapping.infer_model_type(model.config)


def _json_text(hf: dict) -> str:
  """``config.json``'s text; a value JSON cannot encode is a ValueError naming its key."""
  for key, value in hf.items():
    try:
      json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as e:
      raise ValueError(f"config.json key {key!r} = {value!r} cannot be written as JSON ({e})"
                       ) from None
  return json.dumps(hf, indent=2, sort_keys=True) + "\n"


# Keys save_pretrained owns whatever their effect on the decoder read back (the family, the
# stored tensors' dtype, the context length) -> the argument that sets each.
_OWNED_KEYS = {"model_type": "model_type=", "architectures": "model_type=",
               "torch_dtype": "dtype=", "dtype": "dtype=",
               "max_position_embeddings": "max_position_embeddings="}


def _json_value(value: Any) -> Any:
  """A numpy scalar as the Python number it holds (lossless); anything else unchanged."""
  return value.item() if isinstance(value, np.generic) else value


def _with_extra_config(hf: dict, extra_config: dict) -> dict:
  """``hf`` updated with ``extra_config``, refusing keys that would describe another model.

  A key ``save_pretrained`` computed may be given again only with a value that leaves the
  decoder read back from the file (:func:`config_mapping.decoder_config_from_hf`) unchanged;
  ``model_type``, ``architectures``, the dtype keys and ``max_position_embeddings`` are never
  overridden (their arguments set them). Keys pejax does not read (token ids, ...) are free.
  ``extra_config`` is a dict (:func:`save_pretrained` checks it first).
  """
  for key in extra_config:
    if not isinstance(key, str):
      raise TypeError(f"extra_config keys must be strings, got {key!r}")
  extra = {key: _json_value(value) for key, value in extra_config.items()}
  before = config_mapping.decoder_config_from_hf(hf)
  model_keys = config_mapping.model_defining_keys(hf["model_type"])
  out = dict(hf)
  for key, value in extra.items():
    if key in model_keys and key not in hf:
      raise ValueError(f"extra_config[{key!r}]={value!r}: {key!r} describes the model, and "
                       "save_pretrained writes the model's own description (in another key)")
    if key in hf and value != hf[key]:
      if key in _OWNED_KEYS:
        raise ValueError(f"extra_config[{key!r}]={value!r} would override the value "
                         f"save_pretrained writes ({hf[key]!r}); set it with save_pretrained's "
                         f"{_OWNED_KEYS[key]} argument")
      trial = dict(out, **{key: value})
      try:
        changed = config_mapping.decoder_config_from_hf(trial) != before
      except ValueError as e:
        raise ValueError(f"extra_config[{key!r}]={value!r}: {e}") from None
      if changed:
        raise ValueError(f"extra_config[{key!r}]={value!r} would override the value "
                         f"save_pretrained computes from the model ({hf[key]!r}): the file "
                         "would describe another model")
    out[key] = value
  try:
    config_mapping.decoder_config_from_hf(out)
  except ValueError as e:
    raise ValueError(f"extra_config={extra!r}: {e}"[:500]) from None
  return out


def save_pretrained(model: Decoder, path: Any, *, model_type: Optional[str] = None,
                    max_position_embeddings: Optional[int] = None,
                    extra_config: Optional[dict] = None, dtype: Any = None) -> str:
  """Writes ``model`` as a Hugging Face checkpoint directory.

  Example::

    model = pejax.hf.from_pretrained("phi3_dir")         # remembers it is a phi3
    pejax.hf.save_pretrained(model, "out")                # phi3 again, fused qkv / gate_up

  Args:
    model: the decoder (its PE one RoPE config in the ``"half"`` layout).
    path: the directory (created; existing ``config.json`` / ``model.safetensors`` are replaced
      only once both new files are written).
    model_type: the family to write (``"llama"``, ``"mistral"``, ``"qwen2"``, ``"qwen3"``,
      ``"phi3"``, ``"gemma"``); ``None``: the family the model was loaded from
      (``model.hf_source``), else inferred from the config.
    max_position_embeddings: written to ``config.json`` (default: the source's, or the RoPE
      scaling's length, or 4096).
    extra_config: further ``config.json`` keys (e.g. ``{"eos_token_id": 2}``), written last. A
      key that save_pretrained computes from the model may be repeated only with a value that
      describes the same model (else ``ValueError`` naming the key); ``model_type``,
      ``architectures``, the dtype and ``max_position_embeddings`` are set by their arguments
      only. numpy scalars are written as the numbers they hold.
    dtype: ``None`` (the parameters' dtype), ``"float32"`` or ``"bfloat16"``: the dtype of the
      stored tensors.

  Returns:
    The absolute directory path.

  Raises:
    ValueError: naming the :class:`~pejax.nn.DecoderConfig` field that the family cannot
      express (see :func:`pejax.hf.decoder_config_to_hf`), a ``config.json`` value that is not
      JSON, an ``extra_config`` key that would describe another model, a non-positive
      ``max_position_embeddings`` or a bad ``dtype``; nothing in ``path`` is changed then.
    TypeError: an ``extra_config`` that is not a dict with string keys.
  """
  if not isinstance(model, Decoder):
    raise ValueError(f"model must be a pejax.nn.Decoder, got {type(model).__name__}")
  if dtype is not None:
    try:
      dtype = jnp.dtype(dtype).name
    except TypeError:
      dtype = repr(dtype)
    if dtype not in _DTYPES:
      raise ValueError(f"dtype must be None, float32 or bfloat16, got {dtype!r}")
  if max_position_embeddings is not None:
    max_position_embeddings = arg_checks.check_positive_int("max_position_embeddings",
                                                            max_position_embeddings)
  if extra_config is not None and not isinstance(extra_config, dict):
    raise TypeError(f"extra_config must be a dict of config.json keys, got "
                    f"{type(extra_config).__name__}: {extra_config!r}"[:300])
  config = model.config
  model_type = chosen_model_type(model, model_type)
  if model_type not in config_mapping.SUPPORTED_MODEL_TYPES:
    raise ValueError(f"model_type must be one of {list(config_mapping.SUPPORTED_MODEL_TYPES)}, "
                     f"got {model_type!r}")
  layout = embedding_layout(config, model_type)
  hf = config_mapping.decoder_config_to_hf(layout.hf_config, model_type=model_type,
                                           max_position_embeddings=max_position_embeddings)
  entries = weight_mapping.weight_entries(layout.hf_config, model_type)
  flat = {tuple(p): v for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
  tensors: dict[str, np.ndarray] = {}
  fused: dict[str, list] = {}
  for entry in entries:
    if entry.path == ("lm_head", "kernel") and layout.untie:
      value = np.asarray(flat[("embed", "embedding")][...]).T  # The unscaled tied matrix.
    else:
      value = np.asarray(flat[entry.path][...])
    if entry.path == ("embed", "embedding") and layout.fold_scale:
      # The product the decoder computes for each token, in the compute dtype.
      value = (value * np.asarray(math.sqrt(config.d_model), value.dtype)).astype(value.dtype)
    if dtype is not None:
      value = value.astype(_DTYPES[dtype])
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
  source = getattr(model, "hf_source", None)
  if isinstance(source, config_mapping.HFSource) and source.model_type == model_type:
    hf = config_mapping.with_source_keys(hf, source)
    if max_position_embeddings is not None:
      hf["max_position_embeddings"] = max_position_embeddings
  if extra_config:
    hf = _with_extra_config(hf, extra_config)
  text = _json_text(hf)  # Before any file is touched.
  directory = os.path.abspath(os.path.expanduser(os.fspath(path)))
  os.makedirs(directory, exist_ok=True)
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  suffix = f".tmp-{os.getpid()}"
  weights, config_file = (os.path.join(directory, name) for name in (
      files_lib.WEIGHTS_FILE, files_lib.CONFIG_FILE))
  try:
    save_file(tensors, weights + suffix, metadata={"format": "pt"})
    with open(config_file + suffix, "w", encoding="utf-8") as f:
      f.write(text)
    os.replace(weights + suffix, weights)
    os.replace(config_file + suffix, config_file)
  finally:
    for temporary in (weights + suffix, config_file + suffix):
      if os.path.exists(temporary):
        os.remove(temporary)
  index = os.path.join(directory, files_lib.INDEX_FILE)
  if os.path.exists(index):  # A stale index would shadow the new single file.
    os.remove(index)
  return directory
