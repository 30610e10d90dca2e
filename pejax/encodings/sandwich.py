"""Sandwich: the sinusoid inner product as a parameter-free relative bias (Chi et al., 2023).

Axes: H heads, Lq query length, Lk key length; `...` any leading batch dims.

Sandwich keeps only the position-position term of the attention logits of a Transformer with
sinusoidal embeddings, and adds it to the logits of a model without absolute embeddings. With the
sinusoidal embedding p_m of dimension d_bar (wave numbers w_i = base^(-2i / d_bar),
i = 0 .. d_bar/2 - 1),

  p_m . p_n = sum_i sin(m w_i) sin(n w_i) + cos(m w_i) cos(n w_i) = sum_i cos((m - n) w_i),

and head h = 1 .. H receives it divided by ALiBi's compression ratio 8h / H:

  bias[h, m, n] = (H / (8 h)) * sum_{i=0}^{d_bar/2 - 1} cos((m - n) w_i).

It equals d_bar / 2 / ratio_h on the diagonal (its maximum), decays roughly logarithmically in
|m - n| over the range the wave numbers resolve, and is symmetric and translation invariant.
Some implementations subtract d_bar / 2 (so the diagonal is 0): a constant per head, which
softmax ignores. The paper uses d_bar = 128 and base 10000.

References:
  Chi, Fan, Rudnicky and Ramadge, "Dissecting Transformer Length Extrapolation via the Lens of
  Receptive Field Analysis", ACL 2023, arXiv:2212.10356, section 5 (Sandwich) and appendix.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks
from pejax.encodings.kernel_bias import KernelBias, TileBias


def sandwich_head_scales(num_heads: int) -> jnp.ndarray:
  """Per-head factors H / (8 h), h = 1 .. H: the inverse of ALiBi's compression ratios 8h / H.

  Args:
    num_heads: Number of heads H >= 1.

  Returns:
    `[H]` float32 factors, decreasing from H / 8 (head 1) to 1 / 8 (head H).

  Raises:
    ValueError: if `num_heads` is not an integer >= 1.

  References:
    Chi et al. 2023, arXiv:2212.10356 (Sandwich), after Press et al. 2022, arXiv:2108.12409.
  """
  num_heads = arg_checks.check_positive_int("num_heads", num_heads)
  heads = np.arange(1, num_heads + 1, dtype=np.float64)
  return jnp.asarray(num_heads / (8.0 * heads), dtype=jnp.float32)


def sandwich_bias(
    q_positions: Any,
    k_positions: Any,
    *,
    num_heads: int,
    dim: int = 128,
    base: float = 10000.0,
) -> jnp.ndarray:
  """Sandwich attention-logit bias from explicit query and key positions.

  The offsets q - k are formed in float32 (exact for |positions| < 2^24) and the cosines summed
  in float32.

  Args:
    q_positions: `[..., Lq]` integer query positions.
    k_positions: `[..., Lk]` integer key positions; leading dims must broadcast with
      `q_positions`'.
    num_heads: Number of heads H >= 1 (head h is scaled by H / (8 h)).
    dim: Even dimension d_bar >= 2 of the sinusoidal embeddings whose inner product is taken
      (the paper's 128).
    base: Wavelength base (> 1) of the sinusoids (10000 in the paper).

  Returns:
    `[..., H, Lq, Lk]` float32 bias, the head dim inserted before Lq.

  Raises:
    ValueError: if positions are not integer arrays of rank >= 1 or their leading dims do not
      broadcast, `num_heads` is not a positive integer, `dim` is not an even integer >= 2, or
      `base` is not a finite number > 1.

  References:
    Chi et al. 2023, "Dissecting Transformer Length Extrapolation via the Lens of Receptive Field
    Analysis", arXiv:2212.10356.
  """
  q_positions, k_positions, _ = arg_checks.check_query_key_positions(q_positions, k_positions)
  scales = sandwich_head_scales(num_heads)
  dim = arg_checks.check_even("dim", dim)
  base = arg_checks.check_positive_float("base", base)
  if base <= 1.0:
    raise ValueError(f"base must be > 1, got {base!r}")
  inv_freq = jnp.asarray(base ** -(np.arange(0, dim, 2, dtype=np.float64) / dim), jnp.float32)
  return _bias(q_positions, k_positions, inv_freq, scales)


@jax.jit
def _bias(q_positions: jnp.ndarray, k_positions: jnp.ndarray, inv_freq: jnp.ndarray,
          scales: jnp.ndarray) -> jnp.ndarray:
  """Validated `[..., Lq]`, `[..., Lk]`, `[d_bar/2]`, `[H]` -> `[..., H, Lq, Lk]` float32."""
  batch_shape = np.broadcast_shapes(q_positions.shape[:-1], k_positions.shape[:-1])
  q_positions = jnp.broadcast_to(q_positions, batch_shape + q_positions.shape[-1:])
  k_positions = jnp.broadcast_to(k_positions, batch_shape + k_positions.shape[-1:])
  offset = (q_positions.astype(jnp.float32)[..., :, None]
            - k_positions.astype(jnp.float32)[..., None, :])  # [..., Lq, Lk]
  inv_freq = jnp.reshape(inv_freq, (1,) * offset.ndim + inv_freq.shape)
  inner = jnp.sum(jnp.cos(offset[..., None] * inv_freq), axis=-1)  # [..., Lq, Lk]
  scales = jnp.reshape(scales, (1,) * len(batch_shape) + scales.shape + (1, 1))
  return scales * inner[..., None, :, :]


def sandwich_tile(params, q_pos, k_pos, *, inv_freq: tuple[float, ...]) -> jnp.ndarray:
  """Sandwich's ``scale_h * sum_i cos((q - k) w_i)`` on one tile of one head.

  Args:
    params: ``(scale_h,)`` float32 scalar.
    q_pos: float32 ``[bq, 1]`` query positions.
    k_pos: float32 ``[1, bk]`` key positions.
    inv_freq: the ``d_bar / 2`` frequencies ``w_i`` as Python floats.

  Returns:
    float32 ``[bq, bk]``.
  """
  offset = q_pos - k_pos
  inner = jnp.zeros(offset.shape, jnp.float32)
  for frequency in inv_freq:
    inner = inner + jnp.cos(offset * jnp.float32(frequency))
  return params[0] * inner


def sandwich_kernel_bias(num_heads: int, *, dim: int = 128, base: float = 10000.0) -> KernelBias:
  """Sandwich's ``(H / 8h) sum_i cos((q - k) w_i)`` as an in-kernel bias.

  The ``dim / 2`` cosines are evaluated per logit inside the kernel (as the dense path does per
  bias entry): the costliest of the built-in in-kernel biases.

  Args:
    num_heads: H.
    dim: even d_bar of the sinusoids.
    base: wavelength base (> 1).

  Returns:
    A :class:`~pejax.encodings.kernel_bias.KernelBias` with ``[H, 1]`` head scales (no
    gradient).

  Raises:
    ValueError: for an odd ``dim`` or a ``base`` <= 1.
  """
  dim = arg_checks.check_even("dim", dim)
  base = arg_checks.check_positive_float("base", base)
  if base <= 1.0:
    raise ValueError(f"base must be > 1, got {base!r}")
  inv_freq = np.asarray(base ** -(np.arange(0, dim, 2, dtype=np.float64) / dim), np.float32)
  options = (("inv_freq", tuple(float(f) for f in inv_freq)),)
  return KernelBias(TileBias(sandwich_tile, 1, False, options),
                    sandwich_head_scales(num_heads)[:, None])
