"""Tests of `launch.py` and `train_and_evaluate` with tiny settings.

Most commands run in-process through ``launch.run(argv)`` (the path the command line takes);
three start an interpreter: the SIGTERM preemption, the shape of a usage error / --help on the
real command line, and ``--eval_only`` of a run trained with a ``--pe_module`` file.
"""

import contextlib
import io
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
from unittest import mock

from absl import app
from absl import flags
from absl.testing import absltest
from absl.testing import parameterized

import jax
import launch
import pytest
from pejax import compare
from pejax import decoder_from_config
from pejax import experiment_config
from pejax import provenance
from pejax.cli import pe_modules
from pejax.train import experiment
from pejax.train import run_directory

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The tiniest model: 1 layer, d_model 32, train_len 32, 256 eval tokens.
TINY = ["--config.model.num_layers=1", "--config.model.d_model=32",
        "--config.model.num_heads=2", "--config.data.batch_size=4", "--train_len=32",
        "--config.optim.warmup_steps=1", "--config.train.log_every=2",
        "--config.train.eval_every=4", "--config.train.checkpoint_every=4",
        "--config.eval.num_tokens=256", "--eval_lens=32,64"]


def _tiny_config(workdir, **overrides):
  config = experiment_config.get_default_config()
  config.workdir = str(workdir)
  config.model.num_layers, config.model.d_model, config.model.num_heads = 1, 32, 2
  config.data.train_len, config.data.batch_size = 32, 4
  config.train.steps, config.train.log_every = 8, 4
  config.train.eval_every, config.train.checkpoint_every = 4, 4
  config.optim.warmup_steps = 2
  config.eval.lens = "32,64"
  config.eval.num_tokens = 256
  config.update_from_flattened_dict(overrides)
  return config


def _launch(*args):
  return launch.run(["launch.py", *args])


def _run_launch(*args, timeout=300, reexec=True, **kwargs):
  """Runs launch.py in its own interpreter."""
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("PEJAX_RUNTIME_ENV_APPLIED", None)
  if not reexec:
    env["PEJAX_NO_RUNTIME_ENV"] = "1"
  return subprocess.Popen([sys.executable, str(ROOT / "launch.py"), *args], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def _listing(directory):
  return sorted((str(p.relative_to(directory)), p.stat().st_mtime_ns)
                for p in pathlib.Path(directory).rglob("*") if p.is_file())


class CommandLineTest(absltest.TestCase):
  """The two claims that need a real interpreter."""

  @pytest.mark.slow
  def test_sigterm_saves_skips_evaluation_exits_143_and_the_same_command_resumes(self):
    workdir = pathlib.Path(self.create_tempdir().full_path) / "run"
    args = ["--pe=alibi", "--steps=20", f"--workdir={workdir}", *TINY,
            "--config.train.log_every=1", "--config.train.eval_every=0"]
    proc = _run_launch(*args, reexec=False)
    try:
      for line in proc.stdout:  # Wait until training runs, then preempt.
        if line.startswith("step ") and "/20" in line:
          proc.send_signal(signal.SIGTERM)
          break
      out, err = proc.communicate(timeout=300)
    finally:
      proc.kill()
    self.assertEqual(proc.returncode, 143, err[-3000:])
    self.assertIn("evaluation skipped", out)
    self.assertFalse((workdir / "results.json").exists())  # Never reported as finished.
    status = json.loads((workdir / "status.json").read_text())
    self.assertEqual(status["state"], "preempted")
    self.assertFalse(run_directory.is_finished(workdir))
    stopped_at = status["step"]
    self.assertLess(stopped_at, 20)
    # The identical command resumes and finishes (in-process: the same main).
    self.assertEqual(_launch(*args), 0)
    self.assertTrue(run_directory.is_finished(workdir))
    records = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in records if r["split"] == "train"]
    self.assertEqual(train_steps, list(range(1, 21)))  # One uninterrupted log.

  @pytest.mark.slow
  def test_help_and_usage_error_on_the_real_command_line(self):
    proc = _run_launch("--help", reexec=False)
    out, err = proc.communicate(timeout=120)
    self.assertEqual(proc.returncode, 0, err[-3000:])
    for group in ("model (--config.model.<field>):", "positional encoding (--config.pe.",
                  "data (--config.data.", "optimizer (--config.optim.",
                  "evaluation (--config.eval.", "run (--config.train.", "mesh (--config.mesh."):
      self.assertIn(group, out)
    self.assertIn("--config.model.d_model=128", out)
    self.assertIn("--config.pe.original_max_position=None", out)
    self.assertIn("--config.optim.weight_decay=0.1", out)
    self.assertIn("--eval_only", out)
    self.assertIn("--quick", out)
    proc = _run_launch("--config.optim.learning_rate=nan", reexec=False)
    out, err = proc.communicate(timeout=120)
    self.assertEqual(proc.returncode, 2)
    self.assertEqual(err.strip().splitlines(),
                     ["launch.py: error: optim.learning_rate must be a finite number, got nan"])


