"""Many small models of one architecture trained as one program: :class:`ModelStack`.

Axes: N models, B batch, L sequence length.

An algorithmic study trains hundreds of tiny decoders that differ only in their seed (and,
in a sweep, their learning rate or weight decay). Trained one after another on an accelerator,
each step is a few small kernels that leave the device idle; stacked, N models are one
``jax.vmap`` of the train step over their parameters, optimizer states and batches, whose
kernels are N times larger. On CPU a step of such a model is already compute-bound (its time
grows linearly with the batch from 8 rows up), so N stacked models cost about N steps there
(``benchmarks/studies_throughput.py``).

Each model keeps everything a run of its own has: its initialization (its seed), its batches
(the caller draws them from its own generator), its learning rate and weight decay (per-model
arrays in the optimizer's schedule), its metrics. Model ``i`` of a stack equals the model
trained alone by :func:`pejax.train.make_train_step` with :func:`pejax.train.create_optimizer`
to float32 tolerance (tests/train/test_many.py). A model that should stop (it has fit, it
reached its cap) is masked out: ``step(..., active=...)`` keeps its parameters and optimizer
state bit for bit (``jnp.where(active, new, old)``) while the others go on; :meth:`select`
builds a smaller stack of the models still training, so a long tail of a few slow models does
not pay for the finished ones.

Batches of different row lengths (one size per batch, Ruoss et al. 2023) are padded to one
shape per step (:func:`pejax.train.stack_batches`) without changing any model's loss.

Example::

  stack = ModelStack.from_config(decoder_config, config.optim, seeds=(0, 1, 2),
                                 learning_rates=(1e-3, 1e-3, 3e-3), total_steps=1000)
  rngs = [np.random.default_rng([seed, 1]) for seed in (0, 1, 2)]
  for _ in range(1000):
    metrics = stack.step([make_batch(rng) for rng in rngs])   # metrics["loss"]: [N]
  model, optimizer = stack.member(2)                          # an ordinary Decoder again

References:
  Ruoss et al., "Randomized Positional Encodings Boost Length Generalization of Transformers",
  ACL 2023, arXiv:2305.16843 (the study protocol that trains a model per seed, task and PE).
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from pejax.encodings import arg_checks
from pejax.train import optimizer as optimizer_lib
from pejax.train import train_step as train_step_lib
from pejax.train.stacked_batch import stack_batches


def _check_sweep(name: str, values: Optional[Sequence[float]], default: float, count: int,
                 check: Callable[[str, Any], float]) -> tuple[float, ...]:
  """One value per model: ``values`` checked, or ``default`` repeated."""
  if values is None:
    return (float(default),) * count
  values = tuple(values)
  if len(values) != count:
    raise ValueError(f"{name} must have one value per model ({count}), got {len(values)}: "
                     f"{values!r}")
  return tuple(check(f"{name}[{index}]", value) for index, value in enumerate(values))


def _check_nonnegative(name: str, value: Any) -> float:
  try:
    as_float = float(value)
  except (TypeError, ValueError):
    raise ValueError(f"{name} must be a non-negative number, got {value!r}") from None
  if isinstance(value, bool) or not np.isfinite(as_float) or as_float < 0:
    raise ValueError(f"{name} must be a non-negative finite number, got {value!r}")
  return as_float


class ModelStack:
  """N models of one architecture, their optimizers, and one jitted step for all of them.

  The state of all models lives in one pytree with a leading ``N`` axis (the
  ``nnx.split((model, optimizer))`` state of each model, stacked); :meth:`step` maps the train
  step of :func:`pejax.train.make_train_step` over it with ``jax.vmap``. Model ``i`` is trained
  by AdamW on the warm-up + cosine schedule of ``optim_config`` (as
  :func:`pejax.train.create_optimizer` builds it) with its own peak learning rate and weight
  decay, entered as per-model arrays: the schedule is the unit-peak schedule times the model's
  rate.

  Attributes:
    size: the number of models ``N``.
    learning_rates: each model's peak learning rate.
    weight_decays: each model's weight decay.
    total_steps: the optimizer steps the schedule spans.
  """

  def __init__(self, models: Sequence[nnx.Module], optim_config: Any, *, total_steps: int,
               learning_rates: Optional[Sequence[float]] = None,
               weight_decays: Optional[Sequence[float]] = None):
    """Stacks ``models`` (their current parameters) with fresh optimizer states.

    Args:
      models: N ``nnx.Module`` s with one architecture (one graph, one set of shapes), called
        as ``model(inputs, positions=..., segment_ids=...) -> logits``.
      optim_config: the ``optim`` sub-config (:func:`pejax.train.adamw_from_config`); its
        ``learning_rate`` and ``weight_decay`` are the defaults of the sweeps below.
      total_steps: optimizer steps of the schedule (a model's cap).
      learning_rates: one peak learning rate per model (> 0), or ``None`` for the config's.
      weight_decays: one weight decay per model (>= 0), or ``None`` for the config's.

    Raises:
      ValueError: for no model, models of different architectures, a sweep whose length is not
        N, or an out-of-range value (naming the argument, index and value).
    """
    models = list(models)
    if not models:
      raise ValueError(f"models must hold at least one model, got {models!r}")
    count = len(models)
    self.total_steps = arg_checks.check_positive_int("total_steps", total_steps)
    self.learning_rates = _check_sweep("learning_rates", learning_rates,
                                       optim_config.learning_rate, count,
                                       arg_checks.check_positive_float)
    self.weight_decays = _check_sweep("weight_decays", weight_decays, optim_config.weight_decay,
                                      count, _check_nonnegative)
    self._optim = ml_collections.ConfigDict(dict(optim_config))
    graphdef = nnx.graphdef(models[0])
    for index, model in enumerate(models[1:], start=1):
      if nnx.graphdef(model) != graphdef:
        raise ValueError(f"models must share one architecture: models[{index}] differs from "
                         "models[0]")
    states = []
    for index, model in enumerate(models):
      optimizer = nnx.Optimizer(model, self._tx(index), wrt=nnx.Param)
      graphdef, state = nnx.split((model, optimizer))
      states.append(state)
    first = jax.tree.map(lambda x: (x.shape, x.dtype), states[0])
    for index, state in enumerate(states[1:], start=1):
      if jax.tree.map(lambda x: (x.shape, x.dtype), state) != first:
        raise ValueError(f"models must share one architecture: models[{index}] has other "
                         "parameter shapes than models[0]")
    self._graphdef = graphdef
    self._state = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    self._step_fn = self._make_step()

  @classmethod
  def from_config(cls, decoder_config: Any, optim_config: Any, *, seeds: Sequence[int],
                  total_steps: int, learning_rates: Optional[Sequence[float]] = None,
                  weight_decays: Optional[Sequence[float]] = None) -> "ModelStack":
    """One :class:`pejax.nn.Decoder` per seed, initialized as ``Decoder(decoder_config,
    rngs=nnx.Rngs(params=seed))`` (the initialization of a run of its own), then stacked.

    Args:
      decoder_config: a :class:`pejax.nn.DecoderConfig`.
      optim_config: the ``optim`` sub-config.
      seeds: one initialization seed per model.
      total_steps: optimizer steps of the schedule.
      learning_rates: per-model peak learning rates, or ``None``.
      weight_decays: per-model weight decays, or ``None``.

    Returns:
      The stack, model ``i`` initialized from ``seeds[i]``.

    Raises:
      ValueError: for an empty ``seeds``, sweeps of other lengths, out-of-range values, or two
        models with the same seed, learning rate and weight decay (one model trained twice).
    """
    from pejax.nn import Decoder  # pylint: disable=g-import-not-at-top
    seeds = [int(s) for s in seeds]
    if not seeds:
      raise ValueError(f"seeds must name at least one model, got {seeds!r}")
    learning = _check_sweep("learning_rates", learning_rates, optim_config.learning_rate,
                            len(seeds), arg_checks.check_positive_float)
    decays = _check_sweep("weight_decays", weight_decays, optim_config.weight_decay,
                          len(seeds), _check_nonnegative)
    seen = {}
    for index, triple in enumerate(zip(seeds, learning, decays)):
      if triple in seen:
        raise ValueError(
            f"(seed, learning_rate, weight_decay) must differ between models: models "
            f"{seen[triple]} and {index} are both {triple}")
      seen[triple] = index
    models = [Decoder(decoder_config, rngs=nnx.Rngs(params=seed)) for seed in seeds]
    return cls(models, optim_config, total_steps=total_steps, learning_rates=learning,
               weight_decays=decays)

  @property
  def size(self) -> int:
    return len(self.learning_rates)

  def __len__(self) -> int:
    return self.size

  def _tx(self, index: int) -> optax.GradientTransformation:
    """Model ``index``'s optimizer as a run of its own builds it."""
    optim = ml_collections.ConfigDict(dict(self._optim))
    optim.learning_rate, optim.weight_decay = self.learning_rates[index], self.weight_decays[index]
    return optimizer_lib.adamw_from_config(optim, total_steps=self.total_steps)

  def _make_step(self) -> Callable[..., Any]:
    optim = self._optim
    unit = optimizer_lib.warmup_cosine_schedule(
        learning_rate=1.0, total_steps=self.total_steps, warmup_steps=optim.warmup_steps,
        min_lr_ratio=optim.min_lr_ratio)
    clip_norm = float(optim.clip_norm)
    graphdef = self._graphdef

    def one(state, learning_rate, weight_decay, active, batch):
      # copy=True: the update below must not write into the Variables of ``state`` (the old
      # values that an inactive model keeps).
      model, optimizer = nnx.merge(graphdef, state, copy=True)

      def loss_fn(model):
        logits = model(batch["inputs"], positions=batch["positions"],
                       segment_ids=batch.get("segment_ids"))
        return train_step_lib.masked_mean_loss(logits, batch["targets"], batch["loss_mask"])

      (loss, num_tokens), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
      schedule = lambda count: learning_rate * unit(count)
      # The chain of pejax.train.adamw_from_config, with this model's rate and decay as arrays
      # (same optimizer-state structure), applied as nnx.Optimizer.update applies it.
      tx = optax.chain(
          optax.clip_by_global_norm(clip_norm) if clip_norm > 0 else optax.identity(),
          optax.adamw(learning_rate=schedule, b1=float(optim.b1), b2=float(optim.b2),
                      weight_decay=weight_decay, mask=optimizer_lib.weight_decay_mask))
      metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads).astype(jnp.float32),
                 "tokens": num_tokens,
                 "learning_rate": jnp.asarray(schedule(optimizer.step[...]), jnp.float32)}
      params = nnx.as_pure(nnx.state(model, nnx.Param))
      updates, new_opt_state = tx.update(nnx.as_pure(nnx.state(grads, nnx.Param)),
                                         nnx.as_pure(optimizer.opt_state), params)
      nnx.update(model, optax.apply_updates(params, updates))
      nnx.update(optimizer.opt_state, nnx.state(new_opt_state))
      optimizer.step[...] += 1
      new_state = nnx.state((model, optimizer))
      held = jax.tree.map(lambda new, old: jnp.where(active, new, old), new_state, state)
      return held, metrics

    return jax.jit(jax.vmap(one), donate_argnums=0)

  def step(self, batches: Sequence[Optional[Mapping[str, Any]]], *,
           active: Optional[Sequence[bool]] = None) -> dict[str, jax.Array]:
    """One optimizer step of every active model, each on its own batch.

    Args:
      batches: N batches (:func:`stack_batches`; ``None`` for an inactive model).
      active: N booleans; an inactive model's parameters, optimizer state and step count stay
        bit for bit as they were. ``None``: every model with a batch.

    Returns:
      ``[N]`` float32 arrays (not yet fetched from the device): ``loss`` (masked mean NLL before
      the update), ``grad_norm``, ``tokens``, ``learning_rate`` (each model's rate for this
      update). Entries of inactive models are computed on placeholders: ignore them.

    Raises:
      ValueError: for ``batches`` or ``active`` of another length than N.
    """
    count = len(batches)
    if count != self.size:
      raise ValueError(f"batches must hold one batch per model ({self.size}), got {count}")
    given = [b is not None for b in batches]
    if active is None:
      active = given
    active = np.asarray([bool(a) for a in active])
    if active.shape != (self.size,):
      raise ValueError(f"active must hold one flag per model ({self.size}), got "
                       f"{active.tolist()}")
    missing = [i for i in range(self.size) if active[i] and not given[i]]
    if missing:
      raise ValueError(f"active models {missing} have no batch (batches[i] is None)")
    stacked = stack_batches(batches)
    self._state, metrics = self._step_fn(
        self._state, jnp.asarray(self.learning_rates, jnp.float32),
        jnp.asarray(self.weight_decays, jnp.float32), jnp.asarray(active), stacked)
    return metrics

  def _check_index(self, index: int) -> int:
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not (
        0 <= index < self.size):
      raise ValueError(f"index must be an int in [0, {self.size}), got {index!r}")
    return int(index)

  def member(self, index: int) -> tuple[nnx.Module, nnx.Optimizer]:
    """Model ``index`` and its optimizer as new objects (copies, not views of the stack).

    Args:
      index: the model, in ``[0, size)``.

    Returns:
      ``(model, optimizer)``: the optimizer is the one a run of its own uses
      (:func:`pejax.train.adamw_from_config` with the model's learning rate and weight decay),
      so training can go on alone with :func:`pejax.train.make_train_step`.

    Raises:
      ValueError: for an index outside ``[0, size)``.
    """
    index = self._check_index(index)
    model, optimizer = nnx.merge(self._graphdef, jax.tree.map(lambda x: x[index], self._state))
    optimizer.tx = self._tx(index)
    return model, optimizer

  def set_member(self, index: int, model: nnx.Module, optimizer: nnx.Optimizer) -> None:
    """Writes the parameters and optimizer state of ``model`` / ``optimizer`` into slot
    ``index`` (e.g. restored from a checkpoint of a run of its own).

    Args:
      index: the slot, in ``[0, size)``.
      model: a model of the stack's architecture.
      optimizer: its ``nnx.Optimizer`` (the state structure of :meth:`member`'s).

    Raises:
      ValueError: for a bad index, or a model or optimizer state of other shapes.
    """
    index = self._check_index(index)
    _, state = nnx.split((model, optimizer))
    expected = jax.tree.map(lambda x: (x.shape[1:], x.dtype), self._state)
    if (jax.tree.structure(state) != jax.tree.structure(self._state)
        or jax.tree.map(lambda x: (x.shape, x.dtype), state) != expected):
      raise ValueError(f"set_member({index}): the model and optimizer do not match this stack's "
                       "architecture and optimizer")
    self._state = jax.tree.map(lambda s, x: s.at[index].set(x), self._state, state)

  def select(self, indices: Sequence[int]) -> "ModelStack":
    """A stack of some of the models, their state and hyper-parameters carried over.

    Args:
      indices: distinct model indices, in the order of the new stack.

    Returns:
      The new stack (the step function is shared: a new ``N`` compiles once).

    Raises:
      ValueError: for no index, a repeated one, or one outside ``[0, size)``.
    """
    indices = [self._check_index(i) for i in indices]
    if not indices or len(set(indices)) != len(indices):
      raise ValueError(f"indices must be distinct model indices, got {indices!r}")
    out = object.__new__(ModelStack)
    out.total_steps = self.total_steps
    out.learning_rates = tuple(self.learning_rates[i] for i in indices)
    out.weight_decays = tuple(self.weight_decays[i] for i in indices)
    out._optim = self._optim
    out._graphdef = self._graphdef
    picked = np.asarray(indices)
    out._state = jax.tree.map(lambda x: x[picked], self._state)
    out._step_fn = self._step_fn
    return out

  def steps(self) -> np.ndarray:
    """The optimizer steps each model has taken.

    Returns:
      int64 ``[N]`` (NumPy).
    """
    return np.asarray(self._state[1]["step"][...]).astype(np.int64)

  def save(self, path: os.PathLike | str) -> None:
    """Writes the whole stack (every model's parameters and optimizer state), atomically.

    Args:
      path: the ``.npz`` file (a temporary file beside it is renamed onto it).
    """
    path = pathlib.Path(path)
    leaves = jax.tree.leaves(self._state)
    tmp = path.with_name(path.name + ".tmp.npz")
    meta = {"learning_rates": self.learning_rates, "weight_decays": self.weight_decays,
            "total_steps": self.total_steps}
    np.savez(tmp, *[np.asarray(x) for x in leaves], meta=np.asarray(json.dumps(meta)))
    os.replace(tmp, path)

  def restore(self, path: os.PathLike | str) -> None:
    """Reads what :meth:`save` wrote into this stack.

    Args:
      path: the ``.npz`` file.

    Raises:
      ValueError: if ``path`` holds another stack (other models, shapes, dtypes or
        hyper-parameters), naming the path.
    """
    leaves, treedef = jax.tree.flatten(self._state)
    with np.load(path) as stored:
      meta = json.loads(str(stored["meta"]))
      saved = [stored[f"arr_{i}"] for i in range(len(stored.files) - 1)]
    mine = {"learning_rates": list(self.learning_rates),
            "weight_decays": list(self.weight_decays), "total_steps": self.total_steps}
    if meta != mine:
      raise ValueError(f"{path} holds a stack with {meta}, not this stack's {mine}")
    if len(saved) != len(leaves) or any(
        a.shape != b.shape or a.dtype != b.dtype for a, b in zip(saved, leaves)):
      raise ValueError(f"{path} does not hold the state of this stack (shapes or dtypes differ)")
    self._state = jax.tree.unflatten(treedef, [jnp.asarray(a) for a in saved])
