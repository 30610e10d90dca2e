"""AdamW with linear warm-up, cosine decay, global-norm clipping and matrix-only weight decay.

The optimizer of every pejax run, built from the ``optim`` sub-config of the experiment config
(see ``pejax/experiment_config.py``) and the total number of optimizer steps.

References:
  Loshchilov & Hutter, "Decoupled Weight Decay Regularization", arXiv:1711.05101 (AdamW).
  Loshchilov & Hutter, "SGDR: Stochastic Gradient Descent with Warm Restarts", arXiv:1608.03983
  (cosine decay).
  Pascanu et al., "On the difficulty of training recurrent neural networks", arXiv:1211.5063
  (gradient-norm clipping).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import optax
from absl import logging
from flax import nnx

from pejax.encodings import arg_checks


def warmup_cosine_schedule(
    *,
    learning_rate: float,
    total_steps: int,
    warmup_steps: int = 0,
    min_lr_ratio: float = 0.0,
) -> optax.Schedule:
  """Linear warm-up from 0 to ``learning_rate``, then cosine decay to the floor.

  With ``t`` the optimizer step (the count of updates already applied, so the first update uses
  ``t = 0``), ``W`` the warm-up steps, ``T`` the total steps and ``floor = learning_rate *
  min_lr_ratio``:

    lr(t) = learning_rate * t / W                                              for t < W
    lr(t) = floor + (learning_rate - floor) * (1 + cos(pi * (t - W) / (T - W))) / 2  for W <= t <= T
    lr(t) = floor                                                              for t > T

  so ``lr(0) = 0`` (when ``W > 0``), ``lr(W) = learning_rate`` and ``lr(T) = floor``. This is
  ``optax.warmup_cosine_decay_schedule`` with ``decay_steps = T``. When ``W >= T`` (a short
  debugging run with the default warm-up) the run ends during warm-up: ``lr(t) = learning_rate *
  min(t, W) / W``, and a warning is logged.

  Args:
    learning_rate: Peak learning rate reached at the end of warm-up; finite and > 0.
    total_steps: Total optimizer steps ``T`` of the run (warm-up included).
    warmup_steps: Linear warm-up steps ``W``; >= 0 (0 starts at the peak).
    min_lr_ratio: Final learning rate as a fraction of the peak, in ``[0, 1]``.

  Returns:
    An optax schedule ``step -> learning rate`` (float32 scalar).

  Raises:
    ValueError: naming the argument, for a non-positive or non-finite ``learning_rate``, a
      non-positive ``total_steps``, a negative ``warmup_steps``, or ``min_lr_ratio`` outside
      ``[0, 1]``.
  """
  learning_rate = arg_checks.check_positive_float("learning_rate", learning_rate)
  total_steps = arg_checks.check_positive_int("total_steps", total_steps)
  warmup_steps = arg_checks.check_nonnegative_int("warmup_steps", warmup_steps)
  min_lr_ratio = _check_unit_interval("min_lr_ratio", min_lr_ratio)
  if warmup_steps >= total_steps:
    logging.warning(
        "warmup_steps=%d >= total_steps=%d: the run ends during warm-up (no cosine decay)",
        warmup_steps, total_steps)
    return optax.linear_schedule(
        init_value=0.0, end_value=learning_rate, transition_steps=warmup_steps)
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0,
      peak_value=learning_rate,
      warmup_steps=warmup_steps,
      decay_steps=total_steps,
      end_value=learning_rate * min_lr_ratio,
  )


def schedule_from_config(optim_config: Any, *, total_steps: int) -> optax.Schedule:
  """The learning-rate schedule described by ``config.optim``.

  Args:
    optim_config: The ``optim`` sub-config (``learning_rate``, ``warmup_steps``,
      ``min_lr_ratio``).
    total_steps: Total optimizer steps of the run, normally ``config.train.steps``.

  Returns:
    The schedule of :func:`warmup_cosine_schedule`.
  """
  return warmup_cosine_schedule(
      learning_rate=optim_config.learning_rate,
      total_steps=total_steps,
      warmup_steps=optim_config.warmup_steps,
      min_lr_ratio=optim_config.min_lr_ratio,
  )


def weight_decay_mask(params: Any) -> Any:
  """``True`` for parameters of rank >= 2 (matrices, embeddings, kernels), ``False`` otherwise.

  Biases and normalization scales (rank 0 and 1) are not decayed, the usual practice for
  Transformers.

  Args:
    params: A pytree of arrays (an ``nnx.State`` of pure arrays or a nested dict).

  Returns:
    A pytree of the same structure with boolean leaves.
  """
  return jax.tree.map(lambda p: p.ndim >= 2, params)


def adamw_from_config(optim_config: Any, *, total_steps: int) -> optax.GradientTransformation:
  """Global-norm clipping followed by AdamW on the warm-up + cosine schedule.

  The chain is ``clip_by_global_norm(clip_norm)`` (``optax.identity()`` when ``clip_norm`` is 0,
  so the optimizer-state structure does not depend on it) then ``adamw`` whose weight decay is
  masked by :func:`weight_decay_mask`. Decoupled decay is scaled by the scheduled learning rate,
  as in optax.

  Args:
    optim_config: The ``optim`` sub-config: ``learning_rate``, ``warmup_steps``, ``min_lr_ratio``,
      ``weight_decay`` (>= 0), ``b1`` and ``b2`` (in ``[0, 1)``), ``clip_norm`` (>= 0, 0
      disables clipping).
    total_steps: Total optimizer steps of the run, normally ``config.train.steps``.

  Returns:
    An ``optax.GradientTransformation``.

  Raises:
    ValueError: naming the field, for an out-of-range hyper-parameter.
  """
  weight_decay = _check_nonnegative_float("weight_decay", optim_config.weight_decay)
  b1 = _check_beta("b1", optim_config.b1)
  b2 = _check_beta("b2", optim_config.b2)
  clip_norm = _check_nonnegative_float("clip_norm", optim_config.clip_norm)
  schedule = schedule_from_config(optim_config, total_steps=total_steps)
  clip = optax.clip_by_global_norm(clip_norm) if clip_norm > 0 else optax.identity()
  return optax.chain(
      clip,
      optax.adamw(
          learning_rate=schedule,
          b1=b1,
          b2=b2,
          weight_decay=weight_decay,
          mask=weight_decay_mask,
      ),
  )


def create_optimizer(model: nnx.Module, optim_config: Any, *, total_steps: int) -> nnx.Optimizer:
  """``nnx.Optimizer`` over the ``nnx.Param`` variables of ``model`` with :func:`adamw_from_config`.

  Args:
    model: Any NNX module.
    optim_config: The ``optim`` sub-config.
    total_steps: Total optimizer steps of the run, normally ``config.train.steps``.

  Returns:
    ``nnx.Optimizer(model, tx, wrt=nnx.Param)``; ``optimizer.step`` counts applied updates.
  """
  tx = adamw_from_config(optim_config, total_steps=total_steps)
  return nnx.Optimizer(model, tx, wrt=nnx.Param)


def _check_nonnegative_float(name: str, value: Any) -> float:
  try:
    as_float = float(value)
  except (TypeError, ValueError):
    raise ValueError(f"{name} must be a non-negative number, got {value!r}") from None
  if isinstance(value, bool) or not math.isfinite(as_float) or as_float < 0:
    raise ValueError(f"{name} must be a non-negative finite number, got {value!r}")
  return as_float


def _check_unit_interval(name: str, value: Any) -> float:
  as_float = _check_nonnegative_float(name, value)
  if as_float > 1:
    raise ValueError(f"{name} must be in [0, 1], got {value!r}")
  return as_float


def _check_beta(name: str, value: Any) -> float:
  as_float = _check_nonnegative_float(name, value)
  if as_float >= 1:
    raise ValueError(f"{name} must be in [0, 1), got {value!r}")
  return as_float
