"""Every command line printed in the documentation runs: README.md, docs/*.md, CONTRIBUTING.md and
the docstrings of launch.py and the studies.

The commands are extracted from the text (so the documentation cannot drift from the code) and
executed in-process through ``launch.run`` / ``pejax.compare.main``, the functions the command
line calls, in a scratch directory, with a tiny model appended (later flags win), in the order
they are printed (an ``--eval_only`` example evaluates the run the previous example trained).

What "runs" means per kind of command:
  * training / evaluation / compare commands: executed to the end (exit status 0).
  * study commands (``--study=...``, ``python -m experiments.<name>``): parsed and resolved to
    the study's ``StudyOptions`` by the same ``launch.run``; the study's ``run(options)`` itself
    is replaced by a recorder here, because each study's smoke test in tests/experiments/ runs it
    with tiny settings (a real --quick study takes minutes).
  * commands that need devices or hosts this machine lacks (a mesh of 8 devices, a multi-host
    ``--config.mesh.distributed`` / coordinator start): flags parsed and config resolved.
  * ``python -m pejax.parallel.local_cluster ... -- python launch.py ...`` (several processes on
    this machine, with their own fake devices): run to the end, the tiny model appended to the
    launch.py part.
  * ``python -m pejax.hf.kv_cache_memory_table``: run; the documentation holds what it prints.
Usage synopses (text with ``<placeholder>``, ``[optional]`` or ``...`` parts) and non-pejax commands
(pip, pytest, tensorboard, srun/gcloud wrappers are unwrapped to their launch.py part) are not
commands to run, nor is text inside a ```` ```python ```` block of a markdown file (Python code,
not a shell). The relative links of the documentation must name files that exist.

The ```` ```python ```` blocks of the markdown files run too (``test_python_examples_run``): one
Python process per file runs that file's blocks in order (a later block uses the names of earlier
ones), with 8 fake CPU devices (the mesh example of docs/scaling_out.md needs them; every other
example runs on device 0), in a scratch directory that links to each entry of the repository
root, so that the examples read ``tests/hf/fixtures/...`` as a user of a checkout would and what
they write (``out/...``) lands in the scratch directory. A block that cannot run on a test
machine is preceded by a line ``<!-- not run: <reason> -->``; the test prints these reasons and
``test_python_blocks_run_or_say_why_not`` requires one, non-empty, for every block it skips.
"""

import contextlib
import fnmatch
import glob
import io
import os
import pathlib
import re
import shlex
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import pytest

from experiments import studies
import launch
from pejax import compare
from pejax import sample
from pejax.hf import export
from pejax.nn import pe_names
from pejax.nn.positional import interface
from pejax.parallel import local_cluster

ROOT = pathlib.Path(__file__).resolve().parents[1]
STUDIES = studies.STUDIES
TINY = ["--config.model.num_layers=1", "--config.model.d_model=32", "--config.model.num_heads=2",
        "--config.data.batch_size=4", "--train_len=32", "--steps=2",
        "--config.optim.warmup_steps=1", "--config.train.log_every=1",
        "--config.eval.num_tokens=64", "--eval_lens=64"]
TINY_EVAL = ["--config.eval.num_tokens=64", "--eval_lens=64"]


def _command_lines(text: str) -> list[str]:
  """``python launch.py ...`` / ``python -m ...`` commands in code blocks and inline code."""
  text = re.sub(r"```python\n.*?```", "", text, flags=re.S)  # Python code, not shell commands.
  text = text.replace("\\\n", " ")  # Continued lines.
  commands = []
  for chunk in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S) + re.findall(
      r"`([^`\n]*python [^`\n]*)`", text):
    for line in chunk.splitlines():
      commands.append(line)
  for line in text.splitlines():  # Indented examples in docstrings.
    if re.match(r"^\s{4}python ", line):
      commands.append(line)
  found = []
  for line in commands:
    match = re.search(r"python (launch\.py|-m (?:pejax\.compare|pejax\.parallel\.local_cluster|"
                      r"pejax\.hf\.kv_cache_memory_table|pejax\.sample|pejax\.hf\.export|"
                      r"experiments\.\w+))(.*)", line)
    if not match:
      continue
    command = (match.group(0).split(" #")[0]).strip().rstrip('"').rstrip("&").strip()
    if "<" in command or "[" in command or "..." in command:
      continue  # A usage synopsis, not a command.
    words = command.split()
    if any(re.fullmatch(r"[A-Z][A-Z_]+", w) for w in words):
      continue  # A synopsis with placeholders (RUN, OUT, RUN_DIR).
    if re.search(r"-m pejax\.(sample|hf\.export)$", command):
      continue  # The command's name in prose, not a command.
    if command not in found:
      found.append(command)
  return found


