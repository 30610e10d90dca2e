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
from typing import Any, ClassVar, Dict, Optional, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks

Array = jax.Array
SeqLen = Union[int, np.integer, Array, None]


def exponents(dim: int) -> np.ndarray:
  """``arange(0, dim, 2) / dim`` in float32, the op order of HF and Meta.

  Args:
    dim: the rotated dimension R (even).

  Returns:
    float32 ``[R // 2]``.
  """
  return np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)


def default_inv_freq(base: float, dim: int) -> np.ndarray:
  """``1 / base ** (2i / dim)`` in float32, op for op as Hugging Face computes it.

  Args:
    base: RoPE base theta.
    dim: the rotated dimension R (even).

  Returns:
    float32 ``[R // 2]`` inverse frequencies.
  """
  return (np.float32(1.0) / (np.float32(base) ** exponents(dim))).astype(np.float32)


def is_concrete(value: Any) -> bool:
  """Whether ``value`` has a value now (not a tracer inside ``jax.jit``)."""
  return not isinstance(value, jax.core.Tracer)


_SCALINGS: Dict[str, type] = {}


def register_scaling(cls: type) -> type:
  """Class decorator: registers a scaling dataclass under its ``name`` (one entry each).

  A scaling class defines ``name``, ``length_dependent``, ``_inv_freq(base, dim, seq_len)``
  and optionally ``_check_fields``, ``check_rotary_dim`` / ``from_fields``.

  Args:
    cls: the scaling dataclass.

  Returns:
    ``cls``.
  """
  _SCALINGS[cls.name] = cls
  return cls


def scaling_names() -> Tuple[str, ...]:
  """The registered scaling names (``"linear"``, ``"ntk"``, ...), in registration order.

  Returns:
    A tuple of names (``"none"`` not included).
  """
  return tuple(_SCALINGS)


def scaling_class(name: str) -> type:
  """The scaling dataclass registered as ``name``.

  Args:
    name: one of :func:`scaling_names`.

  Returns:
    The class.

  Raises:
    ValueError: naming the valid names.
  """
  if name not in _SCALINGS:
    raise ValueError(f"scaling must be one of {['none'] + list(_SCALINGS)}, got {name!r}")
  return _SCALINGS[name]


# Fields checked the same way by every scaling that has them (in field order, before the
# scaling's own rules): positive finite floats, and positive ints. A field whose default is
# ``None`` may be ``None``.
_POSITIVE_FLOAT_FIELDS = ("factor", "beta_fast", "beta_slow", "low_freq_factor",
                          "high_freq_factor", "attention_factor")
_POSITIVE_INT_FIELDS = ("original_max_position",)


