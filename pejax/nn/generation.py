"""Autoregressive generation over the KV cache: greedy, temperature, top-k and top-p sampling.

Axes: B batch (prompts), L longest prompt, N new tokens, V vocabulary.

One ``jax.jit`` runs the whole thing: the prefill of the (left-padded) prompts, then a
``lax.while_loop`` of :meth:`~pejax.nn.Decoder.decode_step` calls that stops when every row has
produced a stop token or N tokens. It compiles once per (model, B, L, N, sampling settings), not
once per token.

Prompts of different lengths are left-padded: each row's tokens take positions ``0 .. n_i - 1``
and generate from ``n_i`` on, and the cache's segment ids keep them from attending to the padding
slots (what Hugging Face ``generate`` does with an attention mask). At temperature 0 decoding is
greedy (the first maximal logit, as ``torch.argmax``), which reproduces transformers' greedy
``generate`` token for token (tests/hf, every family; load the model with
``cache_rotated_keys=True`` to also copy transformers' stale-key behaviour under dynamic NTK /
LongRoPE past the original length).

References:
  Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration", arXiv 1904.09751
  (nucleus / top-p sampling); Fan et al. 2018, arXiv 1805.04833 (top-k sampling).
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Sequence

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from pejax.encodings import arg_checks


def _strict_int(name: str, value: Any, *, low: int, high: Optional[int] = None,
                bound: str = "") -> int:
  """``value`` as an int in ``[low, high)``: no bool, no float (2.5 is not silently 2)."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
  if value < low or (high is not None and value >= high):
    upper = f"{bound}={high}" if bound else f"{high}"
    text = f"in [{low}, {upper})" if high is not None else f">= {low}"
    raise ValueError(f"{name} must be {text}, got {value!r}")
  return int(value)


def check_stop_tokens(stop_tokens: Any, *, vocab_size: Optional[int]) -> tuple:
  """Validates ``stop_tokens`` once, before any tracing: a sequence of integer token ids in
  ``[0, vocab_size)`` (no bool, no float; ``vocab_size=None``: only ``>= 0`` is checked).

  Returns:
    The ids as a tuple of ints.

  Raises:
    ValueError: naming ``stop_tokens`` and the value.
  """
  if isinstance(stop_tokens, (str, bytes)) or not isinstance(stop_tokens, Sequence):
    raise ValueError(f"stop_tokens must be a sequence of token ids, got {stop_tokens!r}")
  return tuple(_strict_int("stop_tokens", t, low=0, high=vocab_size, bound="vocab_size")
               for t in stop_tokens)


def check_sampling(*, temperature: Any, top_k: Any, top_p: Any) -> tuple:
  """Validates sampling settings once, before any tracing.

  Returns:
    ``(temperature: float, top_k: int | None, top_p: float | None)``.

  Raises:
    ValueError: naming the argument and the value, for a temperature that is not a finite
      number >= 0 (booleans are not numbers here), a ``top_k`` that is not an integer >= 1,
      a ``top_p`` outside ``(0, 1]``, or ``top_k`` / ``top_p`` with greedy decoding (they would
      be ignored).
  """
  if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.integer,
                                                                   np.floating)) or not (
      np.isfinite(temperature) and temperature >= 0):
    raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
  temperature = float(temperature)
  if top_k is not None:
    top_k = _strict_int("top_k", top_k, low=1)
  if top_p is not None:
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float, np.integer,
                                                         np.floating)) or not 0 < top_p <= 1:
      raise ValueError(f"top_p must be in (0, 1] (a number), got {top_p!r}")
    top_p = float(top_p)
  if temperature == 0 and (top_k is not None or top_p is not None):
    raise ValueError("top_k / top_p only apply when sampling (temperature > 0), got "
                     f"temperature=0 with top_k={top_k}, top_p={top_p}")
  return temperature, top_k, top_p


