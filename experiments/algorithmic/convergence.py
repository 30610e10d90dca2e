"""Training a synthetic-task model to convergence: until it fits in-distribution, or a step cap.

A study that compares out-of-distribution (OOD) accuracy is only meaningful between models that
learned the task at the training lengths. :func:`train_to_fit` therefore trains until the
exact-match accuracy on a held-out in-distribution set (fresh examples of the training sizes,
scored every ``check_every`` steps) reaches ``fit_threshold``, or ``max_steps`` is reached; it
reports the steps it took (steps-to-fit) or how far it got (the best in-distribution accuracy
and its step). The model at the stop is the one evaluated.

Recipe (the knobs tuned so that every PE fits): AdamW with linear warm-up, then a cosine decay
over the cap to ``optim.min_lr_ratio`` of the peak (the default), or a constant rate; an
optional curriculum over lengths (the largest training size grows linearly from the
smallest to the largest over the first ``curriculum_steps`` steps, as in the curricula Ruoss et
al. 2023 and Kazemnejad et al. 2023 discuss); model size and batch from the experiment config.

Resumability: each trained model is a directory ``<runs_dir>/<task>-<variant>-s<seed>-<hash>``
(the hash covers every setting that defines the model: experiment config, recipe, training
sizes, randomized positions), holding ``fit.json`` (the outcome) and ``params.npz`` (the
weights); :mod:`experiments.algorithmic.fit_records` reads and writes them, for this trainer
and for :mod:`experiments.algorithmic.batched_fit`, which trains the seeds of a variant as one
program and writes the same records. A finished directory is reused as is, with or without
its weights: the studies keep ``fit.json`` and their ``eval.json`` in git and ignore the
weights, so a full run committed in parts resumes on a fresh clone. While a model trains,
every check also writes ``progress.npz`` (weights and optimizer moments) and
``progress.json`` (step, curve, data generator state, seconds so far), so a run killed half-way
(a session's end, ``kill -9``) resumes at its last check and finishes with the weights and
curve an uninterrupted run gets; each check prints one progress line.

References:
  Ruoss et al., "Randomized Positional Encodings Boost Length Generalization of Transformers",
  ACL 2023, arXiv:2305.16843. Kazemnejad et al., "The Impact of Positional Encoding on Length
  Generalization in Transformers", NeurIPS 2023, arXiv:2305.19466.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import ml_collections
import numpy as np

from experiments.algorithmic import fit_records
from pejax import experiment_config
from pejax import machine

FIT_THRESHOLD = 0.99  # Held-out in-distribution exact match that counts as "fit".
# The records of a trained model (experiments/algorithmic/fit_records.py), under their old names.
RESULT_FILE = fit_records.RESULT_FILE
PARAMS_FILE = fit_records.PARAMS_FILE
PROGRESS_FILE = fit_records.PROGRESS_FILE
PROGRESS_META = fit_records.PROGRESS_META
EVAL_FILE = fit_records.EVAL_FILE
FitResult = fit_records.FitResult
Recorded = fit_records.Recorded
recorded = fit_records.recorded
run_dir_for = fit_records.run_dir_for
load_params = fit_records.load_params
VERSION = 1  # Bump when the training procedure changes what a cached result means.
# Recipe fields added after records were committed, with their defaults: they enter a run's key
# only when set otherwise, so the directories of earlier records keep their names.
LATER_RECIPE_FIELDS = {"one_size_per_batch": False}
# Fields of PEs registered after the committed records were written (every registered PE's
# fields are in the config's pe section, None when unused): left out of a key when None. A new
# PE with new field names adds them here (test_committed_records_keep_their_directories fails
# otherwise).
LATER_PE_FIELDS = ("attend_current", "block_size", "chunk_size", "gate_dim", "init", "init_scale",
                   "position_table", "post_log_scale", "remainder", "short_conv", "w_rank")


@dataclasses.dataclass(frozen=True)
class Recipe:
  """How long and how a model is trained (the experiment config holds model and optimizer).

  Attributes:
    fit_threshold: held-out in-distribution exact match that stops training.
    check_every: steps between in-distribution checks.
    max_steps: step cap.
    check_examples: held-out examples per check (sizes uniform over the training sizes).
    curriculum_steps: steps over which the largest training size grows from the smallest to
      the largest (0: all sizes from the start).
    decay: ``"constant"`` (warm-up then a constant rate) or ``"cosine"`` (decay over
      ``max_steps`` to ``optim.min_lr_ratio`` of the peak).
    one_size_per_batch: draw one size per training batch (uniform over the training sizes),
      every example of the batch that size, in a row cut to one of four bucketed lengths
      (Ruoss et al. 2023's protocol; short batches cost less); ``False``: every example draws
      its own size, rows of the longest.
  """

  fit_threshold: float = FIT_THRESHOLD
  check_every: int = 100
  max_steps: int = 3000
  check_examples: int = 256
  curriculum_steps: int = 0
  decay: str = "cosine"
  one_size_per_batch: bool = False

  def __post_init__(self):
    if not 0.0 < self.fit_threshold <= 1.0:
      raise ValueError(f"fit_threshold must be in (0, 1], got {self.fit_threshold}")
    for name in ("check_every", "max_steps", "check_examples"):
      if int(getattr(self, name)) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
    if self.curriculum_steps < 0:
      raise ValueError(f"curriculum_steps must be >= 0, got {self.curriculum_steps}")
    if self.decay not in ("constant", "cosine"):
      raise ValueError(f"decay must be 'constant' or 'cosine', got {self.decay!r}")


def sampled_positions(rng: np.random.Generator, lengths: Sequence[int], *, row_len: int,
                      train_len: int, max_position: Optional[int]) -> np.ndarray:
  """Positions ``[B, row_len]`` for examples of ``lengths`` tokens (B = ``len(lengths)``).

  ``max_position=None`` gives ``0 .. row_len - 1``. Otherwise example ``b`` of ``k`` tokens gets
  the first ``k`` of ``max(k, train_len)`` sorted distinct samples of ``[0, max_position)``
  (Ruoss et al. 2023: training rows of ``train_len`` tokens use ``train_len`` samples; a longer
  test example uses as many as it has tokens); the padding after it repeats the last position
  (it never influences the scored tokens under causal attention).

  Args:
    rng: the generator.
    lengths: tokens of each example's text.
    row_len: row length.
    train_len: training row length.
    max_position: range of the sampled positions, or ``None``.

  Returns:
    int32 positions.

  Raises:
    ValueError: if ``max_position`` is smaller than a sample needs.
  """
  out = np.tile(np.arange(row_len, dtype=np.int32), (len(lengths), 1))
  if max_position is None:
    return out
  for b, k in enumerate(lengths):
    k = min(int(k), row_len)
    need = max(k, train_len)
    if need > max_position:
      raise ValueError(f"max_position must be >= {need} to sample {need} positions, got "
                       f"{max_position}")
    drawn = np.sort(rng.choice(max_position, size=need, replace=False))[:k]
    out[b, :k] = drawn
    out[b, k:] = drawn[-1]
  return out


def task_batch(task: str, rng: np.random.Generator, *, batch_size: int, row_len: int,
               min_size: int, max_size: int, train_len: int, max_position: Optional[int],
               sizes: Optional[Sequence[int]] = None,
               options: Optional[Mapping[str, Any]] = None) -> Dict[str, np.ndarray]:
  """A batch of ``task`` (sizes uniform in ``[min_size, max_size]``, or exactly ``sizes``;
  ``options``: keyword options of the task's generator, e.g. flip-flop's ``ignore_prob``).

  Returns:
    The arrays of :func:`pejax.data.synthetic_example.encode_examples` with ``positions``
    from :func:`sampled_positions`, plus int32 ``sizes`` ``[B]``.
  """
  from pejax import data as data_lib  # pylint: disable=g-import-not-at-top
  from pejax.data import synthetic_example  # pylint: disable=g-import-not-at-top
  if sizes is None:
    sizes = rng.integers(min_size, max_size + 1, size=batch_size)
  spec = data_lib.synthetic.get_task(task)
  examples = [spec.generate(rng, int(s), **(options or {})) for s in sizes]
  batch = synthetic_example.encode_examples(examples, seq_len=row_len)
  batch["positions"] = sampled_positions(rng, [len(e.text) - 1 for e in examples],
                                         row_len=row_len, train_len=train_len,
                                         max_position=max_position)
  batch["sizes"] = np.asarray(sizes, dtype=np.int32)
  return batch


def exact_match(model, batch: Mapping[str, np.ndarray], *, chunk: int = 256) -> np.ndarray:
  """bool ``[B]``: every answer byte of the row is the argmax (teacher forcing = greedy)."""
  from pejax import eval as eval_lib  # pylint: disable=g-import-not-at-top
  return _score_rows(eval_lib.answer_exact_match, model, batch, chunk=chunk)


def token_accuracy(model, batch: Mapping[str, np.ndarray], *, chunk: int = 256) -> np.ndarray:
  """float ``[B]``: the fraction of the row's answer bytes that are the argmax (teacher
  forcing; :func:`pejax.eval.answer_token_accuracy`)."""
  from pejax import eval as eval_lib  # pylint: disable=g-import-not-at-top
  return _score_rows(eval_lib.answer_token_accuracy, model, batch, chunk=chunk)


def _score_rows(score, model, batch: Mapping[str, np.ndarray], *, chunk: int) -> np.ndarray:
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  out = []
  n = len(batch["inputs"])
  for start in range(0, n, chunk):
    part = {k: jnp.asarray(batch[k][start:start + chunk])
            for k in ("inputs", "targets", "positions", "loss_mask")}
    out.append(np.asarray(score(model, part["inputs"], part["targets"], part["positions"],
                                part["loss_mask"])))
  return np.concatenate(out)


def run_key(config: ml_collections.ConfigDict, recipe: Recipe, *, task: str,
            train_sizes: tuple, row_len: int, randomized: Optional[int]) -> Dict[str, Any]:
  """Everything that defines a trained model (hashed into its directory name)."""
  identity = {k: config[k].to_dict() if hasattr(config[k], "to_dict") else config[k]
              for k in ("model", "pe", "optim", "seed")}
  # Fields added after the committed records were written, at the value that reproduces them,
  # are left out: the records keep their directories (their keys hash the config of the time).
  for name, default in experiment_config.LATER_MODEL_FIELDS.items():
    if identity["model"].get(name, default) == default:
      identity["model"].pop(name, None)
  for name in LATER_PE_FIELDS:
    if identity["pe"].get(name) is None:
      identity["pe"].pop(name, None)
  identity["data"] = {"batch_size": int(config.data.batch_size),
                      "train_len": int(config.data.train_len)}  # PE defaults may read it.
  recipe_key = dataclasses.asdict(recipe)
  for name, default in LATER_RECIPE_FIELDS.items():
    if recipe_key[name] == default:  # Records written before the field existed stay valid.
      del recipe_key[name]
  return {"config": identity, "recipe": recipe_key, "task": task,
          "train_sizes": list(train_sizes), "row_len": int(row_len),
          "randomized": randomized, "version": VERSION}


def batch_row_len(task: str, size: int, row_len: int) -> int:
  """The row of a one-size batch: the shortest of four bucketed lengths (multiples of
  ``ceil(row_len / 4)`` rounded up to 8, the last ``row_len``) that holds ``size``."""
  step = -(-max(1, -(-row_len // 4)) // 8) * 8
  need = row_len_for(task, size)
  return min(row_len, -(-need // step) * step)


def full_key(key: Mapping[str, Any], *, pe: Any = None,
             init_from: Optional[os.PathLike | str] = None) -> Dict[str, Any]:
  """``key`` with what :func:`train_until` adds: a PE override and a fine-tune's start.

  A fine-tune's start enters as ``<base run directory name>/<file>``, not the path as given:
  the base's directory name already hashes everything that defines it, and the same records
  must be found again from another working directory or clone (an absolute and a relative path
  to the same base once made two keys, and a fine-tune then needed weights a session no longer
  had).
  """
  start = None
  if init_from:
    start = f"{pathlib.Path(init_from).parent.name}/{pathlib.Path(init_from).name}"
  return {**key, "pe_override": repr(pe) if pe is not None else None, "init_from": start}


def build_model(config: ml_collections.ConfigDict, *, pe: Any = None):
  """A fresh decoder of ``config`` (parameters from ``config.seed``)."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from pejax.nn import Decoder  # pylint: disable=g-import-not-at-top
  from pejax import decoder_from_config  # pylint: disable=g-import-not-at-top
  return Decoder(decoder_from_config.decoder_config_from(config, pe=pe),
                 rngs=nnx.Rngs(params=int(config.seed)))


