"""Masked next-token cross-entropy, the jitted train step and the no-gradient eval step.

Axes: B batch, L sequence length, V vocabulary.

The steps are generic over any ``nnx.Module`` called as
``model(tokens [B, L] int32, *, positions=[B | 1, L] int32, segment_ids=None) -> logits [B, L, V]``
and over batches ``{"inputs", "targets", "positions", "loss_mask"}`` (optionally
``"segment_ids"``), the protocol of the ``pejax.data`` iterators.

On a device mesh the same steps run SPMD-partitioned by XLA: their shardings come from the
arguments (parameters and optimizer state placed by :func:`pejax.parallel.shard_module`, batches
by :func:`pejax.parallel.shard_batch`), and calling them inside
:func:`pejax.parallel.mesh_context` adds the heads-axis activation constraints. Losses and
gradients are global means/sums over the whole batch, whatever the mesh.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

BATCH_KEYS = ("inputs", "targets", "positions", "loss_mask")
OPTIONAL_BATCH_KEYS = ("segment_ids",)


def masked_nll(
    logits: jax.Array, targets: jax.Array, loss_mask: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Summed negative log-likelihood of ``targets`` over the positions ``loss_mask`` selects.

  The log-softmax is computed in float32 whatever the logits dtype. Positions whose mask is 0
  contribute nothing, even if their target id is out of range (padding may use any id). A target
  id outside ``[0, V)`` at a scored position (negative ids included) cannot be checked under
  ``jit``: it is gathered with ``mode="fill"`` so it yields a NaN loss instead of silently
  clamping or wrapping to a valid id.

  Args:
    logits: ``[B, L, V]`` unnormalized scores (any float dtype).
    targets: ``[B, L]`` integer target ids.
    loss_mask: ``[B, L]`` float weights, 1.0 where the target is scored and 0.0 elsewhere.

  Returns:
    ``(nll_sum, num_tokens)``: float32 scalars, ``sum(mask * -log p(target))`` and ``sum(mask)``.
  """
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  target_log_probs = jnp.take_along_axis(
      log_probs, targets.astype(jnp.int32)[..., None], axis=-1, mode="fill",
      fill_value=jnp.nan, wrap_negative_indices=False)[..., 0]
  mask = loss_mask.astype(jnp.float32)
  nll = jnp.where(mask != 0, -target_log_probs, 0.0) * mask
  return jnp.sum(nll), jnp.sum(mask)


