"""Test-suite setup shared by every test module.

Speed: a suite of tiny models spends most of its time compiling, not running. Two settings
below cut that (``python -m pytest`` on 2 cores, see docs/tests.md):

* XLA's optimization passes are skipped (``jax_disable_most_optimizations``): they cost more
  than they save on programs that run for microseconds. Numbers stay within every test's
  tolerance; tests whose claim is bit-exactness of the *optimized* program carry
  ``@pytest.mark.xla_optimized`` and compile with the full pipeline. ``launch.py`` and study
  subprocesses run the full pipeline too, so the path users run is tested; the 8-device mesh
  worker takes this process's setting, since its results are compared with in-process ones.
* A persistent compilation cache shared by the xdist workers, by the subprocesses the tests
  start (``launch.py``, the mesh worker, studies: through the ``JAX_*`` environment variables set
  here) and by later runs: ``~/.cache/pejax/jax-compilation-cache/<host>`` (``$XDG_CACHE_HOME``
  if set; about 35 MB for one version of the code, 46 MB after a day of changes here; no size
  cap, since JAX's evicting cache takes a file lock on every read and write and made a cold run
  2.7x slower). ``PEJAX_TEST_JAX_CACHE=DIR`` moves the root, ``PEJAX_TEST_JAX_CACHE=`` turns it
  off (the cold-cache timings of experiments/results/HISTORY.md).

  ``<host>`` is a hash of the CPU (vendor, model, instruction-set flags) and of the Python, jax
  and jaxlib versions. JAX's cache key names neither the host CPU nor, reliably, its features: an
  XLA:CPU executable compiled on one machine and loaded on another (a home directory or cache
  folder that moves between machines, as a CI checker's may) can crash the loading process with
  a segmentation fault inside ``deserialize_executable``, which no ``except`` can catch. CI saw
  exactly that (2026-12-01) and then ran past its time limit. Each host and software version
  now reads only the executables it compiled itself.

  The CPU's family and model numbers are part of the fingerprint since 2026-12-06: a worker here
  (AMD EPYC family 23) died of a segmentation fault in ``deserialize_executable`` loading an
  executable compiled on another AMD EPYC (family 26) whose model name and flags were the same.

  An xdist worker also crashed twice, at random, inside the cache write
  (``put_executable_and_time``, 2026-12-02 and 2026-12-04; issue 44). Whatever the cause, the
  test a crashed worker was running is run once more in a replacement worker with the persistent
  cache off, reads and writes (``PEJAX_TEST_RERUN_AFTER_CRASH``, set by
  tests/xdist_scheduling.py), and listed at the end of the run. The likely cause, found
  2026-12-07, is a worker past Linux's limit of memory maps (``_release_compiled_programs``
  below); the rerun stays as the safety net.

The per-test watchdog (``timeout`` in ``setup.cfg``, pytest-timeout, thread method) turns a test
that hangs, in Python or inside XLA, into one failed test, its threads' stacks printed first by
``faulthandler_timeout``, instead of a CI run that stops only at its global time limit.
"""

import hashlib
import os
import pathlib
import platform
import re

# Tests run on the CPU with deterministic float32 math; set before jax is imported anywhere.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags
import jax
import jaxlib
import pytest

# absltest / chex helpers read absl flags; under pytest nobody parses them, so mark them parsed.
flags.FLAGS.mark_as_parsed()

jax.config.update("jax_disable_most_optimizations", True)


def host_fingerprint(cpuinfo: str | None = None) -> str:
  """16 hex digits naming this host's CPU and the Python / jax / jaxlib that compile for it.

  Executables in the persistent compilation cache are only valid for the machine code they were
  compiled to; the fingerprint keeps each (CPU, software) pair in its own cache folder.

  Args:
    cpuinfo: the text of ``/proc/cpuinfo``; read from this host when None.
  """
  parts = [platform.machine(), platform.python_version(), jax.__version__, jaxlib.__version__,
           platform.processor()]
  if cpuinfo is None:
    try:
      cpuinfo = pathlib.Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:  # Not Linux: platform.processor() above is all there is.
      cpuinfo = ""
  # The family and model numbers too: a generic model name ("AMD EPYC") with the same flags
  # covers CPUs that XLA:CPU tunes for differently (znver2 vs znver5), and an executable compiled
  # on one crashed the other when loaded (2026-12-06, below).
  for field in ("vendor_id", "model name", "cpu family", "model", "flags", "CPU implementer",
                "CPU part", "Features"):
    match = re.search(rf"^{re.escape(field)}\s*:\s*(.*)$", cpuinfo, flags=re.MULTILINE)
    parts.append(f"{field}={match.group(1).strip() if match else ''}")
  return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


