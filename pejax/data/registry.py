"""Data by name: `config.data.name` -> corpus or synthetic task -> training batch iterator.

A data name is resolved in this order:

1. a built-in corpus (`BUILTIN_CORPORA`: "stdlib", the Python standard library sources);
2. a synthetic task (`TASK_NAMES`: copy, reverse, passkey, addition and the task suites of
   `pejax.data.synthetic`);
3. an existing file or directory of UTF-8 text (`~` expanded). A path that collides with a
   built-in name can be written `./copy`.

Anything else raises `ValueError` listing the valid names.
"""

from __future__ import annotations

import os
from typing import Any

from pejax.data import batch_iterator
from pejax.data import corpus as corpus_lib
from pejax.data import language_model
from pejax.data import stdlib_corpus
from pejax.data import synthetic
from pejax.data import text_corpus

BUILTIN_CORPORA = ("stdlib",)
TASK_NAMES = synthetic.TASK_NAMES


def _unknown(name: Any) -> ValueError:
  return ValueError(
      f"data name must be a built-in corpus {list(BUILTIN_CORPORA)}, a synthetic task"
      f" {list(TASK_NAMES)} or an existing file or directory path, got {name!r}")


def is_task(name: str) -> bool:
  """Whether `name` is a synthetic task rather than a text corpus.

  Args:
    name: A data name from the config (`"copy"`, `"stdlib"`, a file path, ...).

  Returns:
    True if `name` is in `TASK_NAMES`, False for anything `load_corpus` would read.
  """
  return name in TASK_NAMES


def load_corpus(name: str) -> corpus_lib.Corpus:
  """Loads the text corpus called `name`: "stdlib" or a UTF-8 file / directory path.

  Args:
    name: A built-in corpus name or an existing path.

  Returns:
    The `Corpus` (train and valid `[N]` uint8 arrays plus metadata for the config JSON).

  Raises:
    ValueError: if `name` is a synthetic task (it has no corpus), is unknown (listing the valid
      names), or the corpus cannot be read (see `load_text_corpus`).
  """
  if not isinstance(name, str) or not name:
    raise _unknown(name)
  if name == "stdlib":
    return stdlib_corpus.load_stdlib_corpus()
  if is_task(name):
    raise ValueError(
        f"data name {name!r} is a synthetic task, which has no text corpus; text corpora are"
        f" {list(BUILTIN_CORPORA)} or a file or directory path")
  if os.path.exists(os.path.expanduser(name)):
    return text_corpus.load_text_corpus(name)
  raise _unknown(name)


def _task_options(data_config: Any, task: str) -> dict[str, Any]:
  """Task options and size range from optional `config.data` fields (0 / absent: defaults)."""
  options: dict[str, Any] = {}
  min_size = data_config.get("task_min_size", 0)
  max_size = data_config.get("task_max_size", 0)
  if min_size:
    options["min_size"] = min_size
  if max_size:
    options["max_size"] = max_size
  if task == "addition" and data_config.get("reverse_digits", False):
    options["reverse_digits"] = True
  return options


def make_train_iterator(config: Any, *,
                        corpus: corpus_lib.Corpus | None = None) -> batch_iterator.BatchIterator:
  """The training batch iterator of an experiment config.

  Reads `config.seed`, `config.data.name`, `config.data.train_len` (L) and
  `config.data.batch_size` (B); for synthetic tasks also the optional `config.data.task_min_size`,
  `config.data.task_max_size` (0 or absent: from 1 / the task minimum up to the largest size that
  fits L) and `config.data.reverse_digits` (addition).

  Args:
    config: The `ml_collections` experiment config (`pejax.experiment_config`).
    corpus: An already loaded corpus for `config.data.name`, to avoid reading it twice.

  Returns:
    A `LanguageModelIterator` over `corpus.train` for text corpora, a `SyntheticTaskIterator` for
    tasks; both at step 0.

  Raises:
    ValueError: on an unknown data name, a `corpus` loaded under another name, or settings the
      data cannot satisfy (a split shorter than L + 1, a task that does not fit L).
  """
  data = config.data
  name = data.name
  if is_task(name):
    return synthetic.SyntheticTaskIterator(
        name, batch_size=data.batch_size, seq_len=data.train_len, seed=config.seed,
        **_task_options(data, name))
  if corpus is None:
    corpus = load_corpus(name)
  elif corpus.name != name:
    raise ValueError(f"corpus was loaded as {corpus.name!r} but config.data.name is {name!r}")
  return language_model.LanguageModelIterator(
      corpus.train, batch_size=data.batch_size, seq_len=data.train_len, seed=config.seed)
