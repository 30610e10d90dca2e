"""Pre-norm decoder-only Transformer in Flax NNX, with any registered positional encoding.

Axes: B batch, L length (new tokens), T KV-cache capacity, V vocabulary, E model width,
H query heads, K key/value heads.

The PE enters only through its hooks (:mod:`pejax.nn.positional.interface`): ``embed`` once
after the token embedding, ``rotate`` in every attention layer, and ``bias``, which the decoder
evaluates **once per forward pass** per shared PE instance for dense attention (one ``[B|1, H, L,
L]`` array shared by the layers, e.g. the single T5 table) or hands to blockwise attention as a
function of positions to evaluate per tile; per-layer PEs (KERPLE, FIRE) and content-aware ones
(FoX, Shaw, CoPE) act inside their layer. ``config.pe`` may be a per-layer pattern (each layer
its own PE, e.g. RoPE on sliding-window layers and NoPE on global ones).

Positions are explicit: ``None`` means ``arange(L)`` for every row (kept as a ``[1, L]`` array so
that biases and rotations are built once for the whole batch); training with randomized
positions or packed sequences just passes them.

Bad values (the error / poison policy of the whole library): a token id outside ``[0, V)`` or a
prompt that overflows the KV cache raises ``ValueError`` naming the argument whenever the value is
concrete (eager calls). Under ``jax.jit`` the values are tracers and cannot raise; the affected
logits are NaN instead (never a finite wrong number): a bad token's embedding is NaN (negative
ids are not wrapped to ``V - 1`` as ``jnp.take`` would), which poisons its own logits (and,
through attention, usually more of its row), and an overflowing cache write poisons
all logits of the call (and, since the cache length stays past the capacity, of every later call).

Example::

  config = DecoderConfig(pe="alibi", num_layers=2, d_model=128, num_heads=4)
  model = Decoder(config, rngs=nnx.Rngs(0))
  logits = model(tokens)                                  # [B, L, V] float32
  cache = model.init_cache(batch_size=B, max_length=256)
  logits, cache = model.prefill(prompt, None, cache)      # positions 0 .. L - 1
  logits, cache = model.decode_step(next_token, jnp.full((B, 1), L), cache)

References:
  Radford et al. 2019 (GPT-2, pre-norm decoder); Touvron et al. 2023, "LLaMA", arXiv 2302.13971
  (RMSNorm, SwiGLU, RoPE); Vaswani et al. 2017, arXiv 1706.03762 (embedding scaled by sqrt(E)).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks
from pejax.nn.attention import Bias, choose_implementation
from pejax.nn.decoder_block import DecoderBlock
from pejax.nn.decoder_config import DecoderConfig
from pejax.nn import kv_eviction
from pejax.nn.kv_cache import KVCache, LayerCache, init_kv_cache
from pejax.nn.positional.interface import PositionalEncoding
from pejax.nn.positional.registry import build_pe
from pejax.nn.rms_norm import make_rms_norm
from pejax.nn.self_attention import pe_bias
from pejax.nn.token_linear import TokenLinear
from pejax.parallel import logical_axes as axes


def _check_batch_array(name: str, x: Any, batch: int, length: int, *,
                       allow_shared: bool) -> jax.Array:
  """Checks an int ``[B, L]`` (or ``[1, L]`` if ``allow_shared``) array, returns it as int32."""
  x = arg_checks.check_integer_array(name, x)
  ok = x.ndim == 2 and x.shape[1] == length and (
      x.shape[0] == batch or (allow_shared and x.shape[0] == 1))
  if not ok:
    expected = f"[{batch}, {length}]" + (f" or [1, {length}]" if allow_shared else "")
    raise ValueError(f"{name} must have shape {expected}, got {x.shape}")
  return x.astype(jnp.int32)


def init_cache_layout(config: DecoderConfig, layer_pes: Sequence[Any]) -> dict:
  """The per-model arguments of :func:`init_kv_cache`: layers, key/value heads, head dim and
  each layer's key-feature shape (``None`` for a PE without key features)."""
  shapes = [pe.key_feature_shape() if pe.has_features else None for pe in layer_pes]
  return dict(num_layers=config.num_layers, num_kv_heads=config.kv_heads,
              head_dim=config.head_dim,
              feature_shapes=tuple(None if shape is None else tuple(shape) for shape in shapes))


