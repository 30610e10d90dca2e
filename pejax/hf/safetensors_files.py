"""The files of a local Hugging Face checkpoint: ``config.json`` and its safetensors weights.

A directory holds either one ``model.safetensors`` or a sharded set described by
``model.safetensors.index.json`` (``{"weight_map": {tensor name: shard file}}``). Headers are
validated by ``safetensors.safe_open``; the data is then read with plain file reads
at the header's offsets, one row block at a time, so a load holds the model plus one block and
never a memory-mapped copy of the file.

Every failure names the file: a missing directory, ``config.json`` or weights file, malformed
JSON, an index pointing at a missing shard, a file whose safetensors header cannot be parsed
(truncated or not safetensors), a tensor missing from its shard, or one whose shape or dtype is
not what the config implies.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator, Optional

import ml_dtypes
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


_NUMPY = {"F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
          "BF16": np.dtype(ml_dtypes.bfloat16)}
_CHUNK_BYTES = 16 << 20  # Row blocks of a transposed read.


def data_offsets(path: str) -> tuple[int, dict[str, tuple[int, int]]]:
  """Where each tensor's bytes are in a safetensors file (from its JSON header).

  Args:
    path: a ``.safetensors`` file already validated by :func:`tensor_headers`.

  Returns:
    ``(data_start, {name: (begin, end)})``: byte offsets relative to ``data_start``.

  Raises:
    ValueError: naming the file if the header is malformed or points past the end of the file.
  """
  size = os.path.getsize(path)
  with open(path, "rb") as f:
    length = int.from_bytes(f.read(8), "little")
    if length <= 0 or 8 + length > size:
      raise ValueError(f"cannot read safetensors file {path}: header length {length} does not "
                       f"fit in {size} bytes (truncated?)")
    try:
      header = json.loads(f.read(length))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise ValueError(f"cannot read safetensors file {path}: bad header ({e})") from None
  offsets = {}
  for name, spec in header.items():
    if name == "__metadata__":
      continue
    begin, end = spec["data_offsets"]
    if 8 + length + end > size:
      raise ValueError(f"cannot read safetensors file {path}: tensor {name!r} ends past the end "
                       "of the file (truncated?)")
    offsets[name] = (int(begin), int(end))
  return 8 + length, offsets


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
  """An uninitialized C-contiguous array whose data starts on a 64-byte boundary.

  JAX on CPU then takes it without a copy (``jax.device_put`` aliases aligned host buffers),
  so a loaded tensor exists once in memory, not twice.

  Args:
    shape: the array shape.
    dtype: its dtype.

  Returns:
    The array (a view of a slightly larger byte buffer).
  """
  dtype = np.dtype(dtype)
  nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  raw = np.empty(nbytes + 64, np.uint8)
  offset = (-raw.ctypes.data) % 64
  return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def read_tensor(path: str, data_start: int, begin: int, *, dtype: str, shape: tuple[int, ...],
                rows: Optional[tuple[int, int]] = None, transpose: bool = False,
                target: np.dtype) -> np.ndarray:
  """Reads one tensor (or a block of its rows) with plain file reads, converting as it goes.

  No memory map: the bytes pass through a buffer of at most one row block (16 MB) into the
  result, so the process holds the returned array and little else (a memory-mapped file would
  keep every page read resident until it is closed, doubling the peak of a load).

  Args:
    path: the safetensors file.
    data_start: the byte offset of its data section.
    begin: the tensor's first byte relative to ``data_start``.
    dtype: the stored safetensors dtype (``"F32"``, ``"BF16"``, ``"F16"``).
    shape: the stored shape ``[R, C]`` or ``[R]``.
    rows: ``(start, stop)`` rows of the first axis to read (fused tensors), or ``None``.
    transpose: return the transpose ``[C, rows]`` of a 2-D (row block of the) tensor.
    target: the numpy dtype of the result.

  Returns:
    The array, C-contiguous and 64-byte aligned (:func:`aligned_empty`), of ``target`` dtype.
  """
  source = _NUMPY[dtype]
  shape = tuple(shape) or (1,)
  start, stop = rows if rows is not None else (0, shape[0])
  row_items = int(np.prod(shape[1:], dtype=np.int64))
  n_rows = stop - start
  if transpose:
    out = aligned_empty((row_items, n_rows), target)
  else:
    out = aligned_empty((n_rows,) + shape[1:], target)
  block = max(1, _CHUNK_BYTES // max(1, row_items * source.itemsize))
  with open(path, "rb") as f:
    f.seek(data_start + begin + start * row_items * source.itemsize)
    for r in range(0, n_rows, block):
      count = min(block, n_rows - r)
      chunk = np.fromfile(f, dtype=source, count=count * row_items)
      if chunk.size != count * row_items:
        raise ValueError(f"cannot read safetensors file {path}: it ends inside a tensor "
                         "(truncated?)")
      chunk = chunk.reshape((count,) + shape[1:])
      if transpose:
        out[:, r:r + count] = chunk.T
      else:
        out[r:r + count] = chunk
  return out


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