def load_model(result: FitResult, config: ml_collections.ConfigDict, *, pe: Any = None):
  """The trained model of a :class:`FitResult` (optionally rebuilt with another PE config).

  Raises:
    FileNotFoundError: if the weights are not there: a record kept in git (``fit.json``,
      ``eval.json``) has none, so only the evaluations it holds can be reused.
  """
  path = pathlib.Path(result.run_dir) / PARAMS_FILE
  if not path.exists():
    raise FileNotFoundError(
        f"{path} is missing: {result.run_dir} keeps the record of a trained model (fit.json) "
        "without its weights, so it cannot be evaluated anew; delete its fit.json to train it "
        "again")
  model = build_model(config, pe=pe)
  load_params(model, path)
  return model


def fit_key(config: ml_collections.ConfigDict, recipe: Recipe, *, task: str,
            train_sizes: tuple, randomized: Optional[int] = None) -> Dict[str, Any]:
  """The key of the model :func:`train_to_fit` trains with these arguments (its directory
  name hashes it; a record is that model's only when its stored key is equal)."""
  lo, hi = int(train_sizes[0]), int(train_sizes[1])
  return full_key(run_key(config, recipe, task=task, train_sizes=(lo, hi),
                          row_len=row_len_for(task, hi), randomized=randomized))


