"""Tests for pejax/encodings/graph_laplacian.py."""

from __future__ import annotations

from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.encodings import graph_laplacian as gl


def _cycle(n: int) -> np.ndarray:
  a = np.zeros((n, n), np.float32)
  idx = np.arange(n)
  a[idx, (idx + 1) % n] = 1
  a[(idx + 1) % n, idx] = 1
  return a


def _path(n: int) -> np.ndarray:
  a = np.zeros((n, n), np.float32)
  idx = np.arange(n - 1)
  a[idx, idx + 1] = 1
  a[idx + 1, idx] = 1
  return a


def _random_graph(seed: int, n: int, p: float = 0.35) -> np.ndarray:
  """A connected random weighted graph (a spanning path plus random extra edges)."""
  rng = np.random.default_rng(seed)
  upper = np.triu((rng.random((n, n)) < p) * rng.uniform(0.5, 2.0, (n, n)), 1)
  upper[np.arange(n - 1), np.arange(1, n)] = rng.uniform(0.5, 2.0, n - 1)
  return (upper + upper.T).astype(np.float32)


def _assert_equal_up_to_column_sign(test, a, b, atol):
  a, b = np.asarray(a), np.asarray(b)
  for j in range(a.shape[-1]):
    same = np.allclose(a[:, j], b[:, j], atol=atol)
    flipped = np.allclose(a[:, j], -b[:, j], atol=atol)
    test.assertTrue(same or flipped, f"column {j} differs beyond sign:\n{a[:, j]}\n{b[:, j]}")


class NormalizedLaplacianTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_path3_golden(self):
    lap = self.variant(gl.normalized_laplacian)(_path(3))
    r = 1 / np.sqrt(2)
    expected = np.array([[1, -r, 0], [-r, 1, -r], [0, -r, 1]], np.float32)
    chex.assert_trees_all_close(lap, expected, atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_isolated_node_row_is_zero_and_finite(self):
    a = _path(4)
    a = np.pad(a, ((0, 1), (0, 1)))  # node 4 isolated
    lap = self.variant(gl.normalized_laplacian)(a)
    chex.assert_tree_all_finite(lap)
    np.testing.assert_array_equal(np.asarray(lap)[4], np.zeros(5))
    np.testing.assert_array_equal(np.asarray(lap)[:, 4], np.zeros(5))

  @chex.variants(with_jit=True, without_jit=True)
  def test_components(self):
    a = gl.dense_adjacency(np.array([[0, 1], [1, 2], [4, 5]]), num_nodes=7)
    labels = self.variant(gl.connected_components)(a)
    np.testing.assert_array_equal(labels, [0, 0, 0, 3, 4, 4, 6])


class LaplacianPETest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_path3_golden(self):
    # Path 0-1-2: eigenvalues 0, 1, 2; v(1) = [1, 0, -1] / sqrt 2, v(2) = [-1/2, 1/sqrt 2, -1/2].
    pe = self.variant(lambda a: gl.laplacian_pe(a, k=2))(_path(3))
    r = 1 / np.sqrt(2)
    chex.assert_trees_all_close(pe.eigenvalues, np.array([1.0, 2.0], np.float32), atol=1e-5)
    _assert_equal_up_to_column_sign(self, pe.vectors, [[r, -0.5], [0, r], [-r, -0.5]], 1e-5)
    # The canonical sign makes the largest-magnitude entry positive: v(2)[1] = +1/sqrt 2.
    self.assertAlmostEqual(float(pe.vectors[1, 1]), r, places=5)
    np.testing.assert_array_equal(pe.mask, [True, True])

  @chex.variants(with_jit=True, without_jit=True)
  def test_cycle6_eigenvalues_golden(self):
    # Cycle C_n: eigenvalues 1 - cos(2 pi j / n); for n = 6: 0, .5, .5, 1.5, 1.5, 2.
    pe = self.variant(lambda a: gl.laplacian_pe(a, k=5))(_cycle(6))
    chex.assert_trees_all_close(pe.eigenvalues, np.array([0.5, 0.5, 1.5, 1.5, 2.0]), atol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("seed0", 0, 9, 4), ("seed1", 1, 12, 6), ("seed2", 2, 7, 6))
  @pytest.mark.slow
  def test_eigen_equation_and_orthonormality(self, seed, n, k):
    a = _random_graph(seed, n)
    pe = self.variant(lambda x: gl.laplacian_pe(x, k=k))(a)
    chex.assert_shape(pe.vectors, (n, k))
    chex.assert_shape(pe.eigenvalues, (k,))
    lap = np.asarray(gl.normalized_laplacian(a), np.float64)
    v = np.asarray(pe.vectors, np.float64)
    lam = np.asarray(pe.eigenvalues, np.float64)
    np.testing.assert_allclose(lap @ v, v * lam[None, :], atol=1e-5)
    np.testing.assert_allclose(v.T @ v, np.eye(k), atol=1e-5)
    # Non-trivial: orthogonal to the trivial eigenvector D^1/2 1 and eigenvalue > 0.
    trivial = np.sqrt(a.sum(-1))
    np.testing.assert_allclose(trivial @ v, np.zeros(k), atol=1e-4)
    self.assertTrue(np.all(lam > 1e-3))
    # Ascending and the smallest ones: equal to the sorted spectrum after the first.
    np.testing.assert_allclose(lam, np.linalg.eigvalsh(lap)[1:k + 1], atol=1e-5)

  @pytest.mark.slow
  def test_canonical_sign_largest_entry_positive(self):
    v = np.asarray(gl.laplacian_pe(_random_graph(3, 10), k=5).vectors)
    for j in range(5):
      self.assertGreaterEqual(v[:, j].max() + 1e-6, -v[:, j].min())

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("seed4", 4), ("seed5", 5))
  def test_node_relabeling_equivariance_up_to_sign(self, seed):
    n, k = 10, 5
    a = _random_graph(seed, n)
    gaps = np.diff(np.linalg.eigvalsh(np.asarray(gl.normalized_laplacian(a), np.float64)))
    self.assertGreater(gaps[:k + 1].min(), 1e-3)  # distinct eigenvalues: unique up to sign.
    perm = np.random.default_rng(seed).permutation(n)
    fn = self.variant(lambda x: gl.laplacian_pe(x, k=k))
    pe = fn(a)
    pe_perm = fn(a[perm][:, perm])
    chex.assert_trees_all_close(pe_perm.eigenvalues, pe.eigenvalues, atol=1e-5)
    _assert_equal_up_to_column_sign(self, pe_perm.vectors, np.asarray(pe.vectors)[perm], 1e-4)

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.slow
  def test_disconnected_skips_one_per_component(self):
    # Components {0,1,2,3} (path), {4,5} (edge), {6} (isolated): C = 3, N - C = 4 non-trivial.
    a = gl.dense_adjacency(np.array([[0, 1], [1, 2], [2, 3], [4, 5]]), num_nodes=7)
    pe = self.variant(lambda x: gl.laplacian_pe(x, k=6))(a)
    np.testing.assert_array_equal(pe.mask, [True, True, True, True, False, False])
    v = np.asarray(pe.vectors)
    np.testing.assert_array_equal(v[:, 4:], 0.0)
    np.testing.assert_array_equal(pe.eigenvalues[4:], 0.0)
    # Path P4 has normalized eigenvalues 0, .5, 1.5, 2; the edge 0, 2: non-trivial .5, 1.5, 2, 2.
    chex.assert_trees_all_close(pe.eigenvalues[:4], np.array([0.5, 1.5, 2.0, 2.0]), atol=1e-5)
    np.testing.assert_allclose(v[6], 0.0, atol=1e-6)  # isolated node: zero encoding.
    self.assertTrue(np.all(np.isfinite(v)))
    lap = np.asarray(gl.normalized_laplacian(a))
    np.testing.assert_allclose(lap @ v[:, :4], v[:, :4] * np.asarray(pe.eigenvalues[:4]),
                               atol=1e-5)
    np.testing.assert_allclose(v[:, :4].T @ v[:, :4], np.eye(4), atol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  def test_small_graph_zero_padding(self):
    pe = self.variant(lambda x: gl.laplacian_pe(x, k=4))(_path(3))
    chex.assert_shape(pe.vectors, (3, 4))
    np.testing.assert_array_equal(pe.mask, [True, True, False, False])
    np.testing.assert_array_equal(np.asarray(pe.vectors)[:, 2:], 0.0)

  @chex.variants(with_jit=True, without_jit=True)
  def test_single_node_graph(self):
    pe = self.variant(lambda x: gl.laplacian_pe(x, k=2))(np.zeros((1, 1), np.float32))
    np.testing.assert_array_equal(pe.mask, [False, False])
    np.testing.assert_array_equal(pe.vectors, np.zeros((1, 2)))

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.slow
  def test_batched_equals_per_graph(self):
    graphs = np.stack([_random_graph(6, 8), _random_graph(9, 8)])
    pe = self.variant(lambda x: gl.laplacian_pe(x, k=3))(graphs)
    chex.assert_shape(pe.vectors, (2, 8, 3))
    for b in range(2):
      single = gl.laplacian_pe(graphs[b], k=3)
      chex.assert_trees_all_close(pe.eigenvalues[b], single.eigenvalues, atol=1e-5)
      _assert_equal_up_to_column_sign(self, pe.vectors[b], single.vectors, 1e-4)

  @pytest.mark.slow
  def test_random_sign_flip(self):
    a = _random_graph(7, 9)
    base = np.asarray(gl.laplacian_pe(a, k=6).vectors)
    flips = []
    for seed in range(4):
      flipped = np.asarray(gl.laplacian_pe(a, k=6, key=jax.random.key(seed)).vectors)
      signs = np.sign(np.sum(flipped * base, axis=0))
      np.testing.assert_allclose(flipped, base * signs[None, :], atol=1e-6)
      flips.append(signs)
    flips = np.stack(flips)
    self.assertTrue(np.any(flips < 0))  # some columns do get flipped ...
    self.assertTrue(np.any(flips > 0))  # ... and some do not.
    again = gl.laplacian_pe(a, k=6, key=jax.random.key(0)).vectors
    np.testing.assert_array_equal(again, gl.laplacian_pe(a, k=6, key=jax.random.key(0)).vectors)


class EdgeListTest(chex.TestCase):

  def test_dense_adjacency_conventions(self):
    once = gl.dense_adjacency(np.array([[0, 1], [1, 2]]), num_nodes=4)
    both = gl.dense_adjacency(np.array([[0, 1], [1, 0], [1, 2], [2, 1], [1, 2]]), num_nodes=4)
    expected = np.array([[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]], np.float32)
    np.testing.assert_array_equal(once, expected)
    np.testing.assert_array_equal(both, expected)
    weighted = gl.dense_adjacency(np.array([[0, 2]]), num_nodes=3, weights=np.array([2.5]))
    np.testing.assert_array_equal(weighted, [[0, 0, 2.5], [0, 0, 0], [2.5, 0, 0]])

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.slow
  def test_edges_match_dense(self):
    a = _random_graph(8, 8)
    rows, cols = np.nonzero(np.triu(a))
    edges = np.stack([rows, cols], -1).astype(np.int32)
    fn = self.variant(lambda e, w: gl.laplacian_pe_from_edges(e, num_nodes=8, k=3, weights=w))
    pe_edges = fn(edges, a[rows, cols])
    pe_dense = gl.laplacian_pe(a, k=3)
    chex.assert_trees_all_close(pe_edges.eigenvalues, pe_dense.eigenvalues, atol=1e-5)
    _assert_equal_up_to_column_sign(self, pe_edges.vectors, pe_dense.vectors, 1e-4)

  def test_empty_edge_list(self):
    pe = gl.laplacian_pe_from_edges(np.zeros((0, 2), np.int32), num_nodes=3, k=2)
    np.testing.assert_array_equal(pe.mask, [False, False])
    np.testing.assert_array_equal(pe.vectors, np.zeros((3, 2)))

  def test_out_of_range_under_jit_poisons_with_nan(self):
    edges = jnp.array([[0, 1], [1, 5]], jnp.int32)
    out = jax.jit(lambda e: gl.laplacian_pe_from_edges(e, num_nodes=3, k=1))(edges)
    self.assertTrue(np.all(np.isnan(np.asarray(out.vectors))))

  def test_negative_weight_under_jit_poisons_with_nan(self):
    a = jnp.asarray(_path(3)).at[0, 1].set(-1.0).at[1, 0].set(-1.0)
    out = jax.jit(lambda x: gl.laplacian_pe(x, k=1))(a)
    self.assertTrue(np.all(np.isnan(np.asarray(out.vectors))))


class ErrorsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("non_square", np.zeros((3, 4)), "adjacency must be square"),
      ("rank1", np.zeros((3,)), "adjacency must have shape"),
      ("empty_graph", np.zeros((0, 0)), "empty graph"),
      ("negative", np.array([[0.0, -1.0], [-1.0, 0.0]]), "non-negative"),
      ("asymmetric", np.array([[0.0, 1.0], [0.0, 0.0]]), "symmetric"),
      ("nan", np.array([[0.0, np.nan], [np.nan, 0.0]]), "finite"),
      ("complex", np.eye(2) * 1j, "real"),
  )
  def test_bad_adjacency(self, adjacency, message):
    with self.assertRaisesRegex(ValueError, message):
      gl.laplacian_pe(adjacency, k=1)

  @parameterized.named_parameters(("zero", 0), ("negative", -2), ("float", 1.5))
  def test_bad_k(self, k):
    with self.assertRaisesRegex(ValueError, "k must be a positive integer"):
      gl.laplacian_pe(_path(3), k=k)

  def test_edge_out_of_range(self):
    with self.assertRaisesRegex(ValueError, r"edges must index nodes in \[0, num_nodes\).*got"
                                r" index 5"):
      gl.laplacian_pe_from_edges(np.array([[0, 1], [1, 5]]), num_nodes=3, k=1)
    with self.assertRaisesRegex(ValueError, "got index -1"):
      gl.dense_adjacency(np.array([[0, -1]]), num_nodes=3)

  def test_bad_edges(self):
    with self.assertRaisesRegex(ValueError, "edges must have shape"):
      gl.dense_adjacency(np.array([0, 1]), num_nodes=3)
    with self.assertRaisesRegex(ValueError, "edges must be an integer array"):
      gl.dense_adjacency(np.array([[0.0, 1.0]]), num_nodes=3)
    with self.assertRaisesRegex(ValueError, "num_nodes must be a positive integer"):
      gl.dense_adjacency(np.zeros((0, 2), np.int32), num_nodes=0)
    with self.assertRaisesRegex(ValueError, "weights must have shape"):
      gl.dense_adjacency(np.array([[0, 1]]), num_nodes=3, weights=np.ones(2))
    with self.assertRaisesRegex(ValueError, "weights must be finite and non-negative"):
      gl.dense_adjacency(np.array([[0, 1]]), num_nodes=3, weights=np.array([-1.0]))

  def test_random_sign_flip_rank(self):
    with self.assertRaisesRegex(ValueError, "vectors"):
      gl.random_sign_flip(jax.random.key(0), jnp.ones((3,)))