class _ScalingBase:
  """Shared behaviour of the scaling dataclasses (mixin).

  A scaling implements ``_inv_freq`` (the public :meth:`inv_freq` documents it once) and, for
  rules beyond the shared field checks, ``_check_fields``.
  """

  name: ClassVar[str] = ""
  length_dependent: ClassVar[bool] = False
  # Defaults used when the scaling is built from flat fields (command line).
  field_defaults: ClassVar[Dict[str, Any]] = {}

  def __post_init__(self):
    """Checks the shared fields (``_POSITIVE_FLOAT_FIELDS``, ...), then ``_check_fields``."""
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      if value is None and field.default is None:
        continue
      if field.name in _POSITIVE_FLOAT_FIELDS:
        arg_checks.check_positive_float(field.name, value)
      elif field.name in _POSITIVE_INT_FIELDS:
        arg_checks.check_positive_int(field.name, value)
    self._check_fields()

  def _check_fields(self) -> None:
    """Raises ``ValueError`` for a rule of this scaling beyond the shared field checks."""

  def check_rotary_dim(self, dim: int) -> None:
    """Raises ``ValueError`` if this scaling cannot serve ``dim`` rotated dims.

    Args:
      dim: the rotated dimension R.
    """
    del dim

  def inv_freq(self, base: float, dim: int, seq_len: SeqLen) -> Tuple[Array, float]:
    """``(inv_freq [dim // 2] float32, attention_factor)`` for this scaling.

    Args:
      base: RoPE base theta.
      dim: the rotated dimension R.
      seq_len: current length (``max(position) + 1``), ``None``, or a traced int32 scalar.

    Returns:
      ``(inv_freq, attention_factor)``: float32 ``[R // 2]`` and a Python float.
    """
    return self._inv_freq(base, dim, seq_len)

  def _inv_freq(self, base: float, dim: int, seq_len: SeqLen) -> Tuple[Array, float]:
    """What :meth:`inv_freq` returns; each scaling implements it."""
    raise NotImplementedError

  @classmethod
  def from_fields(cls, values: Dict[str, Any], *, rotary_dim: Optional[int] = None,
                  train_len: Optional[int] = None):
    """Builds the scaling from flat fields; a missing or 0 ``original_max_position`` is
    ``train_len``.

    Args:
      values: the scaling's fields by name.
      rotary_dim: the rotated dimension R (unused by most scalings).
      train_len: the default original length.

    Returns:
      The scaling dataclass.
    """
    del rotary_dim
    values = {**cls.field_defaults, **values}
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
      raise ValueError(f"{unknown[0]} is not a field of the {cls.name!r} scaling; its fields: "
                       f"{sorted(names)}")
    # Required fields are named here, before construction (not a TypeError from __init__).
    missing = [f.name for f in dataclasses.fields(cls)
               if f.name not in values and f.name != "original_max_position"
               and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
    if missing:
      raise ValueError(f"{missing[0]} is required for the {cls.name!r} scaling (e.g. "
                       f"{missing[0]}=4); its fields: {sorted(names)}")
    if "original_max_position" in names and not values.get("original_max_position"):
      if not train_len:
        raise ValueError(f"original_max_position is required for the {cls.name!r} scaling")
      values["original_max_position"] = int(train_len)
    return cls(**values)


class _NTKBase(_ScalingBase):
  """The NTK-aware scalings (static and dynamic): they use ``d / (d - 2)``."""

  def check_rotary_dim(self, dim: int) -> None:
    """NTK needs ``dim >= 4`` (it uses ``d / (d - 2)``).

    Args:
      dim: the rotated dimension R.
    """
    if dim < 4:
      raise ValueError(f"NTK scalings need rotary_dim >= 4 (they use d / (d - 2)), got {dim}")


@register_scaling
@dataclasses.dataclass(frozen=True)
class LinearScaling(_ScalingBase):
  """Position interpolation: every frequency divided by ``factor`` (HF ``rope_type="linear"``).

  Attributes:
    factor: context extension factor s > 0; positions are effectively compressed by s.
  """

  name: ClassVar[str] = "linear"
  factor: float

  def _inv_freq(self, base: float, dim: int, seq_len: SeqLen) -> Tuple[Array, float]:
    """Every default frequency divided by ``factor``."""
    del seq_len
    inv_freq = default_inv_freq(base, dim) / np.float32(self.factor)
    return jnp.asarray(inv_freq.astype(np.float32)), 1.0


@register_scaling
@dataclasses.dataclass(frozen=True)
class NTKScaling(_NTKBase):
  """Static NTK-aware scaling: the base becomes ``base * factor ** (d / (d - 2))``.

  With ``d`` the rotated dimension. High frequencies are kept (extrapolated), and the lowest
  frequency equals position interpolation's (``inv_freq / factor``).

  Attributes:
    factor: context extension factor s > 0.
  """

  name: ClassVar[str] = "ntk"
  factor: float

  def _inv_freq(self, base: float, dim: int, seq_len: SeqLen) -> Tuple[Array, float]:
    """Default frequencies of the base ``base * factor ** (d / (d - 2))``."""
    del seq_len
    return jnp.asarray(default_inv_freq(base * self.factor ** (dim / (dim - 2)), dim)), 1.0


@register_scaling
@dataclasses.dataclass(frozen=True)
class DynamicNTKScaling(_NTKBase):
  """Dynamic NTK: NTK-aware base chosen from the current length (HF ``rope_type="dynamic"``).

  For ``seq_len <= original_max_position`` the frequencies equal the unscaled ones; beyond,
  ``base * (factor * seq_len / original - (factor - 1)) ** (d / (d - 2))``.

  Attributes:
    factor: scaling factor s > 0.
    original_max_position: the training context length (HF ``max_position_embeddings``).
  """

  name: ClassVar[str] = "dynamic"
  length_dependent: ClassVar[bool] = True
  factor: float
  original_max_position: int

  def _inv_freq(self, base: float, dim: int, seq_len: SeqLen) -> Tuple[Array, float]:
    """The NTK base for ``max(seq_len, original)`` (traced lengths in float32)."""
    original = self.original_max_position
    if is_concrete(seq_len):
      length = original if seq_len is None else max(int(seq_len), original)
      new_base = base * ((self.factor * length / original) - (self.factor - 1)) ** (
          dim / (dim - 2))
      return jnp.asarray(default_inv_freq(new_base, dim)), 1.0
    # Traced length (e.g. inside a jitted decode loop): same formula in float32.
    length = jnp.maximum(seq_len, original).astype(jnp.float32)
    ratio = (jnp.float32(self.factor) * length / jnp.float32(original)) - jnp.float32(
        self.factor - 1)
    new_base = jnp.float32(base) * ratio ** jnp.float32(dim / (dim - 2))
    return 1.0 / (new_base ** jnp.asarray(exponents(dim))), 1.0


@register_scaling
@dataclasses.dataclass(frozen=True)
class YaRNScaling(_ScalingBase):
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

  name: ClassVar[str] = "yarn"
  factor: float
  original_max_position: int
  beta_fast: float = 32.0
  beta_slow: float = 1.0
  mscale: Optional[float] = None
  mscale_all_dim: Optional[float] = None
  truncate: bool = True
  attention_factor: Optional[float] = None

  def _check_fields(self) -> None:
    """``beta_fast > beta_slow``; ``mscale`` / ``mscale_all_dim`` non-negative or ``None``."""
    if self.beta_fast <= self.beta_slow:
      raise ValueError(
          f"beta_fast must be greater than beta_slow, got beta_fast={self.beta_fast}, "
          f"beta_slow={self.beta_slow}")
    for name in ("mscale", "mscale_all_dim"):
      value = getattr(self, name)
      if value is not None and (not math.isfinite(float(value)) or float(value) < 0):
        raise ValueError(f"{name} must be a non-negative number or None, got {value!r}")

  def _inv_freq(self, base: float, dim: int, seq_len: SeqLen) -> Tuple[Array, float]:
    """Interpolated / extrapolated blend along the correction ramp, and the attention factor."""
    del seq_len
    pos_freqs = np.float32(base) ** exponents(dim)
    inv_freq_extrapolation = np.float32(1.0) / pos_freqs
    inv_freq_interpolation = np.float32(1.0) / (np.float32(self.factor) * pos_freqs)
    low, high = yarn_correction_range(self, dim=dim, base=base)
    if low == high:
      high += 0.001  # As HF: prevents a division by zero in the ramp.
    ramp = (np.arange(dim // 2, dtype=np.float32) - np.float32(low)) / np.float32(high - low)
    ramp = np.clip(ramp, 0, 1).astype(np.float32)
    extrapolation_factor = np.float32(1.0) - ramp
    inv_freq = (inv_freq_interpolation * (np.float32(1.0) - extrapolation_factor) +
                inv_freq_extrapolation * extrapolation_factor)
    return jnp.asarray(inv_freq.astype(np.float32)), yarn_attention_factor(self)


@register_scaling
@dataclasses.dataclass(frozen=True)
class Llama3Scaling(_ScalingBase):
  """Llama 3.1 scaling: low frequencies divided by ``factor``, high kept, a smooth band between.

  Attributes:
    factor: scaling factor for the low-frequency band.
    low_freq_factor: wavelengths longer than ``original / low_freq_factor`` are interpolated.
    high_freq_factor: wavelengths shorter than ``original / high_freq_factor`` are kept.
    original_max_position: the pre-training context length (8192 for Llama 3.1).
  """

  name: ClassVar[str] = "llama3"
  field_defaults: ClassVar[Dict[str, Any]] = {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
  factor: float
  low_freq_factor: float
  high_freq_factor: float
  original_max_position: int

  def _check_fields(self) -> None:
    """``high_freq_factor > low_freq_factor``."""
    if self.high_freq_factor <= self.low_freq_factor:
      raise ValueError(
          "high_freq_factor must be greater than low_freq_factor, got "
          f"high_freq_factor={self.high_freq_factor}, low_freq_factor={self.low_freq_factor}")

  def _inv_freq(self, base: float, dim: int, seq_len: SeqLen) -> Tuple[Array, float]:
    """Low band divided by ``factor``, high band kept, the medium band smoothly blended."""
    del seq_len
    inv_freq = default_inv_freq(base, dim)
    factor = np.float32(self.factor)
    old_context_len = self.original_max_position
    low_freq_wavelen = old_context_len / self.low_freq_factor
    high_freq_wavelen = old_context_len / self.high_freq_factor
    wavelen = np.float32(2 * math.pi) / inv_freq
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (np.float32(old_context_len) / wavelen -
                     np.float32(self.low_freq_factor)) / (
                         np.float32(self.high_freq_factor - self.low_freq_factor))
    smoothed = ((np.float32(1.0) - smooth_factor) * inv_freq_llama / factor +
                smooth_factor * inv_freq_llama)
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return jnp.asarray(np.where(is_medium, smoothed, inv_freq_llama).astype(np.float32)), 1.0


@register_scaling
@dataclasses.dataclass(frozen=True)
class LongRoPEScaling(_ScalingBase):
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

  name: ClassVar[str] = "longrope"
  length_dependent: ClassVar[bool] = True
  short_factor: Tuple[float, ...]
  long_factor: Tuple[float, ...]
  original_max_position: int
  factor: Optional[float] = None
  attention_factor: Optional[float] = None

  def _check_fields(self) -> None:
    """Both factor lists non-empty, positive, finite and of one length (stored as tuples)."""
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

  def check_rotary_dim(self, dim: int) -> None:
    """The factor lists must have ``dim // 2`` entries.

    Args:
      dim: the rotated dimension R.
    """
    if len(self.short_factor) != dim // 2:
      raise ValueError(
          f"LongRoPE short_factor/long_factor must have rotary_dim // 2 = {dim // 2} entries, "
          f"got {len(self.short_factor)}")

  def _inv_freq(self, base: float, dim: int, seq_len: SeqLen) -> Tuple[Array, float]:
    """Short factors up to the original length, long ones beyond (traced: ``jnp.where``)."""
    powers = np.float32(base) ** exponents(dim)
    short = np.float32(1.0) / (np.asarray(self.short_factor, np.float32) * powers)
    long = np.float32(1.0) / (np.asarray(self.long_factor, np.float32) * powers)
    factor = longrope_attention_factor(self)
    if is_concrete(seq_len):
      use_long = seq_len is not None and int(seq_len) > self.original_max_position
      return jnp.asarray(long if use_long else short), factor
    return jnp.where(seq_len > self.original_max_position, jnp.asarray(long),
                     jnp.asarray(short)), factor

  @classmethod
  def from_fields(cls, values: Dict[str, Any], *, rotary_dim: Optional[int] = None,
                  train_len: Optional[int] = None):
    """Without searched factors: ``long_factor[i] = factor ** (i / (n - 1))`` (1 for the
    highest frequency, ``factor`` for the lowest, geometric between; a documented heuristic) and
    ``short_factor = 1``; factor lists may also be given as comma-separated strings.

    Args:
      values: flat fields (``factor``, ``original_max_position``, optional factor lists).
      rotary_dim: the rotated dimension R (the heuristic lists have ``R // 2`` entries).
      train_len: the default original length.

    Returns:
      A :class:`LongRoPEScaling`.
    """
    values = dict(values)
    for key in ("short_factor", "long_factor"):
      if isinstance(values.get(key), str):
        values[key] = tuple(float(v) for v in values[key].split(",") if v.strip())
    if "long_factor" not in values:
      if not rotary_dim:
        raise ValueError("long_factor is required for the 'longrope' scaling without a "
                         "rotary_dim to derive it from")
      if values.get("factor") is None:  # The heuristic lists need it; 1.0 would be a no-op.
        raise ValueError("factor is required for the 'longrope' scaling when long_factor is not "
                         "given (e.g. factor=4); its fields: ['attention_factor', 'factor', "
                         "'long_factor', 'original_max_position', 'short_factor']")
      n = rotary_dim // 2
      factor = float(values["factor"])
      values["long_factor"] = tuple(float(factor ** (i / max(n - 1, 1))) for i in range(n))
    values.setdefault("short_factor", (1.0,) * len(values["long_factor"]))
    return super().from_fields(values, train_len=train_len)


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