def train_to_fit(config: ml_collections.ConfigDict, recipe: Recipe, *, task: str,
                 train_sizes: tuple, runs_dir: os.PathLike | str, label: str,
                 randomized: Optional[int] = None,
                 log: Callable[[str], None] = print) -> FitResult:
  """Trains a decoder on ``task`` until held-out in-distribution exact match fits, or the cap.

  Args:
    config: experiment config (``model``, ``pe``, ``optim``, ``seed``, ``data.batch_size``).
    recipe: the :class:`Recipe`.
    task: a synthetic task name (``pejax.data.TASK_NAMES``).
    train_sizes: ``(smallest, largest)`` training size.
    runs_dir: where the model directory goes.
    label: readable prefix of the directory name (e.g. ``reverse-rope-s0``).
    randomized: range of randomized training positions (Ruoss et al. 2023), or ``None``.
    log: progress lines.

  Returns:
    The :class:`FitResult` (read from disk when this model was trained before).
  """
  key = fit_key(config, recipe, task=task, train_sizes=train_sizes, randomized=randomized)
  make_batch, check = fit_task(config, recipe, task=task, train_sizes=train_sizes,
                               randomized=randomized)
  return train_until(config, recipe, key=key, runs_dir=runs_dir, label=label,
                     make_batch=make_batch, check=check, log=log)


