"""Forgetting attention (FoX): a data-dependent decay bias from forget gates (Lin et al. 2025).

Axes: B batch, L length, Lq / Lk query / key length, H heads; ``...`` any leading batch dims.

Each head h computes a scalar forget gate per token, ``f_t = sigmoid(w_h . x_t + b_h)``, from the
layer's input, and adds to the attention logit of query i and key j <= i

  D_ij = sum_{l = j+1}^{i} log f_l = c_i - c_j,     c_t = sum_{l <= t} log f_l,

so a key's weight decays by the product of the gates of the tokens after it. With constant
gates this is ALiBi with a learned slope (``-log f`` per step); x-transformers calls it
"data dependent ALiBi". Only the cumulative sums ``c`` are needed, one scalar per token and head:
the bias is evaluated tile by tile (blockwise attention) and continues in a KV cache by carrying
the last ``c`` (``initial``). Entries with ``j > i`` are not masked here (they come out positive);
the causal mask removes them.

The cumulative sum is float32; ``c`` grows linearly in magnitude with the length, so on very long
sequences the difference ``c_i - c_j`` of nearby tokens loses absolute precision (about
``|c_i| * 6e-8``), as in the official implementation.

References:
  Lin, Nikishin, He and Courville 2025, "Forgetting Transformer: Softmax Attention with a Forget
  Gate", ICLR 2025, arXiv 2503.02130.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from pejax.encodings import arg_checks

Array = jax.Array


def _check_float(name: str, x: Array, axes: str, rank: int) -> Array:
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise ValueError(f"{name} must be a float array, got dtype {x.dtype}")
  arg_checks.check_min_rank(name, x, rank, axes)
  return x


def fox_cumulative_log_forget(gate_logits: Array, *, initial: Optional[Array] = None) -> Array:
  """Cumulative log forget gates ``c_t = initial + sum_{l <= t} log sigmoid(gate_logits_l)``.

  Args:
    gate_logits: float ``[..., L, H]`` pre-sigmoid forget-gate logits ``w_h . x_t + b_h``.
    initial: optional float ``[..., H]`` running sum carried from earlier tokens (the last ``c``
      of a KV cache); zero when omitted.

  Returns:
    float32 ``[..., L, H]`` (non-increasing along L).

  References:
    Lin et al. 2025, arXiv 2503.02130.
  """
  gate_logits = _check_float("gate_logits", gate_logits, "[..., L, H]", 2)
  log_forget = jax.nn.log_sigmoid(gate_logits.astype(jnp.float32))
  cumulative = jnp.cumsum(log_forget, axis=-2)
  if initial is None:
    return cumulative
  initial = _check_float("initial", initial, "[..., H]", 1)
  if initial.shape[-1] != gate_logits.shape[-1]:
    raise ValueError(f"initial must have H = {gate_logits.shape[-1]} entries on its last axis "
                     f"(shape [..., H]), got shape {initial.shape}")
  initial = initial.astype(jnp.float32)[..., None, :]
  initial = initial.reshape((1,) * (cumulative.ndim - initial.ndim) + initial.shape)
  return cumulative + initial


def fox_bias(q_cumulative: Array, k_cumulative: Array) -> Array:
  """The forgetting-attention logit bias ``c_i - c_j`` from cumulative log gates.

  Args:
    q_cumulative: float ``[..., Lq, H]`` cumulative log gates of the query tokens.
    k_cumulative: float ``[..., Lk, H]`` cumulative log gates of the key tokens (same running
      sum: :func:`fox_cumulative_log_forget` over one sequence).

  Returns:
    float32 ``[..., H, Lq, Lk]``; ``<= 0`` where the key precedes or is the query.

  References:
    Lin et al. 2025, arXiv 2503.02130.
  """
  q_cumulative = _check_float("q_cumulative", q_cumulative, "[..., Lq, H]", 2)
  k_cumulative = _check_float("k_cumulative", k_cumulative, "[..., Lk, H]", 2)
  if q_cumulative.shape[-1] != k_cumulative.shape[-1]:
    raise ValueError(f"q_cumulative and k_cumulative must have the same number of heads, got "
                     f"shapes {q_cumulative.shape} and {k_cumulative.shape}")
  rank = max(q_cumulative.ndim, k_cumulative.ndim)
  q_c = jnp.swapaxes(q_cumulative.astype(jnp.float32), -1, -2)[..., :, None]  # [..., H, Lq, 1]
  k_c = jnp.swapaxes(k_cumulative.astype(jnp.float32), -1, -2)[..., None, :]  # [..., H, 1, Lk]
  q_c = q_c.reshape((1,) * (rank - q_cumulative.ndim) + q_c.shape)
  k_c = k_c.reshape((1,) * (rank - k_cumulative.ndim) + k_c.shape)
  return q_c - k_c


def forgetting_bias(gate_logits: Array) -> Array:
  """The full ``[L, L]`` forgetting-attention bias of one sequence from its gate logits.

  Args:
    gate_logits: float ``[..., L, H]`` pre-sigmoid forget-gate logits.

  Returns:
    float32 ``[..., H, L, L]``: ``sum_{l=j+1}^{i} log sigmoid(gate_logits_l)`` at ``(i, j)`` for
    ``j <= i`` (0 on the diagonal); the entries above the diagonal are left for the causal mask.

  References:
    Lin et al. 2025, arXiv 2503.02130.
  """
  cumulative = fox_cumulative_log_forget(gate_logits)
  return fox_bias(cumulative, cumulative)
