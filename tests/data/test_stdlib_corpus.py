"""Tests for the built-in "stdlib" corpus (pejax.data.stdlib_corpus)."""

from __future__ import annotations

import json
import os
import zlib

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from pejax.data import corpus as corpus_lib
from pejax.data import stdlib_corpus


class StdlibCorpusTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.corpus = stdlib_corpus.load_stdlib_corpus()
    cls.root = stdlib_corpus.stdlib_dir()
    cls.relpaths = [p for p in stdlib_corpus.stdlib_source_files()
                    if os.path.getsize(os.path.join(cls.root, p)) > 0]

  def _read(self, relpath: str) -> bytes:
    with open(os.path.join(self.root, relpath), "rb") as f:
      return f.read()

  def test_splits_are_nonempty_uint8(self):
    for split in (self.corpus.train, self.corpus.valid):
      self.assertEqual(split.dtype, np.uint8)
      self.assertEqual(split.ndim, 1)
      self.assertGreater(split.size, 100_000)
    self.assertGreater(self.corpus.train.size, 5 * self.corpus.valid.size)

  def test_split_is_disjoint_by_file_and_reconstructs_the_arrays(self):
    train_files, valid_files = corpus_lib.split_files(self.relpaths)
    self.assertEmpty(set(train_files) & set(valid_files))
    self.assertEqual(len(train_files) + len(valid_files), len(self.relpaths))
    self.assertTrue(all(corpus_lib.is_validation_file(p) for p in valid_files))
    sep = corpus_lib.FILE_SEPARATOR
    self.assertEqual(self.corpus.train.tobytes(),
                     b"".join(self._read(p) + sep for p in train_files))
    self.assertEqual(self.corpus.valid.tobytes(),
                     b"".join(self._read(p) + sep for p in valid_files))

  def test_loading_twice_gives_identical_bytes(self):
    again = stdlib_corpus.load_stdlib_corpus()
    np.testing.assert_array_equal(again.train, self.corpus.train)
    np.testing.assert_array_equal(again.valid, self.corpus.valid)
    self.assertEqual(again.metadata, self.corpus.metadata)

  def test_exclusions(self):
    for relpath in self.relpaths:
      parts = relpath.split("/")
      self.assertTrue(relpath.endswith(".py"), relpath)
      self.assertEmpty({"site-packages", "dist-packages", "test", "tests", "idle_test"}
                       & set(parts[:-1]), relpath)
      self.assertNotIn(parts[0], ("idlelib", "tkinter", "lib2to3", "distutils", "ensurepip"))
      self.assertFalse(parts[-1].startswith("_sysconfigdata"), relpath)
      self.assertFalse(os.path.islink(os.path.join(self.root, relpath)), relpath)
    self.assertIn("json/decoder.py", self.relpaths)
    self.assertIn("os.py", self.relpaths)

  def test_metadata_matches_the_arrays_and_is_json(self):
    meta = json.loads(json.dumps(self.corpus.metadata))
    self.assertEqual(meta["name"], "stdlib")
    self.assertEqual(meta["num_files"], len(self.relpaths))
    self.assertEqual(meta["num_train_files"] + meta["num_valid_files"], meta["num_files"])
    self.assertEqual(meta["train_bytes"], self.corpus.train.size)
    self.assertEqual(meta["valid_bytes"], self.corpus.valid.size)
    self.assertEqual(meta["train_crc32"], f"{zlib.crc32(self.corpus.train.tobytes()):08x}")
    self.assertEqual(meta["valid_crc32"], f"{zlib.crc32(self.corpus.valid.tobytes()):08x}")

  def test_arrays_are_read_only(self):
    with self.assertRaises(ValueError):
      self.corpus.train[0] = 0


if __name__ == "__main__":
  absltest.main()
