"""The pejax decoder's architecture in PyTorch, for the side-by-side training benchmark.

Axes: B batch, L length, E model width, H heads, D head dim, F MLP hidden width, V vocabulary.

Same model as ``pejax.nn.Decoder`` with its defaults: token embedding scaled by sqrt(E), pre-norm
blocks (RMSNorm with a learned scale, epsilon inside the square root), multi-head causal
attention with RoPE (``half`` layout, base 10000) or no PE, SwiGLU MLP, bias-free linears, final
RMSNorm and tied output embedding. :func:`load_pejax_params` copies a pejax model's parameters
into it (kernels transposed to PyTorch's ``[out, in]``), so both start from identical weights.
Attention is ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``, PyTorch's
fused kernel.

The optimizer mirrors ``pejax.train.create_optimizer``: global-norm clipping, then AdamW with
weight decay only on parameters of rank >= 2, on the same warm-up + cosine schedule.

This module imports torch: it is only used by ``benchmarks/`` (optional ``bench`` extra), never
by the library.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
  """``x * rsqrt(mean(x^2) + eps) * scale`` over the last axis (as ``flax.nnx.RMSNorm``)."""

  def __init__(self, width: int, *, eps: float):
    super().__init__()
    self.scale = nn.Parameter(torch.ones(width))
    self.eps = eps

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.scale


def rope_tables(length: int, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
  """float32 ``cos, sin`` of shape ``[L, 1, D]`` for the ``half`` layout."""
  inv_freq = (np.float32(1.0) / (np.float32(base) ** (
      np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim))))
  angles = np.arange(length, dtype=np.float32)[:, None] * inv_freq[None, :].astype(np.float32)
  angles = np.concatenate([angles, angles], axis=-1)[:, None, :]
  return torch.from_numpy(np.cos(angles)), torch.from_numpy(np.sin(angles))


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
  """Rotates ``[B, L, H, D]`` by ``cos, sin`` ``[L, 1, D]`` (``rotate_half`` convention)."""
  half = x.shape[-1] // 2
  rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
  return x * cos + rotated * sin


class Block(nn.Module):
  """RMSNorm -> causal self-attention -> residual; RMSNorm -> SwiGLU -> residual."""

  def __init__(self, width: int, heads: int, hidden: int, eps: float):
    super().__init__()
    self.heads = heads
    self.attention_norm = RMSNorm(width, eps=eps)
    self.query = nn.Linear(width, width, bias=False)
    self.key = nn.Linear(width, width, bias=False)
    self.value = nn.Linear(width, width, bias=False)
    self.output = nn.Linear(width, width, bias=False)
    self.mlp_norm = RMSNorm(width, eps=eps)
    self.gate = nn.Linear(width, hidden, bias=False)
    self.up = nn.Linear(width, hidden, bias=False)
    self.down = nn.Linear(hidden, width, bias=False)

  def forward(self, x: torch.Tensor, rope) -> torch.Tensor:
    b, l, e = x.shape
    h = self.attention_norm(x)
    q = self.query(h).view(b, l, self.heads, -1)
    k = self.key(h).view(b, l, self.heads, -1)
    v = self.value(h).view(b, l, self.heads, -1)
    if rope is not None:
      q, k = apply_rope(q, *rope), apply_rope(k, *rope)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         is_causal=True)
    x = x + self.output(out.transpose(1, 2).reshape(b, l, e))
    h = self.mlp_norm(x)
    return x + self.down(F.silu(self.gate(h)) * self.up(h))


class TorchGPT(nn.Module):
  """Decoder-only Transformer matching ``pejax.nn.Decoder`` (SwiGLU, tied embeddings)."""

  def __init__(self, *, vocab_size: int, num_layers: int, d_model: int, num_heads: int,
               mlp_hidden: int, pe: str, max_length: int, rope_base: float = 10000.0,
               eps: float = 1e-6):
    super().__init__()
    if pe not in ("rope", "none"):
      raise ValueError(f"pe must be 'rope' or 'none', got {pe!r}")
    self.d_model = d_model
    self.embed = nn.Embedding(vocab_size, d_model)
    self.blocks = nn.ModuleList(
        [Block(d_model, num_heads, mlp_hidden, eps) for _ in range(num_layers)])
    self.final_norm = RMSNorm(d_model, eps=eps)
    if pe == "rope":
      cos, sin = rope_tables(max_length, d_model // num_heads, rope_base)
      self.register_buffer("cos", cos, persistent=False)
      self.register_buffer("sin", sin, persistent=False)
    else:
      self.cos = self.sin = None

  def forward(self, tokens: torch.Tensor) -> torch.Tensor:
    """``[B, L]`` int64 -> float32 logits ``[B, L, V]``."""
    length = tokens.shape[1]
    rope = None if self.cos is None else (self.cos[:length], self.sin[:length])
    x = self.embed(tokens) * math.sqrt(self.d_model)
    for block in self.blocks:
      x = block(x, rope)
    return self.final_norm(x) @ self.embed.weight.t()


def load_pejax_params(model: TorchGPT, params: dict[str, np.ndarray]) -> None:
  """Copies a pejax model's parameters into ``model`` (Linear kernels transposed).

  ``params`` maps ``"blocks/0/attention/query/kernel"``-style paths to arrays
  (``benchmarks.train_throughput.flat_params``).

  Raises ``ValueError`` if a parameter is missing, left over or of another shape, so that the
  two models provably have the same parameters.
  """
  used = set()

  def put(param: torch.Tensor, key: str, transpose: bool = False) -> None:
    if key not in params:
      raise ValueError(f"pejax parameter {key!r} not found; have {sorted(params)}")
    array = params[key].T if transpose else params[key]
    if tuple(array.shape) != tuple(param.shape):
      raise ValueError(f"shape mismatch for {key}: pejax {array.shape} vs torch "
                       f"{tuple(param.shape)}")
    with torch.no_grad():
      param.copy_(torch.from_numpy(np.ascontiguousarray(array)))
    used.add(key)

  put(model.embed.weight, "embed/embedding")
  put(model.final_norm.scale, "final_norm/scale")
  for i, block in enumerate(model.blocks):
    prefix = f"blocks/{i}/"
    put(block.attention_norm.scale, prefix + "attention_norm/scale")
    put(block.mlp_norm.scale, prefix + "mlp_norm/scale")
    for name in ("query", "key", "value", "output"):
      put(getattr(block, name).weight, f"{prefix}attention/{name}/kernel", transpose=True)
    for name in ("gate", "up", "down"):
      put(getattr(block, name).weight, f"{prefix}mlp/{name}/kernel", transpose=True)
  if used != set(params):
    raise ValueError(f"pejax parameters without a torch counterpart: {set(params) - used}")


def warmup_cosine(step: int, *, learning_rate: float, total_steps: int, warmup_steps: int,
                  min_lr_ratio: float) -> float:
  """``pejax.train.warmup_cosine_schedule`` (optax ``warmup_cosine_decay_schedule``) in Python."""
  floor = learning_rate * min_lr_ratio
  if step < warmup_steps:
    return learning_rate * step / warmup_steps
  if step > total_steps:
    return floor
  progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
  return floor + (learning_rate - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def make_optimizer(model: TorchGPT, *, learning_rate: float, weight_decay: float, b1: float,
                   b2: float, total_steps: int, warmup_steps: int, min_lr_ratio: float):
  """AdamW (decay on rank >= 2 only) and a LambdaLR on the pejax schedule."""
  decay = [p for p in model.parameters() if p.ndim >= 2]
  no_decay = [p for p in model.parameters() if p.ndim < 2]
  optimizer = torch.optim.AdamW(
      [{"params": decay, "weight_decay": weight_decay},
       {"params": no_decay, "weight_decay": 0.0}],
      lr=learning_rate, betas=(b1, b2), eps=1e-8, foreach=True)
  scheduler = torch.optim.lr_scheduler.LambdaLR(
      optimizer, lambda step: warmup_cosine(
          step, learning_rate=learning_rate, total_steps=total_steps, warmup_steps=warmup_steps,
          min_lr_ratio=min_lr_ratio) / learning_rate)
  return optimizer, scheduler


def masked_mean_loss(logits: torch.Tensor, targets: torch.Tensor,
                     loss_mask: torch.Tensor) -> torch.Tensor:
  """Mean next-token cross-entropy over the scored positions (as ``pejax.train``)."""
  nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                        reduction="none")
  mask = loss_mask.reshape(-1)
  return (nll * mask).sum() / mask.sum().clamp_min(1.0)


def train_step(model, optimizer, scheduler, batch, *, clip_norm: float) -> torch.Tensor:
  """One step: forward, masked loss, backward, clip, AdamW, schedule. Returns the loss."""
  optimizer.zero_grad(set_to_none=True)
  loss = masked_mean_loss(model(batch["inputs"]), batch["targets"], batch["loss_mask"])
  loss.backward()
  if clip_norm > 0:
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm, foreach=True)
  optimizer.step()
  scheduler.step()
  return loss.detach()
