"""Fuzz properties of the N-D and graph encodings: 2-D / N-D sinusoids, grid positions, axial
RoPE, M-RoPE, RoPE-Mixed, Laplacian and random-walk encodings (issue 16).

Each draw raises ``ValueError`` naming the bad argument, or gives a finite result equal to a
NumPy reference (or, for eigenvectors, satisfying the eigen-equation).
"""

from __future__ import annotations

import math

from hypothesis import example
from hypothesis import given
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np

import fuzz_support as fz
from pejax.encodings import axial_rope
from pejax.encodings import graph_laplacian
from pejax.encodings import graph_random_walk
from pejax.encodings import mrope
from pejax.encodings import position_grids
from pejax.encodings import rope_mixed
from pejax.encodings import sinusoidal_2d

_GRID_SHAPES = ((6, 2), (2, 6, 3), (6,))
_GRID_DTYPES = (np.int8, np.int32, np.int64, np.uint32)


def _sinusoid(positions: np.ndarray, dim: int, base: float) -> np.ndarray:
  inv_freq = (base ** -(np.arange(0, dim, 2, dtype=np.float64) / dim)).astype(np.float32)
  angles = (positions.astype(np.float32)[..., None] * inv_freq).astype(np.float64)
  return np.stack([np.sin(angles), np.cos(angles)], -1).reshape(positions.shape + (dim,))


# --------------------------------------------------------------------------------------------
# N-D sinusoids and grids.

@given(positions=fz.int_arrays(_GRID_SHAPES, low=-2 ** 40, high=2 ** 40, dtypes=_GRID_DTYPES),
       dim=fz.int_hyper(st.sampled_from([4, 8, 12]), huge=False),
       base=fz.float_hyper(st.sampled_from([10000.0, 100.0])),
       dtype=st.sampled_from(fz.FLOAT_DTYPES), two_d=st.booleans())
@example(positions=np.full((6, 2), 2 ** 31, np.int64), dim=4, base=10000.0, dtype=jnp.float32,
         two_d=False)  # wrapped to -2**31 silently: the sign of every sin flipped
def test_sinusoidal_nd_embedding(positions, dim, base, dtype, two_d):
  fn = sinusoidal_2d.sinusoidal_2d_embedding if two_d else sinusoidal_2d.sinusoidal_nd_embedding
  eager = fz.run(lambda: fn(positions, dim, base=base, dtype=dtype), ("positions", "dim", "base"))
  if eager.error is not None:
    return
  axes = positions.shape[-1]
  block = dim // axes
  expected = np.concatenate([_sinusoid(positions[..., a], block, base) for a in range(axes)], -1)
  fz.assert_finite(eager.value)
  fz.assert_close(eager.value, expected, atol=fz.atol_for(dtype))


@given(grid=st.lists(fz.int_hyper(st.integers(1, 3), huge=False), min_size=0, max_size=3),
       scale=st.none() | fz.float_hyper(st.sampled_from([0.5, 2.0])) | st.just((0.5, 0.25)))
def test_grid_positions(grid, scale):
  eager = fz.run(lambda: position_grids.grid_positions(tuple(grid), scale=scale),
                 ("grid_shape", "scale"))
  if eager.error is not None:
    return
  expected = np.indices(grid).reshape(len(grid), -1).T
  if scale is None:
    assert eager.value.dtype == jnp.int32
    np.testing.assert_array_equal(eager.value, expected)
  else:
    factors = np.broadcast_to(np.asarray(scale, np.float32), (len(grid),))
    fz.assert_close(eager.value, expected.astype(np.float32) * factors, atol=0, rtol=1e-6)
  if len(grid) == 2:
    np.testing.assert_array_equal(position_grids.image_positions(*grid, scale=scale),
                                  eager.value)
    if scale is None:
      fz.assert_close(sinusoidal_2d.sinusoidal_2d_table(*grid, 8),
                      sinusoidal_2d.sinusoidal_2d_embedding(eager.value, 8), atol=0)
  if len(grid) == 3:
    np.testing.assert_array_equal(position_grids.video_positions(*grid, scale=scale),
                                  eager.value)


@given(train=st.lists(fz.int_hyper(st.integers(1, 8), huge=False), min_size=1, max_size=2),
       new=st.lists(fz.int_hyper(st.integers(1, 8), huge=False), min_size=1, max_size=2),
       method=st.sampled_from(["bilinear", "nearest", "bogus"]))