class UsageErrorTest(parameterized.TestCase):
  """Every bad setting is a clear usage error naming it (in-process; the command-line mistakes
  and their one-line form: tests/test_command_line_errors.py)."""

  @parameterized.named_parameters(
      ("unknown_pe", ["--pe=foo"], app.UsageError,
       r"--pe=foo: 'foo' is not a registered PE.*; one of alibi, .*rope"),
      ("unknown_scaling", ["--rope_scaling=magic"], app.UsageError,
       r"--rope_scaling=magic: must be one of none, .*yarn"),
      ("bad_eval_lens", ["--eval_lens=64,abc"], app.UsageError, "eval_lens"),
      ("bad_eval_mode", ["--config.eval.mode=both,sliding"], app.UsageError, "nonoverlap"),
      ("bad_data", ["--data=/no/such/corpus"], app.UsageError, "stdlib"),
      ("scaling_on_alibi", ["--pe=alibi", "--rope_scaling=yarn", "--rope_factor=4"],
       app.UsageError, r"pe.scaling='yarn' has no effect with pe.name='alibi' \(PEs with this "
       r"field: .*rope"),
      ("eval_scaling_on_alibi", ["--pe=alibi", "--config.eval.rope_scaling=yarn"],
       app.UsageError, r"eval.rope_scaling='yarn' has no effect with pe.name='alibi'"),
      ("eval_factor_alone", ["--config.eval.rope_factor=4"], app.UsageError,
       r"eval.rope_factor=4.0 has no effect without eval.rope_scaling"),
      ("factor_alone", ["--rope_factor=4"], app.UsageError,
       r"--rope_factor=4.0: pe.factor needs a RoPE scaling \(--rope_scaling=...\)"),
      ("original_length_alone", ["--config.pe.original_max_position=64"],
       app.UsageError, r"original_max_position needs a RoPE scaling"),
      ("original_length_on_linear", ["--rope_scaling=linear", "--rope_factor=2",
                                     "--config.pe.original_max_position=64"],
       app.UsageError, r"original_max_position is not a field of the 'linear' scaling"),
      ("t5_buckets_on_rope", ["--config.pe.num_buckets=8"], app.UsageError,
       r"pe.num_buckets=8 has no effect with pe.name='rope' \(PEs with this field: .*t5"),
      ("rope_base_on_t5", ["--pe=t5", "--config.pe.layout=interleaved"], app.UsageError,
       r"pe.layout='interleaved' has no effect with pe.name='t5'"),
      ("stride_nonoverlap", ["--config.eval.sliding_stride=8"], app.UsageError,
       r"sliding_stride=8 has no effect with eval.mode='nonoverlap'"),
      ("passkey_on_task", ["--data=copy", "--config.eval.passkey=True"], app.UsageError,
       r"eval.passkey=True has no effect with data.name='copy'"),
      ("nan", ["--config.optim.learning_rate=nan"], app.UsageError,
       "optim.learning_rate must be a finite number, got nan"),
      ("inf", ["--rope_scaling=yarn", "--rope_factor=inf"], app.UsageError,
       "pe.factor must be a finite number, got inf"),
      ("negative_interval", ["--config.train.log_every=-1"], app.UsageError,
       r"train.log_every must be a number >= 0, got -1"),
      ("zero_batch", ["--config.data.batch_size=0"], app.UsageError,
       r"data.batch_size must be a number >= 1, got 0"),
      ("quick_without_study", ["--quick"], app.UsageError, "--quick only takes effect with"),
      ("pes_without_study", ["--pes=rope"], app.UsageError, "--pes only takes effect with"),
      ("runs_dir_without_study", ["--runs_dir=/tmp/x"], app.UsageError,
       "--runs_dir only takes effect with"),
      ("shard_without_study", ["--shard=0/2"], app.UsageError, "--shard only takes effect with"),
      ("shard_on_a_study_without_variants", ["--study=passkey_scaling", "--shard=0/2"],
       app.UsageError, r"--shard only applies to the studies content_tasks, extrapolation, kazemnejad_suite, "
       r"length_generalization, ruler_retrieval, ruoss_suite, not --study=passkey_scaling"),
      ("progress_without_study", ["--progress"], app.UsageError,
       "--progress only takes effect with"),
      ("progress_on_a_study_without_variants", ["--study=passkey_scaling", "--progress"],
       app.UsageError, r"--progress only applies to the studies content_tasks, kazemnejad_suite, "
       r"length_generalization, ruoss_suite, not --study=passkey_scaling"),
      ("shard_not_a_fraction", ["--study=kazemnejad_suite", "--shard=1"], app.UsageError,
       r"--shard=1: must be I/N with 0 <= I < N \(e.g. 0/2\)"),
      ("shard_zero_count", ["--study=kazemnejad_suite", "--shard=0/0"], app.UsageError,
       r"--shard=0/0: must be I/N"),
      ("shard_negative", ["--study=kazemnejad_suite", "--shard=-1/2"], app.UsageError,
       r"--shard=-1/2: must be I/N"),
      ("pes_on_a_study_without_variants", ["--study=streaming_llm", "--pes=rope"],
       app.UsageError, r"--pes only applies to the studies content_tasks, extrapolation, "
       r"kazemnejad_suite, length_generalization, ruler_retrieval, ruoss_suite, not "
       r"--study=streaming_llm"),
      ("unknown_pes", ["--study=kazemnejad_suite", "--pes=rope,bogus"], app.UsageError,
       r"--pes: bogus not among this study's variants \(alibi, .*rope"),
      ("study_and_config", ["--study=extrapolation",
                            "--config=experiments/configs/default.py"], app.UsageError,
       "picks its own config file"),
      ("study_owned", ["--study=extrapolation", "--pe=rope"], app.UsageError,
       "does not take --pe"),
      ("study_owned_config", ["--study=extrapolation", "--config.eval.lens=64"],
       app.UsageError, "does not take --config.eval.lens"),
      ("unknown_study", ["--study=nope"], app.UsageError,
       "--study=nope: no such study; one of .*extrapolation"),
  )
  def test_usage_error(self, args, error, message):
    workdir = pathlib.Path(self.create_tempdir().full_path) / "run"
    with self.assertRaisesRegex(error, message):
      _launch(*args, f"--workdir={workdir}")
    self.assertFalse(workdir.exists())  # Refused before any run directory is made.

  def test_workdir_under_a_file(self):
    file_path = self.create_tempfile().full_path
    with self.assertRaisesRegex(app.UsageError, "is below .*which is a file"):
      _launch(f"--workdir={file_path}/run")


