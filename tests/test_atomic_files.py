"""pejax/json_file.py: a write interrupted at any point leaves the previous file intact and no
temporary file behind; what every run record, result table and exported config goes through."""

from __future__ import annotations

import json
import os
import pathlib
from unittest import mock

from absl.testing import absltest

from pejax import json_file


class AtomicWriteTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = pathlib.Path(self.create_tempdir().full_path)
    self.path = self.dir / "results.json"
    json_file.write_json_atomic(self.path, {"old": 1})

  def test_a_write_killed_halfway_keeps_the_previous_file(self):
    real_write = pathlib.Path.write_text

    def half_then_die(path, text, *args, **kwargs):
      real_write(path, text[: len(text) // 2], *args, **kwargs)
      raise KeyboardInterrupt  # As a SIGINT between the two halves.

    with mock.patch.object(pathlib.Path, "write_text", half_then_die):
      with self.assertRaises(KeyboardInterrupt):
        json_file.write_json_atomic(self.path, {"new": list(range(100))})
    self.assertEqual(json.loads(self.path.read_text()), {"old": 1})
    self.assertEqual(sorted(os.listdir(self.dir)), ["results.json"])

  def test_a_failed_rename_keeps_the_previous_file(self):
    with mock.patch("os.replace", side_effect=OSError("disk full")):
      with self.assertRaisesRegex(OSError, "disk full"):
        json_file.write_text_atomic(self.path, "new text")
    self.assertEqual(json.loads(self.path.read_text()), {"old": 1})
    self.assertEqual(sorted(os.listdir(self.dir)), ["results.json"])

  def test_complete_writes_replace_and_name_the_temporary_by_process(self):
    json_file.write_text_atomic(self.path, "é\n")
    self.assertEqual(self.path.read_text(encoding="utf-8"), "é\n")
    seen = []
    real_replace = os.replace
    with mock.patch("os.replace", side_effect=lambda a, b: (seen.append(a), real_replace(a, b))):
      json_file.write_json_atomic(self.path, [1])
    self.assertEqual(pathlib.Path(seen[0]).name, f"results.json.tmp-{os.getpid()}")


if __name__ == "__main__":
  absltest.main()
