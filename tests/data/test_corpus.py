"""Tests for the file split rule and concatenation (pejax.data.corpus)."""

from __future__ import annotations

import zlib

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from pejax.data import corpus as corpus_lib


class SplitRuleTest(parameterized.TestCase):

  @parameterized.parameters(
      # Golden zlib.crc32(relpath) % 100: 75, 23, 91, 43, 0, 0.
      ("json/decoder.py", False), ("os.py", False), ("a/b/c.txt", False), ("typing.py", False),
      ("f2.txt", True), ("f19.txt", True))
  def test_validation_rule_golden(self, relpath, expected):
    self.assertEqual(corpus_lib.is_validation_file(relpath), expected)

  def test_split_is_sorted_partition(self):
    paths = [f"dir{i % 7}/file{i}.txt" for i in range(300)]
    train, valid = corpus_lib.split_files(reversed(paths))
    self.assertEqual(sorted(train + valid), sorted(paths))
    self.assertEqual(train, sorted(train))
    self.assertEqual(valid, sorted(valid))
    self.assertEqual(valid, [p for p in sorted(paths) if corpus_lib.is_validation_file(p)])

  def test_two_files_always_give_both_splits(self):
    # Search pairs where the plain rule would leave one split empty, in both directions.
    names = [f"f{i}.txt" for i in range(200)]
    all_train = [n for n in names if not corpus_lib.is_validation_file(n)][:2]
    all_valid = [n for n in names if corpus_lib.is_validation_file(n)][:2]
    self.assertLen(all_valid, 2)
    for pair in (all_train, all_valid):
      train, valid = corpus_lib.split_files(pair)
      self.assertLen(train, 1)
      self.assertLen(valid, 1)
      self.assertEqual(sorted(train + valid), sorted(pair))

  def test_single_file_stays_in_train(self):
    name = next(f"g{i}" for i in range(100) if not corpus_lib.is_validation_file(f"g{i}"))
    self.assertEqual(corpus_lib.split_files([name]), ([name], []))

  def test_concatenate_appends_separator_after_each_file(self):
    joined = corpus_lib.concatenate_files([b"ab", b"c"])
    self.assertEqual(joined.tobytes(), b"ab" + corpus_lib.FILE_SEPARATOR + b"c"
                     + corpus_lib.FILE_SEPARATOR)
    self.assertEqual(joined.dtype, np.uint8)

  def test_metadata_fingerprint_is_crc_of_both_splits(self):
    train, valid = np.frombuffer(b"hello ", np.uint8), np.frombuffer(b"world", np.uint8)
    meta = corpus_lib.split_metadata(train, valid, num_files=2)
    self.assertEqual(meta["fingerprint"], f"{zlib.crc32(b'hello world'):08x}")
    self.assertEqual(meta["train_crc32"], f"{zlib.crc32(b'hello '):08x}")
    self.assertEqual((meta["train_bytes"], meta["valid_bytes"], meta["num_files"]), (6, 5, 2))


if __name__ == "__main__":
  absltest.main()
