"""The Pallas flash-attention kernels (forward, dq, dk/dv) and their custom VJP, on padded operands.

The entry point with the argument checks and the dispatch registration is
:mod:`pejax.nn.attention.pallas`; this module holds what runs inside the kernels.

Axes: B batch, Lq / Lk query / key length, H query heads, K key/value heads (GQA, G = H // K),
D head dim, Dv value head dim, bq / bk query / key tile rows, P bias parameters per head.

One forward kernel and two backward kernels (FlashAttention-2's schedule):

* forward, grid ``(B, H, Lq / bq)``: one query tile against the key tiles it can see (causal and
  sliding-window bounds skip the others), online softmax in float32; writes the output and the
  row log-sum-exp.
* backward ``dq``, grid ``(B, H, Lq / bq)``: recomputes each tile's probabilities from the
  log-sum-exp and accumulates ``dq``.
* backward ``dk, dv`` (+ bias parameters), grid ``(B, H, Lk / bk)``: one key tile against the
  query tiles that see it; accumulates ``dk``, ``dv`` per query head (summed over the GQA group
  afterwards) and, for a learnable bias, the gradient of the head's bias parameters, tile by
  tile, from ``jax.vjp`` of the bias tile function (:mod:`pejax.encodings.kernel_bias`).

The PE bias (ALiBi, T5 buckets, KERPLE log / power, Sandwich, FIRE) and the masks (causal by
slot, sliding window, segment ids for packed sequences, padding) are evaluated per ``[bq, bk]``
tile from the tile's int32 positions and slots: no ``[H, N, N]`` bias, mask or probability array
exists at any point, forward or backward. Lengths that are not a multiple of the tile are padded
and the padding masked; head dims are zero-padded to a power of two >= 16 (Triton's ``dot``).

Lowering: GPU through Triton (``pl.pallas_call`` with Triton compiler params; CUDA and ROCm),
TPU through Mosaic; the choice is staged with ``lax.platform_dependent``, so one traced function
lowers for whichever platform it is exported or compiled for. ``interpret=True`` runs the same
kernels in Pallas's interpreter on any backend (the tests' reference check on CPU). Keys and
values of one (batch, head) are addressed whole (``[Lk, D]``) and sliced tile by tile inside the
kernel: on GPU that is a pointer, on TPU the block lives in VMEM (``2 * Lk * D`` elements per
head: 4 MiB for 16K bf16 tokens of D = 64; longer sequences on TPU need a key-blocked grid,
not written). Nothing here has been run on an accelerator yet (see ``benchmarks/README.md``).

Numbers: equal to the dense reference (``softmax(q k^T * scale + bias, masked) v``) to float32
rounding, values and gradients (q, k, v, the bias parameters). Differences from the dense path:
a query that sees no key at all (impossible with causal self-attention) gets 0, not the uniform
average; and the kernel takes a :class:`~pejax.encodings.kernel_bias.KernelBias`, not a bias function.

References:
  Dao et al. 2022, "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness",
  arXiv 2205.14135.
  Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning",
  arXiv 2307.08691.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional

import jax
from jax import lax
from jax.experimental import pallas as pl
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings import masked_logit
from pejax.encodings.kernel_bias import TileBias

Array = jax.Array

BACKENDS = ("triton", "mosaic_tpu")
# Finite stand-in for -inf (as the dense and blockwise paths): exp() of a masked logit is 0.
_MASKED = masked_logit.MASKED
# Rows of the per-tile bias-parameter gradient block (a sublane-aligned [8, P] block on TPU).
_GRAD_ROWS = 8
MIN_DIM = 16


@dataclasses.dataclass(frozen=True)
class FlashStatic:
  """Everything static about one call (hashable: the custom VJP's non-differentiable part)."""

  q_len: int
  k_len: int
  block_q: int
  block_k: int
  groups: int
  head_dim: int
  scale: float
  causal: bool
  window: Optional[int]
  q_offset: int
  segments: bool
  tile: Optional[TileBias]
  backend: Optional[str]  # None: platform_dependent over both.
  interpret: bool


def next_pow2(n: int) -> int:
  return 1 << max(0, (n - 1).bit_length())


def pad_to(x: Array, axis: int, size: int, value: Any = 0) -> Array:
  extra = size - x.shape[axis]
  if extra == 0:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, extra)
  return jnp.pad(x, widths, constant_values=value)


