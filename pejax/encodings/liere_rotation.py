"""LieRERotation: the learnable generators of LieRE / ComRoPE for one attention layer (Flax NNX).

Axes: N tokens, H heads, K rotation heads (this module's ``num_heads``; a model with grouped-query
attention gives it its key/value head count), D head dim, b block size, M = D // b blocks,
A position axes.

The module owns the generator parameters in the authors' layouts and calls the pure functions of
:mod:`pejax.encodings.liere`:

* ``variant="liere"``: ``generator_params`` ``[A, K, M, b, b]``, generators
  ``triu(W, 1) - triu(W, 1)^T`` (StanfordMIMI/LieRE, one set per layer and head as its scripts
  run it);
* ``variant="comrope_ap"``: ``generator_params`` ``[K, M, b, b]``, block j turns with axis
  ``j % A`` (Longin-Yu/ComRoPE ``ComRoPEAPAttention``);
* ``variant="comrope_ld"``: ``generator_params`` ``[K, M, b, b]`` and ``multipliers`` ``[A, M]``
  shared by the heads (``ComRoPELDAttention``).

Initialization (``init``):

* ``"random"``, the authors': LieRE ``W ~ U[0, 2 pi init_scale)`` (its code: ``init_scale = 1``
  for positions normalized to [0, 1] over the training grid), ComRoPE ``P ~ N(0, init_scale^2)``
  (its ``init_std = 1``, positions ``(i + 0.5) / n``) and ``multipliers ~ N(0, 1)``;
* ``"rope"`` (pejax's, for integer positions): the generators of
  :func:`pejax.encodings.liere.liere_rope_generators` with ``base``, so the module starts as RoPE
  (1-D; interleaved pairs) or as axial RoPE on a block partition (block j turns with axis
  ``j % A``), and learns from there. Every parameter stays trainable.

References:
  Ostmeier et al., "LieRE: Lie Rotational Positional Encodings", ICML 2025, arXiv:2406.10322.
  Yu et al., "ComRoPE: Scalable and Robust Rotary Position Embedding Parameterized by Trainable
    Commuting Angle Matrices", CVPR 2025, arXiv:2506.03737.
"""

from __future__ import annotations

import math
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings import liere

INITS = ("random", "rope")


def check_block_size(block_size: Any, head_dim: int, *, init: str, num_axes: int = 1) -> int:
  """Validates a LieRE block size b against the head dim (and ``init="rope"``'s needs).

  Args:
    block_size: b, an integer in ``[2, head_dim]`` (even with ``init="rope"``; with
      ``init="rope"`` also at most ``head_dim // num_axes``, so that every axis owns a block).
    head_dim: D.
    init: ``"random"`` or ``"rope"``.
    num_axes: A.

  Returns:
    ``block_size`` as an int.

  Raises:
    ValueError: naming ``block_size`` and its value.
  """
  block_size = arg_checks.check_positive_int("block_size", block_size)
  if block_size < 2 or block_size > head_dim:
    raise ValueError(f"block_size must be in [2, head_dim={head_dim}], got {block_size}")
  if init == "rope":
    if block_size % 2:
      raise ValueError(f"block_size must be even with init='rope', got {block_size}")
    if head_dim // block_size < num_axes:
      raise ValueError(
          f"block_size must leave a block per axis with init='rope' (head_dim // block_size >="
          f" {num_axes}), got {block_size} for head_dim {head_dim}")
  return block_size


