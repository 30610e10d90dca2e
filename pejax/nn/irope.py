"""iRoPE (Llama 4): the per-layer pattern of RoPE + chunked attention and global NoPE layers.

Axes: N layers, C attention chunk size, F temperature floor scale.

Llama 4 interleaves two kinds of attention layer. Three of every four layers use RoPE (Meta's
interleaved, complex-number layout, base 500000) with *chunked* local attention, a query seeing
only the keys of its own chunk of C = 8192 positions, and a weightless L2 norm of queries and keys
(``use_qk_norm``). Every ``nope_every``-th layer (the 4th, 8th, ...) is global attention without
positional encoding (NoPE), whose queries are scaled by the attention-temperature factor
``1 + attn_scale * log1p(floor((p + 1) / F))`` (F = 8192, attn_scale = 0.1) so that attention
stays sharp far beyond the chunk. Hugging Face's ``Llama4TextConfig`` derives the same pattern:
``no_rope_layers[i] = int((i + 1) % no_rope_layer_interval != 0)``, ``layer_types`` chunked on the
RoPE layers, the QK-norm only where ``use_rope``, the temperature only where not.

:func:`irope_pattern` returns that pattern as :class:`~pejax.nn.DecoderConfig` fields, so
``DecoderConfig(num_layers=8, **irope_pattern(8))`` is an iRoPE decoder; every piece is an
ordinary per-layer option (``pe``, ``chunk_size``, ``query_scaling``, ``qk_norm``) that can also
be set on its own.

References:
  Meta 2025, "The Llama 4 herd: The beginning of a new era of natively multimodal AI
  innovation", ai.meta.com/blog/llama-4-multimodal-intelligence (iRoPE: interleaved attention
  layers without positional embeddings, inference-time temperature scaling).
  Hugging Face ``transformers``, ``models/llama4/configuration_llama4.py`` and
  ``modeling_llama4.py`` (``Llama4TextConfig``, ``Llama4TextAttention``).
"""

from __future__ import annotations

import math
from typing import Any, Optional

from pejax.encodings import arg_checks
from pejax.nn.decoder_config import LLAMA4_ATTN_SCALE, LLAMA4_FLOOR_SCALE
from pejax.nn.positional.nope import NoPEConfig
from pejax.nn.positional.rope import RotaryConfig

# Llama 4's RoPE: base 500000 (HF Llama4TextConfig.default_theta), complex (interleaved) pairs.
LLAMA4_ROPE = RotaryConfig(base=500000.0, layout="interleaved")


def irope_pattern(num_layers: int, *, nope_every: int = 4, chunk_size: Optional[int] = 8192,
                  rope: Optional[RotaryConfig] = None, temperature_tuning: bool = True,
                  floor_scale: int = LLAMA4_FLOOR_SCALE,
                  attn_scale: float = LLAMA4_ATTN_SCALE,
                  qk_norm: Any = "l2") -> dict[str, Any]:
  """The :class:`~pejax.nn.DecoderConfig` fields of an iRoPE decoder of ``num_layers`` layers.

  Layer ``i`` is a NoPE layer when ``(i + 1) % nope_every == 0`` (Hugging Face's
  ``no_rope_layers``), else a RoPE layer.

  Args:
    num_layers: N, the decoder's ``num_layers``.
    nope_every: every how many layers one is global NoPE (HF ``no_rope_layer_interval``, 4).
    chunk_size: C, the attention chunk of the RoPE layers (HF ``attention_chunk_size``, 8192);
      ``None``: the RoPE layers attend globally.
    rope: the RoPE of the RoPE layers (default ``RotaryConfig(base=500000.0,
      layout="interleaved")``, Llama 4's).
    temperature_tuning: scale the NoPE layers' queries by Llama 4's attention temperature (HF
      ``attn_temperature_tuning``).
    floor_scale: F of the temperature (HF ``floor_scale``, 8192).
    attn_scale: strength of the temperature (HF ``attn_scale``, 0.1).
    qk_norm: the QK-norm of the RoPE layers: ``"l2"`` (Llama 4's weightless norm, HF
      ``use_qk_norm=True``), ``True`` (with a learned scale) or ``False``; NoPE layers get none.

  Returns:
    ``dict(pe=..., chunk_size=..., qk_norm=..., query_scaling=..., query_scaling_floor=...,
    query_scaling_strength=...)``: per-layer tuples of length N (a field that would be the same
    on every layer is one value; the temperature fields are left out without tuning).

  Raises:
    ValueError: naming the argument: ``num_layers`` or ``nope_every`` not a positive integer,
      ``nope_every > num_layers`` (no NoPE layer at all), a bad ``chunk_size``, ``floor_scale``,
      ``attn_scale``, ``qk_norm`` or a ``rope`` that is not a :class:`RotaryConfig`.
  """
  num_layers = arg_checks.check_positive_int("num_layers", num_layers)
  nope_every = arg_checks.check_positive_int("nope_every", nope_every)
  if nope_every > num_layers:
    raise ValueError(f"nope_every must be <= num_layers ({num_layers}) so that some layer is "
                     f"NoPE, got {nope_every}")
  if chunk_size is not None:
    chunk_size = arg_checks.check_positive_int("chunk_size", chunk_size)
  if rope is None:
    rope = LLAMA4_ROPE
  if not isinstance(rope, RotaryConfig):
    raise ValueError(f"rope must be a RotaryConfig, got {rope!r}")
  if not isinstance(temperature_tuning, bool):
    raise ValueError(f"temperature_tuning must be a bool, got {temperature_tuning!r}")
  floor_scale = arg_checks.check_positive_int("floor_scale", floor_scale)
  if (isinstance(attn_scale, bool) or not isinstance(attn_scale, (int, float))
      or not math.isfinite(attn_scale)):
    raise ValueError(f"attn_scale must be a finite number, got {attn_scale!r}")
  if not (isinstance(qk_norm, bool) or qk_norm == "l2"):
    raise ValueError(f"qk_norm must be False, True or 'l2', got {qk_norm!r}")
  nope = tuple((i + 1) % nope_every == 0 for i in range(num_layers))
  fields: dict[str, Any] = dict(
      pe=tuple(NoPEConfig() if is_nope else rope for is_nope in nope),
      chunk_size=tuple(None if is_nope else chunk_size for is_nope in nope),
      qk_norm=tuple(False if is_nope else qk_norm for is_nope in nope))
  if temperature_tuning:
    fields.update(query_scaling=tuple("llama4" if is_nope else "none" for is_nope in nope),
                  query_scaling_floor=floor_scale, query_scaling_strength=float(attn_scale))
  return {name: value[0] if isinstance(value, tuple) and len(set(value)) == 1 else value
          for name, value in fields.items()}