def sample_logits(logits: jax.Array, key: Optional[jax.Array], *, temperature: float = 0.0,
                  top_k: Optional[int] = None, top_p: Optional[float] = None) -> jax.Array:
  """Picks one token per row from next-token logits.

  A row whose logits hold a NaN, or are all ``-inf`` (nothing to sample), gives the token
  ``-1``: the poison of the decoder's NaN logits (an out-of-range position or token under
  ``jax.jit``) is kept, never turned into a finite token id. ``-1`` is rejected as an input
  token id wherever ids are concrete (:meth:`~pejax.nn.Decoder.prefill`, :func:`generate`).

  Args:
    logits: float ``[B, V]``.
    key: a PRNG key (unused, may be ``None``, at temperature 0).
    temperature: 0 for greedy (argmax), else logits are divided by it before sampling.
    top_k: keep only the k largest logits (``None``: all).
    top_p: keep the smallest set of tokens whose probability reaches ``top_p`` (``None``: all;
      the most likely token is always kept).

  Returns:
    int32 ``[B]`` token ids (``-1`` for a row with NaN or only ``-inf`` logits).

  Raises:
    ValueError: naming the argument, for settings :func:`check_sampling` rejects, logits that
      are not a float ``[B, V]`` array, or a missing ``key`` when sampling.
  """
  temperature, top_k, top_p = check_sampling(temperature=temperature, top_k=top_k, top_p=top_p)
  if not hasattr(logits, "ndim") or logits.ndim != 2 or not jnp.issubdtype(logits.dtype,
                                                                          jnp.floating):
    raise ValueError(f"logits must be a float [B, V] array, got shape "
                     f"{getattr(logits, 'shape', None)} and dtype {getattr(logits, 'dtype', None)}")
  if temperature > 0 and key is None:
    raise ValueError("key must be a PRNG key when temperature > 0, got None")
  poisoned = jnp.isnan(logits).any(axis=-1) | jnp.all(logits == -jnp.inf, axis=-1)
  if temperature == 0.0:
    token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return jnp.where(poisoned, jnp.int32(-1), token)
  logits = logits.astype(jnp.float32) / jnp.float32(temperature)
  if top_k is not None and top_k < logits.shape[-1]:
    kth = jax.lax.top_k(logits, top_k)[0][..., -1:]
    logits = jnp.where(logits < kth, -jnp.inf, logits)
  if top_p is not None and top_p < 1.0:
    ordered = jnp.sort(logits, axis=-1)[..., ::-1]
    probs = jax.nn.softmax(ordered, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # Probability mass ranked above each token.
    kept = before < jnp.float32(top_p)
    threshold = jnp.min(jnp.where(kept, ordered, jnp.inf), axis=-1, keepdims=True)
    logits = jnp.where(logits < threshold, -jnp.inf, logits)
  token = jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)
  return jnp.where(poisoned, jnp.int32(-1), token)


def _left_pad(prompts: Sequence[Sequence[int]], pad_token: int) -> tuple[np.ndarray, np.ndarray]:
  """Ragged prompts -> (int32 tokens [B, L], int32 mask [B, L]) left-padded."""
  rows = [np.asarray(p).reshape(-1) for p in prompts]
  if not rows or any(r.size == 0 for r in rows):
    raise ValueError("prompt_tokens must hold at least one prompt, each with at least one token")
  width = max(r.size for r in rows)
  tokens = np.full((len(rows), width), pad_token, np.int32)
  mask = np.zeros((len(rows), width), np.int32)
  for i, r in enumerate(rows):
    if not np.issubdtype(r.dtype, np.integer):
      raise ValueError(f"prompt_tokens[{i}] must hold integer token ids, got dtype {r.dtype}")
    tokens[i, width - r.size:] = r
    mask[i, width - r.size:] = 1
  return tokens, mask


def _check_prompts(prompt_tokens: Any, prompt_mask: Any, pad_token: int):
  if isinstance(prompt_tokens, (list, tuple)) and prompt_tokens and not np.isscalar(
      prompt_tokens[0]):
    if prompt_mask is not None:
      raise ValueError("prompt_mask is only taken with a [B, L] array of prompt_tokens; ragged "
                       "prompts are left-padded here")
    return _left_pad(prompt_tokens, pad_token)
  tokens = np.asarray(prompt_tokens)
  if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer) or tokens.shape[1] == 0:
    raise ValueError(f"prompt_tokens must be an int [B, L] array (L >= 1) or a list of token "
                     f"lists, got shape {tokens.shape} and dtype {tokens.dtype}")
  if prompt_mask is None:
    return tokens.astype(np.int32), np.ones(tokens.shape, np.int32)
  mask = np.asarray(prompt_mask)
  if mask.shape != tokens.shape or not np.isin(mask, (0, 1)).all():
    raise ValueError(f"prompt_mask must be a 0/1 array of shape {tokens.shape}, got shape "
                     f"{mask.shape}")
  mask = mask.astype(np.int32)
  if (np.diff(mask, axis=1) < 0).any() or (mask[:, -1] == 0).any():
    raise ValueError("prompt_mask must describe left padding: zeros, then ones up to the end "
                     "of each row (at least one token per row)")
  return tokens.astype(np.int32), mask


