"""RoPE context-extension scalings as frozen, validated dataclasses.

Each scaling changes the inverse frequencies (and possibly an attention factor) that
:func:`pejax.rope_inv_freq` returns; the numbers equal Hugging Face `transformers`
``ROPE_INIT_FUNCTIONS`` for the same configuration (float32 op order, YaRN ``truncate``, llama3
band blending, LongRoPE short/long switch).

References:
  - Linear / position interpolation: Chen et al. 2023, "Extending Context Window of Large Language
    Models via Positional Interpolation", arXiv 2306.15595.
  - NTK-aware (static) and dynamic NTK: bloc97 2023 (Reddit / LocalLLaMA post), and the dynamic
    form of emozilla 2023, as implemented in `transformers`.
  - YaRN: Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language Models",
    arXiv 2309.00071. The frequency ramp follows the shipped code (linear in dimension index
    between the two correction dims), not the paper's wavelength-ratio ramp.
  - Llama 3: Meta 2024, "The Llama 3 Herd of Models", arXiv 2407.21783 (``rope_type="llama3"``).
  - LongRoPE: Ding et al. 2024, "LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens",
    arXiv 2402.13753 (as shipped with Phi-3).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple, Union

from pejax.encodings import arg_checks


def _check_factor(value: float) -> None:
  arg_checks.check_positive_float("factor", value)


def _check_original(value: int) -> None:
  arg_checks.check_positive_int("original_max_position", value)


@dataclasses.dataclass(frozen=True)
class LinearScaling:
  """Position interpolation: every frequency divided by ``factor`` (HF ``rope_type="linear"``).

  Attributes:
    factor: context extension factor s > 0; positions are effectively compressed by s.
  """

  factor: float

  def __post_init__(self):
    _check_factor(self.factor)


@dataclasses.dataclass(frozen=True)
class NTKScaling:
  """Static NTK-aware scaling: the base becomes ``base * factor ** (d / (d - 2))``.

  With ``d`` the rotated dimension. High frequencies are kept (extrapolated), and the lowest
  frequency equals position interpolation's (``inv_freq / factor``).

  Attributes:
    factor: context extension factor s > 0.
  """

  factor: float

  def __post_init__(self):
    _check_factor(self.factor)


@dataclasses.dataclass(frozen=True)
class DynamicNTKScaling:
  """Dynamic NTK: NTK-aware base chosen from the current length (HF ``rope_type="dynamic"``).

  For ``seq_len <= original_max_position`` the frequencies equal the unscaled ones; beyond,
  ``base * (factor * seq_len / original - (factor - 1)) ** (d / (d - 2))``.

  Attributes:
    factor: scaling factor s > 0.
    original_max_position: the training context length (HF ``max_position_embeddings``).
  """

  factor: float
  original_max_position: int

  def __post_init__(self):
    _check_factor(self.factor)
    _check_original(self.original_max_position)


@dataclasses.dataclass(frozen=True)
class YaRNScaling:
  """YaRN: per-frequency blend of interpolation and extrapolation plus an attention factor.

  Attributes:
    factor: scaling factor s > 0.
    original_max_position: the pre-training context length.
    beta_fast: number of rotations above which a frequency is extrapolated (kept), default 32.
    beta_slow: number of rotations below which a frequency is interpolated (divided), default 1.
    mscale: optional numerator mscale of the DeepSeek-style attention factor.
    mscale_all_dim: optional denominator mscale; when both are truthy the attention factor is
      ``get_mscale(s, mscale) / get_mscale(s, mscale_all_dim)``.
    truncate: floor/ceil the correction range to integers (HF default ``True``; gpt-oss uses
      ``False``).
    attention_factor: explicit attention factor overriding the formulas.
  """

  factor: float
  original_max_position: int
  beta_fast: float = 32.0
  beta_slow: float = 1.0
  mscale: Optional[float] = None
  mscale_all_dim: Optional[float] = None
  truncate: bool = True
  attention_factor: Optional[float] = None

  def __post_init__(self):
    _check_factor(self.factor)
    _check_original(self.original_max_position)
    arg_checks.check_positive_float("beta_fast", self.beta_fast)
    arg_checks.check_positive_float("beta_slow", self.beta_slow)
    if self.beta_fast <= self.beta_slow:
      raise ValueError(
          f"beta_fast must be greater than beta_slow, got beta_fast={self.beta_fast}, "
          f"beta_slow={self.beta_slow}")
    if self.attention_factor is not None:
      arg_checks.check_positive_float("attention_factor", self.attention_factor)
    for name in ("mscale", "mscale_all_dim"):
      value = getattr(self, name)
      if value is not None and (not math.isfinite(float(value)) or float(value) < 0):
        raise ValueError(f"{name} must be a non-negative number or None, got {value!r}")


@dataclasses.dataclass(frozen=True)
class Llama3Scaling:
  """Llama 3.1 scaling: low frequencies divided by ``factor``, high kept, a smooth band between.

  Attributes:
    factor: scaling factor for the low-frequency band.
    low_freq_factor: wavelengths longer than ``original / low_freq_factor`` are interpolated.
    high_freq_factor: wavelengths shorter than ``original / high_freq_factor`` are kept.
    original_max_position: the pre-training context length (8192 for Llama 3.1).
  """

  factor: float
  low_freq_factor: float
  high_freq_factor: float
  original_max_position: int

  def __post_init__(self):
    _check_factor(self.factor)
    _check_original(self.original_max_position)
    arg_checks.check_positive_float("low_freq_factor", self.low_freq_factor)
    arg_checks.check_positive_float("high_freq_factor", self.high_freq_factor)
    if self.high_freq_factor <= self.low_freq_factor:
      raise ValueError(
          "high_freq_factor must be greater than low_freq_factor, got "
          f"high_freq_factor={self.high_freq_factor}, low_freq_factor={self.low_freq_factor}")


@dataclasses.dataclass(frozen=True)
class LongRoPEScaling:
  """LongRoPE: per-frequency rescale factors, ``short_factor`` up to the original length.

  For ``seq_len > original_max_position`` the ``long_factor`` list is used, else
  ``short_factor``; each ``inv_freq[i]`` is divided by the chosen factor ``[i]``.

  Attributes:
    short_factor: tuple of ``rotary_dim // 2`` positive factors for short contexts.
    long_factor: tuple of ``rotary_dim // 2`` positive factors for long contexts.
    original_max_position: the pre-training context length (the switch point).
    factor: the context extension ratio (HF: ``factor``, else ``max_position_embeddings /
      original_max_position_embeddings``); defines the attention factor
      ``sqrt(1 + ln(factor) / ln(original))`` (1.0 when ``None`` or ``<= 1``).
    attention_factor: explicit attention factor overriding the formula.
  """

  short_factor: Tuple[float, ...]
  long_factor: Tuple[float, ...]
  original_max_position: int
  factor: Optional[float] = None
  attention_factor: Optional[float] = None

  def __post_init__(self):
    for name in ("short_factor", "long_factor"):
      value = getattr(self, name)
      if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or not len(value):
        raise ValueError(f"{name} must be a non-empty sequence of positive numbers, got {value!r}")
      values = tuple(float(v) for v in value)
      if any(not math.isfinite(v) or v <= 0 for v in values):
        raise ValueError(f"{name} must contain only positive finite numbers, got {value!r}")
      object.__setattr__(self, name, values)  # Tuples keep the dataclass hashable.
    if len(self.short_factor) != len(self.long_factor):
      raise ValueError(
          "short_factor and long_factor must have the same length, got "
          f"{len(self.short_factor)} and {len(self.long_factor)}")
    _check_original(self.original_max_position)
    if self.factor is not None:
      _check_factor(self.factor)
    if self.attention_factor is not None:
      arg_checks.check_positive_float("attention_factor", self.attention_factor)


Scaling = Union[LinearScaling, NTKScaling, DynamicNTKScaling, YaRNScaling, Llama3Scaling,
                LongRoPEScaling]

SCALING_TYPES = (LinearScaling, NTKScaling, DynamicNTKScaling, YaRNScaling, Llama3Scaling,
                 LongRoPEScaling)


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
  """YaRN's attention temperature ``0.1 * mscale * ln(scale) + 1`` (1.0 for ``scale <= 1``)."""
  if scale <= 1:
    return 1.0
  return 0.1 * mscale * math.log(scale) + 1.0


