"""Training the seeds (and learning rates) of one task and PE variant as one program.

:func:`train_to_fit_many` is :func:`experiments.algorithmic.convergence.train_to_fit` for N
models that share everything but their seed, learning rate and weight decay: their steps run as
one ``jax.vmap``-ed program (:class:`pejax.train.ModelStack`), whose kernels are N times
larger than one model's: the gain of an accelerator, which one tiny model leaves idle (on CPU
the studies' step is compute-bound and N models cost about N steps; ``Settings.batched``
defaults to batching on accelerators only). Each model keeps its own initialization, data stream
(``default_rng([seed, 1])``), held-out set, schedule, checks and stop: a model that fits stops
changing (masked) while the others go on, and once half of the program is idle the models still
training are repacked into a smaller one. Model i equals the model trained alone to float32
tolerance (tests/experiments/test_batched_fit.py); it is not bit-identical, since a batched
matmul may round differently.

Records: the same as the single trainer's (:mod:`experiments.algorithmic.fit_records`), one
directory per model, ``<runs_dir>/<label>-<hash>`` with ``fit.json`` + ``params.npz``, and while
it trains ``progress.npz`` + ``progress.json`` at each check, each written atomically. A model
finished either way is reused either way; a run killed at any point (``kill -9``) resumes each
model at its own last check, under this trainer or the single one. ``train_seconds`` of a model
trained with others is its share of the wall time (each step's time divided by the models that
took it, plus its own checks), and ``models_together`` records how many started together.

Example (a sweep of seeds and learning rates as one program)::

  configs = batched_fit.sweep_configs(config, seeds=(0, 1, 2), learning_rates=(1e-3, 3e-3))
  results = batched_fit.train_to_fit_many(
      configs, convergence.Recipe(max_steps=3000), task="reverse", train_sizes=(1, 10),
      runs_dir="runs/sweep", labels=[f"reverse-s{c.seed}-lr{c.optim.learning_rate:g}"
                                     for c in configs])
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import pathlib
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import ml_collections
import numpy as np

from experiments.algorithmic import convergence
from experiments.algorithmic import fit_records
from pejax import machine

# The fields in which the models of one program may differ (each model's own value is used).
PER_MODEL_FIELDS = ("seed", "optim.learning_rate", "optim.weight_decay")


def sweep_configs(config: ml_collections.ConfigDict, *, seeds: Sequence[int],
                  learning_rates: Sequence[float] = (),
                  weight_decays: Sequence[float] = ()) -> List[ml_collections.ConfigDict]:
  """``config`` once per (seed, learning rate, weight decay) of the product, seed-major.

  Args:
    config: the experiment config.
    seeds: the seeds (at least one).
    learning_rates: peak learning rates; empty: the config's.
    weight_decays: weight decays; empty: the config's.

  Returns:
    The configs, ``len(seeds) * max(1, len(learning_rates)) * max(1, len(weight_decays))``.

  Raises:
    ValueError: for no seed, or a value repeated within one list (naming it).
  """
  if not list(seeds):
    raise ValueError(f"seeds must name at least one seed, got {list(seeds)!r}")
  for name, values in (("seeds", seeds), ("learning_rates", learning_rates),
                       ("weight_decays", weight_decays)):
    if len(set(values)) != len(list(values)):
      raise ValueError(f"{name} must not repeat a value, got {list(values)!r}")
  out = []
  for seed, lr, wd in itertools.product(
      seeds, learning_rates or (config.optim.learning_rate,),
      weight_decays or (config.optim.weight_decay,)):
    one = config.copy_and_resolve_references()
    with one.unlocked():
      one.seed = int(seed)
      one.optim.learning_rate = float(lr)
      one.optim.weight_decay = float(wd)
    out.append(one)
  return out


def _flat(tree: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
  out = {}
  for name, value in tree.items():
    if isinstance(value, Mapping):
      out.update(_flat(value, f"{prefix}{name}."))
    else:
      out[f"{prefix}{name}"] = value
  return out


def check_together(configs: Sequence[ml_collections.ConfigDict]) -> None:
  """Raises ``ValueError`` unless ``configs`` differ only in :data:`PER_MODEL_FIELDS`.

  Raises:
    ValueError: for no config, or naming the first other field in which ``configs[i]`` differs
      from ``configs[0]``, with both values.
  """
  if not list(configs):
    raise ValueError(f"configs must hold at least one config, got {list(configs)!r}")
  first = _flat(configs[0].to_dict())
  for index, config in enumerate(configs[1:], start=1):
    other = _flat(config.to_dict())
    for path in sorted(set(first) | set(other)):
      if path not in PER_MODEL_FIELDS and first.get(path) != other.get(path):
        raise ValueError(
            f"configs[{index}] differs from configs[0] in {path} ({other.get(path)!r} vs "
            f"{first.get(path)!r}): models trained as one program may differ only in "
            f"{', '.join(PER_MODEL_FIELDS)}")


def train_to_fit_many(configs: Sequence[ml_collections.ConfigDict],
                      recipe: convergence.Recipe, *, task: str, train_sizes: tuple,
                      runs_dir: os.PathLike | str, labels: Sequence[str],
                      randomized: Optional[int] = None,
                      log: Callable[[str], None] = print) -> List[fit_records.FitResult]:
  """:func:`~experiments.algorithmic.convergence.train_to_fit` for every config, as one program.

  Args:
    configs: one experiment config per model, equal but for :data:`PER_MODEL_FIELDS`.
    recipe: the convergence recipe (one cap and check interval for all).
    task: the synthetic task.
    train_sizes: ``(smallest, largest)`` training size.
    runs_dir: where the model directories go.
    labels: one directory prefix per model (``reverse-rope-s0``).
    randomized: range of randomized training positions, or ``None``.
    log: progress lines.

  Returns:
    One :class:`~experiments.algorithmic.fit_records.FitResult` per config, in order (those
    trained before read from disk).
  """
  keys = [convergence.fit_key(c, recipe, task=task, train_sizes=train_sizes,
                              randomized=randomized) for c in configs]
  tasks = [convergence.fit_task(c, recipe, task=task, train_sizes=train_sizes,
                                randomized=randomized) for c in configs]
  return train_until_many(configs, recipe, keys=keys, runs_dir=runs_dir, labels=labels,
                          make_batches=[t[0] for t in tasks], checks=[t[1] for t in tasks],
                          log=log)


@dataclasses.dataclass
class _Member:
  """The loop state of one model (what a run of its own keeps in local variables)."""

  label: str
  key: Dict[str, Any]
  run_dir: pathlib.Path
  rng: np.random.Generator
  make_batch: Callable[[np.random.Generator, int], Dict[str, np.ndarray]]
  check: Callable[[Any], float]
  step: int = 0
  best: float = -1.0
  best_step: int = 0
  acc: float = 0.0
  curve: List[tuple] = dataclasses.field(default_factory=list)
  losses: List[tuple] = dataclasses.field(default_factory=list)  # (device [N] array, slot)
  seconds: float = 0.0  # Its share of the training time, earlier sessions included.
  steps_to_fit: Optional[int] = None
  done: bool = False


def train_until_many(configs: Sequence[ml_collections.ConfigDict],
                     recipe: convergence.Recipe, *, keys: Sequence[Mapping[str, Any]],
                     runs_dir: os.PathLike | str, labels: Sequence[str],
                     make_batches: Sequence[Callable[[np.random.Generator, int],
                                                     Dict[str, np.ndarray]]],
                     checks: Sequence[Callable[[Any], float]],
                     log: Callable[[str], None] = print) -> List[fit_records.FitResult]:
  """The loop of :func:`~experiments.algorithmic.convergence.train_until` for N models at once.

  Args:
    configs: one experiment config per model (:func:`check_together`).
    recipe: the recipe (its ``fit_threshold`` applies to each ``check``).
    keys: each model's key (hashed into its directory name).
    runs_dir: where the model directories go.
    labels: each model's directory prefix.
    make_batches: each model's ``(rng, step) -> batch``; its ``rng`` is
      ``default_rng([seed, 1])``, as alone.
    checks: each model's ``model -> held-out accuracy``.
    log: progress lines (the single trainer's, one per model and check).

  Returns:
    One :class:`~experiments.algorithmic.fit_records.FitResult` per model, in order.

  Raises:
    ValueError: for lists of different lengths (naming them), configs that differ in more than
      :data:`PER_MODEL_FIELDS`, or two models with one key (the same model twice).
  """
  from pejax.train import many  # pylint: disable=g-import-not-at-top
  configs = list(configs)
  check_together(configs)
  lengths = {"configs": len(configs), "keys": len(keys), "labels": len(labels),
             "make_batches": len(make_batches), "checks": len(checks)}
  if len(set(lengths.values())) != 1:
    raise ValueError(f"configs, keys, labels, make_batches and checks must have one entry per "
                     f"model, got lengths {lengths}")
  full = [convergence.full_key(k) for k in keys]
  run_dirs = [fit_records.run_dir_for(runs_dir, k, label=l) for k, l in zip(full, labels)]
  if len(set(run_dirs)) != len(run_dirs):
    twice = next(d for d in run_dirs if run_dirs.count(d) > 1)
    raise ValueError(f"keys and labels must name distinct models, got {twice} twice")
  results: List[Optional[fit_records.FitResult]] = [
      fit_records.read_result(d, k) for d, k in zip(run_dirs, full)]
  todo = [i for i, r in enumerate(results) if r is None]
  if not todo:
    return results
  started = time.time()
  members = [_Member(label=labels[i], key=full[i], run_dir=run_dirs[i],
                     rng=np.random.default_rng([int(configs[i].seed), 1]),
                     make_batch=make_batches[i], check=checks[i]) for i in todo]
  stack = many.ModelStack(
      [convergence.build_model(configs[i]) for i in todo],
      convergence.recipe_optim(configs[todo[0]], recipe), total_steps=recipe.max_steps,
      learning_rates=[configs[i].optim.learning_rate for i in todo],
      weight_decays=[configs[i].optim.weight_decay for i in todo])
  for slot, m in enumerate(members):
    model, optimizer = stack.member(slot)
    resumed = fit_records.load_progress(m.run_dir, m.key, model, optimizer)
    if resumed is not None:
      stack.set_member(slot, model, optimizer)
      m.step, m.best, m.best_step, m.acc = (int(resumed["step"]), float(resumed["best"]),
                                            int(resumed["best_step"]), float(resumed["acc"]))
      m.curve = [tuple(c) for c in resumed["curve"]]
      m.rng.bit_generator.state = resumed["rng_state"]
      m.seconds = float(resumed["seconds"])
      log(f"{m.label}: resuming at step {m.step} of {recipe.max_steps} (best held-out "
          f"{m.best:.3f})")
  together = len(members)
  log(f"training {together} models as one program: {', '.join(m.label for m in members)}")
  slots = list(range(together))  # slots[s]: the member in slot s of the stack.
  while True:
    live = [s for s, i in enumerate(slots) if not members[i].done
            and members[i].step < recipe.max_steps]
    if not live:
      break
    if len(slots) > 1 and len(live) <= len(slots) // 2:  # Repack: idle slots cost as much.
      stack = stack.select(live)
      slots = [slots[s] for s in live]
      live = list(range(len(slots)))
    tick = time.time()
    batches = [members[i].make_batch(members[i].rng, members[i].step) if s in live else None
               for s, i in enumerate(slots)]
    metrics = stack.step(batches, active=[s in live for s in range(len(slots))])
    checked = []
    for s in live:
      m = members[slots[s]]
      m.losses.append((metrics["loss"], s))
      m.step += 1
      if m.step % recipe.check_every == 0 or m.step == recipe.max_steps:
        checked.append(s)
    checking = 0.0
    for s in checked:
      m = members[slots[s]]
      loss = float(np.mean(np.asarray([np.asarray(a)[k] for a, k in m.losses], np.float32)))
      m.losses = []
      begun = time.time()
      _check(m, stack, s, loss, recipe, log, models_together=together)
      checking += time.time() - begun
    share = (time.time() - tick - checking) / len(live)
    for s in live:
      members[slots[s]].seconds += share
  for index, m in zip(todo, members):
    results[index] = fit_records.read_result(m.run_dir, m.key)
  log(f"trained {together} models as one program in {time.time() - started:.0f} s")
  return results


def _check(m: _Member, stack, slot: int, loss: float, recipe: convergence.Recipe,
           log: Callable[[str], None], *, models_together: int) -> None:
  """The check of :func:`convergence.train_until` for one member: its curve, log line,
  progress files, and its records when it stops (fit, cap or a non-finite loss). The time
  of the check counts for this member alone."""
  begun = time.time()
  model, optimizer = stack.member(slot)
  if not math.isfinite(loss):
    log(f"{m.label}: non-finite loss at step {m.step}; stopping")
  else:
    m.acc = float(m.check(model))
    m.seconds += time.time() - begun
    m.curve.append((m.step, m.acc, loss))
    if m.acc > m.best:
      m.best, m.best_step = m.acc, m.step
    log(f"{m.label}: step {m.step}/{recipe.max_steps} held-out {m.acc:.3f} (best {m.best:.3f}) "
        f"loss {loss:.4f} [{m.seconds:.0f} s]")
    if m.acc >= recipe.fit_threshold:
      m.steps_to_fit = m.step
    elif m.step < recipe.max_steps:
      fit_records.save_progress(m.run_dir, m.key, model, optimizer, {
          "step": m.step, "best": m.best, "best_step": m.best_step, "acc": m.acc,
          "curve": m.curve, "rng_state": m.rng.bit_generator.state, "seconds": m.seconds})
      return
  m.done = True
  result = fit_records.FitResult(
      run_dir=m.run_dir, steps=m.step, steps_to_fit=m.steps_to_fit, in_dist=m.acc,
      best_in_dist=max(m.best, 0.0), best_step=m.best_step, curve=tuple(m.curve),
      train_seconds=m.seconds, machine=machine.describe_machine(),
      models_together=models_together)
  fit_records.write_result(result, m.key, model)
