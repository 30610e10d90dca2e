"""Fitting a prompt to a token budget: the largest haystack whose prompt fits ``length`` tokens.

A task's prompt is a function of one integer, its haystack size ``n`` (noise sentences, listed
words, ...), and grows roughly linearly with it. :func:`fit_to_length` finds the largest ``n``
whose prompt has at most ``length`` tokens by a secant search on measured token counts, falling
back to bisection: a handful of tokenizations per example (typically 3 to 6, the smallest prompt
included; the previous example's size is the first guess), not one per haystack unit, so
128K-token prompts are fitted in milliseconds with a byte tokenizer. The returned prompt was
tokenized and counted, so it never exceeds ``length``, even for a tokenizer whose counts are not
additive (BPE merges across a boundary).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

Draft = TypeVar("Draft")

# Secant steps before the search falls back to bisection (or doubling, with no upper bracket).
_SECANT_STEPS = 8
# A search longer than this means token counts do not grow with the haystack.
_MAX_STEPS = 128
# Haystack units added to the minimum for the first slope estimate (no warm start).
_PROBE_UNITS = 16


class PromptTooLong(ValueError):
  """The smallest prompt of a task is already longer than the budget.

  Attributes:
    min_tokens: the token count of the smallest prompt.
  """

  def __init__(self, min_tokens: int, length: int):
    super().__init__(f"length must be at least {min_tokens} tokens, got {length}")
    self.min_tokens = min_tokens


def token_counter(tokenizer: Any) -> Callable[[str], int]:
  """A function that counts the tokens of a text under ``tokenizer``, special tokens excluded.

  Args:
    tokenizer: any object with ``encode(text)`` returning a sequence of ids (``pejax.hf``'s
      tokenizers, ``transformers`` tokenizers, ``tiktoken`` encodings, ...). When ``encode``
      takes ``add_special_tokens``, it is called with ``False``, as RULER counts (no BOS).

  Returns:
    ``count(text) -> int``.

  Raises:
    ValueError: if ``tokenizer`` has no callable ``encode``.
  """
  encode = getattr(tokenizer, "encode", None)
  if not callable(encode):
    raise ValueError("tokenizer must have an encode(text) method returning token ids, got "
                     f"{type(tokenizer).__name__}")
  try:
    parameters = inspect.signature(encode).parameters
  except (TypeError, ValueError):  # Builtins and extension types may have no signature.
    parameters = {}
  if "add_special_tokens" in parameters:
    return lambda text: len(encode(text, add_special_tokens=False))
  return lambda text: len(encode(text))


def fit_to_length(build: Callable[[int], Draft], count: Callable[[Draft], int], *, length: int,
                  min_units: int, start: Optional[int] = None) -> Tuple[int, Draft, int]:
  """The largest haystack size whose prompt has at most ``length`` tokens.

  Args:
    build: ``build(n)`` -> the prompt with haystack size ``n``; deterministic in ``n``.
    count: the token count of a built prompt.
    length: the token budget.
    min_units: the smallest haystack size a prompt may have.
    start: a first guess (the previous example's size), or ``None``.

  Returns:
    ``(n, prompt, tokens)``: ``n >= min_units`` with ``tokens = count(prompt) <= length``;
    ``build(n + 1)`` was measured longer than ``length`` (when token counts are monotone in
    ``n``; otherwise some larger size was).

  Raises:
    PromptTooLong: if even ``build(min_units)`` is longer than ``length``.
    RuntimeError: if the token count does not grow with ``n`` (no bracket after many steps).
  """
  measured: Dict[int, Tuple[Draft, int]] = {}

  def measure(n: int) -> int:
    if n not in measured:
      draft = build(n)
      measured[n] = (draft, count(draft))
    return measured[n][1]

  lo, hi = min_units, None
  if measure(lo) > length:
    raise PromptTooLong(measured[lo][1], length)
  guess = start if start is not None and start > lo else lo + _PROBE_UNITS
  previous = lo
  for step in range(_MAX_STEPS):
    tokens = measure(guess)
    if tokens <= length:
      lo = max(lo, guess)
    else:
      hi = guess if hi is None else min(hi, guess)
    if hi is not None and hi - lo <= 1:
      draft, tokens = measured[lo]
      return lo, draft, tokens
    # Tokens per unit from the bracket, else from the two latest measurements.
    if hi is not None:
      slope = (measured[hi][1] - measured[lo][1]) / (hi - lo)
    else:
      slope = (tokens - measured[previous][1]) / (guess - previous) if guess != previous else 0
    previous = guess
    if slope > 0 and step < _SECANT_STEPS:
      target = lo + int((length - measured[lo][1]) // slope)
    elif hi is not None:
      target = (lo + hi) // 2
    else:
      target = 2 * lo
    target = max(target, lo + 1)
    if hi is not None:
      target = min(target, hi - 1)
    guess = target
  raise RuntimeError(f"no haystack size fits length={length}: the token count does not grow "
                     "with the haystack")
