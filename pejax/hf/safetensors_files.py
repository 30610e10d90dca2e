"""The files of a local Hugging Face checkpoint: ``config.json`` and its safetensors weights.

A directory holds either one ``model.safetensors`` or a sharded set described by
``model.safetensors.index.json`` (``{"weight_map": {tensor name: shard file}}``). Tensors are
read one at a time through ``safetensors.safe_open`` (the file is memory-mapped, nothing else is
read), so a load never holds more than the model plus one tensor.

Every failure names the file: a missing directory, ``config.json`` or weights file, malformed
JSON, an index pointing at a missing shard, a file whose safetensors header cannot be parsed
(truncated or not safetensors), a tensor missing from its shard, or one whose shape or dtype is
not what the config implies.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator

import numpy as np

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

_FLOAT_DTYPES = ("float32", "bfloat16", "float16")


def read_json(path: str, what: str) -> dict:
  """Parses a JSON object file.

  Args:
    path: the file.
    what: how the error names it (``"config.json"``).

  Returns:
    The parsed dict.

  Raises:
    ValueError: naming the file when it is missing, not JSON, or not a JSON object.
  """
  if not os.path.isfile(path):
    raise ValueError(f"{what} not found: {path}")
  try:
    with open(path, encoding="utf-8") as f:
      value = json.load(f)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{what} is not valid JSON: {path} ({e})") from None
  if not isinstance(value, dict):
    raise ValueError(f"{what} must hold a JSON object: {path}, got {type(value).__name__}")
  return value


def check_directory(path: Any) -> str:
  """The checkpoint directory as an absolute path.

  Args:
    path: a local directory (``str`` or ``os.PathLike``).

  Returns:
    The absolute path.

  Raises:
    ValueError: naming ``path`` if it is not an existing directory.
  """
  if not isinstance(path, (str, os.PathLike)):
    raise ValueError(f"path must be a local directory path, got {type(path).__name__}")
  full = os.path.abspath(os.path.expanduser(os.fspath(path)))
  if not os.path.isdir(full):
    raise ValueError(f"path must be an existing checkpoint directory, got {os.fspath(path)!r}")
  return full


def weight_files(directory: str) -> dict[str, str]:
  """Tensor name -> the file holding it.

  Args:
    directory: the checkpoint directory.

  Returns:
    ``{name: absolute file path}`` from the index, or from ``model.safetensors``'s header.

  Raises:
    ValueError: naming the file, when neither weights file exists, the index is malformed or
      names a missing shard, or a header cannot be read.
  """
  index_path = os.path.join(directory, INDEX_FILE)
  single = os.path.join(directory, WEIGHTS_FILE)
  if os.path.isfile(index_path):
    index = read_json(index_path, INDEX_FILE)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
      raise ValueError(f"{INDEX_FILE} must have a non-empty 'weight_map': {index_path}")
    files = {}
    for name, shard in weight_map.items():
      shard_path = os.path.join(directory, str(shard))
      if not os.path.isfile(shard_path):
        raise ValueError(f"shard {shard!r} listed in {index_path} (for tensor {name!r}) not found: "
                         f"{shard_path}")
      files[name] = shard_path
    return files
  if not os.path.isfile(single):
    raise ValueError(f"no weights in {directory}: neither {WEIGHTS_FILE} nor {INDEX_FILE} "
                     "(only safetensors checkpoints are read; convert .bin files first)")
  return {name: single for name in tensor_headers(single)}


def _open(path: str):
  from safetensors import safe_open  # pylint: disable=g-import-not-at-top
  try:
    return safe_open(path, framework="numpy")
  except Exception as e:  # The Rust reader raises its own error types.
    raise ValueError(f"cannot read safetensors file {path}: {e} (truncated or not a safetensors "
                     "file?)") from None


def tensor_headers(path: str) -> dict[str, tuple[str, tuple[int, ...]]]:
  """Name -> (dtype, shape) of every tensor in one safetensors file (its header only).

  Args:
    path: a ``.safetensors`` file.

  Returns:
    ``{name: (safetensors dtype such as "F32", shape)}``.

  Raises:
    ValueError: naming the file when its header cannot be parsed.
  """
  with _open(path) as f:
    out = {}
    for name in f.keys():
      view = f.get_slice(name)
      out[name] = (view.get_dtype(), tuple(view.get_shape()))
  return out


class TensorReader:
  """Reads tensors by name from a checkpoint's files, one file handle open at a time.

  Use as a context manager; :meth:`read` returns one ``numpy`` array (``bfloat16`` through
  ``ml_dtypes``).
  """

  def __init__(self, files: dict[str, str]):
    """Args:
      files: tensor name -> file (from :func:`weight_files`).
    """
    self.files = files
    self._path = None
    self._handle = None

  def __enter__(self) -> "TensorReader":
    """Returns:
      The reader.
    """
    return self

  def __exit__(self, *exc) -> None:
    """Closes the open file."""
    self._close()

  def _close(self) -> None:
    if self._handle is not None:
      self._handle.__exit__(None, None, None)
    self._handle = self._path = None

  def read(self, name: str) -> np.ndarray:
    """One tensor.

    Args:
      name: the tensor name.

    Returns:
      The tensor as a numpy array of its stored dtype.

    Raises:
      ValueError: naming the file, when the tensor is missing or unreadable.
    """
    if name not in self.files:
      raise ValueError(f"tensor {name!r} is missing from the checkpoint (files: "
                       f"{sorted(set(os.path.basename(p) for p in self.files.values()))})")
    path = self.files[name]
    if path != self._path:
      self._close()
      self._handle = _open(path).__enter__()
      self._path = path
    try:
      return self._handle.get_tensor(name)
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f"cannot read tensor {name!r} from {path}: {e}") from None


def iter_file_groups(names: list[str], files: dict[str, str]) -> Iterator[str]:
  """``names`` ordered so that tensors of one file are read together (one open per file).

  Args:
    names: tensor names.
    files: name -> file.

  Yields:
    The names, grouped by file in first-seen order.
  """
  order: dict[str, list[str]] = {}
  for name in names:
    order.setdefault(files.get(name, ""), []).append(name)
  for group in order.values():
    yield from group