def markdown_sources() -> list[str]:
  """The documentation whose commands run: README.md, the guides in docs/, CONTRIBUTING.md."""
  guides = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
  return ["README.md", *guides, "CONTRIBUTING.md"]


def documented_commands() -> list[tuple[str, str]]:
  """``(source, command)`` for every command in the markdown sources and the docstrings, in order."""
  sources = [(name, (ROOT / name).read_text()) for name in markdown_sources()]
  sources.append(("launch.py", launch.__doc__))
  for name in STUDIES:
    sources.append((f"experiments/{name}.py", (ROOT / "experiments" / f"{name}.py").read_text()
                    .split('"""')[1]))
  out = []
  for source, text in sources:
    for command in _command_lines(text):
      if command not in [c for _, c in out]:
        out.append((source, command))
  return out


# A ```python block, with the `<!-- not run: reason -->` line directly before its fence if any.
_PYTHON_BLOCK = re.compile(
    r"(?:^<!--\s*not run:(?P<reason>[^\n]*?)-->\n)?^```python\n(?P<code>.*?)^```",
    flags=re.S | re.M)
PYTHON_EXAMPLE_DEVICES = 8  # Fake CPU devices of the process that runs a file's examples.


def python_blocks(text: str) -> list[tuple[int, str | None, str]]:
  """``(line, reason, code)`` of each ```python block of a markdown text, in order.

  ``line`` is the line number of the opening fence; ``reason`` is the text of a
  ``<!-- not run: reason -->`` line directly before the fence (stripped; None without one).
  """
  out = []
  for match in _PYTHON_BLOCK.finditer(text):
    reason = match.group("reason")
    line = text.count("\n", 0, match.start("code"))  # The fence's line, counted from 1.
    out.append((line, None if reason is None else reason.strip(), match.group("code")))
  return out


def python_example_code(name: str) -> str:
  """The runnable ```python blocks of ``name`` (a markdown source), in order, as one program."""
  return "".join(f"# --- {name}, the block at line {line}\n{code}"
                 for line, reason, code in python_blocks((ROOT / name).read_text())
                 if reason is None)


