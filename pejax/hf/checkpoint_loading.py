"""``from_pretrained``: a local Hugging Face decoder directory -> :class:`~pejax.nn.Decoder`.

The model is first built abstractly (``nnx.eval_shape``: shapes only, no memory), then every
parameter is read from the safetensors files one tensor at a time (plain reads, no memory map),
converted to the target dtype (and transposed) in row blocks into 64-byte-aligned buffers that
JAX on CPU adopts without a copy; the peak memory of a load is the model plus a 16 MB block
(measured by ``benchmarks/hf_load_memory.py``: 1.05x the file, see docs/pretrained.md,
"Memory"). ``dtype=jnp.bfloat16`` stores the parameters and computes in bfloat16 (half the
memory of float32); RoPE angles and the softmax stay float32 whatever the dtype.

No network: ``path`` is a directory on disk (``huggingface-cli download`` puts one in the HF
cache; pass its snapshot directory).
"""

from __future__ import annotations

import os
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.hf import config_mapping
from pejax.hf import safetensors_files as files_lib
from pejax.hf import weight_mapping
from pejax.nn.decoder import Decoder
from pejax.nn.decoder_config import DecoderConfig

_NUMPY_DTYPES = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(jnp.bfloat16)}
_STORED = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}


def _ignored(name: str, config: DecoderConfig) -> bool:
  """Tensors transformers itself ignores: cached RoPE tables, a tied model's output copy."""
  return name.endswith("rotary_emb.inv_freq") or (name == "lm_head.weight"
                                                  and config.tie_embeddings)


def compute_dtype_name(dtype: Any, stored: set[str]) -> str:
  """``"float32"`` or ``"bfloat16"``: ``dtype`` when given, else the checkpoint's own.

  Args:
    dtype: ``None``, a string or a numpy / jnp dtype.
    stored: the safetensors dtypes of the checkpoint's tensors (``"F32"``, ``"BF16"``, ...).

  Returns:
    The dtype name (a bfloat16 checkpoint stays bfloat16; float16 and float32 ones load as
    float32).

  Raises:
    ValueError: naming ``dtype`` if it is neither float32 nor bfloat16.
  """
  if dtype is None:
    return "bfloat16" if stored == {"BF16"} else "float32"
  try:
    name = jnp.dtype(dtype).name
  except TypeError:
    name = None
  if name not in _NUMPY_DTYPES:
    raise ValueError(f"dtype must be None, float32 or bfloat16, got {dtype!r}")
  return name


def load_config(path: Any, *, dtype: Any = None, **overrides: Any) -> DecoderConfig:
  """The :class:`DecoderConfig` of a checkpoint directory, without reading its weights.

  Args:
    path: the checkpoint directory (holding ``config.json``).
    dtype: compute / parameter dtype (``None``: ``"float32"``).
    **overrides: further :class:`DecoderConfig` fields.

  Returns:
    The decoder config.

  Raises:
    ValueError: naming the file or the field (see :func:`decoder_config_from_hf`).
  """
  directory = files_lib.check_directory(path)
  hf = files_lib.read_json(os.path.join(directory, files_lib.CONFIG_FILE), files_lib.CONFIG_FILE)
  return config_mapping.decoder_config_from_hf(
      hf, dtype=compute_dtype_name(dtype, {"F32"}), **overrides)


