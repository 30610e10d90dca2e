"""Tests of `python -m pejax.compare`: merged evaluations, the output folder, usage errors.

The run directories are written here with the library's own record writers (``metrics.jsonl``
by ``MetricsWriter``, ``status.json`` by ``set_status``, rows by ``LengthResult.to_json``), no
training: comparing is reading files. tests/eval/test_tensorboard_curves.py compares a run that
was really trained and evaluated twice.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import pathlib
from typing import Dict, Optional

from absl.testing import absltest

from pejax import compare
from pejax.eval.perplexity import LengthResult
from pejax.train import metrics as metrics_lib
from pejax.train import run_directory


def _rows(ppl: Dict[int, float], mode: str = "nonoverlap") -> list:
  return [LengthResult(n, mode, math.log(p), p, math.log2(p), 256, "dense").to_json()
          for n, p in ppl.items()]


class _Run:
  """A run directory written the way train_and_evaluate / evaluate_run write one."""

  def __init__(self, root: pathlib.Path, name: str, *, pe: str = "alibi",
               state: str = "finished", steps: int = 4):
    self.dir = root / name
    self.dir.mkdir(parents=True)
    self.steps = steps
    self.config = {"pe": {"name": pe}, "data": {"name": "stdlib", "train_len": 32},
                   "train": {"steps": steps}, "eval": {"lens": "32,64", "sliding_stride": 0}}
    (self.dir / run_directory.CONFIG_FILENAME).write_text(json.dumps(self.config))
    with metrics_lib.MetricsWriter(self.dir) as writer:
      writer.write(steps, "train", {"loss": 1.5})
      writer.write(steps, "eval", {"loss": 1.25})
    run_directory.set_status(self.dir, state, step=steps)

  def evaluate(self, name: str, ppl: Dict[int, float], *, steps: Optional[int] = None,
               sliding: Optional[Dict[int, float]] = None, stride: int = 0,
               record: bool = True) -> None:
    """Writes an evaluation: ``name="results"`` is the first one, else ``evals/<name>/``."""
    out = self.dir if name == "results" else self.dir / run_directory.EVALS_SUBDIR / name
    out.mkdir(parents=True, exist_ok=True)
    eval_config = {**self.config["eval"], "sliding_stride": stride}
    rows = _rows(ppl) + (_rows(sliding, "sliding") if sliding else [])
    meta = {"steps": self.steps if steps is None else steps, "evaluation": name,
            "eval_config": eval_config}
    (out / "results.json").write_text(json.dumps({
        "meta": meta, "perplexity": {self.config["pe"]["name"]: rows,
                                     "zero-shot": _rows({n: 99.0 for n in ppl})},
        "passkey": []}))
    if record:
      with metrics_lib.MetricsWriter(self.dir, append=True) as writer:
        writer.write(meta["steps"], "evaluation", {
            "name": name, "dir": "." if out == self.dir else str(out.relative_to(self.dir))})


def _table_row(text: str, run_name: str) -> list:
  (line,) = [l for l in text.splitlines() if l.startswith(f"| {run_name} |")]
  return [c.strip() for c in line.strip("|").split("|")]


class MergeTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = pathlib.Path(self.create_tempdir().full_path)
    self.out = self.root / "out"

  def test_later_evaluation_wins_a_shared_length_and_is_named_in_its_cell(self):
    run = _Run(self.root / "runs", "alibi")
    run.evaluate("results", {32: 3.0, 64: 4.0})
    run.evaluate("long", {64: 4.5, 128: 6.0})
    text = compare.compare([run.dir], out_dir=self.out)
    self.assertEqual(text.splitlines()[1].split(" | ")[-3:], ["ppl@32", "ppl@64", "ppl@128 |"])
    self.assertEqual(_table_row(text, "alibi")[-3:],
                     ["3.000", "4.500 (evals/long)", "6.000 (evals/long)"])
    self.assertIn("a cell marked (evals/NAME) comes from evals/NAME/results.json", text)
    table = (self.out / compare.TABLE_FILENAME).read_text()
    self.assertIn("| alibi | run 1 | 1.500 | 1.250 | 3.000 | 4.500 (evals/long) |", table)
    self.assertIn(str(run.dir.resolve()), table)
    self.assertGreater((self.out / compare.PLOT_FILENAME).stat().st_size, 1000)
    self.assertIn(f"wrote {self.out / compare.TABLE_FILENAME} and "
                  f"{self.out / compare.PLOT_FILENAME}", text)

  def test_order_is_the_order_evaluations_were_made_not_their_names(self):
    run = _Run(self.root, "alibi")
    run.evaluate("results", {32: 3.0})
    run.evaluate("zz", {64: 5.0})  # Recorded first ...
    run.evaluate("aa", {64: 6.0})  # ... then this one: it wins length 64.
    run.evaluate("unrecorded", {128: 7.0, 64: 8.0}, record=False)  # After every recorded one.
    row = _table_row(compare.compare([run.dir], write=False), "alibi")
    self.assertEqual(row[-3:], ["3.000", "8.000 (evals/unrecorded)", "7.000 (evals/unrecorded)"])
    self.assertEqual([e.name for e in compare.run_evaluations(run.dir)],
                     ["results", "evals/zz", "evals/aa", "evals/unrecorded"])

  def test_an_evaluation_of_another_step_or_stride_is_left_out_with_a_note(self):
    run = _Run(self.root, "alibi", steps=8)
    run.evaluate("early", {32: 9.0, 64: 9.5}, steps=4, sliding={32: 8.0})  # A preempted run's.
    run.evaluate("results", {32: 3.0}, sliding={32: 2.9})
    run.evaluate("strided", {64: 4.0}, sliding={64: 3.5}, stride=16)
    text = compare.compare([run.dir], write=False)
    self.assertEqual(_table_row(text, "alibi")[-2:], ["3.000", "4.000 (evals/strided)"])
    self.assertIn("alibi: evaluation 'evals/early' left out (step 4, the newest evaluation "
                  "'evals/strided' is at step 8)", text)
    # Sliding windows: the stride is part of what is measured.
    sliding = compare.compare([run.dir], write=False, mode="sliding")
    self.assertEqual(_table_row(sliding, "alibi")[-1:], ["3.500 (evals/strided)"])
    self.assertIn("evaluation 'results' left out (sliding_stride 0, the newest evaluation "
                  "'evals/strided' has 16)", sliding)
    self.assertNotIn("2.900", sliding)

  def test_one_evaluation_selected(self):
    run = _Run(self.root, "alibi")
    run.evaluate("results", {32: 3.0, 64: 4.0})
    run.evaluate("long", {64: 4.5})
    text = compare.compare([run.dir], write=False, evaluation="long")
    self.assertEqual(_table_row(text, "alibi")[-1], "4.500")  # No mark: one evaluation.
    self.assertNotIn("ppl@32", text)
    missing = compare.compare([run.dir], write=False, evaluation="nope")
    self.assertIn("(no evaluation 'nope', not reported)", missing)
    with self.assertRaisesRegex(ValueError, "evaluation must be a folder name.*'../x'"):
      compare.compare([run.dir], write=False, evaluation="../x")

  def test_unfinished_runs_are_listed_not_reported(self):
    done = _Run(self.root, "alibi")
    done.evaluate("results", {32: 3.0})
    partial = _Run(self.root, "rope", pe="rope", state="preempted")
    partial.evaluate("early", {32: 2.0})
    text = compare.compare([done.dir, partial.dir], out_dir=self.out)
    self.assertEqual(_table_row(text, "rope")[:2], ["rope", "pe=rope"])
    self.assertIn("(preempted, not reported)", _table_row(text, "rope"))
    self.assertNotIn("2.000", text)
    self.assertEqual(_table_row(text, "alibi")[-1], "3.000")

  def test_run_labels(self):
    self.assertEqual(compare.run_labels(
        [{"pe": {"name": "rope", "scaling": "yarn", "factor": 4.0}},
         {"pe": {"name": "rope", "scaling": None, "factor": None}},
         {"pe": {"name": "alibi", "scaling": None, "factor": None}}]),
        ["pe=rope scaling=yarn x4", "pe=rope scaling=None", "pe=alibi scaling=None"])
    # Records written before the PE fields were renamed (pe.rope_*) read the same.
    self.assertEqual(compare.run_labels(
        [{"pe": {"name": "rope", "rope_scaling": "yarn", "rope_factor": 4.0}},
         {"pe": {"name": "rope", "rope_scaling": "none", "rope_factor": 1.0}}]),
        ["scaling=yarn x4", "scaling=None"])


class OutputFolderTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = pathlib.Path(self.create_tempdir().full_path)
    self.runs = self.root / "runs"
    self.run = _Run(self.runs, "alibi")
    self.run.evaluate("results", {32: 3.0})
    other = _Run(self.runs, "rope", pe="rope")
    other.evaluate("results", {32: 2.5})
    (self.runs / "pretrained" / "llama" / "evals").mkdir(parents=True)  # No run directories.
    (self.runs / "notes.txt").write_text("x")
    self.cwd = self.root / "cwd"
    self.cwd.mkdir()
    previous = os.getcwd()
    os.chdir(self.cwd)
    self.addCleanup(os.chdir, previous)

  def _main(self, *argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      try:
        code = compare.main([str(a) for a in argv])
      except SystemExit as e:
        code = e.code
    return code, out.getvalue(), err.getvalue()

  def test_runs_glob_default_folder_in_the_runs_tree_and_nothing_in_the_cwd(self):
    everything = sorted(self.runs.iterdir())  # runs/*: runs, pretrained/, a file.
    code, out, err = self._main(*everything)
    self.assertEqual((code, err), (0, ""))
    self.assertIn(f"skipped {self.runs / 'pretrained'}: not a run directory (no config.json)",
                  out)
    self.assertIn(f"skipped {self.runs / 'notes.txt'}: not a run directory", out)
    (written,) = (self.runs / compare.COMPARE_SUBDIR).iterdir()
    self.assertEqual(sorted(p.name for p in written.iterdir()),
                     [compare.TABLE_FILENAME, compare.PLOT_FILENAME])
    self.assertRegex(written.name, r"^\d{8}-\d{6}$")
    self.assertEqual(list(self.cwd.iterdir()), [])
    # Again, now with runs/compare/ in the glob: skipped too, and a new folder, nothing replaced.
    before = (written / compare.TABLE_FILENAME).read_text()
    code, out, _ = self._main(*sorted(self.runs.iterdir()))
    self.assertEqual(code, 0)
    self.assertIn(f"skipped {self.runs / compare.COMPARE_SUBDIR}", out)
    self.assertLen(list((self.runs / compare.COMPARE_SUBDIR).iterdir()), 2)
    self.assertEqual((written / compare.TABLE_FILENAME).read_text(), before)
    self.assertEqual(list(self.cwd.iterdir()), [])

  def test_existing_files_are_refused_unless_overwrite(self):
    out_dir = self.root / "mine"
    out_dir.mkdir()
    (out_dir / compare.TABLE_FILENAME).write_text("keep me")
    code, out, err = self._main(self.run.dir, f"--out_dir={out_dir}")
    self.assertEqual((code, out), (2, ""))
    self.assertEqual(err.count("\n"), 1)
    self.assertIn(f"error: {out_dir / compare.TABLE_FILENAME} exists; give --overwrite", err)
    self.assertEqual((out_dir / compare.TABLE_FILENAME).read_text(), "keep me")
    self.assertFalse((out_dir / compare.PLOT_FILENAME).exists())
    code, out, err = self._main(self.run.dir, f"--out_dir={out_dir}", "--overwrite")
    self.assertEqual((code, err), (0, ""))
    self.assertIn("wrote (replacing the existing files)", out)
    self.assertIn("| alibi |", (out_dir / compare.TABLE_FILENAME).read_text())

  def test_usage_errors_are_one_line_exit_2(self):
    file_dir = self.root / "a_file"
    file_dir.write_text("")
    for argv, message in (
        ([self.run.dir, "--out=cmp.png"], "--out was removed; give --out_dir=DIR"),
        ([self.run.dir, "--mode=both"], "argument --mode: invalid choice: 'both'"),
        ([self.root / "missing"], f"run directory {str(self.root / 'missing')!r} does not exist"),
        ([self.runs / "pretrained"], "no run directory among"),
        ([self.run.dir, f"--out_dir={file_dir}"], "is a file, not a folder"),
        ([], "the following arguments are required: runs")):
      with self.subTest(argv=argv):
        code, out, err = self._main(*argv)
        self.assertEqual((code, out), (2, ""))
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn(message, err)
    self.assertEqual(list(self.cwd.iterdir()), [])

  def test_runs_without_a_common_parent_need_out_dir(self):
    with self.assertRaisesRegex(ValueError, "share no parent folder.*give --out_dir"):
      compare.default_out_dir(["/a", "/b/c"])
    with self.assertRaisesRegex(TypeError, "run_dirs must be a list"):
      compare.compare(str(self.run.dir))


if __name__ == "__main__":
  absltest.main()