def masked_mean_loss(
    logits: jax.Array, targets: jax.Array, loss_mask: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Mean cross-entropy over the scored positions (0 when no position is scored).

  Args:
    logits: ``[B, L, V]`` unnormalized scores.
    targets: ``[B, L]`` integer target ids.
    loss_mask: ``[B, L]`` float weights.

  Returns:
    ``(loss, num_tokens)``: float32 scalars.
  """
  nll_sum, num_tokens = masked_nll(logits, targets, loss_mask)
  safe_count = jnp.where(num_tokens > 0, num_tokens, 1.0)
  return nll_sum / safe_count, num_tokens


def model_inputs(batch: Mapping[str, Any]) -> dict[str, Any]:
  """The arrays of ``batch`` that the steps use; raises ``ValueError`` naming a missing key.

  Positions shared by every row travel as one ``[1, L]`` row: host (NumPy) ``[B, L]`` positions
  whose rows are all equal (unpacked data, the common case) are cut to ``positions[:1]``, and a
  batch may carry ``[1, L]`` positions itself. The decoder then evaluates a position bias once,
  ``[1, H, L, L]``, whose gradient the attention sums over the batch in its custom VJP, and RoPE
  computes one cos/sin table instead of one per row (``benchmarks/README.md``: T5 1.07-1.09x of
  a NoPE step with per-row positions). Device arrays (a sharded batch) are passed unchanged.

  Args:
    batch: A batch dict from a data iterator; extra keys are dropped (they would otherwise become
      part of the jit cache key). ``inputs`` int ``[B, L]``; ``targets``, ``loss_mask`` (and
      ``segment_ids``) ``[B, L]``; ``positions`` ``[B, L]`` or ``[1, L]``.

  Returns:
    A dict with the keys of ``BATCH_KEYS`` plus any of ``OPTIONAL_BATCH_KEYS`` present.
  """
  missing = [key for key in BATCH_KEYS if key not in batch]
  if missing:
    raise ValueError(
        f"batch must contain keys {list(BATCH_KEYS)}, missing {missing}; got keys"
        f" {sorted(batch)}")
  inputs_shape = np.shape(batch["inputs"])
  if len(inputs_shape) != 2:
    raise ValueError(f"batch['inputs'] must have shape [B, L], got shape {inputs_shape}")
  for key in BATCH_KEYS[1:] + OPTIONAL_BATCH_KEYS:
    shape = np.shape(batch[key]) if key in batch else inputs_shape
    if shape != inputs_shape and not (key == "positions" and shape == (1, inputs_shape[1])):
      allowed = " or [1, L]" if key == "positions" else ""
      raise ValueError(
          f"batch[{key!r}] must have the shape of batch['inputs'] {inputs_shape}{allowed}, got "
          f"shape {shape}")
  out = {key: batch[key] for key in BATCH_KEYS + OPTIONAL_BATCH_KEYS if key in batch}
  out["positions"] = shared_positions(out["positions"])
  return out


def shared_positions(positions: Any) -> Any:
  """``positions[:1]`` if ``positions`` is a host ``[B, L]`` array whose rows are all equal.

  Args:
    positions: int ``[B, L]`` positions (NumPy or a device array).

  Returns:
    int ``[1, L]`` (the shared row, NumPy) when every row equals the first; else ``positions``
    unchanged (per-row positions, or a device array, which is not inspected).
  """
  if (isinstance(positions, np.ndarray) and positions.ndim == 2 and positions.shape[0] > 1
      and np.array_equal(positions, np.broadcast_to(positions[:1], positions.shape))):
    return positions[:1]
  return positions


def _forward(model: nnx.Module, batch: Mapping[str, Any]) -> jax.Array:
  return model(
      batch["inputs"], positions=batch["positions"], segment_ids=batch.get("segment_ids"))


def make_train_step(
    *,
    learning_rate_fn: optax.Schedule | None = None,
    donate: bool = True,
) -> Callable[[nnx.Module, nnx.Optimizer, Mapping[str, Any]], dict[str, jax.Array]]:
  """Builds the jitted train step ``(model, optimizer, batch) -> metrics``.

  One step: forward pass, masked mean cross-entropy (:func:`masked_mean_loss`), gradients with
  respect to the ``nnx.Param`` variables, ``optimizer.update(model, grads)``. Model and optimizer
  are updated in place. With ``donate`` their buffers are donated to the computation
  (``nnx.jit(..., donate_argnames=("model", "optimizer"))``), so the old parameter and moment
  arrays are freed, not copied: never keep references to them across a step (a buffer that is
  still referenced elsewhere, e.g. by a host copy an asynchronous checkpoint holds, is silently
  copied instead of donated).

  Args:
    learning_rate_fn: The optimizer's schedule; when given, metrics include the learning rate
      used by this update, ``learning_rate_fn(optimizer.step)`` before the update.
    donate: Donate model and optimizer buffers.

  Returns:
    ``train_step(model, optimizer, batch)`` returning float32 scalars ``loss`` (masked mean NLL
    of the batch before the update), ``grad_norm`` (global norm before clipping), ``tokens``
    (scored positions, ``sum(loss_mask)``) and, with ``learning_rate_fn``, ``learning_rate``.
    Call it with a batch passed through :func:`model_inputs` (the loop does), a dict of
    arrays that all have the shape ``[B, L]``:

    * ``inputs``: int32 ``[B, L]`` token ids fed to the model.
    * ``targets``: int32 ``[B, L]`` next-token ids (``inputs`` shifted left by one).
    * ``positions``: int32 ``[B, L]`` position of each token, passed to the PE.
    * ``loss_mask``: float32 ``[B, L]``, 1.0 where the target is scored and 0.0 elsewhere.
    * ``segment_ids`` (optional): int32 ``[B, L]`` packed-document ids; attention stays
      within a segment.
  """

  def train_step(
      model: nnx.Module, optimizer: nnx.Optimizer, batch: Mapping[str, Any]
  ) -> dict[str, jax.Array]:

    def loss_fn(model: nnx.Module) -> tuple[jax.Array, jax.Array]:
      logits = _forward(model, batch)
      return masked_mean_loss(logits, batch["targets"], batch["loss_mask"])

    (loss, num_tokens), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    metrics = {
        "loss": loss,
        "grad_norm": optax.tree.norm(grads).astype(jnp.float32),
        "tokens": num_tokens,
    }
    if learning_rate_fn is not None:
      metrics["learning_rate"] = jnp.asarray(
          learning_rate_fn(optimizer.step[...]), jnp.float32)
    optimizer.update(model, grads)
    return metrics

  donate_argnames = ("model", "optimizer") if donate else ()
  return nnx.jit(train_step, donate_argnames=donate_argnames)


def bind_train_step(
    train_step: Callable[[nnx.Module, nnx.Optimizer, Mapping[str, Any]], dict[str, jax.Array]],
    model: nnx.Module,
    optimizer: nnx.Optimizer,
) -> Callable[[Mapping[str, Any]], dict[str, jax.Array]]:
  """``train_step`` with ``model`` and ``optimizer`` bound: ``step(batch) -> metrics``.

  ``nnx.jit`` walks the model and optimizer graphs in Python on every call, to split them into
  arrays and merge them back. ``nnx.cached_partial`` walks them once and reuses the result, with
  the same ``Variable`` objects, so ``model`` and ``optimizer`` are updated in place exactly as
  by ``train_step(model, optimizer, batch)`` (bit-identical losses and parameters, pinned by
  tests/train/test_train_step.py). On one CPU core the walk is 10-14 ms a call, a third of a
  step of the algorithmic studies' 4-layer d_model 64 decoder at batch 32 (46.7 vs 32.6 ms a
  step, 2026-12-02, AMD EPYC). Bind after any restore that replaces ``model`` or ``optimizer``
  objects, and keep their structure fixed while the bound step is in use (no new attributes);
  updating their values (``nnx.update``) is fine.

  Args:
    train_step: an NNX-transformed step such as :func:`make_train_step`'s.
    model: the module to train.
    optimizer: its ``nnx.Optimizer``.

  Returns:
    ``step(batch)`` for a batch of ``[B, L]`` arrays (:func:`model_inputs`), the same metrics as
    ``train_step(model, optimizer, batch)``.
  """
  return nnx.cached_partial(train_step, model, optimizer)


@nnx.jit
def eval_step(model: nnx.Module, batch: Mapping[str, Any]) -> dict[str, jax.Array]:
  """Summed NLL and scored-token count of one batch, without gradients or donation.

  Args:
    model: The model (not modified).
    batch: A batch dict (pass it through :func:`model_inputs`): int32 ``[B, L]`` ``inputs``,
      ``targets``, ``positions`` (and optional ``segment_ids``), float32 ``[B, L]``
      ``loss_mask``, as for :func:`make_train_step`.

  Returns:
    float32 scalars ``nll_sum`` and ``tokens``; sum them over batches, perplexity is
    ``exp(nll_sum / tokens)``.
  """
  logits = _forward(model, batch)
  nll_sum, num_tokens = masked_nll(logits, batch["targets"], batch["loss_mask"])
  return {"nll_sum": nll_sum, "tokens": num_tokens}


def evaluate_batches(model: nnx.Module, batches: Iterable[Mapping[str, Any]]) -> dict[str, float]:
  """Token-weighted mean loss and perplexity of ``model`` over ``batches``.

  Args:
    model: The model.
    batches: Finite iterable of batch dicts.

  Returns:
    ``{"loss", "perplexity", "tokens"}`` as Python floats; sums are accumulated in float64 on the
    host, so the result does not depend on how tokens are split into batches beyond float32
    rounding of each batch sum.

  Raises:
    ValueError: if ``batches`` scores no token.
  """
  nll_total = 0.0
  token_total = 0.0
  for batch in batches:
    out = jax.device_get(eval_step(model, model_inputs(batch)))
    nll_total += float(out["nll_sum"])
    token_total += float(out["tokens"])
  if token_total <= 0:
    raise ValueError(f"batches must score at least one token, got {token_total} tokens")
  loss = nll_total / token_total
  return {"loss": loss, "perplexity": float(np.exp(loss)), "tokens": token_total}
