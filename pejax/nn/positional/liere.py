"""LieRE on text: learned skew-symmetric generators, ``R(p) = expm(p G)`` (``rotate`` hook).

Each layer (``per_layer``, as LieRE's scripts train it: one set per layer and head) owns
generators ``G`` of M = D // b blocks of b x b, one set per key/value head (query heads of a
grouped-query group share their key head's rotation, so ``q^T R(p_q)^T R(p_k) k`` pairs the
same generators). Queries and keys are rotated by ``expm(position * G)`` block by block
(:mod:`pejax.encodings.liere`).

Capabilities: **translation-invariant**. With 1-D positions a block has a single generator,
which commutes with itself, so ``R(p)^T R(p') = R(p' - p)`` and the logits depend only on
``k - q``, whatever was learned. (LieRE on 2-D / 3-D positions, with one generator per axis, is
not translation-invariant unless its generators commute: see ComRoPE, ``--pe=comrope``.)

Initialization: ``init="rope"`` (default) starts as RoPE with ``base`` (interleaved pairs; the
RoPE generators are LieRE generators, exactly), then everything in every block is learned;
``init="random"`` is the authors' ``U[0, 2 pi)`` upper triangle, meant for positions normalized
to [0, 1] (its rotations per integer position are mostly high-frequency).

Cost: a ``b x b`` matrix exponential per token, key/value head and block in every layer (about
``28 b^3`` flops each, see :mod:`pejax.encodings.liere`); keys entering a KV cache are stored
unrotated and re-rotated at each step, like every ``rotate`` PE. The default ``block_size=8``
keeps that near RoPE's cost on small heads; LieRE's own runs use the whole head (64).

References:
  Ostmeier et al., "LieRE: Lie Rotational Positional Encodings", ICML 2025, arXiv:2406.10322.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

from flax import nnx
import jax

from pejax.encodings import arg_checks
from pejax.encodings import liere
from pejax.encodings import liere_rotation
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, register_pe


class BlockRotationChecks:
  """The checks of the fields LieRE and ComRoPE share (``block_size``, ``init``, ``base``,
  ``init_scale``, ``position_table``); a mixin without fields, so each config keeps its own
  field order."""

  def check_block_rotation_fields(self) -> None:
    """Raises ``ValueError`` naming the first shared field that is out of range."""
    arg_checks.check_positive_int("block_size", self.block_size)
    if self.block_size < 2:
      raise ValueError(f"block_size must be at least 2, got {self.block_size}")
    arg_checks.check_choice("init", self.init, liere_rotation.INITS)
    if self.init == "rope" and self.block_size % 2:
      raise ValueError(f"block_size must be even with init='rope', got {self.block_size}")
    arg_checks.check_base("base", self.base)
    arg_checks.check_positive_float("init_scale", self.init_scale)
    if self.position_table is not None:
      arg_checks.check_positive_int("position_table", self.position_table)

  def check_model(self, model: ModelDims) -> None:
    """Raises ``ValueError`` naming ``block_size`` unless it fits the head dim.

    Args:
      model: the decoder config (``head_dim``).
    """
    liere_rotation.check_block_size(self.block_size, model.head_dim, init=self.init)


@dataclasses.dataclass(frozen=True)
class LieREConfig(BlockRotationChecks, PEConfig):
  """LieRE hyper-parameters.

  Attributes:
    block_size: b, the generator block size in ``[2, head_dim]`` (2: learned RoPE frequencies;
      the head dim: one dense generator, LieRE's default in its code); the ``head_dim % b``
      last channels pass through.
    init: ``"rope"`` (RoPE with ``base``, then learned) or ``"random"`` (the authors').
    base: RoPE base theta of ``init="rope"``.
    init_scale: scale of ``init="random"`` (``U[0, 2 pi init_scale)``).
    position_table: ``None`` (each position's rotation computed) or P: positions must lie in
      ``[0, P)`` and the rotations are gathered from a table of P computed once per call (the
      same numbers; ~9x faster when every row has its own positions, as with randomized
      positions); a position outside gives NaN logits.
  """

  block_size: int = 8
  init: str = "rope"
  base: float = 10000.0
  init_scale: float = 1.0
  position_table: Optional[int] = None

  variant: ClassVar[str] = "liere"

  def __post_init__(self):
    self.check_block_rotation_fields()


class BlockRotationPE(PositionalEncoding):
  """Shared hook of LieRE and ComRoPE on 1-D positions; the config picks the variant."""

  translation_invariant = True  # 1-D: one generator per block commutes with itself.
  per_layer = True

  def __init__(self, config, model: ModelDims, *, rngs: nnx.Rngs):
    super().__init__(config, model, rngs=rngs)
    config.check_model(model)
    self.rotation = liere_rotation.LieRERotation(
        model.head_dim, getattr(model, "kv_heads", model.num_heads), num_axes=1,
        block_size=config.block_size, variant=config.variant, init=config.init,
        base=config.base, init_scale=config.init_scale, rngs=rngs)

  def rotate(self, q: jax.Array, k: jax.Array, q_positions: jax.Array,
             k_positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Rotates queries and keys by ``expm(position * G)``, block by block.

    Args:
      q: ``[B, Lq, H, D]`` queries.
      k: ``[B, Lk, K, D]`` keys (query head h uses key head ``h // (H / K)``'s generators).
      q_positions: int ``[B | 1, Lq]``.
      k_positions: int ``[B | 1, Lk]``.

    Returns:
      ``(q, k)`` rotated, shapes and dtypes unchanged.
    """
    generators = self.rotation.generators()
    squarings = self.rotation.max_squarings
    table = self.config.position_table
    q_rot = liere.liere_rotations(q_positions[..., None], generators, max_squarings=squarings,
                                  table_size=table)
    k_rot = q_rot if k_positions is q_positions else liere.liere_rotations(
        k_positions[..., None], generators, max_squarings=squarings, table_size=table)
    return (liere.apply_block_rotations(q, q_rot), liere.apply_block_rotations(k, k_rot))


@register_pe("liere")
class LieREPE(BlockRotationPE):
  """LieRE: learned ``b x b`` skew-symmetric generators per layer and key/value head."""

  config_class = LieREConfig
