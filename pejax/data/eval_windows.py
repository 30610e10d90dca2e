"""Evaluation windows over a validation split: the two protocols of the ALiBi paper.

Axes: N number of windows, L window length, S stride, T tokens of the split.

Both functions cut `[N, L]` rows out of a 1-D token array such that every scored target token of
the covered prefix is scored exactly once (`loss_mask` 1.0), and return numpy arrays:

* `nonoverlapping_windows`: consecutive disjoint chunks; window k has inputs
  `tokens[kL : kL + L]` and targets `tokens[kL + 1 : kL + L + 1]`, all scored. Tokens early in a
  chunk see little context, so perplexity is pessimistic; the ALiBi paper's main protocol.
* `sliding_windows`: window k starts at `kS`; the first window scores all its L targets, each later
  one only its last S, so every scored token after the first window has at least `L - S` tokens of
  context. `S = 1` is the classic (expensive) sliding evaluation; `S = L` equals the nonoverlapping
  protocol.

At most `max_tokens` targets are scored (all of them when None). The covered prefix is the longest
one made of whole windows: targets `tokens[1 : N L + 1]` (nonoverlapping) or
`tokens[1 : L + (N - 1) S + 1]` (sliding).

The returned `inputs`, `targets` and `positions` may be read-only views sharing memory (no
`N x L` copy even for S = 1); copy before writing, and feed large N to the model in slices.

References:
  Press, Smith and Lewis, "Train Short, Test Long: Attention with Linear Biases Enables Input
  Length Extrapolation", ICLR 2022, arXiv:2108.12409 (nonoverlapping and sliding window
  inference).
"""

from __future__ import annotations

import numpy as np

from pejax.encodings import arg_checks


def _prefix(tokens: np.ndarray, length: int, max_tokens: int | None) -> tuple[np.ndarray, int]:
  """Validates the arguments; returns the tokens and the number of targets that may be scored."""
  tokens = np.asarray(tokens)
  if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
    raise ValueError(
        f"tokens must be a 1-D integer array, got shape {tokens.shape} and dtype {tokens.dtype}")
  length = arg_checks.check_positive_int("length", length)
  if tokens.size < length + 1:
    raise ValueError(
        f"tokens has {tokens.size} tokens, fewer than one evaluation window of length + 1 ="
        f" {length + 1} (length {length}); use a shorter length or a larger split")
  budget = tokens.size - 1
  if max_tokens is not None:
    max_tokens = arg_checks.check_positive_int("max_tokens", max_tokens)
    if max_tokens < length:
      raise ValueError(
          f"max_tokens must be >= length to score one window, got max_tokens {max_tokens} and"
          f" length {length}")
    budget = min(budget, max_tokens)
  return tokens, budget


def _batch(inputs: np.ndarray, targets: np.ndarray,
           loss_mask: np.ndarray) -> dict[str, np.ndarray]:
  num_windows, length = loss_mask.shape
  positions = np.broadcast_to(np.arange(length, dtype=np.int32)[None, :], (num_windows, length))
  return {"inputs": inputs, "targets": targets, "positions": positions, "loss_mask": loss_mask}


def nonoverlapping_windows(tokens: np.ndarray, length: int, *,
                           max_tokens: int | None = None) -> dict[str, np.ndarray]:
  """Consecutive disjoint windows, every target scored.

  Args:
    tokens: `[T]` integer tokens (e.g. `Corpus.valid`).
    length: Window length L >= 1.
    max_tokens: Most targets to score; None scores as many whole windows as the split holds.

  Returns:
    `{"inputs", "targets", "positions"}` int32 `[N, L]` and `"loss_mask"` float32 `[N, L]` (all
    ones), N = `min(T - 1, max_tokens) // L`.

  Raises:
    ValueError: if `T < L + 1` (the message gives both), `max_tokens < L`, or an argument is
      invalid.
  """
  tokens, budget = _prefix(tokens, length, max_tokens)
  num_windows = budget // length
  prefix = tokens[:num_windows * length + 1].astype(np.int32)
  return _batch(prefix[:-1].reshape(num_windows, length), prefix[1:].reshape(num_windows, length),
                np.ones((num_windows, length), dtype=np.float32))


def sliding_windows(tokens: np.ndarray, length: int, *, stride: int,
                    max_tokens: int | None = None) -> dict[str, np.ndarray]:
  """Windows advanced by `stride`, each scoring only targets no earlier window scored.

  Args:
    tokens: `[T]` integer tokens (e.g. `Corpus.valid`).
    length: Window length L >= 1.
    stride: Step S between window starts, `1 <= S <= L`.
    max_tokens: Most targets to score; None scores as many as whole windows allow.

  Returns:
    `{"inputs", "targets", "positions"}` int32 `[N, L]` and `"loss_mask"` float32 `[N, L]`, N =
    `1 + (min(T - 1, max_tokens) - L) // S`; row 0 of the mask is all ones, later rows are ones
    on their last S columns only.

  Raises:
    ValueError: if `T < L + 1` (the message gives both), `max_tokens < L`, `stride` is outside
      `[1, L]`, or an argument is invalid.
  """
  tokens, budget = _prefix(tokens, length, max_tokens)
  stride = arg_checks.check_positive_int("stride", stride)
  if stride > length:
    raise ValueError(f"stride must be <= length {length} (no token left unscored), got {stride}")
  num_windows = 1 + (budget - length) // stride
  prefix = tokens[:(num_windows - 1) * stride + length + 1].astype(np.int32)
  windows = np.lib.stride_tricks.sliding_window_view(prefix, length + 1)[::stride]
  loss_mask = np.zeros((num_windows, length), dtype=np.float32)
  loss_mask[:, length - stride:] = 1.0
  loss_mask[0] = 1.0
  return _batch(windows[:, :-1], windows[:, 1:], loss_mask)
