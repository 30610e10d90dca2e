"""A position bias as a tile function of positions: what a fused attention kernel computes inside.

Axes: H heads, bq / bk query / key tile rows, P parameters per head.

A PE's ``bias(q_positions, k_positions)`` returns ``[B|1, H, Lq, Lk]`` arrays and may gather from
a table (T5) or run an einsum (FIRE): fine for XLA, not callable inside a Pallas kernel, whose
body sees one head and one ``[bq, bk]`` tile and cannot gather. A kernel bias rewrites it as

  ``function(params_h, q_pos [bq, 1] float32, k_pos [1, bk] float32, **options) -> [bq, bk]``,

a function of the head's parameters as *scalars* (``params_h``: P Python-indexable values, read
one by one from a ``[H, P]`` float32 array in the kernel's scalar memory), of the tile's positions
and of static hyper-parameters (``options``), with elementwise operations only (compares and
selects instead of a table gather, an unrolled MLP instead of an einsum). Because the parameters
are scalars, a kernel's backward pass gets their gradient from ``jax.vjp`` of the same function
(a sum over the tile per parameter), accumulated tile by tile: no ``[H, N, N]`` bias or bias
gradient is materialized.

A :class:`KernelBias` pairs the static :class:`TileBias` (function, sizes and options: hashable,
part of a jit cache key) with its ``[H, P]`` parameter array (differentiable: its gradient flows
back to the PE's own parameters). A positional encoding describes its bias this way in its own
``kernel_bias()`` hook (:class:`pejax.nn.PositionalEncoding`); the encodings of this package
provide the built-in ones next to their dense bias (``alibi_kernel_bias``, ``t5_kernel_bias``,
``kerple_kernel_bias``, ``sandwich_kernel_bias``, ``fire_kernel_bias``), each equal to the dense
form to float32 rounding (tested in ``tests/encodings/test_kernel_bias.py``).

Positions enter as float32 (exact below 2^24, as in the PEs' own bias code), so differences never
overflow int32.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax

from pejax.encodings import arg_checks

Array = jax.Array
TileFunction = Callable[..., Array]


@dataclasses.dataclass(frozen=True)
class TileBias:
  """Static description of an in-kernel bias (hashable).

  Attributes:
    function: ``function(params, q_pos, k_pos, **options) -> [bq, bk] float32``: the bias of one
      head on one tile; ``params`` are that head's P float32 scalars, ``q_pos`` float32
      ``[bq, 1]``, ``k_pos`` float32 ``[1, bk]``. Elementwise operations only. A module-level
      function (compared by identity, so equal descriptions share one compiled kernel).
    num_params: P, parameters per head (the row length of the ``[H, P]`` parameter array).
    learnable: whether a kernel's backward pass returns a gradient for the parameters.
    options: static hyper-parameters as ``(name, value)`` pairs of hashable values, passed to
      ``function`` as keyword arguments.
  """

  function: TileFunction
  num_params: int
  learnable: bool = False
  options: tuple[tuple[str, Any], ...] = ()

  def __post_init__(self):
    if not callable(self.function):
      raise ValueError(f"function must be callable, got {self.function!r}")
    arg_checks.check_positive_int("num_params", self.num_params)
    if not isinstance(self.options, tuple) or not all(
        isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)
        for pair in self.options):
      raise ValueError(f"options must be a tuple of (name, value) pairs, got {self.options!r}")
    try:
      hash(self.options)
    except TypeError as e:
      raise ValueError(f"options must hold hashable values, got {self.options!r}") from e

  @property
  def name(self) -> str:
    """The tile function's name (for messages)."""
    return getattr(self.function, "__name__", repr(self.function))

  def option(self, name: str) -> Any:
    """The static hyper-parameter ``name``.

    Args:
      name: an option name (e.g. ``"num_buckets"``).

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
    return self.function(params, q_pos, k_pos, **dict(self.options))


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
