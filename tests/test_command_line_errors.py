"""Every mistake on the command line is one line ``<prog>: error: ...`` and exit status 2.

The table of mistakes runs in-process through ``launch.command_line`` (the function
``python launch.py`` calls: most mistakes are found before JAX does anything), each in an empty
current directory that must stay empty (no half-made ``runs/...``). Three cases also run as a
real ``python launch.py`` to show the in-process path prints the same line and status; one
installs the package (``pip install --target``) and runs ``python -m pejax`` outside the checkout.
"""

import contextlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import types
from unittest import mock

from absl import flags
from absl.testing import absltest
from absl.testing import parameterized

import launch
import pytest
from pejax import cli
from pejax import experiment_config
from pejax.train import experiment
from pejax.train import loop

ROOT = pathlib.Path(__file__).resolve().parents[1]
PREFIX = "launch.py: error: "

# (name, arguments, the error line after "launch.py: error: " as a regex). {fixtures} is a
# directory holding: noget.py (no get_config), broken.py (raises on import), afile (a file),
# norun/ (an empty directory) and moved/ (a run record whose --pe_module file is gone).
MISTAKES = (
    ("misspelt_flag", ["--setps=10"],
     r"--setps=10: no such flag \(did you mean --steps\?\); --help lists them"),
    ("zero_steps", ["--steps=0"], r"--steps=0: must be a positive integer"),
    ("negative_steps", ["--steps=-1"], r"--steps=-1: must be a positive integer"),
    ("short_train_len", ["--train_len=7"], r"--train_len=7: must be an integer >= 8"),
    ("steps_not_a_number", ["--steps=abc"], r"--steps=abc: not an integer"),
    ("flag_without_value", ["--steps"], r"--steps: needs a value \(--steps=<value>\)"),
    ("misspelt_study", ["--study=extrapolaton"],
     r"--study=extrapolaton: no such study \(did you mean 'extrapolation'\?\); one of .*"
     r"kazemnejad_suite"),
    ("missing_config_file", ["--config=missing.py"],
     r"--config=missing.py: no such file \(relative to .*\)"),
    ("config_file_without_get_config", ["--config={fixtures}/noget.py"],
     r"--config=.*/noget.py: the file has no get_config\(\) function"),
    ("config_file_that_raises", ["--config={fixtures}/broken.py"],
     r"--config=.*/broken.py: importing it failed: ZeroDivisionError: division by zero"),
    ("unknown_pe_module", ["--pe_module=not_a_module"],
     r"--pe_module=not_a_module: no module named 'not_a_module' on the Python path"),
    ("missing_pe_module_file", ["--pe_module=/path/does/not/exist.py"],
     r"--pe_module=/path/does/not/exist.py: no such file"),
    ("yarn_without_factor", ["--rope_scaling=yarn"],
     r"pe.factor is required for the 'yarn' scaling \(e.g. --rope_factor=4\)"),
    ("llama3_without_factor", ["--rope_scaling=llama3"],
     r"pe.factor is required for the 'llama3' scaling"),
    ("longrope_without_factor", ["--rope_scaling=longrope"],
     r"pe.factor is required for the 'longrope' scaling when long_factor is not given"),
    ("zero_factor", ["--rope_scaling=yarn", "--rope_factor=0"],
     r"--rope_factor=0.0: pe.factor must be a positive finite number, got 0.0"),
    ("factor_without_scaling", ["--rope_factor=0"],
     r"--rope_factor=0.0: pe.factor needs a RoPE scaling \(--rope_scaling=...\)"),
    ("misspelt_scaling", ["--rope_scaling=yran"],
     r"--rope_scaling=yran: must be one of none, linear, .* \(did you mean 'yarn'\?\)"),
    ("misspelt_config_field", ["--config.model.num_layer=2"],
     r"--config.model.num_layer=2: no config field 'model.num_layer' \(did you mean "
     r"'model.num_layers'\?\); --help lists them"),
    ("unknown_config_section", ["--config.modle.d_model=2"],
     r"--config.modle.d_model=2: no config field 'modle.d_model' \(did you mean "
     r"'model.d_model'\?\)"),
    ("config_field_not_a_number", ["--config.model.num_layers=abc"],
     r"--config.model.num_layers=abc: not an integer"),
    ("config_field_not_a_boolean", ["--config.data.reverse_digits=maybe"],
     r"--config.data.reverse_digits=maybe: not a boolean \(true or false\)"),
    ("misspelt_pe", ["--pe=alibbi"],
     r"--pe=alibbi: 'alibbi' is not a registered PE \(did you mean 'alibi'\?\); one of .*rope"),
    ("misspelt_pe_in_a_pattern", ["--pe=rope,alibbi"],
     r"--pe=rope,alibbi: 'alibbi' is not a registered PE \(did you mean 'alibi'\?\)"),
    ("misspelt_pe_config_field", ["--config.pe.name=ropee"],
     r"--config.pe.name=ropee: 'ropee' is not a registered PE \(did you mean 'rope'\?\)"),
    ("positional_argument", ["alibi"],
     r"unexpected positional argument 'alibi' \(every setting is a --flag=value\)"),
    ("eval_only_without_workdir", ["--eval_only"],
     r"--eval_only needs --workdir=<run directory>"),
    ("eval_only_without_a_run", ["--eval_only", "--workdir={fixtures}/norun"],
     r"--eval_only needs a run directory with config.json; '.*/norun' has none"),
    ("eval_only_of_a_run_whose_module_is_gone", ["--eval_only", "--workdir={fixtures}/moved"],
     r"--workdir=.*/moved was trained with --pe_module=/gone/my_pe.py, which does not import "
     r"here \(--pe_module=/gone/my_pe.py: no such file\); restore it, or pass "
     r"--pe_module=<where it is now>"),
    ("eval_name_without_eval_only", ["--eval_name=x"],
     r"--eval_name=x only takes effect with --eval_only"),
    ("shard_out_of_range", ["--study=kazemnejad_suite", "--shard=3/2"],
     r"--shard=3/2: must be I/N with 0 <= I < N \(e.g. 0/2\)"),
    ("seeds_not_integers", ["--study=extrapolation", "--seeds=a,b"],
     r"--seeds=a,b: must be comma-separated integers \(e.g. 0,1,2\)"),
    ("study_config_field", ["--study=extrapolation", "--config.model.nope=1"],
     r"--config.model.nope=1: no config field 'model.nope'; --help lists them"),
    ("sliding_window_not_integers", ["--sliding_window=abc"],
     r"--sliding_window=abc: model.sliding_window must be comma-separated integers, got 'abc'"),
    ("zero_eval_length", ["--eval_lens=0"], r"--eval_lens=0: eval_lens must be positive, got 0"),
    ("eval_lengths_not_integers", ["--eval_lens=abc"],
     r"--eval_lens=abc: eval_lens must be comma-separated positive integers, got 'abc'"),
    ("unknown_corpus", ["--data=nonexistent_corpus"],
     r"--data=nonexistent_corpus: no such corpus, task, file or directory; a built-in corpus "
     r"\(stdlib\), a synthetic task \(copy, .*\) or a path to UTF-8 text"),
    ("misspelt_task", ["--data=revrse"],
     r"--data=revrse: no such corpus, task, file or directory \(did you mean 'reverse'\?\)"),
    ("workdir_under_a_file", ["--workdir={fixtures}/afile/run"],
     r"workdir '.*/afile/run' is below '.*/afile', which is a file"),
    # A ConfigError of the run's own check (pejax.train.config_check), raised inside training.
    ("run_config_check", ["--config.optim.learning_rate=nan"],
     r"optim.learning_rate must be a finite number, got nan"),
    ("study_alias_without_study", ["--quick"], r"--quick only takes effect with --study=<name>"),
    ("misspelt_ruler_task", ["--config.eval.ruler=niah_singel_1"],
     r"eval.ruler: task must be one of \[.*\], got 'niah_singel_1'; did you mean "
     r"'niah_single_1'\?"),
    ("ruler_length_below_a_tasks_prompt", ["--config.eval.ruler=vt", "--eval_lens=512"],
     r"eval.ruler at eval.lens: length must be at least \d+ tokens for task 'vt' .*got 512"),
    ("ruler_examples_zero", ["--config.eval.ruler=fwe", "--eval_lens=1024",
                             "--config.eval.ruler_examples=0"],
     r"eval.ruler_examples must be an integer >= 1, got 0"),
    ("ruler_on_a_task", ["--data=copy", "--config.eval.ruler=fwe"],
     r"eval.ruler='fwe' has no effect with data.name='copy'"),
    ("verbosity_not_a_number", ["--verbosity=abc"], r"--verbosity=abc: not an integer"),
)


