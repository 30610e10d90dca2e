r"""Compare runs: ``python -m pejax.compare RUN_DIR... [--out_dir=DIR] [--mode=nonoverlap]``.

Prints one table of perplexity against evaluation length (a row per run, labelled by the
settings that differ between the runs, e.g. ``pe=alibi`` / ``pe=rope scaling=yarn x4``) with
each run's final window-mean training loss and validation loss, and writes that table
(``compare.md``) and one plot of perplexity vs length with the same labels (``compare.png``)
into one output folder. A run that is not finished (still training, or preempted) is listed as
such and left out of the plot: a partial run is never reported as a result.

Each run's curve merges its evaluations: the first one (``results.json``, named ``results``)
and every later one (``evals/<name>/results.json``, from ``--eval_only``), in the order they
were made (the ``evaluation`` records of ``metrics.jsonl``; evaluations it does not record come
after, by file time). Of each evaluation the first table (the model as trained, not a zero-shot
RoPE scaling) is read, its rows in ``--mode``. Where two evaluations measured the same length
the later one wins, and a cell taken from an evaluation other than the first is marked with
its folder: ``2.345 (evals/long)``. An evaluation is merged only when it measured the same
thing as the run's newest evaluation with rows in ``--mode``: the same checkpoint step
(``meta.steps``) and, with ``--mode=sliding``, the same ``eval.sliding_stride``; one that
differs (e.g. made on a preempted run before it trained on) is left out with a note under the
table, never mixed in.
A different ``eval.num_tokens`` is merged (a larger or smaller sample of the same quantity).
``--evaluation=NAME`` reads ``evals/NAME/results.json`` only.

Arguments that are no run directory (no ``config.json``: this command's own ``compare/``
folder, ``runs/pretrained/``, a study's report folder) are skipped with a note, so
``python -m pejax.compare runs/*`` works; a path that does not exist is an error.

Output folder: ``--out_dir=DIR``, by default ``<common parent of the runs>/compare/<UTC
timestamp>/`` (inside the runs tree; nothing is written into the current directory). An
existing ``compare.md`` or ``compare.png`` there is an error naming it unless ``--overwrite``
is given (the output then says it replaced them). The former ``--out=PLOT`` flag is gone: it is
an error pointing to ``--out_dir``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pathlib
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pejax import json_file

# Fields never used to tell runs apart (where and how they were written, not what they are).
_IGNORED = ("workdir", "mesh.", "train.log_every", "train.eval_every", "train.checkpoint_every",
            "train.keep_checkpoints", "train.resume", "train.tensorboard", "eval.")
MODES = ("nonoverlap", "sliding")
FIRST_EVALUATION = "results"  # The name metrics.jsonl gives a run's first evaluation.
COMPARE_SUBDIR = "compare"  # The default output folders' parent, in the runs tree.
TABLE_FILENAME = "compare.md"
PLOT_FILENAME = "compare.png"


def _flatten(tree: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(_flatten(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def _short(path: str) -> str:
  """``pe.scaling`` -> ``scaling``; a section's ``name`` is the section (``pe.name`` -> ``pe``)."""
  if path.endswith(".name") and path.count(".") == 1:
    return path.split(".")[0]
  return path.split(".")[-1] if path.startswith(("pe.", "model.", "data.", "optim.")) else path


def run_labels(configs: Sequence[Dict[str, Any]]) -> List[str]:
  """One label per run: ``key=value`` for every setting that differs between the runs.

  A RoPE scaling is shown with its factor (``scaling=yarn x4``).

  Args:
    configs: the runs' saved configs (old ``pe.rope_*`` records are read with the new names).

  Returns:
    One label per config, in order.
  """
  from pejax.train import run_directory  # pylint: disable=g-import-not-at-top
  configs = [run_directory.upgrade_saved_config(c) for c in configs]
  flats = [_flatten(c) for c in configs]
  keys = sorted({k for f in flats for k in f})
  differing = [k for k in keys if not any(k == i or (i.endswith(".") and k.startswith(i))
                                          for i in _IGNORED)
               and len({json.dumps(f.get(k), sort_keys=True) for f in flats}) > 1]
  if "pe.factor" in differing and "pe.scaling" in differing:
    differing.remove("pe.factor")
  labels = []
  for i, flat in enumerate(flats):
    parts = []
    for key in differing:
      value = flat.get(key)
      text = f"{_short(key)}={value}"
      if key == "pe.scaling" and value not in ("none", None):
        text += f" x{float(flat.get('pe.factor') or 1.0):g}"
      parts.append(text)
    labels.append(" ".join(parts) or f"run {i + 1}")
  return labels


