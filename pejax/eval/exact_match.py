"""Exact-match scoring of answer bytes under teacher forcing.

A row counts as right when the argmax prediction of every scored (``loss_mask > 0``) byte equals
its target. Because each answer byte is predicted from the correct earlier bytes, this is the
same event as greedy decoding reproducing the whole answer, with no generation loop.
"""

from __future__ import annotations

from flax import nnx
import jax
import jax.numpy as jnp


@nnx.jit(static_argnames=("attention",))
def answer_exact_match(model: nnx.Module, inputs: jax.Array, targets: jax.Array,
                       positions: jax.Array, loss_mask: jax.Array, *,
                       attention: str = "dense") -> jax.Array:
  """Whether every scored byte of each row is predicted right.

  Args:
    model: decoder called as ``model(inputs, positions=..., attention=...) -> [B, L, V]``.
    inputs: int ``[B, L]`` tokens.
    targets: int ``[B, L]`` next tokens.
    positions: int ``[B, L]`` positions.
    loss_mask: ``[B, L]``, non-zero on the answer bytes.
    attention: ``"dense"`` or ``"blockwise"``.

  Returns:
    bool ``[B]``.
  """
  logits = model(inputs, positions=positions, attention=attention)
  wrong = (jnp.argmax(logits, axis=-1) != targets) & (loss_mask > 0)
  return ~jnp.any(wrong, axis=-1)
