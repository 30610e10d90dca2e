"""``train_and_evaluate``: the main job behind ``python launch.py``, importable from a notebook.

Trains a decoder at ``config.data.train_len`` and evaluates it at every ``config.eval.lens``
length (perplexity and bits per byte in the ALiBi paper's two protocols, or exact-match accuracy
for the synthetic tasks), optionally with a zero-shot RoPE context extension and passkey
retrieval. Writes into the workdir::

    checkpoints/          Orbax checkpoints (model, optimizer, step, data state, config JSON)
    config.json           the experiment config, written once when the run is created
    status.json           training | preempted | finished
    metrics.jsonl         training / validation / evaluation records, one JSON object per line
    tensorboard/          the same scalars as TensorBoard events (when tensorboardX is installed);
                          results/, evals/<name>/: each evaluation's perplexity by length
    loss_vs_step.png      window-mean training loss and validation loss against the step
    results.json / .csv   the first evaluation's table (also results.md,
    perplexity_vs_length.png)
    evals/<name>/         each later evaluation (``--eval_only``, other eval settings), same files

This module is the orchestration only; each step it takes lives in the module named after it:

    pejax.train.config_check      check_config: ineffective settings and bad values, up front
    pejax.decoder_from_config     the decoder (PE, RoPE scaling, architecture) a config describes
    pejax.data                    the batch iterator, RandomizedPositions
    pejax.train.run_mesh          the device mesh of the ``mesh`` section
    pejax.train.run_directory     config.json, status.json, evals/<name>/, final numbers
    pejax.train.loop              the training loop (checkpoints, metrics, signals)
    pejax.train.loss_plot         loss_vs_step.png
    pejax.eval.run_evaluation     the evaluation ``config.eval`` asks for, and its results files
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import time
from typing import Any, Callable, Dict, Optional, Sequence

from flax import nnx
import jax
import ml_collections
import numpy as np

from pejax import data as data_lib
from pejax import decoder_from_config
from pejax import json_file
from pejax import machine
from pejax import parallel
from pejax import provenance
from pejax.eval import run_evaluation
from pejax.eval import tensorboard_curves
from pejax.eval import unigram_baseline
from pejax.eval import validation_loss
from pejax.experiment_config import ConfigError
from pejax.nn import Decoder
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import config_check
from pejax.train import loop
from pejax.train import loss_plot
from pejax.train import metrics as metrics_lib
from pejax.train import optimizer as optimizer_lib
from pejax.train import run_directory
from pejax.train import run_mesh

# Exit status of a run stopped by a signal (shell convention 128 + signal number).
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


class TrainingInterrupted(RuntimeError):
  """A run that a caller needed finished was stopped by SIGINT / SIGTERM (checkpoint saved).

  Raised by code that trains a run and then uses the model (the studies), so that a signal ends
  the whole command, as it ends ``launch.py``, instead of evaluating an unfinished model.

  Attributes:
    signal_name: ``"SIGINT"`` or ``"SIGTERM"``.
    step: the step the run stopped at.
    exit_code: the command's exit status (:data:`EXIT_CODES`).
  """

  def __init__(self, workdir: Any, *, signal_name: str, step: int, steps: int):
    self.signal_name, self.step = signal_name, int(step)
    self.exit_code = EXIT_CODES[signal_name]
    super().__init__(f"stopped by {signal_name} at step {self.step} of {int(steps)} in {workdir}: "
                     "checkpoint saved, nothing evaluated; re-run the same command to resume")


@dataclasses.dataclass
class ExperimentResult:
  """What :func:`train_and_evaluate` produced.

  Attributes:
    workdir: the directory the results went to (the run directory, or ``evals/<name>/``).
    train: the :class:`~pejax.train.loop.TrainResult` (``None`` when nothing was trained).
    tables: label -> evaluation results (``LengthResult`` or task-accuracy rows).
    passkey: passkey results (empty unless requested).
    text: the printed report.
    unigram_perplexity: perplexity of the training split's byte unigram distribution (the level
      a model that ignores context reaches), ``None`` for synthetic tasks.
  """

  workdir: pathlib.Path
  train: Optional[loop.TrainResult]
  tables: Dict[str, list]
  passkey: list
  text: str
  unigram_perplexity: Optional[float]

  @property
  def stop_reason(self) -> Optional[str]:
    """The signal that stopped training (``"SIGTERM"``), ``"data_exhausted"`` or ``None``."""
    return self.train.stop_reason if self.train is not None else None


def train_and_evaluate(config: ml_collections.ConfigDict, *,
                       log: Callable[[str], None] = print,
                       step_callbacks: Sequence[Callable[[int, Dict[str, float]], None]] = (),
                       ) -> ExperimentResult:
  """Trains a decoder as ``config`` says, evaluates extrapolation, writes the results.

  The run directory is a record (:func:`~pejax.train.run_directory.open_run`): its
  ``config.json`` is written once; a command with other training settings fails before anything
  is written. A run stopped by
  SIGINT/SIGTERM saves a checkpoint and returns at once, without evaluating (``stop_reason``
  set, ``status.json`` says ``preempted``); the same command resumes it. The first evaluation
  of a finished run writes ``results.*``; a later one (other evaluation settings) goes to
  ``evals/<timestamp>/`` and never overwrites.

  Args:
    config: an experiment config (:func:`pejax.experiment_config.get_default_config`).
    log: receives progress and result lines.
    step_callbacks: called as ``callback(step, metrics)`` after every training step.

  Returns:
    An :class:`ExperimentResult`.

  Raises:
    ConfigError: for invalid or ineffective settings (message names the field and value).
    pejax.train.NonFiniteLossError: when the loss becomes NaN/Inf (last good checkpoint kept).
  """
  started = time.time()
  mesh_settings = run_mesh.mesh_settings(config)
  try:  # First: jax.distributed must start before anything touches a device.
    parallel.initialize_distributed(
        enabled=bool(mesh_settings.distributed),
        coordinator_address=str(mesh_settings.coordinator_address or ""),
        num_processes=int(mesh_settings.num_processes), process_id=int(mesh_settings.process_id),
        heartbeat_timeout_s=mesh_settings.heartbeat_timeout_s, log=log)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  config_check.check_config(config)
  if not parallel.is_coordinator():  # Process 0 prints and writes the reports.
    log = lambda line: None
  train_len = int(config.data.train_len)
  run_evaluation.eval_lengths(config)
  run_evaluation.eval_modes(config)
  model_config, corpus, is_task = _model_config_and_corpus(config)
  try:
    train_iter = data_lib.make_train_iterator(config, corpus=corpus)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  if config.pe.randomized_max_position:
    if config.pe.randomized_max_position < train_len:
      raise ConfigError(
          f"randomized_max_position must be >= train_len ({train_len}), got "
          f"{config.pe.randomized_max_position}")
    train_iter = data_lib.RandomizedPositions(
        train_iter, max_position=config.pe.randomized_max_position, seed=config.seed)

  mesh = run_mesh.make_run_mesh(config, model_config)
  # Checks an existing run's settings before writing anything.
  workdir = run_directory.open_run(config)
  coordinator = parallel.is_coordinator()
  log(f"pejax: pe={config.pe.name} data={config.data.name} train_len={train_len} "
      f"steps={config.train.steps} workdir={workdir}")
  with contextlib.ExitStack() as stack:
    if mesh is not None:
      stack.enter_context(parallel.mesh_context(mesh))
      train_iter = parallel.ShardedBatches(train_iter, mesh)
      log(f"mesh: {dict(mesh.shape)} over {parallel.process_summary()}")
      if jax.process_count() > 1 and train_iter.rows is not None:  # Every process says it.
        print(f"data: process {jax.process_index()} of {jax.process_count()} loads rows "
              f"{train_iter.rows.start}:{train_iter.rows.stop} of each global batch of "
              f"{train_iter.global_rows}", flush=True)
    return _train_and_evaluate_on(
        config, model_config=model_config, mesh=mesh, train_iter=train_iter, corpus=corpus,
        is_task=is_task, workdir=workdir, train_len=train_len,
        coordinator=coordinator, started=started, log=log, step_callbacks=step_callbacks)


def _model_config_and_corpus(config: ml_collections.ConfigDict):
  """``(decoder config, corpus or None, is_task)``: from ``model.*`` and bytes, or, with
  ``train.init_from_hf``, the checkpoint's architecture and the corpus in its tokens."""
  is_task = data_lib.is_task(str(config.data.name))
  hf_dir = str(config.train.get("init_from_hf", "") or "")
  tokenizer = None
  if hf_dir:
    if is_task:
      raise ConfigError(f"train.init_from_hf fine-tunes on text; data.name={config.data.name!r} "
                        "is a synthetic byte task")
    if config.eval.passkey:
      raise ConfigError("eval.passkey is the byte-level task; for a pretrained model use "
                        "--init_from_hf=<dir> --eval_only --config.eval.passkey=True")
    model_config, tokenizer = decoder_from_config.pretrained_setup(config)
    if config.eval.get("ruler"):  # Minimum lengths in this tokenizer, before anything is made.
      check_ruler_lengths(config, tokenizer)
  else:
    model_config = decoder_from_config.decoder_config_from(config)
  try:
    corpus = None if is_task else data_lib.load_corpus(str(config.data.name))
    if tokenizer is not None:
      corpus = data_lib.tokenize_corpus(corpus, tokenizer)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  return model_config, corpus, is_task


