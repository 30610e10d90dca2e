"""The local multi-process harness: ids, devices, output, deadlines (plain Python children, fast).

The JAX side (a real ``jax.distributed`` job) is tests/parallel/test_multiprocess.py.
"""

from __future__ import annotations

import io
import contextlib
import signal
import sys
import time

from absl.testing import absltest

from pejax.parallel import local_cluster

# Prints what a process of the cluster was given.
_REPORT = ("import os, sys; print('argv', sys.argv[1:]); "
           "print('xla', os.environ['XLA_FLAGS']); print('platforms', os.environ['JAX_PLATFORMS'])")


class LocalClusterTest(absltest.TestCase):

  def test_each_process_gets_its_id_the_coordinator_and_its_devices(self):
    env = {"PATH": "/usr/bin:/bin", "XLA_FLAGS": "--xla_force_host_platform_device_count=8 --x=1"}
    with local_cluster.LocalCluster([sys.executable, "-c", _REPORT, "id={process_id}"],
                                    num_processes=3, devices_per_process=2, env=env) as cluster:
      results = cluster.wait(timeout_s=60)
    address = cluster.coordinator_address
    self.assertRegex(address, r"^127\.0\.0\.1:\d+$")
    for i, r in enumerate(results):
      self.assertEqual(r.process_id, i)
      self.assertEqual(r.returncode, 0, r.output)
      self.assertIn(f"argv ['id={i}', '--coordinator_address={address}', '--num_processes=3', "
                    f"'--process_id={i}']", r.output)
      self.assertIn("xla --x=1 --xla_force_host_platform_device_count=2\n", r.output)
      self.assertIn("platforms cpu", r.output)

  def test_without_appended_flags_the_placeholders_carry_the_values(self):
    results = local_cluster.run_local_cluster(
        [sys.executable, "-c", "import sys; print(sys.argv[1:])", "{coordinator_address}",
         "{num_processes}", "{process_id}"], num_processes=2, append_flags=False, timeout_s=60)
    self.assertEqual([r.returncode for r in results], [0, 0])
    self.assertIn("', '2', '1']", results[1].output)
    self.assertNotIn("--process_id", results[1].output)

  def test_a_process_still_running_at_the_deadline_is_killed_and_reported(self):
    start = time.monotonic()
    with self.assertRaisesRegex(local_cluster.LocalClusterTimeout,
                                r"processes \[1\] still ran after 2s") as raised:
      local_cluster.run_local_cluster(
          [sys.executable, "-c", "import sys, time; print('up', flush=True); "
           "time.sleep(60 * int(sys.argv[1]))", "{process_id}"], num_processes=2,
          append_flags=False, timeout_s=2)
    self.assertLess(time.monotonic() - start, 30)
    first, second = raised.exception.results
    self.assertEqual((first.returncode, first.killed), (0, False))
    self.assertEqual((second.returncode, second.killed), (-signal.SIGKILL, True))
    self.assertIn("up", second.output)  # What it wrote before is kept.

  def test_signals_reach_one_process(self):
    script = ("import signal, sys, time; "
              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143)); "
              "print('ready', flush=True); time.sleep(0.5 + 60 * int(sys.argv[1]))")
    with local_cluster.LocalCluster([sys.executable, "-c", script, "{process_id}"],
                                    num_processes=2, append_flags=False) as cluster:
      self.assertTrue(cluster.wait_for_output(1, "ready", timeout_s=30))
      cluster.send_signal(1, signal.SIGTERM)
      results = cluster.wait(timeout_s=30)
    self.assertEqual([r.returncode for r in results], [0, 143])

  def test_command_line_prefixes_output_and_returns_the_first_failure(self):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
      code = local_cluster.main(
          ["--num_processes=2", "--no_append_flags", "--", "python", "-c",
           "import sys; print('hello', sys.argv[1]); sys.exit(3 * int(sys.argv[1]))",
           "{process_id}"])
    self.assertEqual(code, 3)
    self.assertIn("[p0] hello 0", out.getvalue())
    self.assertIn("[p1] hello 1", out.getvalue())

  def test_bad_sizes_are_named(self):
    with self.assertRaisesRegex(ValueError, "num_processes must be an integer >= 1, got 0"):
      local_cluster.LocalCluster(["true"], num_processes=0)
    with self.assertRaisesRegex(ValueError, "devices_per_process must be an integer >= 1"):
      local_cluster.LocalCluster(["true"], devices_per_process=0)

  def test_free_port_can_be_bound(self):
    import socket  # pylint: disable=g-import-not-at-top
    port = local_cluster.free_port()
    with socket.socket() as s:
      s.bind(("127.0.0.1", port))


if __name__ == "__main__":
  absltest.main()
