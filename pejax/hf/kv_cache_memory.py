"""How many bytes the KV cache of a decoder takes at a context length, before allocating it.

Axes: B batch, T cache slots of a layer, K key/value heads, D head dim, N layers.

Every layer caches a key and a value per token and key/value head: two arrays ``[B, T, K, D]``
(:class:`pejax.nn.KVCache`). A global layer needs ``T = seq_len`` slots; a sliding-window layer of
window ``W`` needs only ``T = min(seq_len, W)`` (a ring buffer: Mistral's rolling buffer cache,
Jiang et al. 2023, arXiv 2310.06825). Grouped-query attention divides the cache by
``num_heads / num_kv_heads`` (Ainslie et al. 2023, arXiv 2305.13245). Quantized caches store 1 byte
per element (int8, float8_e4m3fn) or half a byte (int4) plus one float32 scale per token and
key/value head for the keys and one for the values, ``[B, T, K]`` each.

``python -m pejax.hf.kv_cache_memory_table`` prints the table of four open 7-8B models in
docs/long_context.md (:mod:`pejax.hf.kv_cache_memory_table`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Union

import numpy as np

from pejax.encodings import arg_checks
from pejax.hf.config_mapping import decoder_config_from_hf
from pejax.nn.decoder_config import DecoderConfig

# Bytes of one scale (float32) per token and key/value head of a quantized cache.
SCALE_BYTES = 4

# dtype name -> (bits per stored key/value element, whether float32 scales are stored).
_DTYPE_BITS = {
    "float32": (32, False),
    "bfloat16": (16, False),
    "float16": (16, False),
    "int8": (8, True),
    "float8_e4m3fn": (8, True),
    "int4": (4, True),
}
_DTYPE_ALIASES = {"fp8": "float8_e4m3fn"}


def _dtype_name(dtype: Any) -> str:
  """The canonical name of a cache dtype (a name, an alias, or a numpy / jax dtype)."""
  if isinstance(dtype, str):
    name = _DTYPE_ALIASES.get(dtype, dtype)
  else:
    try:
      name = np.dtype(dtype).name if dtype is not None else None
    except TypeError:
      name = None
  if name not in _DTYPE_BITS:
    raise ValueError(f"dtype must be one of {[*_DTYPE_BITS, *_DTYPE_ALIASES]} (or the numpy / "
                     f"jax dtype of one), got {dtype!r}")
  return name


def _decoder_config(config: Union[DecoderConfig, Mapping[str, Any]]) -> DecoderConfig:
  if isinstance(config, DecoderConfig):
    return config
  if not isinstance(config, Mapping):
    raise ValueError("config must be a pejax.nn.DecoderConfig or a Hugging Face config.json dict, "
                     f"got {type(config).__name__}")
  try:
    return decoder_config_from_hf(config)
  except ValueError as error:
    raise ValueError(f"config (a config.json dict, read by pejax.hf.decoder_config_from_hf): "
                     f"{error}") from error


def kv_cache_memory(config: Union[DecoderConfig, Mapping[str, Any]], *, seq_len: int,
                    batch_size: int = 1, dtype: Any = "bfloat16") -> int:
  """Bytes of the cached keys and values of every layer for ``batch_size`` rows of ``seq_len``.

  Per layer: keys and values ``[B, T, K, D]`` of ``dtype``, that is
  ``2 * B * T * K * D * bytes_per_element``, where ``T = seq_len`` for a global layer and
  ``T = min(seq_len, W)`` for a sliding-window layer of window ``W`` (a ring buffer of the ``W``
  keys a query can see; Jiang et al. 2023, arXiv 2310.06825). ``int8`` and ``float8_e4m3fn``
  take 1 byte per element, ``int4`` half a byte (two per byte along D, an odd D rounds up), plus
  float32 scales ``[B, T, K]`` for the keys and for the values: ``2 * B * T * K * 4`` more bytes
  per layer. ``int4`` is a figure of this calculator only (no pejax cache stores it).

  Not counted: the cache's int32 positions ``[B, T]`` (4 bytes per token, shared by the layers),
  content-aware PE features (FoX), weights and activations. pejax's own cache takes exactly this
  figure (:meth:`pejax.nn.Decoder.init_cache` with ``dtype=``): for a global model with
  ``max_length=seq_len``, for a model whose layers share one window W with
  ``eviction="window"`` and ``max_length=W`` (a ring buffer); a model mixing windowed and global
  layers gets ``max_length`` slots in every layer, more than this figure.

  From a ``config.json`` dict (through :func:`pejax.hf.decoder_config_from_hf`, whose model
  families it accepts): K = ``num_key_value_heads`` (default ``num_attention_heads``), D =
  ``head_dim`` when given (Gemma, Qwen3) else ``hidden_size // num_attention_heads``, windows
  from ``sliding_window`` (Mistral, Phi-3: every layer) or, for Qwen2 / Qwen3, ``layer_types``
  (``"sliding_attention"`` / ``"full_attention"``) or else the layers with index >=
  ``max_window_layers`` when ``use_sliding_window`` is true; with ``use_sliding_window`` false
  (Qwen2.5's config files) every layer is global, as transformers' ``Qwen2Config`` sets
  ``sliding_window = sliding_window if use_sliding_window else None``.

  Args:
    config: a :class:`pejax.nn.DecoderConfig`, or a parsed Hugging Face ``config.json`` dict.
    seq_len: tokens per row (prompt plus generated), a positive int.
    batch_size: rows B, a positive int.
    dtype: ``"float32"`` (4 bytes), ``"bfloat16"`` / ``"float16"`` (2), ``"int8"`` /
      ``"float8_e4m3fn"`` (alias ``"fp8"``) (1 + scales), ``"int4"`` (0.5 + scales), or the
      numpy / jax dtype of one of them.

  Returns:
    The number of bytes (an exact int) of keys and values (and scales) over all N layers.

  Raises:
    ValueError: naming the argument and the value: a non-positive or non-int ``seq_len`` or
      ``batch_size``, another ``dtype``, a ``config`` that is neither, or a ``config.json``
      dict that :func:`pejax.hf.decoder_config_from_hf` rejects (a missing field, another
      ``model_type``).

  References:
    Jiang et al. 2023, Mistral 7B (rolling buffer cache): https://arxiv.org/abs/2310.06825
    Ainslie et al. 2023, GQA: https://arxiv.org/abs/2305.13245
    transformers ``src/transformers/models/qwen2/configuration_qwen2.py`` (``Qwen2Config``:
    ``layer_types[i] = "sliding_attention" if sliding_window is not None and i >=
    max_window_layers``, after ``sliding_window = None`` unless ``use_sliding_window``).
  """
  seq_len = arg_checks.check_positive_int("seq_len", seq_len)
  batch_size = arg_checks.check_positive_int("batch_size", batch_size)
  bits, scaled = _DTYPE_BITS[_dtype_name(dtype)]
  decoder = _decoder_config(config)
  kv_heads, head_dim = decoder.kv_heads, decoder.head_dim
  vector_bytes = (head_dim * bits + 7) // 8 + (SCALE_BYTES if scaled else 0)
  total = 0
  for window in decoder.layer_windows:
    slots = seq_len if window is None else min(seq_len, window)
    total += 2 * batch_size * slots * kv_heads * vector_bytes
  return total
