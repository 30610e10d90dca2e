"""Tests of pejax.runtime_env: the allocator tunables and the one-time re-execution."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from unittest import mock

from absl.testing import absltest

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


if __name__ == "__main__":
  absltest.main()
