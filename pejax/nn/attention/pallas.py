"""Flash attention as a Pallas kernel with the PE bias computed inside from positions.

Axes: B batch, Lq / Lk query / key length, H query heads, K key/value heads (GQA), D head dim, Dv
value head dim, P bias parameters per head.

:func:`pallas_attention` checks and pads a call and runs the kernels of
:mod:`pejax.nn.attention.pallas_kernels` (GPU through Triton, TPU through Mosaic, or Pallas's
interpreter on any backend). Registered in the attention dispatch for CUDA, ROCm and TPU
(priority 200, after cuDNN): it serves a call with no bias, or with a bias function plus its
:class:`~pejax.encodings.kernel_bias.KernelBias` (a PE's ``kernel_bias()`` hook: ALiBi, T5,
KERPLE, Sandwich, FIRE, or any user PE that defines one), full sequences (no KV-cache offset),
no logit hook or per-token features, on one device.

References:
  Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning",
  arXiv 2307.08691.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import jax
from jax import lax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings.kernel_bias import KernelBias
from pejax.nn.attention.dispatch import AttentionCall, Kernel, register_kernel
from pejax.nn.attention.pallas_kernels import BACKENDS, MIN_DIM, FlashStatic, check_block
from pejax.nn.attention.pallas_kernels import flash, next_pow2, pad_to
from pejax.nn.attention.schedule import ACCELERATORS

Array = jax.Array



def pallas_attention(
    q: Array,
    k: Array,
    v: Array,
    *,
    q_positions: Array,
    k_positions: Array,
    bias: Optional[KernelBias] = None,
    causal: bool = True,
    window: Optional[int] = None,
    q_segment_ids: Optional[Array] = None,
    k_segment_ids: Optional[Array] = None,
    q_offset: int = 0,
    scale: Optional[float] = None,
    block_q: int = 128,
    block_k: int = 128,
    interpret: bool = False,
    backend: Optional[str] = None,
) -> Array:
  """Flash attention with the PE bias and masks computed inside a Pallas kernel.

  Query ``i`` sits at slot ``q_offset + i``, key ``j`` at slot ``j`` (as in
  :func:`pejax.nn.attention.attention`); causality and the window compare slots, the bias reads
  positions. Differentiable in ``q``, ``k``, ``v`` and ``bias.params`` (custom VJP with Pallas
  backward kernels).

  Args:
    q: ``[B, Lq, H, D]`` queries (already rotated, if the PE rotates).
    k: ``[B, Lk, K, D]`` keys, ``H % K == 0``.
    v: ``[B, Lk, K, Dv]`` values.
    q_positions: int ``[B | 1, Lq]`` query positions (the bias's argument).
    k_positions: int ``[B | 1, Lk]`` key positions.
    bias: ``None`` or a :class:`~pejax.encodings.kernel_bias.KernelBias` (e.g. a PE's
      ``kernel_bias()``), evaluated per tile in the kernel.
    causal: mask keys at later slots.
    window: optional sliding window W: a query at slot ``s`` sees keys at slots ``> s - W``.
    q_segment_ids: optional int ``[B, Lq]`` (packed sequences; with ``k_segment_ids``).
    k_segment_ids: optional int ``[B, Lk]``.
    q_offset: static int slot of the first query (>= 0).
    scale: logit scale; ``None`` means ``1 / sqrt(D)``.
    block_q: query tile rows, a power of two >= 16 (capped at the padded length).
    block_k: key tile rows, a power of two >= 16.
    interpret: run the kernels in Pallas's interpreter (any backend, slow; for tests).
    backend: ``"triton"`` or ``"mosaic_tpu"`` to force one lowering; ``None`` stages the choice
      by platform (CUDA / ROCm: Triton, TPU: Mosaic).

  Returns:
    ``[B, Lq, H, Dv]`` in ``q.dtype``.

  Raises:
    ValueError: naming the argument, for malformed shapes or dtypes, bad block sizes, a traced
      or negative ``q_offset``, a bias whose head count is not H, or an unknown backend.
  """
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or v.shape[:3] != k.shape[:3]:
    raise ValueError(f"q must be [B, Lq, H, D] and k, v [B, Lk, K, D], got shapes {q.shape}, "
                     f"{k.shape}, {v.shape}")
  batch, q_len, heads, dim = q.shape
  k_len, kv_heads, dim_v = k.shape[1], k.shape[2], v.shape[3]
  if k.shape[0] != batch or k.shape[3] != dim or heads % kv_heads:
    raise ValueError(f"query heads ({heads}) must be a multiple of key/value heads ({kv_heads}) "
                     f"with equal batch and head dims, got q {q.shape} and k {k.shape}")
  if q_len == 0 or k_len == 0:
    raise ValueError(f"q and k must have at least one token, got {q.shape} and {k.shape}")
  positions = []
  for name, x, length in (("q_positions", q_positions, q_len),
                          ("k_positions", k_positions, k_len)):
    x = arg_checks.check_integer_array(name, x)
    if x.ndim != 2 or x.shape[1] != length or x.shape[0] not in (1, batch):
      raise ValueError(f"{name} must have shape [{batch} or 1, {length}], got {x.shape}")
    positions.append(x.astype(jnp.int32))
  if (q_segment_ids is None) != (k_segment_ids is None):
    raise ValueError("q_segment_ids and k_segment_ids must be given together")
  segments = []
  if q_segment_ids is not None:
    for name, x, length in (("q_segment_ids", q_segment_ids, q_len),
                            ("k_segment_ids", k_segment_ids, k_len)):
      x = arg_checks.check_integer_array(name, x)
      if x.shape != (batch, length):
        raise ValueError(f"{name} must have shape [{batch}, {length}], got {x.shape}")
      segments.append(x.astype(jnp.int32))
  if window is not None:
    window = arg_checks.check_positive_int("window", window)
  if isinstance(q_offset, bool) or not isinstance(q_offset, int) or q_offset < 0:
    raise ValueError(f"q_offset must be a static int >= 0 (a traced KV-cache offset is not "
                     f"served by the kernel), got {q_offset!r}")
  if backend is not None:
    arg_checks.check_choice("backend", backend, BACKENDS)
  if bias is not None:
    if not isinstance(bias, KernelBias):
      raise ValueError(f"bias must be a KernelBias (pejax.encodings.kernel_bias), got "
                       f"{type(bias).__name__}")
    if bias.params.shape != (heads, bias.tile.num_params):
      raise ValueError(f"bias.params must have shape [H={heads}, {bias.tile.num_params}], got "
                       f"{bias.params.shape}")
  if scale is None:
    scale = 1.0 / math.sqrt(dim)
  scale = arg_checks.check_positive_float("scale", scale)
  block_q = check_block("block_q", block_q)
  block_k = check_block("block_k", block_k)
  block_q = min(block_q, max(MIN_DIM, next_pow2(q_len)))
  block_k = min(block_k, max(MIN_DIM, next_pow2(k_len)))

  lq_pad = -(-q_len // block_q) * block_q
  lk_pad = -(-k_len // block_k) * block_k
  dim_pad = max(MIN_DIM, next_pow2(dim))
  dim_v_pad = max(MIN_DIM, next_pow2(dim_v))
  qp = pad_to(pad_to(q, 1, lq_pad), 3, dim_pad)
  kp = pad_to(pad_to(k, 1, lk_pad), 3, dim_pad)
  vp = pad_to(pad_to(v, 1, lk_pad), 3, dim_v_pad)
  qpos = pad_to(positions[0], 1, lq_pad)[:, :, None]  # [B|1, Lq, 1]
  kpos = pad_to(positions[1], 1, lk_pad)[:, None, :]  # [B|1, 1, Lk]
  qseg = kseg = None
  if segments:
    qseg = pad_to(segments[0], 1, lq_pad)[:, :, None]
    kseg = pad_to(segments[1], 1, lk_pad)[:, None, :]
  params = None
  tile = None
  if bias is not None:
    tile = bias.tile
    width = max(128, next_pow2(tile.num_params))
    params = pad_to(pad_to(bias.params.astype(jnp.float32), 0, next_pow2(heads)), 1, width)
  st = FlashStatic(q_len=q_len, k_len=k_len, block_q=block_q, block_k=block_k,
               groups=heads // kv_heads, head_dim=dim, scale=scale, causal=bool(causal),
               window=window, q_offset=q_offset, segments=bool(segments), tile=tile,
               backend=backend, interpret=bool(interpret))
  if params is not None and not tile.learnable:
    params = lax.stop_gradient(params)
  out = flash(st, qp, kp, vp, qpos, kpos, qseg, kseg, params)
  return out[:, :q_len, :, :dim_v]


def pallas_can_serve(
    *,
    pe: Any = None,
    q_offset: Any = 0,
    kv_length: Any = None,
    logits_fn: Any = None,
    features: bool = False,
    head_dim: Optional[int] = None,
) -> Optional[str]:
  """Why :func:`pallas_attention` cannot serve a call, or ``None`` when it can.

  A call is served when its PE has no bias or describes it for the kernel (its
  ``kernel_bias()`` hook, :attr:`~pejax.nn.PositionalEncoding.has_kernel_bias`), the query offset
  is a static int (full sequences, not a traced KV-cache length), there is no traced valid length,
  no logit hook and no per-token features.

  Args:
    pe: the layer's positional encoding (``None``: no PE bias).
    q_offset: the call's query offset (an int, or a traced KV-cache length).
    kv_length: the call's valid key length (``None``; anything else is not served).
    logits_fn: a logit transform (CoPE): not served.
    features: whether the bias takes per-token features (FoX, Shaw): not served.
    head_dim: D, if known (any positive D is served: it is zero-padded to a power of two).

  Returns:
    ``None``, or a one-line reason naming what is not served.
  """
  if pe is not None and pe.has_attend:
    return f"pe={pe.name!r} owns its attention operator (its attend hook), no softmax kernel's"
  if pe is not None and (pe.has_content_bias or pe.has_logits):
    return f"pe={pe.name!r} has a content-aware bias or logit hook (not computable from positions)"
  if pe is not None and pe.has_bias and not pe.has_kernel_bias:
    return f"pe={pe.name!r} has a bias but no kernel_bias() describing it for the kernel"
  if isinstance(q_offset, bool) or not isinstance(q_offset, int) or q_offset < 0:
    return "q_offset is not a static int >= 0 (KV-cache decoding)"
  if kv_length is not None:
    return "kv_length (a partly filled KV cache) is not served"
  if logits_fn is not None:
    return "a logit transform needs whole rows of logits"
  if features:
    return "content-aware biases need per-token features"
  if head_dim is not None and (not isinstance(head_dim, int) or head_dim < 1):
    return f"head_dim must be a positive int, got {head_dim!r}"
  return None


def _serves(call: AttentionCall) -> bool:
  """No bias, or a bias function with its kernel bias; full sequences; one device."""
  if call.bias is not None and call.kernel_bias is None:  # An array or an undescribed function.
    return False
  if len(jax.devices()) != 1:  # A kernel call is not split over a mesh.
    return False
  return pallas_can_serve(q_offset=call.q_offset, kv_length=call.kv_length,
                          logits_fn=call.logits_fn, features=call.has_features,
                          head_dim=call.q.shape[-1]) is None


def _run(call: AttentionCall) -> Array:
  return pallas_attention(
      call.q, call.k, call.v, q_positions=call.q_positions, k_positions=call.k_positions,
      bias=call.kernel_bias if call.bias is not None else None, causal=call.causal,
      window=call.window, q_segment_ids=call.q_segment_ids, k_segment_ids=call.k_segment_ids,
      q_offset=call.q_offset)


KERNEL = register_kernel(Kernel("pallas", _serves, _run, platforms=ACCELERATORS, priority=200,
                                computes_kernel_bias=True))