_USER_CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
_CACHE_ROOT = os.environ.get("PEJAX_TEST_JAX_CACHE",
                             str(_USER_CACHE / "pejax" / "jax-compilation-cache"))
_CACHE_DIR = str(pathlib.Path(_CACHE_ROOT) / host_fingerprint()) if _CACHE_ROOT else ""
# A worker that replaces one that crashed (tests/xdist_scheduling.py) neither reads nor writes
# the persistent cache (the crashes were in both), nor do the subprocesses it starts.
_RERUN_AFTER_CRASH = bool(os.environ.get("PEJAX_TEST_RERUN_AFTER_CRASH"))
if _RERUN_AFTER_CRASH:
  os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)  # Inherited from the controller.
  os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
  jax.config.update("jax_enable_compilation_cache", False)
elif _CACHE_DIR:
  # Environment variables so that subprocesses share the cache; jax.config for this process.
  os.environ.update(JAX_COMPILATION_CACHE_DIR=_CACHE_DIR,
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                    JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  jax.config.update("jax_compilation_cache_dir", _CACHE_DIR)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

# XLA:CPU's fusion emitters (its newer code generator for fused loops) cost most of a cold
# compile of these tiny programs: the gradient of a 2-layer d=16 decoder compiled in 1.75 s of
# CPU with them and 0.49 s without at L = 64, 4.67 s and 1.63 s at L = 640; the cold run of
# tests/nn/test_kv_cache_kinds.py took 453 s of CPU with them and 275 s without, every test
# passing (2 cores, 2026-12-07). The tests' programs compile without them: the flag goes to this
# process's CPU client, which reads XLA_FLAGS once, when it is created (here), and
# PEJAX_TEST_XLA_FLAGS carries it to subprocesses whose results are compared with this
# process's (the mesh and multi-process workers). launch.py and the studies started as
# subprocesses keep XLA's defaults, the path users run.
# XLA kills the process on a flag it does not know, so the flag is given only to the jaxlib
# versions it was checked with (setup.cfg allows jax >= 0.7); others compile with XLA's defaults.
_FLAG_CHECKED_JAXLIB = ("0.10.",)


def xla_flags_for_tests(jaxlib_version: str) -> str:
  """The XLA flags the tests compile with under ``jaxlib_version`` ("" for an unchecked one)."""
  return ("--xla_cpu_use_fusion_emitters=false"
          if jaxlib_version.startswith(_FLAG_CHECKED_JAXLIB) else "")


TEST_XLA_FLAGS = xla_flags_for_tests(jaxlib.__version__)
os.environ["PEJAX_TEST_XLA_FLAGS"] = TEST_XLA_FLAGS
if TEST_XLA_FLAGS:
  _USER_XLA_FLAGS = os.environ.get("XLA_FLAGS")
  os.environ["XLA_FLAGS"] = f"{_USER_XLA_FLAGS or ''} {TEST_XLA_FLAGS}".strip()
  try:
    jax.devices()  # Creates the CPU client now, with the flag.
  finally:
    if _USER_XLA_FLAGS is None:
      del os.environ["XLA_FLAGS"]
    else:
      os.environ["XLA_FLAGS"] = _USER_XLA_FLAGS


@pytest.fixture(autouse=True)
def _xla_optimized(request):
  """Compiles with XLA's full optimization pipeline inside tests marked ``xla_optimized``."""
  if request.node.get_closest_marker("xla_optimized") is None:
    yield
    return
  # The flag is not part of JAX's in-memory cache keys: drop what was compiled under the other
  # setting (eager primitives included) on the way in and out. The persistent cache keys do
  # include the optimization level.
  jax.clear_caches()
  jax.config.update("jax_disable_most_optimizations", False)
  try:
    yield
  finally:
    jax.clear_caches()
    jax.config.update("jax_disable_most_optimizations", True)


# --- Compiled programs live as long as their test module --------------------------------------
# Every executable XLA:CPU loads maps its code and data into the process: about 6.5 memory maps
# each (measured: 300 jitted functions kept alive, 436 -> 2456 maps). jax.jit keeps every
# program it compiled for as long as the function object lives, and a test module's jitted
# functions live at module level, so an xdist worker that runs half of the suite accumulated
# 50,356 maps (2026-12-07, full suite, 5.9 GB resident). Linux refuses a process more than
# vm.max_map_count maps (65,530 by default): past it every mmap fails, so XLA crashes inside
# whatever maps memory next (a segmentation fault in the persistent cache's executable load or
# write, the "random" crashes of 2026-12-02, -04 and -06) and Python cannot start a thread
# ("RuntimeError: can't start new thread" in Orbax, CI of 2026-12-07). Releasing them at the
# end of each module bounds a worker's maps by its largest module's.
_MAP_WARNING = 30_000


def process_memory_maps() -> int | None:
  """How many memory maps this process has (None where /proc is not available)."""
  try:
    with open(f"/proc/{os.getpid()}/maps", "rb") as maps:
      return sum(1 for _ in maps)
  except OSError:
    return None


def release_compiled_programs(owner: str, *, warn_above: int = _MAP_WARNING) -> int | None:
  """Drops every compiled program of this process (``jax.clear_caches``).

  Args:
    owner: what compiled them (a module name), for the warning.
    warn_above: warn when the process had more memory maps than this before the release.

  Returns:
    The memory maps before the release (None without /proc).
  """
  maps = process_memory_maps()
  if maps is not None and maps > warn_above:
    import warnings  # pylint: disable=import-outside-toplevel
    warnings.warn(f"{owner} left this process with {maps} memory maps (Linux's default limit "
                  "is 65,530): it compiles too many programs for one module; split it or share "
                  "its jitted functions", stacklevel=2)
  jax.clear_caches()
  return maps


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs(request):
  """Drops the module's compiled programs once its tests are done."""
  yield
  release_compiled_programs(request.module.__name__)


# --- xdist: a crashed worker neither hangs the run nor fails a test at random: its test is run
# once more, in a replacement worker without cache writes (tests/xdist_scheduling.py)
def load_test_module(name: str):
  """tests/<name>.py as a module (the tests directory is not a package)."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  path = pathlib.Path(__file__).with_name(f"{name}.py")
  spec = importlib.util.spec_from_file_location(f"pejax_tests_{name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def load_xdist_scheduling():
  """tests/xdist_scheduling.py as a module."""
  return load_test_module("xdist_scheduling")


_XDIST_SCHEDULING = load_xdist_scheduling()
pytest_xdist_make_scheduler = _XDIST_SCHEDULING.pytest_xdist_make_scheduler
pytest_terminal_summary = _XDIST_SCHEDULING.pytest_terminal_summary


# --- Hypothesis profiles of the fuzz suite (tests/fuzz, issue 16) ------------------------------
# "default": few draws, no deadline (the first draw compiles), derandomized (deterministic CI).
# "long": many random draws; select it with --hypothesis-profile=long or HYPOTHESIS_PROFILE=long.
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=15, deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large))
settings.register_profile(
    "long", max_examples=1000, deadline=None, derandomize=False, print_blob=True,
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
# --- end of the hypothesis profiles ------------------------------------------------------------


# --- Compile census (PEJAX_TEST_COMPILE_CENSUS=DIR): per-test traces, compiles and cache hits ---
def pytest_configure(config):
  census_dir = os.environ.get("PEJAX_TEST_COMPILE_CENSUS")
  # Under xdist the controller only relays the workers' reports: it compiles nothing itself.
  is_controller = bool(getattr(config.option, "numprocesses", None)) and not hasattr(
      config, "workerinput")
  if census_dir and not is_controller:
    census = load_test_module("compile_census")
    config.pluginmanager.register(census.CensusPlugin(census_dir), "pejax_compile_census")
