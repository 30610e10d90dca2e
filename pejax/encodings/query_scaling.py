"""Position-dependent query scalings that combine with any PE: log-n, SSMax, Llama 4's tuning.

Axes: B batch, L length, H heads; `...` any leading batch dims.

Both sharpen attention as the number of visible keys grows, by multiplying each query (hence its
logits q . k) by a factor that depends on its position. In a causal decoder the query at
position p (0-based, restarting at 0 in each packed segment) sees n = p + 1 keys:

* log-n scaling (Su 2021; Qwen-1's ``use_logn_attn``): factor max(1, log(n) / log(T)), T the
  training length; 1 within the training length, log_T(n) beyond it. Qwen-1 builds the table
  ``[math.log(i, seq_length) if i > seq_length else 1 for i in range(1, ...)]`` and indexes it by
  the 0-based position, which is this formula with n = p + 1.
* Scalable-Softmax, SSMax (Nakanishi 2025): softmax(z) over n entries becomes
  n^(s z_i) / sum_j n^(s z_j) = softmax((s log n) z), with s a learned scalar per head and layer;
  for attention this is the factor s_h log(n) on the queries.
* Llama 4's attention-temperature tuning (on its NoPE layers): factor
  ``1 + attn_scale * log(1 + floor((p + 1) / floor_scale))``, a step function of the position,
  exactly 1 for ``p + 1 < floor_scale`` (defaults ``floor_scale = 8192``, ``attn_scale = 0.1``).

Multiplying the queries scales q . k only: an additive logit bias (ALiBi, T5, KERPLE, ...) is not
scaled, whereas SSMax as written scales the whole softmax input. With rotation PEs (RoPE, the
setting of both papers) the two agree. With sliding-window attention the number of visible keys
is min(p + 1, W), not p + 1; the caller passes positions accordingly.

References:
  Su, "Looking at the Scale Operation of Attention from the Perspective of Entropy Invariance",
  kexue.fm/archives/8823 (2021); Bai et al., "Qwen Technical Report", arXiv:2309.16609
  (LogN-Scaling, section 2.3).
  Nakanishi, "Scalable-Softmax Is Superior for Attention", arXiv:2501.19399.
  Meta 2025, "The Llama 4 herd" (ai.meta.com/blog/llama-4-multimodal-intelligence); Hugging Face
  ``transformers``, ``models/llama4/modeling_llama4.py`` (``attn_temperature_tuning``).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks


def _check_positions(positions: Any) -> jnp.ndarray:
  """Integer `[..., L]` positions, concrete ones >= 0 (n = position + 1 keys must be >= 1)."""
  positions = arg_checks.check_integer_array("positions", positions)
  arg_checks.check_min_rank("positions", positions, 1, "[..., L]")
  if not isinstance(positions, jax.core.Tracer) and positions.size:
    low = int(np.min(np.asarray(positions)))  # numpy: also for a concrete array under a jit.
    if low < 0:
      raise ValueError(
          f"positions must be >= 0 (position p sees p + 1 keys), got min {low}")
  return positions


def _log_num_keys(positions: jnp.ndarray) -> jnp.ndarray:
  """log(p + 1) in float32; NaN (the documented poison) at a traced negative position p, which
  the eager check rejects: a query there sees no key count a factor could be made of."""
  num_keys = positions.astype(jnp.float32) + 1.0
  return jnp.where(num_keys >= 1.0, jnp.log(jnp.maximum(num_keys, 1.0)), jnp.nan)


def logn_query_scale(positions: Any, *, train_len: int) -> jnp.ndarray:
  """Log-n attention scaling factors max(1, log(p + 1) / log(T)) for queries at positions p.

  Args:
    positions: `[..., L]` integer positions p >= 0 (typically `[B | 1, L]`); the query at p
      sees p + 1 keys.
    train_len: Training length T >= 2: factors are exactly 1 for p < T.

  Returns:
    `[..., L]` float32 factors >= 1 that multiply the queries (broadcast over heads and head dim
    by the caller, e.g. `q * scale[..., None, None]`).

  Raises:
    ValueError: if `positions` is not an integer array of rank >= 1 or (when concrete) has a
      negative entry, or `train_len` is not an integer >= 2.

  References:
    Bai et al. 2023, "Qwen Technical Report", arXiv:2309.16609 (LogN-Scaling); Su 2021,
    kexue.fm/archives/8823.
  """
  positions = _check_positions(positions)
  train_len = arg_checks.check_positive_int("train_len", train_len)
  if train_len < 2:
    raise ValueError(f"train_len must be >= 2 (log(train_len) divides), got {train_len}")
  return jnp.maximum(1.0, _log_num_keys(positions) / jnp.float32(math.log(train_len)))


def ssmax_query_scale(positions: Any, s: Any) -> jnp.ndarray:
  """SSMax factors s_h * log(p + 1) for queries at positions p and heads h.

  At p = 0 (a single visible key) the factor is 0, which is harmless: a softmax over one entry
  is 1 whatever its logit. `s` may be a traced learned parameter.

  Args:
    positions: `[..., L]` integer positions p >= 0 (typically `[B | 1, L]`); the query at p
      sees n = p + 1 keys.
    s: `[H]` per-head scaling parameters (learned; the function does not constrain their sign).
      s = 1 / log(T) makes the factor exactly 1 at n = T keys, a neutral initialization for a
      model trained at length T.

  Returns:
    `[..., L, H]` float32 factors that multiply the queries (`q * scale[..., None]` for
    `q` of shape `[B, L, H, D]`).

  Raises:
    ValueError: if `positions` is not an integer array of rank >= 1 or (when concrete) has a
      negative entry, or `s` is not a 1-D floating array.

  References:
    Nakanishi 2025, "Scalable-Softmax Is Superior for Attention", arXiv:2501.19399.
  """
  positions = _check_positions(positions)
  s = jnp.asarray(s)
  if s.ndim != 1 or not jnp.issubdtype(s.dtype, jnp.floating):
    raise ValueError(f"s must be a 1-D floating array [H], got shape {s.shape} dtype {s.dtype}")
  log_n = _log_num_keys(positions)[..., None]  # [..., L, 1]
  return log_n * jnp.reshape(s.astype(jnp.float32), (1,) * positions.ndim + s.shape)


def llama4_query_scale(positions: Any, *, floor_scale: int = 8192,
                       attn_scale: float = 0.1) -> jnp.ndarray:
  """Llama 4's attention-temperature factors ``1 + attn_scale * log1p(floor((p + 1) / F))``.

  Llama 4 multiplies the queries of its NoPE layers by this factor (after the projections and
  before the softmax scale ``1 / sqrt(D)``): 1 for the first ``F - 1`` positions, then growing by
  ``attn_scale * log(2)``, ``log(3)``, ... at every multiple of F, so that attention stays sharp
  over very long contexts. The integer part is computed exactly in int32 (Hugging Face divides
  float32 ``p + 1`` by F, the same number for every position below 2^24); the logarithm in
  float32. Hugging Face takes p from the KV-cache slot (``arange(L) + past_seen_tokens``), which
  is the position for an unpadded, unpacked sequence; pejax takes the query's explicit position,
  so the factor restarts with the positions of each packed segment.

  Args:
    positions: `[..., L]` integer positions p >= 0 (typically `[B | 1, L]`).
    floor_scale: F >= 1, HF ``floor_scale``: the span in tokens of each step.
    attn_scale: HF ``attn_scale`` (finite): the strength of the tuning; 0 gives factors of 1.

  Returns:
    `[..., L]` float32 factors >= 1 that multiply the queries (`q * scale[..., None, None]`).

  Raises:
    ValueError: if `positions` is not an integer array of rank >= 1 or (when concrete) has a
      negative entry, `floor_scale` is not a positive integer or `attn_scale` is not a finite
      number.

  References:
    Meta 2025, "The Llama 4 herd"; Hugging Face ``transformers``
    ``models/llama4/modeling_llama4.py`` (``Llama4TextAttention``, ``attn_temperature_tuning``,
    citing Nakanishi 2025, arXiv:2501.19399).
  """
  positions = _check_positions(positions)
  floor_scale = arg_checks.check_positive_int("floor_scale", floor_scale)
  if (isinstance(attn_scale, bool) or not isinstance(attn_scale, (int, float))
      or not math.isfinite(attn_scale)):
    raise ValueError(f"attn_scale must be a finite number, got {attn_scale!r}")
  steps = jnp.floor_divide(positions.astype(jnp.int32) + 1, jnp.int32(floor_scale))
  # A traced negative position (the eager check rejects concrete ones) poisons its factor.
  factor = 1.0 + jnp.float32(attn_scale) * jnp.log1p(steps.astype(jnp.float32))
  return jnp.where(positions >= 0, factor, jnp.nan)
