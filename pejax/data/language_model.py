"""Next-byte language-model batches: random windows of a corpus split.

Axes: B batch, L sequence length, N corpus length in bytes.

Batch `i` draws `B` window starts uniformly from `[0, N - L - 1]` with
`np.random.default_rng([seed, i])`; each window holds `L + 1` consecutive bytes, `inputs` its first
`L` and `targets` its last `L`. Windows are sampled with replacement (an epoch is not defined), so
the state is only the step count and resuming is exact (see `pejax.data.batch_iterator`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pejax.data import batch_iterator


class LanguageModelIterator(batch_iterator.BatchIterator):
  """Random `L + 1`-byte windows of a token array, as `inputs` / `targets` pairs.

  Batches hold `inputs`, `targets`, `positions` (0..L-1) as int32 `[B, L]` and `loss_mask`
  (all ones) as float32 `[B, L]`.
  """

  def __init__(self, tokens: np.ndarray, *, batch_size: int, seq_len: int, seed: int):
    """Creates the iterator at step 0.

    Args:
      tokens: `[N]` integer array, e.g. `Corpus.train` (uint8 bytes).
      batch_size: Windows per batch B >= 1.
      seq_len: Model sequence length L >= 1; each window reads L + 1 tokens.
      seed: Non-negative data seed.

    Raises:
      ValueError: if `tokens` is not a 1-D integer array or is shorter than `seq_len + 1`, or a
        hyper-parameter is invalid.
    """
    super().__init__(seed=seed, batch_size=batch_size, seq_len=seq_len)
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
      raise ValueError(
          f"tokens must be a 1-D integer array, got shape {tokens.shape} and dtype {tokens.dtype}")
    if tokens.size < self.seq_len + 1:
      raise ValueError(
          f"tokens has {tokens.size} tokens, fewer than one training window of seq_len + 1 ="
          f" {self.seq_len + 1}")
    self.tokens = tokens
    self._offsets = np.arange(self.seq_len + 1, dtype=np.int64)[None, :]

  def identity(self) -> dict[str, Any]:
    """JSON-serializable fields that a state must match to be restored.

    Returns:
      `{"kind": "language_model", "seed", "batch_size", "seq_len", "num_tokens"}`.
    """
    return {"kind": "language_model", "seed": self.seed, "batch_size": self.batch_size,
            "seq_len": self.seq_len, "num_tokens": int(self.tokens.size)}

  def batch_at(self, step: int) -> dict[str, np.ndarray]:
    """Returns batch number `step`, a pure function of `(seed, step, tokens)`.

    Args:
      step: Non-negative batch index.

    Returns:
      int32 `inputs`, `targets`, `positions` `[B, L]` and float32 `loss_mask` `[B, L]` (all
      ones) as numpy arrays.
    """
    return self.rows_at(step, slice(0, self.batch_size))

  def rows_at(self, step: int, rows: slice) -> dict[str, np.ndarray]:
    """Rows `rows` of batch `step`, reading only their windows of the corpus.

    All `B` window starts of the batch are drawn (so the rows are those of the global batch),
    but only the selected windows are read.

    Args:
      step: Non-negative batch index.
      rows: `slice(start, stop)` within `[0, B)`.

    Returns:
      int32 `inputs`, `targets`, `positions` and float32 `loss_mask`, `[stop - start, L]` each.
    """
    rng = self.rng(step)
    starts = rng.integers(0, self.tokens.size - self.seq_len, size=self.batch_size)[rows]
    windows = self.tokens[starts[:, None] + self._offsets].astype(np.int32)
    count = len(starts)
    positions = np.broadcast_to(
        np.arange(self.seq_len, dtype=np.int32)[None, :], (count, self.seq_len))
    return {
        "inputs": np.ascontiguousarray(windows[:, :-1]),
        "targets": np.ascontiguousarray(windows[:, 1:]),
        "positions": np.array(positions),
        "loss_mask": np.ones((count, self.seq_len), dtype=np.float32),
    }
