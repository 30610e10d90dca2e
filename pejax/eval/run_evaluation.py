"""Evaluating a trained model as an experiment config's ``eval`` section says, and its files.

Language modelling data: perplexity and bits per byte at every ``eval.lens`` length in the
ALiBi paper's protocols (``eval.mode``), optionally once more with a zero-shot RoPE scaling
(``eval.rope_scaling``, same weights) and byte-level passkey retrieval (``eval.passkey``).
Synthetic tasks: exact-match accuracy at every length. :func:`evaluate_and_write` writes into
its output folder::

    results.json / .csv     the tables (a task: results.json only)
    perplexity_vs_length.png
    results.md              the printed report

The run directory around it (its ``metrics.jsonl`` record, ``eval_config.json``, the folder's
name) is :mod:`pejax.train`'s.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Callable, Dict, List, Tuple

from flax import nnx
import ml_collections

from pejax import decoder_from_config
from pejax import json_file
from pejax.eval import passkey as passkey_lib
from pejax.eval import perplexity as perplexity_lib
from pejax.eval import report as report_lib
from pejax.eval import task_accuracy as task_accuracy_lib
from pejax.experiment_config import ConfigError
from pejax.json_file import write_json_atomic
from pejax.nn import Decoder
from pejax.nn import DecoderConfig

EVAL_MODES = ("nonoverlap", "sliding", "both")  # "both" runs the two ALiBi-paper protocols.


def eval_lengths(config: ml_collections.ConfigDict) -> List[int]:
  """``config.eval.lens`` parsed (default 1, 2, 4, 8, 16 x train_len), sorted and unique.

  Args:
    config: the experiment config (``eval.lens``, ``data.train_len``).

  Returns:
    The evaluation lengths.

  Raises:
    ConfigError: a length that is not a positive integer.
  """
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


def eval_modes(config: ml_collections.ConfigDict) -> Tuple[str, ...]:
  """The perplexity protocols ``config.eval.mode`` selects (``"both"``: the two of them).

  Args:
    config: the experiment config.

  Returns:
    ``("nonoverlap",)``, ``("sliding",)`` or ``("nonoverlap", "sliding")``.

  Raises:
    ConfigError: a mode not in :data:`EVAL_MODES`.
  """
  mode = config.eval.mode
  if mode not in EVAL_MODES:
    raise ConfigError(f"eval_mode must be one of {list(EVAL_MODES)}, got {mode!r}")
  return ("nonoverlap", "sliding") if mode == "both" else (mode,)


@dataclasses.dataclass
class RunEvaluation:
  """What :func:`evaluate_and_write` measured.

  Attributes:
    tables: label -> results (``LengthResult`` rows, or task-accuracy rows for a task).
    passkey: passkey results (empty unless requested).
    text: the report as printed (the caller's header, then the tables).
    summary: flat ``name -> number`` of the results (``rope/nonoverlap/ppl@256``,
      ``accuracy@64``), for a metrics record.
  """

  tables: Dict[str, list]
  passkey: list
  text: str
  summary: Dict[str, Any]


def evaluate_and_write(model: Decoder, config: ml_collections.ConfigDict, *,
                       model_config: DecoderConfig, corpus: Any, is_task: bool,
                       out_dir: pathlib.Path, meta: Dict[str, Any], header: str, write: bool,
                       log: Callable[[str], None], tokenizer: Any = None) -> RunEvaluation:
  """Evaluates ``model`` as ``config.eval`` says; writes the results into ``out_dir``.

  Args:
    model: the trained decoder.
    config: the experiment config (``eval.*``, ``data.*``, ``pe.*``, ``seed``).
    model_config: ``model``'s config (a zero-shot scaling builds the same model with another
      RoPE scaling).
    corpus: the corpus (its ``valid`` split is scored); ``None`` for a task.
    is_task: whether ``config.data.name`` is a synthetic task (exact-match accuracy).
    out_dir: the folder written (created).
    meta: the facts stored in ``results.json`` (``date`` and ``machine`` head ``results.md``).
    header: the report's first lines (the run and its final training numbers).
    write: whether to write the files (the coordinator process) or only evaluate.
    log: receives progress lines.
    tokenizer: the model's tokenizer for ``eval.ruler`` (``None``: bytes, a pejax model).

  Returns:
    The :class:`RunEvaluation`.
  """
  train_len = int(config.data.train_len)
  lengths = eval_lengths(config)
  tables: Dict[str, list] = {}
  passkey: list = []
  text_parts = []
  blockwise_threshold = decoder_from_config.blockwise_threshold_of(config)
  limits = [pe.max_length for pe in model.pes if pe.max_length is not None]
  max_length = min(limits) if limits else None
  if write:
    out_dir.mkdir(parents=True, exist_ok=True)
  summary: Dict[str, Any] = {}
  if is_task:
    options = {"reverse_digits": bool(config.data.get("reverse_digits", False))} if (
        config.data.name == "addition") else {}
    rows = task_accuracy_lib.task_accuracy_at_lengths(
        model, str(config.data.name), lengths=lengths, seed=config.seed + 1, examples=64,
        blockwise_threshold=blockwise_threshold, options=options, log=log)
    tables[config.pe.name] = rows
    text_parts.append(task_accuracy_lib.format_task_table(rows, train_len=train_len))
    summary = {f"accuracy@{r['length']}": r["accuracy"] for r in rows}
    if write:
      write_json_atomic(out_dir / "results.json", {"meta": meta, "accuracy": rows})
  else:
    modes = eval_modes(config)
    stride = (lambda n: int(config.eval.sliding_stride)) if config.eval.sliding_stride else None
    evaluate = lambda m: perplexity_lib.perplexity_at_lengths(
        m, corpus.valid, lengths=lengths, modes=modes, max_tokens=int(config.eval.num_tokens),
        blockwise_threshold=blockwise_threshold, stride=stride, max_length=max_length,
        unsupported_reason=f"table size {max_length}", progress=log)
    trained_scaling = str(config.pe.get("scaling") or "none")
    label = config.pe.name + (f" + {trained_scaling} x{float(config.pe.get('factor') or 1):g}"
                              if trained_scaling != "none" else "")
    tables[label] = evaluate(model)
    if config.eval.rope_scaling and config.eval.rope_scaling != "none":
      factor = config.eval.rope_factor or max(lengths) / train_len
      scaled_pe = decoder_from_config.with_rope_scaling(
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
      text_parts.append(report_lib.format_table(
          results, train_len=train_len,
          title=f"{label_}: trained at {train_len}, perplexity on {config.eval.num_tokens} "
                "validation tokens per length"))
      for r in results:
        if r.status == "ok":
          summary[f"{label_}/{r.mode}/ppl@{r.length}"] = r.perplexity
    if config.eval.passkey:
      passkey = passkey_lib.passkey_accuracy(
          model, lengths=[l for l in lengths if l >= 96], depths=(0.0, 0.25, 0.5, 0.75, 1.0),
          seed=config.seed, blockwise_threshold=blockwise_threshold, max_length=max_length,
          progress=log)
      text_parts.append("passkey accuracy (length x depth)\n" +
                        report_lib.format_passkey_table(passkey))
    if write:
      report_lib.write_results(out_dir, tables, meta=meta, passkey=passkey,
                               title=f"Perplexity vs length (trained at {train_len})")
    if config.eval.get("ruler"):
      text_parts.append(write_ruler(model, tokenizer, config, lengths=lengths, out_dir=out_dir,
                                    meta=meta, summary=summary, write=write, log=log))
  text = header + "\n\n" + "\n\n".join(text_parts)
  if write:
    json_file.write_text_atomic(out_dir / "results.md", f"# Results\n\n`{meta['date']}`, "
                                f"{meta['machine']}\n\n```\n{text}\n```\n")
  return RunEvaluation(tables, passkey, text, summary)


def write_ruler(model: Decoder, tokenizer: Any, config: ml_collections.ConfigDict, *,
                lengths: List[int], out_dir: pathlib.Path, meta: Dict[str, Any],
                summary: Dict[str, Any], write: bool, log: Callable[[str], None],
                title: str = "") -> str:
  """``eval.ruler``: RULER scores at every length, into ``ruler.json`` / ``ruler_accuracy.png``.

  Args:
    model: the decoder.
    tokenizer: its tokenizer (``None``: bytes).
    config: the experiment config (``eval.ruler``, ``eval.ruler_examples``, ``seed``).
    lengths: prompt lengths in the model's tokens.
    out_dir: the evaluation folder.
    meta: the facts stored beside the results.
    summary: gets ``ruler/<task>@<length>`` scores.
    write: whether to write the files.
    log: receives one line per (task, length).
    title: the plot title.

  Returns:
    The task x length table as text.
  """
  from pejax.eval.ruler import model_eval  # pylint: disable=g-import-not-at-top
  from pejax.hf.tokenizer import ByteTokenizer  # pylint: disable=g-import-not-at-top
  tokenizer = tokenizer if tokenizer is not None else ByteTokenizer()
  token = "byte" if getattr(tokenizer, "name", "") == "bytes" else "token"
  tasks = model_eval.parse_tasks(str(config.eval.ruler))
  log(f"RULER: {', '.join(tasks)} at {lengths} ({config.eval.ruler_examples} prompts a cell, "
      "greedy)")
  results = model_eval.ruler_accuracy(model, tokenizer, tasks=tasks, lengths=lengths,
                                      examples=int(config.eval.ruler_examples),
                                      seed=int(config.seed), progress=log)
  for r in results:
    if r.accuracy is not None:
      summary[f"ruler/{r.task}@{r.length}"] = r.accuracy
  if write:
    json_file.write_json_atomic(out_dir / "ruler.json", {
        "meta": meta, "tokenizer": getattr(tokenizer, "name", type(tokenizer).__name__),
        "ruler": [r.to_json() for r in results]})
    model_eval.plot_ruler(results, out_dir / "ruler_accuracy.png", token=token,
                          title=title or "RULER tasks: score vs prompt length")
  return "RULER (greedy; score at each length)\n" + model_eval.format_ruler_table(results,
                                                                                   token=token)

