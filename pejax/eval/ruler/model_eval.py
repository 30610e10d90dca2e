"""Running a pejax decoder on RULER tasks: greedy continuations, scores by task and length.

:func:`ruler_accuracy` generates each (task, length) cell's prompts (:func:`generate`), decodes
greedily with :func:`pejax.generate` (a KV cache of prompt + answer slots) and scores the
continuations with the task's RULER metric; :func:`check_lengths` refuses, before any work, a
length below a task's smallest prompt. Used by ``launch.py --config.eval.ruler=...`` (a run's
evaluation, ``--eval_only``, or ``--init_from_hf=DIR --eval_only``), which writes
``ruler.json``, ``ruler.md`` and ``ruler_accuracy.png`` beside ``results.json``.

References:
  Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context Language
  Models?": https://arxiv.org/abs/2404.06654
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from pejax.eval.ruler import generation
from pejax.eval.ruler import scoring
from pejax.eval.ruler import tasks as tasks_lib

# Tokens of room beyond the longest reference answer (separators, a period, a space).
ANSWER_MARGIN = 8
# Generation budgets are rounded up to a multiple of this (fewer distinct compiled programs).
NEW_TOKENS_BUCKET = 64


@dataclasses.dataclass(frozen=True)
class RulerResult:
  """The score of one (task, length) cell.

  Attributes:
    task: the RULER task.
    length: the prompt budget in the model's tokens.
    accuracy: the mean RULER score over the examples (``None`` when not evaluated).
    examples: the number of examples.
    prompt_tokens: the mean prompt length in tokens.
    new_tokens: the tokens generated per example.
    seconds: wall time of the cell.
    status: ``"ok"`` or why the cell was not evaluated (e.g. a learned position table).
  """

  task: str
  length: int
  accuracy: Optional[float]
  examples: int
  prompt_tokens: float
  new_tokens: int
  seconds: float
  status: str = "ok"

  def to_json(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


def parse_tasks(spec: Any) -> List[str]:
  """``eval.ruler`` as task names: comma-separated names, or ``"all"`` for every task.

  Args:
    spec: a string (or a sequence of names).

  Returns:
    The task names, in the order given (empty for ``""``).

  Raises:
    ValueError: naming an unknown task (with the closest names).
  """
  names = ([s.strip() for s in spec.split(",") if s.strip()] if isinstance(spec, str)
           else [str(s) for s in spec])
  if names == ["all"]:
    return list(tasks_lib.task_names())
  for name in names:
    tasks_lib.get_task(name)  # Raises with a "did you mean".
  return names


def check_lengths(tasks: Sequence[str], lengths: Sequence[int], tokenizer: Any, *,
                  seed: int = 0) -> None:
  """Refuses a length below a task's smallest prompt for this tokenizer, before any work.

  Args:
    tasks: task names.
    lengths: prompt budgets in the tokenizer's tokens.
    tokenizer: an object with ``encode(text)``.
    seed: the examples' seed.

  Raises:
    ValueError: naming the task, the length and the task's minimum.
  """
  for task in tasks:
    for length in lengths:
      generation.generate(task, length=int(length), tokenizer=tokenizer, num_examples=1,
                          seed=seed)


def _encode(tokenizer: Any, text: str) -> List[int]:
  try:
    ids = tokenizer.encode(text, add_special_tokens=False)
  except TypeError:  # A tokenizer whose encode takes the text alone (ByteTokenizer).
    ids = tokenizer.encode(text)
  return [int(i) for i in np.asarray(ids).reshape(-1)]


def _left_padded(rows: Sequence[List[int]], length: int, batch_size: int):
  """int32 ``[batch_size, length]`` prompts left-padded with 0 and their mask; missing rows
  (the last batch) repeat the first one and are dropped after decoding."""
  rows = list(rows) + [rows[0]] * (batch_size - len(rows))
  tokens = np.zeros((batch_size, length), np.int32)
  mask = np.zeros((batch_size, length), np.int32)
  for i, row in enumerate(rows):
    tokens[i, length - len(row):] = row
    mask[i, length - len(row):] = 1
  return tokens, mask


def ruler_accuracy(model: Any, tokenizer: Any, *, tasks: Sequence[str],
                   lengths: Sequence[int], examples: int, seed: int = 0,
                   batch_size: int = 8, stop_tokens: Sequence[int] = (),
                   progress: Optional[Callable[[str], None]] = print) -> List[RulerResult]:
  """Greedy RULER scores of ``model`` for every task and length.

  Each cell generates ``examples`` prompts fitted to ``length`` tokens, decodes greedily
  ``max(task's RULER budget, longest answer + 8)`` tokens after each (batches of
  ``batch_size``, left-padded), and scores the decoded text with the task's metric. A cell the
  model cannot serve (positions past a learned table, a cache the model refuses) is recorded
  with its reason instead of a number. Without ``stop_tokens`` the whole budget is decoded and
  scored, as RULER does without stop words; a model without an end token (pejax's byte-level
  models) then continues past its answer, and whatever it writes there counts too.

  Args:
    model: a :class:`~pejax.nn.Decoder`.
    tokenizer: the model's tokenizer (``encode`` / ``decode``; ``pejax.hf.ByteTokenizer`` for
      byte-level pejax models).
    tasks: RULER task names (:func:`~pejax.eval.ruler.task_names`).
    lengths: prompt budgets in the tokenizer's tokens.
    examples: examples per cell (>= 1).
    seed: the examples' seed (the same prompts for every model).
    batch_size: prompts decoded together.
    stop_tokens: token ids that end a continuation (kept; :func:`pejax.generate` pads the rest
      and stops early once every row of a batch has stopped): e.g. the byte of ``"."`` for a
      model trained to answer ``" v1, v2."``, so that text after its answer is not scored.
    progress: receives one line per cell (examples per second included); ``None`` = silent.

  Returns:
    One :class:`RulerResult` per (task, length), task-major.

  Raises:
    ValueError: for an unknown task, ``examples`` or ``batch_size`` < 1, or a length below a
      task's smallest prompt (checked for every cell before any decoding).
  """
  from pejax.nn.generation import check_stop_tokens  # pylint: disable=g-import-not-at-top
  from pejax.nn.generation import generate as generate_tokens  # pylint: disable=g-import-not-at-top
  for name, value in (("examples", examples), ("batch_size", batch_size)):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
      raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
  # Checked here, with generate's own check: inside a cell its error would become an n/a cell.
  stop_tokens = check_stop_tokens(
      stop_tokens, vocab_size=getattr(getattr(model, "config", None), "vocab_size", None))
  tasks = parse_tasks(list(tasks))
  check_lengths(tasks, lengths, tokenizer, seed=seed)
  results = []
  for task in tasks:
    spec = tasks_lib.get_task(task)
    for length in lengths:
      started = time.time()
      cell = generation.generate(task, length=int(length), tokenizer=tokenizer,
                                 num_examples=int(examples), seed=seed)
      prompts = [_encode(tokenizer, e.input) for e in cell]
      longest = max(len(_encode(tokenizer, ", ".join(e.answers))) for e in cell)
      new_tokens = max(int(spec.tokens_to_generate), longest + ANSWER_MARGIN)
      # Shapes shared by every cell of this length: prompts left-padded to ``length``, the
      # budget rounded up to 64 and full batches, so each length compiles its programs once.
      new_tokens = -(-new_tokens // NEW_TOKENS_BUCKET) * NEW_TOKENS_BUCKET
      predictions: List[str] = []
      status = "ok"
      try:
        for start in range(0, len(prompts), batch_size):
          rows = prompts[start:start + batch_size]
          tokens, mask = _left_padded(rows, int(length), batch_size)
          out = np.asarray(generate_tokens(model, tokens, prompt_mask=mask,
                                           max_new_tokens=new_tokens,
                                           stop_tokens=stop_tokens))
          predictions += [tokenizer.decode([int(t) for t in row]) for row in out[:len(rows)]]
      except ValueError as e:  # e.g. positions past a learned table.
        status = f"n/a ({str(e).splitlines()[0][:160]})"
      accuracy = (float(np.mean([scoring.score(task, p, e.answers)
                                 for p, e in zip(predictions, cell)]))
                  if status == "ok" else None)
      seconds = time.time() - started
      results.append(RulerResult(task, int(length), accuracy, len(cell),
                                 float(np.mean([len(p) for p in prompts])), new_tokens,
                                 seconds, status))
      if progress is not None:
        shown = f"{accuracy:.3f}" if accuracy is not None else status
        progress(f"  ruler {task} @ {length}: {shown} ({len(cell)} examples, "
                 f"{len(cell) / max(seconds, 1e-9):.1f} examples/s)")
  return results


def format_ruler_table(results: Sequence[RulerResult], *, token: str = "token") -> str:
  """A task x length grid of scores (``n/a`` where a cell was not evaluated).

  Args:
    results: :func:`ruler_accuracy`'s results.
    token: the unit of the lengths (``"byte"`` for byte-level models).
  """
  lengths = sorted({r.length for r in results})
  by_task: Dict[str, Dict[int, RulerResult]] = {}
  for r in results:
    by_task.setdefault(r.task, {})[r.length] = r
  width = max([len("task")] + [len(t) for t in by_task])
  lines = [f"{'task':<{width}}  " + "  ".join(f"{l:>8}" for l in lengths)
           + f"   (RULER score at each length in {token}s)"]
  for task, cells in by_task.items():
    row = []
    for l in lengths:
      r = cells.get(l)
      row.append(f"{r.accuracy:>8.3f}" if r is not None and r.accuracy is not None
                 else f"{'n/a':>8}")
    lines.append(f"{task:<{width}}  " + "  ".join(row))
  return "\n".join(lines)


def plot_ruler(results: Sequence[RulerResult], path: pathlib.Path, *, title: str = "",
               token: str = "token") -> pathlib.Path:
  """Score against length, one line per task (log-2 length axis); writes ``path`` (PNG).

  Args:
    results: :func:`ruler_accuracy`'s results.
    path: the PNG to write.
    title: the plot title.
    token: the unit of the lengths.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7, 4.2))
  by_task: Dict[str, List[RulerResult]] = {}
  for r in results:
    by_task.setdefault(r.task, []).append(r)
  for task, rows in by_task.items():
    rows = sorted((r for r in rows if r.accuracy is not None), key=lambda r: r.length)
    if rows:
      ax.plot([r.length for r in rows], [r.accuracy for r in rows], marker="o", label=task)
  ax.set_xscale("log", base=2)
  ax.set_ylim(-0.03, 1.03)
  ax.set_xlabel(f"prompt length ({token}s)")
  ax.set_ylabel("RULER score")
  ax.set_title(title or "RULER tasks: score vs length")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7, ncol=2)
  fig.tight_layout()
  path = pathlib.Path(path)
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path