def check_ruler_lengths(config: ml_collections.ConfigDict, tokenizer: Any) -> None:
  """``eval.ruler``'s tasks fit at every eval length in ``tokenizer``'s tokens (ConfigError)."""
  from pejax.eval.ruler import model_eval  # pylint: disable=g-import-not-at-top
  try:
    model_eval.check_lengths(model_eval.parse_tasks(str(config.eval.ruler)),
                             run_evaluation.eval_lengths(config), tokenizer,
                             seed=int(config.seed))
  except ValueError as e:
    raise ConfigError(f"eval.ruler at eval.lens: {e}") from None


def _init_from_hf(model: Decoder, config: ml_collections.ConfigDict, log) -> None:
  """Copies the weights of ``train.init_from_hf`` into ``model`` (float32 parameters)."""
  from pejax import hf  # pylint: disable=g-import-not-at-top
  path = str(config.train.init_from_hf)
  loaded = hf.from_pretrained(path, dtype="float32", pe=model.config.pe,
                              attention=model.config.attention,
                              block_size=model.config.block_size,
                              blockwise_threshold=model.config.blockwise_threshold)
  nnx.update(model, nnx.state(loaded, nnx.Param))
  log(f"initialized from the Hugging Face checkpoint {path}")


def _num_params(model) -> int:
  return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(nnx.state(model, nnx.Param)))


