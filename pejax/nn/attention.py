"""Softmax attention behind one function; every implementation choice is made in this module.

Axes: B batch, Lq query length, Lk key length, H query heads, K key/value heads (GQA), D head dim.

One core, two schedules, platform fast paths:

* The tile algebra (logits + PE bias + mask, the online softmax step and its VJP) is written once,
  in :mod:`pejax.nn.attention_core`.
* ``dense`` (:mod:`pejax.nn.dense_attention`): one tile per query chunk, whole key rows, float32
  logits, a flash-style custom gradient with O(L) residuals. A causal full-sequence call (no
  KV-cache offset, ``Lq == Lk``) of at least ``_CHUNK_FROM`` (128) tokens is split into up to 8
  static query chunks, chunk ``i`` attending only to the keys ``[0, end_i)`` (the tiles above
  the diagonal are never computed). On CPU the batch also runs in cache-sized groups (a CPU-only
  trick, off on other backends). The PE bias arrives evaluated, ``[B|1, H, Lq, Lk]``, so that a
  decoder computes it once per forward pass and shares it across layers.
* ``blockwise`` (:mod:`pejax.nn.blockwise_attention`): query/key tiles, online softmax, the PE
  bias evaluated per tile from positions: memory O(L * tile), for lengths far beyond training.
* A logit transform that needs whole rows of ``q . k`` (``logits_fn``, CoPE) runs the core's
  tile algebra over the full square, differentiated by autodiff (:mod:`pejax.nn.hooked_attention`).
* Fast paths, tried first on their platform: on CUDA GPUs cuDNN flash attention
  (``jax.nn.dot_product_attention(implementation="cudnn")``) serves every call it can: bf16/fp16,
  head dim a multiple of 8 up to 128, no KV-cache offset, no segment ids, no logit hook or
  content-aware bias, and either no bias or a bias that gets no gradient (ALiBi, Sandwich: the
  decoder passes ``bias_grad=False`` for a PE without parameters), materialized in the input dtype.

**Which one runs** is decided here only: :func:`choose_implementation` picks the schedule
(``"auto"``: dense up to the platform's measured crossover, ``_DENSE_UP_TO``), which also fixes the
form of the PE bias (an evaluated array for ``dense``, a function of positions for
``blockwise``); :func:`attention` then runs the first entry of ``_KERNELS`` whose platform
matches ``jax.default_backend()`` and whose predicate accepts the call: cuDNN (CUDA), the Pallas
flash kernel with the PE bias computed inside from positions (CUDA, ROCm, TPU;
:mod:`pejax.nn.pallas_attention`), then the portable schedules; a new backend kernel is one
more ``_Kernel`` entry with its own predicate. The choice is made when tracing, from the default
backend or :func:`target_platform` (to lower for another platform with ``jax.export`` from a CPU
process).

All paths give the same numbers (float32 rounding aside; the cuDNN path computes in its bf16/fp16
inputs with the bias in that dtype).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.nn.blockwise_attention import blockwise_attention
from pejax.nn.blockwise_attention import check_positions_and_segments
from pejax.nn.dense_attention import dense_attention
from pejax.nn.hooked_attention import hooked_attention

Array = jax.Array
Bias = Union[None, Array, Callable[..., Array]]

IMPLEMENTATIONS = ("dense", "blockwise")

# Causal chunking of dense attention: from _CHUNK_FROM tokens, at most _MAX_CHUNKS query chunks of
# at least _MIN_CHUNK rows. Measured side by side on 2 CPU cores (benchmarks/results): the 4-layer
# training step at 256 tokens 1152 -> 1031 ms CPU (train_throughput_chunks.md); the forward of
# one causal attention (B=1, 4 heads of 32) at 1K tokens 48 -> 14 ms CPU, at 4K 1088 -> 520 ms.
_MIN_CHUNK = 64
_CHUNK_FROM = 2 * _MIN_CHUNK
_MAX_CHUNKS = 8
ATTENTION_CHOICES = ("auto",) + IMPLEMENTATIONS

# Longest query length that "auto" runs densely, per platform. CPU: measured by
# benchmarks/attention_crossover.py (results/attention_crossover.md; also
# results/attention_vs_torch*.md, 2026-11-30): at 1024 tokens dense is the faster schedule
# (forward + backward 69 vs 82 ms, tile 512), at 2048 blockwise is (forward 62 vs 101 ms), and the
# gap widens with length. Other platforms: not measured; the former default (2048) stands.
_DENSE_UP_TO = {"cpu": 1024}
_DENSE_UP_TO_UNMEASURED = 2048


_TARGET_PLATFORMS: list[str] = []  # The stack of target_platform() overrides.
_ACCELERATORS = frozenset({"cuda", "rocm", "tpu"})  # Where the Pallas kernel serves calls.


@contextlib.contextmanager
def target_platform(name: str) -> Iterator[None]:
  """Traces attention for platform ``name`` (e.g. to ``jax.export`` for ``"tpu"`` from a CPU).

  Inside the context :func:`platform` returns ``name``, so the kernel table picks what that
  platform would run (the Pallas kernel on ``"cuda"`` / ``"tpu"``). Functions jitted earlier keep
  their traces: trace (or export) afresh inside the context.

  Args:
    name: ``"cpu"``, ``"cuda"``, ``"rocm"`` or ``"tpu"``.

  Yields:
    Nothing.
  """
  arg_checks.check_choice("name", name, ("cpu", "cuda", "rocm", "tpu"))
  _TARGET_PLATFORMS.append(name)
  try:
    yield
  finally:
    _TARGET_PLATFORMS.pop()


def platform() -> str:
  """The platform attention dispatches for: ``"cpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``, ...

  ``jax.default_backend()``, with ``"gpu"`` split into CUDA and ROCm (cuDNN needs CUDA), unless
  :func:`target_platform` says otherwise.

  Returns:
    the platform name.
  """
  if _TARGET_PLATFORMS:
    return _TARGET_PLATFORMS[-1]
  backend = jax.default_backend()
  if backend != "gpu":
    return backend
  try:
    from jax.extend import backend as jax_backend  # pylint: disable=g-import-not-at-top
    version = jax_backend.get_backend().platform_version.lower()
  except Exception:  # pylint: disable=broad-except
    return "gpu"
  return "rocm" if "rocm" in version else "cuda"


def choose_implementation(attention: str, length: int, *,
                          blockwise_threshold: Optional[int] = None,
                          supports_blockwise: bool = True,
                          platform_name: Optional[str] = None) -> str:
  """The schedule of a call: ``"dense"`` or ``"blockwise"`` (``"auto"`` resolved by length).

  The one place that chooses (the decoder, the evaluation loops and :func:`attention` ask it).
  An explicit choice is returned as is.

  Args:
    attention: ``"auto"``, ``"dense"`` or ``"blockwise"``.
    length: the (static) number of query tokens.
    blockwise_threshold: longest length that ``"auto"`` runs densely; ``None`` (or 0): the
      platform's measured crossover (``_DENSE_UP_TO``: 1024 on CPU).
    supports_blockwise: whether every PE involved can run blockwise (CoPE cannot): if not,
      ``"auto"`` stays dense at any length.
    platform_name: the platform (default: :func:`platform`).

  Returns:
    ``"dense"`` or ``"blockwise"``.

  Raises:
    ValueError: naming ``attention`` or ``blockwise_threshold`` for a bad value.
  """
  arg_checks.check_choice("attention", attention, ATTENTION_CHOICES)
  if attention != "auto":
    return attention
  if blockwise_threshold is None or (isinstance(blockwise_threshold, int)
                                     and not isinstance(blockwise_threshold, bool)
                                     and blockwise_threshold == 0):
    blockwise_threshold = _DENSE_UP_TO.get(platform_name or platform(), _DENSE_UP_TO_UNMEASURED)
  blockwise_threshold = arg_checks.check_positive_int("blockwise_threshold", blockwise_threshold)
  if not supports_blockwise:
    return "dense"
  return "blockwise" if length > blockwise_threshold else "dense"


# ----------------------------------------------------------------------------------------------
# The kernel table.


class AttentionCall(NamedTuple):
  """One checked call of :func:`attention`, as the kernels' predicates and runners see it.

  Attributes mirror :func:`attention`'s arguments (``schedule`` is the chosen ``implementation``).
  """
  q: Array
  k: Array
  v: Array
  q_positions: Array
  k_positions: Array
  bias: Bias
  bias_grad: bool
  schedule: str
  causal: bool
  q_offset: Any
  kv_length: Any
  q_segment_ids: Optional[Array]
  k_segment_ids: Optional[Array]
  block_size: int
  window: Optional[int]
  q_features: Any
  k_features: Any
  logits_fn: Optional[Callable[[Array], Array]]
  platform: str


@dataclasses.dataclass(frozen=True)
class _Kernel:
  """One attention implementation: where it runs, which calls it serves, how it runs them."""
  name: str
  platforms: Optional[frozenset]  # None: every platform
  serves: Callable[[AttentionCall], bool]
  run: Callable[[AttentionCall], Array]


def _features(call: AttentionCall) -> bool:
  return call.q_features is not None or call.k_features is not None


def _evaluated_bias(call: AttentionCall) -> Optional[Array]:
  if callable(call.bias):
    return (call.bias(call.q_positions, call.k_positions, call.q_features, call.k_features)
            if _features(call) else call.bias(call.q_positions, call.k_positions))
  return call.bias


def _no_cache_offset(call: AttentionCall) -> bool:
  return isinstance(call.q_offset, int) and call.q_offset == 0 and call.kv_length is None


def _cudnn_serves(call: AttentionCall) -> bool:
  """cuDNN flash attention (jax.nn.dot_product_attention): the shapes and masks it supports."""
  q, k, v = call.q, call.k, call.v
  if call.logits_fn is not None or _features(call) or call.q_segment_ids is not None:
    return False
  if not _no_cache_offset(call) or (call.causal and q.shape[1] != k.shape[1]):
    return False
  if q.dtype not in (jnp.bfloat16, jnp.float16) or k.dtype != q.dtype or v.dtype != q.dtype:
    return False
  if q.shape[-1] % 8 or q.shape[-1] > 128 or v.shape[-1] != q.shape[-1]:
    return False
  if call.window is not None and not call.causal:
    return False
  if call.bias is not None:
    # cuDNN differentiates a bias only in some layouts; the blockwise schedule promises O(L * tile)
    # memory, which an evaluated [H, Lq, Lk] bias would break; training with a bias needs even
    # lengths.
    if call.bias_grad or call.schedule == "blockwise" or q.shape[1] % 2 or k.shape[1] % 2:
      return False
  return True


def _cudnn_run(call: AttentionCall) -> Array:
  bias = _evaluated_bias(call)
  if bias is not None:
    bias = jax.lax.stop_gradient(bias).astype(call.q.dtype)
  window = None if call.window is None else (call.window - 1, 0)
  return jax.nn.dot_product_attention(call.q, call.k, call.v, bias=bias, is_causal=call.causal,
                                      local_window_size=window, implementation="cudnn")


def _hooked_run(call: AttentionCall) -> Array:
  return hooked_attention(
      call.q, call.k, call.v, bias=_evaluated_bias(call), logits_fn=call.logits_fn,
      q_slots=call.q_offset + jnp.arange(call.q.shape[1], dtype=jnp.int32),
      k_slots=jnp.arange(call.k.shape[1], dtype=jnp.int32), causal=call.causal,
      kv_length=call.kv_length, q_segment_ids=call.q_segment_ids,
      k_segment_ids=call.k_segment_ids, window=call.window)


def _blockwise_run(call: AttentionCall) -> Array:
  bias_fn = call.bias
  if _features(call):
    def bias_fn(qp, kp, q_index, k_index):  # Gathers the tile's features (pads: clipped).
      return call.bias(qp, kp, _rows(call.q_features, q_index), _rows(call.k_features, k_index))
  return blockwise_attention(
      call.q, call.k, call.v, q_positions=call.q_positions, k_positions=call.k_positions,
      bias_fn=bias_fn, causal=call.causal, q_offset=call.q_offset, kv_length=call.kv_length,
      q_segment_ids=call.q_segment_ids, k_segment_ids=call.k_segment_ids,
      block_size=call.block_size, window=call.window, indexed_bias=_features(call))


def _dense_run(call: AttentionCall) -> Array:
  q_len, k_len = call.q.shape[1], call.k.shape[1]
  chunks = ((0, q_len, k_len),)
  if call.causal and _no_cache_offset(call) and q_len == k_len:
    # Query chunk [start, end) sees keys [0, end): the tiles above the diagonal are skipped.
    chunks = tuple((start, end, end) for start, end in causal_chunks(q_len))
  return dense_attention(
      call.q, call.k, call.v, bias=_evaluated_bias(call),
      q_slots=call.q_offset + jnp.arange(q_len, dtype=jnp.int32),
      k_slots=jnp.arange(k_len, dtype=jnp.int32), causal=call.causal, chunks=chunks,
      kv_length=call.kv_length, q_segment_ids=call.q_segment_ids,
      k_segment_ids=call.k_segment_ids, window=call.window,
      batch_groups=call.platform == "cpu")


def _bias_pe(call: AttentionCall) -> Any:
  """The PE whose ``bias`` hook is the call's bias function (``None``: no such PE)."""
  owner = getattr(call.bias, "__self__", None)
  if owner is None or getattr(owner, "bias", None) != call.bias:
    return None
  return owner


