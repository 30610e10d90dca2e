"""The interface between the decoder and a positional encoding: three optional hooks.

Axes: B batch, L length, Lq / Lk query / key length, H query heads, K key/value heads, D head dim,
E model width.

Every PE acts in one or more of three places, and the decoder knows only these:

==========================================  ====================================  ===============
hook                                        where                                 used by
==========================================  ====================================  ===============
``embed(x, positions)``                     added to the token embeddings         sinusoidal,
                                            before block 1                        learned
``rotate(q, k, q_positions, k_positions)``  queries / keys in every attention     RoPE (+scalings)
                                            layer
``bias(q_positions, k_positions)``          added to the attention logits, per    ALiBi, T5
                                            head
==========================================  ====================================  ===============

``bias`` is a function of positions, never a precomputed ``[H, N, N]`` array: dense attention
evaluates it once per forward pass (shared by all layers) and blockwise attention once per tile.
Positions are explicit int32 arrays, so KV-cache offsets, packed sequences and randomized
positions work with every PE. NoPE implements no hook.

A new PE is one file defining a subclass (constructor ``(config: DecoderConfig, *, rngs)``,
optionally ``check_config``) plus one line in :mod:`pejax.nn.positional.registry` (or a call to
``register_pe``); no attention or decoder code changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from flax import nnx
import jax

if TYPE_CHECKING:
  from pejax.nn.decoder_config import DecoderConfig

Array = jax.Array


class PositionalEncoding(nnx.Module):
  """Base class of the decoder's positional encodings; every hook defaults to "no effect".

  Subclasses override the hooks they need. ``has_rotate`` / ``has_bias`` tell the decoder which
  ones exist (so NoPE pays nothing). ``max_length`` is the largest position + 1 the PE can
  encode (a learned table's size), ``None`` when unbounded.
  """

  max_length: Optional[int] = None

  @classmethod
  def check_config(cls, config: "DecoderConfig") -> None:
    """Raises ``ValueError`` naming the field if ``config`` cannot be used with this PE.

    Args:
      config: the decoder config (checked before any parameter is built).
    """
    del config

  def embed(self, x: Array, positions: Array) -> Array:
    """Adds the absolute encoding of ``positions`` to token embeddings.

    Args:
      x: ``[B, L, E]`` token embeddings.
      positions: int ``[B | 1, L]``.

    Returns:
      ``[B, L, E]`` in ``x.dtype``.
    """
    del positions
    return x

  def rotate(self, q: Array, k: Array, q_positions: Array,
             k_positions: Array) -> tuple[Array, Array]:
    """Rotates (or otherwise transforms) queries and keys by their positions.

    Args:
      q: ``[B, Lq, H, D]`` queries.
      k: ``[B, Lk, K, D]`` keys.
      q_positions: int ``[B | 1, Lq]``.
      k_positions: int ``[B | 1, Lk]``.

    Returns:
      ``(q, k)`` with unchanged shapes and dtypes.
    """
    del q_positions, k_positions
    return q, k

  def bias(self, q_positions: Array, k_positions: Array) -> Array:
    """Additive attention-logit bias; only called when ``has_bias``.

    Args:
      q_positions: int ``[B | 1, Lq]``.
      k_positions: int ``[B | 1, Lk]``.

    Returns:
      float32 ``[B | 1, H, Lq, Lk]``.
    """
    raise NotImplementedError(f"{type(self).__name__} has no attention bias")

  @property
  def has_rotate(self) -> bool:
    """Whether this PE overrides ``rotate``."""
    return type(self).rotate is not PositionalEncoding.rotate

  @property
  def has_bias(self) -> bool:
    """Whether this PE overrides ``bias``."""
    return type(self).bias is not PositionalEncoding.bias