@dataclasses.dataclass
class Evaluation:
  """One evaluation of a run, as its ``results.json`` records it.

  Attributes:
    name: ``"results"`` for the run's first evaluation, else ``evals/<folder name>``.
    results: the parsed ``results.json``.
    settings: the ``eval`` section it ran with (``meta.eval_config``, else its
      ``eval_config.json``, else, for the first evaluation, the run's ``config.json``).
  """

  name: str
  results: Dict[str, Any]
  settings: Dict[str, Any]

  @property
  def step(self) -> Optional[int]:
    """The training step of the evaluated checkpoint (``None`` when not recorded)."""
    step = self.results.get("meta", {}).get("steps")
    return None if step is None else int(step)

  def perplexities(self, mode: str) -> Dict[int, float]:
    """Length -> perplexity of the first table (the model as trained) in ``mode``."""
    tables = self.results.get("perplexity", {})
    if not tables:
      return {}
    first = next(iter(tables.values()))
    return {int(r["length"]): float(r["perplexity"]) for r in first
            if r.get("mode") == mode and r.get("status") == "ok"
            and r.get("perplexity") is not None}


def _read_json(path: pathlib.Path) -> Any:
  try:
    return json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise ValueError(f"{path} is not valid JSON ({e})") from None


def _read_evaluation(folder: pathlib.Path, name: str,
                     run_eval: Dict[str, Any]) -> Optional[Evaluation]:
  path = folder / "results.json"
  if not path.exists():
    return None
  results = _read_json(path)
  settings = results.get("meta", {}).get("eval_config")
  if settings is None and (folder / "eval_config.json").exists():
    settings = _read_json(folder / "eval_config.json")
  if settings is None:
    settings = run_eval if name == FIRST_EVALUATION else {}
  return Evaluation(name, results, settings)


def run_evaluations(run_dir: pathlib.Path, evaluation: str = "") -> List[Evaluation]:
  """A run's evaluations in the order they were made (``evaluation``: that one only).

  Args:
    run_dir: the run directory.
    evaluation: an ``evals/`` folder name to read alone; empty for every evaluation.

  Returns:
    The evaluations with a ``results.json``, oldest first (empty when there is none).
  """
  from pejax.train import metrics as metrics_lib  # pylint: disable=g-import-not-at-top
  from pejax.train import run_directory  # pylint: disable=g-import-not-at-top
  config = _read_json(run_dir / run_directory.CONFIG_FILENAME)
  run_eval = config.get("eval", {})
  evals_dir = run_dir / run_directory.EVALS_SUBDIR
  if evaluation:
    if "/" in evaluation or evaluation in (".", ".."):
      raise ValueError(f"evaluation must be a folder name under {run_directory.EVALS_SUBDIR}/, "
                       f"got {evaluation!r}")
    found = _read_evaluation(evals_dir / evaluation,
                             f"{run_directory.EVALS_SUBDIR}/{evaluation}", run_eval)
    return [found] if found else []
  folders = {FIRST_EVALUATION: run_dir}  # Name -> folder; later ones are named evals/<name>.
  if evals_dir.is_dir():
    folders.update({f"{run_directory.EVALS_SUBDIR}/{p.name}": p
                    for p in sorted(evals_dir.iterdir()) if p.is_dir()})
  # The order of the metrics.jsonl records (the last record of a name counts); unrecorded
  # evaluations after them, by the time of their results.json.
  recorded: Dict[str, int] = {}
  for index, record in enumerate(metrics_lib.read_metrics(run_dir)):
    if record.get("split") == "evaluation":
      where = str(record.get("metrics", {}).get("dir", ""))
      recorded[FIRST_EVALUATION if where == "." else where] = index

  def order(name: str) -> Tuple[int, float]:
    path = folders[name] / "results.json"
    if name in recorded:
      return (0, recorded[name])
    return (1, path.stat().st_mtime if path.exists() else 0.0)

  found = [_read_evaluation(folders[n], n, run_eval) for n in sorted(folders, key=order)]
  return [e for e in found if e is not None]


