"""The key/value cache of incremental decoding: a pytree of arrays with explicit positions.

Axes: B batch, T cache capacity (max_length), K key/value heads, D head dim, N layers.

Every cached key carries its *position* (not only its slot), so decoding works with any PE and
any position scheme (offsets, randomized positions). All rows share one fill ``length``; rows
with shorter prompts are left-padded, and the cache's ``segment_ids`` (0 = padding) keep their
tokens from attending to the padding slots.
Writing past the capacity ``T`` raises ``ValueError`` in an eager call; under ``jax.jit`` (a
traced ``length``) the decoder returns NaN logits and ``length`` stays above ``T``, so every
later call is NaN too (``jax.lax.dynamic_update_slice`` would otherwise clamp the write and
silently overwrite the last slots).

Cache kinds (:meth:`pejax.nn.Decoder.init_cache`): ``dtype`` a float dtype, or ``"int8"`` /
``"float8_e4m3fn"`` (quantized, :mod:`pejax.nn.kv_quantization`: one float32 scale per token and
key/value head in ``key_scales`` / ``value_scales``); ``eviction`` ``"none"`` (the linear cache
above), ``"window"`` (a ring buffer of T slots: the oldest token is overwritten, decoding never
overflows) or ``"sinks"`` (the first S tokens kept, a ring of T - S recent ones, positions
reassigned within the cache; :mod:`pejax.nn.kv_eviction`). For the evicting kinds ``length``
counts every token seen, and may exceed T.

Keys are stored either **before** the PE rotation (``DecoderConfig.cache_rotated_keys=False``,
the default) or **after** it (``True``):

* before: each step rotates all cached keys with the frequencies of the *current* length
  (``max(position) + 1`` of the keys in view, the length a full forward pass over the same tokens
  uses). Every key is then rotated exactly as in the full forward pass, also for the
  length-dependent scalings (dynamic NTK, LongRoPE) whose frequencies change as the sequence
  grows. Costs one rotation of the whole cache per step and layer (elementwise, the same order
  as the attention itself).
* after: each key is rotated once, when written (the usual fast path). Identical for static
  frequencies, but with dynamic NTK the earlier keys keep the frequencies of the length at which
  they were written: the "stale key" discrepancy with the full forward pass (Hugging Face
  ``transformers`` issue 25104).

With static frequencies (every PE but the two length-dependent scalings) decoding equals the full
forward pass in both modes. With a length-dependent scaling, pre-rotation decoding equals the
full forward pass exactly for a one-layer model; in deeper models the cached keys/values of layer
``l > 1`` are projections of hidden states that earlier steps computed at their own (shorter)
length, which no cache can revise without recomputing every token. Pre-rotation removes the
rotation part of the discrepancy (measured: max |logit difference| 0.02 vs 0.17 for post-rotation
on a 2-layer d=32 model, factor 4, 24 tokens past an original length of 8).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.nn import kv_quantization

EVICTIONS = ("none", "window", "sinks")


class LayerCache(NamedTuple):
  """One layer's share of a :class:`KVCache`, as a decoder block reads and writes it.

  Attributes:
    keys: ``[B, T, K, D]`` (float, or int8 / fp8 bits as uint8 when quantized).
    values: ``[B, T, K, D]``.
    key_scales: ``None`` or float32 ``[B, T, K]`` (quantized cache).
    value_scales: ``None`` or float32 ``[B, T, K]``.
    features: ``None`` or the content-aware PE's key features ``[B, T, ...]``.
  """

  keys: jax.Array
  values: jax.Array
  key_scales: Optional[jax.Array] = None
  value_scales: Optional[jax.Array] = None
  features: Any = None

  @property
  def quantized(self) -> bool:
    """Whether keys and values are stored quantized (with scales)."""
    return self.key_scales is not None

  def write(self, k: jax.Array, v: jax.Array, start: jax.Array) -> "LayerCache":
    """Writes ``L`` new keys / values at slots ``start .. start + L - 1`` (quantizing them).

    Args:
      k: ``[B, L, K, D]`` new keys (rotated or not, as the cache keeps them).
      v: ``[B, L, K, D]`` new values.
      start: int32 scalar, the first slot.

    Returns:
      The updated layer cache.
    """
    def put(buffer, new):
      return jax.lax.dynamic_update_slice_in_dim(buffer, new.astype(buffer.dtype), start, 1)

    if not self.quantized:
      return self._replace(keys=put(self.keys, k), values=put(self.values, v))
    name = kv_quantization.quantized_name_of_storage(self.keys.dtype)
    qk, sk = kv_quantization.quantize(k, name)
    qv, sv = kv_quantization.quantize(v, name)
    return self._replace(keys=put(self.keys, qk), values=put(self.values, qv),
                         key_scales=put(self.key_scales, sk), value_scales=put(self.value_scales, sv))

  def read(self, dtype: Any) -> tuple[jax.Array, jax.Array]:
    """Keys and values as attention takes them: dequantized to ``dtype`` when quantized.

    Args:
      dtype: the compute dtype (used only by a quantized cache; a float cache is returned in its
        own dtype).

    Returns:
      ``(keys, values)``, each ``[B, T, K, D]``.
    """
    if not self.quantized:
      return self.keys, self.values
    return (kv_quantization.dequantize(self.keys, self.key_scales, dtype),
            kv_quantization.dequantize(self.values, self.value_scales, dtype))


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["keys", "values", "positions", "length", "features", "segment_ids",
                 "key_scales", "value_scales"],
    meta_fields=["eviction", "sink_tokens"])
@dataclasses.dataclass(frozen=True)
class KVCache:
  """Per-layer keys and values plus the positions and fill length shared by all layers.

  A pytree (pass it through ``jax.jit`` / ``nnx.jit``); ``eviction`` and ``sink_tokens`` are
  static (part of the tree structure).

  Attributes:
    keys: tuple of N arrays ``[B, T, K, D]`` (rotated or not, see the module docstring; int8, or
      fp8 bits as uint8, when quantized).
    values: tuple of N arrays ``[B, T, K, D]``.
    positions: int32 ``[B, T]`` text position of each cached token (0 in empty slots).
    length: int32 scalar, number of tokens written so far (the same for all rows); for
      ``eviction="none"`` the filled slots, for the evicting kinds every token seen (may exceed T).
    features: tuple of N entries, each ``None`` or the float32 ``[B, T, ...]`` key features of
      a content-aware PE in that layer (FoX's cumulative log forget gates).
    segment_ids: ``None`` (every filled slot is a token of its row), or int32 ``[B, T]``: 1 for
      a token, 0 for a padding slot (left-padded prompts of different lengths); a token attends
      only to slots of its own segment id.
    key_scales: ``()`` (float storage) or a tuple of N float32 ``[B, T, K]`` scales.
    value_scales: ``()`` or a tuple of N float32 ``[B, T, K]``.
    eviction: ``"none"``, ``"window"`` or ``"sinks"``.
    sink_tokens: S, the first tokens an ``eviction="sinks"`` cache keeps (0 otherwise).
  """

  keys: tuple
  values: tuple
  positions: jax.Array
  length: jax.Array
  features: tuple = ()
  segment_ids: Optional[jax.Array] = None
  key_scales: tuple = ()
  value_scales: tuple = ()
  eviction: str = "none"
  sink_tokens: int = 0

  @property
  def max_length(self) -> int:
    """Capacity T (slots)."""
    return self.positions.shape[1]

  @property
  def quantized(self) -> bool:
    """Whether keys and values are stored int8 / fp8 with scales."""
    return bool(self.key_scales)

  def _replace(self, **changes: Any) -> "KVCache":
    """A copy with some fields replaced (as ``NamedTuple._replace``)."""
    return dataclasses.replace(self, **changes)

  def layer(self, index: int) -> LayerCache:
    """Layer ``index``'s keys, values, scales and features.

    Args:
      index: the layer, ``0 <= index < N``.

    Returns:
      A :class:`LayerCache`.
    """
    return LayerCache(
        self.keys[index], self.values[index],
        self.key_scales[index] if self.key_scales else None,
        self.value_scales[index] if self.value_scales else None,
        self.features[index] if self.features else None)

  def with_layers(self, layers: list[LayerCache], **changes: Any) -> "KVCache":
    """A copy holding the given per-layer caches (and other fields replaced).

    Args:
      layers: N :class:`LayerCache`, one per layer.
      **changes: other fields to replace (``positions``, ``length``, ``segment_ids``).

    Returns:
      The new :class:`KVCache`.
    """
    return dataclasses.replace(
        self, keys=tuple(c.keys for c in layers), values=tuple(c.values for c in layers),
        key_scales=tuple(c.key_scales for c in layers) if self.quantized else (),
        value_scales=tuple(c.value_scales for c in layers) if self.quantized else (),
        features=tuple(c.features for c in layers), **changes)


def init_kv_cache(*, num_layers: int, batch_size: int, max_length: int, num_kv_heads: int,
                  head_dim: int, dtype, feature_shapes: tuple = (), eviction: str = "none",
                  sink_tokens: int = 0) -> KVCache:
  """An empty cache (zeros, ``length = 0``).

  Args:
    num_layers: N, the number of decoder blocks (one key and one value array each).
    batch_size: B.
    max_length: T, the capacity in slots.
    num_kv_heads: K, the key/value heads per layer.
    head_dim: D.
    dtype: storage dtype of the keys and values: a float dtype, or ``"int8"`` /
      ``"float8_e4m3fn"`` (alias ``"fp8"``) for a quantized cache with float32 per-token,
      per-head scales (positions and length are int32).
    feature_shapes: per layer, ``None`` or the per-token shape of a content-aware PE's key
      features (float32 ``[B, T, *shape]`` zeros); empty means none in any layer.
    eviction: ``"none"`` (linear), ``"window"`` (ring buffer) or ``"sinks"`` (first
      ``sink_tokens`` kept plus a ring of recent tokens).
    sink_tokens: S for ``eviction="sinks"`` (``0 < S < max_length``); 0 otherwise.

  Returns:
    A :class:`KVCache` with N zero key and value arrays ``[B, T, K, D]`` of ``dtype`` (and unit
    float32 scales ``[B, T, K]`` when quantized), zero int32 positions ``[B, T]`` and int32
    scalar ``length`` 0.

  Raises:
    ValueError: naming the argument, for a size that is not a positive int, an unknown
      ``dtype`` or ``eviction``, ``feature_shapes`` without one entry per layer or with an entry
      that is not a shape, or a ``sink_tokens`` that does not fit the eviction kind and
      capacity.
  """
  for name, value in (("num_layers", num_layers), ("batch_size", batch_size),
                      ("max_length", max_length), ("num_kv_heads", num_kv_heads),
                      ("head_dim", head_dim)):
    arg_checks.check_positive_int(name, value)
  feature_shapes = tuple(feature_shapes)
  if feature_shapes and len(feature_shapes) != num_layers:
    raise ValueError(f"feature_shapes must have one entry per layer (num_layers={num_layers}), "
                     f"got {len(feature_shapes)}: {feature_shapes!r}")
  for layer, feature_shape in enumerate(feature_shapes):
    if feature_shape is not None and (
        not isinstance(feature_shape, (tuple, list)) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in feature_shape)):
      raise ValueError(f"feature_shapes[{layer}] must be None or a tuple of positive ints (the "
                       f"per-token shape of a layer's key features), got {feature_shape!r}")
  if eviction not in EVICTIONS:
    raise ValueError(f"eviction must be one of {EVICTIONS}, got {eviction!r}")
  if isinstance(sink_tokens, bool) or not isinstance(sink_tokens, int):
    raise ValueError(f"sink_tokens must be an int, got {sink_tokens!r}")
  if eviction == "sinks" and not 0 < sink_tokens < max_length:
    raise ValueError(f"sink_tokens must be in [1, max_length={max_length}) for eviction='sinks' "
                     f"(the rest of the slots hold the recent tokens), got {sink_tokens}")
  if eviction != "sinks" and sink_tokens != 0:
    raise ValueError(f"sink_tokens applies to eviction='sinks' only, got sink_tokens="
                     f"{sink_tokens} with eviction={eviction!r}")
  quantized = kv_quantization.quantized_dtype_name(dtype)
  shape = (batch_size, max_length, num_kv_heads, head_dim)
  storage = kv_quantization.STORAGE_DTYPES[quantized] if quantized else dtype

  def scales():
    return tuple(jnp.ones(shape[:3], jnp.float32) for _ in range(num_layers)) if quantized else ()

  return KVCache(
      keys=tuple(jnp.zeros(shape, storage) for _ in range(num_layers)),
      values=tuple(jnp.zeros(shape, storage) for _ in range(num_layers)),
      positions=jnp.zeros((batch_size, max_length), jnp.int32),
      length=jnp.zeros((), jnp.int32),
      features=tuple(None if shape is None else
                     jnp.zeros((batch_size, max_length) + tuple(shape), jnp.float32)
                     for shape in (feature_shapes or (None,) * num_layers)),
      key_scales=scales(), value_scales=scales(), eviction=eviction, sink_tokens=sink_tokens)