def setUpModule():
  global FIXTURES  # pylint: disable=global-statement
  FIXTURES = pathlib.Path(tempfile.mkdtemp(prefix="command_line_errors"))
  (FIXTURES / "noget.py").write_text("x = 1\n")
  (FIXTURES / "broken.py").write_text("1 / 0\n")
  (FIXTURES / "afile").write_text("a file\n")
  (FIXTURES / "norun").mkdir()
  (FIXTURES / "moved").mkdir()
  (FIXTURES / "moved" / "config.json").write_text(json.dumps({"pe_modules": "/gone/my_pe.py"}))


def tearDownModule():
  shutil.rmtree(FIXTURES, ignore_errors=True)


def command_line(args, *, cwd, entry=launch.command_line):
  """``(exit status, stdout, stderr)`` of a command line run in-process in ``cwd``."""
  out, err = io.StringIO(), io.StringIO()
  with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = entry(["launch.py", *args])
  return code, out.getvalue(), err.getvalue()


def _listing(directory):
  return sorted(str(p.relative_to(directory)) for p in pathlib.Path(directory).rglob("*"))


class MistakeTableTest(parameterized.TestCase):
  """Each mistake: one line naming the flag and the value, status 2, nothing written."""

  @parameterized.named_parameters(*MISTAKES)
  def test_one_line_exit_2_nothing_written(self, args, pattern):
    cwd = self.create_tempdir().full_path
    args = [a.format(fixtures=FIXTURES) for a in args]
    before = _listing(FIXTURES)
    code, out, err = command_line(args, cwd=cwd)
    self.assertEqual(code, 2, err)
    self.assertLen(err.splitlines(), 1, err)
    self.assertRegex(err.strip(), "^" + PREFIX + pattern)
    self.assertEqual(out, "")
    self.assertEqual(os.listdir(cwd), [])  # No runs/<name> left behind.
    self.assertEqual(_listing(FIXTURES), before)


