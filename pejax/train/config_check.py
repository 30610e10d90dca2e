"""Settings that would be silently ignored, and values no run can use: :func:`check_config`.

``train_and_evaluate`` and ``--eval_only`` check the whole experiment config before any file is
written, so a mistyped or ineffective setting fails at once with a message naming the field.
"""

from __future__ import annotations

import math
import pathlib

import ml_collections

from pejax import data as data_lib
from pejax import decoder_from_config
from pejax import experiment_config
from pejax.experiment_config import ConfigError
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import run_directory


def check_config(config: ml_collections.ConfigDict) -> None:
  """Rejects settings that would have no effect for the chosen PE, data or mode, and bad values.

  Args:
    config: the experiment config, checked as a whole before any file is written.

  Raises:
    ConfigError: naming the setting and what makes it ineffective (``pe.scaling='yarn' has
      no effect with pe.name='alibi'``), or the field and bad value (non-finite numbers, a
      workdir below a file).
  """
  defaults = experiment_config.get_default_config()
  for path, value in run_directory.config_paths(checkpoint_lib.config_to_dict(config) or {}):
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
  # Unknown PE, fields no chosen PE has, bad values: ConfigError.
  decoder_from_config.decoder_config_from(config)
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
  _check_ruler(config, is_task=is_task, defaults=defaults)
  if data.name != "addition" and is_task and data.reverse_digits:
    raise ConfigError(f"data.reverse_digits has no effect with data.name={data.name!r} (only "
                      "addition uses it)")
  if config.train.init_from and pathlib.Path(str(config.train.init_from)).resolve() == (
      pathlib.Path(str(config.workdir or run_directory.default_workdir(config))).resolve()):
    raise ConfigError("train.init_from must name another run, got the run's own workdir")
  workdir = pathlib.Path(str(config.workdir)) if config.workdir else None
  if workdir is not None:
    for parent in [workdir, *workdir.parents]:
      if parent.exists() and not parent.is_dir():
        raise ConfigError(f"workdir {str(workdir)!r} is below {str(parent)!r}, which is a file")


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


def _check_ruler(config: ml_collections.ConfigDict, *, is_task: bool,
                 defaults: ml_collections.ConfigDict) -> None:
  """``eval.ruler``: known tasks, examples >= 1, and (byte-level models) every eval length at
  least each task's smallest prompt, before anything is trained or written."""
  ev = config.eval
  tasks_spec = str(ev.get("ruler", "") or "")
  examples = ev.get("ruler_examples", defaults.eval.ruler_examples)
  if not tasks_spec:
    if examples != defaults.eval.ruler_examples:
      raise ConfigError(f"eval.ruler_examples={examples!r} has no effect without eval.ruler; "
                        "set eval.ruler (e.g. all, or niah_single_1,vt)")
    return
  if is_task:
    raise ConfigError(f"eval.ruler={tasks_spec!r} has no effect with data.name="
                      f"{config.data.name!r} (a synthetic task is scored by exact-match accuracy)")
  if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
    raise ConfigError(f"eval.ruler_examples must be an integer >= 1, got {examples!r}")
  from pejax.eval.ruler import model_eval  # pylint: disable=g-import-not-at-top
  try:
    tasks = model_eval.parse_tasks(tasks_spec)
  except ValueError as e:
    raise ConfigError(f"eval.ruler: {e}") from None
  if config.train.get("init_from_hf"):
    return  # The checkpoint's tokenizer decides the minimum lengths: checked once it is loaded.
  from pejax.eval import run_evaluation  # pylint: disable=g-import-not-at-top
  from pejax.hf.tokenizer import ByteTokenizer  # pylint: disable=g-import-not-at-top
  try:
    model_eval.check_lengths(tasks, run_evaluation.eval_lengths(config), ByteTokenizer(),
                             seed=int(config.seed))
  except ValueError as e:
    raise ConfigError(f"eval.ruler at eval.lens: {e}") from None