def generate(model: nnx.Module, prompt_tokens: Any, *, max_new_tokens: int,
             temperature: float = 0.0, top_k: Optional[int] = None,
             top_p: Optional[float] = None, rng: Optional[jax.Array] = None,
             prompt_mask: Any = None, stop_tokens: Sequence[int] = (),
             pad_token: int = 0, cache_dtype: Any = None, cache_eviction: str = "none",
             cache_size: Optional[int] = None, sink_tokens: int = 0) -> jax.Array:
  """Generates ``max_new_tokens`` tokens after each prompt (jitted prefill + decode loop).

  Args:
    model: a :class:`~pejax.nn.Decoder` (e.g. from :func:`pejax.hf.from_pretrained`).
    prompt_tokens: int ``[B, L]`` prompts (left-padded when ``prompt_mask`` is given), or a list
      of B token lists of different lengths (left-padded here).
    max_new_tokens: N, the number of tokens to generate per row.
    temperature: 0 (default) for greedy decoding; > 0 samples from ``softmax(logits / T)``.
    top_k: with sampling, keep only the k most likely tokens.
    top_p: with sampling, nucleus: keep the most likely tokens up to probability ``top_p``.
    rng: PRNG key, required when ``temperature > 0``.
    prompt_mask: optional int ``[B, L]`` (1 = token, 0 = left padding) for an array prompt.
    stop_tokens: token ids that end a row (the stop token is emitted; the rest of the row is
      ``pad_token``). Generation stops early when every row has stopped.
    pad_token: id written for the padding of ragged prompts and after a row's stop token.
    cache_dtype: storage of the KV cache (:meth:`~pejax.nn.Decoder.init_cache`): ``None`` (the
      compute dtype), a float dtype, ``"int8"`` or ``"float8_e4m3fn"`` (``"fp8"``).
    cache_eviction: ``"none"`` (a cache of ``L + N`` slots), ``"window"`` (a ring buffer of
      ``cache_size`` slots) or ``"sinks"`` (``sink_tokens`` first tokens plus a ring of recent
      ones, positions assigned within the cache: StreamingLLM).
    cache_size: slots of the cache; ``None`` = ``L + N`` (required for the evicting kinds).
    sink_tokens: S for ``cache_eviction="sinks"``.

  Returns:
    int32 ``[B, N]``, the new tokens of each row (prompts not included).

  Raises:
    ValueError: naming the argument, for a bad prompt, mask, count, temperature, top-k / top-p,
      a missing ``rng`` when sampling, token ids outside the vocabulary, or a cache setting
      :meth:`~pejax.nn.Decoder.init_cache` rejects (or a ``cache_size`` below ``L + N`` without
      eviction).
  """
  from pejax.nn.decoder import Decoder  # pylint: disable=g-import-not-at-top
  if not isinstance(model, Decoder):
    raise ValueError(f"model must be a pejax.nn.Decoder, got {type(model).__name__}")
  max_new_tokens = arg_checks.check_positive_int("max_new_tokens", max_new_tokens)
  vocab = model.config.vocab_size
  pad_token = _strict_int("pad_token", pad_token, low=0, high=vocab, bound="vocab_size")
  temperature, top_k, top_p = check_sampling(temperature=temperature, top_k=top_k, top_p=top_p)
  if temperature > 0 and rng is None:
    raise ValueError("rng must be a PRNG key when temperature > 0, got None")
  stops = check_stop_tokens(stop_tokens, vocab_size=vocab)
  tokens, mask = _check_prompts(prompt_tokens, prompt_mask, pad_token)
  if tokens.min() < 0 or tokens.max() >= vocab:
    raise ValueError(f"prompt_tokens must be in [0, vocab_size={vocab}), got min "
                     f"{tokens.min()} and max {tokens.max()}")
  if rng is None:
    rng = jax.random.PRNGKey(0)
  needed = tokens.shape[1] + max_new_tokens
  if cache_size is None:
    if cache_eviction != "none":
      raise ValueError(f"cache_size must be given for cache_eviction={cache_eviction!r} (the "
                       "slots of the ring buffer), got None")
    cache_size = needed
  cache_size = arg_checks.check_positive_int("cache_size", cache_size)
  if cache_eviction == "none" and cache_size < needed:
    raise ValueError(f"cache_size ({cache_size}) must hold the prompt and the new tokens "
                     f"({tokens.shape[1]} + {max_new_tokens} = {needed}) without eviction; "
                     "use cache_eviction='window' or 'sinks' for a smaller cache")
  # Validates the cache settings now (not inside the trace), allocating nothing: eval_shape runs
  # init_cache's checks on abstract arrays.
  cache_kind = dict(dtype=cache_dtype, eviction=cache_eviction, sink_tokens=sink_tokens)
  try:
    jax.eval_shape(lambda: model.init_cache(1, cache_size, **cache_kind))
  except ValueError as error:
    raise ValueError(f"cache settings (cache_dtype={cache_dtype!r}, cache_eviction="
                     f"{cache_eviction!r}, cache_size={cache_size}, sink_tokens={sink_tokens}): "
                     f"{error}") from None
  # The largest position the PE sees: text positions (n_i + N - 1), or, with sinks, positions
  # within the cache (0 .. T). A learned table ends at its max_length: beyond it the decoder's
  # logits would be NaN under the jit below, so say it now, naming the count.
  last_position = cache_size if cache_eviction == "sinks" else needed - 1
  for pe in model.layer_pes():
    limit = getattr(pe, "max_length", None)
    if limit is not None and last_position >= limit:
      raise ValueError(
          f"max_new_tokens={max_new_tokens} with a prompt of {tokens.shape[1]} tokens reaches "
          f"position {last_position}, past the {type(pe).__name__}'s max_length={limit} "
          f"(positions 0 .. {limit - 1}); generate at most {max(limit - tokens.shape[1], 0)} "
          "tokens, or use cache_eviction='sinks' with cache_size < max_length")
  graphdef, state = nnx.split(model)
  # Stop ids are an argument, not a constant of the program (-2: no stop token; -1 is the
  # poison of a NaN row, sample_logits), so that other
  # stop tokens reuse the compilation.
  stop_array = jnp.asarray(stops or (-2,), jnp.int32)
  out = _generate(graphdef, state, jnp.asarray(tokens), jnp.asarray(mask), rng, stop_array,
                   max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                   top_p=None if top_p is None else float(top_p), pad_token=pad_token,
                   cache_size=cache_size, cache_kind=tuple(sorted(cache_kind.items())))
  poisoned = np.argwhere(np.asarray(out) == -1)
  if poisoned.size:
    row, step = (int(i) for i in poisoned[0])
    raise ValueError(
        f"the model's logits were NaN (or all -inf) at generated token {step} of row {row} "
        f"({len(poisoned)} tokens in all): non-finite parameters, or a position or token the "
        "decoder cannot encode; no token is returned for them")
  return out


