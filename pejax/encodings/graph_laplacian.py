"""Laplacian eigenvector positional encodings for graphs.

Nodes of a graph have no canonical order, so a graph Transformer (or a message-passing network
past its 1-WL limit) needs positions from the graph itself. Dwivedi et al. use the eigenvectors
of the symmetric normalized Laplacian for the smallest non-trivial eigenvalues: the graph
analogue of the low-frequency sinusoids of a sequence (on a cycle graph they *are* sinusoids).

Conventions (N nodes, K encoding size; shapes may carry leading batch axes ``...``):

* ``L = I - D^-1/2 A D^-1/2`` with ``D = diag(sum_j A_ij)``. An isolated node (degree 0) gets
  ``0^-1/2 := 0`` and ``L_ii = 0``, i.e. ``L = D^-1/2 (D - A) D^-1/2`` (the ``networkx``
  convention): the isolated node is a connected component of its own, no division by zero
  happens, and its row in every non-trivial eigenvector is 0.
* Eigenvalue 0 has multiplicity equal to the number of connected components C (isolated nodes
  count). Its eigenspace (spanned by ``D^1/2 1`` restricted to each component) carries no
  positional information inside a component, and for C > 1 ``eigh`` returns an arbitrary
  rotation of it. We therefore skip all C trivial eigenvectors, not only the first one: C is
  counted exactly (label propagation on the adjacency, no eigenvalue tolerance), and the
  encoding is the K eigenvectors after them, in ascending eigenvalue order. For a connected
  graph this is the usual "drop the first eigenvector" of Dwivedi et al.
* Fewer than K non-trivial eigenvectors (``N - C < K``, e.g. a graph with ``N <= K`` nodes):
  the missing columns are zero and ``LaplacianPE.mask`` is False there (the common GNN-library
  choice, so graphs of different sizes batch to one width).
* Eigenvectors are only defined up to sign (and, for repeated eigenvalues, up to a rotation of
  the eigenspace). The sign is made deterministic by making the entry of largest magnitude
  positive (ties: the lowest node index); for training, pass ``key`` to flip each column's sign
  at random, as Dwivedi et al. do, so the model learns sign invariance.
* Precision: ``jnp.linalg.eigh`` in float32 (float64 if the adjacency is float64 with
  ``jax_enable_x64``). On CPU float32 gives ``||L v - lambda v|| ~ 1e-6``; for large graphs
  with near-degenerate spectra prefer float64.

Validation follows the library policy: shapes are checked always (non-square, zero nodes,
``k < 1``); values (negative or non-finite weights, asymmetry, edge indices out of range) are
checked with a ``ValueError`` when the arrays are concrete, and under ``jax.jit`` a bad value
turns the whole output into NaN instead (JAX would silently clamp or drop bad indices).

References:
  Dwivedi, Joshi, Laurent, Bengio, Bresson. Benchmarking Graph Neural Networks. 2020.
    arXiv:2003.00982.
  Dwivedi, Bresson. A Generalization of Transformer Networks to Graphs. 2021. arXiv:2012.09699.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks


class LaplacianPE(NamedTuple):
  """Laplacian eigenvector encoding of a graph (N nodes, K encoding size).

  Attributes:
    vectors: ``[..., N, K]`` unit-norm eigenvectors, one per column, zero where ``mask`` is False.
    eigenvalues: ``[..., K]`` matching eigenvalues in ``(0, 2]``, zero where ``mask`` is False.
    mask: ``[..., K]`` bool, True for columns that hold a real eigenvector.
  """
  vectors: jax.Array
  eigenvalues: jax.Array
  mask: jax.Array


def _is_concrete(x) -> bool:
  return not isinstance(x, jax.core.Tracer)


def _compute_dtype(x) -> jnp.dtype:
  return jnp.float64 if jnp.asarray(x).dtype == jnp.float64 else jnp.float32


def check_adjacency(adjacency, *, require_symmetric: bool = True) -> jax.Array:
  """Validates a dense adjacency ``[..., N, N]`` and returns it as a float array.

  Shapes are always checked; values (finite, non-negative, symmetric) only when concrete.
  Under ``jax.jit`` a bad value makes the returned array NaN, so every encoding computed from
  it is NaN (never silently wrong).

  Args:
    adjacency: ``[..., N, N]`` non-negative edge weights, N >= 1.
    require_symmetric: whether the graph must be undirected (``A == A^T``).

  Returns:
    The adjacency as float32 (float64 if given float64 under ``jax_enable_x64``).

  Raises:
    ValueError: naming ``adjacency`` for a non-square or empty matrix, or bad concrete values.
  """
  if isinstance(adjacency, (bool, int, float)) or jnp.ndim(adjacency) < 2:
    raise ValueError(
        f"adjacency must have shape [..., N, N] (rank >= 2), got shape {jnp.shape(adjacency)}")
  shape = jnp.shape(adjacency)
  if shape[-1] != shape[-2]:
    raise ValueError(f"adjacency must be square [..., N, N], got shape {shape}")
  if shape[-1] == 0:
    raise ValueError(f"adjacency must describe at least one node (empty graph), got shape {shape}")
  a = jnp.asarray(adjacency)
  if not (jnp.issubdtype(a.dtype, jnp.floating) or jnp.issubdtype(a.dtype, jnp.integer)
          or a.dtype == jnp.bool_):
    raise ValueError(f"adjacency must be a real (float, int or bool) array, got dtype {a.dtype}")
  a = a.astype(_compute_dtype(a))
  if _is_concrete(adjacency):
    host = np.asarray(a)
    if not np.all(np.isfinite(host)):
      raise ValueError("adjacency must be finite, got NaN or inf weights")
    if np.any(host < 0):
      raise ValueError(f"adjacency must have non-negative weights, got minimum {host.min()}")
    if require_symmetric and not np.array_equal(host, np.swapaxes(host, -1, -2)):
      raise ValueError(
          "adjacency must be symmetric (undirected graph), got max |A - A^T| = "
          f"{np.abs(host - np.swapaxes(host, -1, -2)).max()}")
    return a
  bad = jnp.any(~jnp.isfinite(a) | (a < 0), axis=(-2, -1))
  if require_symmetric:
    bad = bad | jnp.any(a != jnp.swapaxes(a, -1, -2), axis=(-2, -1))
  return jnp.where(bad[..., None, None], jnp.nan, a)


def dense_adjacency(edges, *, num_nodes: int, weights=None) -> jax.Array:
  """Builds a symmetric dense adjacency from an undirected edge list.

  An edge may be listed once, in both directions (the PyTorch-Geometric convention) or
  repeatedly: ``A[u, v] = A[v, u] = w`` either way (the maximum weight if listed with different
  weights). A self-loop ``(u, u)`` sets ``A[u, u]``.

  Args:
    edges: ``[E, 2]`` int node indices in ``[0, num_nodes)``; E may be 0.
    num_nodes: N >= 1, the number of nodes (isolated nodes need not appear in ``edges``).
    weights: optional ``[E]`` non-negative weights; default 1.

  Returns:
    ``[N, N]`` float32 adjacency (float64 if ``weights`` are float64 under x64).

  Raises:
    ValueError: naming the argument for a bad shape, ``num_nodes < 1``, a concrete edge index
      outside ``[0, num_nodes)`` or a concrete negative weight. Under ``jax.jit`` such values
      make the adjacency NaN instead.
  """
  n = arg_checks.check_positive_int("num_nodes", num_nodes)
  edges = arg_checks.check_integer_array("edges", edges)
  if edges.ndim != 2 or edges.shape[-1] != 2:
    raise ValueError(f"edges must have shape [E, 2], got shape {edges.shape}")
  num_edges = edges.shape[0]
  if weights is None:
    w = jnp.ones((num_edges,), jnp.float32)
  else:
    w = jnp.asarray(weights)
    if w.shape != (num_edges,):
      raise ValueError(f"weights must have shape [E] = ({num_edges},), got shape {w.shape}")
    w = w.astype(_compute_dtype(w))
  if _is_concrete(edges):
    host = np.asarray(edges)
    if host.size and (host.min() < 0 or host.max() >= n):
      bad = host[(host < 0) | (host >= n)]
      raise ValueError(
          f"edges must index nodes in [0, num_nodes) = [0, {n}), got index {int(bad[0])}")
  if weights is not None and _is_concrete(weights):
    host_w = np.asarray(w)
    if not np.all(np.isfinite(host_w)) or np.any(host_w < 0):
      raise ValueError(f"weights must be finite and non-negative, got minimum {host_w.min()}")
  u, v = edges[:, 0], edges[:, 1]
  a = jnp.zeros((n, n), w.dtype)
  # mode="drop" ignores out-of-range pairs; the poisoning below makes them visible under jit.
  a = a.at[u, v].max(w, mode="drop").at[v, u].max(w, mode="drop")
  bad = jnp.any((edges < 0) | (edges >= n)) | jnp.any(~jnp.isfinite(w) | (w < 0))
  return jnp.where(bad, jnp.nan, a)


def normalized_laplacian(adjacency) -> jax.Array:
  """Symmetric normalized Laplacian ``L = I - D^-1/2 A D^-1/2`` (isolated nodes: ``L_ii = 0``).

  Computed as ``D^-1/2 (D - A) D^-1/2`` with ``0^-1/2 := 0``, which equals
  ``I - D^-1/2 A D^-1/2`` on every node of degree > 0 and gives an all-zero row for an isolated
  node (so no division by zero and eigenvalue-0 multiplicity = number of components).

  Args:
    adjacency: ``[..., N, N]`` symmetric non-negative weights.

  Returns:
    ``[..., N, N]`` float32 (float64 for float64 input under x64) Laplacian, eigenvalues in
    ``[0, 2]``.

  References:
    Chung. Spectral Graph Theory. 1997.
  """
  return _laplacian(check_adjacency(adjacency))


def _laplacian(a: jax.Array) -> jax.Array:
  degree = jnp.sum(a, axis=-1)
  safe = jnp.where(degree > 0, degree, 1.0)
  inv_sqrt = jnp.where(degree > 0, jax.lax.rsqrt(safe), 0.0)
  n = a.shape[-1]
  eye = jnp.eye(n, dtype=a.dtype).reshape((1,) * (a.ndim - 2) + (n, n))
  d_minus_a = degree[..., :, None] * eye - a
  return inv_sqrt[..., :, None] * d_minus_a * inv_sqrt[..., None, :]


def connected_components(adjacency) -> jax.Array:
  """Labels each node with the smallest node index of its connected component.

  Exact (no eigenvalue tolerance) and jit-friendly: min-label propagation over edges with
  positive weight, iterated until nothing changes (at most N - 1 rounds).

  Args:
    adjacency: ``[..., N, N]`` symmetric non-negative weights.

  Returns:
    ``[..., N]`` int32 labels; the number of components is ``sum(labels == arange(N))``.
  """
  return _component_labels(check_adjacency(adjacency))


def _component_labels(a: jax.Array) -> jax.Array:
  n = a.shape[-1]
  linked = a > 0
  start = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), a.shape[:-1])

  def step(labels):
    neighbour_min = jnp.min(jnp.where(linked, labels[..., None, :], n), axis=-1)
    return jnp.minimum(labels, neighbour_min)

  def cond(state):
    labels, previous = state
    return jnp.any(labels != previous)

  def body(state):
    labels, _ = state
    return step(labels), labels

  labels, _ = jax.lax.while_loop(cond, body, (step(start), start))
  return labels


def random_sign_flip(key: jax.Array, vectors: jax.Array) -> jax.Array:
  """Multiplies each eigenvector (column) by an independent random sign.

  Args:
    key: PRNG key.
    vectors: ``[..., N, K]`` eigenvectors; signs are drawn per leading index and column.

  Returns:
    ``[..., N, K]`` same dtype, each column multiplied by +1 or -1.
  """
  arg_checks.check_min_rank("vectors", vectors, 2, "[..., N, K]")
  vectors = jnp.asarray(vectors)
  shape = vectors.shape[:-2] + (1, vectors.shape[-1])
  signs = jnp.where(jax.random.bernoulli(key, 0.5, shape), 1, -1).astype(vectors.dtype)
  return vectors * signs


def laplacian_pe(adjacency, *, k: int, key: jax.Array | None = None) -> LaplacianPE:
  """Laplacian eigenvector positional encoding (see the module docstring for conventions).

  Args:
    adjacency: ``[..., N, N]`` symmetric non-negative edge weights (dense); use
      :func:`laplacian_pe_from_edges` for an edge list.
    k: K >= 1, the number of eigenvectors (encoding width).
    key: optional PRNG key; if given, each eigenvector's sign is flipped at random (training).

  Returns:
    ``LaplacianPE(vectors [..., N, K], eigenvalues [..., K], mask [..., K])``: the eigenvectors
    of the K smallest non-trivial eigenvalues of ``I - D^-1/2 A D^-1/2`` (all C eigenvalue-0
    vectors skipped, C = number of connected components), zero-padded with ``mask`` False when
    the graph has fewer than K of them.

  Raises:
    ValueError: naming ``adjacency`` or ``k`` for bad shapes, an empty graph, ``k < 1`` or
      (concrete inputs) negative, non-finite or asymmetric weights.

  References:
    Dwivedi et al. Benchmarking Graph Neural Networks. 2020. arXiv:2003.00982.
    Dwivedi, Bresson. A Generalization of Transformer Networks to Graphs. 2021.
      arXiv:2012.09699.
  """
  k = arg_checks.check_positive_int("k", k)
  a = check_adjacency(adjacency)
  n = a.shape[-1]
  eigenvalues, eigenvectors = jnp.linalg.eigh(_laplacian(a), symmetrize_input=True)
  labels = _component_labels(a)
  lead = (1,) * (a.ndim - 2)
  roots = labels == jnp.arange(n, dtype=jnp.int32).reshape(lead + (n,))
  num_components = jnp.sum(roots, axis=-1)  # [...]
  columns = num_components[..., None] + jnp.arange(k, dtype=jnp.int32).reshape(lead + (k,))
  mask = columns < n
  safe = jnp.where(mask, columns, 0)
  index = jnp.broadcast_to(safe[..., None, :], a.shape[:-2] + (n, k))
  vectors = jnp.take_along_axis(eigenvectors, index, axis=-1)
  values = jnp.take_along_axis(eigenvalues, safe, axis=-1)
  vectors = jnp.where(mask[..., None, :], vectors, 0.0)
  values = jnp.where(mask, values, 0.0)
  # Deterministic sign: the entry of largest magnitude (lowest index on ties) is positive.
  pivot = jnp.argmax(jnp.abs(vectors), axis=-2)  # [..., K]
  pivot_value = jnp.take_along_axis(vectors, pivot[..., None, :], axis=-2)  # [..., 1, K]
  vectors = vectors * jnp.where(pivot_value < 0, -1.0, 1.0).astype(vectors.dtype)
  if key is not None:
    vectors = random_sign_flip(key, vectors)
  # A NaN-poisoned adjacency (bad values under jit) has no edges for the component count;
  # keep the poison visible instead of returning an all-masked encoding.
  poisoned = jnp.any(jnp.isnan(a), axis=(-2, -1))
  vectors = jnp.where(poisoned[..., None, None], jnp.nan, vectors)
  values = jnp.where(poisoned[..., None], jnp.nan, values)
  return LaplacianPE(vectors=vectors, eigenvalues=values, mask=mask)


def laplacian_pe_from_edges(edges, *, num_nodes: int, k: int, weights=None,
                            key: jax.Array | None = None) -> LaplacianPE:
  """:func:`laplacian_pe` of the undirected graph given by an edge list.

  Args:
    edges: ``[E, 2]`` int node indices in ``[0, num_nodes)`` (see :func:`dense_adjacency`).
    num_nodes: N >= 1.
    k: K >= 1 encoding width.
    weights: optional ``[E]`` non-negative edge weights.
    key: optional PRNG key for random sign flips.

  Returns:
    ``LaplacianPE`` with ``vectors [N, K]``, ``eigenvalues [K]``, ``mask [K]``.

  Raises:
    ValueError: as :func:`dense_adjacency` and :func:`laplacian_pe`.
  """
  k = arg_checks.check_positive_int("k", k)
  return laplacian_pe(dense_adjacency(edges, num_nodes=num_nodes, weights=weights), k=k, key=key)
