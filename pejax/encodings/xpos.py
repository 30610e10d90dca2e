"""xPos: rotary position embedding with an exponential decay scale (Sun et al. 2022).

Axes: B batch, L length, H heads, D head dim, R rotated dims (even, ``R <= D``).

xPos rotates queries and keys exactly as RoPE does and then scales rotated channel pair ``i`` of
the query at position ``n`` by ``zeta_i ** (n / scale_base)`` and of the key at position ``m`` by
``zeta_i ** (-m / scale_base)``, with

  zeta_i = (2 i / R + gamma) / (1 + gamma),   i = 0 .. R/2 - 1     (gamma = 0.4, scale_base = 512)

so the score ``q_n . k_m`` of pair ``i`` is multiplied by ``zeta_i ** ((n - m) / scale_base)``:
a decay with the distance ``n - m``, strongest for the fastest-rotating pair
(``zeta_0 = gamma / (1 + gamma) ~ 0.286``) and nearly absent for the slowest
(``zeta_{R/2-1} -> 1``). Scores still depend on positions only through ``n - m``.

xPos is for causal attention only: for a key after the query (``m > n``) the factor grows
without bound, which is why its paper and x-transformers reject bidirectional use.

The exponent may be taken relative to a ``center`` (the same for queries and keys); it cancels
in every score, and only keeps the per-vector scales inside float32 range on long sequences
(x-transformers centers at ``max_position // 2``; torchscale at minus half the length). With
``center = 0`` a key at position m is multiplied by up to ``(1.4 / 0.4) ** (m / 512)``, which
overflows float32 near m = 36000.

Scale arithmetic is float32 (``exp(power * log(zeta))``), whatever the activation dtype; the
result is cast back to the input dtype at the end.

References:
  Sun et al. 2022, "A Length-Extrapolatable Transformer", arXiv 2212.10554.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks
from pejax.encodings.rope import LAYOUTS
from pejax.encodings.rope import rope_angles
from pejax.encodings.rope import rotate_with_angles

Array = jax.Array

DEFAULT_GAMMA = 0.4  # Sun et al. 2022: zeta_i = (i / (d/2) + 0.4) / 1.4.
DEFAULT_SCALE_BASE = 512.0  # Sun et al. 2022 (and x-transformers / torchscale): gamma = 512.


def check_gamma(gamma: Any) -> float:
  """``gamma`` must be a positive finite number (0 makes ``zeta_0 = 0``: a zero query channel).

  Args:
    gamma: xPos's offset of the decay bases.

  Returns:
    ``float(gamma)``.
  """
  if gamma == 0:
    raise ValueError(f"gamma must be a positive finite number (zeta_0 = gamma / (1 + gamma) "
                     f"must be > 0), got {gamma!r}")
  return arg_checks.check_positive_float("gamma", gamma)


def xpos_zeta(rotary_dim: int, *, gamma: float = DEFAULT_GAMMA) -> Array:
  """The per-pair decay bases ``zeta_i = (2 i / R + gamma) / (1 + gamma)``.

  Args:
    rotary_dim: number R of rotated channels (even); the scale has one entry per pair.
    gamma: offset that keeps ``zeta`` away from 0 (paper: 0.4).

  Returns:
    float32 ``[R // 2]``, increasing from ``gamma / (1 + gamma)`` towards 1.

  References:
    Sun et al. 2022, arXiv 2212.10554, Eq. (5).
  """
  rotary_dim = arg_checks.check_even("rotary_dim", rotary_dim)
  gamma = check_gamma(gamma)
  # (2i + gamma R) / ((1 + gamma) R): the op order of x-transformers / torchscale, in float64
  # then rounded once.
  i2 = np.arange(0, rotary_dim, 2, dtype=np.float64)
  return jnp.asarray(((i2 + gamma * rotary_dim) / ((1.0 + gamma) * rotary_dim)).astype(np.float32))


def _check_center(center: Any) -> Array:
  center = arg_checks.check_integer_array("center", center)
  return center.astype(jnp.float32)


def xpos_scale(positions: Array, *, rotary_dim: int, scale_base: float = DEFAULT_SCALE_BASE,
               gamma: float = DEFAULT_GAMMA, center: Any = 0) -> Array:
  """The xPos query scale ``zeta_i ** ((position - center) / scale_base)``.

  The key scale is its reciprocal (:func:`apply_xpos` with ``is_key=True``).

  Args:
    positions: integer ``[..., L]`` positions.
    rotary_dim: number R of rotated channels (even).
    scale_base: the paper's gamma-denominator B (512), > 0.
    gamma: offset of ``zeta`` (0.4), > 0.
    center: integer scalar or ``[..., 1]`` array subtracted from every position; it cancels in
      ``q . k`` when queries and keys use the same value (see the module docstring).

  Returns:
    float32 ``[..., L, R // 2]``.

  References:
    Sun et al. 2022, arXiv 2212.10554.
  """
  positions = arg_checks.check_integer_array("positions", positions)
  arg_checks.check_min_rank("positions", positions, 1, "[..., L]")
  scale_base = arg_checks.check_positive_float("scale_base", scale_base)
  log_zeta = jnp.log(xpos_zeta(rotary_dim, gamma=gamma))
  center = _check_center(center)
  if center.ndim > positions.ndim:
    raise ValueError(f"center must be a scalar or [..., 1] broadcasting against positions "
                     f"{positions.shape}, got shape {center.shape}")
  center = center.reshape((1,) * (positions.ndim - center.ndim) + center.shape)
  power = (positions.astype(jnp.float32) - center) / jnp.float32(scale_base)
  log_zeta = log_zeta.reshape((1,) * positions.ndim + log_zeta.shape)
  return jnp.exp(power[..., None] * log_zeta)


def _expand_pairs(scale: Array, layout: str) -> Array:
  """``[..., R/2]`` per-pair values to ``[..., R]`` per-channel values for ``layout``."""
  if layout == "half":
    return jnp.concatenate([scale, scale], axis=-1)
  return jnp.repeat(scale, 2, axis=-1)


def apply_xpos(x: Array, positions: Array, inv_freq: Array, *, is_key: bool, layout: str,
               scale_base: float = DEFAULT_SCALE_BASE, gamma: float = DEFAULT_GAMMA,
               center: Any = 0) -> Array:
  """Applies xPos (RoPE rotation, then the decay scale) to queries or keys.

  Args:
    x: ``[..., L, H, D]`` queries or keys.
    positions: integer ``[..., L]`` positions (leading axes broadcast against ``x``).
    inv_freq: float32 ``[R // 2]`` RoPE inverse frequencies (e.g.
      :func:`pejax.encodings.rope_inv_freq`); the first ``R`` channels are rotated and scaled,
      the rest pass through.
    is_key: ``False`` multiplies by :func:`xpos_scale` (queries), ``True`` divides by it (keys).
    layout: ``"half"`` (pairs ``i, i + R/2``) or ``"interleaved"`` (pairs ``2i, 2i+1``, the
      layout of x-transformers and torchscale).
    scale_base: B of the paper (512).
    gamma: offset of ``zeta`` (0.4).
    center: integer scalar or ``[..., 1]`` subtracted from positions; pass the same value for the
      queries and the keys of one attention call.

  Returns:
    ``[..., L, H, D]`` in ``x.dtype``.

  References:
    Sun et al. 2022, arXiv 2212.10554.
  """
  arg_checks.check_choice("layout", layout, LAYOUTS)
  if not isinstance(is_key, (bool, np.bool_)):
    raise ValueError(f"is_key must be a bool, got {is_key!r}")
  arg_checks.check_min_rank("x", x, 3, "[..., L, H, D]")
  angles = rope_angles(positions, inv_freq)  # Validates positions and inv_freq.
  rotary_dim = 2 * angles.shape[-1]
  scale = xpos_scale(positions, rotary_dim=rotary_dim, scale_base=scale_base, gamma=gamma,
                     center=center)
  if is_key:
    scale = 1.0 / scale
  rotated = rotate_with_angles(x.astype(jnp.float32), angles, layout=layout)
  scale = _expand_pairs(scale, layout)[..., None, :]  # [..., L, 1, R]
  scale = scale.reshape((1,) * (rotated.ndim - scale.ndim) + scale.shape)
  head = rotated[..., :rotary_dim] * scale
  out = jnp.concatenate([head, rotated[..., rotary_dim:]], axis=-1)
  return out.astype(x.dtype)
