"""A byte-level text corpus split into train and validation, and the rule that splits it.

Axes: N number of bytes. Every corpus is a pair of 1-D `np.uint8` arrays (vocabulary 256: one
token per byte, no tokenizer) plus JSON-serializable metadata that the experiment config records.

Split rule (shared by the built-in corpus and by directories of text files):

* files are listed by their path relative to the corpus root, in POSIX form (`a/b.py`), sorted;
* a file goes to validation iff `zlib.crc32(relpath.encode("utf-8")) % 100 < 5` (about 5% of the
  files), to train otherwise. The rule depends only on the relative path, so the split is the same
  on every machine and does not move when unrelated files are added or removed;
* with two or more (non-empty) files, each split is guaranteed at least one file: if the rule puts
  none in validation, the file with the smallest `(crc32 % 100, relpath)` moves there; if it puts
  all of them there, the file with the largest one moves to train;
* each split is the concatenation of its files in sorted order, each file followed by
  `FILE_SEPARATOR` (`b"\\n\\n"`), so a training window may cross a file boundary exactly as it
  would in a stream of documents.

The metadata carries a fingerprint (CRC-32 of the train bytes followed by the valid bytes, as 8 hex
digits) that identifies the exact bytes, so two runs can tell whether they saw the same data.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any, Sequence

import numpy as np

FILE_SEPARATOR = b"\n\n"  # Appended after every file of a split.
VALID_PERCENT = 5  # A file is in validation iff crc32(relpath) % 100 < VALID_PERCENT.


@dataclasses.dataclass(frozen=True, eq=False)
class Corpus:
  """Train and validation bytes of one corpus.

  Attributes:
    name: The name it was loaded by (`"stdlib"` or the path as given).
    train: `[N_train]` uint8, read-only.
    valid: `[N_valid]` uint8, read-only.
    metadata: JSON-serializable facts: `num_files`, `num_train_files`, `num_valid_files`,
      `train_bytes`, `valid_bytes`, `train_crc32`, `valid_crc32`, `fingerprint`, `split` (the rule
      in words), `source` (the absolute path read) and source-specific entries.
  """
  name: str
  train: np.ndarray
  valid: np.ndarray
  metadata: dict[str, Any]


def _crc_key(relpath: str) -> tuple[int, str]:
  return zlib.crc32(relpath.encode("utf-8")) % 100, relpath


def is_validation_file(relpath: str) -> bool:
  """Whether the split rule puts the file with this POSIX relative path in validation.

  Args:
    relpath: Path relative to the corpus root, POSIX separators (`"email/parser.py"`).

  Returns:
    `zlib.crc32(relpath.encode("utf-8")) % 100 < VALID_PERCENT`.
  """
  return _crc_key(relpath)[0] < VALID_PERCENT


def split_files(relpaths: Sequence[str]) -> tuple[list[str], list[str]]:
  """Splits relative paths into sorted train and validation lists by the CRC-32 rule.

  With two or more paths both lists are non-empty (see the module docstring for the tie-break).

  Args:
    relpaths: POSIX relative paths, distinct, in any order.

  Returns:
    `(train_relpaths, valid_relpaths)`, each sorted.
  """
  ordered = sorted(relpaths)
  train = [p for p in ordered if not is_validation_file(p)]
  valid = [p for p in ordered if is_validation_file(p)]
  if len(ordered) >= 2 and not valid:
    moved = min(train, key=_crc_key)
    train.remove(moved)
    valid = [moved]
  if len(ordered) >= 2 and not train:
    moved = max(valid, key=_crc_key)
    valid.remove(moved)
    train = [moved]
  return train, valid


def concatenate_files(contents: Sequence[bytes]) -> np.ndarray:
  """Joins file contents, each followed by `FILE_SEPARATOR`, into a read-only `[N]` uint8 array."""
  joined = b"".join(part for content in contents for part in (content, FILE_SEPARATOR))
  return np.frombuffer(joined, dtype=np.uint8)


def bytes_array(data: bytes) -> np.ndarray:
  """Wraps `data` as a read-only `[N]` uint8 array without copying."""
  return np.frombuffer(data, dtype=np.uint8)


def split_metadata(train: np.ndarray, valid: np.ndarray, **extra: Any) -> dict[str, Any]:
  """Sizes and CRC-32 fingerprints of a split, merged with source-specific `extra` entries.

  Args:
    train: `[N_train]` uint8.
    valid: `[N_valid]` uint8.
    **extra: Further JSON-serializable entries (`num_files`, `source`, ...).

  Returns:
    A JSON-serializable dict with `train_bytes`, `valid_bytes`, `train_crc32`, `valid_crc32` and
    `fingerprint` (CRC-32 of train then valid), the checksums as 8 lowercase hex digits.
  """
  train_crc = zlib.crc32(train)
  return {
      **extra,
      "train_bytes": int(train.size),
      "valid_bytes": int(valid.size),
      "train_crc32": f"{train_crc:08x}",
      "valid_crc32": f"{zlib.crc32(valid):08x}",
      "fingerprint": f"{zlib.crc32(valid, train_crc):08x}",
  }
