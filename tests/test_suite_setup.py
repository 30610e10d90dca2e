"""Tests of the suite's own setup (tests/conftest.py, setup.cfg): the compilation cache folder is
private to one host CPU and software version, and a hung test is stopped by a watchdog."""

from __future__ import annotations

import configparser
import os
import pathlib
import re
import subprocess
import sys
import types

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 avx avx2 fma
"""
XEON = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum
flags\t\t: fpu sse sse2 avx avx2 fma avx512f amx_tile
"""


@pytest.fixture(name="conftest_module")
def _conftest_module(request):
  """The tests/ conftest module as pytest loaded it (import-mode=importlib has no package)."""
  for plugin in request.config.pluginmanager.get_plugins():
    if getattr(plugin, "__file__", None) == str(ROOT / "tests" / "conftest.py"):
      return plugin
  raise AssertionError("tests/conftest.py is not among pytest's plugins")


def test_the_fingerprint_names_the_cpu_and_its_instruction_set(conftest_module):
  epyc = conftest_module.host_fingerprint(EPYC)
  assert re.fullmatch(r"[0-9a-f]{16}", epyc), epyc
  assert conftest_module.host_fingerprint(EPYC) == epyc  # Deterministic.
  assert conftest_module.host_fingerprint(XEON) != epyc
  # The same model name with one more instruction-set flag is another machine code target.
  assert conftest_module.host_fingerprint(EPYC.replace("fma", "fma avx512f")) != epyc
  # So is another family / model with the same name and flags (Zen 2 vs Zen 5, 2026-12-06).
  zen2 = EPYC.replace("model name", "cpu family\t: 23\nmodel\t\t: 1\nmodel name")
  zen5 = EPYC.replace("model name", "cpu family\t: 26\nmodel\t\t: 2\nmodel name")
  assert len({conftest_module.host_fingerprint(zen2), conftest_module.host_fingerprint(zen5),
              epyc}) == 3


def test_the_cache_folder_of_this_process_and_its_subprocesses_is_this_hosts(conftest_module):
  cache_dir = jax.config.jax_compilation_cache_dir
  if not os.environ.get("PEJAX_TEST_JAX_CACHE", "unset"):
    pytest.skip("PEJAX_TEST_JAX_CACHE= turned the persistent cache off")
  if os.environ.get("PEJAX_TEST_RERUN_AFTER_CRASH"):
    pytest.skip("a replacement worker after a crash runs without the persistent cache")
  assert pathlib.Path(cache_dir).name == conftest_module.host_fingerprint(), cache_dir
  assert os.environ["JAX_COMPILATION_CACHE_DIR"] == cache_dir  # What subprocesses read.


