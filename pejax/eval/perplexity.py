"""Perplexity and bits per byte against evaluation length (extrapolation curves).

Axes: N windows, B batch of windows, L evaluation length, V vocabulary.

The two protocols of the ALiBi paper (Press et al. 2022, arXiv 2108.12409):

* ``nonoverlap``: the validation split cut into disjoint length-L windows, every token scored;
  early tokens of each window see little context.
* ``sliding``: windows advanced by a stride S, each scoring only its last S tokens, so every
  scored token has at least L - S tokens of context (S = 1 is the paper's most expensive form).

A model whose PE cannot represent a length (a learned table shorter than L) gets a result with
``status = "n/a (table size N)"`` instead of failing the whole evaluation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Dict, List, Optional, Sequence

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax import data as data_lib
from pejax.encodings import arg_checks
from pejax.eval.json_fields import json_fields
from pejax.nn.attention import choose_implementation

MODES = ("nonoverlap", "sliding")
LN2 = math.log(2.0)


@dataclasses.dataclass(frozen=True)
class LengthResult:
  """Scores of one evaluation length under one protocol.

  Attributes:
    length: evaluation length L.
    mode: ``"nonoverlap"`` or ``"sliding"``.
    nll: mean negative log-likelihood per scored token (nats); NaN when not evaluated.
    perplexity: ``exp(nll)``.
    bits_per_byte: ``nll / ln 2`` (byte-level vocabulary: one token is one byte).
    tokens: number of scored tokens.
    attention: implementation used (``"dense"`` / ``"blockwise"``).
    status: ``"ok"`` or the reason it was not evaluated (e.g. ``"n/a (table size 128)"``).
  """

  length: int
  mode: str
  nll: float
  perplexity: float
  bits_per_byte: float
  tokens: int
  attention: str
  status: str = "ok"

  def to_json(self) -> Dict[str, object]:
    """The fields as a JSON-serializable dict.

    Returns:
      One key per field; a non-finite ``nll``, ``perplexity`` or ``bits_per_byte`` becomes None
      (JSON has no NaN or infinity).
    """
    return json_fields(self)


@nnx.jit(static_argnames=("attention",))
def _window_nll(model: nnx.Module, inputs: jax.Array, targets: jax.Array, positions: jax.Array,
                loss_mask: jax.Array, *, attention: str) -> jax.Array:
  """Sum of masked token NLL for one batch of windows (float32 log-softmax)."""
  logits = model(inputs, positions=positions, attention=attention).astype(jnp.float32)
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  token_ll = jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
  return -jnp.sum(token_ll * loss_mask)


def score_windows(model: nnx.Module, windows: Dict[str, np.ndarray], *, batch_size: int,
                  attention: str = "dense") -> tuple[float, int]:
  """Sums the NLL of every scored token of ``windows`` (from :mod:`pejax.data` eval windows).

  Args:
    model: a decoder called as ``model(inputs, positions=..., attention=...) -> [B, L, V]``.
    windows: ``inputs``, ``targets``, ``positions`` int ``[N, L]`` and ``loss_mask`` ``[N, L]``.
    batch_size: windows per forward pass; the last partial batch is padded with masked rows so
      every call has the same shape (one compilation per length).
    attention: ``"dense"`` or ``"blockwise"``.

  Returns:
    ``(total_nll_nats, scored_tokens)``.
  """
  batch_size = arg_checks.check_positive_int("batch_size", batch_size)
  num = windows["inputs"].shape[0]
  total, count = 0.0, 0
  for start in range(0, num, batch_size):
    rows = {k: np.asarray(v[start:start + batch_size]) for k, v in windows.items()}
    pad = batch_size - rows["inputs"].shape[0]
    if pad and num > batch_size:
      rows = {k: np.concatenate([v, np.zeros((pad,) + v.shape[1:], v.dtype)]) for k, v in
              rows.items()}
    rows["loss_mask"] = rows["loss_mask"].astype(np.float32)
    total += float(_window_nll(model, jnp.asarray(rows["inputs"], jnp.int32),
                               jnp.asarray(rows["targets"], jnp.int32),
                               jnp.asarray(rows["positions"], jnp.int32),
                               jnp.asarray(rows["loss_mask"]), attention=attention))
    count += int(rows["loss_mask"].sum())
  return total, count


def default_stride(length: int) -> int:
  """Sliding-window stride used when none is given: ``max(1, L // 4)`` (4x nonoverlap cost).

  Args:
    length: the evaluation length L.

  Returns:
    The stride in tokens, ``max(1, length // 4)``.
  """
  return max(1, length // 4)


def perplexity_at_lengths(
    model: nnx.Module, tokens: np.ndarray, *, lengths: Sequence[int], modes: Sequence[str],
    max_tokens: int, tokens_per_batch: int = 8192, blockwise_threshold: Optional[int] = None,
    stride: Optional[Callable[[int], int]] = None, max_length: Optional[int] = None,
    unsupported_reason: str = "", progress: Optional[Callable[[str], None]] = None,
) -> List[LengthResult]:
  """Perplexity and bits per byte of ``model`` at every length, in each protocol.

  Args:
    model: the decoder.
    tokens: ``[T]`` validation tokens (e.g. ``Corpus.valid``).
    lengths: evaluation lengths L.
    modes: any of ``"nonoverlap"``, ``"sliding"``.
    max_tokens: most tokens scored per (length, mode); fewer when the split is shorter.
    tokens_per_batch: windows per forward pass = ``max(1, tokens_per_batch // L)``.
    blockwise_threshold: lengths above it use blockwise attention (O(L * tile) memory); None:
      the platform's measured crossover (:func:`pejax.nn.attention.choose_implementation`).
    stride: sliding stride as a function of L (default :func:`default_stride`).
    max_length: longest length the model can represent (learned table size); longer lengths
      are reported as ``status = "n/a (<unsupported_reason>)"``.
    unsupported_reason: text for that status, e.g. ``"table size 128"``.
    progress: optional callback receiving one line per finished cell.

  Returns:
    One :class:`LengthResult` per (length, mode), lengths outer.
  """
  for mode in modes:
    arg_checks.check_choice("modes", mode, MODES)
  stride = stride or default_stride
  results = []
  for length in lengths:
    length = arg_checks.check_positive_int("lengths", length)
    # A PE that needs whole rows of logits (CoPE) cannot run blockwise: dense at any length.
    blockwise_ok = all(pe.supports_blockwise for pe in getattr(model, "pes", ()))
    attention = choose_implementation("auto", length, blockwise_threshold=blockwise_threshold,
                                      supports_blockwise=blockwise_ok)
    for mode in modes:
      if max_length is not None and length > max_length:
        nan = float("nan")
        results.append(LengthResult(length, mode, nan, nan, nan, 0, attention,
                                    f"n/a ({unsupported_reason or f'max length {max_length}'})"))
        continue
      budget = min(max_tokens, len(tokens) - 1)
      if budget < length:
        nan = float("nan")
        results.append(LengthResult(
            length, mode, nan, nan, nan, 0, attention,
            f"n/a (validation split has {len(tokens)} tokens)"))
        continue
      if mode == "nonoverlap":
        windows = data_lib.nonoverlapping_windows(tokens, length, max_tokens=budget)
      else:
        windows = data_lib.sliding_windows(tokens, length, stride=stride(length),
                                           max_tokens=budget)
      total, count = score_windows(model, windows,
                                   batch_size=max(1, tokens_per_batch // length),
                                   attention=attention)
      nll = total / count
      result = LengthResult(length, mode, nll, math.exp(min(nll, 700.0)), nll / LN2, count,
                            attention)
      results.append(result)
      if progress is not None:
        progress(f"eval L={length:>6} {mode:<10} ppl {result.perplexity:9.3f} "
                 f"bpb {result.bits_per_byte:.3f} ({count} tokens, {attention})")
  return results