class AcceptedSpellingsTest(absltest.TestCase):

  def _config(self, *args):
    argv = ["launch.py", *args]
    flag_values = flags.FlagValues()
    launch.define_flags(flag_values, argv)
    launch.parse_flags(argv, flag_values)
    return launch.resolve_config(flag_values)

  def test_pe_names_in_any_case_are_the_registered_names(self):
    config, overrides, _ = self._config("--pe=ALiBi")
    self.assertEqual((config.pe.name, overrides["pe.name"]), ("alibi", "alibi"))
    config, _, _ = self._config("--pe=RoPE,None", "--config.model.num_layers=2")
    self.assertEqual(config.pe.name, "rope,none")
    config, _, _ = self._config("--config.pe.name=T5")
    self.assertEqual(config.pe.name, "t5")


class HelpTest(absltest.TestCase):

  def test_help_and_helpfull_exit_0(self):
    cwd = self.create_tempdir().full_path
    code, out, err = command_line(["--help"], cwd=cwd)
    self.assertEqual((code, err), (0, ""))
    self.assertIn("--config.model.d_model=128", out)
    self.assertNotIn("--verbosity", out)  # absl's logging flags: --helpfull only.
    code, full, _ = command_line(["--helpfull"], cwd=cwd)
    self.assertEqual(code, 0)
    self.assertIn("--verbosity", full)

  def test_no_config_comment_is_cut_mid_sentence(self):
    comments = experiment_config.field_comments()
    for path, comment in comments.items():
      self.assertRegex(comment, r"[.)]$", path)
    self.assertEqual(comments["model.sliding_window"],
                     'Local attention window W ("128"; "128,0" cycles over layers, 0 = global); '
                     "empty = global attention everywhere.")
    self.assertTrue(comments["eval.blockwise_threshold"].endswith(
        "0 = the measured crossover of the platform (pejax.nn.attention: 1024 on CPU)."))
    self.assertTrue(comments["train.init_from_hf"].endswith(
        "(fine-tuning; model.* is then the checkpoint's, pe.scaling applies)."))
    text = experiment_config.help_text()
    self.assertIn("empty = global attention everywhere.", text)
    self.assertIn("--config.pe_modules=''", text)


