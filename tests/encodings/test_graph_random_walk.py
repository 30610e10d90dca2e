"""Tests for pejax/encodings/graph_random_walk.py."""

from __future__ import annotations

from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pejax.encodings import graph_laplacian as gl
from pejax.encodings import graph_random_walk as grw


def _cycle_edges(n: int) -> np.ndarray:
  idx = np.arange(n)
  return np.stack([idx, (idx + 1) % n], -1).astype(np.int32)


def _path_adjacency(n: int) -> np.ndarray:
  a = np.zeros((n, n), np.float32)
  a[np.arange(n - 1), np.arange(1, n)] = 1
  return a + a.T


class RandomWalkPETest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_cycle5_same_for_every_node_golden(self):
    # On C_5: back after 2 steps 2/4; after 4 steps C(4,2)/16; after 5 steps 2/32 (full loop).
    pe = self.variant(lambda e: grw.random_walk_pe_from_edges(e, num_nodes=5, k=5))(
        _cycle_edges(5))
    chex.assert_shape(pe, (5, 5))
    expected = np.array([0.0, 0.5, 0.0, 0.375, 0.0625], np.float32)
    chex.assert_trees_all_close(pe, np.broadcast_to(expected, (5, 5)), atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("c6", 6), ("c11", 11))
  def test_cycle_rows_identical(self, n):
    pe = np.asarray(self.variant(lambda e: grw.random_walk_pe_from_edges(
        e, num_nodes=n, k=8))(_cycle_edges(n)))
    np.testing.assert_allclose(pe, np.broadcast_to(pe[0], pe.shape), atol=1e-6)
    self.assertGreater(pe[0].max(), 0.1)

  @chex.variants(with_jit=True, without_jit=True)
  def test_path4_hand_computed(self):
    # Path 0-1-2-3, degrees 1,2,2,1. Node 0: 2 steps 0->1->0 = 1/2; 4 steps 0101 0 (1/4) +
    # 0121 0 (1/8) = 3/8. Node 1: 2 steps 1/2 + 1/4 = 3/4; 4 steps 1/4 + 1/8 + 1/8 + 1/16 + 1/8
    # = 11/16. Odd steps: 0 (bipartite).
    pe = self.variant(lambda a: grw.random_walk_pe(a, k=4))(_path_adjacency(4))
    expected = np.array([[0, 1 / 2, 0, 3 / 8],
                         [0, 3 / 4, 0, 11 / 16],
                         [0, 3 / 4, 0, 11 / 16],
                         [0, 1 / 2, 0, 3 / 8]], np.float32)
    chex.assert_trees_all_close(pe, expected, atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_triangle_with_tail_matches_matrix_power(self):
    a = gl.dense_adjacency(np.array([[0, 1], [1, 2], [2, 0], [2, 3]]), num_nodes=4,
                           weights=np.array([1.0, 2.0, 1.0, 0.5]))
    pe = self.variant(lambda x: grw.random_walk_pe(x, k=6))(a)
    a64 = np.asarray(a, np.float64)
    rw = a64 / a64.sum(0, keepdims=True)  # A D^-1 as in the paper.
    expected = np.stack([np.diagonal(np.linalg.matrix_power(rw, i)) for i in range(1, 7)], -1)
    chex.assert_trees_all_close(pe, expected.astype(np.float32), atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_isolated_node_and_self_loop(self):
    a = np.zeros((4, 4), np.float32)
    a[0, 1] = a[1, 0] = 1.0
    a[3, 3] = 1.0  # node 2 isolated, node 3 only a self-loop
    pe = np.asarray(self.variant(lambda x: grw.random_walk_pe(x, k=3))(a))
    self.assertTrue(np.all(np.isfinite(pe)))
    np.testing.assert_array_equal(pe[2], [0, 0, 0])
    np.testing.assert_allclose(pe[3], [1, 1, 1], atol=1e-7)
    np.testing.assert_allclose(pe[0], [0, 1, 0], atol=1e-7)

  @chex.variants(with_jit=True, without_jit=True)
  def test_relabeling_equivariance(self):
    rng = np.random.default_rng(0)
    upper = np.triu(rng.random((9, 9)) < 0.4, 1).astype(np.float32)
    a = upper + upper.T
    perm = rng.permutation(9)
    fn = self.variant(lambda x: grw.random_walk_pe(x, k=5))
    chex.assert_trees_all_close(fn(a[perm][:, perm]), np.asarray(fn(a))[perm], atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.slow
  def test_batched(self):
    graphs = np.stack([_path_adjacency(5), np.asarray(gl.dense_adjacency(_cycle_edges(5),
                                                                         num_nodes=5))])
    pe = self.variant(lambda x: grw.random_walk_pe(x, k=3))(graphs)
    chex.assert_shape(pe, (2, 5, 3))
    for b in range(2):
      chex.assert_trees_all_close(pe[b], grw.random_walk_pe(graphs[b], k=3), atol=1e-7)

  def test_bad_edge_under_jit_poisons_with_nan(self):
    out = jax.jit(lambda e: grw.random_walk_pe_from_edges(e, num_nodes=3, k=2))(
        jnp.array([[0, 3]], jnp.int32))
    self.assertTrue(np.all(np.isnan(np.asarray(out))))


class ErrorsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("non_square", np.zeros((2, 3)), "adjacency must be square"),
      ("empty_graph", np.zeros((0, 0)), "empty graph"),
      ("negative", np.array([[0.0, -2.0], [-2.0, 0.0]]), "non-negative"),
      ("scalar", 1.0, "adjacency must have shape"),
  )
  def test_bad_adjacency(self, adjacency, message):
    with self.assertRaisesRegex(ValueError, message):
      grw.random_walk_pe(adjacency, k=2)

  def test_bad_k(self):
    with self.assertRaisesRegex(ValueError, "k must be a positive integer, got 0"):
      grw.random_walk_pe(_path_adjacency(3), k=0)

  def test_edge_out_of_range(self):
    with self.assertRaisesRegex(ValueError, "edges must index nodes.*got index 7"):
      grw.random_walk_pe_from_edges(np.array([[0, 7]]), num_nodes=3, k=2)
