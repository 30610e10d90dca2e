"""Tests of pejax.runtime_env: the allocator tunables and the one-time re-execution."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
import pytest

from pejax import runtime_env

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROFILE = ("glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:"
           "glibc.malloc.trim_threshold=68719476736")


class RecommendedEnvTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(mock.patch.object(runtime_env, "_glibc_version", return_value=(2, 36)))
    self.enter_context(mock.patch.object(runtime_env.sys, "platform", "linux"))

  def test_empty_environment_gets_the_whole_profile(self):
    self.assertEqual(runtime_env.recommended_env({}), {"GLIBC_TUNABLES": PROFILE})

  def test_user_tunables_are_kept_and_never_overridden(self):
    env = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1"}
    self.assertEqual(
        runtime_env.recommended_env(env),
        {"GLIBC_TUNABLES": "glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1:"
                           "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"})

  def test_nothing_to_add_once_applied(self):
    self.assertEqual(runtime_env.recommended_env({"GLIBC_TUNABLES": PROFILE}), {})

  def test_not_glibc_or_too_old_or_not_linux(self):
    with mock.patch.object(runtime_env, "_glibc_version", return_value=None):
      self.assertEqual(runtime_env.recommended_env({}), {})
    with mock.patch.object(runtime_env, "_glibc_version", return_value=(2, 25)):
      self.assertEqual(runtime_env.recommended_env({}), {})
    with mock.patch.object(runtime_env.sys, "platform", "darwin"):
      self.assertEqual(runtime_env.recommended_env({}), {})


class ApplyRuntimeEnvTest(absltest.TestCase):

  def _run(self, **extra_env):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GLIBC_TUNABLES", runtime_env.MARKER, runtime_env.OPT_OUT)}
    code = ("from pejax import runtime_env; import os, sys; runtime_env.apply_runtime_env(); "
            "print(os.environ.get('GLIBC_TUNABLES'), os.environ.get(runtime_env.MARKER), "
            "sys.argv[1:])")
    return subprocess.run([sys.executable, "-c", code, "arg1", "--flag=2"], cwd=ROOT,
                          env={**env, **extra_env}, capture_output=True, text=True, timeout=120,
                          check=True).stdout.split()

  def test_reexecutes_once_with_the_profile_and_the_same_arguments(self):
    if not runtime_env.recommended_env({}):
      self.skipTest("not glibc >= 2.26 on Linux")
    self.assertEqual(self._run(), [PROFILE, "1", "['arg1',", "'--flag=2']"])

  def test_opt_out(self):
    self.assertEqual(self._run(PEJAX_NO_RUNTIME_ENV="1"), ["None", "None", "['arg1',", "'--flag=2']"])


class ProgramsReexecuteBeforeTheirImportsTest(absltest.TestCase):
  """The re-execution comes before a program's imports: jax is imported once, not twice."""

  @pytest.mark.slow
  def test_each_entry_point_imports_jax_once(self):
    if not runtime_env.recommended_env({}):
      self.skipTest("not glibc >= 2.26 on Linux: no re-execution")
    env = {k: v for k, v in os.environ.items()
           if k not in ("GLIBC_TUNABLES", runtime_env.MARKER, runtime_env.OPT_OUT)}
    for program in (["launch.py"], ["-m", "pejax"], ["-m", "experiments.training_curves"]):
      with self.subTest(program=program):
        # -X importtime prints one line per module a process imports; the re-executed process
        # keeps the interpreter's options (sys.orig_argv), so both processes print theirs.
        proc = subprocess.run([sys.executable, "-X", "importtime", *program, "--help"], cwd=ROOT,
                              env={**env, "JAX_PLATFORMS": "cpu"}, capture_output=True,
                              text=True, timeout=300, check=True)
        imports = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                   if line.startswith("import time:")]
        self.assertEqual(imports.count("pejax.runtime_env"), 2, program)  # Both processes.
        self.assertEqual(imports.count("jax"), 1, program)


if __name__ == "__main__":
  absltest.main()
