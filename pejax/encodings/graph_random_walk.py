"""Random-walk positional encodings (landing probabilities) for graphs.

Node j's encoding is the probability that a simple random walk started at j is back at j after
i = 1..K steps: ``[RW_jj, (RW^2)_jj, ..., (RW^K)_jj]`` with ``RW = A D^-1``. Unlike Laplacian
eigenvectors it has no sign or basis ambiguity, so no random flipping is needed, and it is
invariant to node relabeling exactly (it is a function of the node's neighbourhood).

Since ``A D^-1 = D (D^-1 A) D^-1``, the diagonals of its powers equal those of the row-stochastic
``D^-1 A``, which is what is multiplied here (float32 matrix products at HIGHEST precision, K of
them; O(K N^3)). An isolated node (degree 0) gets ``0^-1 := 0`` and hence the all-zero encoding
(the PyTorch-Geometric convention); a node whose only edge is a self-loop stays put (all ones).

Validation and the jit policy are those of :mod:`pejax.encodings.graph_laplacian`: shapes always
raise ``ValueError``; bad concrete values raise too, and under ``jax.jit`` they make the output
NaN.

References:
  Dwivedi, Luu, Laurent, Bengio, Bresson. Graph Neural Networks with Learnable Structural and
    Positional Representations. ICLR 2022. arXiv:2110.07875.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks
from pejax.encodings import graph_laplacian


def random_walk_pe(adjacency, *, k: int) -> jax.Array:
  """Random-walk landing probabilities ``(RW^i)_jj``, i = 1..K, per node (N nodes).

  Args:
    adjacency: ``[..., N, N]`` symmetric non-negative edge weights (dense); use
      :func:`random_walk_pe_from_edges` for an edge list.
    k: K >= 1, the number of walk lengths (encoding width).

  Returns:
    ``[..., N, K]`` float32 (float64 for float64 input under x64); column i-1 holds the
    probability of being back at the start after i steps.

  Raises:
    ValueError: naming ``adjacency`` or ``k`` for bad shapes, an empty graph, ``k < 1`` or
      (concrete inputs) negative, non-finite or asymmetric weights.

  References:
    Dwivedi et al. Graph Neural Networks with Learnable Structural and Positional
      Representations. 2022. arXiv:2110.07875.
  """
  k = arg_checks.check_positive_int("k", k)
  a = graph_laplacian.check_adjacency(adjacency)
  degree = jnp.sum(a, axis=-1)
  inv_degree = jnp.where(degree > 0, 1.0 / jnp.where(degree > 0, degree, 1.0), 0.0)
  transition = inv_degree[..., :, None] * a  # D^-1 A, row-stochastic on non-isolated rows.
  power = transition
  diagonals = [jnp.diagonal(power, axis1=-2, axis2=-1)]
  for _ in range(k - 1):
    power = jnp.matmul(power, transition, precision=jax.lax.Precision.HIGHEST)
    diagonals.append(jnp.diagonal(power, axis1=-2, axis2=-1))
  return jnp.stack(diagonals, axis=-1)


def random_walk_pe_from_edges(edges, *, num_nodes: int, k: int, weights=None) -> jax.Array:
  """:func:`random_walk_pe` of the undirected graph given by an edge list.

  Args:
    edges: ``[E, 2]`` int node indices in ``[0, num_nodes)`` (see
      :func:`pejax.encodings.graph_laplacian.dense_adjacency`).
    num_nodes: N >= 1.
    k: K >= 1 encoding width.
    weights: optional ``[E]`` non-negative edge weights.

  Returns:
    ``[N, K]`` landing probabilities.

  Raises:
    ValueError: as :func:`~pejax.encodings.graph_laplacian.dense_adjacency` and
      :func:`random_walk_pe`.
  """
  k = arg_checks.check_positive_int("k", k)
  adjacency = graph_laplacian.dense_adjacency(edges, num_nodes=num_nodes, weights=weights)
  return random_walk_pe(adjacency, k=k)
