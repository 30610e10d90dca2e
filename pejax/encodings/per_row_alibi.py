"""Per-row data-dependent ALiBi: forget gates from small query-key products, one per (i, l) pair.

Axes: B batch, Lq / Lk query / key length, H heads, d gate head dim; ``...`` any leading dims.

FoX (:mod:`pejax.encodings.fox`) gives every token one forget gate ``f_l`` per head, and the
logit of query i and key j gets ``sum_{l=j+1}^{i} log f_l``. The per-row variant lets the query
choose how much each later token makes it forget: every head projects the token to a small gate
query ``a_t`` and gate key ``b_t`` (``d`` dims, 8 by default) and the gate of token l *as seen by
query i* is ``sigmoid(a_i . b_l / sqrt(d))``. The bias of query i and key j <= i is

  D_ij = s * sum_{l=j}^{i-1} log sigmoid(a_i . b_l / sqrt(d)),

a reverse cumulative sum along the row (``D_ii = 0``; ``s`` is ``post_log_scale``), exactly
x-transformers' ``PerRowDataDependentAlibi``: its gates are masked on and above the diagonal and
summed from the right. Note the index range: the keys ``j .. i - 1`` (FoX sums ``j + 1 .. i``).

Which tokens are "between" a key and its query is decided by each token's **text index**, not
its position: packed sequences restart positions, and KV-cache slots are not text order until a
cache's chronological view puts them in it. ``q_index`` / ``k_index`` carry ``index + 1`` of every
token (0 marks a slot that holds no token, which contributes nothing); a key l enters row i iff
``1 <= k_index_l < q_index_i``. The keys must be given in text order (a full sequence, a linear
KV cache, or an evicting cache's chronological view, where evicted tokens simply drop out of the
sum). Indices travel as float32, exact below 2**24 tokens.

Cost: one ``[..., H, Lq, Lk]`` product of d-dim vectors and a cumulative sum per row: the bias of
a row needs all the row's keys at once, so blockwise attention cannot evaluate it tile by tile.

References:
  Lin, Nikishin, He and Courville 2025, "Forgetting Transformer: Softmax Attention with a Forget
  Gate", ICLR 2025, arXiv 2503.02130 (the per-token gates this generalizes).
  Wang (lucidrains), x-transformers ``PerRowDataDependentAlibi`` (2.31.10), the reference
  implementation; its docstring: "same as data dependent alibi from forgetting transformer, but
  the forgetting gates are also derived by a queries and keys with a small head dimension".
"""

from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks

Array = jax.Array


def _check_gates(name: str, x) -> Array:
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise ValueError(f"{name} must be a float array, got dtype {x.dtype}")
  arg_checks.check_min_rank(name, x, 3, "[..., L, H, d]")
  return x


def _check_index(name: str, index, gates: Array, gates_name: str) -> Array:
  index = jnp.asarray(index)
  if index.shape != gates.shape[:-2]:
    raise ValueError(f"{name} must have shape {gates.shape[:-2]} ({gates_name}'s [..., L]), got "
                     f"shape {index.shape}")
  return index.astype(jnp.float32)


def per_row_alibi_bias(q_gates: Array, k_gates: Array, *, q_index: Optional[Array] = None,
                       k_index: Optional[Array] = None, post_log_scale: float = 1.0) -> Array:
  """The per-row data-dependent ALiBi logit bias ``s * sum_{l=j}^{i-1} log sigmoid(a_i.b_l/sqrt d)``.

  Args:
    q_gates: float ``[..., Lq, H, d]`` gate queries ``a`` of the query tokens.
    k_gates: float ``[..., Lk, H, d]`` gate keys ``b`` of the key tokens, in text order.
    q_index: optional ``[..., Lq]`` text index + 1 of each query (int or float). Omitted
      together with ``k_index``: one sequence with queries = keys (``Lq == Lk``), indices
      ``1 .. L``.
    k_index: optional ``[..., Lk]`` text index + 1 of each key, 0 for a slot without a token.
    post_log_scale: ``s``, multiplies the log gates (x-transformers' ``post_log_scale``).

  Returns:
    float32 ``[..., H, Lq, Lk]``: ``<= 0`` for ``s > 0``; 0 where the key is the query or comes
    after it (those pairs are left to the causal mask).

  Raises:
    ValueError: naming the argument, for non-float gates, mismatched shapes or a
      ``post_log_scale`` that is not a finite number.

  References:
    Lin et al. 2025, arXiv 2503.02130; x-transformers ``PerRowDataDependentAlibi``.
  """
  q_gates = _check_gates("q_gates", q_gates)
  k_gates = _check_gates("k_gates", k_gates)
  if q_gates.shape[-2:] != k_gates.shape[-2:]:
    raise ValueError(f"q_gates and k_gates must agree on [H, d], got shapes {q_gates.shape} and "
                     f"{k_gates.shape}")
  if isinstance(post_log_scale, bool) or not isinstance(post_log_scale, (int, float)) or (
      not math.isfinite(post_log_scale)):
    raise ValueError(f"post_log_scale must be a finite number, got {post_log_scale!r}")
  if (q_index is None) != (k_index is None):
    raise ValueError("q_index and k_index must be given together (or both omitted)")
  if q_index is None:
    if q_gates.shape[-3] != k_gates.shape[-3]:
      raise ValueError(f"without q_index / k_index the queries must be the keys (Lq == Lk), got "
                       f"Lq={q_gates.shape[-3]} and Lk={k_gates.shape[-3]}")
    batch_rank = max(q_gates.ndim, k_gates.ndim) - 3
    q_index = jnp.arange(1, q_gates.shape[-3] + 1, dtype=jnp.float32).reshape(
        (1,) * batch_rank + (q_gates.shape[-3],))
    k_index = q_index
  else:
    q_index = _check_index("q_index", q_index, q_gates, "q_gates")
    k_index = _check_index("k_index", k_index, k_gates, "k_gates")
  scale = q_gates.shape[-1] ** -0.5
  gates = jnp.einsum("...ihd,...jhd->...hij", q_gates.astype(jnp.float32),
                     k_gates.astype(jnp.float32), precision=jax.lax.Precision.HIGHEST) * scale
  log_gates = jax.nn.log_sigmoid(gates) * post_log_scale  # [..., H, Lq, Lk]
  qi = q_index[..., None, :, None]  # [..., 1, Lq, 1]
  ki = k_index[..., None, None, :]  # [..., 1, 1, Lk]
  before = (ki >= 1.0) & (ki < qi)
  log_gates = jnp.where(before, log_gates, 0.0)
  # Reverse cumulative sum along the keys: entry j sums the keys j, j + 1, ... of its row.
  return jax.lax.cumsum(log_gates, axis=log_gates.ndim - 1, reverse=True)
