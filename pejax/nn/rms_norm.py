"""RMSNorm with a hand-written gradient, and the NNX module that uses it.

Axes: ``...`` any leading axes (B batch, L length), E features.

``y = x * rsqrt(mean(x^2) + eps) * (offset + scale)`` with statistics in float32, the numbers of
``flax.nnx.RMSNorm`` (``offset = 1`` with a zero-initialized scale is Gemma's ``(1 + w)``). The
custom VJP keeps only ``x`` and the per-row ``rsqrt`` as residuals and computes the input
gradient in one pass per row, ``dx = r * (g w - x_hat * mean(g w x_hat))`` with
``x_hat = x * r``, and the scale gradient as one column sum of ``g * x_hat``: the passes that
autodiff of the forward formula spreads over several elementwise fusions on XLA:CPU
(``benchmarks/README.md``, "Where the training time went").

References:
  Zhang & Sennrich 2019, "Root Mean Square Layer Normalization", arXiv 1910.07467.
  Gemma Team 2024, "Gemma: Open Models Based on Gemini Research and Technology",
  arXiv 2403.08295 (the ``1 + w`` scale).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from flax import nnx
import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks

if TYPE_CHECKING:
  from pejax.nn.decoder_config import DecoderConfig

Array = jax.Array


def rms_norm(x: Array, scale: Array, *, epsilon: float = 1e-6, scale_offset: float = 0.0,
             dtype: Any = None) -> Array:
  """Root-mean-square normalization over the last axis, times ``scale_offset + scale``.

  Args:
    x: ``[..., E]`` inputs.
    scale: ``[E]`` learned scale.
    epsilon: added to the mean square before the square root (> 0).
    scale_offset: constant added to ``scale`` (0: ``nnx.RMSNorm``; 1: Gemma's ``1 + w``).
    dtype: output dtype (default: the promoted dtype of ``x`` and ``scale``).

  Returns:
    ``[..., E]`` in ``dtype``.

  Raises:
    ValueError: naming ``scale`` or ``epsilon`` for a bad shape or value.
  """
  epsilon = arg_checks.check_positive_float("epsilon", epsilon)
  if jnp.ndim(scale) != 1 or jnp.shape(scale)[0] != jnp.shape(x)[-1]:
    raise ValueError(f"scale must have shape [{jnp.shape(x)[-1]}] (the last axis of x), got "
                     f"{jnp.shape(scale)}")
  out_dtype = jnp.result_type(x, scale) if dtype is None else jnp.dtype(dtype)
  return _rms_norm(float(epsilon), float(scale_offset), jnp.dtype(out_dtype).name, x, scale)


def _stats(x: Array, epsilon: float) -> tuple[Array, Array]:
  x32 = x.astype(jnp.float32)
  return x32, jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + epsilon)


def _weight(scale: Array, scale_offset: float, ndim: int) -> Array:
  """``scale_offset + scale`` in float32, shaped ``[1, ..., 1, E]`` (explicit broadcast)."""
  return (scale.astype(jnp.float32) + scale_offset).reshape((1,) * (ndim - 1) + scale.shape)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _rms_norm(epsilon, scale_offset, dtype, x, scale):
  x32, inv = _stats(x, epsilon)
  return (x32 * (inv * _weight(scale, scale_offset, x.ndim))).astype(dtype)


def _rms_norm_fwd(epsilon, scale_offset, dtype, x, scale):
  x32, inv = _stats(x, epsilon)
  out = (x32 * (inv * _weight(scale, scale_offset, x.ndim))).astype(dtype)
  return out, (x, inv, scale)


def _rms_norm_bwd(epsilon, scale_offset, dtype, residuals, g):
  del epsilon, dtype
  x, inv, scale = residuals
  g32 = g.astype(jnp.float32)
  x_hat = x.astype(jnp.float32) * inv
  gw = g32 * _weight(scale, scale_offset, x.ndim)
  dx = inv * (gw - x_hat * jnp.mean(gw * x_hat, axis=-1, keepdims=True))
  rows = (g32 * x_hat).reshape((-1, x.shape[-1]))
  dscale = jnp.einsum("nd,n->d", rows, jnp.ones((rows.shape[0],), jnp.float32))
  return dx.astype(x.dtype), dscale.astype(scale.dtype)


_rms_norm.defvjp(_rms_norm_fwd, _rms_norm_bwd)


class RMSNorm(nnx.Module):
  """Drop-in for ``nnx.RMSNorm`` (same ``scale`` parameter path and init) using :func:`rms_norm`.

  Attributes:
    scale: ``nnx.Param`` ``[E]``, initialized to ones (zeros with ``scale_offset=1``, so that the
      initial scale is 1 either way).
  """

  def __init__(self, num_features: int, *, epsilon: float = 1e-6, dtype: Any = None,
               param_dtype: Any = jnp.float32, scale_offset: float = 0.0, rngs: nnx.Rngs):
    """Builds the scale.

    Args:
      num_features: E.
      epsilon: added to the mean square (> 0).
      dtype: output dtype (``None``: promoted from the input and the scale).
      param_dtype: dtype of ``scale``.
      scale_offset: constant added to ``scale`` (Gemma: 1).
      rngs: unused (the scale is deterministic); accepted for ``nnx.RMSNorm`` compatibility.
    """
    del rngs
    self.num_features = arg_checks.check_positive_int("num_features", num_features)
    self.epsilon = arg_checks.check_positive_float("epsilon", epsilon)
    self.dtype = dtype
    self.scale_offset = float(scale_offset)
    init = jnp.zeros if self.scale_offset else jnp.ones
    self.scale = nnx.Param(init((num_features,), param_dtype))

  def __call__(self, x: Array) -> Array:
    """Normalizes ``[..., E] -> [..., E]``.

    Args:
      x: ``[..., E]`` inputs.

    Returns:
      ``[..., E]`` in ``dtype`` (or the promoted input dtype).
    """
    return rms_norm(x, self.scale[...], epsilon=self.epsilon, scale_offset=self.scale_offset,
                    dtype=self.dtype)


def make_rms_norm(config: "DecoderConfig", num_features: int, *, rngs: nnx.Rngs) -> RMSNorm:
  """The decoder's RMSNorm over ``num_features`` (``norm_epsilon``, ``norm_offset``, dtype).

  Args:
    config: the decoder config (``norm_epsilon``, ``norm_offset``, ``compute_dtype``).
    num_features: E, the size of the normalized last axis.
    rngs: the ``params`` stream (unused: the scale is deterministic).

  Returns:
    An :class:`RMSNorm`; with ``norm_offset = 1`` Gemma's ``(1 + w)`` form (scale starts at 0).
  """
  return RMSNorm(num_features, epsilon=config.norm_epsilon, dtype=config.compute_dtype,
                 scale_offset=config.norm_offset, rngs=rngs)
