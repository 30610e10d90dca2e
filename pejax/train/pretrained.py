"""Evaluating a pretrained Hugging Face decoder: perplexity vs length, zero-shot RoPE scalings.

``python launch.py --init_from_hf=DIR --eval_only --data=FILE --eval_lens=...
--eval_rope_scaling=yarn,linear,dynamic`` lands here: the model and its tokenizer are loaded
from ``DIR`` (:mod:`pejax.hf`), the text is tokenized with the model's vocabulary, and the model
is scored at every length as it is and once per requested RoPE scaling (same weights, no
retraining; the factor defaults to ``max(eval_lens) / original context``, the original context
being the checkpoint's ``max_position_embeddings``, or its own scaling's original length).
``--config.eval.passkey=True`` adds natural-language passkey retrieval with the tokenizer.
Results go to ``<workdir>/evals/<name>/`` (``results.md/json/csv``, the plot), never
overwritten; the default workdir is ``runs/pretrained/<directory name>/``
(:func:`default_workdir`), inside the runs tree beside the training runs, never the current
directory. It is no run directory (no ``config.json``): ``python -m pejax.compare runs/*``
skips it with a note.
"""

from __future__ import annotations

import os
import pathlib
import time
from typing import Any, Callable, Dict, Optional

from flax import nnx
import jax
import ml_collections

from pejax import data as data_lib
from pejax import decoder_from_config
from pejax import eval as eval_lib
from pejax import json_file
from pejax import hf
from pejax import provenance
from pejax.eval import run_evaluation
from pejax.experiment_config import ConfigError
from pejax.hf import safetensors_files
from pejax.train import experiment
from pejax.train import run_directory

RUNS_DIR = "runs"  # The runs tree (run_directory.default_workdir puts training runs there).
PRETRAINED_SUBDIR = "pretrained"  # Evaluations of pretrained checkpoints, inside the runs tree.


def evaluate_pretrained(hf_dir: os.PathLike | str, config: ml_collections.ConfigDict, *,
                        name: str = "", log: Callable[[str], None] = print
                        ) -> experiment.ExperimentResult:
  """Perplexity vs length of a pretrained model on ``config.data.name``, zero-shot scalings.

  Args:
    hf_dir: a local Hugging Face checkpoint directory with ``tokenizer.json``.
    config: the experiment config; read: ``data.name`` (a text file or directory, or
      ``stdlib``), ``eval.*`` (``lens`` is required; ``rope_scaling`` may list several
      comma-separated scalings), ``workdir`` (empty: :func:`default_workdir`).
    name: the evaluation's folder under ``<workdir>/evals/`` (default: a UTC timestamp).
    log: receives each printed line.

  Returns:
    The :class:`~pejax.train.experiment.ExperimentResult` (``workdir`` = the evaluation folder,
    ``train`` = ``None``).

  Raises:
    ConfigError: for a synthetic task as data, missing ``eval.lens``, a bad scaling
      or factor, or a checkpoint that cannot be loaded (the loader's message).
  """
  started = time.time()
  data_name = str(config.data.name)
  if data_lib.is_task(data_name):
    raise ConfigError(f"--init_from_hf evaluates text; data={data_name!r} is a "
                                 "synthetic byte task (use --config.eval.passkey=True for "
                                 "passkey retrieval with the model's tokenizer)")
  if not str(config.eval.lens or "").strip():
    raise ConfigError("--init_from_hf needs --eval_lens (in the model's tokens)")
  lengths = run_evaluation.eval_lengths(config)
  modes = run_evaluation.eval_modes(config)
  blockwise_threshold = decoder_from_config.blockwise_threshold_of(config)
  model, tokenizer = load_checkpoint(hf_dir, blockwise_threshold=blockwise_threshold)
  if config.eval.get("ruler"):  # Its tokenizer's minimum lengths, before a folder is made.
    experiment.check_ruler_lengths(config, tokenizer)
  corpus = data_lib.tokenize_corpus(data_lib.load_corpus(data_name), tokenizer)
  original = original_context(hf_dir, model) or max(lengths)
  label = f"{os.path.basename(os.path.normpath(os.fspath(hf_dir)))}"
  workdir = pathlib.Path(config.workdir) if config.workdir else default_workdir(hf_dir)
  out_dir = run_directory.new_eval_dir(workdir, name)
  stride = (lambda n: int(config.eval.sliding_stride)) if config.eval.sliding_stride else None

  def evaluate(m):
    return eval_lib.perplexity_at_lengths(
        m, corpus.valid, lengths=lengths, modes=modes, max_tokens=int(config.eval.num_tokens),
        blockwise_threshold=blockwise_threshold, stride=stride, progress=log)

  log(f"evaluating {hf_dir} ({model.config.num_layers} layers, d={model.config.d_model}, "
      f"vocab {model.config.vocab_size}) on {data_name}: {corpus.valid.size} validation tokens, "
      f"original context {original} -> {out_dir}")
  tables: Dict[str, list] = {label: evaluate(model)}
  scalings = [s.strip() for s in str(config.eval.rope_scaling or "").split(",")
              if s.strip() and s.strip() != "none"]
  for scaling_name in scalings:
    factor = float(config.eval.rope_factor or max(1.0, max(lengths) / original))
    pe = decoder_from_config.with_rope_scaling(model.config.pe, scaling_name, factor=factor,
                                               original_max_position=original,
                                               head_dim=model.config.head_dim)
    scaled_label = f"{label} + zero-shot {scaling_name} x{factor:g}"
    log(f"evaluating {scaled_label} (same weights, no retraining)")
    tables[scaled_label] = evaluate(hf.with_rope_scaling(model, pe.scaling))
  passkey = []
  if config.eval.passkey:
    passkey = eval_lib.passkey_text_accuracy(
        model, tokenizer, lengths=lengths, depths=(0.0, 0.5, 1.0), seed=int(config.seed),
        blockwise_threshold=blockwise_threshold, progress=log)
  text_parts = [eval_lib.format_table(
      results, train_len=original, token="token", reference="context",
      title=f"{label_}: original context {original}, perplexity (model tokens) on up to "
            f"{config.eval.num_tokens} validation tokens per length")
                for label_, results in tables.items()]
  if passkey:
    text_parts.append("passkey accuracy (length x depth, model tokens)\n"
                      + eval_lib.format_passkey_table(passkey))
  meta = {"pretrained": os.path.abspath(os.fspath(hf_dir)), "data": data_name,
          "tokenizer": tokenizer.name, "train_len": original, "params": sum(
              int(x.size) for x in jax.tree.leaves(nnx.state(model, nnx.Param))),
          "date": time.strftime("%Y-%m-%d %H:%M"), "evaluation": out_dir.name,
          "eval_config": run_directory.eval_settings(config),
          "provenance": provenance.provenance(started=started)}
  eval_lib.write_results(out_dir, tables, meta=meta, passkey=passkey,
                         title=f"{label}: perplexity vs length (original context {original})")
  if config.eval.get("ruler"):
    text_parts.append(run_evaluation.write_ruler(
        model, tokenizer, config, lengths=lengths, out_dir=out_dir, meta=meta, summary={},
        write=True, log=log, title=f"{label}: RULER score vs length (model tokens)"))
  text = "\n\n".join(text_parts)
  json_file.write_text_atomic(out_dir / "results.md", f"# Results\n\n`{meta['date']}`, "
                              f"pretrained {meta['pretrained']}\n\n```\n{text}\n```\n")
  log("")
  log(text)
  log(f"\nwrote {out_dir}/results.md, results.json, results.csv, perplexity_vs_length.png in "
      f"{time.time() - started:.0f}s")
  return experiment.ExperimentResult(out_dir, None, tables, passkey, text, None)