def test_the_test_compiler_flags_stay_out_of_the_subprocesses_environment(conftest_module):
  """The tests compile without XLA:CPU's fusion emitters (conftest); launch.py and the studies
  that tests start as subprocesses inherit os.environ and so compile as users do."""
  assert os.environ["PEJAX_TEST_XLA_FLAGS"] == conftest_module.TEST_XLA_FLAGS
  assert "fusion_emitters" not in os.environ.get("XLA_FLAGS", "")
  # Only jaxlib versions it was checked with get the flag (XLA dies on an unknown one).
  assert conftest_module.xla_flags_for_tests("0.10.2") == "--xla_cpu_use_fusion_emitters=false"
  assert conftest_module.xla_flags_for_tests("0.7.2") == ""


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="memory maps are read in /proc")
def test_a_modules_compiled_programs_are_released_with_their_maps(conftest_module):
  """Executables kept alive by live jitted functions (as module-level ones are) hold memory maps
  until the release that runs after each module; past Linux's limit of 65,530 maps a worker
  crashed (CI of 2026-12-07)."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  conftest_module.release_compiled_programs("before")
  before = conftest_module.process_memory_maps()
  kept = [jax.jit(lambda x, i=i: jnp.sin(x) * i) for i in range(100)]
  for i, f in enumerate(kept):
    f(jnp.ones((i + 1,))).block_until_ready()  # 100 shapes: 100 programs.
  with pytest.warns(UserWarning, match=r"this_module left this process with \d+ memory maps"):
    grown = conftest_module.release_compiled_programs("this_module", warn_above=before + 100)
  assert grown > before + 300, (before, grown)  # ~6.5 maps a program here.
  after = conftest_module.process_memory_maps()
  assert after < before + 100, (before, grown, after)
  assert len(kept) == 100  # The functions are alive; their programs were released anyway.


def test_a_hung_test_is_stopped_by_the_watchdog():
  config = configparser.ConfigParser()
  config.read(ROOT / "setup.cfg")
  pytest_section = config["tool:pytest"]
  assert 60 <= int(pytest_section["timeout"]) <= 1200
  assert pytest_section["timeout_method"] == "thread"  # Also stops a hang inside C++.
  # The stacks are printed (faulthandler) before the watchdog exits the worker.
  assert 0 < int(pytest_section["faulthandler_timeout"]) < int(pytest_section["timeout"])
  assert "pytest-timeout" in config["options.extras_require"]["test"]
  assert "pytest_timeout" in sys.modules  # The plugin is installed and loaded.


_CRASH_SUITE = {
    "test_a.py": "def test_a1(): pass\ndef test_a2(): pass\ndef test_a3(): pass\n",
    "test_b.py": "import os\ndef test_crash(): os._exit(1)\ndef test_after(): pass\n",
    "test_c.py": ("import time\nclass TestC:\n  def test_c1(self): time.sleep(1)\n"
                  "  def test_c2(self): pass\ndef test_d(): pass\n"),
    "test_e.py": "import os\ndef test_e1(): pass\ndef test_e_crash(): os._exit(3)\n",
}


def _run_suite_with_the_scheduler(tmp_path, files, *pytest_args, timeout):
  """Runs ``files`` ({name: source}) in a pytest subprocess under tests/xdist_scheduling.py.

  Its conftest loads only that module (no jax import), so the run takes seconds.
  """
  for name, text in files.items():
    (tmp_path / name).write_text(text)
  scheduling = str(ROOT / "tests" / "xdist_scheduling.py")
  (tmp_path / "conftest.py").write_text(
      "import importlib.util\n"
      f"spec = importlib.util.spec_from_file_location('s', {scheduling!r})\n"
      "module = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(module)\n"
      "pytest_xdist_make_scheduler = module.pytest_xdist_make_scheduler\n"
      "pytest_terminal_summary = module.pytest_terminal_summary\n")
  env = {k: v for k, v in os.environ.items()
         if not k.startswith("PYTEST_") and k != "PEJAX_TEST_RERUN_AFTER_CRASH"}
  result = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "--dist", "loadscope", "-p", "no:cacheprovider",
       "-rA", *pytest_args, str(tmp_path)],
      cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout, check=False)
  return result.returncode, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_a_test_that_crashes_twice_fails_and_the_run_finishes(tmp_path, workers):
  # With xdist 3.8.0's own loadscope scheduler this run never ends (and reruns each crash).
  returncode, out = _run_suite_with_the_scheduler(tmp_path, _CRASH_SUITE, "-n", str(workers),
                                                  timeout=300)
  assert returncode == 1, out
  assert "2 failed, 8 passed" in out, out
  assert "PASSED test_b.py::test_after" in out, out  # The rest of the crashed scope ran.
  assert out.count("node down: ") == 4, out  # Each crash twice: once more, never a third time.
  assert "2 test(s) crashed their worker and were rerun" in out, out
  assert "test_b.py::test_crash: crashed its worker once" in out, out


_CRASHES_ONCE = {
    "test_a.py": "def test_a1(): pass\ndef test_a2(): pass\n",
    "test_f.py": (
        "import os, pathlib\n"
        "def test_before(): pass\n"
        "def test_flaky():\n"
        "  flag = pathlib.Path(__file__).with_name('crashed')\n"
        "  if not flag.exists():\n"
        "    flag.write_text('once')\n"
        "    os._exit(11)\n"
        "  # The rerun, in a replacement worker that knows it replaces a crashed one.\n"
        "  assert os.environ['PEJAX_TEST_RERUN_AFTER_CRASH'] == 'test_f.py::test_flaky'\n"
        "def test_after(): pass\n"),
    "test_g.py": "def test_g1(): pass\ndef test_g2(): pass\ndef test_g3(): pass\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_a_test_that_crashes_once_passes_on_its_rerun_and_is_listed(tmp_path, workers):
  # The random segmentation faults of JAX's cache write (issue 44): the run stays green, and
  # says what happened.
  returncode, out = _run_suite_with_the_scheduler(tmp_path, _CRASHES_ONCE, "-n", str(workers),
                                                  timeout=300)
  assert returncode == 0, out
  assert "8 passed" in out and "failed" not in out, out
  assert out.count("node down: ") == 1, out
  assert "PASSED test_f.py::test_flaky" in out, out
  assert "1 test(s) crashed their worker and were rerun" in out, out
  assert "test_f.py::test_flaky: crashed its worker once" in out, out


@pytest.mark.slow  # A subprocess (the fast tier's rule, docs/tests.md).
def test_a_replacement_worker_uses_no_compilation_cache(tmp_path):
  # tests/conftest.py in a process started with the scheduler's rerun variable, with the cache
  # folder the controller's environment carries.
  # Nothing of this worker's own cache settings: when this test runs in a replacement worker
  # (after another test crashed its worker), its environment says JAX_ENABLE_COMPILATION_CACHE=
  # false, which the first subprocess would otherwise inherit (CI failure of 2026-12-06).
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("PYTEST_", "JAX_PERSISTENT", "JAX_ENABLE_COMPILATION_CACHE"))}
  env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path / "inherited")
  code = ("import importlib.util, os, jax\n"
          f"spec = importlib.util.spec_from_file_location('c', {str(ROOT / 'tests' / 'conftest.py')!r})\n"
          "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
          "print(jax.config.jax_enable_compilation_cache,\n"
          "      os.environ.get('JAX_ENABLE_COMPILATION_CACHE', '-'),\n"
          "      os.environ.get('JAX_COMPILATION_CACHE_DIR', '-') != '-')\n")
  outputs = []
  for rerun in ("", "test_x.py::test_y"):
    env.update(PEJAX_TEST_RERUN_AFTER_CRASH=rerun, PEJAX_TEST_JAX_CACHE=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120, check=True)
    outputs.append(result.stdout.split())
  assert outputs[0] == ["True", "-", "True"]  # The shared cache, here and in subprocesses.
  assert outputs[1] == ["False", "false", "False"]  # No cache, reads or writes, anywhere.


@pytest.mark.slow
def test_the_watchdog_stops_a_hung_test_and_the_run_goes_on(tmp_path):
  # The CI scenario: a test hangs, the watchdog (thread method) exits its worker, and the
  # crash-safe scheduler lets the rest of the run finish.
  files = {"test_hang.py": "import time\ndef test_hangs(): time.sleep(600)\n"
                          "def test_after(): pass\n",
           "test_other.py": "def test_1(): pass\ndef test_2(): pass\n"}
  returncode, out = _run_suite_with_the_scheduler(
      tmp_path, files, "-n", "2", "-o", "timeout=4", "-o", "timeout_method=thread", "-o",
      "faulthandler_timeout=2", timeout=120)
  assert returncode == 1, out
  assert "1 failed, 3 passed" in out, out
  # faulthandler's dump of every thread, the hung test's frame in it.
  assert "Timeout (0:00:02)!" in out and "most recent call first" in out, out
  assert re.search(r'test_hang\.py", line 2 in test_hangs', out), out
  assert "PASSED test_hang.py::test_after" in out, out


class _FakeConfig:
  """What LoadScopeScheduling reads of pytest's config: two workers, no reordering."""

  class option:  # pylint: disable=invalid-name
    loadscopereorder = False

  def getvalue(self, name):
    return {"tx": ["2*popen"], "dist": "loadscope"}[name]