PYTHON_CASES = tuple(
    (re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_"), name) for name in markdown_sources()
    if any(reason is None for _, reason, _ in python_blocks((ROOT / name).read_text())))


def _needs_absent_devices(args: list[str]) -> bool:
  joined = " ".join(args)
  return ("mesh.distributed" in joined or "coordinator_address" in joined
          or re.search(r"(mesh\.spec|--mesh)=\S*(data=(?!1\b)|model=|fsdp=)", joined) is not None)


def _workdir(command: str):
  return next((w.split("=", 1)[1] for w in shlex.split(command) if w.startswith("--workdir=")),
              None)


def _init_from_hf(command: str):
  return next((w.split("=", 1)[1] for w in shlex.split(command)
               if w.startswith("--init_from_hf=")), None)


def _reads_a_written_run(command: str) -> bool:
  """Whether ``command`` reads what an earlier documented command writes (not a committed file)."""
  source = _init_from_hf(command)
  if source is not None:
    return not source.startswith("tests/")
  return ("--eval_only" in command or "pejax.compare" in command
          or re.search(r"-m pejax\.(sample|hf\.export) ", command) is not None)


def _prerequisites(commands: list[str], index: int) -> list[str]:
  """The earlier commands that ``commands[index]`` reads the output of, in order.

  An ``--eval_only`` example evaluates the run that the latest earlier training command with
  the same ``--workdir`` wrote; ``pejax.compare <globs>`` reads every earlier run whose workdir
  matches a glob; ``pejax.sample RUN`` / ``pejax.hf.export RUN OUT`` read the run RUN; and
  ``--init_from_hf=OUT`` (not a committed fixture) reads what ``pejax.hf.export ... OUT`` wrote.
  """
  command = commands[index]
  earlier = [c for c in commands[:index] if "--eval_only" not in c and _workdir(c)]
  source = _init_from_hf(command)
  if source is not None:
    if source.startswith("tests/"):
      return []  # A committed fixture.
    exports = [i for i, c in enumerate(commands[:index])
               if "pejax.hf.export" in c and shlex.split(c)[4] == source][-1:]
    return [c for i in exports for c in (*_prerequisites(commands, i), commands[i])]
  if "--eval_only" in command:
    return [c for c in earlier if _workdir(c) == _workdir(command)][-1:]
  if re.search(r"-m pejax\.(sample|hf\.export) ", command):
    run = shlex.split(command)[3]
    return [c for c in earlier if _workdir(c) == run][-1:]
  if "pejax.compare" in command:
    patterns = [p for p in shlex.split(command)[3:] if not p.startswith("--")]
    return [c for c in earlier if any(fnmatch.fnmatch(_workdir(c), p) for p in patterns)]
  return []


def _python_file_from_docs(name: str) -> str | None:
  """The ```python block of the documentation that starts with the comment ``# <name>``."""
  for source in markdown_sources():
    for _, reason, code in python_blocks((ROOT / source).read_text()):
      if reason is None and code.startswith(f"# {name}"):
        return code
  return None


def _case_name(index: int, command: str) -> str:
  slug = re.sub(r"[^A-Za-z0-9]+", "_", command.replace("python ", "", 1)).strip("_")
  return f"{index:02d}_{slug[:70]}"


COMMAND_CASES = tuple((_case_name(i, c), i) for i, (_, c) in enumerate(documented_commands()))


class DocExamplesTest(parameterized.TestCase):

  def test_the_documentation_has_commands(self):
    commands = [c for _, c in documented_commands()]
    self.assertIn("python launch.py", commands)
    self.assertTrue(any("--eval_only" in c for c in commands))
    self.assertTrue(any("pejax.compare" in c for c in commands))
    self.assertTrue(any("--config=experiments/configs/" in c for c in commands))
    self.assertTrue(any("experiments.extrapolation" in c for c in commands))

  def test_quickstart_commands_are_the_ones_ci_runs(self):
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    self.assertIn("pip install -e . && python launch.py\n", blocks)
    test_command = 'pip install -e ".[test]" && python -m pytest -n 2'
    self.assertIn(test_command + "\n", blocks)
    self.assertIn(test_command + "\n", (ROOT / ".ci" / "run").read_text())

  def test_relative_links_name_existing_files(self):
    documents = [*markdown_sources(), "experiments/results/README.md",
                 "experiments/results/PROGRESS.md", "experiments/results/HISTORY.md"]
    for name in documents:
      path = ROOT / name
      text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
      for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
          continue  # A web address or an anchor of the same page.
        with self.subTest(document=name, link=target):
          self.assertTrue((path.parent / target.split("#")[0]).exists())

  @parameterized.named_parameters(*COMMAND_CASES)
  @pytest.mark.slow
  def test_documented_command_runs(self, index):
    # One case per command (so that pytest-xdist spreads them over the workers), each in its own
    # scratch directory after the commands it depends on (see _prerequisites).
    commands = [c for _, c in documented_commands()]
    scratch = self.create_tempdir().full_path
    recorded = []
    with contextlib.ExitStack() as stack:
      stack.enter_context(_chdir(scratch))
      for name in STUDIES:
        module = __import__(f"experiments.{name}", fromlist=["run"])
        stack.enter_context(mock.patch.object(
            module, "run", lambda options, _name=name: recorded.append((_name, options))))
      # A PE file a command imports (--pe_module=my_pe.py) registers a PE in this process;
      # later tests in this worker must not see it.
      pe_names()  # Every built-in PE registered (discovered once per process) before the copy.
      registry = dict(interface._REGISTRY)  # pylint: disable=protected-access
      modules = set(sys.modules)
      try:
        for prerequisite in _prerequisites(commands, index):
          self._run(prerequisite, recorded)
        self._run(commands[index], recorded)
      finally:
        interface._REGISTRY.clear()  # pylint: disable=protected-access
        interface._REGISTRY.update(registry)  # pylint: disable=protected-access
        for name in set(sys.modules) - modules:
          if name.startswith("pejax_pe_module_"):
            del sys.modules[name]

  def test_commands_that_read_a_run_have_the_command_that_writes_it(self):
    commands = [c for _, c in documented_commands()]
    readers = 0
    for index, command in enumerate(commands):
      if _reads_a_written_run(command):
        readers += 1
        with self.subTest(command=command):
          self.assertNotEmpty(_prerequisites(commands, index))
    # Among them the README's road out of pejax: sample, export, and read the export back.
    self.assertTrue(any("pejax.sample" in c for c in commands))
    self.assertTrue(any("pejax.hf.export" in c for c in commands))
    exported = [i for i, c in enumerate(commands)
                if _init_from_hf(c) and not _init_from_hf(c).startswith("tests/")]
    self.assertNotEmpty(exported)
    self.assertIn("pejax.hf.export", " ".join(_prerequisites(commands, exported[0])))
    self.assertGreater(readers, 3)

  def test_pe_module_files_of_the_docs_are_in_the_docs(self):
    for _, command in documented_commands():
      for word in shlex.split(command):
        if word.startswith("--pe_module=") and word.endswith(".py"):
          with self.subTest(command=command):
            self.assertIsNotNone(_python_file_from_docs(word.split("=", 1)[1]))

  def test_python_blocks_run_or_say_why_not(self):
    files_with_blocks = []
    for name in markdown_sources():
      text = (ROOT / name).read_text()
      blocks = python_blocks(text)
      with self.subTest(document=name):
        self.assertLen(blocks, text.count("```python\n"))  # Every fence opens a block.
        # A marker counts only directly before a fence.
        self.assertLen([b for b in blocks if b[1] is not None], text.count("<!-- not run"))
      for line, reason, code in blocks:
        with self.subTest(document=name, line=line):
          if reason is None:
            compile(code, f"{name}:{line}", "exec")  # Runs in test_python_examples_run.
          else:
            self.assertNotEmpty(reason, "a <!-- not run: ... --> marker must say why")
      if blocks:
        files_with_blocks.append(name)
    self.assertIn("CONTRIBUTING.md", files_with_blocks)
    self.assertIn("docs/decoder_and_pes.md", [name for _, name in PYTHON_CASES])

  @parameterized.named_parameters(*PYTHON_CASES)
  @pytest.mark.slow
  def test_python_examples_run(self, name):
    for line, reason, _ in python_blocks((ROOT / name).read_text()):
      if reason is not None:
        print(f"{name}, the block at line {line}: not run: {reason}")
    scratch = pathlib.Path(self.create_tempdir().full_path)
    for entry in ROOT.iterdir():  # The repository's files, read where a checkout has them.
      if not entry.name.startswith("."):
        (scratch / entry.name).symlink_to(entry)
    # The compilation cache of the suite comes through os.environ (tests/conftest.py sets it).
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), XLA_FLAGS=(
        os.environ.get("XLA_FLAGS", "")
        + f" --xla_force_host_platform_device_count={PYTHON_EXAMPLE_DEVICES}").strip())
    proc = subprocess.run([sys.executable, "-c", python_example_code(name)], cwd=scratch,
                          env=env, capture_output=True, text=True, timeout=300)
    self.assertEqual(proc.returncode, 0, f"the python examples of {name} failed:\n"
                     f"{proc.stderr[-6000:]}")

  def _run(self, command: str, recorded: list) -> None:
    words = shlex.split(command)
    if words[2:] == ["--help"]:  # absl prints this text (the subprocess test in test_launch).
      text = launch._help_doc()  # pylint: disable=protected-access
      self.assertIn("--config.model.d_model=128", text)
      return
    args = [w.replace("experiments/configs/", f"{ROOT}/experiments/configs/")
            .replace("tests/hf/fixtures/", f"{ROOT}/tests/hf/fixtures/")
            .replace("--data=README.md", f"--data={ROOT}/README.md") for w in words[2:]]
    for word in args:  # A PE file the documentation shows (# my_pe.py ...), saved as a user would.
      if word.startswith("--pe_module=") and word.endswith(".py"):
        path = pathlib.Path(word.split("=", 1)[1])
        if not path.exists():
          code = _python_file_from_docs(path.name)
          self.assertIsNotNone(code, f"{command}: no ```python block starting # {path.name}")
          path.write_text(code)
    if "--help" in args:  # With --pe_module: that PE's fields are listed too.
      registered = set(pe_names())
      with contextlib.redirect_stdout(io.StringIO()) as out:
        self.assertEqual(launch.command_line(["launch.py", *args]), 0, command)
      self.assertIn("--config.model.d_model=128", out.getvalue())
      for name in set(pe_names()) - registered:
        self.assertIn(f"({name}: ", out.getvalue())  # Its fields' defaults, per PE.
      return
    if words[1] == "-m" and words[2] == "pejax.compare":
      flags_given = [a for a in args[1:] if a.startswith("--")]
      runs = [p for a in args[1:] if not a.startswith("--") for p in sorted(glob.glob(a))]
      self.assertNotEmpty(runs, command)
      self.assertEqual(compare.main([*runs, *flags_given]), 0)
      out_dir = [a.split("=", 1)[1] for a in flags_given if a.startswith("--out_dir=")]
      self.assertNotEmpty(glob.glob(f"{out_dir[-1]}/compare.png" if out_dir
                                    else "*/compare/*/compare.png"), command)
      return
    if words[1] == "-m" and words[2] == "pejax.sample":
      # A short continuation: the tiny model's text is noise, the claim is the command runs.
      with contextlib.redirect_stdout(io.StringIO()) as out:
        self.assertEqual(sample.main([*args[1:], "--max_new_tokens=8"]), 0, command)
      prompt = args[args.index("--prompt") + 1] if "--prompt" in args else next(
          a.split("=", 1)[1] for a in args if a.startswith("--prompt="))
      self.assertTrue(out.getvalue().startswith(prompt), out.getvalue())
      return
    if words[1] == "-m" and words[2] == "pejax.hf.export":
      with contextlib.redirect_stdout(io.StringIO()):
        self.assertEqual(export.main(args[1:]), 0, command)
      for name in ("config.json", "model.safetensors", "tokenizer.json"):
        self.assertTrue((pathlib.Path(args[2]) / name).is_file(), f"{command}: no {name}")
      return
    if words[1] == "-m" and words[2] == "pejax.parallel.local_cluster":
      # The laptop multi-process command runs for real: N processes of launch.py on 127.0.0.1.
      split = args.index("--")
      inner = [str(ROOT / "launch.py") if w == "launch.py" else w for w in args[split + 1:]]
      self.assertEqual(inner[1], str(ROOT / "launch.py"), command)
      with mock.patch.dict(os.environ, {  # As in tests/parallel/test_multiprocess.py.
          "PEJAX_NO_RUNTIME_ENV": "1", "JAX_DISABLE_MOST_OPTIMIZATIONS": "1"}):
        code = local_cluster.main([*args[1:split], "--timeout_s=300", "--", *inner, *TINY])
      self.assertEqual(code, 0, command)
      return
    if words[1] == "-m" and words[2] == "pejax.hf.kv_cache_memory_table":
      # Prints the memory table of docs/long_context.md; tests/hf/test_kv_cache_memory.py checks
      # the copy.
      from pejax.hf import kv_cache_memory_table  # pylint: disable=import-outside-toplevel
      with contextlib.redirect_stdout(io.StringIO()) as out:
        self.assertEqual(kv_cache_memory_table.main(args[1:]), 0, command)
      self.assertTrue(any(out.getvalue() in (ROOT / name).read_text()
                          for name in markdown_sources()), command)
      return
    if words[1] == "-m" and words[2] == "experiments.image_grid":
      # Its own package and flags (no training config); tests/experiments/test_image_grid.py
      # runs it with tiny settings.
      self.assertTrue(callable(__import__("experiments.image_grid.__main__",
                                          fromlist=["main"]).main))
      return
    if words[1] == "-m" and words[2] == "experiments.algorithmic.leaderboard":
      # Rewrites the leaderboard from committed results (tests/experiments/test_leaderboard.py).
      self.assertTrue(callable(__import__(words[2], fromlist=["main"]).main))
      return
    if words[1] == "-m":  # python -m experiments.<name> ... == launch.py --study=<name> ...
      args = [f"--study={words[2].split('.')[1]}"] + args[1:]
    if any(a.startswith(("--study", "--config=" + str(ROOT) + "/experiments/configs/" + s))
           for a in args for s in STUDIES):
      before = len(recorded)
      self.assertEqual(launch.run(["launch.py", *args]), 0, command)
      self.assertLen(recorded, before + 1, command)
      name, options = recorded[-1]
      self.assertIn(name, command)
      self.assertEqual(options.quick, "--quick" in args or "study.quick=True" in command)
      self.assertEqual(options.progress, "--progress" in args)
      return
    if _needs_absent_devices(args):
      flag_values = launch.flags.FlagValues()
      launch.define_flags(flag_values, ["launch.py", *args])
      launch.parse_flags(["launch.py", *args], flag_values)
      config, _, _ = launch.resolve_config(flag_values)
      self.assertTrue(config.mesh.spec or config.mesh.distributed)
      return
    tiny = TINY_EVAL if "--eval_only" in args else TINY
    if any(a.startswith("--config.eval.ruler=") for a in args):  # Its own lengths (each task
      tiny = [t for t in tiny if not t.startswith("--eval_lens=")]  # has a smallest prompt),
      tiny.append("--config.eval.ruler_examples=1")  # one prompt a cell.
    pattern = [a.split("=", 1)[1].split(",") for a in args if a.startswith("--pe=")]
    if pattern and len(pattern[-1]) > 1 and tiny is TINY:  # A per-layer PE pattern: a layer
      tiny = [*TINY, f"--config.model.num_layers={len(pattern[-1])}"]  # per entry.
    self.assertEqual(launch.run(["launch.py", *args, *tiny]), 0, command)


@contextlib.contextmanager
def _chdir(path):
  previous = os.getcwd()
  os.chdir(path)
  try:
    yield
  finally:
    os.chdir(previous)


if __name__ == "__main__":
  absltest.main()