# A PE of the user's own, in one file outside pejax (registered once per process: the same file
# is one module however often it is imported).
USER_PE_SOURCE = """
import dataclasses
import jax.numpy as jnp
from pejax.nn import register_pe
from pejax.nn.positional.interface import PEConfig, PositionalEncoding


@dataclasses.dataclass(frozen=True)
class FileDecayConfig(PEConfig):
  decay_rate: float = 1.0


@register_pe("cli_file_decay")
class FileDecayPE(PositionalEncoding):
  config_class = FileDecayConfig
  translation_invariant = True

  def bias(self, q_positions, k_positions):
    # float32 [B | 1, H, Lq, Lk]: -decay_rate * (h + 1) / H * |q - k| for head h.
    heads = jnp.arange(1, self.num_heads + 1, dtype=jnp.float32) / self.num_heads
    distance = jnp.abs(q_positions[:, None, :, None] - k_positions[:, None, None, :])
    return -self.config.decay_rate * heads[None, :, None, None] * distance.astype(jnp.float32)
"""


class PEModuleTest(absltest.TestCase):
  """--pe_module=<file.py>: a PE from one's own file, its fields in --help, recorded by the run."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = pathlib.Path(tempfile.mkdtemp(prefix="pe_module"))
    cls.pe_file = cls.root / "my_pe.py"
    cls.pe_file.write_text(USER_PE_SOURCE)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    # Leave the registry as found: later tests in this process must not see the file's PE.
    from pejax.nn.positional import interface  # pylint: disable=g-import-not-at-top
    interface._REGISTRY.pop("cli_file_decay", None)  # pylint: disable=protected-access
    sys.modules.pop(pe_modules.module_name_for_file(str(cls.pe_file)), None)
    super().tearDownClass()

  def _resolve(self, *args):
    argv = ["launch.py", *args]
    flag_values = flags.FlagValues()
    launch.define_flags(flag_values, argv)
    launch.parse_flags(argv, flag_values)
    return launch.resolve_config(flag_values)

  def test_a_relative_file_path_registers_the_pe_and_its_fields(self):
    with contextlib.chdir(self.root):
      config, overrides, _ = self._resolve("--pe_module=my_pe.py", "--pe=CLI_File_Decay",
                                           "--config.pe.decay_rate=0.25")
    pe = decoder_from_config.pe_config_from(config)
    self.assertEqual((type(pe).__name__, pe.decay_rate), ("FileDecayConfig", 0.25))
    self.assertEqual(config.pe.name, "cli_file_decay")
    self.assertEqual(config.pe_modules, str(self.pe_file))  # Recorded as an absolute path.
    self.assertEqual(overrides["pe_modules"], str(self.pe_file))

  def test_help_with_the_module_lists_its_fields(self):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      self.assertEqual(launch.command_line(["launch.py", f"--pe_module={self.pe_file}",
                                            "--help"]), 0)
    self.assertRegex(out.getvalue(), r"--config.pe.decay_rate=None +Default per PE "
                                     r"\(cli_file_decay: 1.0\)\.")

  @pytest.mark.slow
  def test_the_run_records_it_and_eval_only_in_a_new_process_imports_it(self):
    workdir = self.root / "run"
    self.assertEqual(_launch(f"--pe_module={self.pe_file}", "--pe=cli_file_decay",
                             "--steps=2", f"--workdir={workdir}", *TINY), 0)
    recorded = json.loads((workdir / "config.json").read_text())
    self.assertEqual(recorded["pe_modules"], str(self.pe_file))
    proc = _run_launch(f"--workdir={workdir}", "--eval_only", "--eval_lens=64",
                       "--eval_name=again", "--config.eval.num_tokens=128", reexec=False)
    out, err = proc.communicate(timeout=300)
    self.assertEqual(proc.returncode, 0, err[-3000:])
    again = json.loads((workdir / "evals" / "again" / "results.json").read_text())
    self.assertEqual([r["length"] for r in again["perplexity"]["cli_file_decay"]], [64])


class RunRecordTest(absltest.TestCase):
  """A run directory is a record: settings fixed, evaluations never overwritten."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = pathlib.Path(tempfile.mkdtemp(prefix="run_record"))
    cls.workdir = cls.root / "alibi"
    cls.args = ["--pe=alibi", "--steps=4", f"--workdir={cls.workdir}", *TINY]
    assert _launch(*cls.args) == 0

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_other_training_settings_fail_before_anything_is_written(self):
    before = _listing(self.workdir)
    config_text = (self.workdir / "config.json").read_text()
    for args, field in ((["--pe=rope"], "pe.name: run has 'alibi', this command has 'rope'"),
                        (["--steps=5"], "train.steps: run has 4, this command has 5"),
                        (["--config.optim.weight_decay=0.0"], "optim.weight_decay")):
      with self.assertRaisesRegex(app.UsageError, field):
        _launch(*self.args, *args)
    self.assertEqual(_listing(self.workdir), before)
    self.assertEqual((self.workdir / "config.json").read_text(), config_text)

  def test_workdir_alone_reloads_the_runs_settings(self):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      self.assertEqual(_launch(f"--workdir={self.workdir}"), 0)
    self.assertIn("is a finished run with these settings", out.getvalue())

  @pytest.mark.slow
  def test_finished_run_rerun_and_eval_only_never_overwrite(self):
    results = (self.workdir / "results.json").read_text()
    self.assertEqual(_launch(*self.args), 0)  # Same command: prints the recorded results.
    self.assertEqual(_launch(*self.args, "--eval_lens=64,128"), 0)  # Other eval settings.
    self.assertEqual(_launch(f"--workdir={self.workdir}", "--eval_only", "--eval_lens=128",
                             "--eval_name=long"), 0)
    with self.assertRaisesRegex(app.UsageError, "already exists"):
      _launch(f"--workdir={self.workdir}", "--eval_only", "--eval_name=long")
    with self.assertRaisesRegex(app.UsageError, "pe.name is a training setting"):
      _launch(f"--workdir={self.workdir}", "--eval_only", "--pe=rope")
    self.assertEqual((self.workdir / "results.json").read_text(), results)
    evals = sorted(p.name for p in (self.workdir / "evals").iterdir())
    self.assertLen(evals, 2)
    self.assertIn("long", evals)
    long = json.loads((self.workdir / "evals" / "long" / "results.json").read_text())
    self.assertEqual([r["length"] for r in long["perplexity"]["alibi"]], [128])
    self.assertEqual(long["meta"]["steps"], 4)
    records = [json.loads(l) for l in (self.workdir / "metrics.jsonl").read_text().splitlines()]
    names = [r["metrics"]["name"] for r in records if r["split"] == "evaluation"]
    self.assertEqual(names[0], "results")
    self.assertIn("long", names)
    self.assertLen(names, 3)
    self.assertIn("alibi/nonoverlap/ppl@128", records[-1]["metrics"])

  @pytest.mark.slow
  def test_outputs_final_numbers_loss_plot_and_tensorboard(self):
    results = json.loads((self.workdir / "results.json").read_text())
    record = results["meta"]["provenance"]  # Where the numbers come from.
    self.assertEqual(record["commit"], provenance.code_version(ROOT)["commit"])
    if provenance.code_version(ROOT)["commit"] is not None:  # A checkout git can read.
      self.assertRegex(record["commit"], r"^[0-9a-f]{40}$")
    self.assertEqual(record["versions"]["jax"], jax.__version__)
    self.assertEqual(record["machine"], results["meta"]["machine"])
    self.assertGreater(record["wall_time_s"], 0)
    final = results["meta"]["final"]
    self.assertEqual(final["train_window"], [3, 4])
    self.assertEqual(final["valid_step"], 4)
    self.assertGreater(final["valid_loss"], 0)
    text = (self.workdir / "results.md").read_text()
    self.assertIn(f"final train loss {final['train_loss']:.3f} (window mean, steps 3-4)", text)
    self.assertIn(f"validation loss {final['valid_loss']:.3f} (L=32, step 4)", text)
    self.assertTrue((self.workdir / "loss_vs_step.png").stat().st_size > 1000)
    try:
      import tensorboardX  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      self.skipTest("tensorboardX not installed (optional)")
    events = list((self.workdir / "tensorboard").glob("events.out.tfevents.*"))
    self.assertNotEmpty(events)
    self.assertIn(b"train/loss", b"".join(e.read_bytes() for e in events))


