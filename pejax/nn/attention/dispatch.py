"""Softmax attention behind one function, and the table of kernels that serve its calls.

Axes: B batch, Lq query length, Lk key length, H query heads, K key/value heads (GQA), D head dim.

:func:`attention` checks a call, resolves its schedule (:func:`~pejax.nn.attention.schedule.
choose_implementation`) and runs the first registered :class:`Kernel` (highest ``priority``
first) whose platforms include the call's platform and whose ``serves(call)`` accepts it. Each
kernel module owns its predicate and runner and registers itself
(:func:`register_kernel`): cuDNN (CUDA, priority 300), the Pallas flash kernel with the PE bias
computed inside (CUDA / ROCm / TPU, 200), the logit-hook schedule (100), blockwise (20) and dense
(10). A new kernel is one module with one :func:`register_kernel` call; nothing here names a
kernel or a positional encoding.

A PE's bias reaches a call in one of two forms, chosen by the caller (the decoder asks
:func:`kernel_bias_served`): evaluated (an ``[B|1, H, Lq, Lk]`` array, dense schedule) or as a
function of positions, in which case the caller may add the PE's own
:class:`~pejax.encodings.kernel_bias.KernelBias` (its ``kernel_bias()`` hook) for kernels that
compute the bias inside (``Kernel.computes_kernel_bias``). The dispatch never inspects where a
bias function comes from.

All kernels give the same numbers (float32 rounding aside; the cuDNN path computes in its
bf16/fp16 inputs with the bias in that dtype), tested against dense on every PE.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings.kernel_bias import KernelBias
from pejax.nn.attention import schedule
from pejax.nn.attention.input_checks import check_positions_and_segments

Array = jax.Array
Bias = Union[None, Array, Callable[..., Array]]


class AttentionCall(NamedTuple):
  """One checked call of :func:`attention`, as the kernels' predicates and runners see it.

  Attributes mirror :func:`attention`'s arguments (``schedule`` is the chosen
  ``implementation``; ``platform`` the platform it runs for). ``chunk_size`` comes last with a
  default, so calls built without it (kernels written before it existed) stay valid; only
  kernels registered with ``chunk_aware=True`` are offered a call that sets it.
  """
  q: Array
  k: Array
  v: Array
  q_positions: Array
  k_positions: Array
  bias: Bias
  kernel_bias: Optional[KernelBias]
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
  chunk_size: Optional[int] = None

  @property
  def has_features(self) -> bool:
    """Whether the bias takes per-token features (a content-aware PE)."""
    return self.q_features is not None or self.k_features is not None

  @property
  def full_sequence(self) -> bool:
    """Whether the queries start at slot 0 with every key valid (no KV-cache offset)."""
    return isinstance(self.q_offset, int) and self.q_offset == 0 and self.kv_length is None

  def evaluated_bias(self) -> Optional[Array]:
    """The bias as an array ``[B|1, H, Lq, Lk]`` (a bias function evaluated on the positions).

    Returns:
      float32 bias or ``None``.
    """
    if callable(self.bias):
      if self.has_features:
        return self.bias(self.q_positions, self.k_positions, self.q_features, self.k_features)
      return self.bias(self.q_positions, self.k_positions)
    return self.bias


@dataclasses.dataclass(frozen=True)
class Kernel:
  """One attention implementation: where it runs, which calls it serves, how it runs them.

  Attributes:
    name: unique name (:func:`select_kernel` returns it).
    serves: ``call -> bool``: whether this kernel can run the call (shapes, dtypes, masks, bias).
    run: ``call -> [B, Lq, H, Dv]`` output in ``q.dtype``.
    platforms: the platforms it runs on (``"cpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``); ``None``
      for every platform.
    priority: higher is tried first (built-ins: cuDNN 300, Pallas 200, logit hook 100, blockwise
      20, dense 10).
    computes_kernel_bias: whether it computes a PE's bias inside from a call's ``kernel_bias``
      (then callers on its platforms pass biases as functions plus their kernel bias).
    chunk_aware: whether ``serves`` / ``run`` know ``AttentionCall.chunk_size`` (chunked local
      attention, added after the other mask options). A kernel without it is never offered a
      call with a chunk size, so a kernel written before the field existed cannot serve one by
      ignoring it; a kernel that sets it must compute the chunk mask or decline the call.
  """

  name: str
  serves: Callable[[AttentionCall], bool]
  run: Callable[[AttentionCall], Array]
  platforms: Optional[frozenset] = None
  priority: int = 0
  computes_kernel_bias: bool = False
  chunk_aware: bool = False

  def __post_init__(self):
    if not isinstance(self.name, str) or not self.name:
      raise ValueError(f"name must be a non-empty string, got {self.name!r}")
    for field in ("serves", "run"):
      if not callable(getattr(self, field)):
        raise ValueError(f"{field} must be callable, got {getattr(self, field)!r}")
    if self.platforms is not None:
      object.__setattr__(self, "platforms", frozenset(self.platforms))
    if isinstance(self.priority, bool) or not isinstance(self.priority, int):
      raise ValueError(f"priority must be an int, got {self.priority!r}")

  def runs_on(self, platform_name: str) -> bool:
    """Whether this kernel runs on ``platform_name``."""
    return self.platforms is None or platform_name in self.platforms


_KERNELS: dict[str, Kernel] = {}


def register_kernel(kernel: Kernel, *, overwrite: bool = False) -> Kernel:
  """Adds ``kernel`` to the dispatch table.

  Args:
    kernel: the :class:`Kernel`.
    overwrite: replace a registered kernel of the same name instead of raising.

  Returns:
    ``kernel``.

  Raises:
    ValueError: if ``kernel`` is not a :class:`Kernel` or its name is taken.
  """
  if not isinstance(kernel, Kernel):
    raise ValueError(f"kernel must be a pejax.nn.attention.Kernel, got {kernel!r}")
  if kernel.name in _KERNELS and not overwrite:
    raise ValueError(f"an attention kernel named {kernel.name!r} is already registered (pass "
                     "overwrite=True to replace it)")
  _KERNELS[kernel.name] = kernel
  return kernel


def unregister_kernel(name: str) -> Kernel:
  """Removes the kernel ``name`` from the dispatch table.

  Args:
    name: a registered kernel's name.

  Returns:
    The removed :class:`Kernel`.

  Raises:
    ValueError: naming ``name`` if no such kernel is registered.
  """
  if name not in _KERNELS:
    raise ValueError(f"no attention kernel named {name!r}; registered: {sorted(_KERNELS)}")
  return _KERNELS.pop(name)


def kernels() -> tuple[Kernel, ...]:
  """The registered kernels in the order they are tried (highest priority first).

  Returns:
    A tuple of :class:`Kernel`.
  """
  return tuple(sorted(_KERNELS.values(), key=lambda kernel: -kernel.priority))


def kernel_bias_served(platform_name: Optional[str] = None) -> bool:
  """Whether a kernel on the platform computes PE biases inside from their kernel bias.

  The decoder asks this to decide the form of a PE's bias: where it is True, a PE with a
  ``kernel_bias()`` hook hands attention its bias function and that kernel bias (not an
  evaluated array), so such a kernel can serve the call.

  Args:
    platform_name: the platform (default: :func:`~pejax.nn.attention.schedule.platform`).

  Returns:
    True if a registered kernel with ``computes_kernel_bias`` runs on the platform.
  """
  name = platform_name or schedule.platform()
  return any(kernel.computes_kernel_bias and kernel.runs_on(name) for kernel in _KERNELS.values())


def select_kernel(call: AttentionCall) -> str:
  """The name of the kernel that runs ``call``: the first of :func:`kernels` that serves it.

  Args:
    call: the checked call.

  Returns:
    the kernel's name (built-ins: ``"cudnn"``, ``"pallas"``, ``"logit_hook"``, ``"blockwise"``,
    ``"dense"``).
  """
  return _select(call).name


def _select(call: AttentionCall) -> Kernel:
  for kernel in kernels():
    if call.chunk_size is not None and not kernel.chunk_aware:
      continue
    if kernel.runs_on(call.platform) and kernel.serves(call):
      return kernel
  raise ValueError(f"no attention kernel serves schedule={call.schedule!r} on platform="
                   f"{call.platform!r}; registered: {[k.name for k in kernels()]}")


def attention(
    q: Array,
    k: Array,
    v: Array,
    *,
    q_positions: Array,
    k_positions: Array,
    bias: Bias = None,
    kernel_bias: Optional[KernelBias] = None,
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
    chunk_size: Optional[int] = None,
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
    kernel_bias: optional :class:`~pejax.encodings.kernel_bias.KernelBias` describing the same
      bias as ``bias`` (a function of positions) for kernels that compute it inside (a PE's
      ``kernel_bias()``); ignored by the others.
    implementation: ``"dense"``, ``"blockwise"`` or ``"auto"`` (by query length; dense for an
      array bias or ``logits_fn``).
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
    chunk_size: optional chunked local attention (Llama 4): a query at position p sees only
      keys at positions k with ``k // chunk_size == p // chunk_size`` (with the other masks).
      Chunks follow *positions*, so they restart with the positions of each packed segment and
      continue through a KV cache (:mod:`pejax.nn.attention.mask`).

  Returns:
    ``[B, Lq, H, Dv]`` in ``q.dtype``.

  Raises:
    ValueError: naming the argument, for malformed shapes (positions or segment ids whose length
      is not the query / key length included), dtypes or choices.
  """
  arg_checks.check_choice("implementation", implementation, schedule.ATTENTION_CHOICES)
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
  if chunk_size is not None:
    chunk_size = arg_checks.check_positive_int("chunk_size", chunk_size)
  features = q_features is not None or k_features is not None
  if features and not callable(bias):
    raise ValueError("q_features / k_features need bias to be a function of (q_positions, "
                     "k_positions, q_features, k_features)")
  array_bias = bias is not None and not callable(bias)
  if kernel_bias is not None:
    if not isinstance(kernel_bias, KernelBias):
      raise ValueError(f"kernel_bias must be a KernelBias (pejax.encodings.kernel_bias), got "
                       f"{type(kernel_bias).__name__}")
    if not callable(bias) or features:
      raise ValueError("kernel_bias describes a bias function of positions: pass that function "
                       "as bias (without q_features / k_features)")
  if implementation == "auto":
    implementation = schedule.choose_implementation(
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
      kernel_bias=kernel_bias, bias_grad=bool(bias_grad), schedule=implementation,
      causal=bool(causal), q_offset=q_offset, kv_length=kv_length, q_segment_ids=q_segment_ids,
      k_segment_ids=k_segment_ids, block_size=block_size, window=window, q_features=q_features,
      k_features=k_features, logits_fn=logits_fn, platform=schedule.platform(),
      chunk_size=chunk_size)
  return _select(call).run(call)