def fit_task(config: ml_collections.ConfigDict, recipe: Recipe, *, task: str,
             train_sizes: tuple, randomized: Optional[int] = None) -> tuple:
  """The training batches and the held-out check of :func:`train_to_fit` for one model.

  Args:
    config: experiment config (``seed``: the held-out set is drawn from
      ``default_rng([seed, 2])``; ``data.batch_size``).
    recipe: the :class:`Recipe` (sizes per batch, curriculum, held-out examples).
    task: the synthetic task.
    train_sizes: ``(smallest, largest)`` training size.
    randomized: range of randomized training positions, or ``None``.

  Returns:
    ``(make_batch, check)``: ``make_batch(rng, step) -> batch`` (the training batch of
    ``step`` drawn from ``rng``) and ``check(model) -> held-out exact match``.
  """
  lo, hi = int(train_sizes[0]), int(train_sizes[1])
  row_len = row_len_for(task, hi)
  seed = int(config.seed)
  held_out = task_batch(task, np.random.default_rng([seed, 2]),
                        batch_size=recipe.check_examples, row_len=row_len, min_size=lo,
                        max_size=hi, train_len=row_len, max_position=randomized)
  batch_size = int(config.data.batch_size)
  # Row of a one-size batch, per size (computed once, not on every step).
  size_rows = ({s: batch_row_len(task, s, row_len) for s in range(lo, hi + 1)}
               if recipe.one_size_per_batch else {})

  def make_batch(rng: np.random.Generator, step: int) -> Dict[str, np.ndarray]:
    top = hi
    if recipe.curriculum_steps and step < recipe.curriculum_steps:
      top = lo + int(math.ceil((hi - lo) * (step + 1) / recipe.curriculum_steps))
    top = max(lo, top)
    if recipe.one_size_per_batch:
      size = int(rng.integers(lo, top + 1))
      batch = task_batch(task, rng, batch_size=batch_size, row_len=size_rows[size],
                         min_size=size, max_size=size, train_len=row_len,
                         max_position=randomized, sizes=[size] * batch_size)
    else:
      batch = task_batch(task, rng, batch_size=batch_size, row_len=row_len, min_size=lo,
                         max_size=top, train_len=row_len, max_position=randomized)
    del batch["sizes"]
    return batch

  return make_batch, lambda model: float(np.mean(exact_match(model, held_out)))