class RulerEvaluationTest(absltest.TestCase):

  @pytest.mark.slow
  def test_a_run_and_its_eval_only_write_ruler_scores(self):
    workdir = pathlib.Path(self.create_tempdir().full_path) / "run"
    self.assertEqual(_launch(*TINY, "--steps=2", f"--workdir={workdir}", "--eval_lens=420",
                             "--config.eval.ruler=niah_multikey_2",
                             "--config.eval.ruler_examples=1"), 0)
    record = json.loads((workdir / "ruler.json").read_text())
    (cell,) = record["ruler"]
    self.assertEqual((cell["task"], cell["length"], cell["examples"], cell["status"]),
                     ("niah_multikey_2", 420, 1, "ok"))
    self.assertBetween(cell["accuracy"], 0.0, 1.0)
    self.assertEqual(record["tokenizer"], "bytes")
    self.assertIn("provenance", record["meta"])
    self.assertEqual((workdir / "ruler_accuracy.png").read_bytes()[:4], b"\x89PNG")
    self.assertIn("RULER (greedy; score at each length)", (workdir / "results.md").read_text())
    # --eval_only with another task and length: a new evals/<name>/ with its own ruler.json.
    self.assertEqual(_launch(f"--workdir={workdir}", "--eval_only", "--eval_lens=700",
                             "--eval_name=fwe", "--config.eval.ruler=fwe"), 0)
    again = json.loads((workdir / "evals" / "fwe" / "ruler.json").read_text())
    self.assertEqual([(c["task"], c["length"]) for c in again["ruler"]], [("fwe", 700)])


