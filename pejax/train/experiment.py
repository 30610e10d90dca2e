"""``train_and_evaluate``: the main job behind ``python launch.py``, importable from a notebook.

Trains a decoder at ``config.data.train_len`` and evaluates it at every ``config.eval.lens``
length (perplexity and bits per byte in the ALiBi paper's two protocols, or exact-match accuracy
for the synthetic tasks), optionally with a zero-shot RoPE context extension and passkey
retrieval. Writes into the workdir::

    checkpoints/          Orbax checkpoints (model, optimizer, step, data state, config JSON)
    config.json           the resolved experiment config
    metrics.jsonl         training / validation metrics, one JSON object per line
    results.json / .csv   the evaluation table
    perplexity_vs_length.png
    results.md            the printed tables
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import pathlib
import platform
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from flax import nnx
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from pejax import data as data_lib
from pejax import eval as eval_lib
from pejax import parallel
from pejax.encodings import rope_scaling as scalings
from pejax.encodings.randomized import randomized_positions
from pejax.nn import Decoder
from pejax.nn import DecoderConfig
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import loop
from pejax.train import optimizer as optimizer_lib

ROPE_SCALINGS = ("none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope")
EVAL_MODES = ("nonoverlap", "sliding", "both")  # "both" runs the two ALiBi-paper protocols.
# Config sections whose values change what a checkpoint means (hashed into the default workdir).
_IDENTITY_SECTIONS = ("model", "pe", "data", "optim", "seed")


class ConfigError(ValueError):
  """A user-facing configuration error (``launch.py`` prints it as a usage line)."""


@dataclasses.dataclass
class ExperimentResult:
  """What :func:`train_and_evaluate` produced.

  Attributes:
    workdir: the run directory.
    train: the :class:`~pejax.train.loop.TrainResult`.
    tables: label -> evaluation results (``LengthResult`` or task-accuracy rows).
    passkey: passkey results (empty unless requested).
    text: the printed report.
    unigram_perplexity: perplexity of the training split's byte unigram distribution (the level
      a model that ignores context reaches), ``None`` for synthetic tasks.
  """

  workdir: pathlib.Path
  train: loop.TrainResult
  tables: Dict[str, list]
  passkey: list
  text: str
  unigram_perplexity: Optional[float]


def rope_scaling_from_name(name: str, *, factor: float, original_max_position: int,
                           rotary_dim: int) -> Optional[scalings.Scaling]:
  """The scaling dataclass a flag value names (``none`` gives ``None``).

  ``longrope`` from flags has no searched factors: it uses ``long_factor[i] = factor ** (i /
  (n - 1))`` (1 for the highest frequency, ``factor`` for the lowest, geometric between), a
  documented heuristic, and ``short_factor = 1``. Llama 3 uses its published band factors 1 and 4.
  """
  if name not in ROPE_SCALINGS:
    raise ConfigError(f"rope_scaling must be one of {list(ROPE_SCALINGS)}, got {name!r}")
  if name == "none":
    return None
  if not factor or factor <= 0:
    raise ConfigError(f"rope_factor must be > 0 for rope_scaling={name!r}, got {factor}")
  if name == "linear":
    return scalings.LinearScaling(factor)
  if name == "ntk":
    return scalings.NTKScaling(factor)
  if name == "dynamic":
    return scalings.DynamicNTKScaling(factor, original_max_position)
  if name == "yarn":
    return scalings.YaRNScaling(factor, original_max_position)
  if name == "llama3":
    return scalings.Llama3Scaling(factor, 1.0, 4.0, original_max_position)
  n = rotary_dim // 2
  long = tuple(float(factor ** (i / max(n - 1, 1))) for i in range(n))
  return scalings.LongRoPEScaling((1.0,) * n, long, original_max_position, factor=factor)


def decoder_config_from(config: ml_collections.ConfigDict, *,
                        rope_scaling: Optional[scalings.Scaling] = None,
                        use_config_scaling: bool = True) -> DecoderConfig:
  """The :class:`DecoderConfig` an experiment config describes.

  Args:
    config: the experiment config.
    rope_scaling: scaling to use instead of ``config.pe.rope_scaling`` when
      ``use_config_scaling`` is false (zero-shot context extension at evaluation).
    use_config_scaling: read the scaling from the config.
  """
  m, pe = config.model, config.pe
  train_len = int(config.data.train_len)
  head_dim = m.d_model // m.num_heads if m.num_heads else 0
  rotary_dim = int(head_dim * pe.rope_fraction)
  if use_config_scaling:
    rope_scaling = rope_scaling_from_name(
        pe.rope_scaling, factor=pe.rope_factor,
        original_max_position=pe.rope_original_max_position or train_len, rotary_dim=rotary_dim)
  try:
    return DecoderConfig(
        vocab_size=m.vocab_size, num_layers=m.num_layers, d_model=m.d_model,
        num_heads=m.num_heads, num_kv_heads=m.num_kv_heads or None, mlp=m.mlp,
        mlp_ratio=m.mlp_ratio, tie_embeddings=m.tie_embeddings, dtype=m.dtype,
        attention=m.attention, block_size=m.block_size,
        blockwise_threshold=config.eval.blockwise_threshold, pe=pe.name,
        rope_base=pe.rope_base, rope_layout=pe.rope_layout, rope_fraction=pe.rope_fraction,
        rope_scaling=rope_scaling, max_position=pe.max_position or train_len,
        t5_num_buckets=pe.t5_num_buckets, t5_max_distance=pe.t5_max_distance)
  except ValueError as e:
    raise ConfigError(str(e)) from None


def eval_lengths(config: ml_collections.ConfigDict) -> List[int]:
  """``config.eval.lens`` parsed (default 1, 2, 4, 8, 16 x train_len), sorted and unique."""
  train_len = int(config.data.train_len)
  spec = config.eval.lens
  if isinstance(spec, str):
    spec = [s for s in spec.replace(" ", "").split(",") if s]
  if not spec:
    return [train_len * k for k in (1, 2, 4, 8, 16)]
  lengths = []
  for item in spec:
    try:
      value = int(item)
    except (TypeError, ValueError):
      raise ConfigError(f"eval_lens must be comma-separated positive integers, got {item!r}")
    if value < 1:
      raise ConfigError(f"eval_lens must be positive, got {value}")
    lengths.append(value)
  return sorted(set(lengths))


def default_workdir(config: ml_collections.ConfigDict) -> pathlib.Path:
  """``runs/<pe>-<data>-<hash>``: the same settings map to the same directory (and resume)."""
  identity = {k: (config[k].to_dict() if hasattr(config[k], "to_dict") else config[k])
              for k in _IDENTITY_SECTIONS}
  identity["steps"] = config.train.steps
  digest = hashlib.sha1(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]
  data_name = pathlib.Path(str(config.data.name)).name or "data"
  return pathlib.Path("runs") / f"{config.pe.name}-{data_name}-{digest}"


def unigram_perplexity(tokens: np.ndarray) -> float:
  """Perplexity of the byte unigram distribution of ``tokens`` (context-free baseline)."""
  counts = np.bincount(np.asarray(tokens, np.int64), minlength=256).astype(np.float64)
  p = counts[counts > 0] / counts.sum()
  return float(np.exp(-(p * np.log(p)).sum()))


class _RandomizedPositions:
  """Wraps a batch iterator, replacing positions by sorted random ones (Ruoss et al. 2023).

  Batch ``i`` uses ``fold_in(PRNGKey(seed), i)`` so resuming reproduces the same positions.
  """

  def __init__(self, inner, *, max_position: int, seed: int):
    self.inner, self.max_position, self.seed = inner, max_position, seed
    self._step = 0
    self._sample = jax.jit(
        lambda key, b, l: randomized_positions(key, l, max_position=max_position,
                                               batch_shape=(b,)), static_argnums=(1, 2))

  def __iter__(self):
    return self

  def __next__(self):
    batch = dict(next(self.inner))
    b, l = batch["inputs"].shape
    key = jax.random.fold_in(jax.random.PRNGKey(self.seed), self._step)
    batch["positions"] = np.asarray(self._sample(key, b, l))
    self._step += 1
    return batch

  def get_state(self):
    return {"inner": self.inner.get_state(), "randomized_step": self._step}

  def set_state(self, state):
    self.inner.set_state(state["inner"])
    self._step = int(state["randomized_step"])


def _validation_fn(model_valid_tokens: np.ndarray, train_len: int, *, max_tokens: int = 8192):
  """Validation loss at the training length on a fixed slice of the validation split."""
  windows = data_lib.nonoverlapping_windows(model_valid_tokens, train_len,
                                            max_tokens=max(train_len, max_tokens))

  def evaluate(model) -> Dict[str, float]:
    total, count = eval_lib.score_windows(model, windows, batch_size=max(1, 8192 // train_len))
    nll = total / count
    return {"loss": nll, "perplexity": math.exp(min(nll, 700.0)), "bits_per_byte": nll / math.log(2)}

  return evaluate


def _task_accuracy(model, task: str, *, lengths: Sequence[int], seed: int, examples: int,
                   blockwise_threshold: int, options: Dict[str, Any],
                   log: Callable[[str], None]) -> List[Dict[str, Any]]:
  """Exact-match accuracy (every answer byte right under teacher forcing) at each length."""

  rows = []
  for length in lengths:
    try:
      size = data_lib.max_size_for(task, length, **options)
      batch = data_lib.synthetic_batch(task, seed + length, batch_size=examples, seq_len=length,
                                       min_size=size, max_size=size, **options)
    except ValueError as e:
      rows.append({"length": length, "accuracy": None, "status": f"n/a ({e})"})
      continue
    ok = eval_lib.answer_exact_match(
        model, *(jnp.asarray(batch[k]) for k in ("inputs", "targets", "positions")),
        jnp.asarray(batch["loss_mask"]),
        attention="blockwise" if length > blockwise_threshold else "dense")
    acc = float(np.mean(np.asarray(ok)))
    rows.append({"length": length, "task_size": size, "accuracy": acc, "status": "ok"})
    log(f"eval {task} L={length:>6} (size {size}): exact-match accuracy {acc:.3f}")
  return rows


def _format_task_table(rows: Sequence[Dict[str, Any]], *, train_len: int) -> str:
  lines = ["| eval len | x train | task size | accuracy |", "|---:|---:|---:|---:|"]
  for r in rows:
    acc = f"{r['accuracy']:.3f}" if r["accuracy"] is not None else r["status"]
    lines.append(f"| {r['length']} | {r['length'] / train_len:g} | {r.get('task_size', '')} | "
                 f"{acc} |")
  return "\n".join(lines)


def _mesh_settings(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """``config.mesh`` with defaults filled in (configs written before it existed lack it)."""
  from pejax import experiment_config  # pylint: disable=g-import-not-at-top
  settings = experiment_config.get_default_config().mesh
  given = config.get("mesh")
  if given is not None:
    settings.update(given.to_dict() if hasattr(given, "to_dict") else dict(given))
  return settings


def make_run_mesh(config: ml_collections.ConfigDict,
                  model_config: DecoderConfig) -> Optional[jax.sharding.Mesh]:
  """The device mesh of a run, or ``None`` for a one-device run without ``mesh.spec``.

  Checks that the mesh divides the global batch, the heads, the MLP width and the vocabulary
  before anything is placed (a ``ConfigError`` naming the hyper-parameter and the mesh axis).
  """
  settings = _mesh_settings(config)
  spec = str(settings.spec or "")
  if not spec and jax.device_count() == 1:
    return None
  try:
    axis_sizes = parallel.parse_mesh_spec(spec, jax.device_count())
    parallel.check_mesh_fits(
        axis_sizes, batch_size=int(config.data.batch_size), num_heads=model_config.num_heads,
        num_kv_heads=model_config.kv_heads, d_model=model_config.d_model,
        mlp_hidden=model_config.mlp_hidden, vocab_size=model_config.vocab_size,
        num_processes=jax.process_count())
  except ValueError as e:
    raise ConfigError(f"mesh {spec or '(all devices on data)'!r}: {e}") from None
  return parallel.make_mesh(spec)


def _machine() -> str:
  return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
          f"jax {jax.__version__} on {jax.devices()[0].platform}")


def train_and_evaluate(config: ml_collections.ConfigDict, *,
                       log: Callable[[str], None] = print,
                       step_callbacks: Sequence[Callable[[int, Dict[str, float]], None]] = (),
                       ) -> ExperimentResult:
  """Trains a decoder as ``config`` says, evaluates extrapolation, writes the results.

  Args:
    config: an experiment config (:func:`pejax.experiment_config.get_default_config`).
    log: receives progress and result lines.
    step_callbacks: called as ``callback(step, metrics)`` after every training step.

  Returns:
    An :class:`ExperimentResult`.

  Raises:
    ConfigError: for invalid settings (message names the field and value).
    pejax.train.NonFiniteLossError: when the loss becomes NaN/Inf (last good checkpoint kept).
  """
  started = time.time()
  mesh_settings = _mesh_settings(config)
  try:
    parallel.initialize_distributed(
        enabled=bool(mesh_settings.distributed),
        coordinator_address=str(mesh_settings.coordinator_address or ""),
        num_processes=int(mesh_settings.num_processes), process_id=int(mesh_settings.process_id),
        log=log)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  if not parallel.is_coordinator():  # Process 0 prints and writes the reports.
    log = lambda line: None
  train_len = int(config.data.train_len)
  lengths = eval_lengths(config)
  if config.eval.mode not in EVAL_MODES:
    raise ConfigError(f"eval_mode must be one of {list(EVAL_MODES)}, got {config.eval.mode!r}")
  if config.eval.rope_scaling and config.eval.rope_scaling != "none" and config.pe.name != "rope":
    raise ConfigError(
        f"eval_rope_scaling={config.eval.rope_scaling!r} needs pe=rope, got pe={config.pe.name!r}")
  model_config = decoder_config_from(config)
  is_task = data_lib.is_task(str(config.data.name))
  try:
    corpus = None if is_task else data_lib.load_corpus(str(config.data.name))
    train_iter = data_lib.make_train_iterator(config, corpus=corpus)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  if config.pe.randomized_max_position:
    if config.pe.randomized_max_position < train_len:
      raise ConfigError(
          f"randomized_max_position must be >= train_len ({train_len}), got "
          f"{config.pe.randomized_max_position}")
    train_iter = _RandomizedPositions(train_iter, max_position=config.pe.randomized_max_position,
                                      seed=config.seed)

  mesh = make_run_mesh(config, model_config)
  coordinator = parallel.is_coordinator()
  workdir = pathlib.Path(config.workdir) if config.workdir else default_workdir(config)
  workdir.mkdir(parents=True, exist_ok=True)
  if coordinator:
    (workdir / "config.json").write_text(config.to_json_best_effort(indent=1) + "\n")
  log(f"pejax: pe={config.pe.name} data={config.data.name} train_len={train_len} "
      f"steps={config.train.steps} workdir={workdir}")
  with contextlib.ExitStack() as stack:
    if mesh is not None:
      stack.enter_context(parallel.mesh_context(mesh))
      train_iter = parallel.ShardedBatches(train_iter, mesh)
      log(f"mesh: {dict(mesh.shape)} over {parallel.process_summary()}")
    return _train_and_evaluate_on(
        config, model_config=model_config, mesh=mesh, train_iter=train_iter, corpus=corpus,
        is_task=is_task, workdir=workdir, lengths=lengths, train_len=train_len,
        coordinator=coordinator, started=started, log=log, step_callbacks=step_callbacks)


def _train_and_evaluate_on(config, *, model_config, mesh, train_iter, corpus, is_task, workdir,
                           lengths, train_len, coordinator, started, log, step_callbacks):
  """The body of :func:`train_and_evaluate` once data, mesh and workdir are set up."""
  model = Decoder(model_config, rngs=nnx.Rngs(params=config.seed))
  if mesh is not None:
    parallel.shard_module(model, mesh)
  num_params = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
  log(f"model: {num_params / 1e6:.3f}M parameters, {model_config.num_layers} layers, "
      f"d_model {model_config.d_model}, {model_config.num_heads} heads")
  unigram = None
  eval_fn = None
  if corpus is not None:
    unigram = unigram_perplexity(corpus.train)
    log(f"data: {len(corpus.train):,} train / {len(corpus.valid):,} validation bytes; "
        f"unigram perplexity {unigram:.2f} (a context-free model's level)")
    eval_fn = _validation_fn(corpus.valid, train_len)
  init_from = config.train.get("init_from", "")
  if init_from and not (workdir / checkpoint_lib.CHECKPOINT_SUBDIR).exists():
    # Fine-tuning: weights from another run (model shapes must match; PE scaling, length and
    # optimizer may differ), a fresh optimizer, step 0.
    source = pathlib.Path(init_from) / checkpoint_lib.CHECKPOINT_SUBDIR
    try:
      with checkpoint_lib.Checkpointer(source, config=config,
                                       compatibility_sections=("model",)) as ckpt:
        restored = ckpt.restore(model)
    except FileNotFoundError as e:
      raise ConfigError(f"init_from={init_from!r}: {e}") from None
    log(f"initialized from {source} step {restored.step}")
  optimizer = optimizer_lib.create_optimizer(model, config.optim, total_steps=config.train.steps)
  if mesh is not None:
    parallel.shard_module(optimizer, mesh)
  train_result = loop.train(model, optimizer, train_iter, config=config, workdir=workdir,
                            eval_fn=eval_fn, log_fn=log, step_callbacks=step_callbacks)
  if train_result.stop_reason:
    log(f"stopped early ({train_result.stop_reason}) at step {train_result.final_step}; "
        "checkpoint saved, re-run the same command to continue")

  tables: Dict[str, list] = {}
  passkey: list = []
  text_parts = []
  meta = {"pe": config.pe.name, "data": str(config.data.name), "train_len": train_len,
          "steps": train_result.final_step, "params": num_params, "machine": _machine(),
          "date": time.strftime("%Y-%m-%d %H:%M"), "label": config.pe.name}
  blockwise_threshold = int(config.eval.blockwise_threshold)
  max_length = model_config.max_position if model_config.pe == "learned" else None
  if is_task:
    options = {"reverse_digits": bool(config.data.get("reverse_digits", False))} if (
        config.data.name == "addition") else {}
    rows = _task_accuracy(model, str(config.data.name), lengths=lengths, seed=config.seed + 1,
                          examples=64, blockwise_threshold=blockwise_threshold, options=options,
                          log=log)
    tables[config.pe.name] = rows
    text_parts.append(_format_task_table(rows, train_len=train_len))
    if coordinator:
      (workdir / "results.json").write_text(
          json.dumps({"meta": meta, "accuracy": rows}, indent=1))
  else:
    modes = ("nonoverlap", "sliding") if config.eval.mode == "both" else (config.eval.mode,)
    stride = (lambda n: int(config.eval.sliding_stride)) if config.eval.sliding_stride else None
    evaluate = lambda m: eval_lib.perplexity_at_lengths(
        m, corpus.valid, lengths=lengths, modes=modes, max_tokens=int(config.eval.num_tokens),
        blockwise_threshold=blockwise_threshold, stride=stride, max_length=max_length,
        unsupported_reason=f"table size {max_length}", progress=log)
    label = config.pe.name + (f"+{config.pe.rope_scaling}" if config.pe.name == "rope" and
                              config.pe.rope_scaling != "none" else "")
    tables[label] = evaluate(model)
    if config.eval.rope_scaling and config.eval.rope_scaling != "none":
      factor = config.eval.rope_factor or max(lengths) / train_len
      scaling = rope_scaling_from_name(
          config.eval.rope_scaling, factor=factor,
          original_max_position=config.pe.rope_original_max_position or train_len,
          rotary_dim=int(model_config.head_dim * model_config.rope_fraction))
      scaled = Decoder(dataclasses.replace(model_config, rope_scaling=scaling),
                       rngs=nnx.Rngs(params=0))
      nnx.update(scaled, nnx.state(model))
      scaled_label = f"{label} + zero-shot {config.eval.rope_scaling} x{factor:g}"
      log(f"evaluating {scaled_label} (same weights, no retraining)")
      tables[scaled_label] = evaluate(scaled)
    for name, results in tables.items():
      text_parts.append(eval_lib.format_table(results, train_len=train_len,
                                              title=f"{name}: trained at {train_len}"))
    if config.eval.passkey:
      passkey = eval_lib.passkey_accuracy(
          model, lengths=[l for l in lengths if l >= 96], depths=(0.0, 0.25, 0.5, 0.75, 1.0),
          seed=config.seed, blockwise_threshold=blockwise_threshold, max_length=max_length,
          progress=log)
      text_parts.append("passkey accuracy (length x depth)\n" +
                        eval_lib.format_passkey_table(passkey))
    if coordinator:
      eval_lib.write_results(workdir, tables, meta=meta, passkey=passkey,
                             title=f"Perplexity vs length (trained at {train_len})")
  header = (f"pe={config.pe.name} data={config.data.name} train_len={train_len} "
            f"steps={train_result.final_step} final train loss "
            + (f"{train_result.last_loss:.3f}" if train_result.last_loss is not None
               else "n/a (training already finished, evaluation only)")
            + (f" (unigram {math.log(unigram):.3f} nats)" if unigram else ""))
  text = header + "\n\n" + "\n\n".join(text_parts)
  if coordinator:
    (workdir / "results.md").write_text(
        f"# Results\n\n`{meta['date']}`, {meta['machine']}\n\n```\n{text}\n```\n")
  log("")
  log(text)
  log(f"\nwrote {workdir}/results.md, results.json, metrics.jsonl"
      + ("" if is_task else ", results.csv, perplexity_vs_length.png")
      + f" in {time.time() - started:.0f}s")
  return ExperimentResult(workdir, train_result, tables, passkey, text, unigram)
