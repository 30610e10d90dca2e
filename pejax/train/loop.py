"""The training loop: steps, progress, metrics, validation, checkpoints, resume, graceful stop.

``train`` is generic over any ``nnx.Module`` called as
``model(tokens [B, L] int32, *, positions=[B, L] int32, segment_ids=None) -> logits [B, L, V]``
and any batch iterator following the ``pejax.data`` protocol (``__next__`` returning
``{"inputs", "targets", "positions", "loss_mask"}``, ``get_state() -> dict``,
``set_state(dict)``).

Step numbering: ``step`` is the number of optimizer updates applied. The loss reported for step
``s`` is that of the ``s``-th batch, computed with the parameters after ``s - 1`` updates; the
checkpoint of step ``s`` holds the parameters after ``s`` updates and the iterator state after
``s`` batches, so a resumed run continues bit for bit like an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import os
from typing import Any, Callable, Iterator, Mapping, Sequence

import jax
from absl import logging
from flax import nnx

from pejax import parallel
from pejax.encodings import arg_checks
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import metrics as metrics_lib
from pejax.train import optimizer as optimizer_lib
from pejax.train import progress as progress_lib
from pejax.train import signals as signals_lib
from pejax.train import train_step as train_step_lib

StepCallback = Callable[[int, Mapping[str, float]], Any]
EvalFn = Callable[[nnx.Module], Mapping[str, Any]]


class NonFiniteLossError(RuntimeError):
  """The training loss (or gradient norm) became NaN or infinite; the bad state was not saved.

  Attributes:
    step: The step whose loss was non-finite.
    loss: That loss.
    grad_norm: Its gradient norm.
    last_checkpoint_step: The newest checkpoint on disk (all written before the failure), or
      ``None``.
  """

  def __init__(
      self, *, step: int, loss: float, grad_norm: float, last_checkpoint_step: int | None,
      checkpoint_dir: str):
    self.step = step
    self.loss = loss
    self.grad_norm = grad_norm
    self.last_checkpoint_step = last_checkpoint_step
    where = (
        f"the last good checkpoint is step {last_checkpoint_step} in {checkpoint_dir}"
        if last_checkpoint_step is not None else f"no checkpoint was written to {checkpoint_dir}")
    super().__init__(
        f"non-finite training loss {loss} (grad_norm {grad_norm}) at step {step}; training"
        f" stopped without saving this state, {where}")


@dataclasses.dataclass
class TrainResult:
  """Outcome of :func:`train`.

  Attributes:
    final_step: Final step (updates applied in total, across resumes).
    start_step: Step the call started from (> 0 after a resume).
    losses: Training loss of every step run by this call, in order.
    history: Records this call wrote to ``metrics.jsonl`` (train and eval).
    stop_reason: ``None`` when all ``config.train.steps`` ran; otherwise why the run stopped
      early (a checkpoint was saved): the signal name (``"SIGTERM"``, ``"SIGINT"``) or
      ``"data_exhausted"``.
    last_checkpoint_step: Newest checkpoint step on disk at return, or ``None``.
  """

  final_step: int
  start_step: int
  losses: list[float]
  history: list[dict[str, Any]]
  stop_reason: str | None
  last_checkpoint_step: int | None

  @property
  def last_loss(self) -> float | None:
    """Loss of the last step run by this call."""
    return self.losses[-1] if self.losses else None


def _get_data_state(train_iter: Any) -> dict[str, Any]:
  get_state = getattr(train_iter, "get_state", None)
  return copy.deepcopy(dict(get_state())) if get_state is not None else {}


def _set_data_state(train_iter: Any, state: Mapping[str, Any]) -> None:
  set_state = getattr(train_iter, "set_state", None)
  if set_state is not None:
    set_state(dict(state))
  elif state:
    raise ValueError(
        f"train_iter has no set_state, so the saved data state {dict(state)} cannot be restored")
  else:
    logging.warning("train_iter has no get_state/set_state: data order restarts on resume")


def _next_batch(train_iter: Iterator[Any]) -> Any | None:
  try:
    return next(train_iter)
  except StopIteration:
    return None


def train(
    model: nnx.Module,
    optimizer: nnx.Optimizer,
    train_iter: Iterator[Mapping[str, Any]],
    *,
    config: Any,
    workdir: str | os.PathLike[str],
    eval_fn: EvalFn | None = None,
    checkpointer: checkpoint_lib.Checkpointer | None = None,
    train_step: Callable[..., Mapping[str, Any]] | None = None,
    step_callbacks: Sequence[StepCallback] = (),
    log_fn: Callable[[str], Any] = print,
    handle_signals: bool = True,
) -> TrainResult:
  """Trains ``model`` for ``config.train.steps`` optimizer steps, resuming if possible.

  Each step: the batch goes through the jitted train step (model and optimizer buffers donated),
  the next batch is fetched while the device computes, then the step's metrics are read back
  and checked. Then, in order: a progress line and a ``"train"`` record every
  ``config.train.log_every`` steps; ``eval_fn(model)`` and an ``"eval"`` record every
  ``config.train.eval_every`` steps and at the final step; a checkpoint every
  ``config.train.checkpoint_every`` steps, at the final step and when a stop was requested.

  Resume: if the checkpoint directory (``<workdir>/checkpoints`` unless ``checkpointer`` is
  given) holds a checkpoint and ``config.train.resume`` is true, the model, optimizer, step and
  data-iterator state are restored (after checking the saved config, see
  :class:`~pejax.train.checkpoint.Checkpointer`) and training continues exactly; ``train.steps``
  may be larger than in the first run. ``metrics.jsonl`` keeps its records up to the restored
  step and is appended to.

  Meshes: the loop is agnostic; pass a model and optimizer placed on a mesh
  (:func:`pejax.parallel.shard_module`), a ``train_iter`` yielding global sharded arrays
  (:class:`pejax.parallel.ShardedBatches`) and call it inside
  :func:`pejax.parallel.mesh_context`. Checkpoints restore onto whatever placement the given
  model and optimizer have (another mesh, or one device).

  Graceful stop: SIGINT / SIGTERM (with ``handle_signals``) make the loop save a checkpoint at the
  next step boundary and return with ``stop_reason`` set to the signal name. In a multi-process
  run a signal to any one process stops every process at the same step boundary (one all-gather
  of the stop flags per step, :func:`pejax.parallel.agree_on_stop`), so they save one consistent
  checkpoint; only process 0 writes ``metrics.jsonl``.

  NaN guard: a non-finite loss or gradient norm raises :class:`NonFiniteLossError` before
  anything of that state is logged or saved; the checkpoints on disk are all from earlier steps.

  Args:
    model: Any NNX module with the decoder call signature.
    optimizer: ``nnx.Optimizer`` over ``model`` (e.g. :func:`~pejax.train.create_optimizer`
      built with ``total_steps=config.train.steps``).
    train_iter: The training batch iterator.
    config: The experiment config (reads ``train.*`` and ``optim.*``; saved in checkpoints).
    workdir: Run directory for ``metrics.jsonl`` and, by default, ``checkpoints/``.
    eval_fn: Validation callable ``model -> {name: value}``, or ``None``.
    checkpointer: A :class:`~pejax.train.checkpoint.Checkpointer`; default one in
      ``<workdir>/checkpoints`` keeping ``config.train.keep_checkpoints`` steps (0 keeps all).
      A given checkpointer is waited on, not closed.
    train_step: ``(model, optimizer, batch) -> metrics`` with at least ``loss`` and
      ``grad_norm``; default :func:`~pejax.train.make_train_step` with the learning-rate schedule
      of ``config.optim``.
    step_callbacks: Called as ``callback(step, metrics)`` after every step with host floats.
    log_fn: Receives the progress and evaluation lines.
    handle_signals: Install the SIGINT / SIGTERM handlers for the duration of the call.

  Returns:
    A :class:`TrainResult`.

  Raises:
    NonFiniteLossError: on a NaN or infinite loss or gradient norm.
    ValueError: for bad ``config.train`` values; if the workdir holds checkpoints but
      ``config.train.resume`` is false; if the checkpoint does not match the config or model.
  """
  train_config = config.train
  total_steps = arg_checks.check_positive_int("config.train.steps", train_config.steps)
  log_every = arg_checks.check_nonnegative_int("config.train.log_every", train_config.log_every)
  eval_every = arg_checks.check_nonnegative_int(
      "config.train.eval_every", train_config.eval_every)
  checkpoint_every = arg_checks.check_nonnegative_int(
      "config.train.checkpoint_every", train_config.checkpoint_every)
  keep = arg_checks.check_nonnegative_int(
      "config.train.keep_checkpoints", train_config.keep_checkpoints)
  workdir = os.fspath(workdir)
  os.makedirs(workdir, exist_ok=True)

  with contextlib.ExitStack() as stack:
    if checkpointer is None:
      checkpointer = stack.enter_context(checkpoint_lib.Checkpointer(
          os.path.join(workdir, checkpoint_lib.CHECKPOINT_SUBDIR),
          config=config, max_to_keep=keep or None))
    else:
      stack.callback(checkpointer.wait_until_finished)

    start_step = 0
    latest = checkpointer.latest_step()
    if latest is not None:
      if not train_config.resume:
        raise ValueError(
            f"config.train.resume is False but {checkpointer.directory} already holds"
            f" checkpoints {checkpointer.all_steps()}; set resume=True to continue that run or"
            " use a fresh workdir")
      restored = checkpointer.restore(model, optimizer)  # Latest readable (falls back).
      _set_data_state(train_iter, restored.data_state)
      start_step = restored.step
      for bad in restored.skipped:
        log_fn(f"WARNING: checkpoint step {bad} in {checkpointer.directory} is unreadable (moved"
               f" to {bad}.unreadable); falling back to the previous committed step {start_step}")
      log_fn(f"resumed from checkpoint step {start_step} in {checkpointer.directory}")
    last_checkpoint_step = start_step if latest is not None else None

    # Multi-process runs: process 0 writes metrics.jsonl (and TensorBoard); the others compute
    # the same records (the metrics are global arrays) and write nothing.
    if jax.process_index() == 0:
      writer = stack.enter_context(metrics_lib.MetricsWriter(
          workdir, resume_step=start_step if latest is not None else None,
          tensorboard=bool(train_config.get("tensorboard", False))))
    else:
      writer = metrics_lib.DiscardingWriter()
    stop = signals_lib.StopRequest()
    if handle_signals:
      stack.enter_context(stop)
    if train_step is None:  # An nnx.jit step, bound: its graph walk runs once, not every step.
      bound_step = train_step_lib.bind_train_step(
          train_step_lib.make_train_step(learning_rate_fn=optimizer_lib.schedule_from_config(
              config.optim, total_steps=total_steps)), model, optimizer)
    else:
      bound_step = functools.partial(train_step, model, optimizer)
    meter = progress_lib.ProgressMeter(
        total_steps=total_steps, log_every=log_every, start_step=start_step, log_fn=log_fn)

    losses: list[float] = []
    history: list[dict[str, Any]] = []
    stop_reason = None
    step = start_step
    batch = _next_batch(train_iter) if step < total_steps else None
    if step < total_steps and batch is None:
      stop_reason = "data_exhausted"
    while step < total_steps and batch is not None:
      device_metrics = bound_step(train_step_lib.model_inputs(batch))
      step += 1
      batch_tokens = int(batch["inputs"].size)
      # Captured before prefetching, so it describes exactly `step` consumed batches.
      data_state = _get_data_state(train_iter)
      batch = _next_batch(train_iter) if step < total_steps else None
      exhausted = step < total_steps and batch is None

      step_metrics = {k: float(v) for k, v in jax.device_get(dict(device_metrics)).items()}
      loss = step_metrics["loss"]
      grad_norm = step_metrics.get("grad_norm", 0.0)
      if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        checkpointer.wait_until_finished()
        raise NonFiniteLossError(
            step=step, loss=loss, grad_norm=grad_norm,
            last_checkpoint_step=checkpointer.latest_step(),
            checkpoint_dir=checkpointer.directory)
      losses.append(loss)
      for callback in step_callbacks:
        callback(step, step_metrics)

      extra = {
          name: step_metrics[key] for name, key in (("lr", "learning_rate"), ("gnorm", "grad_norm"))
          if key in step_metrics}
      summary = meter.update(step, loss=loss, tokens=batch_tokens, extra=extra)
      if summary is not None:
        record = {**summary}
        for key in ("grad_norm", "learning_rate"):
          if key in step_metrics:
            record[key] = step_metrics[key]
        history.append(writer.write(step, "train", record))

      if eval_fn is not None and (
          (eval_every and step % eval_every == 0) or step == total_steps):
        eval_metrics = dict(eval_fn(model))
        history.append(writer.write(step, "eval", eval_metrics))
        log_fn(f"step {step} eval | " + " | ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
            for k, v in eval_metrics.items()))

      # Every process leaves at the same step: the first process's request (by id) counts.
      stop_request = parallel.agree_on_stop(
          (stop.signal_name or "request") if stop.requested else None)
      if ((checkpoint_every and step % checkpoint_every == 0) or step == total_steps
          or stop_request or exhausted):
        if checkpointer.save(
            step, model=model, optimizer=optimizer, data_state=data_state):
          logging.info("checkpoint step %d saving to %s", step, checkpointer.directory)
        last_checkpoint_step = step

      if stop_request:
        stop_reason = stop_request
        log_fn(f"stopped by {stop_reason} at step {step}; checkpoint saved")
        break
      if exhausted:
        stop_reason = "data_exhausted"
        log_fn(f"train_iter exhausted after step {step}; checkpoint saved")
        break

  return TrainResult(
      final_step=step,
      start_step=start_step,
      losses=losses,
      history=history,
      stop_reason=stop_reason,
      last_checkpoint_step=last_checkpoint_step,
  )