class ConfigFilesTest(absltest.TestCase):

  @pytest.mark.slow
  def test_every_shipped_config_runs_a_few_steps(self):
    configs = sorted((ROOT / "experiments" / "configs").glob("*.py"))
    self.assertContainsSubset({"default", "quick", *launch.study_names()},
                              {p.stem for p in configs})  # One per study.
    scratch = pathlib.Path(self.create_tempdir().full_path)
    for path in configs:
      with self.subTest(config=path.name):
        if "study" in launch.load_config_file(str(path)):
          # Resolved to the study with the overrides; the study's own smoke test trains it.
          module = __import__(f"experiments.{path.stem}", fromlist=["run"])
          seen = []
          with mock.patch.object(module, "run", seen.append):
            self.assertEqual(_launch(f"--config={path}", "--config.model.d_model=32"), 0)
          self.assertLen(seen, 1)
          self.assertEqual(dict(seen[0].overrides), {"model.d_model": 32})
        else:
          workdir = scratch / path.stem
          self.assertEqual(_launch(f"--config={path}", f"--workdir={workdir}", *TINY,
                                   "--steps=2", "--eval_lens=64"), 0)
          self.assertTrue(run_directory.is_finished(workdir))


class StudyOptionsTest(absltest.TestCase):

  def test_study_aliases_reach_the_study_options(self):
    from experiments import kazemnejad_suite  # pylint: disable=g-import-not-at-top
    seen = []
    with mock.patch.object(kazemnejad_suite, "run", seen.append):
      self.assertEqual(_launch("--study=kazemnejad_suite", "--quick", "--seeds=0,2",
                               "--pes=rope,alibi", "--runs_dir=/tmp/models", "--workdir=/tmp/r",
                               "--config.model.d_model=32"), 0)
    options = seen[0]
    self.assertEqual((options.quick, options.seeds, options.pes, options.runs_dir,
                      options.workdir), (True, (0, 2), ("rope", "alibi"), "/tmp/models", "/tmp/r"))
    self.assertEqual(dict(options.overrides), {"model.d_model": 32})
    self.assertEqual(options.steps, 0)  # The study's own cap.
    self.assertEqual(options.shard, ())
    with mock.patch.object(kazemnejad_suite, "run", seen.append):
      self.assertEqual(_launch("--study=kazemnejad_suite", "--shard=1/2", "--workdir=/tmp/r"), 0)
    self.assertEqual(seen[1].shard, (1, 2))
    self.assertFalse(seen[1].progress)
    with mock.patch.object(kazemnejad_suite, "run", seen.append):
      self.assertEqual(_launch("--study=kazemnejad_suite", "--progress", "--workdir=/tmp/r"), 0)
    self.assertTrue(seen[2].progress)

  def test_steps_sets_the_step_cap_of_a_convergence_study(self):
    from experiments import kazemnejad_suite  # pylint: disable=g-import-not-at-top
    from experiments import length_generalization  # pylint: disable=g-import-not-at-top
    seen = []
    with mock.patch.object(length_generalization, "run", seen.append):
      self.assertEqual(_launch("--study=length_generalization", "--steps=6000"), 0)
    options = seen[0]
    self.assertEqual(options.steps, 6000)
    self.assertEqual(length_generalization.recipe_for(options).max_steps, 6000)
    config = kazemnejad_suite.base_config(options)
    self.assertEqual(kazemnejad_suite.settings_for(options, config).recipe.max_steps, 6000)


