"""Attention with Linear Biases, ALiBi (Press et al., 2022).

Axes: H heads, Lq query length, Lk key length; `...` any leading batch dims.

ALiBi adds no position information to the embeddings; each head h adds a penalty linear in the
query-key distance to its attention logits:

  causal:         bias[h, q, k] = -slope_h * (q - k)
  bidirectional:  bias[h, q, k] = -slope_h * |q - k|

The bias is computed from explicit integer positions by broadcasting, so it can be evaluated one
`[Lq, Lk]` tile at a time by blockwise attention and never needs an `[N, N]` input.

References:
  Press, Smith and Lewis, "Train Short, Test Long: Attention with Linear Biases Enables Input
  Length Extrapolation", ICLR 2022, arXiv:2108.12409.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks
from pejax.encodings.kernel_bias import KernelBias, TileBias


def _power_of_two_slopes(n: int) -> list[float]:
  """Geometric sequence start = ratio = 2^(-8/n), as in Press et al. `get_slopes`."""
  start = 2 ** (-2 ** -(math.log2(n) - 3))
  return [start * start ** i for i in range(n)]


def _get_slopes(n: int) -> list[float]:
  """Press et al. `get_slopes`, float64 arithmetic and list order kept verbatim."""
  if math.log2(n).is_integer():
    return _power_of_two_slopes(n)
  closest_power_of_two = 2 ** math.floor(math.log2(n))
  return (_power_of_two_slopes(closest_power_of_two)
          + _get_slopes(2 * closest_power_of_two)[0::2][:n - closest_power_of_two])


def alibi_slopes(num_heads: int) -> jnp.ndarray:
  """Per-head ALiBi slopes, in the order of Press et al. `get_slopes` (BLOOM, MPT).

  For a power of two n the slopes are the geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8).
  Otherwise, with c = 2^floor(log2 n): the c slopes of the power-of-two case, followed by the
  first n - c of every other slope ([0::2]) of the 2c case. Computed in float64 as the reference
  does, then rounded once to float32.

  Args:
    num_heads: Number of heads H >= 1.

  Returns:
    `[H]` float32 slopes.

  Raises:
    ValueError: if `num_heads` is not an integer >= 1.
  """
  num_heads = arg_checks.check_positive_int("num_heads", num_heads)
  return jnp.asarray(np.asarray(_get_slopes(num_heads), dtype=np.float32))


def alibi_bias(
    q_positions: Any,
    k_positions: Any,
    slopes: Any,
    *,
    causal: bool = True,
) -> jnp.ndarray:
  """ALiBi attention-logit bias from explicit query and key positions.

  In causal mode the entries with k > q come out positive (`slope * (k - q)`): they are not
  masked here, the attention's causal mask removes them. BLOOM builds the causal bias as
  `slope_h * k`; that differs from `-slope_h * (q - k)` by `-slope_h * q`, a constant along each
  query row, which softmax ignores, so both give the same attention weights.

  Args:
    q_positions: `[..., Lq]` integer query positions.
    k_positions: `[..., Lk]` integer key positions; leading dims must broadcast with
      `q_positions`'.
    slopes: `[H]` per-head slopes, usually `alibi_slopes(H)`.
    causal: `-slope * (q - k)` if True, `-slope * |q - k|` (symmetric) if False.

  Returns:
    `[..., H, Lq, Lk]` float32 bias, the head dim inserted before Lq.

  Raises:
    ValueError: if positions are not integer arrays of rank >= 1, their leading dims do not
      broadcast, or `slopes` is not 1-D.
  """
  q_positions, k_positions, _ = arg_checks.check_query_key_positions(q_positions, k_positions)
  slopes = jnp.asarray(slopes)
  if slopes.ndim != 1:
    raise ValueError(f"slopes must be 1-D [H], got shape {slopes.shape}")
  return _bias(q_positions, k_positions, slopes, bool(causal))


@functools.partial(jax.jit, static_argnums=(3,))
def _bias(q_positions: jnp.ndarray, k_positions: jnp.ndarray, slopes: jnp.ndarray,
          causal: bool) -> jnp.ndarray:
  """Validated `[..., Lq]`, `[..., Lk]` and `[H]` -> `[..., H, Lq, Lk]`."""
  batch_shape = np.broadcast_shapes(q_positions.shape[:-1], k_positions.shape[:-1])
  q_positions = jnp.broadcast_to(q_positions, batch_shape + q_positions.shape[-1:])
  k_positions = jnp.broadcast_to(k_positions, batch_shape + k_positions.shape[-1:])
  # -(q - k) in float32: exact for |positions| < 2**24 (as an int32 difference cast to float32
  # is), and no int32 overflow (which gave a finite wrong bias for |k - q| >= 2**31) or uint wrap
  # beyond. k - q and q - k are +0.0 on the diagonal, so min() keeps it +0.0, not -0.0.
  q_positions = q_positions.astype(jnp.float32)[..., :, None]
  k_positions = k_positions.astype(jnp.float32)[..., None, :]
  offset = k_positions - q_positions  # [..., Lq, Lk]
  if not causal:
    offset = jnp.minimum(offset, q_positions - k_positions)
  num_heads = slopes.shape[0]
  slopes = jnp.reshape(slopes.astype(jnp.float32), (1,) * len(batch_shape) + (num_heads, 1, 1))
  return slopes * offset[..., None, :, :]


def alibi_tile(params, q_pos, k_pos, *, causal: bool) -> jnp.ndarray:
  """ALiBi on one ``[bq, bk]`` tile of one head (:class:`pejax.encodings.kernel_bias.TileBias`).

  ``params[0] * (k - q)`` (causal) or ``params[0] * min(k - q, q - k)``: :func:`alibi_bias`'s
  float32 operations.

  Args:
    params: ``(slope,)``, the head's slope as a float32 scalar.
    q_pos: float32 ``[bq, 1]`` query positions.
    k_pos: float32 ``[1, bk]`` key positions.
    causal: the causal form or the symmetric one.

  Returns:
    float32 ``[bq, bk]``.
  """
  offset = k_pos - q_pos
  if not causal:
    offset = jnp.minimum(offset, q_pos - k_pos)
  return params[0] * offset


def alibi_kernel_bias(num_heads: int, *, causal: bool = True) -> KernelBias:
  """ALiBi's ``slope_h * (k - q)`` (or ``-slope_h * |q - k|``) as an in-kernel bias.

  Args:
    num_heads: H; the slopes are :func:`alibi_slopes`.
    causal: the causal form (``AlibiPE``'s) or the symmetric one.

  Returns:
    A :class:`~pejax.encodings.kernel_bias.KernelBias` with ``[H, 1]`` slopes (no gradient).

  Raises:
    ValueError: if ``num_heads`` is not an integer >= 1.
  """
  slopes = alibi_slopes(num_heads)[:, None]
  return KernelBias(TileBias(alibi_tile, 1, False, (("causal", bool(causal)),)), slopes)