def _train_and_evaluate_on(config, *, model_config, mesh, train_iter, corpus, is_task, workdir,
                           train_len, coordinator, started, log, step_callbacks):
  """The body of :func:`train_and_evaluate` once data, mesh and workdir are set up."""
  model = Decoder(model_config, rngs=nnx.Rngs(params=config.seed))
  if mesh is not None:
    parallel.shard_module(model, mesh)
  num_params = _num_params(model)
  log(f"model: {num_params / 1e6:.3f}M parameters, {model_config.num_layers} layers, "
      f"d_model {model_config.d_model}, {model_config.num_heads} heads")
  unigram = None
  eval_fn = None
  if corpus is not None:
    unigram = unigram_baseline.unigram_perplexity(corpus.train)
    unit = "tokens" if "tokenizer" in corpus.metadata else "bytes"
    log(f"data: {len(corpus.train):,} train / {len(corpus.valid):,} validation {unit}; "
        f"unigram perplexity {unigram:.2f} (a context-free model's level)")
    eval_fn = validation_loss.validation_loss_fn(corpus.valid, train_len)
  already_finished = run_directory.is_finished(workdir) and (workdir / "results.json").exists()
  if already_finished and (workdir / "results.md").exists():
    saved_path = workdir / run_directory.CONFIG_FILENAME
    saved_eval = run_directory.eval_settings(json.loads(saved_path.read_text())) if (
        saved_path.exists()) else None
    if saved_eval == run_directory.eval_settings(config):
      text = (workdir / "results.md").read_text()
      log(f"{workdir} is a finished run with these settings; its results (not recomputed):")
      log(text)
      return ExperimentResult(workdir, None, {}, [], text, unigram)
  init_from = config.train.get("init_from", "")
  if config.train.get("init_from_hf", "") and not (
      workdir / checkpoint_lib.CHECKPOINT_SUBDIR).exists():
    if init_from:
      raise ConfigError("train.init_from and train.init_from_hf are exclusive; give one")
    _init_from_hf(model, config, log)
  if init_from and not (workdir / checkpoint_lib.CHECKPOINT_SUBDIR).exists():
    # Fine-tuning: weights from another run (model shapes must match; PE scaling, length and
    # optimizer may differ), a fresh optimizer, step 0.
    source = pathlib.Path(init_from) / checkpoint_lib.CHECKPOINT_SUBDIR
    try:
      with checkpoint_lib.Checkpointer(source, config=config, compatibility_sections=("model",),
                                       read_only=True) as ckpt:
        restored = ckpt.restore(model)
    except FileNotFoundError as e:
      raise ConfigError(f"init_from={init_from!r}: {e}") from None
    log(f"initialized from {source} step {restored.step}")
  optimizer = optimizer_lib.create_optimizer(model, config.optim, total_steps=config.train.steps)
  if mesh is not None:
    parallel.shard_module(optimizer, mesh)
  if coordinator and not run_directory.is_finished(workdir):  # A finished run stays finished.
    run_directory.set_status(workdir, "training")
  train_result = loop.train(model, optimizer, train_iter, config=config, workdir=workdir,
                            eval_fn=eval_fn, log_fn=log, step_callbacks=step_callbacks)
  if coordinator:
    loss_plot.write_loss_plot(workdir, unigram=unigram)
  if train_result.stop_reason in EXIT_CODES:
    if coordinator:
      run_directory.set_status(workdir, "preempted", step=train_result.final_step,
                               signal=train_result.stop_reason)
    log(f"stopped by {train_result.stop_reason} at step {train_result.final_step}: checkpoint "
        "saved, evaluation skipped; re-run the same command to resume")
    if jax.process_count() > 1:  # Every process says it (they agreed on the step).
      print(f"process {jax.process_index()} of {jax.process_count()}: stopped by "
            f"{train_result.stop_reason} at step {train_result.final_step}", flush=True)
    return ExperimentResult(workdir, train_result, {}, [], "", unigram)
  if train_result.stop_reason:
    log(f"stopped early ({train_result.stop_reason}) at step {train_result.final_step}")
  out_dir = workdir
  if (workdir / "results.json").exists():  # Never overwrite an earlier evaluation.
    out_dir = run_directory.new_eval_dir(workdir, "")
  result = _evaluate_and_record(
      model, config, model_config=model_config, corpus=corpus, is_task=is_task, workdir=workdir,
      out_dir=out_dir, step=train_result.final_step, num_params=num_params, unigram=unigram,
      coordinator=coordinator, started=started, log=log)
  result.train = train_result
  if coordinator:
    run_directory.set_status(
        workdir, "finished" if not train_result.stop_reason else train_result.stop_reason,
        step=train_result.final_step)
  return result


