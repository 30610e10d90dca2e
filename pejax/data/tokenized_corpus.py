"""A text corpus tokenized with a pretrained model's vocabulary instead of bytes.

Axes: N tokens. The data layer does not import a tokenizer library: it takes any object with
``encode(text) -> int ids`` and ``vocab_size`` (``pejax.hf.load_tokenizer`` returns one), so the
same corpora, windows and perplexity code serve byte-level models and pretrained ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pejax.data import corpus as corpus_lib


def _encode(tokenizer: Any, data: np.ndarray, split: str) -> np.ndarray:
  text = bytes(np.asarray(data, np.uint8)).decode("utf-8", errors="replace")
  ids = np.asarray(tokenizer.encode(text), np.int64).reshape(-1)
  vocab = int(tokenizer.vocab_size)
  if ids.size and (ids.min() < 0 or ids.max() >= vocab):
    raise ValueError(f"tokenizer produced ids outside [0, vocab_size={vocab}) on the {split} "
                     f"split: min {ids.min()}, max {ids.max()}")
  return ids.astype(np.int32)


def tokenize_corpus(corpus: corpus_lib.Corpus, tokenizer: Any) -> corpus_lib.Corpus:
  """The corpus with its train and validation splits tokenized.

  Each split is decoded as UTF-8 (the corpus loaders guarantee it; a split cut inside a
  character gets U+FFFD there) and encoded with ``tokenizer`` without special tokens.

  Args:
    corpus: a byte-level :class:`~pejax.data.Corpus`.
    tokenizer: an object with ``encode(str) -> [N] ids``, ``vocab_size`` and optionally
      ``name``.

  Returns:
    A :class:`~pejax.data.Corpus` whose ``train`` / ``valid`` are int32 ``[N]`` token ids, with
    ``tokenizer``, ``vocab_size``, ``train_tokens`` and ``valid_tokens`` added to the metadata.

  Raises:
    ValueError: if the tokenizer lacks ``encode`` / ``vocab_size`` or produces an id outside
      the vocabulary.
  """
  if not hasattr(tokenizer, "encode") or not hasattr(tokenizer, "vocab_size"):
    raise ValueError("tokenizer must have encode(text) and vocab_size (pejax.hf.load_tokenizer), "
                     f"got {type(tokenizer).__name__}")
  train = _encode(tokenizer, corpus.train, "train")
  valid = _encode(tokenizer, corpus.valid, "valid")
  metadata = dict(corpus.metadata, tokenizer=str(getattr(tokenizer, "name", "")),
                  vocab_size=int(tokenizer.vocab_size), train_tokens=int(train.size),
                  valid_tokens=int(valid.size))
  return corpus_lib.Corpus(name=corpus.name, train=train, valid=valid, metadata=metadata)
