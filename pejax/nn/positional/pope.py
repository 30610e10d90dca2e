"""PoPE, polar coordinate position embedding (``rotate`` hook; 2D-wide queries and keys).

``rotate`` maps every query and key head of D channels to PoPE's real ``[mu cos, mu sin]`` form
of 2D channels (:func:`pejax.encodings.pope_transform`), so the attention's dot product is
``sum_c softplus(q_c) softplus(k_c) cos((s - t) theta_c + delta_c)``. Each layer learns its own
phase bias ``delta`` per query head and channel, clamped to ``[-2 pi, 0]``.

Two implementation choices, neither changing the paper's score:

* The bias is applied to the *query* phase with the opposite sign (``-delta``): the score only
  sees the phase difference, so this is the same number, and it works with grouped-query
  attention (a per-query-head bias cannot sit on keys shared by a group) and keeps cached keys
  bias-free. x-transformers adds ``+delta`` to the keys; the scores agree (tested).
* The decoder scales logits by ``1 / sqrt(last dim)`` = ``1 / sqrt(2 D)``; queries are
  pre-multiplied by ``sqrt(2)`` so that the logit is ``score / sqrt(D)``, the scale of the paper
  and of x-transformers.

The key dimension changes (``changes_key_dim``), so the KV cache keeps keys before ``rotate``.

References:
  Gopalakrishnan, Csordas, Schmidhuber and Mozer 2025, "Decoupling the 'What' and 'Where' With
  Polar Coordinate Positional Embeddings", arXiv 2509.10534.
"""

from __future__ import annotations

import dataclasses
import math

from flax import nnx
import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings.pope import PHASE_BIAS_RANGE, clamp_phase_bias, pope_inv_freq
from pejax.encodings.pope import pope_transform
from pejax.nn.positional.interface import ModelDims, PEConfig, PositionalEncoding, register_pe

PHASE_BIAS_INITS = ("zero", "uniform")


@dataclasses.dataclass(frozen=True)
class PopeConfig(PEConfig):
  """PoPE hyper-parameters.

  Attributes:
    base: frequency base of ``theta_c = base ** (-c / D)`` (10000).
    phase_bias_init: ``"zero"`` (x-transformers' default) or ``"uniform"`` in ``[-2 pi, 0]``.
  """

  base: float = 10000.0
  phase_bias_init: str = "zero"

  def __post_init__(self):
    arg_checks.check_base("base", self.base)
    arg_checks.check_choice("phase_bias_init", self.phase_bias_init, PHASE_BIAS_INITS)


@register_pe("pope")
class PopePE(PositionalEncoding):
  """Softplus magnitudes from content, phases from position, a learned phase bias per head."""

  config_class = PopeConfig
  translation_invariant = True
  per_layer = True
  content_aware = True
  changes_key_dim = True

  def __init__(self, config: PopeConfig, model: ModelDims, *, rngs: nnx.Rngs):
    super().__init__(config, model, rngs=rngs)
    shape = (model.num_heads, model.head_dim)
    if config.phase_bias_init == "uniform":
      low, high = PHASE_BIAS_RANGE
      init = jax.random.uniform(rngs.params(), shape, jnp.float32, low, high)
    else:
      init = jnp.zeros(shape, jnp.float32)
    self.phase_bias = nnx.Param(init)  # [H, D] delta, clamped to [-2 pi, 0] when used.

  def rotate(self, q: jax.Array, k: jax.Array, q_positions: jax.Array,
             k_positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """PoPE's polar form of queries (with ``-delta``, times ``sqrt(2)``) and keys.

    Returns:
      ``(q, k)``: ``[B, Lq, H, 2 D]`` and ``[B, Lk, K, 2 D]`` in the input dtypes.
    """
    inv_freq = pope_inv_freq(self.head_dim, base=self.config.base)
    delta = clamp_phase_bias(self.phase_bias[...])
    q_out = pope_transform(q.astype(jnp.float32), q_positions, inv_freq, -delta)
    q_out = (q_out * jnp.float32(math.sqrt(2.0))).astype(q.dtype)
    return q_out, pope_transform(k, k_positions, inv_freq)
