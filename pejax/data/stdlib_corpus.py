"""The built-in corpus "stdlib": the running Python's own standard-library `.py` sources.

It exists on every machine that has Python, needs no download, and is read in well under a second
(about 10 MB of source for CPython 3.11; nothing is cached on disk).

What is read: every `*.py` regular file under `sysconfig.get_paths()["stdlib"]`, as raw bytes,
except

* `site-packages` / `dist-packages` (third-party code) and `__pycache__`;
* symbolic links, files and directories whose name starts with `.`, and nothing outside the
  stdlib directory (directory links are not followed);
* the test suites: every directory named `test`, `tests` or `idle_test` (about 19 of the 31 MB of
  `.py` files in CPython 3.11, including deliberately non-UTF-8 and malformed files);
* the top-level packages that Linux distributions ship separately or drop (`idlelib`, `tkinter`,
  `turtledemo`, `lib2to3`, `distutils`, `ensurepip`), and build-specific files
  (`_sysconfigdata_*.py`, the `config-*` directory), so that the file list does not depend on how
  Python was packaged (python.org, pyenv, conda, a Debian/Ubuntu system Python).

The train/validation split is by file (see `pejax.data.corpus`) and depends only on relative paths.
The file list is fixed by the Python minor version, so every machine with the same minor version
reads the same files, split the same way; the bytes are identical for the same CPython release
(patch releases and distribution patches may change a few files). The `fingerprint` entry of the
metadata tells whether two machines saw exactly the same bytes.
"""

from __future__ import annotations

import os
import platform
import sys
import sysconfig

from pejax.data import corpus as corpus_lib

_EXCLUDED_DIRS = frozenset({
    "site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"})
_EXCLUDED_TOP_LEVEL_DIRS = frozenset({
    "idlelib", "tkinter", "turtledemo", "lib2to3", "distutils", "ensurepip"})


def stdlib_dir() -> str:
  """Absolute path of the running interpreter's standard library (`sysconfig` "stdlib")."""
  return os.path.abspath(sysconfig.get_paths()["stdlib"])


def _keep_dir(name: str, *, top_level: bool) -> bool:
  if name.startswith(".") or name in _EXCLUDED_DIRS:
    return False
  return not (top_level and (name in _EXCLUDED_TOP_LEVEL_DIRS or name.startswith("config-")))


def stdlib_source_files(root: str | None = None) -> list[str]:
  """Sorted POSIX paths, relative to `root`, of the `.py` files the "stdlib" corpus reads.

  Args:
    root: Directory to scan; defaults to `stdlib_dir()`.

  Returns:
    Relative paths such as `"json/decoder.py"`, sorted, after the exclusions of the module
    docstring.
  """
  root = stdlib_dir() if root is None else os.path.abspath(root)
  relpaths = []
  for dirpath, dirnames, filenames in os.walk(root):
    top_level = dirpath == root
    dirnames[:] = [d for d in dirnames if _keep_dir(d, top_level=top_level)]
    rel_dir = os.path.relpath(dirpath, root)
    for filename in filenames:
      if (not filename.endswith(".py") or filename.startswith(".")
          or filename.startswith("_sysconfigdata")):
        continue
      path = os.path.join(dirpath, filename)
      if os.path.islink(path) or not os.path.isfile(path):
        continue
      rel = filename if rel_dir == os.curdir else os.path.join(rel_dir, filename)
      relpaths.append(rel.replace(os.sep, "/"))
  return sorted(relpaths)


def load_stdlib_corpus() -> corpus_lib.Corpus:
  """Loads the "stdlib" corpus: the standard library's `.py` sources, split by file.

  Returns:
    A `Corpus` named `"stdlib"` whose metadata also holds `python_version` (`"3.11"`) and
    `python_implementation` (`"CPython"`).

  Raises:
    ValueError: if no source file is found (an interpreter without its stdlib sources).
  """
  root = stdlib_dir()
  relpaths = stdlib_source_files(root)
  contents = {}
  for rel in relpaths:
    with open(os.path.join(root, *rel.split("/")), "rb") as f:
      data = f.read()
    if data:
      contents[rel] = data
  if len(contents) < 2:
    raise ValueError(
        f"the stdlib corpus needs the standard library's .py sources, but {root!r} holds"
        f" {len(contents)} non-empty .py file(s); pass a text file or directory as the data name")
  train_files, valid_files = corpus_lib.split_files(list(contents))
  train = corpus_lib.concatenate_files([contents[p] for p in train_files])
  valid = corpus_lib.concatenate_files([contents[p] for p in valid_files])
  metadata = corpus_lib.split_metadata(
      train, valid,
      name="stdlib",
      source=root,
      python_version=f"{sys.version_info.major}.{sys.version_info.minor}",
      python_implementation=platform.python_implementation(),
      num_files=len(contents),
      num_train_files=len(train_files),
      num_valid_files=len(valid_files),
      split=(f"by file: validation iff zlib.crc32(relpath) % 100 < {corpus_lib.VALID_PERCENT};"
             f" files joined with separator {corpus_lib.FILE_SEPARATOR!r}"))
  return corpus_lib.Corpus(name="stdlib", train=train, valid=valid, metadata=metadata)
