"""ComRoPE on text: trainable commuting angle matrices (``rotate`` hook).

ComRoPE parametrizes each block's generators so that they commute (axis partition, ``ap``, or
linearly dependent, ``ld``; :mod:`pejax.encodings.liere`), which makes ``R(p)^T R(p') =
R(p' - p)`` hold for positions of any dimension. On text (one position axis) both variants
rotate block j by ``expm(p B_j)`` with ``B_j = P_j - P_j^T`` (``ld`` times a learned per-block
scale ``theta_j``): the same family as 1-D LieRE (``--pe=liere``), parametrized as ComRoPE's code
does (``P - P^T`` instead of LieRE's upper triangle, per-block ``theta`` for ``ld``). Registered
so that ComRoPE-trained heads and settings are reachable from the decoder; its difference from
LieRE is on image / video grids (``experiments/image_grid``).

Capabilities: **translation-invariant** (by construction, in any dimension), per layer (one set
per layer and key/value head, as the authors' attention layers; ``ld``'s ``theta`` is shared by
the heads, as in their code).

References:
  Yu et al., "ComRoPE: Scalable and Robust Rotary Position Embedding Parameterized by Trainable
    Commuting Angle Matrices", CVPR 2025, arXiv:2506.03737; code:
    https://github.com/Longin-Yu/ComRoPE.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from pejax.encodings import arg_checks
from pejax.nn.positional.interface import PEConfig, register_pe
from pejax.nn.positional.liere import BlockRotationChecks, BlockRotationPE

VARIANTS = ("ld", "ap")


@dataclasses.dataclass(frozen=True)
class ComRoPEConfig(BlockRotationChecks, PEConfig):
  """ComRoPE hyper-parameters.

  Attributes:
    kind: ``"ld"`` (linearly dependent: one skew matrix per block, a learned scale per axis and
      block) or ``"ap"`` (axis partition: block j turns with axis ``j % A``).
    block_size: b, the angle-matrix block size in ``[2, head_dim]`` (the ``head_dim % b`` last
      channels pass through); 2 is RoPE with learned frequencies.
    init: ``"rope"`` (RoPE with ``base``, then learned) or ``"random"`` (the authors':
      ``P ~ N(0, init_scale^2)``, ``theta ~ N(0, 1)``).
    base: RoPE base theta of ``init="rope"``.
    init_scale: standard deviation of ``P`` with ``init="random"`` (the authors' ``init_std``).
    position_table: ``None`` or P, as :class:`~pejax.nn.positional.liere.LieREConfig`'s:
      rotations gathered from a table of positions ``[0, P)`` (faster with per-row positions).
  """

  kind: str = "ld"
  block_size: int = 8
  init: str = "rope"
  base: float = 10000.0
  init_scale: float = 1.0
  position_table: Optional[int] = None

  def __post_init__(self):
    arg_checks.check_choice("kind", self.kind, VARIANTS)
    self.check_block_rotation_fields()

  @property
  def variant(self) -> str:
    """The :mod:`pejax.encodings.liere` variant name (``"comrope_ld"`` / ``"comrope_ap"``)."""
    return f"comrope_{self.kind}"


@register_pe("comrope")
class ComRoPEPE(BlockRotationPE):
  """ComRoPE: trainable commuting angle matrices per layer and key/value head."""

  config_class = ComRoPEConfig
