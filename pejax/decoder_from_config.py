"""The decoder an experiment config describes: its PE config(s), RoPE scaling and architecture.

Translates the ``pe`` and ``model`` sections of an experiment config
(:mod:`pejax.experiment_config`) into the frozen configs of :mod:`pejax.nn`, or, for
``train.init_from_hf``, reads a Hugging Face checkpoint's architecture. Training, evaluation,
the studies and ``launch.py`` build their decoders through :func:`decoder_config_from`; a
zero-shot context extension swaps the scaling with :func:`with_rope_scaling`. Every invalid
setting raises :class:`~pejax.experiment_config.ConfigError` naming the field.

Layer: with :mod:`pejax.experiment_config`, above ``pejax.nn`` / ``pejax.hf`` (which it
imports) and below ``pejax.train`` / ``pejax.eval`` (which import it).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

import ml_collections

from pejax import experiment_config
from pejax.encodings import rope_scaling as scalings
from pejax.experiment_config import ConfigError
from pejax.nn import DecoderConfig

ROPE_SCALINGS = ("none",) + scalings.scaling_names()


def pe_config_from(config: ml_collections.ConfigDict) -> Any:
  """The PE config(s) that the ``pe`` section describes (a tuple for a per-layer pattern).

  Fields left unset (``None``) take the PE's defaults; an experiment's learned table covers
  ``data.train_len`` and a RoPE scaling's original length defaults to it.

  Args:
    config: the experiment config.

  Returns:
    A :class:`~pejax.nn.PEConfig`, or a tuple of them when ``pe.name`` lists several PEs.

  Raises:
    ConfigError: for an unknown PE, a field no chosen PE has (naming the PEs that have it), or
      an invalid value (naming the field).
  """
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top
  section = config.pe
  names = [n.strip() for n in str(section.name).split(",") if n.strip()]
  if not names:
    raise ConfigError(f"pe.name must name a PE, one of {list(registry.pe_names())}")
  chosen = {k: section[k] for k in section.keys()
            if k not in experiment_config.PE_SECTION_KEYS and section[k] is not None}
  m = config.model
  context = {"train_len": int(config.data.train_len),
             "head_dim": m.d_model // m.num_heads if m.num_heads else 0}
  configs, used = [], set()
  try:
    for name in names:
      entry = registry.registry_entry(name)
      own = set(entry.pe_class.config_class.field_types())
      used |= own
      configs.append(entry.make_config(context, **{k: v for k, v in chosen.items() if k in own}))
  except ValueError as e:
    raise ConfigError(_pe_message(str(e), section)) from None
  # A PE's own fields first (``scaling`` before the scaling's ``factor``): the message names the
  # setting the user chose, and every PE whose config accepts the field.
  primary = {f for f, (_, pes) in experiment_config.pe_fields_by_name().items() if pes}
  unused = sorted(set(chosen) - used, key=lambda f: (f not in primary, f))
  if unused:
    field = unused[0]
    owners = sorted(n for n in registry.pe_names()
                    if field in registry.get_pe_class(n).config_class.field_types())
    raise ConfigError(f"pe.{field}={chosen[field]!r} has no effect with pe.name={section.name!r}"
                      f" (PEs with this field: {', '.join(owners) or 'none registered'}); drop "
                      "it or choose such a PE")
  return configs[0] if len(configs) == 1 else tuple(configs)


def _pe_message(text: str, section: ml_collections.ConfigDict) -> str:
  """A PE config's error with its field as the config path: ``factor is required ...`` ->
  ``pe.factor is required ...`` (the scalings name their missing required field, e.g.
  ``--rope_scaling=yarn`` without a factor, before anything is constructed)."""
  field = text.split(" ", 1)[0]
  if field not in section:
    return f"pe: {text}"
  return f"pe.{text}".replace(f"(e.g. {field}=", f"(e.g. --config.pe.{field}=")


def with_rope_scaling(pe: Any, name: str, *, factor: float, original_max_position: int,
                      head_dim: int) -> Any:
  """``pe`` (a rotary PE config, or a per-layer tuple) with the scaling ``name`` instead.

  Args:
    pe: a PE config with a ``scaling`` field, or a tuple of PE configs (those with a
      ``scaling`` field are changed).
    name: a scaling name (:func:`pejax.encodings.rope_scaling.scaling_names`).
    factor: its factor.
    original_max_position: its original length (for the scalings that have one).
    head_dim: the head dim (LongRoPE's heuristic factor lists).

  Returns:
    The config(s) with the scaling replaced.

  Raises:
    ConfigError: for an unknown scaling, a bad factor, or a PE without a scaling field.
  """
  if isinstance(pe, tuple):
    return tuple(with_rope_scaling(p, name, factor=factor,
                                   original_max_position=original_max_position,
                                   head_dim=head_dim) if hasattr(p, "scaling") else p for p in pe)
  if not hasattr(pe, "scaling"):
    raise ConfigError(f"a RoPE scaling needs a rotary PE, got {type(pe).__name__}")
  try:
    cls = scalings.scaling_class(name)
    rotary_dim = int(head_dim * getattr(pe, "fraction", 1.0))
    scaling = cls.from_fields({"factor": float(factor)}, rotary_dim=rotary_dim,
                              train_len=original_max_position)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  return dataclasses.replace(pe, scaling=scaling)


def decoder_config_from(config: ml_collections.ConfigDict, *,
                        pe: Any = None) -> DecoderConfig:
  """The :class:`DecoderConfig` an experiment config describes.

  Args:
    config: the experiment config.
    pe: PE config(s) to use instead of the ``pe`` section's (zero-shot context extension at
      evaluation builds the same model with another RoPE scaling).

  Returns:
    The decoder config.

  Raises:
    ConfigError: naming the field of an invalid setting.
  """
  m = config.model
  pe = pe_config_from(config) if pe is None else pe
  windows = [w.strip() for w in str(m.get("sliding_window", "") or "").split(",") if w.strip()]
  try:
    window = tuple(int(w) or None for w in windows)
  except ValueError:
    raise ConfigError(f"model.sliding_window must be comma-separated integers, got "
                      f"{m.sliding_window!r}") from None
  chunks = [c.strip() for c in str(m.get("chunk_size", "") or "").split(",") if c.strip()]
  try:
    chunk = tuple(int(c) or None for c in chunks)
  except ValueError:
    raise ConfigError(f"model.chunk_size must be comma-separated integers, got "
                      f"{m.chunk_size!r}") from None
  scalings = tuple(s.strip() for s in str(m.get("query_scaling", "none") or "none").split(","))
  query_scaling = scalings[0] if len(set(scalings)) == 1 else scalings
  norms = {"off": False, "on": True, "l2": "l2"}
  qk_norms = tuple(n.strip() for n in str(m.get("qk_norm", "off") or "off").split(","))
  if any(n not in norms for n in qk_norms):
    raise ConfigError(f"model.qk_norm must be 'off', 'on' or 'l2' (comma-separated per layer), "
                      f"got {m.qk_norm!r}")
  qk_norm = tuple(norms[n] for n in qk_norms)
  llama4 = {}
  if "llama4" in scalings:
    llama4 = dict(query_scaling_floor=int(m.get("query_scaling_floor", 0)) or None,
                  query_scaling_strength=float(m.get("query_scaling_strength", 0.1)))
  try:
    return DecoderConfig(
        vocab_size=m.vocab_size, num_layers=m.num_layers, d_model=m.d_model,
        num_heads=m.num_heads, num_kv_heads=m.num_kv_heads or None, mlp=m.mlp,
        mlp_ratio=m.mlp_ratio, tie_embeddings=m.tie_embeddings, dtype=m.dtype,
        attention=m.attention, block_size=m.block_size,
        blockwise_threshold=blockwise_threshold_of(config), pe=pe,
        sliding_window=(window[0] if len(window) == 1 else window) if window else None,
        chunk_size=(chunk[0] if len(chunk) == 1 else chunk) if chunk else None,
        query_scaling=query_scaling, qk_norm=qk_norm[0] if len(qk_norm) == 1 else qk_norm,
        query_scaling_length=(int(config.data.train_len)
                              if {"logn", "ssmax"} & set(scalings) else 0), **llama4)
  except ValueError as e:
    raise ConfigError(str(e)) from None


def pretrained_setup(config: ml_collections.ConfigDict) -> tuple[DecoderConfig, Any]:
  """The decoder config and tokenizer of ``config.train.init_from_hf`` (fine-tuning).

  The architecture is the checkpoint's (``model.*`` is not read, except ``dtype``,
  ``attention`` and ``block_size``); a ``pe.scaling`` replaces the checkpoint's RoPE scaling
  (``pe.factor``; ``pe.original_max_position`` defaults to the checkpoint's
  ``max_position_embeddings``).

  Args:
    config: the experiment config, with ``train.init_from_hf`` set.

  Returns:
    ``(decoder config, tokenizer)``.

  Raises:
    ConfigError: when the checkpoint or tokenizer cannot be loaded (naming the file or field).
  """
  from pejax import hf  # pylint: disable=g-import-not-at-top
  from pejax.hf import safetensors_files  # pylint: disable=g-import-not-at-top
  path = str(config.train.init_from_hf)
  m = config.model
  try:
    model_config = hf.load_config(path, dtype=m.dtype, attention=m.attention,
                                  block_size=m.block_size,
                                  blockwise_threshold=blockwise_threshold_of(config))
    tokenizer = hf.load_tokenizer(path)
    context = safetensors_files.read_json(os.path.join(path, "config.json"), "config.json").get(
        "max_position_embeddings")
  except ValueError as e:
    raise ConfigError(f"train.init_from_hf: {e}") from None
  scaling = str(config.pe.get("scaling") or "none")
  if scaling != "none":
    pe = with_rope_scaling(
        model_config.pe, scaling, factor=float(config.pe.get("factor") or 1.0),
        original_max_position=int(config.pe.get("original_max_position") or context
                                  or config.data.train_len),
        head_dim=model_config.head_dim)
    model_config = dataclasses.replace(model_config, pe=pe)
  return model_config, tokenizer


def blockwise_threshold_of(config: ml_collections.ConfigDict) -> Optional[int]:
  """``config.eval.blockwise_threshold`` as the decoder and the evaluation loops take it.

  Args:
    config: the experiment config.

  Returns:
    The longest length run with dense attention, or ``None`` (from the config's 0) for the
    platform's measured crossover.
  """
  return int(config.eval.blockwise_threshold) or None