def test_interpolation_scale_and_resize(train, new, method):
  names = ("train_grid", "new_grid", "old_grid", "table", "method")
  scale = fz.run(lambda: position_grids.interpolation_scale(tuple(train), tuple(new)), names)
  if scale.error is None:
    np.testing.assert_allclose(scale.value, np.asarray(train) / np.asarray(new), rtol=1e-12)
  table = jnp.asarray(np.random.default_rng(0).normal(size=(math.prod(
      [t for t in train if isinstance(t, int) and 0 < t < 99]) or 1, 3)), jnp.float32)
  resized = fz.run(lambda: position_grids.resize_grid_table(table, tuple(train), tuple(new),
                                                            method=method), names)
  if resized.error is None:
    fz.assert_finite(resized.value)
    assert resized.value.shape == (math.prod(new), 3)
    if tuple(train) == tuple(new):
      fz.assert_close(resized.value, table, atol=1e-6)


# --------------------------------------------------------------------------------------------
# Axial RoPE, M-RoPE, RoPE-Mixed.

@given(head_dim=fz.int_hyper(st.sampled_from([4, 8, 12]), huge=False),
       num_axes=fz.int_hyper(st.sampled_from([1, 2, 3]), huge=False),
       split=st.none() | st.sampled_from([(2, 2), (4, 2), (2, 2, 2), (3, 1), (0, 4), (8, 8)]),
       base=fz.float_hyper(st.sampled_from([100.0, 10000.0])),
       positions=fz.int_arrays(((6, 2), (6, 3)), low=-2 ** 20, high=2 ** 20,
                               dtypes=_GRID_DTYPES),
       layout=st.sampled_from(["half", "interleaved"]),
       factor=fz.float_hyper(st.sampled_from([1.0, 0.7])), seed=st.integers(0, 50))
def test_axial_rope(head_dim, num_axes, split, base, positions, layout, factor, seed):
  names = ("head_dim", "num_axes", "split", "base", "positions", "x", "inv_freqs",
           "attention_factor")
  parts = fz.run(lambda: axial_rope.axial_split(head_dim, num_axes, split=split), names)
  if parts.error is not None:
    return
  parts = parts.value
  assert len(parts) == num_axes and sum(parts) <= head_dim
  assert all(p > 0 and p % 2 == 0 for p in parts)
  if split is None:
    assert sum(parts) == head_dim - head_dim % 2 and max(parts) - min(parts) <= 2
  freqs = fz.run(lambda: axial_rope.axial_inv_freqs(head_dim, num_axes=num_axes, split=split,
                                                    base=base), names)
  if freqs.error is not None:
    return
  for f, p in zip(freqs.value, parts):
    fz.assert_close(f, base ** -(np.arange(0, p, 2) / p), atol=0, rtol=1e-6)
  # apply_axial_rope takes the number of axes from the positions' last axis.
  x = jnp.asarray(np.random.default_rng(seed).normal(size=(6, 2, head_dim)), jnp.float32)
  out = fz.run(lambda: axial_rope.apply_axial_rope(x, positions, base=base, split=split,
                                                   layout=layout, attention_factor=factor),
               names)
  freqs = fz.run(lambda: axial_rope.axial_inv_freqs(
      head_dim, num_axes=positions.shape[-1], split=split, base=base), names)
  assert (out.error is None) or (freqs.error is not None) or not (
      math.isfinite(factor) and factor > 0)
  if out.error is not None:
    return
  angles = np.concatenate([positions[..., a:a + 1].astype(np.float32) * np.asarray(f)
                           for a, f in enumerate(freqs.value)], -1).astype(np.float64)
  fz.assert_finite(out.value)
  fz.assert_close(out.value, fz.rotate_reference(x, angles, layout, factor),
                  atol=5e-5 * max(1.0, factor))


@given(section=st.sampled_from([(1, 1, 2), (2, 2), (1, 1, 1), (0, 2, 2), (-1, 3, 2)]),
       position_ids=fz.int_arrays(((3, 5), (3, 2, 5), (2, 5)), low=-2 ** 20, high=2 ** 20,
                                  dtypes=_GRID_DTYPES),
       layout=st.sampled_from(["half", "interleaved"]),
       factor=fz.float_hyper(st.sampled_from([1.0, 1.4])))
