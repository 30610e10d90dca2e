"""cuDNN flash attention on CUDA GPUs (``jax.nn.dot_product_attention(implementation="cudnn")``).

Axes: B batch, Lq / Lk query / key length, H query heads, K key/value heads, D head dim.

Tried first on CUDA (priority 300). It serves every call cuDNN supports: bf16/fp16, head dim a
multiple of 8 up to 128, no KV-cache offset, no segment ids, no logit hook or content-aware bias,
and either no bias or a bias that gets no gradient (ALiBi, Sandwich: the decoder passes
``bias_grad=False`` for a PE without parameters), materialized in the input dtype; not the
blockwise schedule with a bias (whose promise is O(L * tile) memory).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from pejax.nn.attention.dispatch import AttentionCall, Kernel, register_kernel

Array = jax.Array


def _serves(call: AttentionCall) -> bool:
  """The shapes, dtypes and masks cuDNN's fused kernel supports."""
  q, k, v = call.q, call.k, call.v
  if call.logits_fn is not None or call.has_features or call.q_segment_ids is not None:
    return False
  if not call.full_sequence or (call.causal and q.shape[1] != k.shape[1]):
    return False
  if q.dtype not in (jnp.bfloat16, jnp.float16) or k.dtype != q.dtype or v.dtype != q.dtype:
    return False
  if q.shape[-1] % 8 or q.shape[-1] > 128 or v.shape[-1] != q.shape[-1]:
    return False
  if call.window is not None and not call.causal:
    return False
  if call.bias is not None:
    # cuDNN differentiates a bias only in some layouts; the blockwise schedule promises O(L * tile)
    # memory, which an evaluated [H, Lq, Lk] bias would break; training with a bias needs even
    # lengths.
    if call.bias_grad or call.schedule == "blockwise" or q.shape[1] % 2 or k.shape[1] % 2:
      return False
  return True


def _run(call: AttentionCall) -> Array:
  bias = call.evaluated_bias()
  if bias is not None:
    bias = jax.lax.stop_gradient(bias).astype(call.q.dtype)
  window = None if call.window is None else (call.window - 1, 0)
  return jax.nn.dot_product_attention(call.q, call.k, call.v, bias=bias, is_causal=call.causal,
                                      local_window_size=window, implementation="cudnn")


KERNEL = register_kernel(Kernel("cudnn", _serves, _run, platforms=frozenset({"cuda"}),
                                priority=300))