def merge_evaluations(evaluations: Sequence[Evaluation], mode: str
                      ) -> Tuple[Dict[int, Tuple[float, str]], List[str]]:
  """One curve from several evaluations of a run: the later evaluation wins a shared length.

  Only evaluations that measured the same thing as the newest one with rows in ``mode`` are
  merged: the same step and, for ``mode="sliding"``, the same ``sliding_stride`` (a step not
  recorded counts as equal). Evaluations without rows in ``mode`` are ignored.

  Args:
    evaluations: oldest first (:func:`run_evaluations`).
    mode: ``"nonoverlap"`` or ``"sliding"``.

  Returns:
    ``(length -> (perplexity, evaluation name), notes)``: one note per evaluation left out.
  """
  evaluations = [e for e in evaluations if e.perplexities(mode)]
  if not evaluations:
    return {}, []
  newest = evaluations[-1]

  def differs(e: Evaluation) -> str:
    if None not in (e.step, newest.step) and e.step != newest.step:
      return f"step {e.step}, the newest evaluation {newest.name!r} is at step {newest.step}"
    stride, newest_stride = e.settings.get("sliding_stride"), newest.settings.get(
        "sliding_stride")
    if mode == "sliding" and stride != newest_stride:
      return (f"sliding_stride {stride!r}, the newest evaluation {newest.name!r} has "
              f"{newest_stride!r}")
    return ""

  curve: Dict[int, Tuple[float, str]] = {}
  notes = []
  for e in evaluations:
    why = differs(e)
    if why:
      notes.append(f"evaluation {e.name!r} left out ({why})")
      continue
    curve.update({n: (p, e.name) for n, p in e.perplexities(mode).items()})
  return dict(sorted(curve.items())), notes


def load_run(run_dir: pathlib.Path, evaluation: str = "", mode: str = "nonoverlap"
             ) -> Dict[str, Any]:
  """Config, status, final numbers and merged perplexity curve of one run directory.

  Args:
    run_dir: the run directory.
    evaluation: an ``evals/`` folder name to read alone; empty to merge every evaluation.
    mode: the perplexity protocol read.

  Returns:
    ``{"dir", "config", "finished", "state", "final", "curve", "notes"}``; ``curve`` maps a
    length to ``(perplexity, evaluation name)`` and is empty unless the run is finished.

  Raises:
    ValueError: ``run_dir`` has no ``config.json``.
  """
  from pejax.train import run_directory  # pylint: disable=g-import-not-at-top
  config_path = run_dir / run_directory.CONFIG_FILENAME
  if not config_path.exists():
    raise ValueError(f"{run_dir} is not a run directory (no {run_directory.CONFIG_FILENAME})")
  config = run_directory.upgrade_saved_config(_read_json(config_path))
  evaluations = run_evaluations(run_dir, evaluation)
  finished = run_directory.is_finished(run_dir) and bool(evaluations)
  state = run_directory.run_status(run_dir).get("state", "unknown")
  if not evaluations and state == "finished":
    state = f"no evaluation {evaluation!r}" if evaluation else "no evaluation"
  curve, notes = merge_evaluations(evaluations, mode) if finished else ({}, [])
  return {"dir": run_dir, "config": config, "finished": finished, "state": state,
          "final": run_directory.final_numbers(run_dir), "curve": curve, "notes": notes}


def _fmt(value: Optional[float]) -> str:
  return "n/a" if value is None or not math.isfinite(value) else f"{value:.3f}"