def check_block(name: str, value: int) -> int:
  value = arg_checks.check_positive_int(name, value)
  if value < MIN_DIM or value & (value - 1):
    raise ValueError(f"{name} must be a power of two >= {MIN_DIM} (Triton tiles), got {value}")
  return value


# Tile pieces shared by the three kernels. -------------------------------------------------------


def _tile_mask(st: FlashStatic, q_start, k_start, bq: int, bk: int, qseg=None, kseg=None):
  """bool ``[bq, bk]``: which (query, key) pairs of the tile take part (or None: all)."""
  q_slot = st.q_offset + q_start + lax.broadcasted_iota(jnp.int32, (bq, 1), 0)
  k_slot = k_start + lax.broadcasted_iota(jnp.int32, (1, bk), 1)
  mask = jnp.logical_and(k_slot < st.k_len, q_slot < st.q_offset + st.q_len)
  if st.causal:
    mask = jnp.logical_and(mask, k_slot <= q_slot)
  if st.window is not None:
    mask = jnp.logical_and(mask, k_slot > q_slot - st.window)
  if qseg is not None:
    mask = jnp.logical_and(mask, qseg == kseg)
  return mask


def _logits(st: FlashStatic, q, k, qpos, kpos, params):
  """Scaled ``q k^T`` plus the head's bias: float32 ``[bq, bk]``."""
  s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
  s = s * jnp.float32(st.scale)
  if st.tile is not None:
    s = s + st.tile(params, qpos.astype(jnp.float32), kpos.astype(jnp.float32))
  return s


def _read_params(st: FlashStatic, params_ref, head):
  """The head's bias parameters as scalars (scalar memory on TPU)."""
  if st.tile is None:
    return ()
  return tuple(params_ref[head, j] for j in range(st.tile.num_params))


def _k_range(st: FlashStatic, q_block, num_k_blocks: int):
  """Key tiles ``[lo, hi)`` that query tile ``q_block`` can see."""
  bq, bk = st.block_q, st.block_k
  lo, hi = 0, num_k_blocks
  first_slot = st.q_offset + q_block * bq
  if st.causal:
    hi = jnp.minimum(hi, lax.div(first_slot + bq - 1, bk) + 1)
  if st.window is not None:
    lo = jnp.maximum(0, lax.div(jnp.maximum(first_slot - st.window + 1, 0), bk))
  return lo, hi


def _q_range(st: FlashStatic, k_block, num_q_blocks: int):
  """Query tiles ``[lo, hi)`` that see key tile ``k_block``."""
  bq, bk = st.block_q, st.block_k
  lo, hi = 0, num_q_blocks
  first_key = k_block * bk
  if st.causal:  # Query slot s sees key slot t <= s: s >= first_key.
    lo = jnp.maximum(0, lax.div(jnp.maximum(first_key - st.q_offset, 0), bq))
  if st.window is not None:  # s < t + W for the last key t of the tile.
    last = first_key + bk - 1 + st.window - 1 - st.q_offset  # largest query index that sees it
    hi = jnp.minimum(hi, lax.div(jnp.maximum(last, -1) + bq, bq))
  return lo, hi


def _split_refs(st: FlashStatic, refs, num_fixed: int):
  """(fixed refs, qseg, kseg, params, rest) from a kernel's flat ref list."""
  fixed, refs = refs[:num_fixed], refs[num_fixed:]
  qseg = kseg = params = None
  if st.segments:
    qseg, kseg, refs = refs[0], refs[1], refs[2:]
  if st.tile is not None:
    params, refs = refs[0], refs[1:]
  return fixed, qseg, kseg, params, refs


# Kernels. ---------------------------------------------------------------------------------------


