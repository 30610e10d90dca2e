"""RMSNorm whose weight is applied as ``(offset + scale)`` (Gemma), and the decoder's norm factory.

Axes: E normalized features (the last axis).

Gemma stores its RMSNorm weights around 0 and multiplies by ``1 + w``; Llama-style checkpoints
store them around 1 and multiply by ``w``. Keeping the offset in the module (instead of adding it
to the stored weight) keeps a loaded checkpoint's numbers, and the file it is saved back to,
bit for bit. With ``offset = 0`` the decoder uses ``nnx.RMSNorm`` itself, so the parameters of
pejax's own models are unchanged.

References:
  Zhang & Sennrich 2019, "Root Mean Square Layer Normalization", arXiv 1910.07467.
  Gemma Team 2024, "Gemma: Open Models Based on Gemini Research and Technology",
  arXiv 2403.08295.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flax import nnx
import jax
import jax.numpy as jnp

if TYPE_CHECKING:
  from pejax.nn.decoder_config import DecoderConfig


class OffsetRMSNorm(nnx.RMSNorm):
  """``x / sqrt(mean(x^2) + eps) * (offset + scale)``, computed in float32, cast to ``dtype``.

  The parameter is ``scale`` ``[E]`` (as ``nnx.RMSNorm``), initialized to ``1 - offset`` so that
  a new module starts as the identity scaling.
  """

  def __init__(self, num_features: int, *, offset: float, epsilon: float, dtype,
               rngs: nnx.Rngs):
    """Builds the ``scale`` parameter.

    Args:
      num_features: E.
      offset: added to ``scale`` before multiplying (Gemma: 1.0).
      epsilon: added to the mean square.
      dtype: output dtype.
      rngs: unused by the constant initializer, passed to ``nnx.RMSNorm``.
    """
    super().__init__(num_features, epsilon=epsilon, dtype=dtype,
                     scale_init=nnx.initializers.constant(1.0 - offset), rngs=rngs)
    self.offset = float(offset)

  def __call__(self, x: jax.Array, mask=None) -> jax.Array:
    """Normalizes the last axis.

    Args:
      x: ``[..., E]``.
      mask: unsupported (must be ``None``; kept for ``nnx.RMSNorm``'s signature).

    Returns:
      ``[..., E]`` in ``dtype`` (or ``x``'s dtype when ``dtype`` is ``None``).
    """
    if mask is not None:
      raise ValueError("mask is not supported by OffsetRMSNorm, got a mask")
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.epsilon)
    out = normed * (jnp.float32(self.offset) + self.scale[...].astype(jnp.float32))
    return out.astype(self.dtype or x.dtype)


def make_rms_norm(config: "DecoderConfig", num_features: int, *, rngs: nnx.Rngs) -> nnx.Module:
  """The decoder's RMSNorm over ``num_features``: ``nnx.RMSNorm``, or Gemma's offset form.

  Args:
    config: the decoder config (``norm_epsilon``, ``norm_offset``, ``compute_dtype``).
    num_features: E, the size of the normalized last axis.
    rngs: the ``params`` stream.

  Returns:
    ``nnx.RMSNorm`` when ``config.norm_offset == 0``, else an :class:`OffsetRMSNorm`.
  """
  if config.norm_offset == 0:
    return nnx.RMSNorm(num_features, epsilon=config.norm_epsilon, dtype=config.compute_dtype,
                       rngs=rngs)
  return OffsetRMSNorm(num_features, offset=config.norm_offset, epsilon=config.norm_epsilon,
                       dtype=config.compute_dtype, rngs=rngs)
