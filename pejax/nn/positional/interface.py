"""The interface between the decoder and a positional encoding: a config, capabilities, hooks.

Axes: B batch, L length, Lq / Lk query / key length, H query heads, K key/value heads, D head dim,
E model width, T KV-cache capacity.

A PE is **one self-describing file** in :mod:`pejax.nn.positional`: a frozen :class:`PEConfig`
dataclass (its hyper-parameters, validated on construction), a :class:`PositionalEncoding`
subclass (the NNX hooks, with the pure math imported from :mod:`pejax.encodings`), and a
``@register_pe("name")`` line. The registry imports every module of the package, so adding a PE
edits no other file: ``DecoderConfig(pe="name")``, ``launch.py --pe=name`` and
``--config.pe.<field>=...``, the studies and the generic test suite find it.

Hooks (the base class's defaults are "no effect"; the decoder calls only overridden ones):

===================================================  ==========================  ===============
hook                                                 where                       used by
===================================================  ==========================  ===============
``embed(x, positions)``                              token embeddings, once      sinusoidal,
                                                                                 learned
``rotate(q, k, q_positions, k_positions)``           queries / keys, each layer  RoPE family,
                                                                                 xPos, PoPE
``bias(q_positions, k_positions)``                   logits, per head            ALiBi, T5,
                                                                                 KERPLE, FIRE
``features(x, q, positions, cache=)`` +              logits, from the layer's    FoX, Shaw
``content_bias(q_pos, k_pos, q_feat, k_feat)``       inputs (content-aware)
``logits(logits, q, k, q_positions, k_positions)``   logits, sees full q.k rows  CoPE (dense)
``attend(q, k, v, ...)``                             the whole attention         PaTH, stick-
                                                     operator of the layer       breaking
``kernel_bias()``                                    what a fused kernel needs   ALiBi, T5,
                                                     to compute ``bias`` inside  KERPLE, FIRE,
                                                                                 Sandwich
===================================================  ==========================  ===============

``bias`` is a function of positions, never a stored ``[H, N, N]`` array: dense attention
evaluates it once per forward pass per PE instance (shared by the layers that use the instance)
and blockwise attention once per tile. Per-layer PEs (``per_layer = True``: KERPLE, FIRE) get one
instance, with its own parameters, per layer. Positions are explicit int32 arrays, so KV-cache
offsets, packed sequences and randomized positions work with every PE. Keys enter the KV cache
before ``rotate`` and are re-rotated with their cached positions at every step.

Capabilities are class attributes (an instance may refine them from its config, e.g. RoPE with
a dynamic scaling is ``length_dependent``); tests and studies select PEs by them:

* ``absolute``: the logits change when every position shifts by the same amount.
* ``translation_invariant``: the logits depend on positions only through ``q - k``.
* ``length_dependent``: the encoding depends on the current length (dynamic NTK, LongRoPE).
* ``supports_blockwise``: blockwise attention can serve it (else a ``ValueError`` names the PE).
* ``per_layer``: one instance per layer.
* ``content_aware``: a hook reads the layer's inputs, queries or keys.
* ``changes_key_dim``: ``rotate`` returns queries/keys with another last dim (PoPE: 2D).
* ``causal_only``: only defined for causal attention (xPos).
* ``max_length``: largest position + 1 it can encode (a learned table's size), ``None`` if
  unbounded.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Optional, Protocol, Union

from flax import nnx
import jax

from pejax.encodings.kernel_bias import KernelBias

Array = jax.Array


class ModelDims(Protocol):
  """What a positional encoding reads of the decoder's config (:class:`pejax.nn.DecoderConfig`).

  Attributes:
    num_heads: H, query heads.
    head_dim: D, the query / key head dim.
    d_model: E, the model width.
  """

  num_heads: int
  head_dim: int
  d_model: int


@dataclasses.dataclass(frozen=True)
class PEConfig:
  """Base class of every PE's hyper-parameters: a frozen, hashable dataclass.

  Subclasses declare fields with their paper's defaults and validate them in ``__post_init__``
  (``ValueError`` naming the field and the value). ``check_model`` cross-checks the fields
  against the decoder's dimensions (e.g. an even head dim for a rotation).
  """

  def check_model(self, model: ModelDims) -> None:
    """Raises ``ValueError`` naming the field if this PE cannot serve ``model``.

    Args:
      model: the decoder config (dimensions ``head_dim``, ``num_heads``, ``d_model``, ...).
    """
    del model

  def fields(self) -> dict[str, Any]:
    """The config's fields as a flat ``name -> value`` dict (``--config.pe.<name>`` values).

    Returns:
      A dict of every dataclass field and its value.
    """
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

  @classmethod
  def from_fields(cls, values: dict[str, Any], *,
                  context: Optional[dict[str, Any]] = None) -> "PEConfig":
    """Builds the config from flat ``name -> value`` fields (the inverse of :meth:`fields`).

    Args:
      values: field values; missing ones take their defaults.
      context: what an experiment knows that may fill a field left at 0 (``train_len``,
        ``head_dim``); subclasses that use it document it.

    Returns:
      A validated config.

    Raises:
      ValueError: naming an unknown field, or from validation.
    """
    del context
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ValueError(f"{cls.__name__} has no field {unknown[0]!r}; fields: {sorted(known)}")
    return cls(**values)

  @classmethod
  def field_types(cls) -> dict[str, type]:
    """``name -> Python type`` of each flat field (for command-line parsing).

    Returns:
      ``{field name: int | float | bool | str}`` (tuples and other types map to ``str``).
    """
    return {f.name: annotation_type(f.type) for f in dataclasses.fields(cls)}


def annotation_type(annotation: Any) -> type:
  """The command-line type of a dataclass field annotation (``"Optional[float]"`` -> float).

  Args:
    annotation: a type or its string form (``from __future__ import annotations``).

  Returns:
    ``bool``, ``int``, ``float`` or ``str`` (sequences and anything else).
  """
  text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__",
                                                               str(annotation))
  if "Tuple" in text or "tuple" in text or "Sequence" in text:
    return str
  for candidate in (bool, int, float):
    if candidate.__name__ in text:
      return candidate
  return str


class PositionalEncoding(nnx.Module):
  """Base class of the decoder's positional encodings; every hook defaults to "no effect".

  Subclasses set ``config_class``, override the hooks they need and declare their capabilities
  (see the module docstring). The constructor is ``(config, model, *, rngs)``: the PE's own
  :class:`PEConfig` and the decoder config for the dimensions.
  """

  config_class: ClassVar[type] = PEConfig
  absolute: ClassVar[bool] = False
  translation_invariant: ClassVar[bool] = False
  length_dependent: ClassVar[bool] = False
  supports_blockwise: ClassVar[bool] = True
  per_layer: ClassVar[bool] = False
  content_aware: ClassVar[bool] = False
  changes_key_dim: ClassVar[bool] = False
  causal_only: ClassVar[bool] = False
  max_length: Optional[int] = None

  def __init__(self, config: PEConfig, model: ModelDims, *, rngs: nnx.Rngs):
    """Stores the config, ``num_heads`` and ``head_dim``; subclasses build their parameters here.

    Args:
      config: this PE's config (an instance of ``config_class``).
      model: the decoder config (dimensions).
      rngs: PRNG streams for parameters.
    """
    del rngs
    self.config = config
    self.num_heads = model.num_heads  # H, for the per-head biases.
    self.head_dim = model.head_dim  # D, for the rotations.

  # The hooks. --------------------------------------------------------------------------------

  def embed(self, x: Array, positions: Array) -> Array:
    """Adds the absolute encoding of ``positions`` to token embeddings.

    Args:
      x: ``[B, L, E]`` token embeddings.
      positions: int ``[B | 1, L]``.

    Returns:
      ``[B, L, E]`` in ``x.dtype``.
    """
    del positions
    return x

  def rotate(self, q: Array, k: Array, q_positions: Array,
             k_positions: Array) -> tuple[Array, Array]:
    """Rotates (or otherwise transforms) queries and keys by their positions.

    Args:
      q: ``[B, Lq, H, D]`` queries.
      k: ``[B, Lk, K, D]`` keys.
      q_positions: int ``[B | 1, Lq]``.
      k_positions: int ``[B | 1, Lk]``.

    Returns:
      ``(q, k)``: ``[B, Lq, H, D']`` and ``[B, Lk, K, D']`` in the input dtypes (``D' = D``
      unless ``changes_key_dim``).
    """
    del q_positions, k_positions
    return q, k

  def bias(self, q_positions: Array, k_positions: Array) -> Array:
    """Additive attention-logit bias from positions; only called when ``has_bias``.

    Args:
      q_positions: int ``[B | 1, Lq]``.
      k_positions: int ``[B | 1, Lk]``.

    Returns:
      float32 ``[B | 1, H, Lq, Lk]``.
    """
    raise NotImplementedError(f"{type(self).__name__} has no attention bias")

  def features(self, x: Array, q: Array, positions: Array, *,
               cache: Optional[tuple[Array, Array]] = None) -> tuple[Any, Any]:
    """Per-token features of a content-aware bias, from the layer's inputs.

    Args:
      x: ``[B, L, E]`` the layer's normalized inputs.
      q: ``[B, L, H, D']`` its queries after ``rotate``.
      positions: int ``[B | 1, L]``.
      cache: ``None`` in a full forward pass; in KV-cache decoding ``(key_features, length)``:
        this layer's cached key features ``[B, T, *key_feature_shape]`` (slots ``< length``
        filled) and the int32 scalar fill length, so that running quantities continue.

    Returns:
      ``(q_features, k_features)``: pytrees of ``[B, L, ...]`` arrays (token axis 1) or ``None``.
    """
    raise NotImplementedError(f"{type(self).__name__} has no content-aware bias")

  def key_feature_shape(self) -> Optional[tuple[int, ...]]:
    """Per-token shape of the key features the KV cache keeps per layer (``None``: nothing).

    Returns:
      A shape tuple (e.g. ``(H,)``) or ``None``.
    """
    return None

  def content_bias(self, q_positions: Array, k_positions: Array, q_features: Any,
                   k_features: Any) -> Array:
    """Additive logit bias from per-token features (content-aware), on one tile or everything.

    Args:
      q_positions: int ``[B | 1, lq]``.
      k_positions: int ``[B | 1, lk]``.
      q_features: the query features of these rows (token axis 1 of length ``lq``).
      k_features: the key features of these keys (token axis 1 of length ``lk``).

    Returns:
      float32 ``[B | 1, H, lq, lk]``.
    """
    raise NotImplementedError(f"{type(self).__name__} has no content-aware bias")

  def logits(self, logits: Array, q: Array, k: Array, q_positions: Array,
             k_positions: Array) -> Array:
    """Additive term computed from the full rows of scaled, masked logits (dense only).

    Args:
      logits: float32 ``[B, H, Lq, Lk]`` scaled logits (+ biases); masked pairs are ``-1e30``.
      q: ``[B, Lq, H, D']`` queries after ``rotate``.
      k: ``[B, Lk, K, D']`` keys after ``rotate``.
      q_positions: int ``[B | 1, Lq]``.
      k_positions: int ``[B | 1, Lk]``.

    Returns:
      float32 ``[B, H, Lq, Lk]`` added to the logits before the softmax.
    """
    raise NotImplementedError(f"{type(self).__name__} has no logit transform")

  def attend(self, q: Array, k: Array, v: Array, *, q_features: Any, k_features: Any,
             mask: Optional[Array], q_slots: Optional[Array], segment_ids: Optional[Array],
             implementation: str, block_size: int) -> Array:
    """This layer's whole attention, when the PE owns the operator (PaTH, stick-breaking).

    Overriding it takes every call of the layer away from the shared schedules: a PE whose
    logits are no sum of a ``q . k`` tile and a bias, or whose weights are no softmax. Two kinds
    of call:

    * a full causal sequence (``mask=None``; queries are the keys, at slots ``0 .. L - 1``;
      packed documents by ``segment_ids``), in the schedule ``implementation`` names
      (``"blockwise"`` is expected to keep O(L) memory);
    * anything else (KV-cache decoding, a sliding window, chunked attention): ``mask`` is the
      bool ``[B | 1, 1, Lq, Lk]`` of pairs that take part (causality by slot, filled cache slots,
      segments, window, chunks), the queries sit at slots ``q_slots`` (int ``[Lq]``) among the
      keys, ``implementation="dense"``.

    Args:
      q: ``[B, Lq, H, D']`` queries after ``rotate`` and query scaling.
      k: ``[B, Lk, K, D']`` keys after ``rotate`` (every cached key in decoding).
      v: ``[B, Lk, K, Dv]`` values.
      q_features: this PE's ``features`` of the queries (``None`` without ``features``).
      k_features: its ``features`` of every key.
      mask: see above.
      q_slots: see above.
      segment_ids: optional int ``[B, L]`` for a full sequence.
      implementation: ``"dense"`` or ``"blockwise"``.
      block_size: the decoder's tile size.

    Returns:
      ``[B, Lq, H, Dv]`` in ``q.dtype``.
    """
    raise NotImplementedError(f"{type(self).__name__} has no attention operator of its own")

  def kernel_bias(self) -> Optional[KernelBias]:
    """This PE's ``bias`` as a fused attention kernel computes it inside, tile by tile.

    Override it (next to ``bias``) when the bias is a function of positions and per-head
    parameters that elementwise operations on one ``[bq, bk]`` tile can compute: the Pallas
    kernel then serves this PE on accelerators, with no ``[H, N, N]`` bias in memory. Return a
    :class:`~pejax.encodings.kernel_bias.KernelBias` built from the PE's current parameters
    (gradients with respect to its ``params`` must flow back to them) whose tile function equals
    ``bias`` to float32 rounding. The default (``None``): no kernel computes this PE's bias; the
    portable schedules (or cuDNN with an evaluated bias) serve it.

    Returns:
      A :class:`~pejax.encodings.kernel_bias.KernelBias`, or ``None``.
    """
    return None

  # What the decoder asks. --------------------------------------------------------------------

  _HOOKS = ("embed", "rotate", "bias", "kernel_bias", "content_bias", "features", "logits",
            "attend")

  @classmethod
  def overrides(cls, hook: str) -> bool:
    """Whether this PE class overrides one interface hook: what the ``has_*`` properties below
    ask of an instance, answered from the class (the studies ask it of registered names,
    without building a PE).

    Args:
      hook: one of ``embed``, ``rotate``, ``bias``, ``kernel_bias``, ``content_bias``,
        ``features``, ``logits``, ``attend``.

    Returns:
      ``True`` when the class defines its own ``hook`` (or inherits one from a PE class other
      than :class:`PositionalEncoding`).

    Raises:
      ValueError: for a name that is not a hook.
    """
    if hook not in PositionalEncoding._HOOKS:
      raise ValueError(f"hook must be one of {list(PositionalEncoding._HOOKS)}, got {hook!r}")
    return getattr(cls, hook) is not getattr(PositionalEncoding, hook)

  @property
  def has_embed(self) -> bool:
    """Whether this PE overrides ``embed``."""
    return self.overrides("embed")

  @property
  def has_rotate(self) -> bool:
    """Whether this PE overrides ``rotate``."""
    return self.overrides("rotate")

  @property
  def has_bias(self) -> bool:
    """Whether this PE overrides ``bias``."""
    return self.overrides("bias")

  @property
  def has_kernel_bias(self) -> bool:
    """Whether this PE overrides ``kernel_bias`` (a fused kernel can compute its ``bias``)."""
    return (self.has_bias and not self.has_content_bias and not self.has_logits
            and self.overrides("kernel_bias"))

  @property
  def has_content_bias(self) -> bool:
    """Whether this PE overrides ``features`` / ``content_bias``."""
    return self.overrides("content_bias")

  @property
  def has_logits(self) -> bool:
    """Whether this PE overrides ``logits``."""
    return self.overrides("logits")

  @property
  def has_attend(self) -> bool:
    """Whether this PE overrides ``attend`` (its own blockwise attention operator)."""
    return self.overrides("attend")

  @property
  def has_features(self) -> bool:
    """Whether this PE computes per-token ``features`` (for ``content_bias`` or ``attend``; a
    KV cache keeps their key side per layer)."""
    return self.overrides("features")

  @property
  def name(self) -> str:
    """The registry name of this PE's config."""
    # The instance's class is registered when its module ran @register_pe.
    name = registered_name(self.config)
    if name is None:
      raise ValueError(f"no registered PE uses config class {type(self.config).__name__}")
    return name


# The registry. ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RegistryEntry:
  """One registered name: the PE class and the config fields the name presets.

  Attributes:
    name: the registry name (``DecoderConfig(pe=name)``, ``--pe=name``).
    pe_class: the :class:`PositionalEncoding` subclass.
    defaults: config fields preset by this name (``kerple_log`` presets ``kind="log"``).
  """

  name: str
  pe_class: type
  defaults: tuple[tuple[str, Any], ...] = ()

  def make_config(self, context: Optional[dict[str, Any]] = None, **fields: Any) -> PEConfig:
    """This name's config: the class defaults, the name's presets, then ``fields``.

    Args:
      context: see :meth:`PEConfig.from_fields`.
      **fields: field values overriding the presets.

    Returns:
      A validated config.
    """
    return self.pe_class.config_class.from_fields({**dict(self.defaults), **fields},
                                                  context=context)


_REGISTRY: dict[str, RegistryEntry] = {}


def register_pe(name: str, pe_class: Optional[type] = None, *,
                defaults: Optional[dict[str, Any]] = None,
                overwrite: bool = False) -> Union[type, Callable[[type], type]]:
  """Registers a PE class under ``name``: a class decorator, or a call with the class.

  ``@register_pe("alibi")`` above the class in its own file; ``register_pe("mine", MinePE)``
  from user code (before ``DecoderConfig(pe="mine")`` or ``launch.py --pe=mine``).

  Args:
    name: registry name (a non-empty identifier-like string).
    pe_class: the :class:`PositionalEncoding` subclass (omit to use as a decorator).
    defaults: config fields this name presets (several names may share one class).
    overwrite: replace an existing entry instead of raising.

  Returns:
    ``pe_class`` when given, else a decorator that registers and returns its class.

  Raises:
    ValueError: for an empty or taken name, a class that is not a ``PositionalEncoding``
      subclass with a ``PEConfig`` ``config_class``, or presets that are not config fields.
  """
  if not isinstance(name, str) or not name or "," in name or "=" in name or " " in name:
    raise ValueError(f"name must be a non-empty string without ',', '=' or spaces, got {name!r}")

  def register(cls: type) -> type:
    if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
      raise ValueError(f"pe_class must be a PositionalEncoding subclass, got {cls!r}")
    config_class = cls.config_class
    if not (isinstance(config_class, type) and issubclass(config_class, PEConfig)
            and dataclasses.is_dataclass(config_class)):
      raise ValueError(f"{cls.__name__}.config_class must be a PEConfig dataclass, got "
                       f"{config_class!r}")
    known = {f.name for f in dataclasses.fields(config_class)}
    for key in defaults or {}:
      if key not in known:
        raise ValueError(f"defaults key {key!r} is not a field of {config_class.__name__}")
    if name in _REGISTRY and not overwrite and _REGISTRY[name].pe_class is not cls:
      raise ValueError(f"name {name!r} is already registered (pass overwrite=True to replace it)")
    _REGISTRY[name] = RegistryEntry(name, cls, tuple(sorted((defaults or {}).items())))
    return cls

  if pe_class is not None:
    return register(pe_class)
  return register


def registered_name(config: PEConfig) -> Optional[str]:
  """The registry name of ``config`` among the entries registered so far (``None``: none).

  Of the entries whose PE class uses the config's class, the one whose presets it matches with
  the most fields (``"kerple_power"`` for a KERPLE config with ``kind="power"``). Use
  :func:`pejax.nn.positional.registry.pe_name_of`, which first imports the built-in PE files.

  Args:
    config: a :class:`PEConfig` instance.

  Returns:
    The registry name, or ``None`` if no registered PE uses the config's class.
  """
  best, best_score = None, -1
  for entry in _REGISTRY.values():
    if type(config) is not entry.pe_class.config_class:
      continue
    if all(getattr(config, k) == v for k, v in entry.defaults):
      if len(entry.defaults) > best_score:
        best, best_score = entry.name, len(entry.defaults)
  return best