class Decoder(nnx.Module):
  """Decoder-only Transformer: embed -> PE ``embed`` -> N blocks -> RMSNorm -> logits.

  The token embedding is initialized from N(0, 1/E) and multiplied by sqrt(E) on input (unit
  scale, comparable to sinusoidal positions; ``scale_embeddings=False`` uses it as it is, as
  Llama-style checkpoints do); with tied embeddings the output projection is its transpose,
  giving unit-scale logits at initialization.

  Sharding (:mod:`pejax.parallel`): the embedding ``[V, E]`` is ``("vocab", "embed")``, an untied
  output kernel ``[E, V]`` is ``("embed", "vocab")``; the blocks annotate their own kernels. Norm
  scales and the PE's own tables (T5 bias ``[buckets, H]``, learned positions) are replicated;
  RoPE and ALiBi have no parameters (their angles / slopes are computed in the step). The dense
  PE bias ``[B|1, H, L, T]`` is constrained to heads over the ``model`` axis, like the queries.
  """

  def __init__(self, config: DecoderConfig, *, rngs: nnx.Rngs):
    """Builds all parameters.

    Args:
      config: a :class:`DecoderConfig` (validated on construction).
      rngs: provides the ``params`` stream.
    """
    if not isinstance(config, DecoderConfig):
      raise ValueError(f"config must be a DecoderConfig, got {type(config).__name__}")
    self.config = config
    dtype = config.compute_dtype
    self.embed = nnx.Embed(
        config.vocab_size, config.d_model, dtype=dtype,
        embedding_init=axes.partitioned(nnx.initializers.normal(stddev=config.d_model ** -0.5),
                                        (axes.VOCAB, axes.EMBED)), rngs=rngs)
    # One PE instance per distinct config, or per layer for per-layer PEs (own parameters).
    instances, layer_pe, by_config = [], [], {}
    for pe_config in config.layer_pes:
      pe = build_pe(pe_config, config, rngs=rngs) if (
          pe_config not in by_config or type(by_config[pe_config][1]).per_layer) else None
      if pe is not None:
        by_config[pe_config] = (len(instances), pe)
        instances.append(pe)
        layer_pe.append(len(instances) - 1)
      else:
        layer_pe.append(by_config[pe_config][0])
    self.pes = nnx.List(instances)
    self.layer_pe = tuple(layer_pe)
    self.blocks = nnx.List([DecoderBlock(config, rngs=rngs, layer=layer)
                            for layer in range(config.num_layers)])
    self.final_norm = make_rms_norm(config, config.d_model, rngs=rngs)
    self.lm_head = None if config.tie_embeddings else TokenLinear(
        config.d_model, config.vocab_size, use_bias=False, dtype=dtype,
        kernel_init=axes.partitioned(nnx.nn.linear.default_kernel_init, (axes.EMBED, axes.VOCAB)),
        rngs=rngs)

  # ----------------------------------------------------------------------------------------------
  # Full forward pass.

  def __call__(self, tokens: jax.Array, *, positions: Optional[jax.Array] = None,
               segment_ids: Optional[jax.Array] = None,
               attention: Optional[str] = None) -> jax.Array:
    """Logits of every position.

    Args:
      tokens: int ``[B, L]`` token ids.
      positions: int ``[B, L]`` positions (or ``[1, L]`` shared by all rows); ``None`` means
        ``0 .. L - 1`` for every row. Packed sequences restart them per segment.
      segment_ids: optional int ``[B, L]``; tokens attend only within their segment.
      attention: override of ``config.attention`` (``"auto"``, ``"dense"``, ``"blockwise"``).

    Returns:
      float32 logits ``[B, L, V]``.

    Raises:
      ValueError: on malformed tokens / positions / segment ids, token ids outside ``[0, V)``
        (when concrete; under ``jax.jit`` their logits are NaN, see the module docstring), or when
        ``positions`` is ``None`` and ``L`` exceeds a learned table (``max_position``).
    """
    tokens = self._check_tokens(tokens)
    batch, length = tokens.shape
    if positions is None:
      self._check_length(length)
      positions = jnp.arange(length, dtype=jnp.int32)[None, :]
    else:
      positions = _check_batch_array("positions", positions, batch, length, allow_shared=True)
    if segment_ids is not None:
      segment_ids = _check_batch_array("segment_ids", segment_ids, batch, length,
                                       allow_shared=False)
    implementation = self._implementation(
        self.config.attention if attention is None else attention, length)
    x = self._embed(tokens, positions)
    biases = self._shared_biases(positions, positions, implementation)
    for block, index in zip(self.blocks, self.layer_pe):
      x = block(x, pe=self.pes[index], positions=positions, segment_ids=segment_ids,
                bias=biases[index], implementation=implementation)
    return self._logits(x)

  @property
  def pe(self) -> PositionalEncoding:
    """The positional encoding of the first layer (the only one unless ``config.pe`` is a
    per-layer pattern or the PE is per-layer)."""
    return self.pes[self.layer_pe[0]]

  def layer_pes(self) -> tuple[PositionalEncoding, ...]:
    """The PE instance of each layer (shared instances repeat).

    Returns:
      A tuple of ``num_layers`` :class:`PositionalEncoding` modules.
    """
    return tuple(self.pes[index] for index in self.layer_pe)

  # ----------------------------------------------------------------------------------------------
  # KV-cache decoding.

  def init_cache(self, batch_size: int, max_length: int, *, dtype: Any = None,
                 eviction: str = "none", sink_tokens: int = 0) -> KVCache:
    """An empty KV cache of ``max_length`` slots for ``batch_size`` rows.

    Args:
      batch_size: rows B.
      max_length: capacity T in slots (for ``eviction="none"``: prompt plus generated tokens).
      dtype: storage of cached keys/values: ``None`` (the compute dtype), a float dtype, or
        ``"int8"`` / ``"float8_e4m3fn"`` (alias ``"fp8"``): quantized with one float32 scale
        per token and key/value head (:mod:`pejax.nn.kv_quantization`), keys quantized before
        the rotation when the cache keeps unrotated keys (the default).
      eviction: ``"none"`` (linear: writing past T raises), ``"window"`` (a ring buffer of T
        slots: the oldest token is overwritten, tokens keep their text positions; equal to the
        full sliding-window forward pass when T >= every layer's ``sliding_window``) or
        ``"sinks"`` (StreamingLLM: the first ``sink_tokens`` tokens stay, a ring holds the
        ``T - sink_tokens`` most recent ones, and the PE sees positions assigned within the
        cache, ``0 .. T - 1`` in text order, whatever the text positions; Xiao et al. 2023,
        arXiv 2309.17453). Memory is independent of the generated length for both evicting
        kinds (:mod:`pejax.nn.kv_eviction`). A new token attends to the T cached tokens and
        itself (positions ``0 .. T`` with sinks); afterwards the cache keeps the sinks and the
        ``T - S`` most recent tokens, itself included. With relative PEs a sinks step of a
        one-layer model equals a full forward pass over the kept tokens; absolute PEs keep
        the positions their tokens were written with inside the cached keys/values, and FoX
        keeps the forget gates of evicted tokens in its decay.
      sink_tokens: S, the kept first tokens of ``eviction="sinks"`` (``0 < S < T``).

    Returns:
      A :class:`~pejax.nn.kv_cache.KVCache` (a pytree; pass it through ``nnx.jit``).

    Raises:
      ValueError: naming the argument, for a bad size, dtype, eviction or ``sink_tokens``, and
        for ``eviction="sinks"`` with ``cache_rotated_keys=True`` and a rotary PE (reassigned
        positions need the keys stored before rotation).
    """
    config = self.config
    if eviction == "sinks" and config.cache_rotated_keys and any(
        pe.has_rotate for pe in self.pes):
      raise ValueError(
          "eviction='sinks' reassigns positions within the cache at every step, which needs "
          "keys stored before rotation: build the model with cache_rotated_keys=False (got "
          "cache_rotated_keys=True with a rotary PE)")
    return init_kv_cache(
        **init_cache_layout(config, self.layer_pes()),
        batch_size=arg_checks.check_positive_int("batch_size", batch_size),
        max_length=arg_checks.check_positive_int("max_length", max_length),
        dtype=config.compute_dtype if dtype is None else dtype,
        eviction=eviction, sink_tokens=sink_tokens)

  def prefill(self, tokens: jax.Array, positions: Optional[jax.Array],
              cache: KVCache, *, segment_ids: Optional[jax.Array] = None
              ) -> tuple[jax.Array, KVCache]:
    """Runs ``L`` prompt tokens, writes them to the cache and returns their logits.

    Equal to the full forward pass over the same tokens and positions (any PE). May also be
    called on a non-empty cache (chunked prefill): the tokens attend to everything cached.

    Args:
      tokens: int ``[B, L]``.
      positions: int ``[B, L]`` (or ``[1, L]``); ``None`` continues from the cache length
        (``length .. length + L - 1``).
      cache: from :meth:`init_cache` or a previous call.
      segment_ids: optional int ``[B, L]``, 1 for a token and 0 for left padding (prompts of
        different lengths in one batch): tokens never attend to padding slots, in this call or
        later ones (the cache keeps the ids; later tokens count as 1).

    Returns:
      ``(logits [B, L, V] float32, cache)``.

    Raises:
      ValueError: if the tokens do not fit in the cache (``cache.length + L > max_length``) or a
        token id is outside ``[0, V)``, when these values are concrete. Under ``jax.jit`` the
        logits are NaN instead (the cache length then exceeds ``max_length``, so every later
        call is NaN too).
    """
    return self._extend(tokens, positions, cache, segment_ids=segment_ids)

  def decode_step(self, token: jax.Array, position: jax.Array,
                  cache: KVCache) -> tuple[jax.Array, KVCache]:
    """Appends one token per row and returns its next-token logits.

    Args:
      token: int ``[B, 1]``.
      position: int ``[B, 1]`` its position (explicit: any offset or scheme works).
      cache: the cache after :meth:`prefill` / previous steps.

    Returns:
      ``(logits [B, 1, V] float32, cache)``.

    Raises:
      ValueError: as :meth:`prefill` (a full cache, a token id outside ``[0, V)``).
    """
    token = self._check_tokens(token)
    if token.shape[1] != 1:
      raise ValueError(f"token must have shape [B, 1], got {token.shape}")
    if position is None:
      raise ValueError("position must be an int [B, 1] array, got None")
    return self._extend(token, position, cache)

  def _extend(self, tokens: jax.Array, positions: Optional[jax.Array],
              cache: KVCache, *, segment_ids: Optional[jax.Array] = None
              ) -> tuple[jax.Array, KVCache]:
    tokens = self._check_tokens(tokens)
    batch, length = tokens.shape
    if not isinstance(cache, KVCache):
      raise ValueError(f"cache must be a KVCache from init_cache, got {type(cache).__name__}")
    self._check_cache_fits(cache)
    if cache.positions.shape[0] != batch:
      raise ValueError(
          f"tokens batch ({batch}) must match the cache batch ({cache.positions.shape[0]})")
    evicting = cache.eviction != "none"
    if not evicting and length > cache.max_length:
      raise ValueError(
          f"tokens length ({length}) exceeds the cache capacity max_length={cache.max_length}")
    if not evicting and not isinstance(cache.length, jax.core.Tracer) and (
        int(cache.length) + length > cache.max_length):
      raise ValueError(
          f"cache overflow: cache.length ({int(cache.length)}) + tokens length ({length}) exceeds "
          f"the cache capacity max_length={cache.max_length}")
    if positions is None:
      positions = cache.length + jnp.arange(length, dtype=jnp.int32)[None, :]
    else:
      positions = _check_batch_array("positions", positions, batch, length, allow_shared=True)
    positions = jnp.broadcast_to(positions, (batch, length))
    if segment_ids is not None:
      segment_ids = _check_batch_array("segment_ids", segment_ids, batch, length,
                                       allow_shared=False)
    if evicting:
      return self._extend_evicting(tokens, positions, cache, segment_ids)
    start = cache.length
    cache_positions = jax.lax.dynamic_update_slice(cache.positions, positions, (0, start))
    cache_segment_ids = cache.segment_ids
    if segment_ids is not None or cache_segment_ids is not None:
      if segment_ids is None:
        segment_ids = jnp.ones((batch, length), jnp.int32)
      if cache_segment_ids is None:
        cache_segment_ids = jnp.ones(cache.positions.shape, jnp.int32)
      cache_segment_ids = jax.lax.dynamic_update_slice(cache_segment_ids, segment_ids,
                                                       (0, start))
    x, layers = self._run_blocks(tokens, positions, cache_positions,
                                 [cache.layer(i) for i in range(len(self.blocks))], start,
                                 segment_ids, cache_segment_ids)
    logits = self._logits(x)
    # dynamic_update_slice clamps an overflowing write silently: poison the logits instead.
    logits = jnp.where(start + length > cache.max_length, jnp.nan, logits)
    return logits, cache.with_layers(layers, positions=cache_positions, length=start + length,
                                     segment_ids=cache_segment_ids)

  def _check_cache_fits(self, cache: KVCache) -> None:
    """A cache made for another model (layers, key/value heads, head dim, key features) is an
    error naming what differs, not an XLA shape error or a silently wrong attention."""
    config = self.config
    expected = init_cache_layout(config, self.layer_pes())
    found_layers = len(cache.keys)
    if found_layers != expected["num_layers"]:
      raise ValueError(f"cache has {found_layers} layers, this model {expected['num_layers']}: "
                       "make the cache with this model's init_cache")
    _, _, heads, head_dim = cache.keys[0].shape
    if (heads, head_dim) != (expected["num_kv_heads"], expected["head_dim"]):
      raise ValueError(f"cache holds {heads} key/value heads of dim {head_dim}, this model "
                       f"{expected['num_kv_heads']} of dim {expected['head_dim']}: make the "
                       "cache with this model's init_cache")
    for layer, (array, shape) in enumerate(zip(cache.features, expected["feature_shapes"])):
      found = None if array is None else tuple(array.shape[2:])
      if found != shape:
        raise ValueError(f"cache layer {layer} has key features of shape {found}, this model's "
                         f"PE needs {shape}: make the cache with this model's init_cache")

  def _run_blocks(self, tokens, positions, cache_positions, layer_caches, start, segment_ids,
                  cache_segment_ids):
    """Embeds the new tokens and runs every block over its layer cache (KV-cache form)."""
    implementation = self._implementation(self.config.attention, tokens.shape[1])
    x = self._embed(tokens, positions)
    biases = self._shared_biases(positions, cache_positions, implementation)
    layers = []
    for block, index, layer_cache in zip(self.blocks, self.layer_pe, layer_caches):
      x, layer_cache = block.extend(
          x, pe=self.pes[index], positions=positions, cache_positions=cache_positions,
          layer_cache=layer_cache, length=start, bias=biases[index],
          implementation=implementation, segment_ids=segment_ids,
          cache_segment_ids=cache_segment_ids)
      layers.append(layer_cache)
    return x, layers

  def _extend_evicting(self, tokens: jax.Array, positions: jax.Array, cache: KVCache,
                       segment_ids: Optional[jax.Array]) -> tuple[jax.Array, KVCache]:
    """``eviction="window"`` / ``"sinks"``: attend over the chronological view of the cache
    plus the new tokens, then write back the tokens that stay (:mod:`pejax.nn.kv_eviction`)."""
    batch, length = tokens.shape
    slots, sinks = cache.max_length, cache.sink_tokens
    source, valid = kv_eviction.chronological_view(cache.length, capacity=slots,
                                                   sink_tokens=sinks)

    def view(array, new):  # [B, T, ...] cache array -> [B, T + L, ...] view + new entries.
      return jnp.concatenate([kv_eviction.gather_slots(array, source), new.astype(array.dtype)],
                             axis=1)

    new_segments = (jnp.ones((batch, length), jnp.int32) if segment_ids is None
                    else segment_ids)
    old_segments = (jnp.ones((batch, slots), jnp.int32) if cache.segment_ids is None
                    else cache.segment_ids)
    in_view = jnp.concatenate([valid, jnp.ones((length,), bool)])  # [T + L]: holds a token.
    k_segments = jnp.where(in_view[None, :], view(old_segments, new_segments), 0)
    if cache.eviction == "sinks":  # Rank in text order among this row's tokens.
      k_positions = jnp.maximum(jnp.cumsum(k_segments != 0, axis=1, dtype=jnp.int32) - 1, 0)
      q_positions = k_positions[:, slots:]
    else:
      k_positions, q_positions = view(cache.positions, positions), positions

    def grow(array):  # View + zero slots for the new tokens (written by the layer).
      if array is None:
        return None
      return view(array, jnp.zeros((batch, length) + array.shape[2:], array.dtype))

    def grow_features(array):  # Empty view slots hold 0: FoX continues its sum from slot T - 1.
      if array is None:
        return None
      return grow(array) * in_view.reshape((1, -1) + (1,) * (array.ndim - 2)).astype(array.dtype)

    cached = [cache.layer(i) for i in range(len(self.blocks))]
    layer_views = [LayerCache(grow(c.keys), grow(c.values), grow(c.key_scales),
                              grow(c.value_scales), grow_features(c.features)) for c in cached]
    x, layers = self._run_blocks(tokens, q_positions, k_positions, layer_views, slots,
                                 new_segments, k_segments)
    logits = self._logits(x)
    written, index = kv_eviction.written_slots(cache.length, length, capacity=slots,
                                               sink_tokens=sinks)

    def write(old, combined):
      if old is None:
        return None
      return kv_eviction.write_slots(old, combined[:, slots:], written, index)

    updated = [LayerCache(*(write(o, c) for o, c in zip(old, combined)))
               for old, combined in zip(cached, layers)]
    segments = None if cache.segment_ids is None and segment_ids is None else (
        kv_eviction.write_slots(old_segments, new_segments, written, index))
    return logits, cache.with_layers(
        updated, positions=kv_eviction.write_slots(cache.positions, positions, written, index),
        length=cache.length + length, segment_ids=segments)

  # ----------------------------------------------------------------------------------------------
  # Shared pieces.

  def _implementation(self, attention: str, length: int) -> str:
    """``"auto"`` resolved by length, but dense when a PE cannot run blockwise (CoPE)."""
    return choose_implementation(
        attention, length, blockwise_threshold=self.config.blockwise_threshold,
        supports_blockwise=all(pe.supports_blockwise for pe in self.pes))

  def _check_tokens(self, tokens: Any) -> jax.Array:
    """Checks int ``[B, L]`` tokens; concrete ids must lie in ``[0, V)`` (traced ones: NaN)."""
    tokens = arg_checks.check_integer_array("tokens", tokens)
    if tokens.ndim != 2:
      raise ValueError(f"tokens must have shape [B, L], got {tokens.shape}")
    if not isinstance(tokens, jax.core.Tracer) and tokens.size:
      # numpy, not jnp: a concrete array closed over by a jitted caller is still concrete, but
      # jnp.min of it inside that trace would be a tracer.
      values = np.asarray(tokens)
      low, high = int(values.min()), int(values.max())
      vocab = self.config.vocab_size
      if low < 0 or high >= vocab:
        raise ValueError(
            f"tokens must be in [0, vocab_size={vocab}), got min {low} and max {high}")
    return tokens

  def _check_length(self, length: int) -> None:
    """Raises if ``arange(length)`` positions cannot be encoded (e.g. past a learned table)."""
    for pe in self.pes:
      limit = pe.max_length
      if limit is not None and length > limit:
        raise ValueError(
            f"sequence length {length} exceeds the position table of pe={pe.name!r} "
            f"(max_position={limit}); pass explicit positions or raise max_position")

  def _embed(self, tokens: jax.Array, positions: jax.Array) -> jax.Array:
    bad = None
    if isinstance(tokens, jax.core.Tracer):
      # Traced ids cannot raise: poison out-of-range ones with NaN (jnp.take would wrap -1 to
      # token V - 1, a finite wrong embedding). Concrete ids were range-checked already.
      bad = (tokens < 0) | (tokens >= self.config.vocab_size)
      tokens = jnp.where(bad, 0, tokens)
    x = self.embed(tokens)
    if bad is not None:
      x = jnp.where(bad[..., None], jnp.asarray(jnp.nan, x.dtype), x)
    if self.config.scale_embeddings:
      x = x * jnp.asarray(math.sqrt(self.config.d_model), x.dtype)
    for pe in self.pes:
      if pe.has_embed:
        x = pe.embed(x, positions)
    return x

  def _shared_biases(self, q_positions: jax.Array, k_positions: jax.Array,
                     implementation: str) -> list[Bias]:
    """Per PE instance: its bias, evaluated once here for dense attention (shared by the layers
    using the instance) or a per-tile function; ``None`` for no bias or a per-layer PE."""
    return [None if pe.per_layer else pe_bias(pe, q_positions, k_positions, implementation)
            for pe in self.pes]

  def _logits(self, x: jax.Array) -> jax.Array:
    x = self.final_norm(x)
    if self.lm_head is not None:
      return self.lm_head(x).astype(jnp.float32)
    # Tied: one [N, E] x [E, V] product over the flattened tokens (see token_linear.py).
    logits = self.embed.attend(x.reshape((-1, x.shape[-1])))
    return logits.reshape(x.shape[:-1] + (logits.shape[-1],)).astype(jnp.float32)