def _forward_kernel(st: FlashStatic, num_k_blocks: int, *refs):
  (q_ref, k_ref, v_ref, qpos_ref, kpos_ref), qseg_ref, kseg_ref, params_ref, (o_ref, lse_ref) = (
      _split_refs(st, refs, 5))
  head, q_block = pl.program_id(1), pl.program_id(2)
  bq, bk = st.block_q, st.block_k
  params = _read_params(st, params_ref, head)
  q = q_ref[...]
  qpos = qpos_ref[...]
  qseg = None if qseg_ref is None else qseg_ref[...]

  def body(j, carry):
    acc, m_prev, l_prev = carry
    start = pl.multiple_of(j * bk, bk)
    keys = pl.ds(start, bk)
    kseg = None if kseg_ref is None else kseg_ref[:, keys]
    s = _logits(st, q, k_ref[keys, :], qpos, kpos_ref[:, keys], params)
    mask = _tile_mask(st, q_block * bq, start, bq, bk, qseg, kseg)
    s = jnp.where(mask, s, _MASKED)
    m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
    correction = jnp.exp(m_prev - m_new)
    p = jnp.where(mask, jnp.exp(s - m_new), 0.0)
    l_new = correction * l_prev + jnp.sum(p, axis=1, keepdims=True)
    v = v_ref[keys, :]
    acc = correction * acc + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return acc, m_new, l_new

  lo, hi = _k_range(st, q_block, num_k_blocks)
  init = (jnp.zeros(o_ref.shape, jnp.float32), jnp.full((bq, 1), _MASKED, jnp.float32),
          jnp.zeros((bq, 1), jnp.float32))
  acc, m, l = lax.fori_loop(lo, hi, body, init)
  seen = l > 0
  safe_l = jnp.where(seen, l, 1.0)
  o_ref[...] = (acc / safe_l).astype(o_ref.dtype)
  lse_ref[...] = jnp.where(seen, m + jnp.log(safe_l), _MASKED)


def _probabilities(st, q, k, qpos, kpos, params, lse, mask):
  s = _logits(st, q, k, qpos, kpos, params)
  return jnp.where(mask, jnp.exp(s - lse), 0.0)


def _dq_kernel(st: FlashStatic, num_k_blocks: int, *refs):
  ((q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, qpos_ref, kpos_ref), qseg_ref, kseg_ref,
   params_ref, (dq_ref,)) = _split_refs(st, refs, 8)
  head, q_block = pl.program_id(1), pl.program_id(2)
  bq, bk = st.block_q, st.block_k
  params = _read_params(st, params_ref, head)
  q, do, lse, delta, qpos = q_ref[...], do_ref[...], lse_ref[...], delta_ref[...], qpos_ref[...]
  qseg = None if qseg_ref is None else qseg_ref[...]

  def body(j, dq):
    start = pl.multiple_of(j * bk, bk)
    keys = pl.ds(start, bk)
    kseg = None if kseg_ref is None else kseg_ref[:, keys]
    k = k_ref[keys, :]
    mask = _tile_mask(st, q_block * bq, start, bq, bk, qseg, kseg)
    p = _probabilities(st, q, k, qpos, kpos_ref[:, keys], params, lse, mask)
    dp = lax.dot_general(do, v_ref[keys, :], (((1,), (1,)), ((), ())),
                         preferred_element_type=jnp.float32)
    ds = p * (dp - delta)
    return dq + jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)

  lo, hi = _k_range(st, q_block, num_k_blocks)
  dq = lax.fori_loop(lo, hi, body, jnp.zeros(dq_ref.shape, jnp.float32))
  dq_ref[...] = (dq * jnp.float32(st.scale)).astype(dq_ref.dtype)


