"""KERPLE: kernelized relative positional embedding, log and power kernels (Chi et al., 2022).

Axes: H heads, Lq query length, Lk key length; `...` any leading batch dims.

KERPLE adds to the attention logits of head h a conditionally positive definite kernel of the
query-key distance d = |q - k|, with two learned positive parameters per head:

  log:    bias[h, q, k] = -r1_h * log(1 + r2_h * d)        r1, r2 > 0
  power:  bias[h, q, k] = -r1_h * d ** r2_h                 r1 > 0, 0 < r2 <= 2

Both are 0 on the diagonal and decrease monotonically with the distance; power with r2 = 1 is
ALiBi with slope r1. The bias depends on the positions only through |q - k| (translation
invariant), so it can be evaluated one `[Lq, Lk]` tile at a time. In a causal decoder the keys
after the query are removed by the mask; the official code (gpt-neox ``ParallelKerpleLog`` /
``ParallelKerplePower``) zeroes their distance instead, which differs only on masked entries.

Parameter initialization in the official code, per head: log kernel r1 ~ U(0, 2), r2 ~ U(0, 1);
power kernel r1 ~ U(0, 1), r2 ~ U(0, 2); both clamped to >= 0.01 after every step (and r2 <= 2
for the power kernel). That lives in the NNX module; this file is the parameter-free math.

References:
  Chi, Fan, Ramadge and Rudnicky, "KERPLE: Kernelized Relative Positional Embedding for Length
  Extrapolation", NeurIPS 2022, arXiv:2205.09921, section 4 (eqs. for the power and logarithmic
  variants).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks
from pejax.encodings.kernel_bias import KernelBias, TileBias

KERPLE_KINDS = ("log", "power")


def _check_kernel_params(r1: Any, r2: Any, kind: str) -> tuple[jnp.ndarray, jnp.ndarray]:
  """Validates `[H]` kernel parameters; value checks only where the arrays are concrete."""
  r1, r2 = jnp.asarray(r1), jnp.asarray(r2)
  for name, value in (("r1", r1), ("r2", r2)):
    if value.ndim != 1:
      raise ValueError(f"{name} must be 1-D [H], got shape {value.shape}")
    if not jnp.issubdtype(value.dtype, jnp.floating):
      raise ValueError(f"{name} must be a floating-point array, got dtype {value.dtype}")
  if r1.shape != r2.shape:
    raise ValueError(f"r1 and r2 must have the same shape [H], got {r1.shape} and {r2.shape}")
  for name, value in (("r1", r1), ("r2", r2)):
    if isinstance(value, jax.core.Tracer):
      continue
    host = np.asarray(value)
    if not np.all(np.isfinite(host)) or np.any(host <= 0):
      raise ValueError(f"{name} must be finite and > 0 in every head, got {host.tolist()}")
  if kind == "power" and not isinstance(r2, jax.core.Tracer):
    host = np.asarray(r2)
    if np.any(host > 2):
      raise ValueError(f"r2 of the power kernel must be <= 2 in every head, got {host.tolist()}")
  return r1, r2


def _invalid_head_poison(r1: jnp.ndarray, r2: jnp.ndarray, kind: str) -> jnp.ndarray:
  """float32 ``[H]``: 0 where head h's (r1, r2) are valid (finite, > 0; r2 <= 2 for the power
  kernel), NaN where not."""
  r1, r2 = r1.astype(jnp.float32), r2.astype(jnp.float32)
  valid = jnp.isfinite(r1) & (r1 > 0) & jnp.isfinite(r2) & (r2 > 0)
  if kind == "power":
    valid = valid & (r2 <= 2)
  return jnp.where(valid, 0.0, jnp.nan).astype(jnp.float32)


def kerple_bias(
    q_positions: Any,
    k_positions: Any,
    r1: Any,
    r2: Any,
    *,
    kind: str,
) -> jnp.ndarray:
  """KERPLE attention-logit bias from explicit query and key positions.

  The distance is |q - k| in float32 (exact for |positions| < 2^24, no int32 overflow); the
  result is float32 whatever the dtype of `r1` and `r2`.

  Args:
    q_positions: `[..., Lq]` integer query positions.
    k_positions: `[..., Lk]` integer key positions; leading dims must broadcast with
      `q_positions`'.
    r1: `[H]` positive per-head scale of the kernel.
    r2: `[H]` positive per-head shape parameter (the log kernel's distance scale, the power
      kernel's exponent, at most 2).
    kind: `"log"` for `-r1 * log(1 + r2 * |q - k|)`, `"power"` for `-r1 * |q - k| ** r2`.

  Returns:
    `[..., H, Lq, Lk]` float32 bias, the head dim inserted before Lq; 0 where q == k, < 0
    elsewhere.

  Raises:
    ValueError: for a `kind` other than "log" / "power", positions that are not integer arrays
      of rank >= 1 or whose leading dims do not broadcast, `r1` / `r2` not 1-D floating arrays of
      one shape, or (when concrete) values <= 0, non-finite, or r2 > 2 for the power kernel.

  References:
    Chi et al. 2022, "KERPLE: Kernelized Relative Positional Embedding for Length
    Extrapolation", arXiv:2205.09921.
  """
  arg_checks.check_choice("kind", kind, KERPLE_KINDS)
  q_positions, k_positions, _ = arg_checks.check_query_key_positions(q_positions, k_positions)
  r1, r2 = _check_kernel_params(r1, r2, kind)
  return _bias(q_positions, k_positions, r1, r2, kind)


@functools.partial(jax.jit, static_argnums=(4,))
def _bias(q_positions: jnp.ndarray, k_positions: jnp.ndarray, r1: jnp.ndarray,
          r2: jnp.ndarray, kind: str) -> jnp.ndarray:
  """Validated `[..., Lq]`, `[..., Lk]`, `[H]`, `[H]` -> `[..., H, Lq, Lk]` float32."""
  batch_shape = np.broadcast_shapes(q_positions.shape[:-1], k_positions.shape[:-1])
  q_positions = jnp.broadcast_to(q_positions, batch_shape + q_positions.shape[-1:])
  k_positions = jnp.broadcast_to(k_positions, batch_shape + k_positions.shape[-1:])
  distance = jnp.abs(q_positions.astype(jnp.float32)[..., :, None]
                     - k_positions.astype(jnp.float32)[..., None, :])[..., None, :, :]
  head_shape = (1,) * len(batch_shape) + (r1.shape[0], 1, 1)
  # Traced parameters the eager check would reject poison their head with NaN (never a finite
  # wrong bias); for concrete ones this adds 0.
  poison = jnp.reshape(_invalid_head_poison(r1, r2, kind), head_shape)
  r1 = jnp.reshape(r1.astype(jnp.float32), head_shape) + poison
  r2 = jnp.reshape(r2.astype(jnp.float32), head_shape)
  if kind == "log":
    return -r1 * jnp.log1p(r2 * distance)
  # d ** r2 through exp(r2 * log d) on d > 0 only: 0 ** r2 = 0, and its gradient in r2
  # (0 ** r2 * log 0 = nan in the naive form) is 0.
  positive = distance > 0
  safe_log = jnp.log(jnp.where(positive, distance, 1.0))
  return -r1 * jnp.where(positive, jnp.exp(r2 * safe_log), 0.0)


def kerple_log_tile(params, q_pos, k_pos) -> jnp.ndarray:
  """KERPLE's log kernel ``-r1 log(1 + r2 |q - k|)`` on one tile of one head.

  Args:
    params: ``(r1, r2)`` float32 scalars.
    q_pos: float32 ``[bq, 1]`` query positions.
    k_pos: float32 ``[1, bk]`` key positions.

  Returns:
    float32 ``[bq, bk]``.
  """
  distance = jnp.abs(q_pos - k_pos)
  return -params[0] * jnp.log1p(params[1] * distance)


def kerple_power_tile(params, q_pos, k_pos) -> jnp.ndarray:
  """KERPLE's power kernel ``-r1 |q - k|^r2`` on one tile (0 on the diagonal); arguments and
  result as :func:`kerple_log_tile`'s."""
  distance = jnp.abs(q_pos - k_pos)
  positive = distance > 0
  safe_log = jnp.log(jnp.where(positive, distance, 1.0))
  return -params[0] * jnp.where(positive, jnp.exp(params[1] * safe_log), 0.0)


def kerple_kernel_bias(r1: Any, r2: Any, *, kind: str) -> KernelBias:
  """KERPLE's ``-r1 log(1 + r2 |q - k|)`` or ``-r1 |q - k|^r2`` as an in-kernel bias.

  Args:
    r1: float ``[H]`` positive scales.
    r2: float ``[H]`` positive shapes (the power kernel's exponent, <= 2).
    kind: ``"log"`` or ``"power"``.

  Returns:
    A :class:`~pejax.encodings.kernel_bias.KernelBias` with ``[H, 2]`` parameters (learnable).

  Raises:
    ValueError: for another ``kind`` or ``r1`` / ``r2`` not of one ``[H]`` shape.
  """
  arg_checks.check_choice("kind", kind, ("log", "power"))
  if jnp.ndim(r1) != 1 or jnp.shape(r1) != jnp.shape(r2):
    raise ValueError(f"r1 and r2 must both have shape [H], got {jnp.shape(r1)} and "
                     f"{jnp.shape(r2)}")
  r1, r2 = jnp.asarray(r1, jnp.float32), jnp.asarray(r2, jnp.float32)
  r1 = r1 + _invalid_head_poison(r1, r2, kind)  # NaN rows for invalid (traced) heads.
  params = jnp.stack([r1, r2], axis=1)
  tile = kerple_log_tile if kind == "log" else kerple_power_tile
  return KernelBias(TileBias(tile, 2, True), params)
