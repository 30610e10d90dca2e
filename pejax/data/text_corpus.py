"""A corpus from any UTF-8 text file or directory of text files.

* A directory means every regular file under it, recursively, in sorted POSIX relative-path order.
  Hidden files and directories (name starting with `.`) are skipped, directory symlinks are not
  followed, and empty files are skipped. The split is by file, with the CRC-32 rule of
  `pejax.data.corpus` (validation iff `crc32(relpath) % 100 < 5`, at least one file in each split
  when there are two or more files).
* A single file (or a directory holding exactly one non-empty file) is split by bytes: the last
  5% of its bytes (`ceil(0.05 * N)`, at least one byte) are validation, the rest train. No
  separator is appended in this case: both splits are plain slices of the file.

Every file must be valid UTF-8: the model sees raw bytes, but a file in another encoding is almost
always a mistake (a binary, a Latin-1 export), so it fails with a `ValueError` naming the file and
the byte offset of the first invalid sequence rather than training on noise.
"""

from __future__ import annotations

import os

from pejax.data import corpus as corpus_lib


def _read_utf8(path: str) -> bytes:
  with open(path, "rb") as f:
    data = f.read()
  try:
    data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ValueError(
        f"text corpus file {path!r} is not valid UTF-8: {e.reason} at byte offset {e.start}"
    ) from None
  return data


def text_files(root: str) -> list[str]:
  """Sorted POSIX paths, relative to `root`, of the regular non-hidden files under it.

  Args:
    root: An existing directory.

  Returns:
    Relative paths such as `"books/a.txt"`, sorted.
  """
  relpaths = []
  for dirpath, dirnames, filenames in os.walk(root):
    dirnames[:] = [d for d in dirnames if not d.startswith(".")]
    rel_dir = os.path.relpath(dirpath, root)
    for filename in filenames:
      if filename.startswith(".") or not os.path.isfile(os.path.join(dirpath, filename)):
        continue
      rel = filename if rel_dir == os.curdir else os.path.join(rel_dir, filename)
      relpaths.append(rel.replace(os.sep, "/"))
  return sorted(relpaths)


def _split_single(name: str, source: str, data: bytes, **extra) -> corpus_lib.Corpus:
  num_valid = max(1, -(-len(data) * corpus_lib.VALID_PERCENT // 100))
  train = corpus_lib.bytes_array(data[:len(data) - num_valid])
  valid = corpus_lib.bytes_array(data[len(data) - num_valid:])
  metadata = corpus_lib.split_metadata(
      train, valid, name=name, source=source, **extra,
      split=f"by bytes: the last {corpus_lib.VALID_PERCENT}% of the file is validation")
  return corpus_lib.Corpus(name=name, train=train, valid=valid, metadata=metadata)


def load_text_corpus(path: str, *, name: str | None = None) -> corpus_lib.Corpus:
  """Loads a UTF-8 text file or directory as a byte-level corpus.

  Args:
    path: An existing file or directory (`~` is expanded).
    name: Name recorded in the corpus; defaults to `path` as given.

  Returns:
    A `Corpus`; its metadata holds `num_files`, `num_train_files`, `num_valid_files` and `source`
    (the absolute path).

  Raises:
    ValueError: if `path` does not exist, a file is not valid UTF-8 (naming the file and byte
      offset), the corpus is empty, or a single file is shorter than 2 bytes.
  """
  name = path if name is None else name
  source = os.path.abspath(os.path.expanduser(path))
  if os.path.isfile(source):
    data = _read_utf8(source)
    if len(data) < 2:
      raise ValueError(
          f"text corpus file {source!r} has {len(data)} bytes; at least 2 are needed to split it"
          " into train and validation")
    return _split_single(name, source, data, num_files=1, num_train_files=1, num_valid_files=1)
  if not os.path.isdir(source):
    raise ValueError(f"text corpus path {path!r} is neither a file nor a directory")
  contents = {}
  for rel in text_files(source):
    data = _read_utf8(os.path.join(source, *rel.split("/")))
    if data:
      contents[rel] = data
  if not contents:
    raise ValueError(
        f"text corpus directory {source!r} is empty: no non-empty, non-hidden regular file under"
        " it")
  if len(contents) == 1:
    (rel, data), = contents.items()
    if len(data) < 2:
      raise ValueError(
          f"text corpus directory {source!r} holds only {rel!r} with {len(data)} byte(s); at least"
          " 2 are needed to split it into train and validation")
    return _split_single(name, source, data, num_files=1, num_train_files=1, num_valid_files=1)
  train_files, valid_files = corpus_lib.split_files(list(contents))
  train = corpus_lib.concatenate_files([contents[p] for p in train_files])
  valid = corpus_lib.concatenate_files([contents[p] for p in valid_files])
  metadata = corpus_lib.split_metadata(
      train, valid, name=name, source=source,
      num_files=len(contents), num_train_files=len(train_files),
      num_valid_files=len(valid_files),
      split=(f"by file: validation iff zlib.crc32(relpath) % 100 < {corpus_lib.VALID_PERCENT}"
             " (at least one file per split); files joined with separator"
             f" {corpus_lib.FILE_SEPARATOR!r}"))
  return corpus_lib.Corpus(name=name, train=train, valid=valid, metadata=metadata)