def _pallas_serves(call: AttentionCall) -> bool:
  """The Pallas flash kernel (pejax.nn.pallas_attention): no bias, or a PE bias it computes
  inside from positions (ALiBi, T5, KERPLE, Sandwich, FIRE); full sequences (no KV-cache offset),
  no logit hook or features; one device (a kernel call is not split over a mesh)."""
  from pejax.nn.pallas_attention import pallas_can_serve  # pylint: disable=g-import-not-at-top
  pe = _bias_pe(call)
  if call.bias is not None and pe is None:  # An evaluated array or a user's function.
    return False
  if len(jax.devices()) != 1:
    return False
  return pallas_can_serve(pe=pe, q_offset=call.q_offset, kv_length=call.kv_length,
                          logits_fn=call.logits_fn, features=_features(call),
                          head_dim=call.q.shape[-1]) is None


def _pallas_run(call: AttentionCall) -> Array:
  # pylint: disable=g-import-not-at-top
  from pejax.nn.pallas_attention import pallas_attention
  from pejax.nn.tile_bias import kernel_bias_from_pe
  # pylint: enable=g-import-not-at-top
  pe = _bias_pe(call)
  return pallas_attention(
      call.q, call.k, call.v, q_positions=call.q_positions, k_positions=call.k_positions,
      bias=None if pe is None else kernel_bias_from_pe(pe), causal=call.causal,
      window=call.window, q_segment_ids=call.q_segment_ids, k_segment_ids=call.k_segment_ids,
      q_offset=call.q_offset)