@functools.partial(jax.jit, static_argnames=("graphdef", "max_new_tokens", "temperature",
                                             "top_k", "top_p", "pad_token", "cache_size",
                                             "cache_kind"))
def _generate(graphdef, state, tokens, mask, rng, stops, *, max_new_tokens, temperature, top_k,
              top_p, pad_token, cache_size, cache_kind):
  model = nnx.merge(graphdef, state)
  batch, prompt_len = tokens.shape
  positions = jnp.maximum(jnp.cumsum(mask, axis=1) - 1, 0).astype(jnp.int32)
  cache = model.init_cache(batch, cache_size, **dict(cache_kind))
  logits, cache = model.prefill(tokens, positions, cache, segment_ids=mask)
  next_position = jnp.sum(mask, axis=1).astype(jnp.int32)  # [B]: n_i.
  sample = functools.partial(sample_logits, temperature=temperature, top_k=top_k, top_p=top_p)
  rng, key = jax.random.split(rng)
  token = sample(logits[:, -1], key)
  out = jnp.full((batch, max_new_tokens), pad_token, jnp.int32)
  done = jnp.zeros((batch,), bool)

  def emit(step, token, out, done):
    out = out.at[:, step].set(jnp.where(done, pad_token, token))
    done = done | jnp.isin(token, stops)
    return out, done

  out, done = emit(0, token, out, done)

  def cond(carry):
    step, _, _, _, done, _ = carry
    return (step < max_new_tokens) & ~jnp.all(done)

  def body(carry):
    step, token, cache, out, done, rng = carry
    position = (next_position + step - 1)[:, None]
    logits, cache = model.decode_step(token[:, None], position, cache)
    rng, key = jax.random.split(rng)
    token = sample(logits[:, -1], key)
    out, done = emit(step, token, out, done)
    return step + 1, token, cache, out, done, rng

  carry = (jnp.int32(1), token, cache, out, done, rng)
  _, _, _, out, _, _ = jax.lax.while_loop(cond, body, carry)
  return out