def default_out_dir(run_dirs: Sequence[os.PathLike | str]) -> pathlib.Path:
  """``<common parent of the runs>/compare/<UTC timestamp>`` (``-2``, ... when taken).

  Args:
    run_dirs: the run directories (at least one).

  Returns:
    A folder that does not exist yet (not created).

  Raises:
    ValueError: the runs share no parent folder but the file system's root.
  """
  parents = [os.path.dirname(os.path.abspath(os.fspath(d))) for d in run_dirs]
  common = pathlib.Path(os.path.commonpath(parents))
  if common == pathlib.Path(common.anchor):
    raise ValueError(f"the runs share no parent folder (only {str(common)!r}); "
                     "give --out_dir")
  if common.is_relative_to(pathlib.Path.cwd()):
    common = common.relative_to(pathlib.Path.cwd())
  stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
  out, k = common / COMPARE_SUBDIR / stamp, 1
  while out.exists():
    k += 1
    out = common / COMPARE_SUBDIR / f"{stamp}-{k}"
  return out


def compare(run_dirs: Sequence[os.PathLike | str], *,
            out_dir: Optional[os.PathLike | str] = None, mode: str = "nonoverlap",
            evaluation: str = "", overwrite: bool = False, write: bool = True) -> str:
  """The comparison table as text; writes ``compare.md`` and ``compare.png`` into ``out_dir``.

  Args:
    run_dirs: run directories; an existing path without ``config.json`` is skipped (noted).
    out_dir: the output folder (created); ``None``: :func:`default_out_dir`.
    mode: ``"nonoverlap"`` or ``"sliding"``.
    evaluation: an ``evals/`` folder name to read alone; empty merges every evaluation.
    overwrite: replace an existing ``compare.md`` / ``compare.png`` (said in the output).
    write: write the files (``False``: only return the text).

  Returns:
    The table, the notes and (when written) the paths written.

  Raises:
    ValueError: no run directory, a path that does not exist, a bad ``mode``, or an existing
      output file without ``overwrite`` (nothing is written then).
  """
  if mode not in MODES:
    raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
  if isinstance(run_dirs, (str, os.PathLike)):
    raise TypeError(f"run_dirs must be a list of directories, got {run_dirs!r}")
  from pejax.train import run_directory  # pylint: disable=g-import-not-at-top
  skipped, kept = [], []
  for d in run_dirs:
    path = pathlib.Path(d)
    if not path.exists():
      raise ValueError(f"run directory {str(path)!r} does not exist")
    if not (path / run_directory.CONFIG_FILENAME).exists():
      skipped.append(f"skipped {path}: not a run directory (no {run_directory.CONFIG_FILENAME})")
    else:
      kept.append(path)
  if not kept:
    raise ValueError("no run directory among " + " ".join(map(str, run_dirs)) + " (a run "
                     f"directory has a {run_directory.CONFIG_FILENAME})")
  runs = [load_run(p, evaluation, mode) for p in kept]
  labels = run_labels([r["config"] for r in runs])
  lengths = sorted({n for r in runs for n in r["curve"]})
  header = (["run", "label", "train loss (window mean)", "validation loss"]
            + [f"ppl@{n}" for n in lengths])
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  curves, notes, marked = {}, list(skipped), False
  for run, label in zip(runs, labels):
    final = run["final"]
    cells = [run["dir"].name, label, _fmt(final.get("train_loss")),
             _fmt(final.get("valid_loss"))]
    if run["finished"]:
      for n in lengths:
        value, name = run["curve"].get(n, (None, FIRST_EVALUATION))
        mark = name != FIRST_EVALUATION and not evaluation and value is not None
        marked = marked or mark
        cells.append(_fmt(value) + (f" ({name})" if mark else ""))
      curves[label] = {n: p for n, (p, _) in run["curve"].items()}
      notes += [f"{run['dir'].name}: {note}" for note in run["notes"]]
    else:
      cells += [f"({run['state']}, not reported)"] + [""] * max(0, len(lengths) - 1)
    lines.append("| " + " | ".join(cells) + " |")
  if marked:
    notes.append("a cell marked (evals/NAME) comes from evals/NAME/results.json, the others from "
                 "the run's results.json; where evaluations measured the same length the later "
                 "one is shown")
  title = (f"Perplexity ({mode} windows) vs evaluation length"
           + (f", evaluation {evaluation!r}" if evaluation else ""))
  body = "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "")
  text = f"{title}\n{body}"
  if write:
    markdown = "\n".join(lines) + "".join(f"\n\n- {n}" if i == 0 else f"\n- {n}"
                                          for i, n in enumerate(notes))
    text += "\n\n" + _write(markdown, runs, curves, title=title, out_dir=out_dir,
                            overwrite=overwrite)
  return text


