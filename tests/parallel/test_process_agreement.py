"""Multi-process pieces that a single process can check, and the stop agreement on 2 processes."""

from __future__ import annotations

import json
import os
import pathlib
import sys

from absl.testing import absltest
import numpy as np
import pytest

import launch
from pejax import data as data_lib
from pejax import parallel
from pejax.parallel import local_cluster
from pejax.train import metrics as metrics_lib

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKER = pathlib.Path(__file__).with_name("agreement_worker.py")


class SingleProcessTest(absltest.TestCase):

  def test_agree_on_stop_is_the_request_itself_in_one_process(self):
    for request in (None, "SIGTERM", "SIGINT", "request"):
      self.assertEqual(parallel.agree_on_stop(request), request)

  def test_heartbeat_timeout_must_be_a_positive_integer(self):
    for bad in (0, -5, 2.5, True):
      with self.assertRaisesRegex(ValueError, "heartbeat_timeout_s must be an integer >= 1"):
        parallel.initialize_distributed(num_processes=2, process_id=0, heartbeat_timeout_s=bad)

  def test_sharded_batches_load_this_process_rows_only(self):
    mesh = parallel.make_mesh("")
    inner = data_lib.SyntheticTaskIterator("copy", batch_size=4, seq_len=16, seed=2)
    batches = parallel.ShardedBatches(inner, mesh)
    self.assertEqual((batches.rows, batches.global_rows), (slice(0, 4), 4))  # One process.
    self.assertEqual(inner.rows, slice(0, 4))
    reference = data_lib.SyntheticTaskIterator("copy", batch_size=4, seq_len=16, seed=2)
    for _ in range(2):
      got, want = next(batches), parallel.shard_batch(next(reference), mesh)
      for key in want:
        np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(want[key]))
        self.assertEqual(got[key].sharding, want[key].sharding)

  def test_shard_process_rows_checks_the_row_count(self):
    mesh = parallel.make_mesh("")
    with self.assertRaisesRegex(ValueError, r"has 3 rows but this process holds rows \[0, 4\)"):
      parallel.shard_process_rows({"inputs": np.zeros((3, 8), np.int32)}, mesh, global_rows=4)

  def test_discarding_writer_keeps_the_record_and_writes_nothing(self):
    workdir = self.create_tempdir().full_path
    with metrics_lib.DiscardingWriter() as writer:
      record = writer.write(3, "train", {"loss": np.float32(1.5)})
    self.assertEqual((record["step"], record["split"], record["metrics"]),
                     (3, "train", {"loss": 1.5}))
    self.assertEqual(os.listdir(workdir), [])

  def test_launch_multiprocess_aliases_set_the_mesh_config(self):
    argv = ["launch.py", "--mesh=data=4,model=2", "--coordinator_address=127.0.0.1:1234",
            "--num_processes=2", "--process_id=1", "--heartbeat_timeout=7"]
    flag_values = launch.flags.FlagValues()
    launch.define_flags(flag_values, argv)
    launch.parse_flags(argv, flag_values)
    config, _, origins = launch.resolve_config(flag_values)
    self.assertEqual(
        (config.mesh.spec, config.mesh.coordinator_address, config.mesh.num_processes,
         config.mesh.process_id, config.mesh.heartbeat_timeout_s),
        ("data=4,model=2", "127.0.0.1:1234", 2, 1, 7))
    self.assertEqual(origins["mesh.heartbeat_timeout_s"], "--heartbeat_timeout")


@pytest.mark.slow
class TwoProcessAgreementTest(absltest.TestCase):

  def test_every_process_gets_the_first_request_by_process_id(self):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    results = local_cluster.run_local_cluster(
        [sys.executable, str(WORKER), "{coordinator_address}", "{num_processes}",
         "{process_id}"], num_processes=2, devices_per_process=1, append_flags=False, env=env,
        timeout_s=120)
    answers = []
    for r in results:
      self.assertEqual(r.returncode, 0, r.output[-3000:])
      line = next(l for l in r.output.splitlines() if l.startswith("ANSWERS "))
      answers.append(json.loads(line[len("ANSWERS "):]))
    expected = [None, "SIGTERM", "SIGINT", "request", "request"]
    self.assertEqual(answers, [expected, expected])


if __name__ == "__main__":
  absltest.main()
