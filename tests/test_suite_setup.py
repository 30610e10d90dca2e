"""Tests of the suite's own setup (tests/conftest.py, setup.cfg): the compilation cache folder is
private to one host CPU and software version, and a hung test is stopped by a watchdog."""

from __future__ import annotations

import configparser
import os
import pathlib
import re
import sys

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


def test_the_cache_folder_of_this_process_and_its_subprocesses_is_this_hosts(conftest_module):
  cache_dir = jax.config.jax_compilation_cache_dir
  if not os.environ.get("PEJAX_TEST_JAX_CACHE", "unset"):
    pytest.skip("PEJAX_TEST_JAX_CACHE= turned the persistent cache off")
  assert pathlib.Path(cache_dir).name == conftest_module.host_fingerprint(), cache_dir
  assert os.environ["JAX_COMPILATION_CACHE_DIR"] == cache_dir  # What subprocesses read.


def test_a_hung_test_is_stopped_by_the_watchdog():
  config = configparser.ConfigParser()
  config.read(ROOT / "setup.cfg")
  pytest_section = config["tool:pytest"]
  assert 60 <= int(pytest_section["timeout"]) <= 1200
  assert pytest_section["timeout_method"] == "thread"  # Also stops a hang inside C++.
  assert "pytest-timeout" in config["options.extras_require"]["test"]
  assert "pytest_timeout" in sys.modules  # The plugin is installed and loaded.