class ExitStatusTest(absltest.TestCase):
  """A run that started keeps its documented exit statuses."""

  def test_non_finite_loss_is_1_and_a_signal_its_exit_code(self):
    cwd = self.create_tempdir().full_path
    nan = loop.NonFiniteLossError(step=3, loss=float("nan"), grad_norm=float("nan"),
                                  last_checkpoint_step=None, checkpoint_dir="run/checkpoints")
    with mock.patch.object(experiment, "train_and_evaluate", side_effect=nan):
      code, _, err = command_line(["--steps=4"], cwd=cwd)
    self.assertEqual(code, 1)
    self.assertRegex(err.strip(), r"^error: non-finite training loss nan .* at step 3;")
    stopped = types.SimpleNamespace(stop_reason="SIGTERM")
    with mock.patch.object(experiment, "train_and_evaluate", return_value=stopped):
      self.assertEqual(command_line(["--steps=4"], cwd=cwd)[0], experiment.EXIT_CODES["SIGTERM"])

  def test_a_study_stopped_by_a_signal_exits_with_its_code_and_one_line(self):
    cwd = self.create_tempdir().full_path
    from experiments import extrapolation  # pylint: disable=import-outside-toplevel
    stopped = experiment.TrainingInterrupted("runs/alibi-x", signal_name="SIGTERM", step=2,
                                             steps=4)
    with mock.patch.object(extrapolation, "run", side_effect=stopped):
      code, _, err = command_line(["--study=extrapolation", "--quick"], cwd=cwd)
    self.assertEqual(code, experiment.EXIT_CODES["SIGTERM"])
    self.assertEqual(err.strip(), "--study=extrapolation: stopped by SIGTERM at step 2 of 4 in "
                     "runs/alibi-x: checkpoint saved, nothing evaluated; re-run the same command "
                     "to resume")

  def test_without_a_checkout_a_study_is_a_one_line_pointer_to_launch_py(self):
    cwd = self.create_tempdir().full_path
    code, _, err = command_line(
        ["--study=extrapolation"], cwd=cwd,
        entry=lambda argv: cli.command_line(["pejax-launch", *argv[1:]], prog="pejax-launch"))
    self.assertEqual(code, 2)
    self.assertEqual(err.strip(), "pejax-launch: error: --study=extrapolation: studies need a "
                     "source checkout of pejax (run python launch.py --study=extrapolation there)")


def _real(args, *, cwd, command=(sys.executable, str(ROOT / "launch.py")), pythonpath=None):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PEJAX_NO_RUNTIME_ENV="1")
  if pythonpath:
    env["PYTHONPATH"] = pythonpath
  return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True,
                        timeout=300, check=False)


