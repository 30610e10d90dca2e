"""Tests for UTF-8 text file / directory corpora (pejax.data.text_corpus)."""

from __future__ import annotations

import json
import os

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from pejax.data import corpus as corpus_lib
from pejax.data import text_corpus


class TextFileTest(parameterized.TestCase):

  @parameterized.named_parameters(
      # (name, size in bytes, expected validation bytes = max(1, ceil(5% of size)))
      ("hundred", 100, 5), ("odd", 101, 6), ("tiny", 2, 1), ("thousand", 1000, 50))
  def test_single_file_splits_last_five_percent(self, size, num_valid):
    text = "".join(chr(ord("a") + i % 26) for i in range(size)).encode()
    path = self.create_tempfile("book.txt", content=text, mode="wb").full_path
    corpus = text_corpus.load_text_corpus(path)
    self.assertEqual(corpus.valid.tobytes(), text[size - num_valid:])
    self.assertEqual(corpus.train.tobytes(), text[:size - num_valid])
    self.assertEqual(corpus.name, path)
    self.assertEqual(corpus.metadata["num_files"], 1)

  def test_multibyte_utf8_is_kept_as_bytes(self):
    text = "héllo wörld ∑ 𝄞\n" * 10
    path = self.create_tempfile("u.txt", content=text, mode="w", encoding="utf-8").full_path
    corpus = text_corpus.load_text_corpus(path)
    self.assertEqual(corpus.train.tobytes() + corpus.valid.tobytes(), text.encode("utf-8"))
    self.assertEqual(corpus.train.dtype, np.uint8)

  def test_invalid_utf8_names_file_and_offset(self):
    path = self.create_tempfile("latin1.txt", content=b"abc\xe9def", mode="wb").full_path
    with self.assertRaisesRegex(ValueError, r"latin1\.txt.*not valid UTF-8.*byte offset 3"):
      text_corpus.load_text_corpus(path)

  @parameterized.named_parameters(("empty", b""), ("one_byte", b"x"))
  def test_too_short_file_raises(self, content):
    path = self.create_tempfile("short.txt", content=content, mode="wb").full_path
    with self.assertRaisesRegex(ValueError, "short.txt.*at least 2"):
      text_corpus.load_text_corpus(path)

  def test_missing_path_raises(self):
    with self.assertRaisesRegex(ValueError, "no_such_file"):
      text_corpus.load_text_corpus(os.path.join(self.create_tempdir().full_path, "no_such_file"))


class TextDirectoryTest(parameterized.TestCase):

  def _make_dir(self, files: dict[str, bytes]) -> str:
    root = self.create_tempdir()
    for relpath, content in files.items():
      root.create_file(relpath, content=content, mode="wb")
    return root.full_path

  def test_directory_split_by_file_in_sorted_order(self):
    files = {f"sub{i % 3}/doc{i}.txt": f"document {i}\n".encode() for i in range(60)}
    corpus = text_corpus.load_text_corpus(self._make_dir(files))
    train_files, valid_files = corpus_lib.split_files(list(files))
    sep = corpus_lib.FILE_SEPARATOR
    self.assertNotEmpty(valid_files)
    self.assertEqual(corpus.train.tobytes(), b"".join(files[p] + sep for p in train_files))
    self.assertEqual(corpus.valid.tobytes(), b"".join(files[p] + sep for p in valid_files))
    meta = json.loads(json.dumps(corpus.metadata))
    self.assertEqual((meta["num_files"], meta["num_train_files"], meta["num_valid_files"]),
                     (60, len(train_files), len(valid_files)))

  def test_two_files_give_one_validation_file(self):
    # Both names are train under the plain crc rule; the guarantee must move one to validation.
    names = [n for n in (f"f{i}.txt" for i in range(50)) if not corpus_lib.is_validation_file(n)]
    corpus = text_corpus.load_text_corpus(
        self._make_dir({names[0]: b"first file\n", names[1]: b"second file\n"}))
    self.assertEqual(corpus.metadata["num_valid_files"], 1)
    self.assertEqual(corpus.metadata["num_train_files"], 1)
    self.assertCountEqual(
        [corpus.train.tobytes(), corpus.valid.tobytes()],
        [b"first file\n" + corpus_lib.FILE_SEPARATOR, b"second file\n" + corpus_lib.FILE_SEPARATOR])

  def test_hidden_and_empty_files_are_skipped(self):
    root = self._make_dir({"a.txt": b"alpha\n", "b.txt": b"beta\n", "empty.txt": b"",
                           ".hidden.txt": b"\xff\xfe binary", ".git/objects/x": b"\x00\xff"})
    self.assertEqual(text_corpus.text_files(root), ["a.txt", "b.txt", "empty.txt"])
    corpus = text_corpus.load_text_corpus(root)
    self.assertEqual(corpus.metadata["num_files"], 2)
    content = corpus.train.tobytes() + corpus.valid.tobytes()
    self.assertNotIn(b"binary", content)

  def test_single_file_directory_splits_by_bytes(self):
    text = b"0123456789" * 10
    corpus = text_corpus.load_text_corpus(self._make_dir({"only.txt": text}))
    self.assertEqual(corpus.train.tobytes(), text[:95])
    self.assertEqual(corpus.valid.tobytes(), text[95:])

  def test_invalid_utf8_in_directory_names_file_and_offset(self):
    root = self._make_dir({"good.txt": b"fine\n", "deep/bad.txt": b"0123456789\xc3("})
    with self.assertRaisesRegex(ValueError, r"deep.bad\.txt.*not valid UTF-8.*byte offset 10"):
      text_corpus.load_text_corpus(root)

  @parameterized.named_parameters(
      ("no_files", {}), ("only_empty_files", {"a.txt": b"", "b.txt": b""}),
      ("only_hidden", {".a.txt": b"text"}))
  def test_empty_directory_raises(self, files):
    with self.assertRaisesRegex(ValueError, "empty"):
      text_corpus.load_text_corpus(self._make_dir(files))


if __name__ == "__main__":
  absltest.main()