def yarn_attention_factor(scaling: YaRNScaling) -> float:
  """The attention factor HF computes for a YaRN config (see :class:`YaRNScaling`)."""
  if scaling.attention_factor is not None:
    return float(scaling.attention_factor)
  if scaling.mscale and scaling.mscale_all_dim:
    return float(yarn_get_mscale(scaling.factor, scaling.mscale) /
                 yarn_get_mscale(scaling.factor, scaling.mscale_all_dim))
  return yarn_get_mscale(scaling.factor)


def yarn_correction_range(scaling: YaRNScaling, *, dim: int,
                          base: float) -> Tuple[float, float]:
  """The (low, high) dimension-pair indices between which YaRN's ramp goes from 0 to 1.

  Args:
    scaling: the YaRN configuration.
    dim: the rotated dimension (``rotary_dim``).
    base: RoPE base.

  Returns:
    ``(low, high)`` clipped to ``[0, dim - 1]``, integers when ``scaling.truncate``.
  """

  def correction_dim(num_rotations: float) -> float:
    return (dim * math.log(scaling.original_max_position / (num_rotations * 2 * math.pi))) / (
        2 * math.log(base))

  low = correction_dim(scaling.beta_fast)
  high = correction_dim(scaling.beta_slow)
  if scaling.truncate:
    low, high = math.floor(low), math.ceil(high)
  return max(low, 0), min(high, dim - 1)


def longrope_attention_factor(scaling: LongRoPEScaling) -> float:
  """The attention factor HF computes for a LongRoPE config (see :class:`LongRoPEScaling`)."""
  if scaling.attention_factor is not None:
    return float(scaling.attention_factor)
  if scaling.factor is None or scaling.factor <= 1.0:
    return 1.0
  return math.sqrt(1 + math.log(scaling.factor) / math.log(scaling.original_max_position))