def default_workdir(hf_dir: os.PathLike | str) -> pathlib.Path:
  """``runs/pretrained/<checkpoint directory name>``: in the runs tree, not the current directory.

  Args:
    hf_dir: the checkpoint directory.

  Returns:
    The path, relative to the current directory like the training runs' ``runs/<name>``.
  """
  return pathlib.Path(RUNS_DIR, PRETRAINED_SUBDIR,
                      os.path.basename(os.path.normpath(os.fspath(hf_dir))))


def load_checkpoint(hf_dir: os.PathLike | str, *, blockwise_threshold: Optional[int] = None
                    ) -> tuple[Any, Any]:
  """A pretrained decoder and its tokenizer, for ``--init_from_hf`` commands.

  Args:
    hf_dir: a local Hugging Face checkpoint directory with ``tokenizer.json``.
    blockwise_threshold: passed to :func:`pejax.hf.from_pretrained`.

  Returns:
    ``(model, tokenizer)``.

  Raises:
    ConfigError: ``--init_from_hf=<dir>: <the loader's message>``, also for a tokenizer
      with more tokens than the model's vocabulary.
  """
  try:
    model = hf.from_pretrained(hf_dir, blockwise_threshold=blockwise_threshold)
    tokenizer = hf.load_tokenizer(hf_dir)
  except ValueError as e:
    raise ConfigError(f"--init_from_hf={os.fspath(hf_dir)}: {e}") from None
  if tokenizer.vocab_size > model.config.vocab_size:
    raise ConfigError(
        f"--init_from_hf={os.fspath(hf_dir)}: the tokenizer has {tokenizer.vocab_size} tokens, "
        f"the model {model.config.vocab_size}")
  return model, tokenizer


def original_context(hf_dir: os.PathLike | str, model: Any) -> Optional[int]:
  """The context a checkpoint was trained at: its RoPE scaling's original length, else
  ``max_position_embeddings`` of its ``config.json``; ``None`` when neither is set.

  Args:
    hf_dir: the checkpoint directory.
    model: the decoder loaded from it.

  Returns:
    The length in tokens, or ``None``.
  """
  original = getattr(model.config.pe.scaling, "original_max_position", None)
  if original is not None:
    return int(original)
  hf_json = safetensors_files.read_json(
      os.path.join(os.fspath(hf_dir), "config.json"), "config.json")
  return int(hf_json["max_position_embeddings"]) if hf_json.get(
      "max_position_embeddings") else None