class RealCommandLineTest(parameterized.TestCase):

  @pytest.mark.slow
  def test_the_in_process_path_prints_what_the_real_command_line_prints(self):
    for name in ("misspelt_flag", "misspelt_config_field", "yarn_without_factor"):
      args = dict((m[0], m[1]) for m in MISTAKES)[name]
      with self.subTest(name):
        cwd = self.create_tempdir().full_path
        proc = _real(args, cwd=cwd)
        self.assertEqual((proc.returncode, proc.stderr), command_line(args, cwd=cwd)[::2])
        self.assertNotIn("Traceback", proc.stderr)
        self.assertEqual(os.listdir(cwd), [])

  @pytest.mark.slow  # A subprocess (the fast tier's rule, docs/tests.md).
  def test_a_study_module_runs_launch_py_of_the_checkout(self):
    # python -m experiments.<study> hands its flags to <root>/launch.py (run_as_launch); the
    # doc test runs study commands in-process, so this real process is what catches a broken
    # path (broken from the experiments/study split until 2026-12-06: every study's python -m
    # failed with FileNotFoundError).
    from experiments.study import study_options  # pylint: disable=g-import-not-at-top
    self.assertEqual(study_options.launch_script(), ROOT / "launch.py")
    cwd = self.create_tempdir().full_path
    proc = _real(["--setps=2"], cwd=cwd, command=(sys.executable, "-m", "experiments.gallery"),
                 pythonpath=str(ROOT))
    self.assertEqual((proc.returncode, proc.stderr), (2, "launch.py: error: --setps=2: no such "
                                                          "flag (did you mean --steps?); --help "
                                                          "lists them\n"))
    self.assertEqual(os.listdir(cwd), [])

  @pytest.mark.slow
  def test_installed_package_runs_outside_the_checkout(self):
    scratch = pathlib.Path(self.create_tempdir().full_path)
    source = scratch / "source"  # A copy: building writes build/ and *.egg-info beside it.
    shutil.copytree(ROOT / "pejax", source / "pejax",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "setup.py", "README.md", "LICENSE"):
      if (ROOT / name).exists():
        shutil.copy(ROOT / name, source / name)
    target = scratch / "site"
    build = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet",
                            "--target", str(target), str(source)],
                           capture_output=True, text=True, timeout=600, check=False)
    self.assertEqual(build.returncode, 0, build.stderr[-3000:])
    self.assertTrue((target / "bin" / "pejax-launch").exists())  # The console script.
    self.assertFalse((target / "experiments").exists())
    cwd = scratch / "elsewhere"
    cwd.mkdir()
    module = (sys.executable, "-m", "pejax")
    proc = _real(["--help"], cwd=cwd, command=module, pythonpath=str(target))
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn("pejax-launch --pe=alibi", proc.stdout)
    self.assertIn("--config.model.d_model=128", proc.stdout)  # The package's default config.
    script = (str(target / "bin" / "pejax-launch"),)  # The console script setup.cfg declares.
    proc = _real(["--setps=2"], cwd=cwd, command=script, pythonpath=str(target))
    self.assertEqual((proc.returncode, proc.stderr), (2, "pejax-launch: error: --setps=2: no "
                                                          "such flag (did you mean --steps?); "
                                                          "--help lists them\n"))
    proc = _real(["--steps=2", "--train_len=16", "--config.model.num_layers=1",
                  "--config.model.d_model=16", "--config.model.num_heads=2",
                  "--config.data.batch_size=2", "--eval_lens=16", "--config.eval.num_tokens=64",
                  "--config.train.eval_every=0", "--workdir=run"],
                 cwd=cwd, command=module, pythonpath=str(target))
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    results = json.loads((cwd / "run" / "results.json").read_text())
    self.assertEqual([r["length"] for r in results["perplexity"]["rope"]], [16])


if __name__ == "__main__":
  absltest.main()