def _dkv_kernel(st: FlashStatic, num_q_blocks: int, *refs):
  ((q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, qpos_ref, kpos_ref), qseg_ref, kseg_ref,
   params_ref, outs) = _split_refs(st, refs, 8)
  dk_ref, dv_ref = outs[0], outs[1]
  dparams_ref = outs[2] if len(outs) > 2 else None
  head, k_block = pl.program_id(1), pl.program_id(2)
  bq, bk = st.block_q, st.block_k
  params = _read_params(st, params_ref, head)
  k, v, kpos = k_ref[...], v_ref[...], kpos_ref[...]
  kseg = None if kseg_ref is None else kseg_ref[...]
  learnable = dparams_ref is not None

  def body(i, carry):
    dk, dv, dparams = carry
    start = pl.multiple_of(i * bq, bq)
    rows = pl.ds(start, bq)
    q, do, qpos = q_ref[rows, :], do_ref[rows, :], qpos_ref[rows, :]
    qseg = None if qseg_ref is None else qseg_ref[rows, :]
    mask = _tile_mask(st, start, k_block * bk, bq, bk, qseg, kseg)
    p = _probabilities(st, q, k, qpos, kpos, params, lse_ref[rows, :], mask)
    dv = dv + lax.dot_general(p.astype(do.dtype), do, (((0,), (0,)), ((), ())),
                              preferred_element_type=jnp.float32)
    dp = lax.dot_general(do, v, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    ds = p * (dp - delta_ref[rows, :])
    dk = dk + lax.dot_general(ds.astype(q.dtype), q, (((0,), (0,)), ((), ())),
                              preferred_element_type=jnp.float32)
    if learnable:
      qf, kf = qpos.astype(jnp.float32), kpos.astype(jnp.float32)
      _, vjp = jax.vjp(lambda ps: st.tile(ps, qf, kf), params)
      (grads,) = vjp(ds)
      dparams = tuple(a + g for a, g in zip(dparams, grads))
    return dk, dv, dparams

  lo, hi = _q_range(st, k_block, num_q_blocks)
  zeros = tuple(jnp.float32(0.0) for _ in params) if learnable else ()
  init = (jnp.zeros(dk_ref.shape, jnp.float32), jnp.zeros(dv_ref.shape, jnp.float32), zeros)
  dk, dv, dparams = lax.fori_loop(lo, hi, body, init)
  dk_ref[...] = (dk * jnp.float32(st.scale)).astype(dk_ref.dtype)
  dv_ref[...] = dv.astype(dv_ref.dtype)
  if learnable:
    lane = lax.broadcasted_iota(jnp.int32, dparams_ref.shape, 1)
    out = jnp.zeros(dparams_ref.shape, jnp.float32)
    for j, g in enumerate(dparams):
      out = jnp.where(lane == j, g, out)
    dparams_ref[...] = out


# pallas_call plumbing. --------------------------------------------------------------------------


def _compiler_params(backend: str, num_grid_dims: int = 3):
  if backend == "triton":
    from jax.experimental.pallas import triton as pltriton  # pylint: disable=g-import-not-at-top
    return pltriton.CompilerParams(num_warps=4, num_stages=2)
  from jax.experimental.pallas import tpu as pltpu  # pylint: disable=g-import-not-at-top
  return pltpu.CompilerParams(dimension_semantics=("parallel",) * num_grid_dims)


def _params_spec(backend: str, params: Array) -> pl.BlockSpec:
  """The whole ``[H, P]`` parameter array: scalar memory on TPU, a pointer on GPU."""
  if backend == "mosaic_tpu":
    from jax.experimental.pallas import tpu as pltpu  # pylint: disable=g-import-not-at-top
    return pl.BlockSpec(memory_space=pltpu.SMEM)
  return pl.BlockSpec(params.shape, lambda b, h, i: (0, 0))


def _row_spec(x: Array, rows: int, *, whole: bool) -> pl.BlockSpec:
  """``[B|1, L, 1]`` positions / segments / statistics: a ``[rows, 1]`` tile or the whole row."""
  shared = x.shape[0] == 1
  if whole:
    return pl.BlockSpec((None, x.shape[1], 1),
                        lambda b, h, i: (0 if shared else b, 0, 0))
  return pl.BlockSpec((None, rows, 1), lambda b, h, i: (0 if shared else b, i, 0))


def _col_spec(x: Array, cols: int, *, whole: bool) -> pl.BlockSpec:
  """``[B|1, 1, L]`` key positions / segments: a ``[1, cols]`` tile or the whole row."""
  shared = x.shape[0] == 1
  if whole:
    return pl.BlockSpec((None, 1, x.shape[2]), lambda b, h, i: (0 if shared else b, 0, 0))
  return pl.BlockSpec((None, 1, cols), lambda b, h, i: (0 if shared else b, 0, i))


def _head_spec(rows: int, dim: int, groups: int, *, whole_len: Optional[int] = None,
               head_major: bool = False):
  """Tile ``[rows, D]`` of block ``i`` (or the whole length) of one head of ``[B, L, H|K, D]``
  (Triton: strided rows) or, ``head_major``, of ``[B, H|K, L, D]`` (Mosaic TPU: the block's
  last two dims must be the array's, or multiples of (8, 128))."""
  rows = rows if whole_len is None else whole_len
  if head_major:
    if whole_len is not None:
      return pl.BlockSpec((None, None, rows, dim), lambda b, h, i: (b, lax.div(h, groups), 0, 0))
    return pl.BlockSpec((None, None, rows, dim), lambda b, h, i: (b, lax.div(h, groups), i, 0))
  if whole_len is not None:
    return pl.BlockSpec((None, rows, None, dim), lambda b, h, i: (b, 0, lax.div(h, groups), 0))
  return pl.BlockSpec((None, rows, None, dim), lambda b, h, i: (b, i, lax.div(h, groups), 0))


def _to_head_major(*xs):
  return tuple(jnp.swapaxes(x, 1, 2) for x in xs)


def _stat_spec(rows: int, *, whole_len: Optional[int] = None):
  """``[B, H, L, 1]`` log-sum-exp / delta."""
  if whole_len is not None:
    return pl.BlockSpec((None, None, whole_len, 1), lambda b, h, i: (b, h, 0, 0))
  return pl.BlockSpec((None, None, rows, 1), lambda b, h, i: (b, h, i, 0))


def _extras(st: FlashStatic, backend: str, qseg, kseg, params, *, q_whole: bool, k_whole: bool):
  """Specs and operands of the optional inputs (segments, bias parameters)."""
  specs, args = [], []
  if st.segments:
    specs += [_row_spec(qseg, st.block_q, whole=q_whole), _col_spec(kseg, st.block_k,
                                                                     whole=k_whole)]
    args += [qseg, kseg]
  if st.tile is not None:
    specs.append(_params_spec(backend, params))
    args.append(params)
  return specs, args


def _forward_call(st: FlashStatic, backend: str, q, k, v, qpos, kpos, qseg, kseg, params):
  batch, lq, heads, dim = q.shape
  lk, dim_v = k.shape[1], v.shape[3]
  nq, nk = lq // st.block_q, lk // st.block_k
  hm = backend == "mosaic_tpu"
  if hm:
    q, k, v = _to_head_major(q, k, v)
  specs, extra = _extras(st, backend, qseg, kseg, params, q_whole=False, k_whole=True)
  in_specs = [
      _head_spec(st.block_q, dim, 1, head_major=hm),
      _head_spec(st.block_k, dim, st.groups, whole_len=lk, head_major=hm),
      _head_spec(st.block_k, dim_v, st.groups, whole_len=lk, head_major=hm),
      _row_spec(qpos, st.block_q, whole=False),
      _col_spec(kpos, st.block_k, whole=True),
  ] + specs
  out_layout = (batch, heads, lq, dim_v) if hm else (batch, lq, heads, dim_v)
  out_shape = [jax.ShapeDtypeStruct(out_layout, q.dtype),
               jax.ShapeDtypeStruct((batch, heads, lq, 1), jnp.float32)]
  out_specs = [_head_spec(st.block_q, dim_v, 1, head_major=hm), _stat_spec(st.block_q)]
  out, lse = pl.pallas_call(
      functools.partial(_forward_kernel, st, nk), grid=(batch, heads, nq), in_specs=in_specs,
      out_specs=out_specs, out_shape=out_shape, interpret=st.interpret,
      compiler_params=None if st.interpret else _compiler_params(backend),
      name="pejax_flash_forward")(q, k, v, qpos, kpos, *extra)
  if hm:
    (out,) = _to_head_major(out)
  return out, lse


def _backward_calls(st: FlashStatic, backend: str, q, k, v, qpos, kpos, qseg, kseg, params, do, lse,
                    delta):
  batch, lq, heads, dim = q.shape
  lk, dim_v = k.shape[1], v.shape[3]
  nq, nk = lq // st.block_q, lk // st.block_k
  compiler = None if st.interpret else _compiler_params(backend)
  hm = backend == "mosaic_tpu"
  if hm:
    q, k, v, do = _to_head_major(q, k, v, do)
  q_shape = (batch, heads, lq, dim) if hm else (batch, lq, heads, dim)
  specs, extra = _extras(st, backend, qseg, kseg, params, q_whole=False, k_whole=True)
  dq = pl.pallas_call(
      functools.partial(_dq_kernel, st, nk), grid=(batch, heads, nq),
      in_specs=[
          _head_spec(st.block_q, dim, 1, head_major=hm),
          _head_spec(st.block_k, dim, st.groups, whole_len=lk, head_major=hm),
          _head_spec(st.block_k, dim_v, st.groups, whole_len=lk, head_major=hm),
          _head_spec(st.block_q, dim_v, 1, head_major=hm),
          _stat_spec(st.block_q), _stat_spec(st.block_q),
          _row_spec(qpos, st.block_q, whole=False),
          _col_spec(kpos, st.block_k, whole=True),
      ] + specs,
      out_specs=_head_spec(st.block_q, dim, 1, head_major=hm),
      out_shape=jax.ShapeDtypeStruct(q_shape, q.dtype), interpret=st.interpret,
      compiler_params=compiler, name="pejax_flash_backward_dq",
  )(q, k, v, do, lse, delta, qpos, kpos, *extra)

  specs, extra = _extras(st, backend, qseg, kseg, params, q_whole=True, k_whole=False)
  out_shape = [
      jax.ShapeDtypeStruct((batch, heads, lk, dim) if hm else (batch, lk, heads, dim), k.dtype),
      jax.ShapeDtypeStruct((batch, heads, lk, dim_v) if hm else (batch, lk, heads, dim_v),
                           v.dtype)]
  out_specs = [_head_spec(st.block_k, dim, 1, head_major=hm),
               _head_spec(st.block_k, dim_v, 1, head_major=hm)]
  if st.tile is not None and st.tile.learnable:
    width = params.shape[1]
    out_shape.append(jax.ShapeDtypeStruct((batch, heads, nk * _GRAD_ROWS, width), jnp.float32))
    out_specs.append(pl.BlockSpec((None, None, _GRAD_ROWS, width), lambda b, h, i: (b, h, i, 0)))
  outs = pl.pallas_call(
      functools.partial(_dkv_kernel, st, nq), grid=(batch, heads, nk),
      in_specs=[
          _head_spec(st.block_q, dim, 1, whole_len=lq, head_major=hm),
          _head_spec(st.block_k, dim, st.groups, head_major=hm),
          _head_spec(st.block_k, dim_v, st.groups, head_major=hm),
          _head_spec(st.block_q, dim_v, 1, whole_len=lq, head_major=hm),
          _stat_spec(st.block_q, whole_len=lq), _stat_spec(st.block_q, whole_len=lq),
          _row_spec(qpos, st.block_q, whole=True),
          _col_spec(kpos, st.block_k, whole=False),
      ] + specs,
      out_specs=out_specs, out_shape=out_shape, interpret=st.interpret,
      compiler_params=compiler, name="pejax_flash_backward_dkv",
  )(q, k, v, do, lse, delta, qpos, kpos, *extra)
  dq, dk, dv = dq, outs[0], outs[1]
  if hm:
    dq, dk, dv = _to_head_major(dq, dk, dv)
  dparams = None
  if len(outs) > 2:
    per_tile = outs[2].reshape((batch, heads, nk, _GRAD_ROWS, -1))[:, :, :, 0, :]
    dparams = jnp.sum(per_tile, axis=(0, 2))  # [H, width]
  return dq, dk, dv, dparams


def _dispatch(st: FlashStatic, call, *args):
  """Runs ``call(backend, *args)`` on the static backend, or stages the per-platform choice."""
  if st.interpret or st.backend is not None:
    return call(st.backend or "triton", *args)
  return lax.platform_dependent(
      *args, cuda=functools.partial(call, "triton"), rocm=functools.partial(call, "triton"),
      tpu=functools.partial(call, "mosaic_tpu"))


# The differentiable core on padded operands. ----------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def flash(st: FlashStatic, q, k, v, qpos, kpos, qseg, kseg, params):
  out, _ = _flash_forward(st, q, k, v, qpos, kpos, qseg, kseg, params)
  return out


def _flash_forward(st, q, k, v, qpos, kpos, qseg, kseg, params):
  out, lse = _dispatch(st, functools.partial(_forward_call, st), q, k, v, qpos, kpos, qseg, kseg,
                       params)
  return out, lse


def _flash_fwd(st, q, k, v, qpos, kpos, qseg, kseg, params):
  out, lse = _flash_forward(st, q, k, v, qpos, kpos, qseg, kseg, params)
  return out, (q, k, v, qpos, kpos, qseg, kseg, params, out, lse)


def _flash_bwd(st, residuals, dout):
  q, k, v, qpos, kpos, qseg, kseg, params, out, lse = residuals
  # delta_i = rowsum(dout * out) (FlashAttention-2's D), O(L * D) in XLA.
  delta = jnp.einsum("blhd,blhd->bhl", dout.astype(jnp.float32), out.astype(jnp.float32))
  dq, dk, dv, dparams = _dispatch(st, functools.partial(_backward_calls, st), q, k, v, qpos, kpos,
                                  qseg, kseg, params, dout.astype(q.dtype), lse,
                                  delta[..., None])
  batch, lk, heads = dk.shape[:3]
  kv_heads = heads // st.groups
  dk = dk.reshape((batch, lk, kv_heads, st.groups, -1)).sum(axis=3).astype(k.dtype)
  dv = dv.reshape((batch, lk, kv_heads, st.groups, -1)).sum(axis=3).astype(v.dtype)
  if params is not None:
    dparams = (jnp.zeros_like(params) if dparams is None
               else pad_to(dparams, 0, params.shape[0]))
  return dq, dk, dv, None, None, None, None, dparams


flash.defvjp(_flash_fwd, _flash_bwd)
