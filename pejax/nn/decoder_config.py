"""The decoder's configuration: a frozen, hashable dataclass validated on construction."""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings.rope_scaling import Scaling
from pejax.nn.attention import ATTENTION_CHOICES

MLP_KINDS = ("swiglu", "gelu")
DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
  """Everything that defines a :class:`~pejax.nn.Decoder`. Frozen and hashable (a jit static).

  Invalid values raise ``ValueError`` naming the field, including the options of the chosen PE
  (e.g. an odd head dim with RoPE) and an unknown ``pe`` (the message lists the valid names).
  """

  # Model shape.
  vocab_size: int = 256  # Vocabulary size V.
  num_layers: int = 2  # Number of decoder blocks.
  d_model: int = 128  # Residual stream width E; head_dim = d_model // num_heads.
  num_heads: int = 4  # Query heads H.
  num_kv_heads: Optional[int] = None  # Key/value heads K (GQA, divides num_heads); None = H.
  mlp: str = "swiglu"  # "swiglu" or "gelu".
  mlp_ratio: float = 4.0  # MLP hidden width = round(mlp_ratio * d_model).
  tie_embeddings: bool = True  # Output projection = transposed token embedding.
  dtype: str = "float32"  # Compute dtype, "float32" or "bfloat16" (params, PE angles and
  # softmax stay float32; logits are returned in float32).
  norm_epsilon: float = 1e-6  # RMSNorm epsilon.

  # Attention.
  attention: str = "auto"  # "dense", "blockwise", or "auto" (blockwise past the threshold).
  block_size: int = 512  # Tile size of blockwise attention.
  blockwise_threshold: int = 2048  # Longest query length "auto" runs densely.
  cache_rotated_keys: bool = False  # KV cache keeps keys after (True) or before (False) the
  # PE rotation. False is exact for length-dependent RoPE scalings (dynamic NTK, LongRoPE):
  # every step re-rotates the cached keys for the current length; True rotates each key once
  # (cheaper per step) but keeps keys rotated for the length at which they were written.

  # Positional encoding.
  pe: str = "rope"  # Registry name: see pejax.nn.pe_names().
  rope_base: float = 10000.0  # RoPE base theta.
  rope_layout: str = "half"  # "half" (GPT-NeoX / HF) or "interleaved" (GPT-J / Meta Llama).
  rope_fraction: float = 1.0  # Partial rotary: rotary_dim = int(head_dim * rope_fraction).
  rope_scaling: Optional[Scaling] = None  # A pejax.encodings.rope_scaling dataclass or None
  # (rotary PEs only: any other pe raises rather than silently ignoring it).
  max_position: int = 2048  # Rows of the learned position table (pe="learned").
  t5_num_buckets: int = 32  # T5 relative-position buckets.
  t5_max_distance: int = 128  # T5 distance from which the last bucket is used.
  t5_bidirectional: bool = False  # T5 buckets for keys after the query (encoder style).

  def __post_init__(self):
    for name in ("vocab_size", "num_layers", "d_model", "num_heads", "block_size",
                 "blockwise_threshold"):
      arg_checks.check_positive_int(name, getattr(self, name))
    if self.d_model % self.num_heads:
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
    arg_checks.check_choice("dtype", self.dtype, DTYPES)
    arg_checks.check_positive_float("norm_epsilon", self.norm_epsilon)
    arg_checks.check_choice("attention", self.attention, ATTENTION_CHOICES)
    from pejax.nn.positional.registry import get_pe_class  # pylint: disable=g-import-not-at-top
    from pejax.nn.positional.rope import RotaryPE  # pylint: disable=g-import-not-at-top
    pe_class = get_pe_class(self.pe)
    # A scaling the PE never reads would be silently ignored: refuse it. A PE that reads
    # rope_scaling without subclassing RotaryPE declares it with `uses_rope_scaling = True`.
    if self.rope_scaling is not None and not getattr(
        pe_class, "uses_rope_scaling", issubclass(pe_class, RotaryPE)):
      raise ValueError(
          f"rope_scaling only applies to rotary PEs, got pe={self.pe!r} with "
          f"rope_scaling={self.rope_scaling!r}; drop rope_scaling or use pe='rope'")
    pe_class.check_config(self)

  @property
  def head_dim(self) -> int:
    """Per-head dimension D = d_model // num_heads."""
    return self.d_model // self.num_heads

  @property
  def kv_heads(self) -> int:
    """Number K of key/value heads (``num_kv_heads`` or ``num_heads``)."""
    return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

  @property
  def mlp_hidden(self) -> int:
    """Hidden width of the MLP."""
    return max(1, round(self.mlp_ratio * self.d_model))

  @property
  def compute_dtype(self) -> jnp.dtype:
    """The compute dtype as a jnp dtype."""
    return jnp.dtype(self.dtype)