def recipe_optim(config: ml_collections.ConfigDict, recipe: Recipe) -> ml_collections.ConfigDict:
  """``config.optim`` as ``recipe`` trains with it (a constant rate: ``min_lr_ratio`` 1)."""
  optim = config.optim.copy_and_resolve_references()
  with optim.unlocked():
    if recipe.decay == "constant":
      optim.min_lr_ratio = 1.0
  return optim


def train_until(config: ml_collections.ConfigDict, recipe: Recipe, *, key: Mapping[str, Any],
                runs_dir: os.PathLike | str, label: str,
                make_batch: Callable[[np.random.Generator, int], Dict[str, np.ndarray]],
                check: Callable[[Any], float], pe: Any = None,
                init_from: Optional[os.PathLike | str] = None,
                log: Callable[[str], None] = print) -> FitResult:
  """The generic loop of :func:`train_to_fit`: any batches, any held-out check.

  Args:
    config: experiment config (model, optimizer, seed).
    recipe: the :class:`Recipe` (its ``fit_threshold`` applies to ``check``).
    key: everything that defines the model (hashed into the directory name; include what
      ``make_batch`` and ``check`` depend on).
    runs_dir: where the model directory goes.
    label: readable prefix of the directory name.
    make_batch: ``(rng, step) -> batch`` of ``inputs``, ``targets``, ``positions``,
      ``loss_mask``.
    check: ``model -> accuracy`` on held-out data, called every ``recipe.check_every`` steps.
    pe: PE config(s) used instead of the config's (e.g. a RoPE scaling for a fine-tune).
    init_from: a ``params.npz`` to start from (a fine-tune) instead of a fresh initialization.
    log: progress lines.

  Returns:
    The :class:`FitResult` (read from disk when this model was trained before).
  """
  import jax  # pylint: disable=g-import-not-at-top
  from pejax.train import optimizer as optimizer_lib  # pylint: disable=g-import-not-at-top
  from pejax.train import train_step as train_step_lib  # pylint: disable=g-import-not-at-top

  key = full_key(key, pe=pe, init_from=init_from)
  run_dir = run_dir_for(runs_dir, key, label=label)
  done = fit_records.read_result(run_dir, key)
  if done is not None:
    return done
  started = time.time()
  model = build_model(config, pe=pe)
  if init_from:
    load_params(model, init_from)
  optimizer = optimizer_lib.create_optimizer(model, recipe_optim(config, recipe),
                                             total_steps=recipe.max_steps)
  rng = np.random.default_rng([int(config.seed), 1])
  curve: List[tuple] = []
  losses: List[Any] = []
  steps_to_fit = None
  best, best_step, acc = -1.0, 0, 0.0
  step = 0
  earlier_seconds = 0.0  # Training time of the interrupted sessions this run resumes.
  resumed = fit_records.load_progress(run_dir, key, model, optimizer)
  if resumed is not None:
    step, best, best_step, acc = (int(resumed["step"]), float(resumed["best"]),
                                  int(resumed["best_step"]), float(resumed["acc"]))
    curve = [tuple(c) for c in resumed["curve"]]
    rng.bit_generator.state = resumed["rng_state"]
    earlier_seconds = float(resumed["seconds"])
    log(f"{label}: resuming at step {step} of {recipe.max_steps} (best held-out {best:.3f})")
  # Bound after the resume above: the model graph is walked once, not on every step.
  step_fn = train_step_lib.bind_train_step(train_step_lib.make_train_step(), model, optimizer)
  while step < recipe.max_steps:
    batch = make_batch(rng, step)
    metrics = step_fn(train_step_lib.model_inputs(batch))
    losses.append(metrics["loss"])
    step += 1
    if step % recipe.check_every == 0 or step == recipe.max_steps:
      loss = float(np.mean(jax.device_get(losses)))
      losses = []
      if not math.isfinite(loss):
        log(f"{label}: non-finite loss at step {step}; stopping")
        break
      acc = float(check(model))
      curve.append((step, acc, loss))
      if acc > best:
        best, best_step = acc, step
      seconds = earlier_seconds + time.time() - started
      log(f"{label}: step {step}/{recipe.max_steps} held-out {acc:.3f} (best {best:.3f}) "
          f"loss {loss:.4f} [{seconds:.0f} s]")
      if acc >= recipe.fit_threshold:
        steps_to_fit = step
        break
      if step < recipe.max_steps:
        fit_records.save_progress(run_dir, key, model, optimizer, {
            "step": step, "best": best, "best_step": best_step, "acc": acc, "curve": curve,
            "rng_state": rng.bit_generator.state, "seconds": seconds})
  result = FitResult(run_dir=run_dir, steps=step, steps_to_fit=steps_to_fit, in_dist=acc,
                     best_in_dist=max(best, 0.0), best_step=best_step, curve=tuple(curve),
                     train_seconds=earlier_seconds + time.time() - started,
                     machine=machine.describe_machine())
  fit_records.write_result(result, key, model)
  return result


def row_len_for(task: str, size: int) -> int:
  """The shortest row length whose examples of ``task`` include size ``size``."""
  from pejax.data import synthetic  # pylint: disable=g-import-not-at-top
  lo, hi = 1, 8
  while synthetic.max_size_for(task, hi) < size:
    lo, hi = hi, hi * 2
  while lo < hi:
    mid = (lo + hi) // 2
    if synthetic.max_size_for(task, mid) >= size:
      hi = mid
    else:
      lo = mid + 1
  return hi