def _evaluate_and_record(model, config, *, model_config, corpus, is_task, workdir, out_dir,
                         step, num_params, unigram, coordinator, started, log,
                         name: str = "") -> ExperimentResult:
  """Evaluates ``model`` into ``out_dir`` and records the evaluation in the run directory."""
  train_len = int(config.data.train_len)
  final = run_directory.final_numbers(workdir)
  machine_line = machine.describe_machine()
  meta = {"pe": config.pe.name, "data": str(config.data.name), "train_len": train_len,
          "steps": step, "params": num_params, "machine": machine_line,
          "date": time.strftime("%Y-%m-%d %H:%M"), "label": config.pe.name,
          "run": workdir.name,
          "evaluation": name or ("results" if out_dir == workdir else out_dir.name), "final": final,
          "eval_config": run_directory.eval_settings(config),
          # Commit, versions, command and wall time of the process that wrote this evaluation
          # (training may have been resumed by others; metrics.jsonl holds their times).
          "provenance": provenance.provenance(started=started, machine=machine_line)}
  header = (f"pe={config.pe.name} data={config.data.name} train_len={train_len} steps={step}\n"
            + run_directory.describe_final_numbers(final, train_len=train_len, unigram=unigram))
  tokenizer = None  # RULER prompts: bytes, or the tokenizer of the checkpoint fine-tuned.
  if config.eval.get("ruler") and config.train.get("init_from_hf"):
    _, tokenizer = decoder_from_config.pretrained_setup(config)
  evaluation = run_evaluation.evaluate_and_write(
      model, config, model_config=model_config, corpus=corpus, is_task=is_task,
      out_dir=out_dir, meta=meta, header=header, write=coordinator, log=log,
      tokenizer=tokenizer)
  if coordinator:
    if out_dir != workdir:
      json_file.write_json_atomic(out_dir / "eval_config.json", meta["eval_config"])
    with metrics_lib.MetricsWriter(workdir, append=True, tensorboard=False) as writer:
      writer.write(step, "evaluation", {"name": meta["evaluation"], "dir": str(
          out_dir.relative_to(workdir)) if out_dir != workdir else ".", **evaluation.summary})
    if config.train.get("tensorboard", False):
      _write_evaluation_events(workdir, out_dir, evaluation.tables, step=step)
  log("")
  log(evaluation.text)
  log(f"\nwrote {out_dir}/results.md, results.json"
      + ("" if is_task else ", results.csv, perplexity_vs_length.png")
      + (", ruler.json, ruler_accuracy.png" if config.eval.get("ruler") else "")
      + f" in {time.time() - started:.0f}s")
  return ExperimentResult(out_dir, None, evaluation.tables, evaluation.passkey, evaluation.text,
                          unigram)


