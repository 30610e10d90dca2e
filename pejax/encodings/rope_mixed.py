"""RoPE-Mixed: rotary position embedding with learnable, axis-mixing frequencies per head.

Axes: N number of tokens, H heads, D head dim, A number of grid axes, P = R / 2 rotated channel
pairs.

Axial RoPE gives each channel pair one grid axis; it cannot represent diagonal directions.
RoPE-Mixed (Heo et al. 2024) gives every head h and pair p a learnable frequency *vector*
``f[:, h, p]`` over the axes, and rotates the pair by

  ``angle[..., n, h, p] = sum_a positions[..., n, a] * f[a, h, p]``

(``pos_x * f_x + pos_y * f_y`` for an image), so ``q_n . k_m`` still depends only on the
position offset ``pos_n - pos_m`` but each head learns its own directions and frequencies.
The rotation itself is :func:`pejax.encodings.rope.rotate_with_angles` with per-head angles.

Initialisation (``init``), as in the official code (naver-ai/rope-vit, ``init_random_2d_freqs``):
the pairs are split into A blocks (:func:`pejax.encodings.axial_rope.axial_split`); block b has
magnitudes ``base^(-2i / split[b])`` (the axial frequencies, ``theta = 10`` in the paper) and
points along the b-th column of a random rotation ``Q_h`` of the axes, drawn once per head.
For A = 2, ``Q_h = [[cos t, -sin t], [sin t, cos t]]`` with ``t ~ U[0, 2 pi)``: block 0 points
along ``(cos t, sin t)`` and block 1 along the orthogonal ``(-sin t, cos t)``, exactly the
paper's ``fx = [mag cos t, mag cos(pi/2 + t)]``, ``fy = [mag sin t, mag sin(pi/2 + t)]``. For
A > 2, ``Q_h`` is a Haar-random orthogonal matrix.

* ``"random"``: one random rotation per head (the paper / official code);
* ``"random_per_frequency"``: an independent random rotation per head and channel pair;
* ``"axial"``: ``Q = I``, i.e. RoPE-Axial with the same ``base`` and ``split`` (the module then
  computes exactly :func:`pejax.encodings.axial_rope.apply_axial_rope`, until trained).

Angles are computed in float32 by elementwise broadcast (never an einsum); integer positions
are exact, float32 positions (an interpolated grid) are accepted too.

References:
  Heo, Park, Han, Yun, "Rotary Position Embedding for Vision Transformer", ECCV 2024,
    arXiv:2403.13298.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks
from pejax.encodings import axial_rope
from pejax.encodings import position_grids
from pejax.encodings import rope

INITS = ("random", "random_per_frequency", "axial")


def _random_rotations(key: jax.Array, shape: tuple[int, ...], num_axes: int) -> jax.Array:
  """Random orthogonal ``[*shape, A, A]`` matrices (2-D: rotation by a uniform angle)."""
  if num_axes == 1:
    return jnp.ones(shape + (1, 1), jnp.float32)
  if num_axes == 2:
    t = jax.random.uniform(key, shape, jnp.float32, 0.0, 2 * math.pi)
    c, s = jnp.cos(t), jnp.sin(t)
    return jnp.stack([jnp.stack([c, -s], -1), jnp.stack([s, c], -1)], -2)
  gaussian = jax.random.normal(key, shape + (num_axes, num_axes), jnp.float32)
  q, r = jnp.linalg.qr(gaussian)
  signs = jnp.sign(jnp.diagonal(r, axis1=-2, axis2=-1))
  return q * jnp.where(signs == 0, 1.0, signs)[..., None, :]  # Haar: fix the QR sign ambiguity.


def rope_mixed_init_freqs(key: jax.Array, head_dim: int, num_heads: int, *, num_axes: int = 2,
                          base: float = 10.0, split: Sequence[int] | None = None,
                          init: str = "random") -> jax.Array:
  """Initial RoPE-Mixed frequencies (see the module docstring).

  Args:
    key: PRNG key (unused for ``init="axial"``).
    head_dim: D (even).
    num_heads: H.
    num_axes: A (2 for images, 3 for videos).
    base: frequency magnitude base theta (10 in the paper for RoPE-Mixed).
    split: rotated dims per block (default equal, :func:`~pejax.encodings.axial_rope.axial_split`).
    init: ``"random"``, ``"random_per_frequency"`` or ``"axial"``.

  Returns:
    float32 ``[A, H, P]`` frequencies ``f[a, h, p]``.

  Raises:
    ValueError: naming the bad argument.
  """
  arg_checks.check_choice("init", init, INITS)
  num_heads = arg_checks.check_positive_int("num_heads", num_heads)
  parts = axial_rope.axial_split(head_dim, num_axes, split=split)
  mags = axial_rope.axial_inv_freqs(head_dim, num_axes=num_axes, split=parts, base=base)
  magnitude = jnp.concatenate(mags)  # [P]
  block = np.concatenate([np.full(d // 2, b) for b, d in enumerate(parts)])  # [P]
  onehot = jnp.asarray(np.eye(num_axes, dtype=np.float32)[block])  # [P, A(block)]
  num_pairs = magnitude.shape[0]
  if init == "axial":
    rotation = jnp.broadcast_to(jnp.eye(num_axes, dtype=jnp.float32),
                                (num_heads, 1, num_axes, num_axes))
  else:
    per = 1 if init == "random" else num_pairs
    rotation = _random_rotations(key, (num_heads, per), num_axes)  # [H, 1|P, A, A(block)]
  # f[a, h, p] = Q[h, p, a, block(p)] * magnitude[p]
  column = jnp.sum(rotation * onehot[None, :, None, :], axis=-1)  # [H, P, A]
  freqs = column * magnitude[None, :, None]
  return jnp.transpose(freqs, (2, 0, 1)).astype(jnp.float32)


def rope_mixed_angles(positions: Any, freqs: jax.Array) -> jax.Array:
  """Per-head mixed angles ``sum_a positions[..., n, a] * freqs[a, h, p]`` in float32.

  Args:
    positions: ``[..., N, A]`` integer (or float32) grid positions.
    freqs: ``[A, H, P]`` frequencies.

  Returns:
    float32 ``[..., N, H, P]``.

  Raises:
    ValueError: naming ``positions`` or ``freqs`` on a shape mismatch.
  """
  freqs = jnp.asarray(freqs)
  if freqs.ndim != 3:
    raise ValueError(f"freqs must have shape [A, H, P], got shape {freqs.shape}")
  positions = position_grids.check_grid_positions(positions, num_axes=freqs.shape[0])
  pos = positions.astype(jnp.float32)
  lead = (1,) * (pos.ndim - 1)
  freqs = freqs.astype(jnp.float32)
  angles = pos[..., 0, None, None] * freqs[0].reshape(lead + freqs.shape[1:])
  for a in range(1, freqs.shape[0]):
    angles = angles + pos[..., a, None, None] * freqs[a].reshape(lead + freqs.shape[1:])
  return angles


class RopeMixed(nnx.Module):
  """RoPE-Mixed for one attention layer: learnable ``[A, H, P]`` frequencies.

  Apply the same module to queries and keys of a layer (Heo et al. learn one set per layer)::

    rope = RopeMixed(head_dim=32, num_heads=4, rngs=nnx.Rngs(0))
    pos = image_positions(h, w)                 # [N, 2]
    q, k = rope(q, pos), rope(k, pos)           # [B, N, H, D]

  Attributes:
    freqs: ``nnx.Param`` ``[A, H, P]`` frequencies.
  """

  def __init__(self, head_dim: int, num_heads: int, *, num_axes: int = 2, base: float = 10.0,
               split: Sequence[int] | None = None, init: str = "random", layout: str = "half",
               rngs: nnx.Rngs, param_dtype: Any = jnp.float32):
    """Builds the module.

    Args:
      head_dim: D (even).
      num_heads: H.
      num_axes: A (2 for images, 3 for videos).
      base: initial frequency magnitude base (10 in the paper).
      split: rotated dims per axis block (default all D, equal); the rest pass through.
      init: ``"random"`` (paper), ``"random_per_frequency"`` or ``"axial"``.
      layout: channel pairing, ``"half"`` or ``"interleaved"`` (the official code pairs
        ``2i, 2i+1``, i.e. interleaved).
      rngs: ``nnx.Rngs`` with a ``params`` stream.
      param_dtype: dtype of the frequency parameter (angles are float32 regardless).
    """
    self.head_dim = arg_checks.check_even("head_dim", head_dim)
    self.num_heads = arg_checks.check_positive_int("num_heads", num_heads)
    self.num_axes = arg_checks.check_positive_int("num_axes", num_axes)
    self.layout = arg_checks.check_choice("layout", layout, rope.LAYOUTS)
    key = rngs.params()
    self.freqs = nnx.Param(rope_mixed_init_freqs(
        key, head_dim, num_heads, num_axes=num_axes, base=base, split=split,
        init=init).astype(param_dtype))

  def angles(self, positions: Any) -> jax.Array:
    """float32 ``[..., N, H, P]`` angles for ``[..., N, A]`` positions.

    Args:
      positions: ``[..., N, A]`` integer (or float32) grid positions.

    Returns:
      float32 ``[..., N, H, P]``, :func:`rope_mixed_angles` with this module's frequencies.
    """
    return rope_mixed_angles(positions, self.freqs[...])

  def __call__(self, x: jax.Array, positions: Any) -> jax.Array:
    """Rotates ``x`` ``[..., N, H, D]`` by the mixed angles of ``positions`` ``[..., N, A]``.

    Args:
      x: queries or keys ``[..., N, H, D]`` with this module's H and D.
      positions: ``[..., N, A]`` integer (or float32) grid positions, broadcastable against the
        leading axes of ``x`` (e.g. ``[N, A]`` from :func:`image_positions`).

    Returns:
      ``[..., N, H, D]`` in ``x.dtype``.
    """
    arg_checks.check_min_rank("x", x, 3, "[..., N, H, D]")
    if x.shape[-2] != self.num_heads or x.shape[-1] != self.head_dim:
      raise ValueError(
          f"x must have shape [..., N, {self.num_heads}, {self.head_dim}] (heads, head_dim of "
          f"this RopeMixed), got shape {x.shape}")
    return rope.rotate_with_angles(x, self.angles(positions), layout=self.layout, per_head=True)
