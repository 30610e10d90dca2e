"""The SwiGLU gate ``silu(a) * b`` with a hand-written gradient.

Axes: ``...`` any leading axes (B batch, L length), F hidden width.

Autodiff of ``silu(a) * b`` on XLA:CPU runs silu's backward as several elementwise fusions
(``benchmarks/README.md``: 3 fusions of 4-6 ms each per layer at the benchmark size). The custom
VJP keeps ``a`` and ``b`` as residuals and computes both input gradients from one sigmoid:
``s = sigmoid(a)``, ``da = g * b * s * (1 + a * (1 - s))``, ``db = g * a * s``.

References:
  Shazeer 2020, "GLU Variants Improve Transformer", arXiv 2002.05202.
  Elfwing et al. 2018, "Sigmoid-Weighted Linear Units for Neural Network Function Approximation
  in Reinforcement Learning", arXiv 1702.03118 (SiLU).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


@jax.custom_vjp
def swiglu(gate: Array, up: Array) -> Array:
  """``silu(gate) * up``, elementwise, in the inputs' dtype.

  Args:
    gate: ``[..., F]`` gate pre-activations ``a``.
    up: ``[..., F]`` linear branch ``b`` (same shape and dtype).

  Returns:
    ``[..., F]``.
  """
  return jax.nn.silu(gate) * up


def _swiglu_fwd(gate: Array, up: Array):
  return jax.nn.silu(gate) * up, (gate, up)


def _swiglu_bwd(residuals, g: Array):
  gate, up = residuals
  a = gate.astype(jnp.float32)
  g32 = g.astype(jnp.float32)
  s = jax.nn.sigmoid(a)
  d_gate = g32 * up.astype(jnp.float32) * s * (1.0 + a * (1.0 - s))
  d_up = g32 * a * s
  return d_gate.astype(gate.dtype), d_up.astype(up.dtype)


swiglu.defvjp(_swiglu_fwd, _swiglu_bwd)