def _write_evaluation_events(workdir: pathlib.Path, out_dir: pathlib.Path,
                             tables: Dict[str, list], *, step: int) -> None:
  """Perplexity (or accuracy) by length as TensorBoard events, in the evaluation's own folder.

  ``tensorboard/results/`` for the first evaluation, ``tensorboard/evals/<name>/`` for a later
  one: never the training events' folder, whose writer restarts at the resumed step
  (:mod:`pejax.eval.tensorboard_curves`). Nothing without tensorboardX.
  """
  relative = out_dir.relative_to(workdir) if out_dir != workdir else pathlib.Path("results")
  tensorboard_curves.write_evaluation(
      workdir / metrics_lib.TENSORBOARD_SUBDIR / relative, tables, step=step,
      plot=out_dir / "perplexity_vs_length.png")


def evaluate_run(workdir: os.PathLike | str, *, overrides: Optional[Dict[str, Any]] = None,
                 name: str = "", log: Callable[[str], None] = print) -> ExperimentResult:
  """Evaluates a trained run with its own config (``--eval_only``); never overwrites.

  Loads ``<workdir>/config.json``, applies ``overrides`` (``eval.*`` and ``mesh.*`` paths only),
  restores the newest checkpoint and writes the evaluation to ``evals/<name or timestamp>/``,
  appending an ``evaluation`` record to ``metrics.jsonl``.

  Args:
    workdir: a run directory created by :func:`train_and_evaluate`.
    overrides: flattened ``path -> value`` changes of the ``eval.*`` / ``mesh.*`` settings.
    name: the evaluation's folder name under ``evals/`` (default: a timestamp).
    log: receives each printed line.

  Returns:
    The :class:`ExperimentResult` of the evaluation (its ``workdir`` is ``evals/<name>/``,
    ``train`` is ``None``).

  Raises:
    ConfigError: no run there, an override of a training setting, or an unfinished run.
  """
  started = time.time()
  workdir = pathlib.Path(workdir)
  if not (workdir / run_directory.CONFIG_FILENAME).exists():
    raise ConfigError(f"--eval_only needs a run directory with {run_directory.CONFIG_FILENAME}; "
                      f"{str(workdir)!r} has none")
  for path in overrides or {}:
    if path.split(".")[0] not in ("eval", "mesh", "workdir"):
      raise ConfigError(f"--eval_only evaluates the run's own config; {path} is a training "
                        "setting (allowed: eval.* and mesh.*)")
  config = run_directory.load_run_config(workdir, overrides)
  config_check.check_config(config)
  run_evaluation.eval_lengths(config)
  run_evaluation.eval_modes(config)
  model_config, corpus, is_task = _model_config_and_corpus(config)
  status = run_directory.run_status(workdir)
  if status.get("state") != "finished":
    log(f"note: {workdir} is not a finished run (state {status.get('state')!r}); evaluating its "
        "newest checkpoint")
  out_dir = run_directory.new_eval_dir(workdir, name)
  model = Decoder(model_config, rngs=nnx.Rngs(params=0))
  try:
    with checkpoint_lib.Checkpointer(workdir / checkpoint_lib.CHECKPOINT_SUBDIR,
                                     config=config, read_only=True) as ckpt:
      restored = ckpt.restore(model)
  except FileNotFoundError as e:
    raise ConfigError(f"--eval_only: {e}") from None
  log(f"evaluating {workdir} at step {restored.step} -> {out_dir}")
  unigram = unigram_baseline.unigram_perplexity(corpus.train) if corpus is not None else None
  return _evaluate_and_record(
      model, config, model_config=model_config, corpus=corpus, is_task=is_task, workdir=workdir,
      out_dir=out_dir, step=restored.step, num_params=_num_params(model), unigram=unigram,
      coordinator=parallel.is_coordinator(), started=started, log=log, name=name)
