"""Reading and writing the RoPE part of a Hugging Face ``config.json``.

Two forms exist in released checkpoints:

* the older one (transformers < 5): top-level ``rope_theta``, ``rope_scaling`` (a dict with
  ``rope_type`` or the legacy ``type`` key) and ``partial_rotary_factor``;
* the newer one (transformers >= 5): a ``rope_parameters`` dict holding ``rope_type``,
  ``rope_theta``, ``partial_rotary_factor`` and the scaling keys.

Both need ``head_dim`` (or ``hidden_size / num_attention_heads``) and, for scalings,
``max_position_embeddings`` (and Phi-3's top-level ``original_max_position_embeddings``). The
rules are those of ``transformers`` 5.x ``standardize_rope_params`` and ``ROPE_INIT_FUNCTIONS``.
Hugging Face models rotate in the ``"half"`` layout, which is what this reader returns.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional
import warnings

from pejax.encodings import rope_scaling as scalings
from pejax.encodings.rope import RopeConfig

SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")

# Keys each rope_type reads, as in transformers' rope_config_validation (any type also takes
# rope_type / type, rope_theta and partial_rotary_factor).
_COMMON_KEYS = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor"})
ROPE_TYPE_KEYS = {
    "default": frozenset(),
    "linear": frozenset({"factor"}),
    "dynamic": frozenset({"factor", "original_max_position_embeddings"}),
    "yarn": frozenset({"factor", "original_max_position_embeddings", "attention_factor",
                       "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"}),
    "llama3": frozenset({"factor", "original_max_position_embeddings", "low_freq_factor",
                         "high_freq_factor"}),
    "longrope": frozenset({"short_factor", "long_factor", "original_max_position_embeddings",
                           "attention_factor", "factor"}),
}


class UnknownRopeKeyWarning(UserWarning):
  """The rope section of a config has keys its ``rope_type`` does not read (ignored)."""


def _require(mapping: Mapping[str, Any], key: str, where: str) -> Any:
  if key not in mapping or mapping[key] is None:
    raise ValueError(f"{where} must contain '{key}' (got keys {sorted(mapping)})")
  return mapping[key]


def _number(value: Any, key: str) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise ValueError(f"config field '{key}' must be a number, got {value!r}")
  return float(value)


def _integer(value: Any, key: str) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
    raise ValueError(f"config field '{key}' must be an integer, got {value!r}")
  return int(value)


def _rope_parameters(config: Mapping[str, Any]) -> dict:
  """Returns the standardized flat RoPE parameter dict of either config form."""
  params = config.get("rope_parameters")
  if params is not None:
    if not isinstance(params, Mapping):
      raise ValueError(f"config field 'rope_parameters' must be a dict, got {params!r}")
    if params and all(isinstance(v, Mapping) for v in params.values()):
      raise ValueError(
          "config field 'rope_parameters' is nested by layer type "
          f"({sorted(params)}); pass one layer type's dict as rope_parameters")
    params = dict(params)
  else:
    scaling = config.get("rope_scaling")
    if scaling is not None and not isinstance(scaling, Mapping):
      raise ValueError(f"config field 'rope_scaling' must be a dict or null, got {scaling!r}")
    params = dict(scaling or {})
  params.setdefault("rope_type", params.get("type", "default"))
  params.pop("type", None)
  if "rope_theta" not in params or params["rope_theta"] is None:
    if config.get("rope_theta") is None:
      raise ValueError(
          "config must contain 'rope_theta' (top level, older form) or "
          "'rope_parameters.rope_theta' (newer form)")
    params["rope_theta"] = config["rope_theta"]
  if "partial_rotary_factor" not in params and config.get("partial_rotary_factor") is not None:
    params["partial_rotary_factor"] = config["partial_rotary_factor"]
  if params["rope_type"] in ("llama3", "yarn", "longrope"):
    if config.get("original_max_position_embeddings") is not None:
      params["original_max_position_embeddings"] = config["original_max_position_embeddings"]
    elif params.get("original_max_position_embeddings") is None:
      params["original_max_position_embeddings"] = _require(
          config, "max_position_embeddings", "config")
  return params


def _head_dim(config: Mapping[str, Any]) -> int:
  if config.get("head_dim") is not None:
    return _integer(config["head_dim"], "head_dim")
  hidden = _integer(_require(config, "hidden_size", "config without head_dim"), "hidden_size")
  heads = _integer(
      _require(config, "num_attention_heads", "config without head_dim"), "num_attention_heads")
  if heads < 1 or hidden % heads:
    raise ValueError(
        f"config hidden_size ({hidden}) must be divisible by num_attention_heads ({heads})")
  return hidden // heads


def rope_config_from_hf(config: Mapping[str, Any], *, strict: bool = False) -> RopeConfig:
  """Builds a :class:`RopeConfig` from a Hugging Face ``config.json`` dict.

  Keys of the rope section that its ``rope_type`` does not read (e.g. ``low_freq_factor`` under
  ``yarn``, or a misspelt ``beta_fats``) would be ignored: like ``transformers``'
  ``rope_config_validation`` this warns (:class:`UnknownRopeKeyWarning`) naming them, or raises
  with ``strict=True``.

  Args:
    config: the parsed ``config.json`` (older ``rope_theta`` + ``rope_scaling`` form or newer
      ``rope_parameters`` form).
    strict: raise ``ValueError`` on unknown rope keys instead of warning.

  Returns:
    A ``RopeConfig`` in the ``"half"`` layout whose :func:`rope_inv_freq` equals
    ``transformers``' ``ROPE_INIT_FUNCTIONS`` for the same config.

  Raises:
    ValueError: naming the missing or malformed field.
  """
  if not isinstance(config, Mapping):
    raise ValueError(f"config must be a dict (parsed config.json), got {type(config).__name__}")
  params = _rope_parameters(config)
  rope_type = params["rope_type"]
  if rope_type not in SUPPORTED_ROPE_TYPES:
    raise ValueError(
        f"config rope_type must be one of {list(SUPPORTED_ROPE_TYPES)}, got {rope_type!r}")
  section = "rope_parameters" if config.get("rope_parameters") is not None else "rope_scaling"
  given = set(config.get(section) or {})
  unknown = sorted(given - _COMMON_KEYS - ROPE_TYPE_KEYS[rope_type])
  if unknown:
    message = (f"config {section} has keys that rope_type {rope_type!r} does not use (ignored): "
               f"{unknown}; it reads {sorted(ROPE_TYPE_KEYS[rope_type] | _COMMON_KEYS)}")
    if strict:
      raise ValueError(message)
    warnings.warn(message, UnknownRopeKeyWarning, stacklevel=2)
  head_dim = _head_dim(config)
  base = _number(params["rope_theta"], "rope_theta")
  partial = _number(params.get("partial_rotary_factor", 1.0), "partial_rotary_factor")
  if not 0 < partial <= 1:
    raise ValueError(f"config partial_rotary_factor must be in (0, 1], got {partial}")
  rotary_dim = int(head_dim * partial)
  max_position = config.get("max_position_embeddings")

  def factor() -> float:
    return _number(_require(params, "factor", f"rope_scaling of type {rope_type!r}"), "factor")

  def original() -> int:
    return _integer(params["original_max_position_embeddings"],
                    "original_max_position_embeddings")

  scaling: Optional[scalings.Scaling]
  if rope_type == "default":
    scaling = None
  elif rope_type == "linear":
    scaling = scalings.LinearScaling(factor())
  elif rope_type == "dynamic":
    scaling = scalings.DynamicNTKScaling(
        factor(), _integer(_require(config, "max_position_embeddings", "config"),
                           "max_position_embeddings"))
  elif rope_type == "yarn":
    yarn_factor = params.get("factor")
    if yarn_factor is None:
      yarn_factor = _integer(_require(config, "max_position_embeddings", "config"),
                             "max_position_embeddings") / original()
    optional = {k: params[k] for k in ("mscale", "mscale_all_dim", "attention_factor")
                if params.get(k) is not None}
    scaling = scalings.YaRNScaling(
        _number(yarn_factor, "factor"), original(),
        beta_fast=_number(params.get("beta_fast") or 32, "beta_fast"),
        beta_slow=_number(params.get("beta_slow") or 1, "beta_slow"),
        truncate=bool(params.get("truncate", True)), **optional)
  elif rope_type == "llama3":
    scaling = scalings.Llama3Scaling(
        factor(),
        _number(_require(params, "low_freq_factor", "llama3 rope_scaling"), "low_freq_factor"),
        _number(_require(params, "high_freq_factor", "llama3 rope_scaling"), "high_freq_factor"),
        original())
  else:  # longrope
    long_factor = params.get("factor")
    if long_factor is None and max_position is not None:
      long_factor = _integer(max_position, "max_position_embeddings") / original()
    scaling = scalings.LongRoPEScaling(
        _require(params, "short_factor", "longrope rope_scaling"),
        _require(params, "long_factor", "longrope rope_scaling"), original(),
        factor=None if long_factor is None else _number(long_factor, "factor"),
        attention_factor=params.get("attention_factor"))
  return RopeConfig(head_dim, base=base, rotary_dim=None if rotary_dim == head_dim else rotary_dim,
                    scaling=scaling, layout="half")


def rope_config_to_hf(config: RopeConfig, *, form: str = "rope_parameters",
                      max_position_embeddings: Optional[int] = None) -> dict:
  """Writes a :class:`RopeConfig` as the RoPE fields of a Hugging Face ``config.json``.

  ``rope_config_from_hf(rope_config_to_hf(c))`` equals ``c`` for every half-layout config.

  Args:
    config: the RoPE configuration. Hugging Face rotates in the ``"half"`` layout; an
      interleaved config must have its ``W_q``/``W_k`` permuted first
      (:func:`pejax.permute_rope_weights`), so it is rejected here.
    form: ``"rope_parameters"`` (transformers >= 5) or ``"rope_scaling"`` (older form with
      top-level ``rope_theta`` and ``partial_rotary_factor``).
    max_position_embeddings: written when given; otherwise the scaling's original length (or
      ``original * factor`` for scalings that extend the context) is written where HF needs it.

  Returns:
    A dict with ``head_dim``, ``max_position_embeddings`` (when known) and the RoPE fields.
  """
  if not isinstance(config, RopeConfig):
    raise ValueError(f"config must be a RopeConfig, got {type(config).__name__}")
  if form not in ("rope_parameters", "rope_scaling"):
    raise ValueError(f"form must be 'rope_parameters' or 'rope_scaling', got {form!r}")
  if config.layout != "half":
    raise ValueError(
        "config.layout must be 'half' to write a Hugging Face config (HF rotates with "
        f"rotate_half), got {config.layout!r}; permute W_q/W_k with permute_rope_weights first")
  s = config.scaling
  params: dict = {}
  max_pos = max_position_embeddings
  if s is None:
    params["rope_type"] = "default"
  elif isinstance(s, scalings.LinearScaling):
    params.update(rope_type="linear", factor=s.factor)
  elif isinstance(s, scalings.NTKScaling):
    raise ValueError(
        "config.scaling NTKScaling (static NTK-aware) has no Hugging Face rope_type; write it as "
        "rope_theta = base * factor ** (d / (d - 2)) with rope_type 'default' instead")
  elif isinstance(s, scalings.DynamicNTKScaling):
    params.update(rope_type="dynamic", factor=s.factor)
    if max_pos is not None and max_pos != s.original_max_position:
      raise ValueError(
          f"max_position_embeddings ({max_pos}) must equal the dynamic scaling's "
          f"original_max_position ({s.original_max_position}): HF reads it from there")
    max_pos = s.original_max_position
  elif isinstance(s, scalings.YaRNScaling):
    params.update(rope_type="yarn", factor=s.factor,
                  original_max_position_embeddings=s.original_max_position,
                  beta_fast=s.beta_fast, beta_slow=s.beta_slow, truncate=s.truncate)
    for key in ("mscale", "mscale_all_dim", "attention_factor"):
      if getattr(s, key) is not None:
        params[key] = getattr(s, key)
  elif isinstance(s, scalings.Llama3Scaling):
    params.update(rope_type="llama3", factor=s.factor, low_freq_factor=s.low_freq_factor,
                  high_freq_factor=s.high_freq_factor,
                  original_max_position_embeddings=s.original_max_position)
  elif isinstance(s, scalings.LongRoPEScaling):
    params.update(rope_type="longrope", short_factor=list(s.short_factor),
                  long_factor=list(s.long_factor),
                  original_max_position_embeddings=s.original_max_position)
    if s.factor is not None:
      params["factor"] = s.factor
    if s.attention_factor is not None:
      params["attention_factor"] = s.attention_factor
  out: dict = {"head_dim": config.head_dim}
  if max_pos is not None:
    out["max_position_embeddings"] = int(max_pos)
  partial = None if config.rotary_dim is None else config.rotary_dim / config.head_dim
  if form == "rope_parameters":
    params["rope_theta"] = config.base
    if partial is not None:
      params["partial_rotary_factor"] = partial
    out["rope_parameters"] = params
  else:
    out["rope_theta"] = config.base
    if partial is not None:
      out["partial_rotary_factor"] = partial
    out["rope_scaling"] = None if params["rope_type"] == "default" else params
  return out
