"""A Hugging Face ``config.json`` dict <-> :class:`~pejax.nn.DecoderConfig`.

Families (``model_type``) and what each needs from the decoder:

| model_type | differences from pejax's own decoder |
|---|---|
| ``llama`` | no embedding scale; tied or untied; ``attention_bias`` (q/k/v/o biases) |
| ``mistral`` | as llama, plus ``sliding_window`` |
| ``qwen2`` | q/k/v biases (no output bias); optional sliding-window layers |
| ``qwen3`` | per-head q/k RMSNorm, explicit ``head_dim``; optional sliding-window layers |
| ``phi3`` | fused ``qkv_proj`` / ``gate_up_proj`` weights, ``partial_rotary_factor``, LongRoPE |
| ``gemma`` | embeddings x sqrt(hidden), RMSNorm ``(1 + w)``, GeGLU (tanh), explicit head_dim |

RoPE (every family, every ``rope_type``: default, linear, dynamic, yarn, longrope, llama3, in the
older ``rope_scaling`` or newer ``rope_parameters`` form) goes through
:func:`pejax.encodings.rope_config_from_hf`, whose frequencies equal transformers'. Hugging Face
rotates in the ``"half"`` layout (``rotate_half``); a partial rotary factor rotates the first
``int(head_dim * factor)`` channels of each head, which is :class:`~pejax.nn.RotaryConfig`'s
``fraction``.

Nothing is approximated silently: a field this mapping cannot honour (another ``model_type``, an
MLP bias, logit soft-capping, a quantization config, an activation other than the family's, any
key it does not know) raises ``ValueError`` naming the field and its value.

:class:`HFSource` records the ``config.json`` a decoder was loaded from, and
:func:`with_source_keys` writes its family and the keys pejax does not interpret back.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping, Optional

from pejax.encodings import rope_hf
from pejax.encodings import rope_scaling as scalings
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn.positional.rope import RotaryConfig

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma")

# transformers' RoPE base when config.json gives none (LlamaConfig, MistralConfig, Qwen2Config,
# Qwen3Config, Phi3Config, GemmaConfig: rope_theta=10000.0).
_DEFAULT_ROPE_THETA = 10000.0

# The MLP activation each family accepts (HF names), and pejax's MLP kind for it.
_ACTIVATIONS = {"silu": "swiglu", "gelu_pytorch_tanh": "geglu"}
_FAMILY_ACTIVATION = {"llama": "silu", "mistral": "silu", "qwen2": "silu", "qwen3": "silu",
                      "phi3": "silu", "gemma": "gelu_pytorch_tanh"}

# Keys read by the mapping (per family, below) and keys with no effect on the logits.
_READ = frozenset({
    "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
    "tie_word_embeddings", "hidden_act", "max_position_embeddings", "rope_theta", "rope_scaling",
    "rope_parameters", "partial_rotary_factor", "original_max_position_embeddings",
})
_FAMILY_KEYS = {
    "llama": frozenset({"attention_bias", "mlp_bias", "pretraining_tp"}),
    "mistral": frozenset({"sliding_window"}),
    "qwen2": frozenset({"sliding_window", "use_sliding_window", "max_window_layers",
                        "layer_types", "use_mrope"}),
    "qwen3": frozenset({"sliding_window", "use_sliding_window", "max_window_layers",
                        "layer_types", "attention_bias"}),
    "phi3": frozenset({"sliding_window", "resid_pdrop", "embd_pdrop"}),
    "gemma": frozenset({"hidden_activation", "attention_bias", "use_bidirectional_attention"}),
}


def model_defining_keys(model_type: str) -> frozenset:
  """The ``config.json`` keys that describe a ``model_type`` decoder (read by the mapping)."""
  return _READ | _FAMILY_KEYS.get(model_type, frozenset())


_HARMLESS = frozenset({
    "architectures", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype",
    "transformers_version", "initializer_range", "use_cache", "attention_dropout",
    "hidden_dropout", "output_attentions", "output_hidden_states", "return_dict",
    "is_encoder_decoder", "tokenizer_class", "name_or_path", "auto_map",
})


def _require(config: Mapping[str, Any], key: str) -> Any:
  if config.get(key) is None:
    raise ValueError(f"config.json must contain '{key}' (got keys {sorted(config)})")
  return config[key]


def _int(config: Mapping[str, Any], key: str, default: Any = None) -> int:
  value = config.get(key, default)
  if value is None:
    value = _require(config, key)
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f"config.json field '{key}' must be a positive integer, got {value!r}")
  return value


def _flag(config: Mapping[str, Any], key: str, default: bool = False) -> bool:
  value = config.get(key, default)
  if value is None:
    return default
  if not isinstance(value, bool):
    raise ValueError(f"config.json field '{key}' must be true or false, got {value!r}")
  return value


def _unsupported(key: str, value: Any, why: str) -> ValueError:
  return ValueError(f"config.json field '{key}' = {value!r} is not supported: {why}")


def _check_keys(config: Mapping[str, Any], model_type: str) -> None:
  known = _READ | _FAMILY_KEYS[model_type] | _HARMLESS
  for key in sorted(config):
    if key in known or key.startswith("_"):
      continue
    raise _unsupported(key, config[key], f"pejax does not know this {model_type} field, and "
                       "ignoring it could change the model's numbers")


def _layer_windows(config: Mapping[str, Any], model_type: str,
                   num_layers: int) -> Optional[tuple]:
  """Per-layer sliding windows (``None`` entries: global), or ``None`` for none at all."""
  window = config.get("sliding_window")
  if model_type in ("mistral", "phi3"):
    if window is None:
      return None
    return (_int(config, "sliding_window"),) * num_layers
  if model_type not in ("qwen2", "qwen3"):
    return None
  layer_types = config.get("layer_types")
  if layer_types is None:
    if not _flag(config, "use_sliding_window"):
      return None
    first = config.get("max_window_layers", num_layers)
    layer_types = ["sliding_attention" if i >= first else "full_attention"
                   for i in range(num_layers)]
  if not isinstance(layer_types, (list, tuple)) or len(layer_types) != num_layers:
    raise ValueError(f"config.json field 'layer_types' must list {num_layers} layer types, got "
                     f"{layer_types!r}")
  bad = [t for t in layer_types if t not in ("full_attention", "sliding_attention")]
  if bad:
    raise _unsupported("layer_types", bad[0], "only 'full_attention' and 'sliding_attention' "
                       "layers exist in pejax")
  if "sliding_attention" not in layer_types:
    return None
  if not _flag(config, "use_sliding_window", True) or window is None:
    # transformers sets sliding_window to None unless use_sliding_window: all layers global.
    return None
  width = _int(config, "sliding_window")
  return tuple(width if t == "sliding_attention" else None for t in layer_types)


def decoder_config_from_hf(config: Mapping[str, Any], *, dtype: str = "float32",
                           **overrides: Any) -> DecoderConfig:
  """The :class:`DecoderConfig` of a Hugging Face decoder's ``config.json``.

  Args:
    config: the parsed ``config.json``.
    dtype: the compute dtype, ``"float32"`` or ``"bfloat16"``.
    **overrides: further :class:`DecoderConfig` fields (e.g. ``attention="dense"``).

  Returns:
    A config whose :class:`~pejax.nn.Decoder`, given the checkpoint's weights, computes the
    logits transformers computes.

  Raises:
    ValueError: naming the field, for another ``model_type``, a missing or malformed field, or a
      field pejax cannot honour (see the module docstring).
  """
  if not isinstance(config, Mapping):
    raise ValueError(f"config must be a dict (parsed config.json), got {type(config).__name__}")
  model_type = config.get("model_type")
  if model_type not in SUPPORTED_MODEL_TYPES:
    raise _unsupported("model_type", model_type,
                       f"pejax loads the decoder families {list(SUPPORTED_MODEL_TYPES)}")
  _check_keys(config, model_type)
  if config.get("quantization_config") is not None:
    raise _unsupported("quantization_config", config["quantization_config"],
                       "quantized checkpoints")
  act_key = "hidden_activation" if (model_type == "gemma"
                                    and config.get("hidden_activation")) else "hidden_act"
  activation = config.get(act_key, _FAMILY_ACTIVATION[model_type])
  if model_type == "gemma" and act_key == "hidden_act" and activation == "gelu":
    activation = "gelu_pytorch_tanh"  # transformers runs Gemma's legacy "gelu" as the tanh GELU.
  if activation != _FAMILY_ACTIVATION[model_type]:
    raise _unsupported(act_key, activation,
                       f"{model_type} in pejax uses '{_FAMILY_ACTIVATION[model_type]}'")
  if _flag(config, "use_bidirectional_attention"):
    raise _unsupported("use_bidirectional_attention", True, "pejax's decoder is causal")
  if model_type == "phi3":
    rope_section = config.get("rope_parameters") or config.get("rope_scaling") or {}
    rope_type = rope_section.get("rope_type", rope_section.get("type", "default"))
    if rope_type not in ("default", "longrope"):
      # transformers reads phi3's "su" and "yarn" as longrope.
      raise _unsupported("rope_scaling.rope_type", rope_type, "phi3 takes 'default' or "
                         "'longrope'")
  if _flag(config, "use_mrope"):
    # Qwen2.5 config.json files carry "use_mrope": false (transformers' qwen2 does not read it);
    # true belongs to Qwen2-VL's multimodal RoPE.
    raise _unsupported("use_mrope", True, "multimodal RoPE (Qwen2-VL) is not a qwen2 text model")
  if _flag(config, "mlp_bias"):
    raise _unsupported("mlp_bias", True, "MLP biases are not implemented in pejax's decoder")
  if config.get("pretraining_tp", 1) != 1:
    raise _unsupported("pretraining_tp", config["pretraining_tp"], "only 1 (no sliced matmuls)")
  hidden = _int(config, "hidden_size")
  heads = _int(config, "num_attention_heads")
  kv_heads = _int(config, "num_key_value_heads", heads)
  num_layers = _int(config, "num_hidden_layers")
  head_dim = config.get("head_dim")
  if head_dim is not None:
    head_dim = _int(config, "head_dim")
  elif hidden % heads:
    raise ValueError(f"config.json hidden_size ({hidden}) must be divisible by "
                     f"num_attention_heads ({heads}) when head_dim is not given")
  explicit_head_dim = None if head_dim is None or head_dim * heads == hidden else head_dim
  rope_parameters = config.get("rope_parameters")
  if config.get("rope_theta") is None and not (
      isinstance(rope_parameters, Mapping) and rope_parameters.get("rope_theta") is not None):
    # transformers' default base in every supported family; Llama-2's config.json omits it.
    config = {**config, "rope_theta": _DEFAULT_ROPE_THETA}
  rope = rope_hf.rope_config_from_hf(config, strict=True)
  fraction = float((config.get("rope_parameters") or {}).get(
      "partial_rotary_factor", config.get("partial_rotary_factor", 1.0)) or 1.0)
  if rope.rotary_dim is not None and rope.rotary_dim != int(rope.head_dim * fraction):
    raise ValueError(f"config.json partial_rotary_factor {fraction} does not give rotary_dim "
                     f"{rope.rotary_dim}")
  if rope.rotary_dim is not None and model_type != "phi3":
    raise _unsupported("partial_rotary_factor", fraction,
                       f"transformers' {model_type} rotates whole heads (only phi3 is partial)")
  pe = RotaryConfig(base=rope.base, layout="half", fraction=fraction, scaling=rope.scaling)
  attention_bias = _flag(config, "attention_bias")
  eps = config.get("rms_norm_eps", 1e-6)
  if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps <= 0:
    raise ValueError(f"config.json field 'rms_norm_eps' must be a positive number, got {eps!r}")
  fields = dict(
      vocab_size=_int(config, "vocab_size"), num_layers=num_layers, d_model=hidden,
      num_heads=heads, num_kv_heads=kv_heads, mlp=_ACTIVATIONS[activation],
      mlp_dim=_int(config, "intermediate_size"),
      tie_embeddings=_flag(config, "tie_word_embeddings", model_type == "gemma"),
      dtype=dtype, norm_epsilon=float(eps), explicit_head_dim=explicit_head_dim,
      scale_embeddings=model_type == "gemma",
      qkv_bias=model_type == "qwen2" or (attention_bias and model_type != "qwen2"),
      output_bias=attention_bias and model_type != "qwen2",
      qk_norm=model_type == "qwen3", norm_offset=1.0 if model_type == "gemma" else 0.0,
      pe=pe, sliding_window=_layer_windows(config, model_type, num_layers))
  fields.update(overrides)
  return DecoderConfig(**fields)


def infer_model_type(config: DecoderConfig) -> str:
  """The Hugging Face family that expresses ``config`` (see :func:`decoder_config_to_hf`).

  Args:
    config: a decoder config.

  Returns:
    ``"gemma"`` for the (1 + w) norm, ``"qwen3"`` with QK-norm, ``"qwen2"`` with q/k/v but no
    output biases, ``"phi3"`` for partial rotary, ``"mistral"`` with a sliding window, else
    ``"llama"``.
  """
  pe = config.pe
  if config.norm_offset == 1.0:
    return "gemma"
  if config.qk_norm:
    return "qwen3"
  if config.qkv_bias and not config.output_bias:
    return "qwen2"
  if isinstance(pe, RotaryConfig) and pe.fraction != 1.0:
    return "phi3"
  if config.sliding_window is not None:
    return "mistral"
  return "llama"


def _cannot(field: str, value: Any, model_type: str, why: str) -> ValueError:
  return ValueError(f"DecoderConfig.{field} = {value!r} cannot be written as a Hugging Face "
                    f"{model_type} config: {why}")


def decoder_config_to_hf(config: DecoderConfig, *, model_type: Optional[str] = None,
                         max_position_embeddings: Optional[int] = None) -> dict:
  """The ``config.json`` dict of a decoder (the inverse of :func:`decoder_config_from_hf`).

  Args:
    config: the decoder config; its PE must be one RoPE config (``"half"`` layout) for all
      layers.
    model_type: the family to write; ``None`` infers it (:func:`infer_model_type`).
    max_position_embeddings: written as is; default the scaling's length (original length x
      factor), else 4096.

  Returns:
    A JSON-serializable dict that transformers reads as the same architecture. An untied model
    with ``scale_embeddings=True`` outside Gemma is written without the scale: the saver folds
    it into the embedding weights (see :mod:`pejax.hf.checkpoint_saving`).

  Raises:
    ValueError: naming the :class:`DecoderConfig` field that the family cannot express.
  """
  if not isinstance(config, DecoderConfig):
    raise ValueError(f"config must be a DecoderConfig, got {type(config).__name__}")
  model_type = infer_model_type(config) if model_type is None else model_type
  if model_type not in SUPPORTED_MODEL_TYPES:
    raise ValueError(f"model_type must be one of {list(SUPPORTED_MODEL_TYPES)}, got "
                     f"{model_type!r}")
  pe = config.pe
  if not isinstance(pe, RotaryConfig):
    raise _cannot("pe", config.pe_name, model_type, f"{config.pe_name} has no Hugging Face "
                  f"{model_type} equivalent (HF decoders use one RoPE for every layer)")
  if pe.layout != "half":
    raise _cannot("pe.layout", pe.layout, model_type, "HF rotates with rotate_half ('half'); "
                  "permute W_q / W_k with pejax.permute_rope_weights first")
  if isinstance(pe.scaling, scalings.NTKScaling):
    raise _cannot("pe.scaling", pe.scaling, model_type, "static NTK has no HF rope_type (write "
                  "it as a larger base)")
  if config.query_scaling != "none":
    raise _cannot("query_scaling", config.query_scaling, model_type, "HF has no query scaling")
  gemma = model_type == "gemma"
  expected = {
      "norm_offset": 1.0 if gemma else 0.0, "qk_norm": model_type == "qwen3",
      "mlp": "geglu" if gemma else "swiglu",
  }
  for field, value in expected.items():
    if getattr(config, field) != value:
      raise _cannot(field, getattr(config, field), model_type, f"{model_type} has {value!r}")
  if gemma and not config.scale_embeddings:
    raise _cannot("scale_embeddings", False, model_type, "gemma always scales embeddings")
  if not gemma and config.scale_embeddings and config.tie_embeddings:
    raise _cannot("scale_embeddings", True, model_type, "with tied embeddings the sqrt(d_model) "
                  "input scale cannot be folded into the weights; pejax.hf.save_pretrained "
                  "writes such a model untied (the scale folded into the input embedding)")
  if model_type == "qwen2" and (not config.qkv_bias or config.output_bias):
    raise _cannot("qkv_bias", config.qkv_bias, model_type, "qwen2 has q/k/v biases and no "
                  "output bias")
  if model_type in ("llama", "mistral", "qwen3", "gemma", "phi3") and (
      config.qkv_bias != config.output_bias):
    raise _cannot("qkv_bias", config.qkv_bias, model_type, "attention_bias sets q/k/v and "
                  "output biases together")
  if model_type == "phi3" and config.qkv_bias:
    raise _cannot("qkv_bias", True, model_type, "phi3 has no attention biases")
  if pe.fraction != 1.0 and model_type != "phi3":
    raise _cannot("pe.fraction", pe.fraction, model_type, "only phi3 rotates part of a head")
  windows = set(config.layer_windows)
  if windows != {None} and (len(windows) != 1 or model_type not in ("mistral", "phi3")):
    raise _cannot("sliding_window", config.sliding_window, model_type, "only mistral / phi3 "
                  "with one window for every layer are written")
  if set(config.layer_chunk_sizes) != {None}:
    raise _cannot("chunk_size", config.chunk_size, model_type, "the llama-family configs pejax "
                  "writes have no chunked attention (Llama 4's attention_chunk_size is not "
                  "written)")
  rope = pe.rope_config(config.head_dim)
  if max_position_embeddings is None:
    s = pe.scaling
    original = getattr(s, "original_max_position", None)
    factor = getattr(s, "factor", None)
    if isinstance(s, scalings.DynamicNTKScaling):
      max_position_embeddings = original
    elif original is not None:
      max_position_embeddings = int(round(original * (factor or 1.0)))
    else:
      max_position_embeddings = 4096
  rope_fields = rope_hf.rope_config_to_hf(rope, form="rope_parameters",
                                          max_position_embeddings=max_position_embeddings)
  rope_parameters = rope_fields["rope_parameters"]
  if isinstance(pe.scaling, scalings.LongRoPEScaling):
    # transformers reads Phi-3's switch length from the top level.
    rope_parameters.pop("original_max_position_embeddings", None)
  out = {
      "model_type": model_type,
      "architectures": [_ARCHITECTURES[model_type]],
      "vocab_size": config.vocab_size,
      "hidden_size": config.d_model,
      "intermediate_size": config.mlp_hidden,
      "num_hidden_layers": config.num_layers,
      "num_attention_heads": config.num_heads,
      "num_key_value_heads": config.kv_heads,
      "head_dim": config.head_dim,
      "rms_norm_eps": config.norm_epsilon,
      "tie_word_embeddings": config.tie_embeddings,
      "max_position_embeddings": rope_fields["max_position_embeddings"],
      "rope_parameters": rope_parameters,
      "hidden_act": "gelu_pytorch_tanh" if gemma else "silu",
      "torch_dtype": config.dtype,
      # Unknown to the decoder; explicit so that family defaults (Phi-3's pad id 32000) do not
      # apply to another vocabulary. save_pretrained(extra_config=...) sets them.
      "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
  }
  if isinstance(pe.scaling, scalings.LongRoPEScaling):
    out["original_max_position_embeddings"] = pe.scaling.original_max_position
  if gemma:
    out["hidden_activation"] = "gelu_pytorch_tanh"
  if model_type in ("llama", "qwen3", "gemma"):
    out["attention_bias"] = config.qkv_bias
  if model_type == "llama":
    out["mlp_bias"] = False
  if model_type in ("mistral", "phi3"):
    window = next(iter(windows))
    out["sliding_window"] = window
  if model_type in ("qwen2", "qwen3"):
    out["use_sliding_window"] = False
  if pe.fraction != 1.0:
    out["partial_rotary_factor"] = pe.fraction
    rope_parameters["partial_rotary_factor"] = pe.fraction
  return out


_ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                  "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                  "phi3": "Phi3ForCausalLM", "gemma": "GemmaForCausalLM"}



# ----------------------------------------------------------------------------------------------
# The config.json a decoder was loaded from, written back by save_pretrained.

# Copied back together or not at all (a stale rope_theta beside a new rope_parameters would be
# read by one transformers version and not by another).
_ROPE_KEYS = ("rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor")
_POSITION_KEYS = ("max_position_embeddings", "original_max_position_embeddings")
_DTYPE_KEYS = ("torch_dtype", "dtype")
# Never copied: the family is written from the config; auto_map points at remote-code files
# that are not copied.
_NOT_COPIED = frozenset({"model_type", "architectures", "auto_map"})


@dataclasses.dataclass(frozen=True)
class HFSource:
  """The ``config.json`` a decoder was loaded from (kept on the model as ``model.hf_source``).

  :func:`pejax.hf.from_pretrained` records it; :func:`pejax.hf.save_pretrained` then writes the
  same family (Phi-3 stays Phi-3 with fused tensors, even with full rotary) and the keys pejax
  does not interpret (bos / eos / pad ids, ``transformers_version``, dropout settings, the RoPE
  form, Phi-3's rotary details) back, as long as they do not change what the config means
  (:func:`with_source_keys`). Frozen and hashable: a static attribute of the NNX graph, never
  part of ``nnx.state(model)``.

  Attributes:
    model_type: the source family (``"phi3"``).
    config_json: the source ``config.json`` as canonical JSON text.
  """

  model_type: str
  config_json: str

  @classmethod
  def from_config(cls, config: Mapping[str, Any]) -> HFSource:
    """The source record of a parsed ``config.json``.

    Args:
      config: the parsed ``config.json`` (its ``model_type`` one of the supported families).

    Returns:
      The record.

    Raises:
      ValueError: naming ``model_type`` when it is not a supported family.
    """
    model_type = config.get("model_type") if isinstance(config, Mapping) else None
    if model_type not in SUPPORTED_MODEL_TYPES:
      raise _unsupported("model_type", model_type,
                         f"pejax loads the decoder families {list(SUPPORTED_MODEL_TYPES)}")
    return cls(model_type, json.dumps(dict(config), sort_keys=True))

  @property
  def config(self) -> dict:
    """The source ``config.json`` as a new dict."""
    return json.loads(self.config_json)


def with_source_keys(written: Mapping[str, Any], source: HFSource) -> dict:
  """``written`` (:func:`decoder_config_to_hf`) with the source's keys wherever they mean the same.

  A key of the source is copied (added, or its value replacing the written one) and a written key
  the source lacks is dropped only if :func:`decoder_config_from_hf` then still reads the same
  :class:`DecoderConfig`: keys pejax does not interpret (ids, versions, dropout) always come
  back; the RoPE keys come back as one group (the source's form, ``rope_scaling`` or
  ``rope_parameters``) when they still describe the model's RoPE (not after
  :func:`pejax.hf.with_rope_scaling`). Never copied: ``model_type`` and ``architectures`` (the
  written family), ``auto_map`` (remote code that is not copied) and the dtype, whose value is
  the written tensors' (under the source's key name, ``dtype`` or ``torch_dtype``).

  Args:
    written: the ``config.json`` dict pejax writes for the model.
    source: the record of the ``config.json`` the model was loaded from.

  Returns:
    A new dict (``written`` is not modified).
  """
  out = dict(written)
  original = source.config
  dtype_value = out.get("torch_dtype")
  target = decoder_config_from_hf(out)

  def reads_same(candidate: dict) -> bool:
    try:
      return decoder_config_from_hf(candidate) == target
    except ValueError:
      return False

  def keep(candidate: dict) -> None:
    if reads_same(candidate):
      out.clear()
      out.update(candidate)

  # The RoPE group, first with the lengths it may read them from, then alone.
  for group in (_ROPE_KEYS + _POSITION_KEYS, _ROPE_KEYS):
    swapped = {k: v for k, v in out.items() if k not in group}
    swapped.update({k: original[k] for k in group if k in original})
    if reads_same(swapped):
      keep(swapped)
      break
  fixed = _NOT_COPIED | set(_ROPE_KEYS) | set(_DTYPE_KEYS)
  for key in sorted(k for k in original if k not in fixed):
    if out.get(key, object()) != original[key]:
      keep({**out, key: original[key]})
  for key in sorted(k for k in out if k not in original and k not in fixed):
    keep({k: v for k, v in out.items() if k != key})
  names = [k for k in _DTYPE_KEYS if k in original] or ["torch_dtype"]
  for key in _DTYPE_KEYS:
    out.pop(key, None)
  for key in names:
    out[key] = dtype_value
  return out