def test_mrope(section, position_ids, layout, factor):
  names = ("position_ids", "inv_freq", "mrope_section", "x", "attention_factor", "positions")
  inv_freq = jnp.asarray(100.0 ** -(np.arange(4) / 4), jnp.float32)
  angles = fz.run(lambda: mrope.mrope_angles(position_ids, inv_freq, mrope_section=section),
                  names)
  if angles.error is not None:
    return
  owner = np.repeat(np.arange(len(section)), section)  # section of each frequency pair
  expected = np.stack([position_ids[owner[p]].astype(np.float32) * np.asarray(inv_freq)[p]
                       for p in range(4)], -1).astype(np.float64)
  fz.assert_close(angles.value, expected, atol=0, rtol=1e-6)
  x = jnp.asarray(np.random.default_rng(0).normal(size=(5, 2, 8)), jnp.float32)
  out = fz.run(lambda: mrope.apply_mrope(x, position_ids, inv_freq, mrope_section=section,
                                         layout=layout, attention_factor=factor), names)
  if out.error is None:
    fz.assert_finite(out.value)
    fz.assert_close(out.value, fz.rotate_reference(x, expected, layout, factor),
                    atol=5e-5 * factor)


@given(segments=st.lists(st.one_of(fz.int_hyper(st.integers(1, 3), huge=False),
                                   st.sampled_from([(1, 2, 2), (2, 1, 2), (2, 2), (0, 1, 1),
                                                    (1, -2, 1), "text"])),
                         min_size=0, max_size=3),
       time_interval=fz.float_hyper(st.sampled_from([1.0, 2.0])))
def test_mrope_position_ids(segments, time_interval):
  ids = fz.run(lambda: mrope.mrope_position_ids(segments, time_interval=time_interval),
               ("segments", "time_interval"))
  if ids.error is not None:
    return
  ids = np.asarray(ids.value)
  total = sum(s if isinstance(s, int) else math.prod(s) for s in segments)
  assert ids.shape == (3, total) and ids.dtype == np.int32 and np.all(ids >= 0)
  if all(isinstance(s, int) for s in segments):  # text only: three equal aranges
    np.testing.assert_array_equal(ids, np.broadcast_to(np.arange(total), (3, total)))


@given(positions=fz.int_arrays(((5, 2), (5, 3)), low=-2 ** 20, high=2 ** 20,
                               dtypes=_GRID_DTYPES),
       heads=fz.int_hyper(st.sampled_from([1, 2]), huge=False),
       init=st.sampled_from(["random", "axial", "random_per_frequency", "bogus"]),
       base=fz.float_hyper(st.just(10.0)), seed=st.integers(0, 50))
def test_rope_mixed(positions, heads, init, base, seed):
  names = ("head_dim", "num_heads", "num_axes", "base", "init", "positions", "freqs", "split")
  freqs = fz.run(lambda: rope_mixed.rope_mixed_init_freqs(jax.random.key(seed), 8, heads,
                                                          num_axes=2, base=base, init=init),
                 names)
  if freqs.error is not None:
    return
  assert freqs.value.shape == (2, heads, 4)
  fz.assert_finite(freqs.value)
  angles = fz.run(lambda: rope_mixed.rope_mixed_angles(positions, freqs.value), names)
  if angles.error is not None:
    return
  f = np.asarray(freqs.value, np.float64)
  expected = np.einsum("...na,ahp->...nhp", positions.astype(np.float64), f)
  fz.assert_close(angles.value, expected, atol=1e-3, rtol=2e-6)


# --------------------------------------------------------------------------------------------
# Graphs.

@st.composite
def _graphs(draw):
  n = 4  # one size: each size compiles eigh, the walk and the component search once
  edges = draw(st.lists(st.tuples(st.integers(-1, n), st.integers(-1, n)), min_size=3,
                        max_size=3))
  weights = draw(st.none() | st.lists(st.sampled_from([1.0, 0.5, 2.0, -1.0, math.nan]),
                                      min_size=len(edges), max_size=len(edges)))
  return n, np.asarray(edges, np.int32).reshape(-1, 2), weights


_jit_random_walk = jax.jit(graph_random_walk.random_walk_pe, static_argnames="k")


@given(graph=_graphs(), num_nodes=st.none() | fz.int_hyper(st.just(4), huge=False),
       k=fz.int_hyper(st.just(2), huge=False))
