"""CoPE, contextual position encoding: positions that count what the query gates in.

Axes: B batch, H heads, Lq / Lk query / key length, D head dim, P number of position embeddings
(``max_pos``).

Instead of counting tokens, query i counts the keys its gates select:

  g_ij = sigmoid(q_i . k_j / sqrt(D))            (the scaled, causally masked logit)
  p_ij = sum_{t=j}^{i} g_it                      (a fractional position, >= 0)
  p_ij <- min(p_ij, P - 1)                       (clamped: only P embeddings exist)
  bias_ij = (p - floor p) * z_i[ceil p] + (1 - p + floor p) * z_i[floor p],  z_i[p] = q_i . e[p]

and ``bias`` is added to the attention logits. ``e`` is a learned ``[P, D]`` table, shared by the
heads of a layer, initialized to zeros. Masked keys (logit ``-inf`` or ``-1e30``) have gate 0 and
are not counted, so the positions of a causal / packed / padded row count only its visible keys.

Index guard: JAX clamps out-of-range gathers silently. Here the clamp is deliberate and
explicit: positions are clamped to ``P - 1`` first, exactly as the paper's code
(``pos.clamp(max=npos_max - 1)``), so ``ceil`` and ``floor`` are in ``[0, P - 1]`` by
construction; the indices are clipped again before the gather so that a NaN logit cannot turn
into an arbitrary index.

Dense only: the positions of row i need the whole row of logits (a suffix sum over keys), which
a one-pass blockwise attention never holds.

References:
  Golovneva, Wang, Weston and Sukhbaatar 2024, "Contextual Position Encoding: Learning to Count
  What's Important", arXiv 2405.18719 (Appendix B gives the reference code).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks

Array = jax.Array


def cope_positions(logits: Array, *, max_pos: int) -> Array:
  """Contextual positions ``p_ij = min(sum_{t >= j} sigmoid(logits_it), max_pos - 1)``.

  Args:
    logits: float ``[..., Lq, Lk]`` scaled attention logits with masked entries very negative
      (``-inf`` or ``-1e30``: gate 0).
    max_pos: P, the number of position embeddings; positions are clamped to ``P - 1``.

  Returns:
    float32 ``[..., Lq, Lk]`` in ``[0, P - 1]``.

  References:
    Golovneva et al. 2024, arXiv 2405.18719.
  """
  max_pos = arg_checks.check_positive_int("max_pos", max_pos)
  logits = jnp.asarray(logits)
  if not jnp.issubdtype(logits.dtype, jnp.floating):
    raise ValueError(f"logits must be a float array, got dtype {logits.dtype}")
  arg_checks.check_min_rank("logits", logits, 2, "[..., Lq, Lk]")
  gates = jax.nn.sigmoid(logits.astype(jnp.float32))
  positions = jax.lax.cumsum(gates, axis=gates.ndim - 1, reverse=True)
  return jnp.minimum(positions, jnp.float32(max_pos - 1))


def cope_bias(logits: Array, q: Array, pos_emb: Array) -> Array:
  """The CoPE logit term: interpolated ``q_i . e[p_ij]`` at the contextual positions.

  Args:
    logits: float ``[B, H, Lq, Lk]`` scaled attention logits, masked entries very negative.
    q: ``[B, Lq, H, D]`` queries (the same ones, unscaled, that produced ``logits``).
    pos_emb: float ``[P, D]`` position embeddings (``P = max_pos``).

  Returns:
    float32 ``[B, H, Lq, Lk]``, to be added to ``logits``.

  References:
    Golovneva et al. 2024, arXiv 2405.18719.
  """
  logits = jnp.asarray(logits)
  q = jnp.asarray(q)
  pos_emb = jnp.asarray(pos_emb)
  if logits.ndim != 4:
    raise ValueError(f"logits must have shape [B, H, Lq, Lk], got shape {logits.shape}")
  if q.ndim != 4:
    raise ValueError(f"q must have shape [B, Lq, H, D], got shape {q.shape}")
  if pos_emb.ndim != 2 or pos_emb.shape[-1] != q.shape[-1]:
    raise ValueError(f"pos_emb must have shape [P, D] with D = {q.shape[-1]} (the query head dim),"
                     f" got shape {pos_emb.shape}")
  if (q.shape[1], q.shape[2]) != (logits.shape[2], logits.shape[1]) or (
      q.shape[0] not in (1, logits.shape[0])):
    raise ValueError(f"q [B, Lq, H, D] {q.shape} does not match logits [B, H, Lq, Lk] "
                     f"{logits.shape}")
  max_pos = pos_emb.shape[0]
  positions = cope_positions(logits, max_pos=max_pos)  # [B, H, Lq, Lk]
  # z[b, h, i, p] = q_i . e[p]: one small matmul instead of gathering [Lq, Lk, D] vectors.
  z = jnp.einsum("bqhd,pd->bhqp", q.astype(jnp.float32), pos_emb.astype(jnp.float32),
                 precision=jax.lax.Precision.HIGHEST)
  z = jnp.broadcast_to(z, logits.shape[:3] + (max_pos,))
  return _interpolate(z, positions)


def _corners(z: Array, positions: Array) -> tuple:
  """Flat indices of ``floor p`` and ``ceil p`` in ``z.reshape(-1)``, and the weight ``p - floor p``.

  Both indices are clipped into their row's ``[0, P - 1]`` (a NaN position cannot make an
  arbitrary index), so the gathers below may promise in-bounds indices.
  """
  max_pos = z.shape[-1]
  floor = jnp.floor(positions)
  weight = positions - floor
  rows = jnp.arange(z.size // max_pos, dtype=jnp.int32).reshape(z.shape[:-1] + (1,)) * max_pos
  floor_index = rows + jnp.clip(floor.astype(jnp.int32), 0, max_pos - 1)
  ceil_index = rows + jnp.clip(jnp.ceil(positions).astype(jnp.int32), 0, max_pos - 1)
  return floor_index, ceil_index, weight


def _interpolate_fwd(z: Array, positions: Array) -> tuple:
  floor_index, ceil_index, weight = _corners(z, positions)
  flat = z.reshape(-1)
  z_floor = flat.at[floor_index].get(mode="promise_in_bounds")
  z_ceil = flat.at[ceil_index].get(mode="promise_in_bounds")
  out = z_ceil * weight + z_floor * (1.0 - weight)
  return out, (z_ceil - z_floor, weight, floor_index, ceil_index, z.shape)


def _interpolate_bwd(residuals: tuple, grad: Array) -> tuple:
  slope, weight, floor_index, ceil_index, shape = residuals
  dz = jnp.zeros((int(np.prod(shape)),), grad.dtype)
  dz = dz.at[floor_index.reshape(-1)].add((grad * (1.0 - weight)).reshape(-1),
                                          mode="promise_in_bounds")
  dz = dz.at[ceil_index.reshape(-1)].add((grad * weight).reshape(-1), mode="promise_in_bounds")
  return dz.reshape(shape), grad * slope


@jax.custom_vjp
def _interpolate(z: Array, positions: Array) -> Array:
  """``(p - floor p) * z[..., ceil p] + (1 - p + floor p) * z[..., floor p]`` per entry.

  Args:
    z: float32 ``[B, H, Lq, P]``.
    positions: float32 ``[B, H, Lq, Lk]`` in ``[0, P - 1]``.

  Returns:
    float32 ``[B, H, Lq, Lk]``.

  The gradient is autodiff's of that formula (``d/dp = z[ceil p] - z[floor p]``, 0 at an integer
  ``p``), written by hand: on XLA:CPU, autodiff of ``take_along_axis`` made the CoPE training
  step slower than these flat gathers and scatter-adds (measured side by side on one core,
  2026-12-03: 785 -> 620 ms a step of the Ruoss-suite decoder on duplicate_string rows of 122).
  """
  return _interpolate_fwd(z, positions)[0]


_interpolate.defvjp(_interpolate_fwd, _interpolate_bwd)
