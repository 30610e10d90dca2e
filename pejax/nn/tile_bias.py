"""PE biases as tile functions of positions, for kernels that compute the bias inside the kernel.

Axes: H heads, bq / bk query / key tile rows, P parameters per head, NB T5 buckets, W FIRE MLP
width.

A PE's ``bias(q_positions, k_positions)`` hook returns ``[B|1, H, Lq, Lk]`` arrays and may
gather from a table (T5) or run an einsum (FIRE): fine for XLA, not callable inside a Pallas
kernel, whose body sees one head and one ``[bq, bk]`` tile and cannot gather. Here each bias
is rewritten as

  ``tile(params_h, q_pos [bq, 1] float32, k_pos [1, bk] float32) -> [bq, bk] float32``,

a function of the head's parameters as *scalars* (``params_h``: P Python-indexable values, read
one by one from a ``[H, P]`` float32 array in the kernel's scalar memory) and of the tile's
positions, with elementwise operations only (compares and selects instead of a T5 table
gather, an unrolled MLP for FIRE). Because the parameters are scalars, the kernel's backward
pass gets their gradient from ``jax.vjp`` of the same function (a sum over the tile per
parameter), accumulated tile by tile: no ``[H, N, N]`` bias or bias gradient is materialized.

A :class:`KernelBias` pairs the static :class:`TileBias` (kind and hyper-parameters, hashable)
with its ``[H, P]`` parameter array (differentiable: its gradient flows back to the PE's own
parameters, e.g. a T5 table or KERPLE's raw r1, r2). :func:`kernel_bias_from_pe` builds one
from a registered PE instance; every formula equals the PE's own ``bias`` hook (same float32
operations; T5 buckets equal to Hugging Face's, tested in ``tests/nn/test_pallas_attention.py``).

Positions enter as float32 (exact below 2^24, as in the PEs' own bias code), so differences
never overflow int32.

References:
  Press et al. 2022 (ALiBi), arXiv 2108.12409; Raffel et al. 2020 (T5), arXiv 1910.10683;
  Chi et al. 2022 (KERPLE), arXiv 2205.09921; Chi et al. 2023 (Sandwich), arXiv 2212.10356;
  Li et al. 2024 (FIRE), arXiv 2310.04418.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks
from pejax.encodings.alibi import alibi_slopes
from pejax.encodings.sandwich import sandwich_head_scales
from pejax.encodings.t5_buckets import check_bucket_settings

Array = jax.Array

BIAS_KINDS = ("alibi", "t5", "kerple_log", "kerple_power", "sandwich", "fire")


@dataclasses.dataclass(frozen=True)
class TileBias:
  """Static description of an in-kernel bias: its kind and hyper-parameters (hashable).

  Attributes:
    kind: one of ``BIAS_KINDS``.
    num_params: P, parameters per head (the row length of the ``[H, P]`` parameter array).
    learnable: whether the kernel's backward pass returns a gradient for the parameters.
    options: kind-specific static hyper-parameters as ``(name, value)`` pairs.
  """

  kind: str
  num_params: int
  learnable: bool
  options: tuple[tuple[str, Any], ...] = ()

  def option(self, name: str) -> Any:
    """The static hyper-parameter ``name``.

    Args:
      name: an option name of this kind (e.g. ``"num_buckets"``).

    Returns:
      Its value.
    """
    return dict(self.options)[name]

  def __call__(self, params: Sequence[Any], q_pos: Array, k_pos: Array) -> Array:
    """The bias of one head on one tile.

    Args:
      params: P float32 scalars, this head's parameters.
      q_pos: float32 ``[bq, 1]`` query positions.
      k_pos: float32 ``[1, bk]`` key positions.

    Returns:
      float32 ``[bq, bk]``.
    """
    return _TILE_FUNCTIONS[self.kind](self, params, q_pos, k_pos)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KernelBias:
  """An in-kernel bias: the static tile function and its per-head parameters (a pytree).

  Attributes:
    tile: the :class:`TileBias` (static, part of the jit cache key).
    params: float32 ``[H, P]`` parameters, row h for head h (differentiable).
  """

  tile: TileBias = dataclasses.field(metadata=dict(static=True))
  params: Array


# Tile functions. --------------------------------------------------------------------------------


def _alibi(tile: TileBias, params, q_pos, k_pos):
  # alibi_bias: slope * (k - q) (causal) or slope * min(k - q, q - k) (symmetric), float32.
  offset = k_pos - q_pos
  if not tile.option("causal"):
    offset = jnp.minimum(offset, q_pos - k_pos)
  return params[0] * offset


def _t5(tile: TileBias, params, q_pos, k_pos):
  # t5_relative_position_bucket of k - q (HF's float32 op order), then a select per bucket
  # instead of the table gather. The distance is float32, exact below 2^24, where every
  # distance >= max_distance has long saturated into the last bucket: no int32 wrap-around.
  num_buckets = tile.option("num_buckets")
  max_distance = tile.option("max_distance")
  bidirectional = tile.option("bidirectional")
  relative = k_pos - q_pos  # [bq, bk]
  per_direction = num_buckets // 2 if bidirectional else num_buckets
  max_exact = per_direction // 2
  if bidirectional:
    offset = jnp.where(relative > 0, per_direction, 0)
    distance = jnp.abs(relative)
  else:
    offset = 0
    distance = -jnp.minimum(relative, 0.0)
  is_small = distance < max_exact
  safe = jnp.maximum(distance, float(max_exact))
  log_ratio = jnp.log(safe / jnp.float32(max_exact))
  scaled = (log_ratio / jnp.float32(math.log(max_distance / max_exact))
            * jnp.float32(per_direction - max_exact))
  large = jnp.minimum(max_exact + scaled.astype(jnp.int32), per_direction - 1)
  small = jnp.minimum(distance, float(max_exact)).astype(jnp.int32)
  bucket = offset + jnp.where(is_small, small, large)
  out = jnp.zeros(relative.shape, jnp.float32)
  for b in range(num_buckets):
    out = jnp.where(bucket == b, params[b], out)
  return out


def _kerple_log(tile: TileBias, params, q_pos, k_pos):
  del tile
  distance = jnp.abs(q_pos - k_pos)
  return -params[0] * jnp.log1p(params[1] * distance)


def _kerple_power(tile: TileBias, params, q_pos, k_pos):
  del tile
  distance = jnp.abs(q_pos - k_pos)
  positive = distance > 0
  safe_log = jnp.log(jnp.where(positive, distance, 1.0))
  return -params[0] * jnp.where(positive, jnp.exp(params[1] * safe_log), 0.0)


def _sandwich(tile: TileBias, params, q_pos, k_pos):
  offset = q_pos - k_pos
  inner = jnp.zeros(offset.shape, jnp.float32)
  for frequency in tile.option("inv_freq"):
    inner = inner + jnp.cos(offset * jnp.float32(frequency))
  return params[0] * inner


def _fire(tile: TileBias, params, q_pos, k_pos):
  # Row layout: kernel_1 [W], bias_1 [W], kernel_2[:, h] [W], bias_2[h], |c|, threshold.
  width = tile.option("mlp_width")
  c, threshold = params[3 * width + 1], params[3 * width + 2]
  distance = jnp.abs(q_pos - k_pos)
  normalizer = jnp.log1p(c * jnp.maximum(q_pos, threshold)) + jnp.float32(tile.option("eps"))
  x = jnp.log1p(c * distance) / normalizer
  out = jnp.zeros(x.shape, jnp.float32) + params[3 * width]
  for w in range(width):
    hidden = jnp.maximum(x * params[w] + params[width + w], 0.0)
    out = out + hidden * params[2 * width + w]
  return out


_TILE_FUNCTIONS = {
    "alibi": _alibi,
    "t5": _t5,
    "kerple_log": _kerple_log,
    "kerple_power": _kerple_power,
    "sandwich": _sandwich,
    "fire": _fire,
}


# Constructors. ----------------------------------------------------------------------------------


def alibi_kernel_bias(num_heads: int, *, causal: bool = True) -> KernelBias:
  """ALiBi's ``slope_h * (k - q)`` (or ``-slope_h * |q - k|``) as an in-kernel bias.

  Args:
    num_heads: H; the slopes are :func:`pejax.alibi_slopes`.
    causal: the causal form (``AlibiPE``'s) or the symmetric one.

  Returns:
    A :class:`KernelBias` with ``[H, 1]`` slopes (no gradient).
  """
  slopes = alibi_slopes(num_heads)[:, None]
  return KernelBias(TileBias("alibi", 1, False, (("causal", bool(causal)),)), slopes)


def t5_kernel_bias(table: Array, *, num_buckets: int, max_distance: int,
                   bidirectional: bool) -> KernelBias:
  """T5's learned bias of the bucket of ``k - q`` as an in-kernel bias.

  Args:
    table: float ``[NB, H]`` bucket table (``T5RelativeBias.table``).
    num_buckets: NB.
    max_distance: distance of the last bucket.
    bidirectional: encoder-style buckets for later keys.

  Returns:
    A :class:`KernelBias` with ``[H, NB]`` parameters (learnable).

  Raises:
    ValueError: for invalid bucket settings or a table whose first dim is not ``num_buckets``.
  """
  num_buckets, max_distance = check_bucket_settings(
      num_buckets=num_buckets, max_distance=max_distance, bidirectional=bidirectional)
  if jnp.ndim(table) != 2 or jnp.shape(table)[0] != num_buckets:
    raise ValueError(f"table must have shape [num_buckets={num_buckets}, H], got "
                     f"{jnp.shape(table)}")
  options = (("num_buckets", num_buckets), ("max_distance", max_distance),
             ("bidirectional", bool(bidirectional)))
  return KernelBias(TileBias("t5", num_buckets, True, options),
                    jnp.asarray(table, jnp.float32).T)


def kerple_kernel_bias(r1: Array, r2: Array, *, kind: str) -> KernelBias:
  """KERPLE's ``-r1 log(1 + r2 |q - k|)`` or ``-r1 |q - k|^r2`` as an in-kernel bias.

  Args:
    r1: float ``[H]`` positive scales.
    r2: float ``[H]`` positive shapes (the power kernel's exponent, <= 2).
    kind: ``"log"`` or ``"power"``.

  Returns:
    A :class:`KernelBias` with ``[H, 2]`` parameters (learnable).

  Raises:
    ValueError: for another ``kind`` or ``r1`` / ``r2`` not of one ``[H]`` shape.
  """
  arg_checks.check_choice("kind", kind, ("log", "power"))
  if jnp.ndim(r1) != 1 or jnp.shape(r1) != jnp.shape(r2):
    raise ValueError(f"r1 and r2 must both have shape [H], got {jnp.shape(r1)} and "
                     f"{jnp.shape(r2)}")
  params = jnp.stack([jnp.asarray(r1, jnp.float32), jnp.asarray(r2, jnp.float32)], axis=1)
  return KernelBias(TileBias(f"kerple_{kind}", 2, True), params)


def sandwich_kernel_bias(num_heads: int, *, dim: int = 128, base: float = 10000.0) -> KernelBias:
  """Sandwich's ``(H / 8h) sum_i cos((q - k) w_i)`` as an in-kernel bias.

  The ``dim / 2`` cosines are evaluated per logit inside the kernel (as the dense path does per
  bias entry): the costliest of the in-kernel biases.

  Args:
    num_heads: H.
    dim: even d_bar of the sinusoids.
    base: wavelength base (> 1).

  Returns:
    A :class:`KernelBias` with ``[H, 1]`` head scales (no gradient).

  Raises:
    ValueError: for an odd ``dim`` or a ``base`` <= 1.
  """
  dim = arg_checks.check_even("dim", dim)
  base = arg_checks.check_positive_float("base", base)
  if base <= 1.0:
    raise ValueError(f"base must be > 1, got {base!r}")
  inv_freq = np.asarray(base ** -(np.arange(0, dim, 2, dtype=np.float64) / dim), np.float32)
  options = (("inv_freq", tuple(float(f) for f in inv_freq)),)
  return KernelBias(TileBias("sandwich", 1, False, options),
                    sandwich_head_scales(num_heads)[:, None])


def fire_kernel_bias(kernel_1: Array, bias_1: Array, kernel_2: Array, bias_2: Array,
                     c: Array, threshold: Array, *, eps: float) -> KernelBias:
  """FIRE's MLP of ``psi(|i - j|) / (psi(max(L, i)) + eps)`` as an in-kernel bias.

  Args:
    kernel_1: float ``[W]`` first-layer weights (input width 1).
    bias_1: float ``[W]`` first-layer biases.
    kernel_2: float ``[W, H]`` second-layer weights.
    bias_2: float ``[H]`` second-layer biases.
    c: float scalar, the (positive) log-transform scale, ``|c|`` of the PE.
    threshold: float scalar threshold L.
    eps: the normalizer's constant.

  Returns:
    A :class:`KernelBias` with ``[H, 3W + 3]`` parameters (learnable): row h holds
    ``kernel_1, bias_1, kernel_2[:, h], bias_2[h], c, threshold``.

  Raises:
    ValueError: for inconsistent shapes.
  """
  width = jnp.shape(kernel_1)[0] if jnp.ndim(kernel_1) == 1 else -1
  if (width < 1 or jnp.shape(bias_1) != (width,) or jnp.ndim(kernel_2) != 2
      or jnp.shape(kernel_2)[0] != width or jnp.shape(bias_2) != jnp.shape(kernel_2)[1:]):
    raise ValueError(
        "FIRE parameters must be kernel_1 [W], bias_1 [W], kernel_2 [W, H], bias_2 [H], got "
        f"{jnp.shape(kernel_1)}, {jnp.shape(bias_1)}, {jnp.shape(kernel_2)}, "
        f"{jnp.shape(bias_2)}")
  num_heads = jnp.shape(kernel_2)[1]
  shared = jnp.concatenate([jnp.asarray(kernel_1, jnp.float32), jnp.asarray(bias_1, jnp.float32)])
  params = jnp.concatenate([
      jnp.broadcast_to(shared[None, :], (num_heads, 2 * width)),
      jnp.asarray(kernel_2, jnp.float32).T,
      jnp.asarray(bias_2, jnp.float32)[:, None],
      jnp.broadcast_to(jnp.asarray(c, jnp.float32).reshape((1, 1)), (num_heads, 1)),
      jnp.broadcast_to(jnp.asarray(threshold, jnp.float32).reshape((1, 1)), (num_heads, 1)),
  ], axis=1)
  options = (("mlp_width", int(width)), ("eps", float(eps)))
  return KernelBias(TileBias("fire", 3 * width + 3, True, options), params)


def kernel_bias_from_pe(pe: Any) -> Optional[KernelBias]:
  """The in-kernel form of a PE's position bias, built from its current parameters.

  Gradients with respect to the returned ``params`` flow back to the PE's own parameters
  (T5 table, KERPLE raw r1 / r2, FIRE MLP, c and threshold), so differentiating a loss through
  a kernel that takes this bias trains the PE as the dense path does.

  Args:
    pe: a :class:`~pejax.nn.positional.interface.PositionalEncoding` instance.

  Returns:
    A :class:`KernelBias`, or ``None`` when the PE has no position bias (NoPE, RoPE, ...).

  Raises:
    ValueError: naming the PE when it has a bias no tile function describes (a user PE), or a
      content-aware bias / logit hook (FoX, Shaw, CoPE), which needs per-token features or
      whole rows of logits.
  """
  # Imported here: pejax.nn.positional imports the attention modules, not the other way round.
  from pejax.nn.positional.alibi import AlibiPE
  from pejax.nn.positional.fire import FirePE
  from pejax.nn.positional.kerple import KerplePE
  from pejax.nn.positional.sandwich import SandwichPE
  from pejax.nn.positional.t5 import T5BiasPE

  if pe.has_content_bias or pe.has_logits:
    raise ValueError(f"pe={pe.name!r} has a content-aware bias or logit hook, which the "
                     "in-kernel bias cannot compute from positions alone")
  if not pe.has_bias:
    return None
  if isinstance(pe, AlibiPE):
    return alibi_kernel_bias(pe.num_heads, causal=True)
  if isinstance(pe, T5BiasPE):
    rel = pe.relative_bias
    return t5_kernel_bias(rel.table[...], num_buckets=rel.num_buckets,
                          max_distance=rel.max_distance, bidirectional=rel.bidirectional)
  if isinstance(pe, KerplePE):
    r1, r2 = pe.kernel_params()
    return kerple_kernel_bias(r1, r2, kind=pe.config.kind)
  if isinstance(pe, SandwichPE):
    return sandwich_kernel_bias(pe.num_heads, dim=pe.config.dim, base=pe.config.base)
  if isinstance(pe, FirePE):
    return fire_kernel_bias(pe.kernel_1[...], pe.bias_1[...], pe.kernel_2[...], pe.bias_2[...],
                            jnp.abs(pe.c[...]), pe.threshold(), eps=pe.config.eps)
  raise ValueError(f"pe={pe.name!r} ({type(pe).__name__}) has a bias without an in-kernel tile "
                   f"function; kernels serve {BIAS_KINDS}")


def pe_kernel_servable(pe: Any) -> bool:
  """Whether :func:`kernel_bias_from_pe` can describe ``pe`` (no bias counts as servable).

  Args:
    pe: a positional encoding instance.

  Returns:
    True when the PE has no bias hook or one of the ``BIAS_KINDS``, and no content-aware bias
    or logit hook.
  """
  if pe.has_content_bias or pe.has_logits:
    return False
  if not pe.has_bias:
    return True
  from pejax.nn.positional.alibi import AlibiPE
  from pejax.nn.positional.fire import FirePE
  from pejax.nn.positional.kerple import KerplePE
  from pejax.nn.positional.sandwich import SandwichPE
  from pejax.nn.positional.t5 import T5BiasPE
  return isinstance(pe, (AlibiPE, T5BiasPE, KerplePE, SandwichPE, FirePE))