def test_graph_encodings(graph, num_nodes, k):
  n, edges, weights = graph
  n = n if num_nodes is None else num_nodes
  names = ("edges", "num_nodes", "weights", "adjacency", "k")
  w = None if weights is None else np.asarray(weights, np.float32)
  adjacency = fz.run(lambda: graph_laplacian.dense_adjacency(edges, num_nodes=n, weights=w),
                     names)
  if adjacency.error is not None:
    return
  a = np.zeros((n, n))
  for (u, v), weight in zip(edges.tolist(), [1.0] * len(edges) if w is None else w):
    a[u, v] = a[v, u] = max(a[u, v], weight)
  fz.assert_close(adjacency.value, a, atol=0)
  adjacency = adjacency.value
  # Normalized Laplacian: D^-1/2 (D - A) D^-1/2 with 0^-1/2 = 0.
  degree = a.sum(1)
  inv_sqrt = np.where(degree > 0, 1 / np.sqrt(np.where(degree > 0, degree, 1)), 0)
  laplacian = inv_sqrt[:, None] * (np.diag(degree) - a) * inv_sqrt[None, :]
  fz.assert_close(graph_laplacian.normalized_laplacian(adjacency), laplacian, atol=1e-5)
  labels = np.asarray(graph_laplacian.connected_components(adjacency))
  reach = (a > 0) | np.eye(n, dtype=bool)
  for _ in range(n):
    reach = reach | ((reach.astype(int) @ reach.astype(int)) > 0)
  np.testing.assert_array_equal(labels, [np.flatnonzero(reach[i]).min() for i in range(n)])
  walk = fz.run(lambda: graph_random_walk.random_walk_pe(adjacency, k=k), names)
  if walk.error is not None:
    return
  transition = np.where(degree[:, None] > 0, a / np.where(degree > 0, degree, 1)[:, None], 0)
  powers, expected = np.eye(n), []
  for _ in range(k):
    powers = powers @ transition
    expected.append(np.diag(powers))
  fz.assert_close(walk.value, np.stack(expected, -1), atol=1e-5)
  fz.check_jit(lambda: _jit_random_walk(adjacency, k=k), walk, names, atol=1e-5)
  fz.assert_close(graph_random_walk.random_walk_pe_from_edges(edges, num_nodes=n, k=k,
                                                              weights=w), walk.value, atol=0)
  pe = graph_laplacian.laplacian_pe(adjacency, k=k)
  from_edges = graph_laplacian.laplacian_pe_from_edges(edges, num_nodes=n, k=k, weights=w)
  fz.assert_close(tuple(from_edges), tuple(pe), atol=0)
  flipped = np.asarray(graph_laplacian.random_sign_flip(jax.random.key(k), pe.vectors))
  original = np.asarray(pe.vectors)
  for j in range(k):  # each column kept or negated as a whole
    assert np.array_equal(flipped[:, j], original[:, j]) or np.array_equal(flipped[:, j],
                                                                           -original[:, j])
  vectors, values, mask = (np.asarray(t, np.float64) for t in pe)
  mask = mask.astype(bool)
  fz.assert_finite(pe.vectors)
  for j in np.flatnonzero(mask):  # L v = lambda v, unit norm, lambda in (0, 2]
    np.testing.assert_allclose(laplacian @ vectors[:, j], values[j] * vectors[:, j], atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(vectors[:, j]), 1.0, atol=1e-4)
    assert 0 < values[j] <= 2 + 1e-5
  assert np.all(vectors[:, ~mask] == 0) and np.all(values[~mask] == 0)


@given(graph=_graphs())
def test_graph_jit_poison(graph):
  """Under jit, out-of-range edges or bad weights cannot raise: the adjacency is NaN."""
  n, edges, weights = graph
  w = None if weights is None else np.asarray(weights, np.float32)
  eager = fz.run(lambda: graph_laplacian.dense_adjacency(edges, num_nodes=n, weights=w),
                 ("edges", "weights", "num_nodes"))
  fz.check_jit(lambda: _jit_dense_adjacency(edges, w, n), eager, ("edges", "weights"), atol=0)


_jit_dense_adjacency = jax.jit(lambda edges, weights, n: graph_laplacian.dense_adjacency(
    edges, num_nodes=n, weights=weights), static_argnums=2)