class ExperimentTest(absltest.TestCase):

  def test_run_names_are_readable(self):
    config = _tiny_config("")
    self.assertRegex(run_directory.run_name(config), r"^rope-L32-stdlib-[0-9a-f]{6}$")
    config.pe.scaling, config.pe.factor = "yarn", 4.0
    self.assertRegex(str(run_directory.default_workdir(config)),
                     r"^runs/rope-yarnx4-L32-stdlib-[0-9a-f]{6}$")
    other = _tiny_config("", **{"optim.weight_decay": 0.0})
    self.assertNotEqual(run_directory.run_name(other), run_directory.run_name(_tiny_config("")))

  def test_old_run_records_are_read_with_the_new_pe_field_names(self):
    workdir = pathlib.Path(self.create_tempdir().full_path)
    saved = json.loads(_tiny_config(workdir).to_json_best_effort())
    kept = {k: v for k, v in saved["pe"].items() if v is not None}  # name, randomized positions
    saved["pe"] = {**kept, "rope_base": 500000.0, "rope_layout": "half", "rope_fraction": 1.0,
                   "rope_scaling": "yarn", "rope_factor": 4.0, "rope_original_max_position": 0,
                   "max_position": 0, "t5_num_buckets": 32, "t5_max_distance": 128}
    (workdir / run_directory.CONFIG_FILENAME).write_text(json.dumps(saved))
    config = run_directory.load_run_config(workdir)
    self.assertEqual((config.pe.base, config.pe.scaling, config.pe.factor),
                     (500000.0, "yarn", 4.0))
    for field in ("layout", "fraction", "original_max_position", "max_position", "num_buckets",
                  "max_distance"):  # Old defaults: unset, i.e. the PE's (same) defaults.
      self.assertIsNone(config.pe[field], field)
    self.assertNotIn("rope_base", config.pe)
    pe = decoder_from_config.pe_config_from(config)
    self.assertEqual((pe.base, pe.scaling.name, pe.scaling.factor), (500000.0, "yarn", 4.0))
    self.assertEqual(pe.scaling.original_max_position, 32)  # 0 meant data.train_len.
    # The same run, reopened with the current names, is the same run (no settings differ).
    self.assertEqual(run_directory.open_run(config), workdir)

  @pytest.mark.slow
  def test_preempted_resume_falls_back_past_a_corrupt_checkpoint(self):
    workdir = pathlib.Path(self.create_tempdir().full_path)
    config = _tiny_config(workdir, **{"train.checkpoint_every": 2, "train.steps": 6,
                                      "eval.lens": "32"})

    def stop_at_5(step, metrics):
      if step == 5:
        os.kill(os.getpid(), signal.SIGTERM)

    first = experiment.train_and_evaluate(config, log=lambda s: None, step_callbacks=[stop_at_5])
    self.assertEqual((first.stop_reason, first.train.final_step), ("SIGTERM", 5))
    self.assertEqual(first.tables, {})  # Not evaluated.
    self.assertFalse((workdir / "results.json").exists())
    self.assertEqual(run_directory.run_status(workdir)["state"], "preempted")
    # An independent check truncates the newest checkpoint's files.
    for path in (workdir / "checkpoints" / "5").rglob("*"):
      if path.is_file():
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    lines = []
    second = experiment.train_and_evaluate(config, log=lines.append)
    self.assertEqual((second.train.start_step, second.train.final_step), (4, 6))
    self.assertTrue(any("checkpoint step 5" in l and "unreadable" in l and "step 4" in l
                        for l in lines), lines)
    self.assertTrue(run_directory.is_finished(workdir))
    self.assertTrue((workdir / "checkpoints" / "5.unreadable").is_dir())

  @pytest.mark.slow
  def test_learned_pe_past_table_and_zero_shot_scaling_label_has_the_factor(self):
    workdir = self.create_tempdir().full_path
    result = experiment.train_and_evaluate(
        _tiny_config(workdir, **{"pe.name": "learned", "train.steps": 2, "eval.lens": "64"}),
        log=lambda s: None)
    self.assertIn("n/a (table size 32)", result.text)
    workdir = self.create_tempdir().full_path
    result = experiment.train_and_evaluate(
        _tiny_config(workdir, **{"train.steps": 2, "eval.rope_scaling": "yarn",
                                 "eval.lens": "64"}),
        log=lambda s: None)
    self.assertIn("rope + zero-shot yarn x2", result.text)
    self.assertLen(result.tables, 2)

  @pytest.mark.slow
  def test_fine_tune_from_another_run_with_yarn_and_its_original_length(self):
    source = self.create_tempdir().full_path
    experiment.train_and_evaluate(_tiny_config(source, **{"train.steps": 2}), log=lambda s: None)
    lines = []
    target = self.create_tempdir().full_path
    result = experiment.train_and_evaluate(
        _tiny_config(target, **{"train.steps": 2, "train.init_from": source,
                                "pe.scaling": "yarn", "pe.factor": 2.0,
                                "pe.original_max_position": 32, "data.train_len": 64,
                                "eval.lens": "64"}), log=lines.append)
    self.assertTrue(any(line.startswith("initialized from") for line in lines))
    self.assertEqual(result.train.final_step, 2)
    self.assertIn("rope + yarn x2", result.tables)  # The legend label names the factor.
    with self.assertRaisesRegex(ValueError, "model.d_model"):
      experiment.train_and_evaluate(
          _tiny_config(self.create_tempdir().full_path,
                       **{"train.init_from": source, "model.d_model": 16}), log=lambda s: None)

  @pytest.mark.slow
  def test_synthetic_task_reports_accuracy(self):
    workdir = self.create_tempdir().full_path
    result = experiment.train_and_evaluate(
        _tiny_config(workdir, **{"data.name": "reverse", "train.steps": 2}), log=lambda s: None)
    rows = result.tables["rope"]
    self.assertEqual([r["length"] for r in rows], [32, 64])
    self.assertTrue(all(0.0 <= r["accuracy"] <= 1.0 for r in rows))


if __name__ == "__main__":
  absltest.main()
