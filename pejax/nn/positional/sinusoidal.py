"""Sinusoidal absolute positions added to the token embeddings (``embed`` hook).

References:
  Vaswani et al. 2017, "Attention Is All You Need", arXiv 1706.03762, section 3.5.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from pejax.encodings.sinusoidal import sinusoidal_embedding
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, register_pe


@dataclasses.dataclass(frozen=True)
class SinusoidalConfig(PEConfig):
  """No hyper-parameters (base 10000 as in Vaswani et al.)."""

  def check_model(self, model: ModelDims) -> None:
    """Raises ``ValueError`` unless ``model.d_model`` (the table width E) is even.

    Args:
      model: the decoder config.
    """
    if model.d_model % 2:
      raise ValueError(f"d_model must be even for sinusoidal positions, got {model.d_model}")


@register_pe("sinusoidal")
class SinusoidalPE(PositionalEncoding):
  """``x + sinusoidal_embedding(positions, E)``, angles in float32 then cast to ``x.dtype``."""

  config_class = SinusoidalConfig
  absolute = True

  def embed(self, x: jax.Array, positions: jax.Array) -> jax.Array:
    """Adds the sinusoidal encoding of ``positions`` to the token embeddings.

    Args:
      x: ``[B, L, E]`` token embeddings.
      positions: int ``[B | 1, L]``.

    Returns:
      ``[B, L, E]`` in ``x.dtype``.
    """
    table = sinusoidal_embedding(positions, x.shape[-1], dtype=jnp.float32)  # [B|1, L, E]
    return x + table.astype(x.dtype)