class _OneWorkerConfig(_FakeConfig):

  def getvalue(self, name):
    return {"tx": ["1*popen"], "dist": "loadscope"}[name]


class _FakeNode:
  """A worker as the scheduler sees it: the test indices it was sent, and a shutdown flag."""

  def __init__(self, name):
    self.name, self.sent, self.shutting_down, self.dead = name, [], False, False
    self.gateway = types.SimpleNamespace(id=name)

  def send_runtest_some(self, indices):
    assert indices, f"{self.name} was sent an empty work unit"
    if self.dead:  # What execnet raises once the worker process has exited.
      raise OSError("cannot send (already closed?)")
    self.sent.extend(indices)

  def shutdown(self):
    if self.dead:
      raise OSError("cannot send (already closed?)")
    self.shutting_down = True

  def __repr__(self):
    return self.name


def test_the_scheduler_replays_two_crashes_and_a_late_replacement_collection(
    conftest_module, monkeypatch):
  # The order of events that raised KeyError in xdist 3.8.0 on a fresh-clone CI run: both
  # workers crash, and the first replacement's collection arrives while the second
  # replacement is still collecting. Each crashed test is run once more, by a replacement; one
  # that crashes again is returned (xdist reports it failed) and never sent a third time.
  pytest.importorskip("xdist")
  monkeypatch.delenv("PEJAX_TEST_RERUN_AFTER_CRASH", raising=False)  # Restored afterwards.
  collection = [f"test_{m}.py::test_{i}" for m in "abc" for i in range(3)]
  module = conftest_module.load_xdist_scheduling()
  sched = module.pytest_xdist_make_scheduler(_FakeConfig(), None)
  gw0, gw1 = _FakeNode("gw0"), _FakeNode("gw1")
  for node in (gw0, gw1):
    sched.add_node(node)
    sched.add_node_collection(node, collection)
  sched.schedule()
  # Three modules, three tests each: gw0 holds a and c, gw1 holds b (at least two pending each).
  ran = []

  def complete(node, nodeid):
    sched.mark_test_complete(node, collection.index(nodeid))
    ran.append(nodeid)

  complete(gw0, "test_a.py::test_0")
  assert sched.remove_node(gw0) is None  # Crashes in test_a.py::test_1: to be rerun.
  assert os.environ["PEJAX_TEST_RERUN_AFTER_CRASH"] == "test_a.py::test_1"
  assert sched.remove_node(gw1) is None  # Crashes in its first test, test_b.py::test_0.
  assert module.RERUNS == ["test_a.py::test_1", "test_b.py::test_0"]
  assert not sched.tests_finished and sched.has_pending  # The reruns are still owed.
  gw2, gw3 = _FakeNode("gw2"), _FakeNode("gw3")
  sched.add_node(gw2)
  sched.add_node(gw3)
  sched.add_node_collection(gw2, collection)
  sched.schedule()  # gw3 has not collected yet: it must be left alone, not looked up.
  assert not gw3.sent and not gw3.shutting_down
  # The first replacement starts with the crashed tests and the rest of their modules.
  assert [collection[i] for i in gw2.sent] == ["test_a.py::test_1", "test_a.py::test_2",
                                                "test_b.py::test_0", "test_b.py::test_1",
                                                "test_b.py::test_2"]
  sched.add_node_collection(gw3, collection)
  sched.schedule()
  assert [collection[i] for i in gw3.sent] == [f"test_c.py::test_{i}" for i in range(3)]
  for nodeid in [collection[i] for i in gw3.sent]:
    complete(gw3, nodeid)
  assert gw3.shutting_down
  # test_a.py::test_1 crashes gw2 too: now it fails, and the rest of gw2's work moves on.
  assert sched.remove_node(gw2) == "test_a.py::test_1"
  assert module.RERUNS == ["test_a.py::test_1", "test_b.py::test_0"]
  gw4 = _FakeNode("gw4")
  sched.add_node(gw4)
  sched.add_node_collection(gw4, collection)
  sched.schedule()
  assert [collection[i] for i in gw4.sent] == ["test_a.py::test_2", "test_b.py::test_0",
                                                "test_b.py::test_1", "test_b.py::test_2"]
  for nodeid in [collection[i] for i in gw4.sent]:
    complete(gw4, nodeid)
  assert sched.tests_finished and gw4.shutting_down
  # Every test ran to completion once, except the one that crashed twice.
  assert sorted(ran) == sorted(set(collection) - {"test_a.py::test_1"})


