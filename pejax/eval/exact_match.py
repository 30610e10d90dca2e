"""Scoring of answer bytes under teacher forcing: exact match and per-token accuracy.

A row counts as right when the argmax prediction of every scored (``loss_mask > 0``) byte equals
its target. Because each answer byte is predicted from the correct earlier bytes, this is the
same event as greedy decoding reproducing the whole answer, with no generation loop.

Per-token accuracy is the graded counterpart: the fraction of a row's scored bytes that are
right (1.0 exactly when the row is an exact match). Ruoss et al. 2023 (arXiv:2305.16843) and
Delétang et al. 2023 (arXiv:2207.02098) score their algorithmic tasks per token; their
encoder-style models predict every answer token in one pass, whereas a causal decoder under
teacher forcing predicts each answer byte from the correct earlier ones, which can only make a
later byte easier.
"""

from __future__ import annotations

from flax import nnx
import jax
import jax.numpy as jnp


def _scored_hits(model: nnx.Module, inputs: jax.Array, targets: jax.Array,
                 positions: jax.Array, loss_mask: jax.Array, attention: str
                 ) -> tuple[jax.Array, jax.Array]:
  """bool ``[B, L]`` twice: the argmax is the target, and the byte is scored."""
  logits = model(inputs, positions=positions, attention=attention)
  return jnp.argmax(logits, axis=-1) == targets, loss_mask > 0


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
  hit, scored = _scored_hits(model, inputs, targets, positions, loss_mask, attention)
  return ~jnp.any(~hit & scored, axis=-1)


@nnx.jit(static_argnames=("attention",))
def answer_token_accuracy(model: nnx.Module, inputs: jax.Array, targets: jax.Array,
                          positions: jax.Array, loss_mask: jax.Array, *,
                          attention: str = "dense") -> jax.Array:
  """Fraction of the scored bytes of each row that are predicted right.

  Args: as :func:`answer_exact_match`.

  Returns:
    float32 ``[B]`` in ``[0, 1]``; NaN for a row with no scored byte (there is nothing to be
    right about, and a mean over rows then says so instead of counting it right or wrong).
  """
  hit, scored = _scored_hits(model, inputs, targets, positions, loss_mask, attention)
  right = jnp.sum(hit & scored, axis=-1)
  count = jnp.sum(scored, axis=-1)
  return jnp.where(count > 0, right / jnp.maximum(count, 1), jnp.nan).astype(jnp.float32)