def bias_as_function(pe: Any) -> bool:
  """Whether the decoder should hand ``pe``'s bias to :func:`attention` as its ``bias`` hook
  (not evaluated) even for the dense schedule: on an accelerator, where the Pallas kernel
  computes that bias inside from positions.

  Args:
    pe: a positional encoding instance.

  Returns:
    True on CUDA / ROCm / TPU when the kernel can describe the PE's bias.
  """
  if platform() not in _ACCELERATORS:
    return False
  from pejax.nn.tile_bias import pe_kernel_servable  # pylint: disable=g-import-not-at-top
  return pe_kernel_servable(pe)


# First match wins: platform fast paths, then the portable schedules.
_KERNELS: tuple[_Kernel, ...] = (
    _Kernel("cudnn", frozenset({"cuda"}), _cudnn_serves, _cudnn_run),
    _Kernel("pallas", _ACCELERATORS, _pallas_serves, _pallas_run),
    _Kernel("hooked", None, lambda call: call.logits_fn is not None, _hooked_run),
    _Kernel("blockwise", None, lambda call: call.schedule == "blockwise", _blockwise_run),
    _Kernel("dense", None, lambda call: call.schedule == "dense", _dense_run),
)


def select_kernel(call: AttentionCall) -> str:
  """The name of the kernel that runs ``call``: the first entry of the table that serves it.

  Args:
    call: the checked call.

  Returns:
    the kernel's name (``"cudnn"``, ``"pallas"``, ``"hooked"``, ``"blockwise"`` or
    ``"dense"``).
  """
  return _select(call).name