def _write(markdown: str, runs: Sequence[Dict[str, Any]], curves: Dict[str, Dict[int, float]], *,
           title: str, out_dir: Optional[os.PathLike | str], overwrite: bool) -> str:
  """Writes the table (``markdown``: table and notes) and the plot; returns what it wrote."""
  out = pathlib.Path(out_dir) if out_dir is not None else default_out_dir(
      [r["dir"] for r in runs])
  if out.exists() and not out.is_dir():
    raise ValueError(f"out_dir {str(out)!r} is a file, not a folder")
  targets = [out / TABLE_FILENAME] + ([out / PLOT_FILENAME] if curves else [])
  existing = [p for p in targets if p.exists()]
  if existing and not overwrite:
    raise ValueError(f"{existing[0]} exists; give --overwrite to replace it, or another "
                     "--out_dir")
  out.mkdir(parents=True, exist_ok=True)
  if curves:
    from pejax.eval import report  # pylint: disable=g-import-not-at-top
    from pejax.eval.perplexity import LengthResult  # pylint: disable=g-import-not-at-top
    train_lens = {int(r["config"]["data"]["train_len"]) for r in runs if r["finished"]}
    report.plot_perplexity(
        {label: [LengthResult(n, "nonoverlap", math.log(p), p, math.log2(p), 0, "")
                 for n, p in rows.items()] for label, rows in curves.items()},
        out / PLOT_FILENAME, train_len=train_lens.pop() if len(train_lens) == 1 else None,
        title=title)
  runs_list = "\n".join(f"- `{os.path.abspath(r['dir'])}`" for r in runs)
  plot = f"\n\n![{title}]({PLOT_FILENAME})" if curves else ""
  json_file.write_text_atomic(out / TABLE_FILENAME,
                              f"# {title}\n\n{markdown}{plot}\n\nRuns:\n\n{runs_list}\n")
  verb = "wrote (replacing the existing files)" if existing else "wrote"
  return f"{verb} {' and '.join(str(p) for p in targets)}"


class _OneLineErrors(argparse.ArgumentParser):
  """An ``ArgumentParser`` whose usage errors are one line (``prog: error: ...``), exit 2."""

  def error(self, message: str):
    self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def main(argv: Sequence[str]) -> int:
  """``python -m pejax.compare``: prints the table, writes the files; 2 on a usage error."""
  parser = _OneLineErrors(prog="python -m pejax.compare", description=__doc__.split(
      "\n\n")[0].split(": ", 1)[-1], formatter_class=argparse.RawDescriptionHelpFormatter,
      epilog="\n\n".join(__doc__.split("\n\n")[1:]))
  parser.add_argument("runs", nargs="+", help="run directories (e.g. runs/*)")
  parser.add_argument("--out_dir", default=None,
                      help=f"folder for {TABLE_FILENAME} and {PLOT_FILENAME} (default: "
                      f"<common parent of the runs>/{COMPARE_SUBDIR}/<UTC timestamp>/)")
  parser.add_argument("--overwrite", action="store_true",
                      help="replace an existing compare.md / compare.png in --out_dir")
  parser.add_argument("--mode", default="nonoverlap", choices=MODES)
  parser.add_argument("--evaluation", default="",
                      help="read evals/<NAME>/ only instead of merging every evaluation")
  parser.add_argument("--out", default=None, help=argparse.SUPPRESS)  # Removed: see error.
  args = parser.parse_args(list(argv))
  if args.out is not None:
    parser.error(f"--out was removed; give --out_dir=DIR ({TABLE_FILENAME} and "
                 f"{PLOT_FILENAME} are written there), got --out={args.out}")
  try:
    print(compare(args.runs, out_dir=args.out_dir, mode=args.mode,
                  evaluation=args.evaluation, overwrite=args.overwrite))
  except ValueError as e:
    parser.error(str(e))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
