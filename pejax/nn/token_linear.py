"""A linear layer applied to every token as one 2-D matrix product.

Axes: N tokens (all leading axes flattened), I input features, O output features.

``nnx.Linear`` contracts the last axis of a ``[B, L, I]`` input directly. The forward pass is the
same either way, but the weight gradient ``x^T g`` then contracts two axes (``B`` and ``L``) of
both operands, and XLA:CPU lowers it by first materializing a transposed copy of the large
``[B, L, O]`` output gradient, read with a stride of ``O`` floats: measured on 2 CPU cores (batch
16 x 256 tokens, SwiGLU 128 -> 512 -> 128, forward + backward), the MLP took 1.7x as long as with
the tokens flattened to ``[B * L, I]`` first, where the weight gradient is a plain ``[N, I]^T x
[N, O]`` product with no copy (``benchmarks/results/train_throughput_*.md``). Flattening is a free
reshape (a bitcast), so this layer is ``nnx.Linear`` with that reshape around the product; its
parameters (``kernel`` ``[I, O]``) and their sharding metadata are exactly ``nnx.Linear``'s, so
checkpoints and weight conversions are unchanged.
"""

from __future__ import annotations

import jax
from flax import nnx


class TokenLinear(nnx.Linear):
  """``nnx.Linear`` computing ``[..., I] -> [..., O]`` as one ``[N, I] @ [I, O]`` product.

  Takes the constructor arguments of ``nnx.Linear``.
  """

  def __call__(self, inputs: jax.Array) -> jax.Array:
    """Maps ``[..., I] -> [..., O]`` (any number of leading axes, including none).

    Args:
      inputs: ``[..., I]`` array; its leading axes are flattened to N tokens for the product.

    Returns:
      ``[..., O]``, ``inputs @ kernel (+ bias)`` with the leading axes restored.

    Raises:
      ValueError: if the last axis of ``inputs`` is not ``in_features``.
    """
    if inputs.shape[-1:] != (self.in_features,):
      raise ValueError(
          f"inputs must end in the input width {self.in_features}, got shape {inputs.shape}")
    leading = inputs.shape[:-1]
    flat = super().__call__(inputs.reshape((-1, self.in_features)))
    return flat.reshape(leading + (self.out_features,))
