"""The decoder's configuration: a frozen, hashable dataclass validated on construction."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Union

import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.nn.attention import ATTENTION_CHOICES
from pejax.nn.positional import registry
from pejax.nn.positional.interface import PEConfig
from pejax.nn.positional.registry import pe_name_of

MLP_KINDS = ("swiglu", "gelu", "geglu")
DTYPES = ("float32", "bfloat16")
QUERY_SCALINGS = ("none", "logn", "ssmax", "llama4")
QK_NORMS = (False, True, "l2")
# Llama 4's attention-temperature defaults (Hugging Face Llama4TextConfig).
LLAMA4_FLOOR_SCALE = 8192
LLAMA4_ATTN_SCALE = 0.1

PESpec = Union[str, PEConfig]


def _per_layer(name: str, value, num_layers: int) -> tuple:
  """A value or a tuple cycled over ``num_layers`` layers (its length must divide them)."""
  values = tuple(value) if isinstance(value, (tuple, list)) else (value,)
  if not values or num_layers % len(values):
    raise ValueError(f"{name} must be one value or a tuple whose length divides num_layers "
                     f"({num_layers}), got {value!r}")
  return tuple(values[i % len(values)] for i in range(num_layers))


def _store_per_layer(config, name: str) -> None:
  """Stores field ``name`` of a per-layer option as a tuple (lists are not hashable), or as its
  one value when every entry is equal (so ``config.chunk_size`` reads ``8`` for ``(8, 8)``)."""
  value = getattr(config, name)
  if isinstance(value, (tuple, list)):
    values = tuple(value)
    object.__setattr__(config, name, values[0] if len(set(values)) == 1 else values)


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
  """Everything that defines a :class:`~pejax.nn.Decoder`. Frozen and hashable (a jit static).

  Invalid values raise ``ValueError`` naming the field, including the options of the chosen PE
  (e.g. an odd head dim with RoPE) and an unknown ``pe`` (the message lists the valid names).

  ``pe`` is a PE config (``RotaryConfig(base=5e5)``, see :func:`pejax.nn.pe_config`), a registry
  name (``"alibi"``: that PE with its defaults), or a tuple of those cycled over the layers
  (per-layer patterns: ``("rope", "rope", "rope", "none")`` with ``sliding_window=(128, 128, 128,
  None)`` is RNoPE-SWA). Names are normalized to configs on construction, so ``config.pe`` is
  always a :class:`PEConfig` or a tuple of them; ``config.pe_name`` gives the name(s).

  ``sliding_window``, ``chunk_size``, ``query_scaling`` and ``qk_norm`` take per-layer tuples the
  same way (a tuple of ``chunk_size``, ``query_scaling`` or ``qk_norm`` whose entries are all
  equal is stored as that one value). Llama 4's iRoPE
  (chunked RoPE layers with an L2 QK-norm, every 4th layer global NoPE with temperature-tuned
  queries) is :func:`pejax.nn.irope_pattern`.
  """

  # Model shape.
  vocab_size: int = 256  # Vocabulary size V.
  num_layers: int = 2  # Number of decoder blocks.
  d_model: int = 128  # Residual stream width E; head_dim = d_model // num_heads by default.
  num_heads: int = 4  # Query heads H.
  num_kv_heads: Optional[int] = None  # Key/value heads K (GQA, divides num_heads); None = H.
  mlp: str = "swiglu"  # "swiglu", "gelu" or "geglu" (gated, tanh-approximated GELU: Gemma).
  mlp_ratio: float = 4.0  # MLP hidden width = round(mlp_ratio * d_model) unless mlp_dim is set.
  tie_embeddings: bool = True  # Output projection = transposed token embedding.
  dtype: str = "float32"  # Compute dtype, "float32" or "bfloat16" (params, PE angles and
  # softmax stay float32; logits are returned in float32).
  norm_epsilon: float = 1e-6  # RMSNorm epsilon.

  # Options of pretrained architectures (Hugging Face checkpoints); the defaults are pejax's own.
  explicit_head_dim: Optional[int] = None  # Per-head dim D when not d_model // num_heads
  # (Gemma, Qwen3); None = d_model // num_heads (which must then divide evenly).
  mlp_dim: Optional[int] = None  # MLP hidden width F (HF intermediate_size); None = mlp_ratio.
  scale_embeddings: bool = True  # Multiply token embeddings by sqrt(d_model) (pejax, Gemma);
  # False for Llama / Mistral / Qwen / Phi-3, which use them as they are.
  qkv_bias: bool = False  # Biases on the query / key / value projections (Qwen2).
  output_bias: bool = False  # Bias on the attention output projection.
  qk_norm: Union[bool, str, tuple] = False  # Per-head RMSNorm of queries and keys before the
  # rotation: True = with a learned scale (Qwen3), "l2" = weightless, x * rsqrt(mean(x^2) + eps)
  # (Llama 4's L2 norm, which it applies after the rotation: the same numbers, since a rotation
  # keeps mean(x^2)); a tuple is cycled over the layers.
  norm_offset: float = 0.0  # RMSNorm multiplies by (norm_offset + scale); Gemma: 1.0 with
  # scales stored around 0.

  # Attention.
  attention: str = "auto"  # "dense", "blockwise", or "auto" (blockwise past the threshold).
  block_size: int = 512  # Tile size of blockwise attention.
  blockwise_threshold: Optional[int] = None  # Longest query length "auto" runs densely; None:
  # the platform's measured crossover (pejax.nn.attention: 1024 on CPU).
  cache_rotated_keys: bool = False  # KV cache keeps keys after (True) or before (False) the
  # PE rotation. False is exact for length-dependent RoPE scalings (dynamic NTK, LongRoPE):
  # every step re-rotates the cached keys for the current length; True rotates each key once
  # (cheaper per step) but keeps keys rotated for the length at which they were written.

  # Positional encoding and attention pattern.
  pe: Union[PESpec, tuple] = "rope"  # A PE config, a registry name, or a per-layer tuple.
  sliding_window: Union[None, int, tuple] = None  # Local attention: a query sees the W most
  # recent slots (itself included); None = global. A tuple is cycled over the layers.
  chunk_size: Union[None, int, tuple] = None  # Chunked local attention (Llama 4): a query at
  # position p sees only keys at positions k with k // C == p // C; None = global. A tuple is
  # cycled over the layers; with a sliding window on the same layer both masks apply.
  query_scaling: Union[str, tuple] = "none"  # "logn" (Qwen-1 / Su), "ssmax" (Nakanishi 2025),
  # "llama4" (Llama 4's attention-temperature tuning) or "none"; a tuple per layer.
  query_scaling_length: int = 0  # Training length L of "logn": q * max(1, log(n) / log(L)).
  query_scaling_floor: Optional[int] = None  # "llama4": q * (1 + s * log1p((p + 1) // F)), F
  # = HF floor_scale (None: 8192).
  query_scaling_strength: Optional[float] = None  # "llama4": s = HF attn_scale (None: 0.1).

  def __post_init__(self):
    for name in ("vocab_size", "num_layers", "d_model", "num_heads", "block_size"):
      arg_checks.check_positive_int(name, getattr(self, name))
    if self.blockwise_threshold is not None:
      arg_checks.check_positive_int("blockwise_threshold", self.blockwise_threshold)
    if self.explicit_head_dim is not None:
      arg_checks.check_positive_int("explicit_head_dim", self.explicit_head_dim)
    elif self.d_model % self.num_heads:
      raise ValueError(
          f"d_model must be divisible by num_heads ({self.num_heads}), got {self.d_model}")
    if self.num_kv_heads is not None:
      arg_checks.check_positive_int("num_kv_heads", self.num_kv_heads)
      if self.num_heads % self.num_kv_heads:
        raise ValueError(
            f"num_heads must be divisible by num_kv_heads, got num_heads={self.num_heads}, "
            f"num_kv_heads={self.num_kv_heads}")
    arg_checks.check_choice("mlp", self.mlp, MLP_KINDS)
    arg_checks.check_positive_float("mlp_ratio", self.mlp_ratio)
    if self.mlp_dim is not None:
      arg_checks.check_positive_int("mlp_dim", self.mlp_dim)
    if not isinstance(self.norm_offset, (int, float)) or isinstance(self.norm_offset, bool) or (
        not math.isfinite(self.norm_offset)):
      raise ValueError(f"norm_offset must be a finite number, got {self.norm_offset!r}")
    for name in ("scale_embeddings", "qkv_bias", "output_bias"):
      if not isinstance(getattr(self, name), bool):
        raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
    for norm in _per_layer("qk_norm", self.qk_norm, self.num_layers):
      if not (isinstance(norm, bool) or norm == "l2"):
        raise ValueError(f"qk_norm must be False, True or 'l2' (or a per-layer tuple of them), "
                         f"got {self.qk_norm!r}")
    _store_per_layer(self, "qk_norm")
    arg_checks.check_choice("dtype", self.dtype, DTYPES)
    arg_checks.check_positive_float("norm_epsilon", self.norm_epsilon)
    arg_checks.check_choice("attention", self.attention, ATTENTION_CHOICES)
    specs = self.pe if isinstance(self.pe, (tuple, list)) else (self.pe,)
    configs = tuple(registry.as_pe_config(pe) for pe in specs)
    _per_layer("pe", configs, self.num_layers)  # Checks that the pattern divides the layers.
    unique = tuple(dict.fromkeys(configs))
    object.__setattr__(self, "pe", unique[0] if len(unique) == 1 else configs)
    for pe in unique:
      pe.check_model(self)
      pe_class = registry.pe_class_of(pe)
      if pe_class.changes_key_dim and self.cache_rotated_keys:
        raise ValueError(f"cache_rotated_keys=True cannot serve pe={pe_name_of(pe)!r} "
                         "(its rotation changes the key dimension); use cache_rotated_keys=False")
    windows = _per_layer("sliding_window", self.sliding_window, self.num_layers)
    for window in windows:
      if window is not None:
        arg_checks.check_positive_int("sliding_window", window)
    if isinstance(self.sliding_window, list):
      object.__setattr__(self, "sliding_window", tuple(self.sliding_window))
    for chunk in _per_layer("chunk_size", self.chunk_size, self.num_layers):
      if chunk is not None:
        arg_checks.check_positive_int("chunk_size", chunk)
    _store_per_layer(self, "chunk_size")
    scalings = _per_layer("query_scaling", self.query_scaling, self.num_layers)
    for scaling in scalings:
      arg_checks.check_choice("query_scaling", scaling, QUERY_SCALINGS)
    _store_per_layer(self, "query_scaling")
    kinds = set(scalings)
    shown = self.query_scaling
    arg_checks.check_nonnegative_int("query_scaling_length", self.query_scaling_length)
    if "logn" in kinds:
      arg_checks.check_positive_int("query_scaling_length", self.query_scaling_length)
    if self.query_scaling_length == 1 and kinds & {"logn", "ssmax"}:
      raise ValueError(f"query_scaling_length must be >= 2 for query_scaling={shown!r} (log L "
                       "divides), got 1")
    if self.query_scaling_length and not kinds & {"logn", "ssmax"}:
      raise ValueError(f"query_scaling_length={self.query_scaling_length} has no effect with "
                       f"query_scaling={shown!r}; set query_scaling='logn' or 'ssmax', or leave "
                       "it 0")
    for name in ("query_scaling_floor", "query_scaling_strength"):
      if getattr(self, name) is not None and "llama4" not in kinds:
        raise ValueError(f"{name}={getattr(self, name)!r} has no effect with query_scaling="
                         f"{shown!r}; set query_scaling='llama4' (on some layer), or leave it "
                         "None")
    if self.query_scaling_floor is not None:
      arg_checks.check_positive_int("query_scaling_floor", self.query_scaling_floor)
    strength = self.query_scaling_strength
    if strength is not None and (isinstance(strength, bool) or not isinstance(
        strength, (int, float)) or not math.isfinite(strength)):
      raise ValueError(f"query_scaling_strength must be a finite number, got {strength!r}")

  @property
  def layer_pes(self) -> tuple[PEConfig, ...]:
    """The PE config of each layer (``num_layers`` entries)."""
    return _per_layer("pe", self.pe, self.num_layers)

  @property
  def layer_windows(self) -> tuple[Optional[int], ...]:
    """The sliding window of each layer (``None``: global attention)."""
    return _per_layer("sliding_window", self.sliding_window, self.num_layers)

  @property
  def layer_chunk_sizes(self) -> tuple[Optional[int], ...]:
    """The attention chunk size of each layer (``None``: no chunking)."""
    return _per_layer("chunk_size", self.chunk_size, self.num_layers)

  @property
  def layer_query_scalings(self) -> tuple[str, ...]:
    """The query scaling of each layer (``"none"``, ``"logn"``, ``"ssmax"``, ``"llama4"``)."""
    return _per_layer("query_scaling", self.query_scaling, self.num_layers)

  @property
  def layer_qk_norms(self) -> tuple[Union[bool, str], ...]:
    """The QK-norm of each layer (``False``, ``True``: learned scale, ``"l2"``: weightless)."""
    return _per_layer("qk_norm", self.qk_norm, self.num_layers)

  @property
  def llama4_floor_scale(self) -> int:
    """F of ``query_scaling="llama4"``: ``query_scaling_floor`` or Llama 4's 8192."""
    return (LLAMA4_FLOOR_SCALE if self.query_scaling_floor is None
            else self.query_scaling_floor)

  @property
  def llama4_attn_scale(self) -> float:
    """s of ``query_scaling="llama4"``: ``query_scaling_strength`` or Llama 4's 0.1."""
    return (LLAMA4_ATTN_SCALE if self.query_scaling_strength is None
            else float(self.query_scaling_strength))

  @property
  def pe_name(self) -> str:
    """The registry name of the PE (comma-separated per layer for a per-layer pattern)."""
    if isinstance(self.pe, tuple):
      return ",".join(pe_name_of(pe) for pe in self.pe)
    return pe_name_of(self.pe)

  @property
  def head_dim(self) -> int:
    """Per-head dimension D: ``explicit_head_dim``, else ``d_model // num_heads``."""
    if self.explicit_head_dim is not None:
      return self.explicit_head_dim
    return self.d_model // self.num_heads

  @property
  def kv_heads(self) -> int:
    """Number K of key/value heads (``num_kv_heads`` or ``num_heads``)."""
    return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

  @property
  def mlp_hidden(self) -> int:
    """Hidden width F of the MLP: ``mlp_dim``, else ``round(mlp_ratio * d_model)``."""
    if self.mlp_dim is not None:
      return self.mlp_dim
    return max(1, round(self.mlp_ratio * self.d_model))

  @property
  def compute_dtype(self) -> jnp.dtype:
    """The compute dtype as a jnp dtype."""
    return jnp.dtype(self.dtype)
