"""The compile census (tests/compile_census.py): counters from JAX's events, and its summary."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

_PATH = pathlib.Path(__file__).with_name("compile_census.py")
_SPEC = importlib.util.spec_from_file_location("pejax_tests_compile_census_under_test", _PATH)
census_lib = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(census_lib)


def test_a_new_program_counts_one_trace_and_one_compile_and_a_cached_call_none():
  census = census_lib.Census()
  jax.monitoring.register_event_duration_secs_listener(census.on_duration)
  jax.monitoring.register_event_listener(census.on_event)
  try:
    census.take()

    def double_plus_seven(x):
      return 2 * x + 7

    f = jax.jit(double_plus_seven)
    f(jnp.arange(5.0)).block_until_ready()
    first = census.take()
    f(jnp.arange(5.0)).block_until_ready()  # The in-memory cache: nothing traced or compiled.
    second = census.take()
  finally:
    jax.monitoring.unregister_event_duration_listener(census.on_duration)
    jax.monitoring.unregister_event_listener(census.on_event)
  assert first["traces"] >= 1 and first["compiles"] >= 1
  assert first["by_function"].get("jit(double_plus_seven)") == 1
  assert second["traces"] == 0 and second["compiles"] == 0


def _record(test, **values):
  base = dict(test=test, wall_s=1.0, traces=1, trace_s=0.1, lower_s=0.1, compiles=1,
              compile_s=0.1, cache_hits=0, cache_misses=1, by_function={"jit(f)": 1})
  return {**base, **values}


def test_summary_ranks_files_and_tests_and_sums_them(tmp_path):
  lines = [_record("tests/a.py::t1", wall_s=5.0, compiles=40, by_function={"jit(g)": 40}),
           _record("tests/a.py::t2", wall_s=1.0),
           _record("tests/b.py::t3", wall_s=2.0, compiles=3)]
  (tmp_path / "census-gw0-1.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
  text = census_lib.summarize(census_lib.load(tmp_path), top=5)
  assert text.startswith("3 tests: wall_s 8, traces 3,")
  assert "compiles 44" in text.splitlines()[0]
  files = text.split("files by wall time")[1].split("tests by compiles")[0]
  assert files.index("tests/a.py") < files.index("tests/b.py")  # 6 s before 2 s.
  tests = text.split("tests by compiles")[1].splitlines()
  assert "tests/a.py::t1" in tests[1]
  assert "    40  jit(g)" in text


def test_an_empty_census_is_a_one_line_error_exit_2(tmp_path):
  result = subprocess.run([sys.executable, str(_PATH), str(tmp_path)], capture_output=True,
                          text=True, check=False)
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      "compile_census: no census records: run pytest with PEJAX_TEST_COMPILE_CENSUS=DIR first"]


@pytest.mark.slow
def test_the_plugin_writes_a_line_per_test_from_the_workers_only(tmp_path):
  test_file = tmp_path / "test_tiny.py"
  test_file.write_text("import jax, jax.numpy as jnp\n"
                       "def test_one():\n  jax.jit(lambda x: x + 1)(jnp.ones(3))\n"
                       "def test_two():\n  pass\n")
  census_dir = tmp_path / "census"
  conftest = pathlib.Path(__file__).with_name("conftest.py")
  (tmp_path / "conftest.py").write_text(conftest.read_text())
  for helper in ("xdist_scheduling.py", "compile_census.py"):
    (tmp_path / helper).write_text(pathlib.Path(__file__).with_name(helper).read_text())
  env = dict(__import__("os").environ, PEJAX_TEST_COMPILE_CENSUS=str(census_dir),
             PEJAX_TEST_JAX_CACHE="")
  result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-n", "2", str(test_file)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stdout[-3000:]
  records = census_lib.load(census_dir)
  assert sorted(r["test"].split("::")[-1] for r in records) == ["test_one", "test_two"]
  assert all(p.name.startswith("census-gw") for p in census_dir.iterdir())
  one = next(r for r in records if r["test"].endswith("test_one"))
  assert one["compiles"] >= 1
