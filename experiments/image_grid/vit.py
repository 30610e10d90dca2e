"""A tiny Vision Transformer classifier whose positional encoding is chosen by name.

Axes: B batch, S image side, N patches (tokens), D model width, H heads, K head dim.

Patches of ``patch_size x patch_size`` pixels are embedded linearly, pass through pre-norm
Transformer blocks (bidirectional attention, GELU MLP) and are mean-pooled (no CLS token, so the
model accepts any grid size). The positional encoding (``pe``):

* ``"none"``: no positions (a bag of patches);
* ``"learned"``: a learned ``[N_train, D]`` table added to the patch embeddings
  (:class:`pejax.encodings.learned_position.LearnedPositionEmbedding`); on another grid the
  table is bilinearly resized (:func:`pejax.encodings.position_grids.resize_grid_table`);
* ``"sincos2d"``: the fixed 2-D sinusoid added to the patch embeddings
  (:func:`pejax.encodings.sinusoidal_2d.sinusoidal_2d_embedding`);
* ``"axial_rope"``: axial 2-D RoPE on queries and keys of every layer
  (:func:`pejax.encodings.axial_rope.apply_axial_rope`);
* ``"rope_mixed"``: RoPE-Mixed with learned per-head, per-layer frequencies
  (:class:`pejax.encodings.rope_mixed.RopeMixed`);
* ``"liere"``: LieRE, ``expm(row G_row + col G_col)`` with learned skew-symmetric ``b x b``
  block generators per head and layer (:class:`pejax.encodings.liere_rotation.LieRERotation`);
  its two generators need not commute, so it is not a relative encoding on the grid;
* ``"comrope"``: ComRoPE-LD, the commuting variant (one skew matrix per block, scaled per axis),
  relative on the grid.

LieRE and ComRoPE start from axial RoPE with ``rope_base`` on a block partition (``init="rope"``:
block j turns with axis ``j % 2``), so the comparison with ``axial_rope`` shows what learning
the generators adds; their authors start from random generators for positions normalized to
[0, 1] (``LieRERotation(init="random")``), which integer grid positions would make mostly
high-frequency.

The (row, column) positions of the patches are an explicit argument, so the caller decides how
a larger grid is positioned (integer positions: extrapolation; scaled float positions:
interpolation).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from flax import nnx
import jax
import jax.numpy as jnp

from pejax.encodings import axial_rope
from pejax.encodings import learned_position
from pejax.encodings import liere_rotation
from pejax.encodings import position_grids
from pejax.encodings import rope_mixed
from pejax.encodings import sinusoidal_2d

PE_CHOICES = ("none", "learned", "sincos2d", "axial_rope", "rope_mixed", "liere", "comrope")
# The LieRERotation variant of each learned-generator choice.
_BLOCK_ROTATIONS = {"liere": "liere", "comrope": "comrope_ld"}


@dataclasses.dataclass(frozen=True)
class ViTConfig:
  """Hyper-parameters of :class:`TinyViT` (frozen, hashable).

  Attributes:
    pe: positional encoding, one of ``PE_CHOICES``.
    image_size: training image side S (8 for the digits).
    patch_size: patch side; the training grid is ``(S / patch, S / patch)``.
    d_model: residual width D.
    num_heads: attention heads H (``D / H`` must be even for RoPE).
    num_layers: Transformer blocks.
    mlp_dim: hidden width of the MLP.
    num_classes: output classes.
    rope_base: base theta of axial RoPE (Heo et al. use 100 for ViTs).
    mixed_base: initial frequency base of RoPE-Mixed (10 in Heo et al.).
    liere_block_size: generator block size b of LieRE / ComRoPE (even, ``head_dim // b >= 2``
      so that each grid axis owns a block at init; 4 works down to head dim 8).
  """
  pe: str = "axial_rope"
  image_size: int = 8
  patch_size: int = 2
  d_model: int = 64
  num_heads: int = 4
  num_layers: int = 2
  mlp_dim: int = 128
  num_classes: int = 10
  rope_base: float = 100.0
  mixed_base: float = 10.0
  liere_block_size: int = 4

  def __post_init__(self):
    if self.pe not in PE_CHOICES:
      raise ValueError(f"pe must be one of {list(PE_CHOICES)}, got {self.pe!r}")
    if self.image_size % self.patch_size:
      raise ValueError(
          f"image_size must be a multiple of patch_size ({self.patch_size}), got "
          f"{self.image_size}")
    if self.d_model % self.num_heads or (self.d_model // self.num_heads) % 2:
      raise ValueError(
          f"d_model must split into num_heads ({self.num_heads}) even head dims, got "
          f"{self.d_model}")
    if self.pe == "sincos2d" and self.d_model % 4:
      raise ValueError(f"d_model must be a multiple of 4 for sincos2d, got {self.d_model}")
    if self.pe in _BLOCK_ROTATIONS:
      try:
        liere_rotation.check_block_size(self.liere_block_size, self.head_dim, init="rope",
                                        num_axes=2)
      except ValueError as error:
        raise ValueError(f"liere_{error}") from None

  @property
  def train_grid(self) -> tuple[int, int]:
    side = self.image_size // self.patch_size
    return (side, side)

  @property
  def head_dim(self) -> int:
    return self.d_model // self.num_heads


def patchify(images: jax.Array, patch_size: int) -> tuple[jax.Array, tuple[int, int]]:
  """``[B, S, S]`` images -> ``([B, N, patch^2] row-major patches, (rows, cols) grid)``."""
  b, h, w = images.shape
  if h % patch_size or w % patch_size:
    raise ValueError(f"images must have sides divisible by {patch_size}, got shape {images.shape}")
  gh, gw = h // patch_size, w // patch_size
  x = images.reshape(b, gh, patch_size, gw, patch_size).transpose(0, 1, 3, 2, 4)
  return x.reshape(b, gh * gw, patch_size * patch_size), (gh, gw)


class Block(nnx.Module):
  """Pre-norm Transformer block with the configured rotary encoding on q and k."""

  def __init__(self, config: ViTConfig, *, rngs: nnx.Rngs):
    d = config.d_model
    self.config = config
    self.norm1 = nnx.LayerNorm(d, rngs=rngs)
    self.qkv = nnx.Linear(d, 3 * d, rngs=rngs)
    self.proj = nnx.Linear(d, d, rngs=rngs)
    self.norm2 = nnx.LayerNorm(d, rngs=rngs)
    self.fc1 = nnx.Linear(d, config.mlp_dim, rngs=rngs)
    self.fc2 = nnx.Linear(config.mlp_dim, d, rngs=rngs)
    # A module-or-None attribute must be assigned once (NNX fixes data vs static on first set).
    rope: Optional[rope_mixed.RopeMixed | liere_rotation.LieRERotation] = None
    if config.pe == "rope_mixed":
      rope = rope_mixed.RopeMixed(config.head_dim, config.num_heads, base=config.mixed_base,
                                  rngs=rngs)
    elif config.pe in _BLOCK_ROTATIONS:
      rope = liere_rotation.LieRERotation(
          config.head_dim, config.num_heads, num_axes=2, block_size=config.liere_block_size,
          variant=_BLOCK_ROTATIONS[config.pe], init="rope", base=config.rope_base, rngs=rngs)
    self.rope = rope

  def __call__(self, x: jax.Array, positions: jax.Array) -> jax.Array:
    cfg = self.config
    b, n, d = x.shape
    qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, cfg.num_heads, cfg.head_dim)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [B, N, H, K]
    if cfg.pe == "axial_rope":
      q = axial_rope.apply_axial_rope(q, positions, base=cfg.rope_base)
      k = axial_rope.apply_axial_rope(k, positions, base=cfg.rope_base)
    elif cfg.pe in ("rope_mixed",) + tuple(_BLOCK_ROTATIONS):
      q, k = self.rope(q, positions), self.rope(k, positions)
    attended = jax.nn.dot_product_attention(q, k, v)
    x = x + self.proj(attended.reshape(b, n, d))
    return x + self.fc2(jax.nn.gelu(self.fc1(self.norm2(x))))


class TinyViT(nnx.Module):
  """Patch embedding, positional encoding, Transformer blocks, mean pool, linear head."""

  def __init__(self, config: ViTConfig, *, rngs: nnx.Rngs):
    self.config = config
    self.embed = nnx.Linear(config.patch_size ** 2, config.d_model, rngs=rngs)
    rows, cols = config.train_grid
    self.pos_embed: Optional[learned_position.LearnedPositionEmbedding] = (
        learned_position.LearnedPositionEmbedding(rows * cols, config.d_model, rngs=rngs)
        if config.pe == "learned" else None)
    self.blocks = nnx.List([Block(config, rngs=rngs) for _ in range(config.num_layers)])
    self.norm = nnx.LayerNorm(config.d_model, rngs=rngs)
    self.head = nnx.Linear(config.d_model, config.num_classes, rngs=rngs)

  def __call__(self, images: jax.Array, *, positions: Optional[jax.Array] = None) -> jax.Array:
    """Class logits.

    Args:
      images: ``[B, S', S']`` with ``S'`` a multiple of the patch size (any grid size).
      positions: ``[N, 2]`` (row, column) patch positions, integer or float32; default the
        integer grid of the images. Unused by ``"none"`` and ``"learned"``.

    Returns:
      ``[B, num_classes]`` float32 logits.
    """
    cfg = self.config
    patches, grid = patchify(images, cfg.patch_size)
    if positions is None:
      positions = position_grids.grid_positions(grid)
    x = self.embed(patches)
    if cfg.pe == "learned":
      rows, cols = cfg.train_grid
      table = self.pos_embed(jnp.arange(rows * cols, dtype=jnp.int32))
      if grid != cfg.train_grid:
        table = position_grids.resize_grid_table(table, cfg.train_grid, grid, method="bilinear")
      x = x + table[None]
    elif cfg.pe == "sincos2d":
      x = x + sinusoidal_2d.sinusoidal_2d_embedding(positions, cfg.d_model)[None]
    for block in self.blocks:
      x = block(x, positions)
    return self.head(jnp.mean(self.norm(x), axis=1))
