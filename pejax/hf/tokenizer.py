"""Tokenizers: a checkpoint directory's ``tokenizer.json``, and pejax's byte-level ids.

* :func:`load_tokenizer`: ``tokenizer.json`` through ``tokenizers``. Local files only (no
  network, no ``transformers``). The special tokens come from ``tokenizer_config.json``
  (``bos_token`` / ``eos_token`` / ``pad_token``, strings or ``{"content": ...}`` dicts) and,
  for the stop ids, from ``generation_config.json`` / ``config.json`` (``eos_token_id``, an id
  or a list).
* :class:`ByteTokenizer`: the ids pejax's byte-level data uses (id = the byte of the UTF-8
  text, vocabulary 256, no special tokens: the synthetic tasks' padding id 0 is the byte
  ``\x00``), and :meth:`ByteTokenizer.save`, the same ids as a ``tokenizer.json`` that
  ``tokenizers``, :func:`load_tokenizer` and transformers' ``PreTrainedTokenizerFast`` read.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional, Sequence

import numpy as np

from pejax import json_file
from pejax.hf import safetensors_files as files_lib

TOKENIZER_FILE = "tokenizer.json"


class Tokenizer:
  """Text <-> int32 token ids with a model's vocabulary (wraps ``tokenizers.Tokenizer``).

  Attributes:
    name: the directory it was loaded from.
    vocab_size: size of the vocabulary, special tokens included.
    bos_token_id: id of the beginning-of-sequence token, or ``None``.
    eos_token_ids: ids that end generation (possibly empty).
    pad_token_id: id of the padding token, or ``None``.
  """

  def __init__(self, tokenizer: Any, *, name: str, bos_token_id: Optional[int] = None,
               eos_token_ids: Sequence[int] = (), pad_token_id: Optional[int] = None):
    """Wraps a ``tokenizers.Tokenizer``.

    Args:
      tokenizer: the ``tokenizers.Tokenizer``.
      name: a label (the directory).
      bos_token_id: beginning-of-sequence id.
      eos_token_ids: stop ids.
      pad_token_id: padding id.
    """
    self._tokenizer = tokenizer
    self.name = name
    self.vocab_size = int(tokenizer.get_vocab_size(with_added_tokens=True))
    self.bos_token_id = bos_token_id
    self.eos_token_ids = tuple(eos_token_ids)
    self.pad_token_id = pad_token_id

  def encode(self, text: str, *, add_special_tokens: bool = False) -> np.ndarray:
    """Token ids of ``text``.

    Args:
      text: a string.
      add_special_tokens: let the tokenizer's post-processor add its special tokens (BOS ...).

    Returns:
      int32 ``[N]`` ids.
    """
    if not isinstance(text, str):
      raise ValueError(f"text must be a str, got {type(text).__name__}")
    ids = self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
    return np.asarray(ids, np.int32)

  def decode(self, ids: Any, *, skip_special_tokens: bool = True) -> str:
    """Text of token ids.

    Args:
      ids: int ``[N]`` ids (array or list).
      skip_special_tokens: drop special tokens from the text.

    Returns:
      The decoded string.
    """
    array = np.asarray(ids)
    if array.dtype == bool or not (np.issubdtype(array.dtype, np.integer) or array.size == 0):
      raise ValueError(f"ids must be integer token ids, got dtype {array.dtype}")
    array = array.reshape(-1)
    bad = array[(array < 0) | (array >= self.vocab_size)]
    if bad.size:  # The Rust decoder would drop them from the text without a word.
      raise ValueError(f"ids must be in [0, {self.vocab_size}) (the vocabulary of "
                       f"{self.name}), got {int(bad[0])}")
    return self._tokenizer.decode([int(i) for i in array],
                                  skip_special_tokens=skip_special_tokens)

  def __repr__(self) -> str:
    return f"Tokenizer({self.name!r}, vocab_size={self.vocab_size})"


def _token_text(value: Any) -> Optional[str]:
  if isinstance(value, dict):
    value = value.get("content")
  return value if isinstance(value, str) else None


def _ids(value: Any, *, source: str, vocab_size: int) -> tuple[int, ...]:
  """Token ids of a config value (an id, a list of ids or null); anything else is an error."""
  if value is None:
    return ()
  values = value if isinstance(value, (list, tuple)) else [value]
  for v in values:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < vocab_size:
      raise ValueError(f"{source} must be token ids in [0, {vocab_size}), got {value!r}")
  return tuple(values)


def load_tokenizer(path: Any) -> Tokenizer:
  """Loads ``tokenizer.json`` (and the special tokens) of a local checkpoint directory.

  Args:
    path: the checkpoint directory (or the ``tokenizer.json`` file itself).

  Returns:
    A :class:`Tokenizer`.

  Raises:
    ValueError: naming the file when ``tokenizer.json`` is missing or cannot be parsed, and
      naming the file and key of a special token that is not in the vocabulary or an id that is
      not an integer in ``[0, vocab_size)`` (a stop or padding token is never dropped).
  """
  from tokenizers import Tokenizer as HFTokenizer  # pylint: disable=g-import-not-at-top
  full = os.path.abspath(os.path.expanduser(os.fspath(path)))
  directory, file = (os.path.dirname(full), full) if os.path.isfile(full) else (
      full, os.path.join(full, TOKENIZER_FILE))
  if not os.path.isfile(file):
    raise ValueError(f"{TOKENIZER_FILE} not found: {file} (pejax reads fast-tokenizer files "
                     "only; sentencepiece .model files need converting)")
  try:
    tokenizer = HFTokenizer.from_file(file)
  except Exception as e:  # The Rust parser raises its own exception types.
    raise ValueError(f"cannot parse {TOKENIZER_FILE}: {file} ({e})") from None

  def optional_json(name: str) -> dict:
    file_path = os.path.join(directory, name)
    return files_lib.read_json(file_path, name) if os.path.isfile(file_path) else {}

  special = optional_json("tokenizer_config.json")
  generation = optional_json("generation_config.json")
  config = optional_json(files_lib.CONFIG_FILE)

  vocab_size = int(tokenizer.get_vocab_size(with_added_tokens=True))

  def token_id(key: str) -> Optional[int]:
    value = special.get(key)
    text = _token_text(value)
    if value is not None and text is None:
      raise ValueError(f"tokenizer_config.json {key} must be a token string (or "
                       f"{{'content': ...}}), got {value!r}")
    if text is None:
      return None
    found = tokenizer.token_to_id(text)
    if found is None:  # Dropping it would silently lose a stop or padding token.
      raise ValueError(f"tokenizer_config.json {key} {text!r} is not a token of {file}")
    return found

  def ids(config_dict: dict, name: str, key: str) -> tuple[int, ...]:
    return _ids(config_dict.get(key), source=f"{name} {key}", vocab_size=vocab_size)

  eos = (ids(generation, "generation_config.json", "eos_token_id")
         or ids(config, files_lib.CONFIG_FILE, "eos_token_id"))
  eos_token = token_id("eos_token")
  if not eos and eos_token is not None:
    eos = (eos_token,)
  bos = token_id("bos_token")
  if bos is None:
    bos = next(iter(ids(config, files_lib.CONFIG_FILE, "bos_token_id")), None)
  pad = token_id("pad_token")
  if pad is None:
    pad = next(iter(ids(config, files_lib.CONFIG_FILE, "pad_token_id")), None)
  return Tokenizer(tokenizer, name=directory, bos_token_id=bos, eos_token_ids=eos,
                   pad_token_id=pad)


BYTE_VOCAB_SIZE = 256  # pejax's byte-level vocabulary: one id per byte value.
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


def byte_to_unicode() -> dict[int, str]:
  """GPT-2's printable stand-in character for each byte (``tokenizers``' ``ByteLevel`` map).

  Returns:
    ``{byte: one-character str}`` for the 256 byte values.

  References:
    Radford et al. 2019, "Language Models are Unsupervised Multitask Learners" (GPT-2's
    ``bytes_to_unicode``).
  """
  printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
               + list(range(ord("\xae"), ord("\xff") + 1)))
  chars = list(printable)
  extra = 0
  for b in range(BYTE_VOCAB_SIZE):
    if b not in printable:
      printable.append(b)
      chars.append(BYTE_VOCAB_SIZE + extra)
      extra += 1
  return {b: chr(c) for b, c in zip(printable, chars)}


class ByteTokenizer:
  """pejax's byte-level ids: token id = byte value of the UTF-8 text (vocabulary 256).

  The built-in corpus, text files and the synthetic tasks are all trained on these ids; there
  are no special tokens (the synthetic tasks pad with id 0, the byte ``\x00``, which their text
  never contains), so ``bos_token_id`` and ``pad_token_id`` are ``None`` and nothing stops
  generation.

  Example::

    tok = ByteTokenizer()
    tok.encode("héllo")           # [104, 195, 169, 108, 108, 111]
    tok.decode([104, 105])        # "hi"

  Attributes:
    name: ``"bytes"``.
    vocab_size: 256.
    bos_token_id: ``None``.
    eos_token_ids: ``()``.
    pad_token_id: ``None``.
  """

  name = "bytes"
  vocab_size = BYTE_VOCAB_SIZE
  bos_token_id = None
  eos_token_ids: tuple[int, ...] = ()
  pad_token_id = None

  def encode(self, text: str) -> list[int]:
    """The ids of ``text``: its UTF-8 bytes.

    Args:
      text: a string.

    Returns:
      One id in ``[0, 256)`` per UTF-8 byte.

    Raises:
      ValueError: if ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
      raise ValueError(f"text must be a str, got {type(text).__name__}")
    return list(text.encode("utf-8"))

  def decode(self, ids: Any) -> str:
    """The text of byte ids (invalid UTF-8 becomes U+FFFD, as ``errors="replace"``).

    Args:
      ids: int ``[N]`` ids (a list or an array).

    Returns:
      The decoded string.

    Raises:
      ValueError: naming the first id outside ``[0, 256)``.
    """
    values = [int(i) for i in np.asarray(ids).reshape(-1)]
    bad = [i for i in values if not 0 <= i < BYTE_VOCAB_SIZE]
    if bad:
      raise ValueError(f"ids must be bytes in [0, {BYTE_VOCAB_SIZE}), got {bad[0]}")
    return bytes(values).decode("utf-8", errors="replace")

  def to_tokenizers(self) -> Any:
    """The same ids as a ``tokenizers.Tokenizer`` (byte-level BPE with no merges).

    Each byte becomes its GPT-2 stand-in character (:func:`byte_to_unicode`), whose vocabulary
    id is the byte value; the ``ByteLevel`` decoder maps the characters back to bytes.

    Returns:
      The ``tokenizers.Tokenizer``.
    """
    from tokenizers import Tokenizer as HFTokenizer  # pylint: disable=g-import-not-at-top
    from tokenizers import decoders, models, pre_tokenizers  # pylint: disable=g-import-not-at-top
    vocab = {char: b for b, char in byte_to_unicode().items()}
    tokenizer = HFTokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer

  def save(self, directory: Any) -> list[str]:
    """Writes ``tokenizer.json`` and ``tokenizer_config.json`` with these ids into ``directory``.

    ``tokenizer_config.json`` names ``PreTrainedTokenizerFast`` (transformers'
    ``AutoTokenizer`` then reads ``tokenizer.json`` as it is) and no special tokens.

    Args:
      directory: an existing directory.

    Returns:
      The written file names.
    """
    directory = os.fspath(directory)
    self.to_tokenizers().save(os.path.join(directory, TOKENIZER_FILE))
    settings = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": None,
                "clean_up_tokenization_spaces": False, "add_bos_token": False,
                "add_eos_token": False, "bos_token": None, "eos_token": None,
                "pad_token": None, "unk_token": None}
    json_file.write_text_atomic(os.path.join(directory, TOKENIZER_CONFIG_FILE),
                                json.dumps(settings, indent=2, sort_keys=True) + "\n")
    return [TOKENIZER_FILE, TOKENIZER_CONFIG_FILE]

  def __repr__(self) -> str:
    return "ByteTokenizer(vocab_size=256)"
