"""PaTH attention logits: query-key products through accumulated Householder-like transforms.

Axes: B batch, L length, Lq / Lk query / key length, H query heads, K key/value heads
(G = H // K), D head dim, C chunk size, N = L / C chunks; ``...`` leading batch dims.

PaTH ("Position encoding via accumulating Householder transformations") replaces RoPE's fixed
rotations by data-dependent ones. Every token t carries a unit vector ``w_t`` and a strength
``beta_t`` in (0, 2) (both computed from the token), defining ``H_t = I - beta_t w_t w_t^T``, and
the logit of query i and key j <= i is

  A_ij = q_i^T H_i H_{i-1} ... H_{j+1} k_j        (A_ii = q_i . k_i),

a product over the tokens after the key up to the query: a multiplicative, content-dependent
relative position encoding (with ``beta = 2`` each ``H_t`` is a reflection, with ``beta = 1`` a
projection). The logits are then scaled by ``1 / sqrt(D)`` and soft-maxed as usual.

Two exact evaluations, both differentiable:

* :func:`path_logits`, the full causal ``[L, L]`` logits of one sequence in chunks of C tokens,
  never forming a ``D x D`` product per pair: the product of a chunk's transforms has the compact
  WY form ``H_1 H_2 ... H_C = I - W^T T W`` (W the chunk's ``[C, D]`` unit vectors, T upper
  triangular, ``T = (I + diag(beta) triu(W W^T, 1))^{-1} diag(beta)``; Joffrain et al. 2006's UT
  transform), and any contiguous run of a chunk's transforms uses the matching principal block of
  T. Within a chunk the logits are ``Q K^T - Zq T^T Zk^T`` with ``Zq = tril(Q W^T)``,
  ``Zk = triu(K W^T, 1)``; across chunks each query chunk moves back one chunk at a time
  (``U <- U - (U W^T) T^T W``) and meets the keys transformed to their chunk's end
  (``K' = K - Zk T W``). Time O(L^2 D), matrix products only; autodiff keeps one ``[L, D]``
  carry per chunk step, O(L^2 D / C) memory.
* :func:`path_logits_rows`, logits of queries at given slots against all keys before them, one key
  at a time from the newest backwards (each query carried through ``H_{j+1}`` before it meets key
  ``j``): O(Lq Lk D) time, O(Lq D) memory. This is the KV-cache decoding form (a few new queries
  against a long cache) and the independent reference the chunked form is tested against.

Entries with the key after the query are returned as plain ``q . k`` (no transform); the causal
mask removes them. Transforms are applied in float32 (``precision=HIGHEST``).

References:
  Yang, Shen, Wen, Tan, Mishra, Ren, Panda and Kim 2025, "PaTH Attention: Position Encoding via
  Accumulating Householder Transformations", arXiv 2505.16381; reference implementation
  ``fla.ops.path_attn`` in fla-org/flash-linear-attention (``naive_path_attn``).
  Joffrain, Low, Quintana-Orti, van de Geijn and Van Zee 2006, "Accumulating Householder
  transformations, revisited", ACM TOMS 32(2) (the UT transform).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks

Array = jax.Array

_HIGHEST = jax.lax.Precision.HIGHEST


def _mm(subscripts: str, *operands: Array) -> Array:
  return jnp.einsum(subscripts, *operands, precision=_HIGHEST)


def _check_inputs(q, k, w, beta, *, q_name: str = "q") -> tuple[Array, Array, Array, Array]:
  """Float32 copies, with shapes checked: q ``[..., Lq, H, D]``, k / w ``[..., Lk, K, D]``,
  beta ``[..., Lk, K]``."""
  arrays = []
  for name, x, rank in ((q_name, q, 3), ("k", k, 3), ("w", w, 3), ("beta", beta, 2)):
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
      raise ValueError(f"{name} must be a float array, got dtype {x.dtype}")
    arg_checks.check_min_rank(name, x, rank, "[..., L, K, D]" if rank == 3 else "[..., L, K]")
    arrays.append(x.astype(jnp.float32))
  q, k, w, beta = arrays
  if w.shape != k.shape:
    raise ValueError(f"w must have the shape of k {k.shape}, got {w.shape}")
  if beta.shape != k.shape[:-1]:
    raise ValueError(f"beta must have shape {k.shape[:-1]} (k's [..., Lk, K]), got {beta.shape}")
  if q.shape[-1] != k.shape[-1]:
    raise ValueError(f"{q_name} and k must have the same head dim, got shapes {q.shape} and "
                     f"{k.shape}")
  if q.shape[-2] % k.shape[-2]:
    raise ValueError(f"{q_name}'s heads ({q.shape[-2]}) must be a multiple of k's key/value heads "
                     f"({k.shape[-2]})")
  return q, k, w, beta


def _lead(x: Array, ndim: int) -> Array:
  """``x`` with leading unit axes up to ``ndim`` (explicit broadcasting)."""
  return x.reshape((1,) * (ndim - x.ndim) + x.shape)


def _expand_heads(x: Array, heads: int, axis: int) -> Array:
  """Repeats key/value heads to the query heads (head h uses key/value head h // G)."""
  return jnp.repeat(x, heads // x.shape[axis], axis=axis)


def chunk_wy_factor(w: Array, beta: Array) -> Array:
  """The upper-triangular T of ``H_1 H_2 ... H_C = I - W^T T W`` for each chunk.

  Args:
    w: float32 ``[..., C, D]`` unit vectors of the chunk's tokens.
    beta: float32 ``[..., C]`` their strengths.

  Returns:
    float32 ``[..., C, C]`` upper triangular, ``T = (I + diag(beta) triu(W W^T, 1))^{-1}
    diag(beta)``. Any contiguous run ``a .. b`` of the chunk's transforms is ``I - W_ab^T T_ab
    W_ab`` with ``T_ab`` the matching principal block.
  """
  nilpotent = beta[..., :, None] * jnp.triu(_mm("...id,...jd->...ij", w, w), k=1)
  return _unit_upper_inverse(nilpotent) * beta[..., None, :]


def _unit_upper_inverse(nilpotent: Array) -> Array:
  """``(I + N)^{-1}`` for strictly upper triangular ``N`` ``[..., C, C]``, by matrix products.

  The recursive triangular inversion, bottom-up from 1 x 1 blocks (each 1):
  ``[[A, B], [0, D]]^{-1} = [[A', -A' B D'], [0, D']]``, log2(C) levels; C is padded to a power of
  two with the identity. Its float32 error stays at rounding (1.2e-6 at C = 128; a Neumann series
  over the chunk loses 2e-3 there). Plain products of distinct matrices: no LAPACK call (with
  ``solve_triangular`` the optimized CPU training step of a PaTH decoder never returned on jax
  0.10.2), and no ``x @ x`` (XLA's CPU simplifier broke a squared product's shape).
  """
  size = nilpotent.shape[-1]
  padded = 1 << max(size - 1, 0).bit_length()
  n = jnp.pad(nilpotent, [(0, 0)] * (nilpotent.ndim - 2) + [(0, padded - size)] * 2)
  inverse = jnp.ones(n.shape[:-2] + (padded, 1, 1), jnp.float32)  # [..., m, s, s], s = 1
  step = 1
  while step < padded:
    m = padded // step
    tiles = jnp.swapaxes(n.reshape(n.shape[:-2] + (m, step, m, step)), -3, -2)  # [.., m, m, s, s]
    upper = jnp.moveaxis(jnp.diagonal(tiles[..., 0::2, 1::2, :, :], axis1=-4, axis2=-3), -1, -3)
    first, second = inverse[..., 0::2, :, :], inverse[..., 1::2, :, :]
    corner = -_mm("...ij,...jk,...kl->...il", first, upper, second)
    top = jnp.concatenate([first, corner], axis=-1)
    bottom = jnp.concatenate([jnp.zeros_like(second), second], axis=-1)
    inverse = jnp.concatenate([top, bottom], axis=-2)  # [..., m / 2, 2 s, 2 s]
    step *= 2
  return inverse[..., 0, :size, :size]


def path_logits(q: Array, k: Array, w: Array, beta: Array, *, chunk_size: int = 64) -> Array:
  """PaTH's causal logits ``q_i^T H_i ... H_{j+1} k_j`` of one sequence (unscaled), in chunks.

  Args:
    q: float ``[..., L, H, D]`` queries.
    k: float ``[..., L, K, D]`` keys (K divides H; query head h uses key/value head h // G).
    w: float ``[..., L, K, D]`` unit vectors of the transforms (normalized by the caller).
    beta: float ``[..., L, K]`` strengths of the transforms, in ``[0, 2]`` for PaTH.
    chunk_size: C, tokens per chunk (the length is padded to a multiple; any C gives the same
      numbers up to float32 rounding).

  Returns:
    float32 ``[..., H, L, L]``; the entries above the diagonal are plain ``q_i . k_j``.

  Raises:
    ValueError: naming the argument, for non-float inputs, mismatched shapes, ``Lq != Lk`` or a
      bad ``chunk_size``.

  References:
    Yang et al. 2025, arXiv 2505.16381; Joffrain et al. 2006 (UT transform).
  """
  arg_checks.check_positive_int("chunk_size", chunk_size)
  q, k, w, beta = _check_inputs(q, k, w, beta)
  if q.shape[-3] != k.shape[-3]:
    raise ValueError(f"path_logits needs queries = keys (one sequence), got Lq={q.shape[-3]} "
                     f"and Lk={k.shape[-3]}; use path_logits_rows for queries at other slots")
  heads, length = q.shape[-2], q.shape[-3]
  batch_shape = jnp.broadcast_shapes(q.shape[:-3], k.shape[:-3])
  q = jnp.broadcast_to(q, batch_shape + q.shape[-3:])
  k, w, beta = (jnp.broadcast_to(x, batch_shape + x.shape[-3:] if x.ndim == k.ndim else
                                 batch_shape + x.shape[-2:]) for x in (k, w, beta))
  k, w = (_expand_heads(x, heads, -2) for x in (k, w))
  beta = _expand_heads(beta, heads, -1)
  size = min(chunk_size, length)
  chunks = -(-length // size)
  pad = chunks * size - length

  def blocks(x, feature_axes):  # [..., L, H, *f] -> [..., H, N, C, *f] (zero padded).
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 2 - feature_axes) + [(0, pad)] + [(0, 0)] *
                (1 + feature_axes))
    x = x.reshape(x.shape[:-2 - feature_axes] + (chunks, size) + x.shape[-1 - feature_axes:])
    return jnp.moveaxis(x, -1 - feature_axes, -3 - feature_axes)

  qb, kb, wb = (blocks(x, 1) for x in (q, k, w))  # [..., H, N, C, D]
  bb = blocks(beta, 0)  # [..., H, N, C]
  t = chunk_wy_factor(wb, bb)  # [..., H, N, C, C]
  lower = _lead(jnp.tril(jnp.ones((size, size), bool)), qb.ndim)
  zq = jnp.where(lower, _mm("...ad,...md->...am", qb, wb), 0.0)  # [..., H, N, C, C]
  zk = jnp.where(~lower, _mm("...bd,...nd->...bn", kb, wb), 0.0)
  intra = (_mm("...ad,...bd->...ab", qb, kb)
           - _mm("...am,...nm,...bn->...ab", zq, t, zk))  # [..., H, N, C, C]
  q_moved = qb - _mm("...am,...nm,...nd->...ad", zq, t, wb)  # Carried through its chunk's start.
  k_moved = kb - _mm("...bn,...nm,...md->...bd", zk, t, wb)  # Carried to its chunk's end.

  def step(u, d):
    # u [..., H, N, C, D]: query chunk n carried back to the end of chunk n - d; it meets that
    # chunk's keys, then crosses the chunk (I - W^T T W)^T. Chunks n < d wrap around (jnp.roll):
    # those blocks lie above the diagonal and are dropped.
    block = _mm("...ad,...bd->...ab", u, jnp.roll(k_moved, d, axis=-3))
    w_d, t_d = jnp.roll(wb, d, axis=-3), jnp.roll(t, d, axis=-3)
    u = u - _mm("...am,...nm,...nd->...ad", _mm("...ad,...md->...am", u, w_d), t_d, w_d)
    return u, block

  # blocks_by_distance[d, ..., n] is the block (query chunk n, key chunk n - d).
  blocks_by_distance = intra[None]
  if chunks > 1:
    _, off = jax.lax.scan(step, q_moved, jnp.arange(1, chunks))
    blocks_by_distance = jnp.concatenate([blocks_by_distance, off], axis=0)
  by_distance = jnp.moveaxis(blocks_by_distance, 0, -4)  # [..., H, D=N, N, C, C]
  n = jnp.arange(chunks)
  distance = jnp.mod(n[:, None] - n[None, :], chunks)  # [N (query chunk), N (key chunk)]
  tiles = by_distance[..., distance, n[:, None], :, :]  # [..., H, N, N, C, C]
  full = jnp.swapaxes(tiles, -3, -2).reshape(batch_shape + (heads, chunks * size,
                                                              chunks * size))
  full = full[..., :length, :length]
  upper = _mm("...ihd,...jhd->...hij", q, k)
  causal = _lead(jnp.tril(jnp.ones((length, length), bool)), full.ndim)
  return jnp.where(causal, full, upper)


def path_logits_rows(q: Array, k: Array, w: Array, beta: Array, *, q_slots: Array) -> Array:
  """PaTH's logits of queries at given slots against every key before them, key by key.

  The keys sit at slots ``0 .. Lk - 1`` in text order (a full sequence, a KV cache, or an
  evicting cache's chronological view; a slot without a token has ``beta = 0``, which makes its
  transform the identity). Query i at slot ``s_i`` gets ``q_i^T H_{s_i} ... H_{j+1} k_j`` for
  ``j < s_i``, ``q_i . k_j`` for ``j >= s_i`` (the causal mask removes ``j > s_i``).

  Args:
    q: float ``[..., Lq, H, D]`` queries.
    k: float ``[..., Lk, K, D]`` keys.
    w: float ``[..., Lk, K, D]`` unit vectors of the keys' tokens.
    beta: float ``[..., Lk, K]`` their strengths.
    q_slots: int ``[Lq]`` slot of each query among the keys (ascending or not).

  Returns:
    float32 ``[..., H, Lq, Lk]``.

  Raises:
    ValueError: naming the argument, for non-float inputs, mismatched shapes or non-integer
      ``q_slots`` of the wrong shape.

  References:
    Yang et al. 2025, arXiv 2505.16381 (the decoding form: every cached key updated by each new
    token's transform, here applied to the queries instead).
  """
  q, k, w, beta = _check_inputs(q, k, w, beta)
  q_slots = arg_checks.check_integer_array("q_slots", q_slots)
  if q_slots.shape != (q.shape[-3],):
    raise ValueError(f"q_slots must have shape ({q.shape[-3]},) (one slot per query), got "
                     f"{q_slots.shape}")
  heads, keys = q.shape[-2], k.shape[-3]
  k, w = (_expand_heads(x, heads, -2) for x in (k, w))
  beta = _expand_heads(beta, heads, -1)
  u0 = jnp.swapaxes(q, -2, -3)  # [..., H, Lq, D]
  batch_shape = jnp.broadcast_shapes(u0.shape[:-3], k.shape[:-3])
  u0 = jnp.broadcast_to(u0, batch_shape + u0.shape[-3:])
  # The transform of the token after key j (the identity after the last key).
  w_next = jnp.concatenate([w[..., 1:, :, :], jnp.zeros_like(w[..., :1, :, :])], axis=-3)
  beta_next = jnp.concatenate([beta[..., 1:, :], jnp.zeros_like(beta[..., :1, :])], axis=-2)
  xs = tuple(jnp.moveaxis(x, -3 if x.ndim == k.ndim else -2, 0)[::-1]
             for x in (k, w_next, beta_next))
  slots = jnp.arange(keys, dtype=jnp.int32)[::-1]

  def step(u, inputs):
    k_j, w_n, beta_n, j = inputs  # [..., H, D], [..., H, D], [..., H], scalar
    active = _lead((q_slots > j)[:, None], u.ndim)  # [Lq, 1]: token j + 1's transform applies.
    projection = _mm("...hqd,...hd->...hq", u, w_n)
    u = jnp.where(active, u - (beta_n[..., None] * projection)[..., None] * w_n[..., None, :], u)
    return u, _mm("...hqd,...hd->...hq", u, k_j)

  _, columns = jax.lax.scan(step, u0, xs + (slots,))  # [Lk (reversed), ..., H, Lq]
  return jnp.moveaxis(columns[::-1], 0, -1)
