"""Rotary position embedding of queries and keys (``rotate`` hook), any scaling and layout.

Length-dependent scalings (dynamic NTK, LongRoPE) take their current length as
``max(q_positions, k_positions) + 1`` over the whole call (Hugging Face: ``max(position_ids) +
1`` over the batch). A full forward pass thus uses the length of the whole sequence for every
token; a KV cache that keeps keys *before* rotation re-rotates them with the frequencies of the
current length at each step and reproduces the full pass exactly (see :mod:`pejax.nn.kv_cache`).

The scalings are themselves registered by name (:func:`pejax.encodings.rope_scaling.
scaling_names`); on the command line ``--config.pe.scaling=yarn --config.pe.factor=4`` plus any
field of the chosen scaling (``beta_fast``, ``low_freq_factor``, ...).

References:
  Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding",
  arXiv 2104.09864.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from flax import nnx
import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings import rope_scaling as scalings
from pejax.encodings.rope import LAYOUTS, RopeConfig, apply_rope, rope_inv_freq
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, annotation_type
from pejax.nn.positional.interface import register_pe

_OWN_FIELDS = ("base", "layout", "fraction", "scaling")


@dataclasses.dataclass(frozen=True)
class RotaryConfig(PEConfig):
  """RoPE hyper-parameters.

  Attributes:
    base: RoPE base theta (10000 in RoFormer / Llama 2, 500000 in Llama 3).
    layout: ``"half"`` (GPT-NeoX / HF) or ``"interleaved"`` (GPT-J / Meta Llama).
    fraction: partial rotary factor in ``(0, 1]``: ``rotary_dim = int(head_dim * fraction)``.
    scaling: ``None`` or a :mod:`pejax.encodings.rope_scaling` dataclass (context extension).
  """

  base: float = 10000.0
  layout: str = "half"
  fraction: float = 1.0
  scaling: Optional[scalings.Scaling] = None

  def __post_init__(self):
    arg_checks.check_base("base", self.base)
    arg_checks.check_choice("layout", self.layout, LAYOUTS)
    arg_checks.check_positive_float("fraction", self.fraction)
    if self.fraction > 1.0:
      raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")
    if self.scaling is not None and not isinstance(self.scaling, scalings.SCALING_TYPES):
      raise ValueError(f"scaling must be None or a rope_scaling dataclass, got {self.scaling!r}")

  def rope_config(self, head_dim: int) -> RopeConfig:
    """The :class:`~pejax.encodings.rope.RopeConfig` for heads of ``head_dim``.

    Args:
      head_dim: the per-head dimension D.

    Returns:
      The pure-math config (``rotary_dim = int(head_dim * fraction)``).
    """
    return RopeConfig.from_partial_rotary_factor(head_dim, self.fraction, base=self.base,
                                                 scaling=self.scaling, layout=self.layout)

  def check_model(self, model: ModelDims) -> None:
    """Raises ``ValueError`` unless the head dim gives a valid rotation.

    Args:
      model: the decoder config (``head_dim``).
    """
    self.rope_config(model.head_dim)

  def fields(self) -> dict[str, Any]:
    """Flat fields: ``base``, ``layout``, ``fraction``, ``scaling`` (a name) and the scaling's.

    Returns:
      ``name -> value`` (``scaling="none"`` without a scaling).
    """
    flat = {"base": self.base, "layout": self.layout, "fraction": self.fraction,
            "scaling": "none" if self.scaling is None else self.scaling.name}
    if self.scaling is not None:
      flat.update(dataclasses.asdict(self.scaling))
    return flat

  @classmethod
  def from_fields(cls, values: dict[str, Any], *,
                  context: Optional[dict[str, Any]] = None) -> "RotaryConfig":
    """Builds the config from flat fields; ``scaling`` is a name and its fields sit beside it.

    Args:
      values: flat fields (see :meth:`fields`); a scaling's ``original_max_position`` of 0 or
        missing is ``context["train_len"]``; LongRoPE without factor lists derives them from
        ``context["head_dim"]`` (see ``LongRoPEScaling.from_fields``).
      context: ``train_len`` / ``head_dim`` of the experiment, if known.

    Returns:
      A validated config.
    """
    context = context or {}
    unknown = sorted(set(values) - set(cls.field_types()))
    if unknown:
      scaling_fields = sorted(set(cls.field_types()) - set(_OWN_FIELDS))
      raise ValueError(f"RotaryConfig has no field {unknown[0]!r}; fields: "
                       f"{list(_OWN_FIELDS)} and the scalings' {scaling_fields}")
    own = {k: v for k, v in values.items() if k in _OWN_FIELDS}
    rest = {k: v for k, v in values.items() if k not in _OWN_FIELDS}
    name = own.pop("scaling", None)
    if isinstance(name, str) or name is None:
      if name in (None, "", "none"):
        if rest:
          raise ValueError(f"{sorted(rest)[0]} needs a RoPE scaling (--config.pe.scaling=...); "
                           f"valid scalings: {list(scalings.scaling_names())}")
        return cls(**own)
      fraction = float(own.get("fraction", 1.0))
      head_dim = context.get("head_dim")
      rotary_dim = int(head_dim * fraction) if head_dim else None
      scaling = scalings.scaling_class(name).from_fields(
          rest, rotary_dim=rotary_dim, train_len=context.get("train_len"))
      return cls(scaling=scaling, **own)
    if rest:
      raise ValueError(f"RotaryConfig has no field {sorted(rest)[0]!r}")
    return cls(scaling=name, **own)

  @classmethod
  def field_types(cls) -> dict[str, type]:
    """Types of the flat fields, the scalings' included.

    Returns:
      ``name -> bool | int | float | str``.
    """
    types = {"base": float, "layout": str, "fraction": float, "scaling": str}
    for name in scalings.scaling_names():
      for f in dataclasses.fields(scalings.scaling_class(name)):
        types.setdefault(f.name, annotation_type(f.type))
    return types


@register_pe("rope")
class RotaryPE(PositionalEncoding):
  """Rotates the first ``rotary_dim`` channels of every query and key head by its position."""

  config_class = RotaryConfig
  translation_invariant = True

  def __init__(self, config: RotaryConfig, model: ModelDims, *, rngs: nnx.Rngs):
    super().__init__(config, model, rngs=rngs)
    self.rope = config.rope_config(model.head_dim)
    self.length_dependent = bool(config.scaling is not None
                                 and config.scaling.length_dependent)
    # A length-dependent scaling changes the frequencies with the length, not only q - k.
    self.translation_invariant = not self.length_dependent

  def rotate(self, q: jax.Array, k: jax.Array, q_positions: jax.Array,
             k_positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Rotates the first ``rotary_dim`` channels of queries and keys by their positions.

    Length-dependent scalings use ``max(q_positions, k_positions) + 1`` as the current length.

    Args:
      q: ``[B, Lq, H, D]`` queries.
      k: ``[B, Lk, K, D]`` keys.
      q_positions: int ``[B | 1, Lq]``.
      k_positions: int ``[B | 1, Lk]``.

    Returns:
      ``(q, k)`` rotated (and scaled by the scaling's attention factor), with unchanged shapes
      and dtypes.
    """
    seq_len = None
    if self.length_dependent:
      seq_len = jnp.maximum(jnp.max(q_positions), jnp.max(k_positions)) + 1
    inv_freq, attention_factor = rope_inv_freq(self.rope, seq_len=seq_len)
    layout = self.rope.layout
    q = apply_rope(q, q_positions, inv_freq, layout=layout, attention_factor=attention_factor)
    k = apply_rope(k, k_positions, inv_freq, layout=layout, attention_factor=attention_factor)
    return q, k