def _select(call: AttentionCall) -> _Kernel:
  for kernel in _KERNELS:
    if (kernel.platforms is None or call.platform in kernel.platforms) and kernel.serves(call):
      return kernel
  raise AssertionError(f"no attention kernel serves schedule {call.schedule!r}")


def attention(
    q: Array,
    k: Array,
    v: Array,
    *,
    q_positions: Array,
    k_positions: Array,
    bias: Bias = None,
    implementation: str = "dense",
    causal: bool = True,
    q_offset: Array | int = 0,
    kv_length: Optional[Array | int] = None,
    q_segment_ids: Optional[Array] = None,
    k_segment_ids: Optional[Array] = None,
    block_size: int = 512,
    window: Optional[int] = None,
    q_features: Any = None,
    k_features: Any = None,
    logits_fn: Optional[Callable[[Array], Array]] = None,
    bias_grad: bool = True,
) -> Array:
  """Scaled dot-product attention with a positional bias, causal/segment masks and GQA.

  Query ``i`` sits at slot ``q_offset + i``, key ``j`` at slot ``j`` (a KV cache passes its
  length as ``q_offset``; a plain forward pass uses 0). Causality compares slots, not positions.

  Args:
    q: ``[B, Lq, H, D]`` queries.
    k: ``[B, Lk, K, D]`` keys, ``H % K == 0``.
    v: ``[B, Lk, K, Dv]`` values (``Dv`` may differ from ``D``).
    q_positions: int ``[B | 1, Lq]`` query positions (arguments of a bias function).
    k_positions: int ``[B | 1, Lk]`` key positions.
    bias: ``None``; a function ``(q_positions, k_positions) -> [B|1, H, Lq, Lk]`` (with
      features: ``(q_positions, k_positions, q_features, k_features)``); or, for ``dense``
      only, an already evaluated ``[B|1, H, Lq, Lk]`` array.
    implementation: ``"dense"``, ``"blockwise"`` or ``"auto"`` (:func:`choose_implementation`
      by query length; dense for an array bias or ``logits_fn``).
    causal: mask keys at later slots.
    q_offset: int scalar slot of the first query.
    kv_length: optional int scalar; keys at slots ``>= kv_length`` are masked.
    q_segment_ids: optional int ``[B, Lq]`` segment of each query (packed sequences).
    k_segment_ids: optional int ``[B, Lk]`` segment of each key.
    block_size: tile size of ``blockwise``.
    window: optional sliding window W: a query at slot ``s`` sees keys at slots ``> s - W``.
    q_features: optional pytree of per-query arrays ``[B, Lq, ...]`` passed to ``bias``.
    k_features: optional pytree of per-key arrays ``[B, Lk, ...]`` passed to ``bias``.
    logits_fn: optional ``logits [B, H, Lq, Lk] -> [B, H, Lq, Lk]`` term added to the scaled,
      biased, masked float32 logits (masked pairs are ``-1e30``); ``dense`` only.
    bias_grad: whether the bias may need a gradient (``False`` for a PE without parameters,
      e.g. ALiBi: lets a fast path that cannot differentiate a bias serve the call; its bias then
      gets none).

  Returns:
    ``[B, Lq, H, Dv]`` in ``q.dtype``.

  Raises:
    ValueError: naming the argument, for malformed shapes (positions or segment ids whose length
      is not the query / key length included), dtypes or choices.
  """
  arg_checks.check_choice("implementation", implementation, ATTENTION_CHOICES)
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or v.shape[:3] != k.shape[:3]:
    raise ValueError(
        f"q must be [B, Lq, H, D] and k, v [B, Lk, K, D], got shapes {q.shape}, {k.shape}, "
        f"{v.shape}")
  if q.shape[-1] != k.shape[-1] or q.shape[2] % k.shape[2]:
    raise ValueError(
        f"query heads ({q.shape[2]}) must be a multiple of key/value heads ({k.shape[2]}) and "
        f"head dims must match, got q {q.shape} and k {k.shape}")
  q_positions, k_positions = check_positions_and_segments(
      q, k, q_positions=q_positions, k_positions=k_positions, q_segment_ids=q_segment_ids,
      k_segment_ids=k_segment_ids)
  if window is not None:
    window = arg_checks.check_positive_int("window", window)
  features = q_features is not None or k_features is not None
  if features and not callable(bias):
    raise ValueError("q_features / k_features need bias to be a function of (q_positions, "
                     "k_positions, q_features, k_features)")
  array_bias = bias is not None and not callable(bias)
  if implementation == "auto":
    implementation = choose_implementation(
        "auto", q.shape[1], supports_blockwise=logits_fn is None and not array_bias)
  if implementation == "blockwise":
    if logits_fn is not None:
      raise ValueError("logits_fn needs whole rows of logits: use implementation='dense'")
    if array_bias:
      raise ValueError(
          "bias must be a function of positions for blockwise attention (it is evaluated per "
          f"tile), got an array of shape {jnp.shape(bias)}")
  call = AttentionCall(
      q=q, k=k, v=v, q_positions=q_positions, k_positions=k_positions, bias=bias,
      bias_grad=bool(bias_grad), schedule=implementation, causal=bool(causal),
      q_offset=q_offset, kv_length=kv_length, q_segment_ids=q_segment_ids,
      k_segment_ids=k_segment_ids, block_size=block_size, window=window, q_features=q_features,
      k_features=k_features, logits_fn=logits_fn, platform=platform())
  return _select(call).run(call)


def _rows(tree: Any, index: Array) -> Any:
  """Rows ``index`` (axis 1) of every array of ``tree``; indices past the end are clipped (the
  padding rows of a blockwise tile, masked anyway)."""
  return jax.tree.map(lambda x: jnp.take(x, index, axis=1, mode="clip"), tree)


def causal_chunks(length: int) -> list[tuple[int, int]]:
  """Static ``[start, end)`` query chunks of causal dense attention over ``length`` tokens.

  ``n = min(_MAX_CHUNKS, length // _MIN_CHUNK)`` near-equal chunks; one chunk (no split) below
  ``_CHUNK_FROM`` tokens.

  Args:
    length: the number of queries (= keys).

  Returns:
    list of ``(start, end)`` covering ``[0, length)`` in order.
  """
  if length < _CHUNK_FROM:
    return [(0, length)]
  num = max(1, min(_MAX_CHUNKS, length // _MIN_CHUNK))
  edges = [round(i * length / num) for i in range(num + 1)]
  return list(zip(edges[:-1], edges[1:]))
