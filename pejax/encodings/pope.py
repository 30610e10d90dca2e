"""PoPE, polar coordinate position embedding (Gopalakrishnan et al. 2025).

Axes: L length, H heads, D head dim.

RoPE rotates pairs of channels, so each pair's angle mixes content (the pair's own direction)
with position: the "what" and the "where" are entangled. PoPE separates them. Each of the D
channels c of a query or key becomes one complex number whose magnitude comes from content and
whose phase comes from position only:

  q~_{t,c} = softplus(q_{t,c}) * exp(i t theta_c)
  k~_{s,c} = softplus(k_{s,c}) * exp(i (s theta_c + delta_c))
  score(t, s) = Re sum_c conj(q~_{t,c}) k~_{s,c}
              = sum_c softplus(q_{t,c}) softplus(k_{s,c}) cos((s - t) theta_c + delta_c)

with D frequencies ``theta_c = base ** (-c / D)`` (c = 0 .. D-1; RoPE has D/2) and a learned
per-head, per-channel key phase bias ``delta_c``, clamped to ``[-2 pi, 0]``.

:func:`pope_transform` returns the real vector ``[mu cos(phi), mu sin(phi)]`` of length 2D, so
that an ordinary dot product of a transformed query and key *is* the score above. Scores depend
on positions only through ``s - t``.

References:
  Gopalakrishnan, Csordas, Schmidhuber and Mozer 2025, "Decoupling the 'What' and 'Where' With
  Polar Coordinate Positional Embeddings", arXiv 2509.10534.
"""

from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks

Array = jax.Array

PHASE_BIAS_RANGE = (-2.0 * math.pi, 0.0)  # The paper's (and x-transformers') clamp of delta.


def pope_inv_freq(head_dim: int, *, base: float = 10000.0) -> Array:
  """PoPE's D frequencies ``base ** (-c / D)``, one per channel.

  Args:
    head_dim: D (any positive integer: PoPE does not pair channels).
    base: frequency base (10000), > 1.

  Returns:
    float32 ``[D]``, from 1 down to ``base ** (-(D - 1) / D)``.

  References:
    Gopalakrishnan et al. 2025, arXiv 2509.10534.
  """
  head_dim = arg_checks.check_positive_int("head_dim", head_dim)
  base = arg_checks.check_base("base", base)
  # 1 / base ** (c / D) in float32, the op order of x-transformers' PolarEmbedding.
  exponents = np.arange(head_dim, dtype=np.float32) / np.float32(head_dim)
  return jnp.asarray((np.float32(1.0) / (np.float32(base) ** exponents)).astype(np.float32))


def clamp_phase_bias(phase_bias: Array) -> Array:
  """Clamps a learned phase bias to the paper's range ``[-2 pi, 0]``.

  Args:
    phase_bias: float ``[..., D]`` raw learned bias (e.g. ``[H, D]``).

  Returns:
    float32 ``[..., D]`` clipped to ``[-2 pi, 0]``.
  """
  phase_bias = jnp.asarray(phase_bias)
  if not jnp.issubdtype(phase_bias.dtype, jnp.floating):
    raise ValueError(f"phase_bias must be a float array, got dtype {phase_bias.dtype}")
  low, high = PHASE_BIAS_RANGE
  return jnp.clip(phase_bias.astype(jnp.float32), low, high)


def pope_transform(x: Array, positions: Array, inv_freq: Array,
                   phase_bias: Optional[Array] = None) -> Array:
  """Maps queries or keys to PoPE's real ``[mu cos(phi), mu sin(phi)]`` form.

  ``pope_transform(q, t, f) . pope_transform(k, s, f, delta)`` (last axis) equals
  ``sum_c softplus(q_c) softplus(k_c) cos((s - t) f_c + delta_c)``. Give the phase bias to the
  keys only, already clamped (:func:`clamp_phase_bias`); the transform does not clamp it.

  Args:
    x: ``[..., L, H, D]`` queries or keys (any float dtype).
    positions: integer ``[..., L]`` positions (leading axes broadcast against ``x``).
    inv_freq: float32 ``[D]`` frequencies (:func:`pope_inv_freq`), one per channel.
    phase_bias: optional float ``[H, D]`` (per head) or ``[D]`` added to the phase.

  Returns:
    ``[..., L, H, 2 D]`` in ``x.dtype``: magnitudes times cos of the phases, then times sin.

  References:
    Gopalakrishnan et al. 2025, arXiv 2509.10534.
  """
  arg_checks.check_min_rank("x", x, 3, "[..., L, H, D]")
  positions = arg_checks.check_integer_array("positions", positions)
  arg_checks.check_min_rank("positions", positions, 1, "[..., L]")
  inv_freq = jnp.asarray(inv_freq)
  if inv_freq.ndim != 1 or inv_freq.shape[0] != x.shape[-1]:
    raise ValueError(f"inv_freq must have shape [D] = [{x.shape[-1]}] (one frequency per "
                     f"channel), got shape {inv_freq.shape}")
  if not jnp.issubdtype(inv_freq.dtype, jnp.floating) or jnp.finfo(inv_freq.dtype).bits < 32:
    raise ValueError(f"inv_freq must be float32 or wider, got {inv_freq.dtype}")
  if positions.shape[-1] != x.shape[-3]:
    raise ValueError(f"positions length ({positions.shape[-1]}) must match the length axis of x "
                     f"[..., L, H, D] ({x.shape[-3]}); x has shape {x.shape}")
  if positions.ndim > x.ndim - 2:
    raise ValueError(f"positions have more leading axes than x: positions shape "
                     f"{positions.shape}, x shape {x.shape}")
  # [..., L, 1, D] phases, float32 by elementwise broadcast (no matmul).
  inv_freq = inv_freq.astype(jnp.float32).reshape((1,) * (positions.ndim + 1) + inv_freq.shape)
  phase = positions.astype(jnp.float32)[..., None, None] * inv_freq
  phase = phase.reshape((1,) * (x.ndim - phase.ndim) + phase.shape)
  if phase_bias is not None:
    phase_bias = jnp.asarray(phase_bias)
    if not jnp.issubdtype(phase_bias.dtype, jnp.floating):
      raise ValueError(f"phase_bias must be a float array, got dtype {phase_bias.dtype}")
    if phase_bias.ndim == 1:
      phase_bias = phase_bias[None, :]
    if phase_bias.ndim != 2 or phase_bias.shape[-1] != x.shape[-1] or (
        phase_bias.shape[0] not in (1, x.shape[-2])):
      raise ValueError(f"phase_bias must have shape [H, D] = [{x.shape[-2]}, {x.shape[-1]}] or "
                       f"[D], got shape {phase_bias.shape}")
    phase = phase + phase_bias.astype(jnp.float32).reshape(
        (1,) * (x.ndim - 2) + phase_bias.shape)
  magnitude = jax.nn.softplus(x.astype(jnp.float32))
  out = jnp.concatenate([magnitude * jnp.cos(phase), magnitude * jnp.sin(phase)], axis=-1)
  return out.astype(x.dtype)
