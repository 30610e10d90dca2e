"""Query blocks: the block split shared by the blockwise attentions of :mod:`pejax.encodings`.

Axes: B batch, L length, H heads, N = ceil(L / C) blocks of C tokens.

:func:`path_attention <pejax.encodings.path_attention.path_attention>` and
:func:`stick_breaking_attention <pejax.encodings.stick_breaking.stick_breaking_attention>` both
cut the sequence into blocks (zero padded to a multiple of C, padding in its own segment ``-1``),
walk each query block over the key blocks, and map that walk over the query blocks under
``jax.checkpoint`` (autodiff keeps one block's walk at a time). :class:`QueryBlocks` holds the
split; :meth:`QueryBlocks.map` the checkpointed map and the merge back to ``[B, L, H, Dv]``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import jax
import jax.numpy as jnp

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class QueryBlocks:
  """The split of ``length`` tokens into ``blocks`` blocks of ``size`` (``pad`` padding tokens)."""

  batch: int
  length: int
  size: int
  blocks: int
  pad: int

  @classmethod
  def of(cls, batch: int, length: int, block_size: int) -> "QueryBlocks":
    """Blocks of ``min(block_size, length)`` tokens covering ``length``."""
    size = min(block_size, length)
    blocks = -(-length // size)
    return cls(batch=batch, length=length, size=size, blocks=blocks, pad=blocks * size - length)

  def split(self, x: Array) -> Array:
    """``[B, L, H, ...] -> [B, H, N, C, ...]``, zero padded."""
    x = jnp.pad(x, [(0, 0), (0, self.pad)] + [(0, 0)] * (x.ndim - 2))
    return jnp.moveaxis(x.reshape((self.batch, self.blocks, self.size) + x.shape[2:]), 3, 1)

  def segments(self, segment_ids: Optional[Array]) -> Array:
    """int ``[B, N, C]`` segment ids (0 everywhere when ``None``), padding tokens ``-1``."""
    seg = (jnp.zeros((self.batch, self.length), jnp.int32) if segment_ids is None
           else segment_ids)
    seg = jnp.pad(seg, ((0, 0), (0, self.pad)), constant_values=-1)
    return seg.reshape(self.batch, self.blocks, self.size)

  def map(self, one_query_block: Callable[[Array], Array], *, prevent_cse: bool = True) -> Array:
    """``one_query_block(n) -> [B, H, C, Dv]`` over every block, checkpointed: ``[B, L, H, Dv]``."""
    out = jax.lax.map(jax.checkpoint(one_query_block, prevent_cse=prevent_cse),
                      jnp.arange(self.blocks))  # [N, B, H, C, Dv]
    heads = out.shape[2]
    out = jnp.moveaxis(out, 0, 2).reshape(self.batch, heads, self.blocks * self.size, -1)
    return jnp.swapaxes(out[:, :, :self.length], 1, 2)
