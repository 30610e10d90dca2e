"""``train_and_evaluate``: the main job behind ``python launch.py``, importable from a notebook.

Trains a decoder at ``config.data.train_len`` and evaluates it at every ``config.eval.lens``
length (perplexity and bits per byte in the ALiBi paper's two protocols, or exact-match accuracy
for the synthetic tasks), optionally with a zero-shot RoPE context extension and passkey
retrieval. Writes into the workdir::

    checkpoints/          Orbax checkpoints (model, optimizer, step, data state, config JSON)
    config.json           the experiment config, written once when the run is created
    status.json           training | preempted | finished
    metrics.jsonl         training / validation / evaluation records, one JSON object per line
    tensorboard/          the same scalars as TensorBoard events (when tensorboardX is installed)
    loss_vs_step.png      window-mean training loss and validation loss against the step
    results.json / .csv   the first evaluation's table (also results.md,
    perplexity_vs_length.png)
    evals/<name>/         each later evaluation (``--eval_only``, other eval settings), same files
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
from pejax.eval import report as report_lib
from pejax import parallel
from pejax.encodings import rope_scaling as scalings
from pejax.encodings.randomized import randomized_positions
from pejax.nn import Decoder
from pejax.nn import DecoderConfig
from pejax.nn.attention import choose_implementation
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import loop
from pejax.train import metrics as metrics_lib
from pejax.train import optimizer as optimizer_lib

ROPE_SCALINGS = ("none",) + scalings.scaling_names()
EVAL_MODES = ("nonoverlap", "sliding", "both")  # "both" runs the two ALiBi-paper protocols.
# Config sections whose values change what a checkpoint means (hashed into the default workdir).
_IDENTITY_SECTIONS = ("model", "pe", "data", "optim", "seed")
_TRAINING_RUN_FIELDS = ("steps", "init_from", "init_from_hf")  # train.* fields defining a run.
CONFIG_FILENAME = "config.json"
STATUS_FILENAME = "status.json"
EVALS_SUBDIR = "evals"
# Exit status of a run stopped by a signal (shell convention 128 + signal number).
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


class ConfigError(ValueError):
  """A user-facing configuration error (``launch.py`` prints it as a usage line)."""


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


def pe_config_from(config: ml_collections.ConfigDict) -> Any:
  """The PE config(s) that the ``pe`` section describes (a tuple for a per-layer pattern).

  Fields left unset (``None``) take the PE's defaults; an experiment's learned table covers
  ``data.train_len`` and a RoPE scaling's original length defaults to it.

  Args:
    config: the experiment config.

  Returns:
    A :class:`~pejax.nn.PEConfig`, or a tuple of them when ``pe.name`` lists several PEs.

  Raises:
    ConfigError: for an unknown PE, a field no chosen PE has (naming the PEs that have it), or
      an invalid value (naming the field).
  """
  from pejax import experiment_config  # pylint: disable=g-import-not-at-top
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top
  section = config.pe
  names = [n.strip() for n in str(section.name).split(",") if n.strip()]
  if not names:
    raise ConfigError(f"pe.name must name a PE, one of {list(registry.pe_names())}")
  chosen = {k: section[k] for k in section.keys()
            if k not in experiment_config.PE_SECTION_KEYS and section[k] is not None}
  m = config.model
  context = {"train_len": int(config.data.train_len),
             "head_dim": m.d_model // m.num_heads if m.num_heads else 0}
  configs, used = [], set()
  try:
    for name in names:
      entry = registry.registry_entry(name)
      own = set(entry.pe_class.config_class.field_types())
      used |= own
      configs.append(entry.make_config(context, **{k: v for k, v in chosen.items() if k in own}))
  except ValueError as e:
    raise ConfigError(f"pe: {e}") from None
  # A PE's own fields first (``scaling`` before the scaling's ``factor``): the message names the
  # setting the user chose, and every PE whose config accepts the field.
  primary = {f for f, (_, pes) in experiment_config.pe_fields_by_name().items() if pes}
  unused = sorted(set(chosen) - used, key=lambda f: (f not in primary, f))
  if unused:
    field = unused[0]
    owners = sorted(n for n in registry.pe_names()
                    if field in registry.get_pe_class(n).config_class.field_types())
    raise ConfigError(f"pe.{field}={chosen[field]!r} has no effect with pe.name={section.name!r}"
                      f" (PEs with this field: {', '.join(owners) or 'none registered'}); drop "
                      "it or choose such a PE")
  return configs[0] if len(configs) == 1 else tuple(configs)


def with_rope_scaling(pe: Any, name: str, *, factor: float, original_max_position: int,
                      head_dim: int) -> Any:
  """``pe`` (a rotary PE config, or a per-layer tuple) with the scaling ``name`` instead.

  Args:
    pe: a PE config with a ``scaling`` field, or a tuple of PE configs (those with a
      ``scaling`` field are changed).
    name: a scaling name (:func:`pejax.encodings.rope_scaling.scaling_names`).
    factor: its factor.
    original_max_position: its original length (for the scalings that have one).
    head_dim: the head dim (LongRoPE's heuristic factor lists).

  Returns:
    The config(s) with the scaling replaced.

  Raises:
    ConfigError: for an unknown scaling, a bad factor, or a PE without a scaling field.
  """
  if isinstance(pe, tuple):
    return tuple(with_rope_scaling(p, name, factor=factor,
                                   original_max_position=original_max_position,
                                   head_dim=head_dim) if hasattr(p, "scaling") else p for p in pe)
  if not hasattr(pe, "scaling"):
    raise ConfigError(f"a RoPE scaling needs a rotary PE, got {type(pe).__name__}")
  try:
    cls = scalings.scaling_class(name)
    rotary_dim = int(head_dim * getattr(pe, "fraction", 1.0))
    scaling = cls.from_fields({"factor": float(factor)}, rotary_dim=rotary_dim,
                              train_len=original_max_position)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  return dataclasses.replace(pe, scaling=scaling)


def decoder_config_from(config: ml_collections.ConfigDict, *,
                        pe: Any = None) -> DecoderConfig:
  """The :class:`DecoderConfig` an experiment config describes.

  Args:
    config: the experiment config.
    pe: PE config(s) to use instead of the ``pe`` section's (zero-shot context extension at
      evaluation builds the same model with another RoPE scaling).

  Returns:
    The decoder config.

  Raises:
    ConfigError: naming the field of an invalid setting.
  """
  m = config.model
  pe = pe_config_from(config) if pe is None else pe
  windows = [w.strip() for w in str(m.get("sliding_window", "") or "").split(",") if w.strip()]
  try:
    window = tuple(int(w) or None for w in windows)
  except ValueError:
    raise ConfigError(f"model.sliding_window must be comma-separated integers, got "
                      f"{m.sliding_window!r}") from None
  query_scaling = str(m.get("query_scaling", "none") or "none")
  try:
    return DecoderConfig(
        vocab_size=m.vocab_size, num_layers=m.num_layers, d_model=m.d_model,
        num_heads=m.num_heads, num_kv_heads=m.num_kv_heads or None, mlp=m.mlp,
        mlp_ratio=m.mlp_ratio, tie_embeddings=m.tie_embeddings, dtype=m.dtype,
        attention=m.attention, block_size=m.block_size,
        blockwise_threshold=blockwise_threshold_of(config), pe=pe,
        sliding_window=(window[0] if len(window) == 1 else window) if window else None,
        query_scaling=query_scaling,
        query_scaling_length=int(config.data.train_len) if query_scaling != "none" else 0)
  except ValueError as e:
    raise ConfigError(str(e)) from None


def pretrained_setup(config: ml_collections.ConfigDict) -> tuple[DecoderConfig, Any]:
  """The decoder config and tokenizer of ``config.train.init_from_hf`` (fine-tuning).

  The architecture is the checkpoint's (``model.*`` is not read, except ``dtype``,
  ``attention`` and ``block_size``); a ``pe.scaling`` replaces the checkpoint's RoPE scaling
  (``pe.factor``; ``pe.original_max_position`` defaults to the checkpoint's
  ``max_position_embeddings``).

  Args:
    config: the experiment config, with ``train.init_from_hf`` set.

  Returns:
    ``(decoder config, tokenizer)``.

  Raises:
    ConfigError: when the checkpoint or tokenizer cannot be loaded (naming the file or field).
  """
  from pejax import hf  # pylint: disable=g-import-not-at-top
  from pejax.hf import safetensors_files  # pylint: disable=g-import-not-at-top
  path = str(config.train.init_from_hf)
  m = config.model
  try:
    model_config = hf.load_config(path, dtype=m.dtype, attention=m.attention,
                                  block_size=m.block_size,
                                  blockwise_threshold=blockwise_threshold_of(config))
    tokenizer = hf.load_tokenizer(path)
    context = safetensors_files.read_json(os.path.join(path, "config.json"), "config.json").get(
        "max_position_embeddings")
  except ValueError as e:
    raise ConfigError(f"train.init_from_hf: {e}") from None
  scaling = str(config.pe.get("scaling") or "none")
  if scaling != "none":
    pe = with_rope_scaling(
        model_config.pe, scaling, factor=float(config.pe.get("factor") or 1.0),
        original_max_position=int(config.pe.get("original_max_position") or context
                                  or config.data.train_len),
        head_dim=model_config.head_dim)
    model_config = dataclasses.replace(model_config, pe=pe)
  return model_config, tokenizer


def blockwise_threshold_of(config: ml_collections.ConfigDict) -> Optional[int]:
  """``config.eval.blockwise_threshold`` as the decoder and the evaluation loops take it: the
  longest length run densely, ``None`` (from the config's 0) for the platform's measured
  crossover."""
  return int(config.eval.blockwise_threshold) or None


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


def training_settings(config: Any) -> Dict[str, Any]:
  """The fields that define what a run trains (flattened ``path -> value``).

  ``model``, ``pe``, ``data``, ``optim``, ``seed``, ``train.steps`` and ``train.init_from``; the
  evaluation, mesh, logging and checkpoint-interval settings are free to change between commands.
  """
  as_dict = checkpoint_lib.config_to_dict(config) or {}
  flat = {}
  for section in _IDENTITY_SECTIONS:
    value = as_dict.get(section)
    if isinstance(value, dict):
      for key, item in _flatten(value, section):
        if not (section == "pe" and item is None):  # Unset PE fields: the PE's defaults.
          flat[key] = item
    else:
      flat[section] = value
  train = as_dict.get("train", {})
  for key in _TRAINING_RUN_FIELDS:
    flat[f"train.{key}"] = train.get(key)
  return flat


def _flatten(tree: Dict[str, Any], prefix: str):
  for key, value in tree.items():
    path = f"{prefix}.{key}"
    if isinstance(value, dict):
      yield from _flatten(value, path)
    else:
      yield path, value


def training_differences(saved: Any, current: Any) -> List[str]:
  """``"pe.name: run has 'rope', this command has 'alibi'"`` for each differing training field."""
  old, new = training_settings(saved), training_settings(current)
  missing = "<missing>"
  return [f"{path}: run has {old.get(path, missing)!r}, this command has "
          f"{new.get(path, missing)!r}"
          for path in sorted(set(old) | set(new)) if old.get(path) != new.get(path)]


def run_name(config: ml_collections.ConfigDict) -> str:
  """``<pe>[-<scaling>x<factor>]-L<train_len>-<data>-<hash>``: ``rope-yarnx4-L128-stdlib-1a2b3c``.

  The hash covers every training setting (:func:`training_settings`), so the same settings map
  to the same directory (and resume) and different ones never share it.

  Args:
    config: the experiment config (``pe``, ``data`` and the training settings are read).

  Returns:
    The directory name (not a path).
  """
  digest = hashlib.sha1(json.dumps(training_settings(config), sort_keys=True,
                                   default=str).encode()).hexdigest()[:6]
  data_name = pathlib.Path(str(config.data.name)).name or "data"
  scaling = str(config.pe.get("scaling") or "none")
  parts = [str(config.pe.name).replace(",", "+")]
  if scaling != "none":
    parts.append(f"{scaling}x{float(config.pe.get('factor') or 1.0):g}")
  parts += [f"L{int(config.data.train_len)}", data_name, digest]
  return "-".join(parts)


def default_workdir(config: ml_collections.ConfigDict) -> pathlib.Path:
  """``runs/<run_name>`` (:func:`run_name`)."""
  return pathlib.Path("runs") / run_name(config)


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

  @property
  def batch_size(self):
    return self.inner.batch_size

  def select_rows(self, rows):
    """Only ``rows`` of each batch (multi-process); positions are drawn for the global batch."""
    self.inner.select_rows(rows)

  def __next__(self):
    batch = dict(next(self.inner))
    l = batch["inputs"].shape[1]
    key = jax.random.fold_in(jax.random.PRNGKey(self.seed), self._step)
    rows = getattr(self.inner, "rows", None)
    positions = np.asarray(self._sample(key, int(self.inner.batch_size), l))
    batch["positions"] = positions if rows is None else positions[rows]
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
                   blockwise_threshold: Optional[int], options: Dict[str, Any],
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
        attention=choose_implementation("auto", length, blockwise_threshold=blockwise_threshold))
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


# ----------------------------------------------------------------------------------------------
# Settings that would be silently ignored, and values no run can use.


def _has_scaling(config: ml_collections.ConfigDict) -> bool:
  """Whether a PE of the ``pe`` section has a RoPE ``scaling`` field."""
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top
  for name in str(config.pe.name).split(","):
    try:
      if "scaling" in registry.get_pe_class(name.strip()).config_class.field_types():
        return True
    except ValueError:
      pass
  return False


def _walk_values(tree: Dict[str, Any], prefix: str = ""):
  for key, value in tree.items():
    path = f"{prefix}{key}"
    if isinstance(value, dict):
      yield from _walk_values(value, path + ".")
    else:
      yield path, value


def check_config(config: ml_collections.ConfigDict) -> None:
  """Rejects settings that would have no effect for the chosen PE, data or mode, and bad values.

  Args:
    config: the experiment config, checked as a whole before any file is written.

  Raises:
    ConfigError: naming the setting and what makes it ineffective (``pe.scaling='yarn' has
      no effect with pe.name='alibi'``), or the field and bad value (non-finite numbers, a
      workdir below a file).
  """
  from pejax import experiment_config  # pylint: disable=g-import-not-at-top
  defaults = experiment_config.get_default_config()
  for path, value in _walk_values(checkpoint_lib.config_to_dict(config) or {}):
    if isinstance(value, float) and not math.isfinite(value):
      raise ConfigError(f"{path} must be a finite number, got {value}")
  minimums = {"train.steps": 1, "train.log_every": 0, "train.eval_every": 0,
              "train.checkpoint_every": 0, "train.keep_checkpoints": 0, "data.batch_size": 1,
              "data.train_len": 1, "eval.num_tokens": 1, "eval.sliding_stride": 0,
              "eval.blockwise_threshold": 0, "optim.warmup_steps": 0, "model.num_layers": 1,
              "model.d_model": 1, "model.num_heads": 1, "model.num_kv_heads": 0,
              "optim.learning_rate": 0.0, "optim.weight_decay": 0.0, "optim.clip_norm": 0.0,
              "optim.min_lr_ratio": 0.0}
  for path, minimum in minimums.items():
    section, field = path.split(".")
    value = config[section][field]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
      bound = f">= {minimum}" if minimum != 1e-30 else "> 0"
      raise ConfigError(f"{path} must be a number {bound}, got {value!r}")
  pe, data, ev = config.pe, config.data, config.eval
  name = str(pe.name)
  decoder_config_from(config)  # Unknown PE, fields no chosen PE has, bad values: ConfigError.
  rotary = _has_scaling(config)
  eval_scaling = str(ev.rope_scaling or "")
  if eval_scaling and eval_scaling != "none" and not rotary:
    raise ConfigError(f"eval.rope_scaling={eval_scaling!r} has no effect with pe.name={name!r}: "
                      "zero-shot context extension needs a rotary PE (e.g. pe.name='rope')")
  if ev.rope_factor and (not eval_scaling or eval_scaling == "none"):
    raise ConfigError(f"eval.rope_factor={ev.rope_factor!r} has no effect without "
                      "eval.rope_scaling; set eval.rope_scaling (e.g. yarn) or drop it")
  is_task = data_lib.is_task(str(data.name))
  if ev.sliding_stride and ev.mode == "nonoverlap":
    raise ConfigError(f"eval.sliding_stride={ev.sliding_stride} has no effect with "
                      "eval.mode='nonoverlap'; use eval.mode=sliding or both")
  if is_task:
    for field, default in (("passkey", False), ("rope_scaling", ""), ("mode", "nonoverlap")):
      if ev[field] != default and not (field == "rope_scaling" and ev[field] == "none"):
        raise ConfigError(f"eval.{field}={ev[field]!r} has no effect with data.name="
                          f"{data.name!r} (a synthetic task is scored by exact-match accuracy)")
  else:
    for field in ("task_min_size", "task_max_size", "reverse_digits"):
      if data[field] != defaults.data[field]:
        raise ConfigError(f"data.{field}={data[field]!r} has no effect with data.name="
                          f"{data.name!r} (only synthetic tasks use it)")
  if data.name != "addition" and is_task and data.reverse_digits:
    raise ConfigError(f"data.reverse_digits has no effect with data.name={data.name!r} (only "
                      "addition uses it)")
  if config.train.init_from and pathlib.Path(str(config.train.init_from)).resolve() == (
      pathlib.Path(str(config.workdir or default_workdir(config))).resolve()):
    raise ConfigError("train.init_from must name another run, got the run's own workdir")
  workdir = pathlib.Path(str(config.workdir)) if config.workdir else None
  if workdir is not None:
    for parent in [workdir, *workdir.parents]:
      if parent.exists() and not parent.is_dir():
        raise ConfigError(f"workdir {str(workdir)!r} is below {str(parent)!r}, which is a file")


# ----------------------------------------------------------------------------------------------
# The run directory as a record.


def _write_json_atomic(path: pathlib.Path, payload: Any) -> None:
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_text(json.dumps(payload, indent=1, default=str) + "\n")
  os.replace(tmp, path)


def run_status(workdir: os.PathLike | str) -> Dict[str, Any]:
  """``status.json`` of a run: ``{"state": "training" | "preempted" | "finished" | ...}``.

  A directory without one (an older run) reads as finished when it has ``results.json``.

  Args:
    workdir: the run directory.

  Returns:
    The parsed ``status.json`` (at least a ``"state"`` key; ``"unknown"`` when unreadable).
  """
  workdir = pathlib.Path(workdir)
  try:
    return json.loads((workdir / STATUS_FILENAME).read_text())
  except (OSError, json.JSONDecodeError):
    return {"state": "finished" if (workdir / "results.json").exists() else "unknown"}


def is_finished(workdir: os.PathLike | str) -> bool:
  """Whether a run trained to its last step and wrote its results (never a partial run).

  Args:
    workdir: the run directory.

  Returns:
    True only when its status is ``"finished"``.
  """
  return run_status(workdir).get("state") == "finished"


def _set_status(workdir: pathlib.Path, state: str, **facts: Any) -> None:
  _write_json_atomic(workdir / STATUS_FILENAME, {"state": state, "time": time.time(), **facts})


def open_run(config: ml_collections.ConfigDict) -> pathlib.Path:
  """The run directory of ``config``, created with its ``config.json`` unless it exists.

  An existing run keeps its ``config.json``: a command whose training settings differ fails
  here, before anything is written, naming each differing field.

  Raises:
    ConfigError: the run directory holds a run trained with other settings.
  """
  workdir = pathlib.Path(config.workdir) if config.workdir else default_workdir(config)
  saved_path = workdir / CONFIG_FILENAME
  if saved_path.exists():
    try:
      saved = upgrade_saved_config(json.loads(saved_path.read_text()))
    except json.JSONDecodeError as e:
      raise ConfigError(f"{saved_path} is not valid JSON ({e}); not touching that run") from None
    differences = training_differences(saved, config)
    if differences:
      raise ConfigError(
          f"workdir {str(workdir)!r} holds a run trained with other settings ("
          + "; ".join(differences) + "); a run directory is a record: use another --workdir, "
          "or --eval_only to evaluate that run")
    return workdir
  if (workdir / checkpoint_lib.CHECKPOINT_SUBDIR).exists():
    return workdir  # An older run without config.json: the checkpoint check still applies.
  if parallel.is_coordinator():
    workdir.mkdir(parents=True, exist_ok=True)
    _write_json_atomic(saved_path, json.loads(config.to_json_best_effort()))
  return workdir


def _eval_settings(config: Any) -> Dict[str, Any]:
  return (checkpoint_lib.config_to_dict(config) or {}).get("eval", {})


# ----------------------------------------------------------------------------------------------
# Train, then evaluate.


def train_and_evaluate(config: ml_collections.ConfigDict, *,
                       log: Callable[[str], None] = print,
                       step_callbacks: Sequence[Callable[[int, Dict[str, float]], None]] = (),
                       ) -> ExperimentResult:
  """Trains a decoder as ``config`` says, evaluates extrapolation, writes the results.

  The run directory is a record (:func:`open_run`): its ``config.json`` is written once; a
  command with other training settings fails before anything is written. A run stopped by
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
  mesh_settings = _mesh_settings(config)
  try:  # First: jax.distributed must start before anything touches a device.
    parallel.initialize_distributed(
        enabled=bool(mesh_settings.distributed),
        coordinator_address=str(mesh_settings.coordinator_address or ""),
        num_processes=int(mesh_settings.num_processes), process_id=int(mesh_settings.process_id),
        heartbeat_timeout_s=mesh_settings.heartbeat_timeout_s, log=log)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  check_config(config)
  if not parallel.is_coordinator():  # Process 0 prints and writes the reports.
    log = lambda line: None
  train_len = int(config.data.train_len)
  eval_lengths(config)
  if config.eval.mode not in EVAL_MODES:
    raise ConfigError(f"eval_mode must be one of {list(EVAL_MODES)}, got {config.eval.mode!r}")
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
    train_iter = _RandomizedPositions(train_iter, max_position=config.pe.randomized_max_position,
                                      seed=config.seed)

  mesh = make_run_mesh(config, model_config)
  workdir = open_run(config)  # Checks an existing run's settings before writing anything.
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
    model_config, tokenizer = pretrained_setup(config)
  else:
    model_config = decoder_config_from(config)
  try:
    corpus = None if is_task else data_lib.load_corpus(str(config.data.name))
    if tokenizer is not None:
      corpus = data_lib.tokenize_corpus(corpus, tokenizer)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  return model_config, corpus, is_task


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
    unigram = unigram_perplexity(corpus.train)
    unit = "tokens" if "tokenizer" in corpus.metadata else "bytes"
    log(f"data: {len(corpus.train):,} train / {len(corpus.valid):,} validation {unit}; "
        f"unigram perplexity {unigram:.2f} (a context-free model's level)")
    eval_fn = _validation_fn(corpus.valid, train_len)
  already_finished = is_finished(workdir) and (workdir / "results.json").exists()
  if already_finished and (workdir / "results.md").exists():
    saved_eval = _eval_settings(json.loads((workdir / CONFIG_FILENAME).read_text())) if (
        workdir / CONFIG_FILENAME).exists() else None
    if saved_eval == _eval_settings(config):
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
      with checkpoint_lib.Checkpointer(source, config=config,
                                       compatibility_sections=("model",)) as ckpt:
        restored = ckpt.restore(model)
    except FileNotFoundError as e:
      raise ConfigError(f"init_from={init_from!r}: {e}") from None
    log(f"initialized from {source} step {restored.step}")
  optimizer = optimizer_lib.create_optimizer(model, config.optim, total_steps=config.train.steps)
  if mesh is not None:
    parallel.shard_module(optimizer, mesh)
  if coordinator and not is_finished(workdir):  # A finished run stays finished.
    _set_status(workdir, "training")
  train_result = loop.train(model, optimizer, train_iter, config=config, workdir=workdir,
                            eval_fn=eval_fn, log_fn=log, step_callbacks=step_callbacks)
  if coordinator:
    _write_loss_plot(workdir, unigram=unigram)
  if train_result.stop_reason in EXIT_CODES:
    if coordinator:
      _set_status(workdir, "preempted", step=train_result.final_step,
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
    out_dir = _new_eval_dir(workdir, "")
  result = _evaluate_and_write(
      model, config, model_config=model_config, corpus=corpus, is_task=is_task, workdir=workdir,
      out_dir=out_dir, step=train_result.final_step, num_params=num_params, unigram=unigram,
      coordinator=coordinator, started=started, log=log)
  result.train = train_result
  if coordinator:
    _set_status(workdir, "finished" if not train_result.stop_reason else train_result.stop_reason,
                step=train_result.final_step)
  return result


def _new_eval_dir(workdir: pathlib.Path, name: str) -> pathlib.Path:
  """``evals/<name or UTC timestamp>``, a fresh directory (an existing name is an error)."""
  base = workdir / EVALS_SUBDIR
  if name:
    if "/" in name or name in (".", ".."):
      raise ConfigError(f"eval name must be a plain directory name, got {name!r}")
    out = base / name
    if out.exists():
      raise ConfigError(f"evaluation {str(out)!r} already exists; evaluations are never "
                        "overwritten, choose another --eval_name")
  else:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out, k = base / stamp, 1
    while out.exists():
      k += 1
      out = base / f"{stamp}-{k}"
  return out


def final_numbers(workdir: os.PathLike | str) -> Dict[str, Any]:
  """The run's final training and validation numbers from its ``metrics.jsonl``.

  Args:
    workdir: the run directory.

  Returns:
    ``{"train_loss": window-mean training loss of the last logging window, "train_window":
    [first, last] steps of that window, "valid_loss": validation loss at the training length
    of the last validation, "valid_step": its step}`` (``None`` where not logged).
  """
  train_loss = valid_loss = valid_step = None
  window = None
  previous_train_step = 0
  for record in metrics_lib.read_metrics(workdir):
    step = int(record.get("step", 0))
    if record.get("split") == "train":
      train_loss = record.get("metrics", {}).get("loss")
      window = [previous_train_step + 1, step]
      previous_train_step = step
    elif record.get("split") == "eval":
      valid_loss, valid_step = record.get("metrics", {}).get("loss"), step
  return {"train_loss": train_loss, "train_window": window, "valid_loss": valid_loss,
          "valid_step": valid_step}


def _describe_final(final: Dict[str, Any], *, train_len: int, unigram: Optional[float]) -> str:
  parts = []
  if final.get("train_loss") is not None:
    a, b = final["train_window"]
    parts.append(f"final train loss {final['train_loss']:.3f} (window mean, steps {a}-{b})")
  if final.get("valid_loss") is not None:
    parts.append(f"validation loss {final['valid_loss']:.3f} (L={train_len}, step "
                 f"{final['valid_step']})")
  if unigram:
    parts.append(f"unigram {math.log(unigram):.3f} nats")
  return "; ".join(parts) or "no training metrics logged"


def _evaluate_and_write(model, config, *, model_config, corpus, is_task, workdir, out_dir, step,
                        num_params, unigram, coordinator, started, log,
                        name: str = "") -> ExperimentResult:
  """Evaluates ``model`` as ``config.eval`` says; writes results into ``out_dir``."""
  train_len = int(config.data.train_len)
  lengths = eval_lengths(config)
  tables: Dict[str, list] = {}
  passkey: list = []
  text_parts = []
  final = final_numbers(workdir)
  meta = {"pe": config.pe.name, "data": str(config.data.name), "train_len": train_len,
          "steps": step, "params": num_params, "machine": _machine(),
          "date": time.strftime("%Y-%m-%d %H:%M"), "label": config.pe.name,
          "run": workdir.name,
          "evaluation": name or ("results" if out_dir == workdir else out_dir.name), "final": final,
          "eval_config": _eval_settings(config)}
  blockwise_threshold = blockwise_threshold_of(config)
  limits = [pe.max_length for pe in model.pes if pe.max_length is not None]
  max_length = min(limits) if limits else None
  if coordinator:
    out_dir.mkdir(parents=True, exist_ok=True)
  summary: Dict[str, Any] = {}
  if is_task:
    options = {"reverse_digits": bool(config.data.get("reverse_digits", False))} if (
        config.data.name == "addition") else {}
    rows = _task_accuracy(model, str(config.data.name), lengths=lengths, seed=config.seed + 1,
                          examples=64, blockwise_threshold=blockwise_threshold, options=options,
                          log=log)
    tables[config.pe.name] = rows
    text_parts.append(_format_task_table(rows, train_len=train_len))
    summary = {f"accuracy@{r['length']}": r["accuracy"] for r in rows}
    if coordinator:
      _write_json_atomic(out_dir / "results.json", {"meta": meta, "accuracy": rows})
  else:
    modes = ("nonoverlap", "sliding") if config.eval.mode == "both" else (config.eval.mode,)
    stride = (lambda n: int(config.eval.sliding_stride)) if config.eval.sliding_stride else None
    evaluate = lambda m: eval_lib.perplexity_at_lengths(
        m, corpus.valid, lengths=lengths, modes=modes, max_tokens=int(config.eval.num_tokens),
        blockwise_threshold=blockwise_threshold, stride=stride, max_length=max_length,
        unsupported_reason=f"table size {max_length}", progress=log)
    trained_scaling = str(config.pe.get("scaling") or "none")
    label = config.pe.name + (f" + {trained_scaling} x{float(config.pe.get('factor') or 1):g}"
                              if trained_scaling != "none" else "")
    tables[label] = evaluate(model)
    if config.eval.rope_scaling and config.eval.rope_scaling != "none":
      factor = config.eval.rope_factor or max(lengths) / train_len
      scaled_pe = with_rope_scaling(
          model_config.pe, str(config.eval.rope_scaling), factor=factor,
          original_max_position=int(config.pe.get("original_max_position") or train_len),
          head_dim=model_config.head_dim)
      scaled = Decoder(dataclasses.replace(model_config, pe=scaled_pe),
                       rngs=nnx.Rngs(params=0))
      nnx.update(scaled, nnx.state(model))
      scaled_label = f"{label} + zero-shot {config.eval.rope_scaling} x{factor:g}"
      log(f"evaluating {scaled_label} (same weights, no retraining)")
      tables[scaled_label] = evaluate(scaled)
    for label_, results in tables.items():
      text_parts.append(eval_lib.format_table(
          results, train_len=train_len,
          title=f"{label_}: trained at {train_len}, perplexity on {config.eval.num_tokens} "
                "validation tokens per length"))
      for r in results:
        if r.status == "ok":
          summary[f"{label_}/{r.mode}/ppl@{r.length}"] = r.perplexity
    if config.eval.passkey:
      passkey = eval_lib.passkey_accuracy(
          model, lengths=[l for l in lengths if l >= 96], depths=(0.0, 0.25, 0.5, 0.75, 1.0),
          seed=config.seed, blockwise_threshold=blockwise_threshold, max_length=max_length,
          progress=log)
      text_parts.append("passkey accuracy (length x depth)\n" +
                        eval_lib.format_passkey_table(passkey))
    if coordinator:
      eval_lib.write_results(out_dir, tables, meta=meta, passkey=passkey,
                             title=f"Perplexity vs length (trained at {train_len})")
  header = (f"pe={config.pe.name} data={config.data.name} train_len={train_len} steps={step}\n"
            + _describe_final(final, train_len=train_len, unigram=unigram))
  text = header + "\n\n" + "\n\n".join(text_parts)
  if coordinator:
    (out_dir / "results.md").write_text(
        f"# Results\n\n`{meta['date']}`, {meta['machine']}\n\n```\n{text}\n```\n")
    if out_dir != workdir:
      _write_json_atomic(out_dir / "eval_config.json", meta["eval_config"])
    with metrics_lib.MetricsWriter(workdir, append=True, tensorboard=False) as writer:
      writer.write(step, "evaluation", {"name": meta["evaluation"], "dir": str(
          out_dir.relative_to(workdir)) if out_dir != workdir else ".", **summary})
  log("")
  log(text)
  log(f"\nwrote {out_dir}/results.md, results.json"
      + ("" if is_task else ", results.csv, perplexity_vs_length.png")
      + f" in {time.time() - started:.0f}s")
  return ExperimentResult(out_dir, None, tables, passkey, text, unigram)


def _write_loss_plot(workdir: pathlib.Path, *, unigram: Optional[float]) -> None:
  """``loss_vs_step.png``: window-mean training loss and validation loss against the step."""
  records = metrics_lib.read_metrics(workdir)
  series = {"train loss (window mean)": [], "validation loss (train length)": []}
  for record in records:
    loss = record.get("metrics", {}).get("loss")
    if loss is None:
      continue
    key = {"train": "train loss (window mean)",
           "eval": "validation loss (train length)"}.get(record.get("split"))
    if key:
      series[key].append((int(record["step"]), float(loss)))
  if not any(series.values()):
    return
  report_lib.plot_loss(series, workdir / "loss_vs_step.png",
                     unigram_loss=math.log(unigram) if unigram else None)


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
  if not (workdir / CONFIG_FILENAME).exists():
    raise ConfigError(f"--eval_only needs a run directory with {CONFIG_FILENAME}; "
                      f"{str(workdir)!r} has none")
  for path in overrides or {}:
    if path.split(".")[0] not in ("eval", "mesh", "workdir"):
      raise ConfigError(f"--eval_only evaluates the run's own config; {path} is a training "
                        "setting (allowed: eval.* and mesh.*)")
  config = load_run_config(workdir, overrides)
  check_config(config)
  eval_lengths(config)
  if config.eval.mode not in EVAL_MODES:
    raise ConfigError(f"eval_mode must be one of {list(EVAL_MODES)}, got {config.eval.mode!r}")
  model_config, corpus, is_task = _model_config_and_corpus(config)
  status = run_status(workdir)
  if status.get("state") != "finished":
    log(f"note: {workdir} is not a finished run (state {status.get('state')!r}); evaluating its "
        "newest checkpoint")
  out_dir = _new_eval_dir(workdir, name)
  model = Decoder(model_config, rngs=nnx.Rngs(params=0))
  try:
    with checkpoint_lib.Checkpointer(workdir / checkpoint_lib.CHECKPOINT_SUBDIR,
                                     config=config) as ckpt:
      restored = ckpt.restore(model)
  except FileNotFoundError as e:
    raise ConfigError(f"--eval_only: {e}") from None
  log(f"evaluating {workdir} at step {restored.step} -> {out_dir}")
  unigram = unigram_perplexity(corpus.train) if corpus is not None else None
  return _evaluate_and_write(
      model, config, model_config=model_config, corpus=corpus, is_task=is_task, workdir=workdir,
      out_dir=out_dir, step=restored.step, num_params=_num_params(model), unigram=unigram,
      coordinator=parallel.is_coordinator(), started=started, log=log, name=name)


def is_training_setting(path: str) -> bool:
  """Whether a config path is one of the :func:`training_settings` (fixed for a run)."""
  return (path.split(".")[0] in _IDENTITY_SECTIONS
          or path in tuple(f"train.{k}" for k in _TRAINING_RUN_FIELDS))


def load_run_config(workdir: os.PathLike | str,
                    overrides: Optional[Dict[str, Any]] = None) -> ml_collections.ConfigDict:
  """The config a run was created with (its ``config.json``), then ``overrides`` applied.

  Args:
    workdir: the run directory.
    overrides: flattened ``path -> value`` changes applied after loading.

  Returns:
    The full experiment config (defaults for fields the saved file lacks).

  Raises:
    ConfigError: the directory has no ``config.json``.
  """
  from pejax import experiment_config  # pylint: disable=g-import-not-at-top
  workdir = pathlib.Path(workdir)
  saved_path = workdir / CONFIG_FILENAME
  if not saved_path.exists():
    raise ConfigError(f"{str(workdir)!r} is not a run directory (no {CONFIG_FILENAME})")
  config = experiment_config.get_default_config()
  saved = upgrade_saved_config(json.loads(saved_path.read_text()))
  with config.unlocked():
    config.update_from_flattened_dict(
        {k: v for k, v in _walk_values(saved) if _has_path(config, k)})
    for path, value in (overrides or {}).items():
      config.update_from_flattened_dict({path: value})
    config.workdir = str(workdir)
  return config


# Run records written before the PE interface v2 name the PE fields ``pe.rope_*`` / ``pe.t5_*``
# and hold every PE's field, the unused ones at their defaults (0: "the training length").
# Old key -> (new key, old default).
LEGACY_PE_FIELDS = {
    "rope_base": ("base", 10000.0), "rope_layout": ("layout", "half"),
    "rope_fraction": ("fraction", 1.0), "rope_scaling": ("scaling", "none"),
    "rope_factor": ("factor", 1.0), "rope_original_max_position": ("original_max_position", 0),
    "t5_num_buckets": ("num_buckets", 32), "t5_max_distance": ("max_distance", 128),
    "max_position": ("max_position", 0),
}


def upgrade_saved_config(saved: Dict[str, Any]) -> Dict[str, Any]:
  """A saved config (``config.json``) with the old ``pe`` field names renamed.

  ``pe.rope_base`` -> ``pe.base``, ``pe.rope_layout`` -> ``pe.layout``, ``pe.rope_fraction`` ->
  ``pe.fraction``, ``pe.rope_scaling`` -> ``pe.scaling``, ``pe.rope_factor`` -> ``pe.factor``,
  ``pe.rope_original_max_position`` -> ``pe.original_max_position``, ``pe.t5_num_buckets`` ->
  ``pe.num_buckets``, ``pe.t5_max_distance`` -> ``pe.max_distance``. An old field at its old
  default becomes unset (``None``: the PE's default, the same value), since old records hold
  every field whether the PE used it or not; ``rope_factor`` is kept with a scaling. A record
  in the current form is returned unchanged.

  Args:
    saved: the parsed ``config.json``.

  Returns:
    A new dict (the input is not modified).
  """
  pe = saved.get("pe")
  if not isinstance(pe, dict) or not any(k in pe for k in LEGACY_PE_FIELDS if k != "max_position"):
    return saved
  scaling = pe.get("rope_scaling", "none")
  upgraded = {k: v for k, v in pe.items() if k not in LEGACY_PE_FIELDS}
  for old, (new, default) in LEGACY_PE_FIELDS.items():
    if old not in pe:
      continue
    keep = old == "rope_factor" and scaling not in ("none", "", None)
    upgraded[new] = pe[old] if keep or pe[old] != default else None
  return {**saved, "pe": upgraded}


def _has_path(config: ml_collections.ConfigDict, path: str) -> bool:
  node = config
  for key in path.split("."):
    if not hasattr(node, "keys") or key not in node:
      return False
    node = node[key]
  return True