def test_the_scheduler_survives_sending_to_a_worker_that_has_just_died(conftest_module,
                                                                      monkeypatch):
  # The order of events of an INTERNALERROR seen in this suite's own crash test: the worker
  # finishes a test, starts the next and crashes; the controller handles the completion first
  # and sends more work to the dead worker (OSError), then handles the crash.
  pytest.importorskip("xdist")
  monkeypatch.delenv("PEJAX_TEST_RERUN_AFTER_CRASH", raising=False)  # Restored afterwards.
  collection = [f"test_{m}.py::test_{i}" for m in "abc" for i in range(2)]
  module = conftest_module.load_xdist_scheduling()
  sched = module.pytest_xdist_make_scheduler(_OneWorkerConfig(), None)
  gw0 = _FakeNode("gw0")
  sched.add_node(gw0)
  sched.add_node_collection(gw0, collection)
  sched.schedule()
  assert [collection[i] for i in gw0.sent] == collection[:4]  # Modules a and b.
  sched.mark_test_complete(gw0, 0)
  gw0.dead = True  # It ran test_a.py::test_1, then crashed in test_b.py::test_0.
  sched.mark_test_complete(gw0, 1)  # Tops gw0 up with module c: the send fails.
  assert sched.remove_node(gw0) is None  # test_b.py::test_0 is run once more.
  gw1 = _FakeNode("gw1")
  sched.add_node(gw1)
  sched.add_node_collection(gw1, collection)
  sched.schedule()
  assert [collection[i] for i in gw1.sent] == ["test_b.py::test_0", "test_b.py::test_1",
                                                "test_c.py::test_0", "test_c.py::test_1"]
  for i in list(gw1.sent):
    sched.mark_test_complete(gw1, i)
  assert sched.tests_finished and gw1.shutting_down