def from_pretrained(path: Any, *, dtype: Any = None, **overrides: Any) -> Decoder:
  """Loads a local Hugging Face decoder checkpoint as a :class:`~pejax.nn.Decoder`.

  Reads ``config.json`` (older ``rope_scaling`` or newer ``rope_parameters`` form) and
  ``model.safetensors`` or the shards of ``model.safetensors.index.json``. Families:
  ``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``phi3``, ``gemma`` (see
  :mod:`pejax.hf.config_mapping`); the logits equal transformers' (float32, eager attention)
  to about 1e-6 relative (tests/hf, every family and RoPE type).

  Example::

    model = pejax.hf.from_pretrained("path/to/Llama-3.2-1B", dtype=jnp.bfloat16)
    logits = model(tokens)                                   # [B, L, V] float32

  Args:
    path: the checkpoint directory.
    dtype: ``None`` (the checkpoint's dtype: bfloat16 files stay bfloat16, others float32),
      ``jnp.float32`` or ``jnp.bfloat16``: the dtype of the parameters and of the compute.
    **overrides: further :class:`DecoderConfig` fields, e.g. ``attention="blockwise"``,
      ``cache_rotated_keys=True`` (transformers' KV cache), or ``pe=`` a RoPE config with a
      context-extension scaling (:func:`pejax.hf.with_rope_scaling` builds one).

  Returns:
    The decoder with the checkpoint's weights. Its ``hf_source`` attribute (a
    :class:`~pejax.hf.config_mapping.HFSource`, not part of ``nnx.state``) records the family and
    the ``config.json`` keys pejax does not interpret, which :func:`pejax.hf.save_pretrained`
    writes back.

  Raises:
    ValueError: naming the file for a missing or corrupted file, naming the field for an
      unsupported family or config field, naming the tensor for a missing, unexpected or
      mis-shaped tensor.
  """
  directory = files_lib.check_directory(path)
  hf = files_lib.read_json(os.path.join(directory, files_lib.CONFIG_FILE), files_lib.CONFIG_FILE)
  files = files_lib.weight_files(directory)
  headers: dict[str, tuple[str, tuple]] = {}
  for file in sorted(set(files.values())):
    headers.update({name: spec for name, spec in files_lib.tensor_headers(file).items()
                    if name in files})
  missing_in_shards = sorted(set(files) - set(headers))
  if missing_in_shards:
    name = missing_in_shards[0]
    raise ValueError(f"tensor {name!r} is listed in {files_lib.INDEX_FILE} but missing from "
                     f"{files[name]}")
  dtype_name = compute_dtype_name(dtype, {headers[n][0] for n in headers})
  config = config_mapping.decoder_config_from_hf(hf, dtype=dtype_name, **overrides)
  model_type = hf["model_type"]
  entries = weight_mapping.weight_entries(config, model_type)
  used = {entry.name for entry in entries}
  unexpected = sorted(n for n in headers if n not in used and not _ignored(n, config))
  if unexpected:
    name = unexpected[0]
    raise ValueError(f"tensor {name!r} in {files[name]} has no place in a {model_type} decoder "
                     f"with this config.json ({len(unexpected)} such tensors); refusing to "
                     "drop weights silently")
  for entry in entries:
    if entry.name not in headers:
      raise ValueError(f"tensor {entry.name!r} is missing from the checkpoint in {directory}")
    stored, shape = headers[entry.name]
    if stored not in _STORED:
      raise ValueError(f"tensor {entry.name!r} in {files[entry.name]} has dtype {stored}; only "
                       f"{sorted(_STORED)} are read")
    if shape != entry.hf_shape:
      raise ValueError(f"tensor {entry.name!r} in {files[entry.name]} has shape {list(shape)}, "
                       f"config.json implies {list(entry.hf_shape)}")

  abstract = nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0)))
  graphdef, abstract_state = nnx.split(abstract)
  flat = nnx.to_flat_state(abstract_state)
  by_path = {entry.path: entry for entry in entries}
  paths = {tuple(path) for path, _ in flat}
  if paths != set(by_path):
    extra = sorted(map(str, paths ^ set(by_path)))
    raise ValueError(f"internal: decoder parameters and checkpoint mapping differ at {extra[:3]}")
  target = _NUMPY_DTYPES[dtype_name]
  offsets = {file: files_lib.data_offsets(file) for file in sorted(set(files.values()))}
  values = {}
  for name in files_lib.iter_file_groups([e.name for e in entries], files):
    for entry in (e for e in entries if e.name == name and e.path not in values):
      file = files[name]
      data_start, spans = offsets[file]
      stored, shape = headers[name]
      array = files_lib.read_tensor(file, data_start, spans[name][0], dtype=stored, shape=shape,
                                    rows=entry.rows, transpose=entry.transpose, target=target)
      # Aligned host memory: on CPU device_put takes it without a copy (jnp.asarray copies).
      values[entry.path] = jax.device_put(array)
      del array
  leaves = []
  for path, variable in flat:
    leaves.append((path, variable.replace(values[tuple(path)])))
  model = nnx.merge(graphdef, nnx.from_flat_state(leaves))
  # The family and the keys pejax does not interpret, for save_pretrained (static, not state).
  model.hf_source = config_mapping.HFSource.from_config(hf)
  return model


def with_rope_scaling(model: Decoder, scaling: Any) -> Decoder:
  """The same weights with another RoPE scaling (zero-shot context extension).

  Args:
    model: a decoder whose PE is one :class:`~pejax.nn.RotaryConfig` (every HF model).
    scaling: ``None`` or a :mod:`pejax.encodings.rope_scaling` dataclass (``YaRNScaling(4.0,
      8192)``, ``LinearScaling(4.0)``, ``DynamicNTKScaling(4.0, 8192)``, ...).

  Returns:
    A new decoder sharing the parameter arrays (no copy), whose config's PE has ``scaling``.

  Raises:
    ValueError: if the model's PE is not a single RoPE config.
  """
  import dataclasses  # pylint: disable=g-import-not-at-top
  from pejax.nn.positional.rope import RotaryConfig  # pylint: disable=g-import-not-at-top
  if not isinstance(model, Decoder) or not isinstance(model.config.pe, RotaryConfig):
    raise ValueError("model must be a Decoder with one RoPE config for all layers, got "
                     f"{getattr(getattr(model, 'config', None), 'pe', model)!r}")
  config = dataclasses.replace(model.config,
                               pe=dataclasses.replace(model.config.pe, scaling=scaling))
  abstract = nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0)))
  graphdef, _ = nnx.split(abstract)
  scaled = nnx.merge(graphdef, nnx.state(model))
  if getattr(model, "hf_source", None) is not None:
    scaled.hf_source = model.hf_source  # save_pretrained writes the new RoPE keys.
  return scaled
