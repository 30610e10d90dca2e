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
QUERY_SCALINGS = ("none", "logn", "ssmax")

PESpec = Union[str, PEConfig]


def _per_layer(name: str, value, num_layers: int) -> tuple:
  """A value or a tuple cycled over ``num_layers`` layers (its length must divide them)."""
  values = tuple(value) if isinstance(value, (tuple, list)) else (value,)
  if not values or num_layers % len(values):
    raise ValueError(f"{name} must be one value or a tuple whose length divides num_layers "
                     f"({num_layers}), got {value!r}")
  return tuple(values[i % len(values)] for i in range(num_layers))


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
  qk_norm: bool = False  # Per-head RMSNorm of queries and keys before the rotation (Qwen3).
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
  query_scaling: str = "none"  # "logn" (Qwen-1 / Su) or "ssmax" (Nakanishi 2025) or "none".
  query_scaling_length: int = 0  # Training length L of "logn": q * max(1, log(n) / log(L)).

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
    for name in ("scale_embeddings", "qkv_bias", "output_bias", "qk_norm"):
      if not isinstance(getattr(self, name), bool):
        raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
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
    arg_checks.check_choice("query_scaling", self.query_scaling, QUERY_SCALINGS)
    arg_checks.check_nonnegative_int("query_scaling_length", self.query_scaling_length)
    if self.query_scaling == "logn":
      arg_checks.check_positive_int("query_scaling_length", self.query_scaling_length)
    if self.query_scaling_length == 1 and self.query_scaling != "none":
      raise ValueError(f"query_scaling_length must be >= 2 for query_scaling="
                       f"{self.query_scaling!r} (log L divides), got 1")
    if self.query_scaling == "none" and self.query_scaling_length:
      raise ValueError(f"query_scaling_length={self.query_scaling_length} has no effect with "
                       "query_scaling='none'; set query_scaling='logn' or 'ssmax', or leave it 0")

  @property
  def layer_pes(self) -> tuple[PEConfig, ...]:
    """The PE config of each layer (``num_layers`` entries)."""
    return _per_layer("pe", self.pe, self.num_layers)

  @property
  def layer_windows(self) -> tuple[Optional[int], ...]:
    """The sliding window of each layer (``None``: global attention)."""
    return _per_layer("sliding_window", self.sliding_window, self.num_layers)

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
