"""``load_run``: a trained run directory -> its decoder, config and tokenizer, ready to use.

One call instead of rebuilding the decoder from the run's ``config.json`` and restoring a
checkpoint by hand::

    run = pejax.load_run("runs/rope-L128-stdlib-1a2b3c")          # the latest checkpoint
    ids = run.tokenizer.encode("def main(")
    new = pejax.generate(run.model, [ids], max_new_tokens=64)     # int32 [1, 64]
    print(run.tokenizer.decode(new[0]))

The model is built from the run's own config (:func:`pejax.train.load_run_config`, the decoder
it describes) and the checkpoint is restored into it (:class:`pejax.train.Checkpointer`, which
checks the saved config against the run's and the arrays against the model before reading).
The tokenizer: for byte-level runs (the built-in corpus, text files, the synthetic tasks)
:class:`pejax.hf.ByteTokenizer` (id = byte); for runs fine-tuned from a Hugging Face checkpoint
(``train.init_from_hf``) that checkpoint's tokenizer, and the model remembers the checkpoint's
family (``model.hf_source``) so that :func:`pejax.hf.save_pretrained` writes it back as such.

A run that registered its own PE (``--pe_module``) needs that module imported first
(``python -m pejax.sample`` and ``python -m pejax.hf.export`` do it from the run's record).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any, Optional

from flax import nnx

from pejax import decoder_from_config
from pejax import hf
from pejax.experiment_config import ConfigError
from pejax.hf import config_mapping
from pejax.nn import Decoder
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import run_directory


@dataclasses.dataclass(frozen=True, eq=False)
class LoadedRun:
  """A run directory's decoder at one checkpoint, with what is needed to use it.

  Attributes:
    model: the :class:`~pejax.nn.Decoder` with the checkpoint's parameters (``model.config`` is
      its :class:`~pejax.nn.DecoderConfig`).
    config: the run's experiment config (an ``ml_collections.ConfigDict``, from its
      ``config.json``).
    tokenizer: text <-> ids with ``encode(str)``, ``decode(ids)``, ``vocab_size`` and
      ``eos_token_ids``: :class:`pejax.hf.ByteTokenizer` for byte-level runs, the checkpoint's
      :class:`pejax.hf.Tokenizer` for runs started from a Hugging Face checkpoint.
    step: the restored checkpoint step.
    workdir: the run directory (absolute).
  """

  model: Decoder
  config: Any
  tokenizer: Any
  step: int
  workdir: pathlib.Path


def checkpoint_steps(workdir: os.PathLike | str) -> list[int]:
  """The committed checkpoint steps of a run directory, ascending, without opening Orbax.

  Args:
    workdir: the run directory.

  Returns:
    The step numbers of its ``checkpoints/<step>/`` folders (empty when there are none;
    half-written ones, whose names are not plain integers, are not counted).
  """
  directory = pathlib.Path(workdir) / checkpoint_lib.CHECKPOINT_SUBDIR
  if not directory.is_dir():
    return []
  return sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())


def _check_step(step: Any, available: list[int], workdir: pathlib.Path) -> Optional[int]:
  if step is None:
    return None
  if isinstance(step, bool) or not isinstance(step, int):
    raise ValueError(f"step must be an integer checkpoint step or None, got {step!r}")
  if step not in available:
    raise ValueError(f"step {step} has no checkpoint in {workdir}; available steps "
                     f"{available}")
  return step


def _model_config(config: Any, workdir: pathlib.Path):
  """``(decoder config, tokenizer, hf_source or None)`` of a run's experiment config."""
  hf_dir = str(config.train.get("init_from_hf", "") or "")
  try:
    if hf_dir:
      model_config, tokenizer = decoder_from_config.pretrained_setup(config)
      source_file = os.path.join(hf_dir, "config.json")
      with open(source_file, encoding="utf-8") as f:
        source = config_mapping.HFSource.from_config(json.load(f))
      return model_config, tokenizer, source
    return decoder_from_config.decoder_config_from(config), hf.ByteTokenizer(), None
  except (ValueError, OSError) as e:
    modules = str(config.get("pe_modules", "") or "")
    hint = (f"; the run was trained with --pe_module={modules}: import it first "
            "(pejax.cli.import_recorded_pe_modules)" if modules else "")
    raise ValueError(f"cannot rebuild the decoder of {workdir}: {e}{hint}") from None


def load_run(workdir: os.PathLike | str, *, step: Optional[int] = None) -> LoadedRun:
  """Loads a trained run: its decoder at a checkpoint, its config and its tokenizer.

  Args:
    workdir: a run directory written by ``launch.py`` / :func:`pejax.train_and_evaluate`
      (holding ``config.json`` and ``checkpoints/``).
    step: the checkpoint step to restore; ``None`` restores the latest readable one.

  Returns:
    A :class:`LoadedRun` (``model``, ``config``, ``tokenizer``, ``step``, ``workdir``).

  Raises:
    ValueError: naming the directory when it does not exist, is not a run (no ``config.json``)
      or has no checkpoint; naming ``step`` and listing the available steps when ``step`` has
      no checkpoint; naming the field when the run's decoder cannot be rebuilt or does not fit
      the checkpoint.
  """
  if not isinstance(workdir, (str, os.PathLike)):
    raise ValueError(f"workdir must be a run directory path, got {type(workdir).__name__}")
  path = pathlib.Path(os.path.expanduser(os.fspath(workdir))).absolute()
  if not path.is_dir():
    raise ValueError(f"workdir {os.fspath(workdir)!r} is not a directory")
  if not (path / run_directory.CONFIG_FILENAME).is_file():
    raise ValueError(f"{str(path)!r} is not a run directory (no {run_directory.CONFIG_FILENAME}; "
                     "launch.py --workdir=DIR writes one)")
  available = checkpoint_steps(path)
  step = _check_step(step, available, path)
  if not available:
    raise ValueError(f"run {str(path)!r} has no checkpoint yet (no "
                     f"{checkpoint_lib.CHECKPOINT_SUBDIR}/<step>/); train it first")
  try:
    config = run_directory.load_run_config(path)
  except (ConfigError, json.JSONDecodeError) as e:
    raise ValueError(f"cannot read the run's {run_directory.CONFIG_FILENAME}: {e}") from None
  model_config, tokenizer, source = _model_config(config, path)
  model = Decoder(model_config, rngs=nnx.Rngs(params=0))
  try:
    with checkpoint_lib.Checkpointer(path / checkpoint_lib.CHECKPOINT_SUBDIR, config=config,
                                     read_only=True) as checkpointer:
      restored = checkpointer.restore(model, step=step)
  except FileNotFoundError as e:
    raise ValueError(str(e)) from None
  if source is not None:
    model.hf_source = source
  return LoadedRun(model=model, config=config, tokenizer=tokenizer, step=restored.step,
                   workdir=path)
