"""FIRE: functional interpolation for relative positions, its parameter-free part (Li et al., 2024).

Axes: Lq query length, Lk key length; `...` any leading batch dims.

FIRE's bias for query i and key j is a learned function of a normalized, log-transformed distance:

  bias[h, i, j] = f_theta(psi(i - j) / psi(max(L, i)))_h,     psi(x) = log(c x + 1),

with f_theta a small MLP (1 -> 32 hidden units, ReLU -> H heads in the paper's code), c > 0 a
learned log-transform scale and L > 0 a learned threshold. Dividing by psi(i) ("progressive
interpolation") maps every distance a query can see into [0, 1], whatever the sequence length;
the threshold keeps short contexts from being stretched (for i < L the normalizer is psi(L)).
The paper's code takes |c (i - j)| (so future keys get the mirrored value) and adds eps = 1e-6 to
the normalizer; both are kept here. The parameters are initialized to c = 0.1 and L = 512 (the
code learns L as a multiplier of its initial value).

The input of the MLP is not translation invariant once i > L: it depends on the query's absolute
position through the normalizer.

This file holds the parameter-free map (i, j, c, L) -> psi(|i - j|) / (psi(max(L, i)) + eps);
the MLP lives in the NNX module.

References:
  Li et al., "Functional Interpolation for Relative Positions Improves Long Context
  Transformers", ICLR 2024, arXiv:2310.04418, section 3 (eq. for FIRE) and appendix (code).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks
from pejax.encodings.kernel_bias import KernelBias, TileBias

# Paper defaults (appendix code): log-transform scale, threshold, normalizer epsilon, MLP width.
FIRE_INIT_C = 0.1
FIRE_INIT_THRESHOLD = 512.0
FIRE_EPS = 1e-6
FIRE_MLP_WIDTH = 32


def _check_scalar_param(name: str, value: Any) -> jnp.ndarray:
  """A positive float scalar (Python number or 0-d array); the value check skips tracers."""
  if isinstance(value, bool):
    raise ValueError(f"{name} must be a positive number, got {value!r}")
  if not isinstance(value, jax.core.Tracer):
    host = np.asarray(value)
    if host.shape != () or not np.issubdtype(host.dtype, np.number):
      raise ValueError(f"{name} must be a scalar number, got {value!r}")
    if not np.isfinite(host) or host <= 0:
      raise ValueError(f"{name} must be a positive finite number, got {value!r}")
  value = jnp.asarray(value)
  if value.ndim != 0:
    raise ValueError(f"{name} must be a scalar, got shape {value.shape}")
  return value.astype(jnp.float32)


def _invalid_poison(c: jnp.ndarray, threshold: jnp.ndarray) -> jnp.ndarray:
  """float32 0 when ``c`` and ``threshold`` are positive and finite, else NaN."""
  valid = jnp.isfinite(c) & (c > 0) & jnp.isfinite(threshold) & (threshold > 0)
  return jnp.where(valid, 0.0, jnp.nan).astype(jnp.float32)


def fire_normalized_distance(
    q_positions: Any,
    k_positions: Any,
    *,
    c: Any = FIRE_INIT_C,
    threshold: Any = FIRE_INIT_THRESHOLD,
    eps: float = FIRE_EPS,
) -> jnp.ndarray:
  """FIRE's MLP input psi(|i - j|) / (psi(max(L, i)) + eps), psi(x) = log(c x + 1).

  `c` and `threshold` may be traced scalars (learned parameters); their values are checked only
  when concrete. Distances are formed in float32 (exact for |positions| < 2^24).

  Args:
    q_positions: `[..., Lq]` integer query positions i.
    k_positions: `[..., Lk]` integer key positions j; leading dims must broadcast with
      `q_positions`'.
    c: Positive scalar scale of the log transform (paper init 0.1).
    threshold: Positive scalar threshold L of the normalizer (paper init 512).
    eps: Non-negative constant added to the normalizer (1e-6 in the paper's code).

  Returns:
    `[..., Lq, Lk]` float32, 0 on the diagonal, in [0, 1) for keys at or before a query whose
    position is >= 0 (up to eps), increasing with the distance.

  Raises:
    ValueError: if positions are not integer arrays of rank >= 1 or their leading dims do not
      broadcast, `c` or `threshold` is not a scalar or (when concrete) not positive and finite,
      or `eps` is negative or not finite.

  References:
    Li et al. 2024, "Functional Interpolation for Relative Positions Improves Long Context
    Transformers", arXiv:2310.04418.
  """
  q_positions, k_positions, _ = arg_checks.check_query_key_positions(q_positions, k_positions)
  c = _check_scalar_param("c", c)
  threshold = _check_scalar_param("threshold", threshold)
  if isinstance(eps, bool) or not np.isfinite(eps) or eps < 0:
    raise ValueError(f"eps must be a non-negative finite number, got {eps!r}")
  return _normalized_distance(q_positions, k_positions, c, threshold, jnp.float32(eps))


@jax.jit
def _normalized_distance(q_positions: jnp.ndarray, k_positions: jnp.ndarray, c: jnp.ndarray,
                         threshold: jnp.ndarray, eps: jnp.ndarray) -> jnp.ndarray:
  """Validated `[..., Lq]`, `[..., Lk]` and float32 scalars -> `[..., Lq, Lk]` float32."""
  batch_shape = np.broadcast_shapes(q_positions.shape[:-1], k_positions.shape[:-1])
  q = jnp.broadcast_to(q_positions, batch_shape + q_positions.shape[-1:]).astype(jnp.float32)
  k = jnp.broadcast_to(k_positions, batch_shape + k_positions.shape[-1:]).astype(jnp.float32)
  distance = jnp.abs(q[..., :, None] - k[..., None, :])  # [..., Lq, Lk]
  # A traced c or threshold the eager check would reject (<= 0, not finite): NaN, not a finite
  # wrong distance.
  c = c + _invalid_poison(c, threshold)
  normalizer = jnp.log1p(c * jnp.maximum(q, threshold)) + eps  # [..., Lq]
  return jnp.log1p(c * distance) / normalizer[..., :, None]


def fire_tile(params, q_pos, k_pos, *, mlp_width: int, eps: float) -> jnp.ndarray:
  """FIRE's MLP of the normalized distance on one tile of one head (an unrolled MLP).

  Args:
    params: the head's ``3W + 3`` float32 scalars: ``kernel_1 [W], bias_1 [W], kernel_2[:, h]
      [W], bias_2[h], |c|, threshold``.
    q_pos: float32 ``[bq, 1]`` query positions.
    k_pos: float32 ``[1, bk]`` key positions.
    mlp_width: W.
    eps: the normalizer's constant.

  Returns:
    float32 ``[bq, bk]``.
  """
  width = mlp_width
  c, threshold = params[3 * width + 1], params[3 * width + 2]
  distance = jnp.abs(q_pos - k_pos)
  normalizer = jnp.log1p(c * jnp.maximum(q_pos, threshold)) + jnp.float32(eps)
  x = jnp.log1p(c * distance) / normalizer
  out = jnp.zeros(x.shape, jnp.float32) + params[3 * width]
  for w in range(width):
    hidden = jnp.maximum(x * params[w] + params[width + w], 0.0)
    out = out + hidden * params[2 * width + w]
  return out


def fire_kernel_bias(kernel_1: Any, bias_1: Any, kernel_2: Any, bias_2: Any, c: Any,
                     threshold: Any, *, eps: float) -> KernelBias:
  """FIRE's MLP of ``psi(|i - j|) / (psi(max(L, i)) + eps)`` as an in-kernel bias.

  Args:
    kernel_1: float ``[W]`` first-layer weights (input width 1).
    bias_1: float ``[W]`` first-layer biases.
    kernel_2: float ``[W, H]`` second-layer weights.
    bias_2: float ``[H]`` second-layer biases.
    c: float scalar, the (positive) log-transform scale, ``|c|`` of the PE.
    threshold: float scalar threshold L.
    eps: the normalizer's constant.

  Returns:
    A :class:`~pejax.encodings.kernel_bias.KernelBias` with ``[H, 3W + 3]`` parameters
    (learnable): row h holds ``kernel_1, bias_1, kernel_2[:, h], bias_2[h], c, threshold``.

  Raises:
    ValueError: for inconsistent shapes.
  """
  width = jnp.shape(kernel_1)[0] if jnp.ndim(kernel_1) == 1 else -1
  if (width < 1 or jnp.shape(bias_1) != (width,) or jnp.ndim(kernel_2) != 2
      or jnp.shape(kernel_2)[0] != width or jnp.shape(bias_2) != jnp.shape(kernel_2)[1:]):
    raise ValueError(
        "FIRE parameters must be kernel_1 [W], bias_1 [W], kernel_2 [W, H], bias_2 [H], got "
        f"{jnp.shape(kernel_1)}, {jnp.shape(bias_1)}, {jnp.shape(kernel_2)}, "
        f"{jnp.shape(bias_2)}")
  num_heads = jnp.shape(kernel_2)[1]
  c = jnp.asarray(c, jnp.float32)
  threshold = jnp.asarray(threshold, jnp.float32)
  c = c + _invalid_poison(c, threshold)  # NaN parameters, not a finite wrong bias.
  shared = jnp.concatenate([jnp.asarray(kernel_1, jnp.float32), jnp.asarray(bias_1, jnp.float32)])
  params = jnp.concatenate([
      jnp.broadcast_to(shared[None, :], (num_heads, 2 * width)),
      jnp.asarray(kernel_2, jnp.float32).T,
      jnp.asarray(bias_2, jnp.float32)[:, None],
      jnp.broadcast_to(jnp.asarray(c, jnp.float32).reshape((1, 1)), (num_heads, 1)),
      jnp.broadcast_to(jnp.asarray(threshold, jnp.float32).reshape((1, 1)), (num_heads, 1)),
  ], axis=1)
  options = (("mlp_width", int(width)), ("eps", float(eps)))
  return KernelBias(TileBias(fire_tile, 3 * width + 3, True, options), params)