class LieRERotation(nnx.Module):
  """LieRE / ComRoPE generators of one attention layer and the rotation they define.

  Apply the same module to the queries and keys of a layer::

    rotation = LieRERotation(head_dim=32, num_heads=4, num_axes=2, rngs=nnx.Rngs(0))
    pos = image_positions(h, w)                     # [N, 2]
    q, k = rotation(q, pos), rotation(k, pos)       # [B, N, H, D]

  Attributes:
    generator_params: ``nnx.Param``, ``[A, K, M, b, b]`` (LieRE) or ``[K, M, b, b]`` (ComRoPE).
    multipliers: ``nnx.Param`` ``[A, M]`` (ComRoPE-LD only, else ``None``).
  """

  def __init__(self, head_dim: int, num_heads: int, *, num_axes: int = 2, block_size: int = 8,
               variant: str = "liere", init: str = "random", base: float = 100.0,
               init_scale: float = 1.0, max_squarings: int = liere.DEFAULT_MAX_SQUARINGS,
               rngs: nnx.Rngs, param_dtype: Any = jnp.float32):
    """Builds the module.

    Args:
      head_dim: D.
      num_heads: K, heads with their own generators (1: shared by all heads).
      num_axes: A (1 text, 2 image, 3 video).
      block_size: b in ``[2, D]``; the ``D % b`` last channels pass through.
      variant: ``"liere"``, ``"comrope_ap"`` or ``"comrope_ld"``.
      init: ``"random"`` (the authors') or ``"rope"`` (RoPE / axial RoPE with ``base``).
      base: RoPE base of ``init="rope"``.
      init_scale: scale of ``init="random"`` (see the module docstring).
      max_squarings: see :func:`pejax.encodings.liere.liere_rotations`.
      rngs: ``nnx.Rngs`` with a ``params`` stream.
      param_dtype: dtype of the parameters (the rotation is float32 regardless).

    Raises:
      ValueError: naming the bad argument and its value.
    """
    self.head_dim = arg_checks.check_positive_int("head_dim", head_dim)
    self.num_heads = arg_checks.check_positive_int("num_heads", num_heads)
    self.num_axes = arg_checks.check_positive_int("num_axes", num_axes)
    self.variant = arg_checks.check_choice("variant", variant, liere.VARIANTS)
    self.init = arg_checks.check_choice("init", init, INITS)
    self.block_size = check_block_size(block_size, head_dim, init=init, num_axes=num_axes)
    self.max_squarings = arg_checks.check_positive_int("max_squarings", max_squarings)
    init_scale = arg_checks.check_positive_float("init_scale", init_scale)
    if init == "rope":
      arg_checks.check_base("base", base)
    blocks = head_dim // self.block_size
    b, axes, heads = self.block_size, self.num_axes, self.num_heads
    key_params, key_multipliers = jax.random.split(rngs.params())
    multipliers = None
    if init == "rope":
      rope = liere.liere_rope_generators(blocks * b, block_size=b, base=base, num_axes=axes)
      upper = jnp.triu(rope, 1)  # [A, 1, M, b, b]
      if variant == "liere":
        params = jnp.broadcast_to(upper, (axes, heads, blocks, b, b))
      else:  # Block j belongs to axis j % A: its one nonzero generator is its P.
        params = jnp.broadcast_to(jnp.sum(upper, axis=0), (heads, blocks, b, b))
        owner = jnp.arange(blocks)[None, :] % axes == jnp.arange(axes)[:, None]
        multipliers = owner.astype(jnp.float32)
    elif variant == "liere":
      params = jax.random.uniform(key_params, (axes, heads, blocks, b, b), jnp.float32, 0.0,
                                  2 * math.pi * init_scale)
    else:
      params = init_scale * jax.random.normal(key_params, (heads, blocks, b, b), jnp.float32)
      multipliers = jax.random.normal(key_multipliers, (axes, blocks), jnp.float32)
    self.generator_params = nnx.Param(params.astype(param_dtype))
    self.multipliers = (nnx.Param(multipliers.astype(param_dtype))
                        if variant == "comrope_ld" else None)

  def generators(self) -> jax.Array:
    """The skew-symmetric generators of this module's variant, from its parameters.

    Returns:
      float32 ``[A, K, M, b, b]``.
    """
    params = self.generator_params[...]
    if self.variant == "liere":
      return liere.liere_generators(params)
    if self.variant == "comrope_ap":
      return liere.comrope_ap_generators(params, num_axes=self.num_axes)
    return liere.comrope_ld_generators(params, self.multipliers[...])

  def rotations(self, positions: Any) -> jax.Array:
    """The rotations ``expm(sum_a p_a G_a)`` of positions, block by block.

    Args:
      positions: ``[..., N, A]`` integer or float32 positions.

    Returns:
      float32 ``[..., N, K, M, b, b]``.
    """
    return liere.liere_rotations(positions, self.generators(), max_squarings=self.max_squarings)

  def __call__(self, x: jax.Array, positions: Any) -> jax.Array:
    """Rotates ``x`` ``[..., N, H, D]`` (``H`` a multiple of K) by ``positions`` ``[..., N, A]``.

    Args:
      x: queries or keys, ``[..., N, H, D]`` with this module's D.
      positions: ``[..., N, A]`` integer or float32 positions, leading axes broadcastable
        against ``x``'s.

    Returns:
      ``[..., N, H, D]`` in ``x.dtype``.
    """
    arg_checks.check_min_rank("x", x, 3, "[..., N, H, D]")
    if x.shape[-1] != self.head_dim:
      raise ValueError(f"x must have head dim {self.head_dim} (this LieRERotation's), got shape "
                       f"{x.shape}")
    return liere.apply_block_rotations(x, self.rotations(positions))
