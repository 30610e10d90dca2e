"""Shared strategies and the oracle of the fuzz suite (issue 16).

The contract every public function is fuzzed against:

* eager: a draw either raises ``ValueError`` whose message names the offending argument, or
  returns a finite result equal to a NumPy reference (or satisfying the stated property);
* jit: the same draw gives the eager result, raises the same kind of ``ValueError`` (static
  arguments and shapes are checked at trace time), or, where a traced value cannot raise, the
  documented poison value NaN -- never a finite wrong number.

Shapes come from small fixed sets so that jitted functions compile a handful of times, not once
per draw. The number of draws is the hypothesis profile's (``tests/conftest.py``): a few per
function by default, ``--hypothesis-profile=long`` for a long run.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
import jax.numpy as jnp
import numpy as np

INT_DTYPES = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32)
FLOAT_DTYPES = (jnp.float16, jnp.bfloat16, jnp.float32)
# Positions whose float32 angles are exact (the library's documented range).
EXACT = 2 ** 24

# Hyper-parameter values that must be rejected or handled: zero, negative, NaN, inf, huge.
BAD_FLOATS = (0.0, -1.0, -0.5, math.nan, math.inf, -math.inf, 1e300)
BAD_INTS = (0, -1, -7, 2 ** 40)


def float_hyper(good: st.SearchStrategy) -> st.SearchStrategy:
  """A valid float hyper-parameter from ``good`` or one of :data:`BAD_FLOATS`."""
  return st.one_of(good, st.sampled_from(BAD_FLOATS))


def int_hyper(good: st.SearchStrategy, *, huge: bool = True) -> st.SearchStrategy:
  """A valid int hyper-parameter from ``good`` or one of :data:`BAD_INTS` (or a bool/float).

  ``huge=False`` leaves out ``2**40`` for sizes whose honest answer is an out-of-memory error
  (an embedding dim of 2**40), not a ``ValueError``.
  """
  bad = BAD_INTS if huge else tuple(v for v in BAD_INTS if abs(v) < 2 ** 31)
  return st.one_of(good, st.sampled_from(bad + (True, 2.5)))


@st.composite
def int_arrays(draw, shapes: Sequence[tuple[int, ...]], *, low: int = -EXACT,
               high: int = EXACT, dtypes: Sequence[Any] = INT_DTYPES) -> np.ndarray:
  """Integer arrays of one of ``shapes`` and ``dtypes``, values in ``[low, high]`` clipped to
  the dtype: negative, huge, non-monotone, different per row."""
  dtype = np.dtype(draw(st.sampled_from(dtypes)))
  info = np.iinfo(dtype)
  lo, hi = max(low, int(info.min)), min(high, int(info.max))
  edges = [v for v in (lo, hi, 0, -1, 1) if lo <= v <= hi]
  elements = st.one_of(st.integers(lo, hi), st.sampled_from(edges))
  return draw(hnp.arrays(dtype, draw(st.sampled_from(list(shapes))), elements=elements))


@st.composite
def float_arrays(draw, shapes: Sequence[tuple[int, ...]], *,
                 dtypes: Sequence[Any] = FLOAT_DTYPES) -> jnp.ndarray:
  """Finite float arrays in [-4, 4] of one of ``shapes`` and ``dtypes``."""
  shape = draw(st.sampled_from(list(shapes)))
  dtype = draw(st.sampled_from(list(dtypes)))
  seed = draw(st.integers(0, 2 ** 16))
  values = np.random.default_rng(seed).uniform(-4.0, 4.0, size=shape)
  return jnp.asarray(values, dtype)


def atol_for(dtype: Any) -> float:
  """Absolute tolerance of a result rounded to ``dtype`` (values of magnitude ~1)."""
  return {jnp.dtype(jnp.float16): 2e-3, jnp.dtype(jnp.bfloat16): 1.6e-2}.get(
      jnp.dtype(dtype), 2e-5)


class Outcome:
  """What one call did: ``value`` (an array / pytree) or ``error`` (a ``ValueError``)."""

  def __init__(self, value: Any = None, error: Optional[ValueError] = None):
    self.value = value
    self.error = error


def run(fn: Callable[[], Any], names: Sequence[str]) -> Outcome:
  """Calls ``fn``; a ``ValueError`` must name one of ``names`` (any other exception fails).

  Args:
    fn: the call under test.
    names: argument names; a raised message must mention at least one of them.

  Returns:
    The :class:`Outcome`.
  """
  try:
    value = fn()
  except ValueError as e:
    message = str(e)
    assert any(name in message for name in names), (
        f"ValueError names none of {list(names)}: {message!r}")
    return Outcome(error=e)
  return Outcome(value=value)


def assert_finite(value: Any) -> None:
  """Every floating leaf of ``value`` is finite."""
  for leaf in _leaves(value):
    leaf = np.asarray(leaf, np.float64) if _is_float(leaf) else None
    if leaf is not None:
      assert np.all(np.isfinite(leaf)), f"non-finite values in a successful result: {leaf}"


def assert_close(actual: Any, expected: Any, *, atol: float, rtol: float = 1e-5) -> None:
  """``actual`` equals the reference ``expected`` (same shape; floats within tolerance)."""
  actual_leaves, expected_leaves = _leaves(actual), _leaves(expected)
  assert len(actual_leaves) == len(expected_leaves)
  for a, e in zip(actual_leaves, expected_leaves):
    a = np.asarray(a.astype(jnp.float32) if _is_float(a) else a)
    e = np.asarray(e)
    assert a.shape == e.shape, f"shape {a.shape} != reference {e.shape}"
    if _is_float(a) or _is_float(e):
      np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), atol=atol, rtol=rtol)
    else:
      np.testing.assert_array_equal(a, e)


def check_jit(jit_fn: Callable[[], Any], eager: Outcome, names: Sequence[str], *,
              atol: float, rtol: float = 1e-5) -> None:
  """The jitted call gives the eager result, the same error, or (if eager raised) NaN poison.

  Args:
    jit_fn: the same call through ``jax.jit`` (hyper-parameters traced where the API allows).
    eager: the eager :class:`Outcome` of the same draw.
    names: argument names an error must mention.
    atol: tolerance against the eager value.
    rtol: relative tolerance.
  """
  jitted = run(jit_fn, names)
  if jitted.error is not None:
    assert eager.error is not None, f"jit raised but eager did not: {jitted.error}"
    return
  if eager.error is None:
    assert_close(jitted.value, eager.value, atol=atol, rtol=rtol)
    return
  # Eager raised on a concrete value the traced call could not check: it must be poisoned.
  for leaf in _leaves(jitted.value):
    if _is_float(leaf):
      assert np.all(np.isnan(np.asarray(leaf, np.float32))), (
          f"eager raised {eager.error!r} but jit returned finite values")


def _is_float(x: Any) -> bool:
  return jnp.issubdtype(jnp.result_type(x), jnp.inexact)


def _leaves(value: Any) -> list:
  import jax  # pylint: disable=g-import-not-at-top
  return jax.tree.leaves(value)


def rotate_reference(x: Any, angles: np.ndarray, layout: str, factor: float = 1.0, *,
                     per_head: bool = False) -> np.ndarray:
  """float64 RoPE rotation (NumPy reference shared by the fuzz files).

  Args:
    x: ``[..., L, H, D]`` input; the first ``2 * P`` channels are rotated.
    angles: ``[..., L, P]`` angles (``[..., L, H, P]`` with ``per_head``).
    layout: ``"half"`` (pairs i, i + P) or ``"interleaved"`` (pairs 2i, 2i + 1).
    factor: attention factor multiplying cos and sin.
    per_head: whether ``angles`` has a head axis.

  Returns:
    ``[..., L, H, D]`` float64.
  """
  half = angles.shape[-1]
  x = np.asarray(x.astype(jnp.float32), np.float64)
  cos, sin = np.cos(angles) * factor, np.sin(angles) * factor
  if not per_head:  # [..., L, P] -> [..., L, 1, P]
    cos, sin = cos[..., None, :], sin[..., None, :]
  out = x.copy()
  if layout == "half":
    a, b = x[..., :half], x[..., half:2 * half]
    out[..., :half], out[..., half:2 * half] = a * cos - b * sin, a * sin + b * cos
  else:
    a, b = x[..., 0:2 * half:2], x[..., 1:2 * half:2]
    out[..., 0:2 * half:2], out[..., 1:2 * half:2] = a * cos - b * sin, a * sin + b * cos
  return out
