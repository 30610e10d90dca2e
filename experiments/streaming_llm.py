r"""Streaming with attention sinks (StreamingLLM): a long text stream through a small KV cache.

    python -m experiments.streaming_llm --quick     # tiny models, 4K tokens, cache 128: < 1 min
    python -m experiments.streaming_llm             # L=1024, 64K tokens, cache 1024
    python launch.py --study=streaming_llm --quick

(Measured on 2 CPU cores shared with other jobs: quick 37 s including its two tiny models;
full 13 min of measurements (each 64K-token decode stream about 2 min, each 64K-token full
forward pass 2.5 min) plus 22 min to train the two models, which later runs reuse.)

A RoPE and an ALiBi decoder are trained at length L on the stdlib corpus (4 layers, d_model
128, L = 1024: the cache below is within the training length, as in StreamingLLM). The first
N + 1 bytes of the validation split (its files concatenated) are then streamed **token by
token** through ``Decoder.decode_step`` with a cache of C = L slots (one jitted ``lax.scan`` per
chunk of tokens), and the negative log-likelihood of every next token is recorded, under each
cache policy:

* ``window``: a ring buffer of C slots (``eviction="window"``); tokens keep their text positions,
  the oldest token is overwritten: window attention.
* ``sinks``: the first 4 tokens kept forever plus a ring of C - 4 recent tokens
  (``eviction="sinks"``), positions reassigned within the cache (StreamingLLM).
* ``full``: no eviction, computed as one causal forward pass (blockwise attention) over the
  first F tokens, the whole stream in the full mode: the same numbers as decoding through a
  full cache of F slots, at a fraction of the cost of F decode steps over a growing cache.
* ``recompute``: the oracle of Xiao et al.: sliding windows of C tokens with re-computation
  (every window a fresh forward pass at positions 0..C-1, advanced by C/4 and scoring its last
  C/4 tokens, so each scored token sees between 3C/4 and C tokens, all at trained positions).

Perplexity is reported against the position of the query token (the last token in context; the
scored token is the next one), bucketed per C tokens, with verdicts on the paper's claims; the
attention mass each layer puts on the first token (a fresh forward pass over windows of C
tokens) tells whether the small models formed an attention sink at all.

References:
  Xiao, Tian, Chen, Han and Lewis, "Efficient Streaming Language Models with Attention Sinks",
  ICLR 2024, arXiv:2309.17453.
  Press, Smith and Lewis, "Train Short, Test Long: Attention with Linear Biases Enables Input
  Length Extrapolation", ICLR 2022, arXiv:2108.12409.
"""

from __future__ import annotations

# Run as a program: re-execute with the allocator settings before the imports below, not
# after them (pejax.runtime_env; importing it loads nothing else).
from pejax import runtime_env  # pylint: disable=wrong-import-position
runtime_env.apply_when_main(__name__)
# pylint: disable=wrong-import-position

import dataclasses
import functools
import math
import os
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import ml_collections
import numpy as np

from experiments import extrapolation
from experiments.study import expectations
from experiments.study import markdown_report
from experiments.study import result_cache
from experiments.study import study_options
from experiments.study import table_cells
from experiments.study import trained_runs
from pejax import machine

STUDY = "streaming_llm"
PES = ("rope", "alibi")
POLICIES = ("window", "sinks", "full", "recompute")
EVICTION = {"window": "window", "sinks": "sinks"}  # Policies streamed through the cache.

COLLAPSE_RATIO = 1.5  # Window-only "collapses": its perplexity >= 1.5 x sinks' after eviction.
FLAT_RATIO = 1.10  # Sinks "stay flat": <= 1.10 x the re-computation oracle, early and late.
DEGRADE_RATIO = 1.5  # The full cache "degrades" past L: >= 1.5 x the oracle there.
EXTRAPOLATE_RATIO = 1.10  # ALiBi "extrapolates": full cache <= 1.10 x the oracle past L.
SINK_MASS = 0.2  # "A sink formed": some layer past the first puts >= 20% of attention on token 0.
SINK_NOTE = (
    "Likely reason at this scale: these byte-level models (1M parameters, 2.9M training tokens "
    "in random crops of the corpus) attend mostly to recent bytes, and nothing in training made "
    "the first position special enough to become a no-op target for surplus attention; the "
    "sinks StreamingLLM describes were measured in billion-parameter models trained on trillions "
    "of tokens. With ALiBi, the distance penalty alone keeps late queries off the first token.")


@dataclasses.dataclass(frozen=True)
class Settings:
  """The stream and the cache.

  Attributes:
    train_len: training length L of both models.
    steps: training steps.
    stream_tokens: N, the scored tokens of the stream (N + 1 bytes are read).
    cache_size: C, cache slots of the evicting policies.
    sink_tokens: sink tokens of the ``sinks`` policy.
    chunk: decode steps per jitted call (N must be a multiple).
    full_tokens: F, tokens scored by the full-cache forward pass (the stream's first F).
    recompute_stride: stride of the re-computation oracle (its windows are C tokens).
    bucket: positions per perplexity bucket.
    tail_tokens: the "last" range of the summary (the stream's last ``tail_tokens``).
    sink_windows: windows of C tokens over which the first-token attention is averaged.
    pes: the encodings compared.
  """

  train_len: int
  steps: int
  stream_tokens: int
  cache_size: int
  sink_tokens: int
  chunk: int
  full_tokens: int
  recompute_stride: int
  bucket: int
  tail_tokens: int
  sink_windows: int = 4
  pes: tuple = PES

  def __post_init__(self):
    for name in ("stream_tokens", "cache_size", "chunk", "full_tokens", "recompute_stride",
                 "bucket", "tail_tokens"):
      if int(getattr(self, name)) <= 0:
        raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
    if self.stream_tokens % self.chunk:
      raise ValueError(f"stream_tokens ({self.stream_tokens}) must be a multiple of chunk "
                       f"({self.chunk})")
    if not 0 < self.sink_tokens < self.cache_size:
      raise ValueError(f"sink_tokens must be in (0, cache_size={self.cache_size}), got "
                       f"{self.sink_tokens}")
    if self.full_tokens > self.stream_tokens or self.tail_tokens > self.stream_tokens:
      raise ValueError("full_tokens and tail_tokens must not exceed stream_tokens "
                       f"({self.stream_tokens}), got {self.full_tokens}, {self.tail_tokens}")
    if self.cache_size % self.recompute_stride:
      raise ValueError(f"recompute_stride ({self.recompute_stride}) must divide cache_size "
                       f"({self.cache_size})")


def base_config(options: study_options.StudyOptions) -> ml_collections.ConfigDict:
  """The decoder both PEs train: 4 layers, d_model 128, 4 heads at L = 1024 (quick: tiny, L=128).

  The training length equals the full study's cache (1024 slots), so every window the cache
  holds is a context the model was trained on (as in StreamingLLM, whose 4K-token cache is the
  Llama-2 training length).
  """
  from pejax import experiment_config  # pylint: disable=g-import-not-at-top
  config = experiment_config.get_default_config()
  if options.quick:
    config.model.num_layers = 2
    config.model.d_model = 64
    config.data.train_len = 128
    config.data.batch_size = 8
    config.train.steps = options.steps or 150
    config.optim.warmup_steps = 20
  else:
    config.model.num_layers = 4
    config.model.d_model = 128
    config.data.train_len = 1024
    config.data.batch_size = 4
    config.train.steps = options.steps or 700
    config.optim.warmup_steps = 50
  config.model.num_heads = 4
  config.train.log_every = max(1, int(config.train.steps) // 14)
  config.train.eval_every = int(config.train.steps)
  config.train.checkpoint_every = max(1, int(config.train.steps) // 7)
  study_options.apply_overrides(config, options.overrides)
  return config


def settings_for(options: study_options.StudyOptions,
                 config: ml_collections.ConfigDict) -> Settings:
  """Full: 64K tokens through 1024 slots (the full cache over all of them); quick: 4K / 128."""
  train_len = int(config.data.train_len)
  if options.quick:
    return Settings(train_len=train_len, steps=int(config.train.steps), stream_tokens=4096,
                    cache_size=train_len, sink_tokens=4, chunk=512, full_tokens=1024,
                    recompute_stride=train_len // 4, bucket=train_len, tail_tokens=1024,
                    sink_windows=2)
  return Settings(train_len=train_len, steps=int(config.train.steps), stream_tokens=65536,
                  cache_size=train_len, sink_tokens=4, chunk=1024, full_tokens=65536,
                  recompute_stride=train_len // 4, bucket=train_len, tail_tokens=8192)


def train_models(options: study_options.StudyOptions, *, pes: Sequence[str] = PES,
                 reuse_dirs: Sequence[Any] = (), log: Callable[[str], None] = print
                 ) -> Dict[str, tuple]:
  """pe -> (config, RunInfo) of the study's trained models (trained, resumed or reused)."""
  base = base_config(options)
  runs_dir = options.models_dir(STUDY)
  out = {}
  for pe in pes:
    config = extrapolation.pe_config(base, pe, 0)
    out[pe] = (config, trained_runs.train_run(config, runs_dir=runs_dir, reuse_dirs=reuse_dirs,
                                              log=log))
  return out


def stream_text(corpus_valid: np.ndarray, num_tokens: int) -> np.ndarray:
  """The first ``num_tokens + 1`` bytes of the validation split (its files concatenated).

  Raises:
    ValueError: if the split is shorter.
  """
  if corpus_valid.shape[0] < num_tokens + 1:
    raise ValueError(f"the validation split has {corpus_valid.shape[0]} tokens, the stream needs "
                     f"{num_tokens + 1}")
  return np.asarray(corpus_valid[:num_tokens + 1], np.int32)


# ----------------------------------------------------------------------------------------------
# Per-token NLL under each policy. Index i of every array: the NLL of text[i + 1] given text[:i+1]
# (the query token sits at position i).


@functools.lru_cache(maxsize=None)
def _decode_chunk_fn():
  """A jitted ``(graphdef, state, cache, inputs [C], targets [C], start) -> (cache, nll [C])``."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  @functools.partial(jax.jit, static_argnames=("graphdef",), donate_argnames=("cache",))
  def decode_chunk(graphdef, state, cache, inputs, targets, start):
    model = nnx.merge(graphdef, state)

    def step(cache, xs):
      token, target, position = xs
      logits, cache = model.decode_step(token.reshape(1, 1), position.reshape(1, 1), cache)
      log_probs = jax.nn.log_softmax(logits[0, 0].astype(jnp.float32))
      return cache, -log_probs[target]

    positions = start + jnp.arange(inputs.shape[0], dtype=jnp.int32)
    return jax.lax.scan(step, cache, (inputs, targets, positions))

  return decode_chunk


def stream_nll(model, text: np.ndarray, *, cache_size: int, eviction: str, sink_tokens: int = 0,
               chunk: int, log: Callable[[str], None] = print, label: str = "") -> np.ndarray:
  """NLL of every next token of ``text`` decoded token by token through an evicting cache.

  Args:
    model: a :class:`pejax.nn.Decoder`.
    text: int ``[N + 1]`` tokens.
    cache_size: cache slots.
    eviction: ``"window"`` or ``"sinks"`` (or ``"none"`` when ``N <= cache_size``).
    sink_tokens: kept tokens of ``"sinks"``.
    chunk: decode steps per jitted call (``N`` must be a multiple).
    log: receives one progress line per chunk.
    label: prefix of the progress lines.

  Returns:
    float32 ``[N]``: index i is the NLL (nats) of ``text[i + 1]`` with the query at position i.
  """
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  n = text.shape[0] - 1
  if n % chunk:
    raise ValueError(f"the stream length {n} must be a multiple of chunk={chunk}")
  kwargs = {} if eviction == "none" else {"eviction": eviction}
  if eviction == "sinks":
    kwargs["sink_tokens"] = sink_tokens
  cache = model.init_cache(1, cache_size, **kwargs)
  graphdef, state = nnx.split(model)
  decode_chunk = _decode_chunk_fn()
  out = []
  started = time.time()
  for index, begin in enumerate(range(0, n, chunk)):
    inputs = jnp.asarray(text[begin:begin + chunk], jnp.int32)
    targets = jnp.asarray(text[begin + 1:begin + chunk + 1], jnp.int32)
    cache, nll = decode_chunk(graphdef, state, cache, inputs, targets, jnp.int32(begin))
    out.append(np.asarray(nll, np.float32))
    done = begin + chunk
    elapsed = time.time() - started
    log(f"  {label} chunk {index + 1}/{n // chunk}: {done} tokens, ppl of the chunk "
        f"{math.exp(float(np.mean(out[-1]))):.2f}, {done / elapsed:.0f} tokens/s")
  return np.concatenate(out)


@functools.lru_cache(maxsize=None)
def _forward_nll_fn():
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  @nnx.jit
  def forward_nll(model, inputs, targets):
    logits = model(inputs).astype(jnp.float32)
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]

  return forward_nll


def full_nll(model, text: np.ndarray, num_tokens: int) -> np.ndarray:
  """NLL of ``text[1 : F + 1]`` from one causal forward pass over ``text[:F]`` (= a full cache).

  Returns:
    float32 ``[F]`` (index i: query at position i, as :func:`stream_nll`).
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  inputs = jnp.asarray(text[None, :num_tokens], jnp.int32)
  targets = jnp.asarray(text[None, 1:num_tokens + 1], jnp.int32)
  return np.asarray(_forward_nll_fn()(model, inputs, targets)[0], np.float32)


def recompute_windows(num_tokens: int, *, window: int, stride: int) -> List[tuple]:
  """``(start, first_scored_offset)`` of the re-computation oracle's windows.

  Window ``start`` runs ``text[start : start + window]`` at positions ``0 .. window - 1`` and
  scores the queries from offset ``first_scored_offset`` to its end: the first window every
  query, each later one its last ``stride`` (so every query has at least ``window - stride``
  tokens of context). The windows score every query ``0 .. num_tokens - 1`` exactly once.

  Raises:
    ValueError: if ``num_tokens - window`` is not a multiple of ``stride`` (or is negative).
  """
  if num_tokens < window or (num_tokens - window) % stride:
    raise ValueError(f"num_tokens - window ({num_tokens} - {window}) must be a non-negative "
                     f"multiple of stride={stride}")
  out = [(0, 0)]
  for start in range(stride, num_tokens - window + 1, stride):
    out.append((start, window - stride))
  return out


def recompute_nll(model, text: np.ndarray, *, window: int, stride: int,
                  batch_size: int = 8) -> np.ndarray:
  """NLL of every next token under sliding windows with re-computation (the oracle).

  Returns:
    float32 ``[N]`` for ``text`` of ``N + 1`` tokens (index i: query at position i).
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  n = text.shape[0] - 1
  windows = recompute_windows(n, window=window, stride=stride)
  out = np.full((n,), np.nan, np.float32)
  forward_nll = _forward_nll_fn()
  for begin in range(0, len(windows), batch_size):
    group = windows[begin:begin + batch_size]
    starts = [s for s, _ in group] + [0] * (batch_size - len(group))  # Same shape every call.
    inputs = np.stack([text[s:s + window] for s in starts])
    targets = np.stack([text[s + 1:s + window + 1] for s in starts])
    nll = np.asarray(forward_nll(model, jnp.asarray(inputs), jnp.asarray(targets)), np.float32)
    for row, (start, offset) in enumerate(group):
      out[start + offset:start + window] = nll[row, offset:]
  if np.isnan(out).any():
    raise AssertionError("the re-computation windows left a query unscored")
  return out


# ----------------------------------------------------------------------------------------------
# Attention on the first token (is there a sink?).


def attention_probabilities(model, tokens: np.ndarray) -> List[np.ndarray]:
  """Each layer's causal attention probabilities over ``tokens`` (positions 0..L-1), recomputed.

  A fresh forward pass, layer by layer: the block's normalized input, its query/key projections,
  the PE's rotation and bias, ``softmax(q k^T / sqrt(D) + bias)`` with the causal mask (dense,
  float32). For PEs with a rotation and/or a bias (RoPE, ALiBi, ...); no content-aware PEs.

  Args:
    model: a :class:`pejax.nn.Decoder`.
    tokens: int ``[L]``.

  Returns:
    One float32 ``[H, L, L]`` array per layer (query x key).
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from pejax.nn.self_attention import pe_bias  # pylint: disable=g-import-not-at-top
  tokens = jnp.asarray(np.asarray(tokens, np.int32)[None])
  length = tokens.shape[1]
  positions = jnp.arange(length, dtype=jnp.int32)[None]
  causal = jnp.tril(jnp.ones((length, length), bool))
  x = model._embed(tokens, positions)  # pylint: disable=protected-access
  out = []
  for block, index in zip(model.blocks, model.layer_pe):
    pe = model.pes[index]
    if pe.has_content_bias or pe.has_logits:
      raise ValueError(f"pe={pe.name!r} is content-aware: its attention is not recomputed here")
    attn = block.attention
    q, k, _ = attn._project(block.attention_norm(x))  # pylint: disable=protected-access
    if pe.has_rotate:
      q, k = pe.rotate(q, k, positions, positions)
    k = jnp.repeat(k, q.shape[2] // k.shape[2], axis=2)  # GQA: each query head's key head.
    logits = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32),
                        k.astype(jnp.float32)) / math.sqrt(q.shape[-1])
    if pe.has_bias:
      logits = logits + pe.bias(positions, positions).astype(jnp.float32)
    logits = jnp.where(causal, logits, -jnp.inf)
    out.append(np.asarray(jax.nn.softmax(logits, axis=-1)[0]))
    bias = pe_bias(pe, positions, positions, "dense")
    x = block(x, pe=pe, positions=positions, segment_ids=None, bias=bias,
              implementation="dense")
  return out


def first_token_mass(probs: Sequence[np.ndarray], *, min_query: int) -> List[float]:
  """Per layer: mean attention probability on key 0 over heads and queries ``>= min_query``."""
  return [float(p[:, min_query:, 0].mean()) for p in probs]


def uniform_first_token_mass(length: int, *, min_query: int) -> float:
  """The same mean for uniform causal attention: mean of ``1 / (q + 1)`` over the queries."""
  return float(np.mean(1.0 / (np.arange(min_query, length) + 1.0)))


# ----------------------------------------------------------------------------------------------
# Bucketing and summaries.


def perplexity(nll: np.ndarray) -> Optional[float]:
  """``exp(mean nll)``; ``None`` for no tokens or a non-finite mean."""
  if nll.size == 0:
    return None
  value = float(np.mean(nll, dtype=np.float64))
  return math.exp(value) if math.isfinite(value) else None


def range_perplexity(nll: np.ndarray, start: int, end: int) -> Optional[float]:
  """Perplexity of the queries at positions ``[start, end)`` (``None`` if ``nll`` stops before
  ``end``: a range is only reported when the policy covered all of it)."""
  if start < 0 or end <= start or end > nll.shape[0]:
    return None
  return perplexity(nll[start:end])


def bucket_perplexity(nll: np.ndarray, bucket: int) -> List[Dict[str, Any]]:
  """``[{"start", "end", "perplexity", "tokens"}]`` per ``bucket`` consecutive query positions
  (the last bucket may be shorter)."""
  out = []
  for start in range(0, nll.shape[0], bucket):
    part = nll[start:start + bucket]
    out.append({"start": start, "end": start + part.shape[0], "perplexity": perplexity(part),
                "tokens": int(part.shape[0])})
  return out


def summary_ranges(settings: Settings) -> Dict[str, tuple]:
  """name -> ``[start, end)`` of the summary ranges, in query positions."""
  c, n = settings.cache_size, settings.stream_tokens
  return {"first": (0, c), "second": (c, 2 * c), "tail": (n - settings.tail_tokens, n),
          "evicted": (c, n), "past_L": (settings.train_len, settings.full_tokens)}


def range_label(name: str, settings: Settings) -> str:
  start, end = summary_ranges(settings)[name]
  return f"{_k(start)}-{_k(end)}"


def _k(n: int) -> str:
  return f"{n // 1024}K" if n % 1024 == 0 and n else str(n)


def summarize(nll: Mapping[str, np.ndarray], settings: Settings) -> Dict[str, Dict[str, Any]]:
  """policy -> {"ranges": name -> perplexity, "buckets": [...], "tokens": n} for one PE."""
  out = {}
  for policy, values in nll.items():
    values = np.asarray(values, np.float32)
    out[policy] = {"ranges": {name: range_perplexity(values, *span)
                              for name, span in summary_ranges(settings).items()},
                   "buckets": bucket_perplexity(values, settings.bucket),
                   "tokens": int(values.shape[0])}
  return out


def window_sinks_gap(policies: Mapping[str, Mapping[str, Any]]) -> Optional[float]:
  """Largest ``|window / sinks - 1|`` over the buckets, in percent (one PE's summary)."""
  gaps = [abs(w["perplexity"] / s["perplexity"] - 1.0) * 100.0
          for w, s in zip(policies["window"]["buckets"], policies["sinks"]["buckets"])
          if w["perplexity"] and s["perplexity"]]
  return max(gaps) if gaps else None


def agreement_before_eviction(nll: Mapping[str, np.ndarray], cache_size: int) -> Dict[str, float]:
  """policy -> max |NLL - full's NLL| over the first ``cache_size`` queries (nothing evicted yet:
  every policy is the same computation there)."""
  ref = np.asarray(nll["full"][:cache_size], np.float64)
  return {p: float(np.max(np.abs(np.asarray(v[:cache_size], np.float64) - ref)))
          for p, v in nll.items() if p != "full"}


# ----------------------------------------------------------------------------------------------
# Verdicts.


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
  return a / b if a is not None and b else None


def verdicts(summary: Mapping[str, Mapping[str, Any]], settings: Settings, *,
             sink_mass: Optional[Mapping[str, Sequence[float]]] = None
             ) -> List[expectations.Verdict]:
  """The StreamingLLM claims (and ALiBi's) checked on ``summary`` (pe -> :func:`summarize`).

  Args:
    summary: pe -> policy -> {"ranges": ...}.
    settings: the stream (for the range labels).
    sink_mass: optional pe -> per-layer mean attention on the first token.

  Returns:
    The verdicts, PE by PE.
  """
  out = []
  fmt = table_cells.fmt
  evicted, second, tail, past = (range_label(n, settings)
                                 for n in ("evicted", "second", "tail", "past_L"))
  for pe, policies in summary.items():
    r = {p: v["ranges"] for p, v in policies.items()}
    get = lambda policy, name, r=r: r.get(policy, {}).get(name)
    masses = list((sink_mass or {}).get(pe, ()))
    late = max(masses[1:]) if len(masses) > 1 else None
    uniform = uniform_first_token_mass(settings.cache_size, min_query=settings.cache_size // 2)
    sink_note = ("" if late is None else
                 f"Measured: the mean attention on the first token in layers 2+ is at most "
                 f"{late:.1e} (fresh windows of {settings.cache_size}; uniform attention would "
                 f"give {uniform:.1e}).")
    w, s = get("window", "evicted"), get("sinks", "evicted")
    out.append(expectations.verdict(
        f"{pe}: window attention collapses once the first tokens are evicted (Xiao et al. 2023, "
        "Fig. 3)",
        f"window perplexity over queries {evicted} >= {COLLAPSE_RATIO} x sinks'",
        f"window {fmt(w)} vs sinks {fmt(s)} (x{fmt(_ratio(w, s))})",
        lambda w=w, s=s: w >= COLLAPSE_RATIO * s,
        note_if_not_held=(
            "Window-only eviction did not collapse on this model: it barely relies on the "
            "first token (no strong attention sink formed at this scale and training length), "
            "so losing it costs little. " + sink_note).strip()))
    s2, o2, st, ot = (get("sinks", "second"), get("recompute", "second"), get("sinks", "tail"),
                      get("recompute", "tail"))
    out.append(expectations.verdict(
        f"{pe}: {settings.sink_tokens} attention sinks + a recent window stay flat, close to "
        "sliding windows with re-computation (Xiao et al. 2023, Fig. 3, Table 1)",
        f"sinks perplexity <= {FLAT_RATIO} x the re-computation oracle's over queries {second} "
        f"and over the last {_k(settings.tail_tokens)} ({tail})",
        f"{second}: sinks {fmt(s2)} vs oracle {fmt(o2)} (x{fmt(_ratio(s2, o2))}); {tail}: sinks "
        f"{fmt(st)} vs oracle {fmt(ot)} (x{fmt(_ratio(st, ot))})",
        lambda s2=s2, o2=o2, st=st, ot=ot: s2 <= FLAT_RATIO * o2 and st <= FLAT_RATIO * ot))
    f, o = get("full", "past_L"), get("recompute", "past_L")
    if pe == "rope":
      out.append(expectations.verdict(
          "rope: the full (dense) cache degrades past the training length (Xiao et al. 2023, "
          "Fig. 3)",
          f"full-cache perplexity over queries {past} >= {DEGRADE_RATIO} x the oracle's",
          f"full {fmt(f)} vs oracle {fmt(o)} (x{fmt(_ratio(f, o))})",
          lambda f=f, o=o: f >= DEGRADE_RATIO * o))
    elif pe == "alibi":
      out.append(expectations.verdict(
          "alibi: the full cache extrapolates past the training length (Press et al. 2022, "
          "Fig. 1)",
          f"full-cache perplexity over queries {past} <= {EXTRAPOLATE_RATIO} x the oracle's",
          f"full {fmt(f)} vs oracle {fmt(o)} (x{fmt(_ratio(f, o))})",
          lambda f=f, o=o: f <= EXTRAPOLATE_RATIO * o))
    if masses:
      out.append(expectations.verdict(
          f"{pe}: the model forms an attention sink on the first token (Xiao et al. 2023, "
          "Fig. 2: beyond the bottom layers most attention goes to the initial token)",
          f"some layer past the first puts >= {SINK_MASS} of its attention (mean over heads and "
          f"queries >= {settings.cache_size // 2}) on token 0",
          "per layer " + ", ".join(f"{m:.1e}" for m in masses)
          + f" (uniform attention: {uniform:.1e})",
          lambda late=late: late >= SINK_MASS, note_if_not_held=SINK_NOTE))
  return out


# ----------------------------------------------------------------------------------------------
# The study.


def measure(info: trained_runs.RunInfo, config: ml_collections.ConfigDict, text: np.ndarray, *,
            settings: Settings, log: Callable[[str], None]) -> Dict[str, Any]:
  """Every policy's per-token NLL, their wall times and the first-token attention of one model
  (cached in its run directory, one file per policy)."""
  model = trained_runs.load_model(info.run_dir, config)
  pe = str(config.pe.name)
  out: Dict[str, Any] = {"nll": {}, "seconds": {}}
  base_key = {"stream_tokens": settings.stream_tokens, "steps": info.steps,
              "text_sha": _digest(text)}

  def timed(compute):
    def run_and_time():
      started = time.time()
      values = compute()
      return {"nll": [float(v) for v in values], "seconds": time.time() - started}
    return run_and_time

  jobs = {
      "full": ({"full_tokens": settings.full_tokens},
               lambda: full_nll(model, text, settings.full_tokens)),
      "recompute": ({"window": settings.cache_size, "stride": settings.recompute_stride},
                    lambda: recompute_nll(model, text, window=settings.cache_size,
                                          stride=settings.recompute_stride)),
  }
  for policy, eviction in EVICTION.items():
    jobs[policy] = ({"cache_size": settings.cache_size, "sink_tokens": settings.sink_tokens,
                     "chunk": settings.chunk, "eviction": eviction},
                    lambda eviction=eviction, policy=policy: stream_nll(
                        model, text, cache_size=settings.cache_size, eviction=eviction,
                        sink_tokens=settings.sink_tokens, chunk=settings.chunk, log=log,
                        label=f"{pe} {policy}"))

  def sink():
    c = settings.cache_size
    starts = np.linspace(0, text.shape[0] - c - 1, settings.sink_windows).astype(int)
    per_window = [first_token_mass(attention_probabilities(model, text[s:s + c]),
                                   min_query=c // 2) for s in starts]
    return np.mean(np.asarray(per_window), axis=0).tolist()

  out["sink_mass"] = result_cache.cached(
      info.run_dir / f"study_{STUDY}_sink.json",
      {**base_key, "window": settings.cache_size, "windows": settings.sink_windows}, sink)
  for policy in jobs:  # The forward passes first: they need no cache.
    key, compute = jobs[policy]
    value = result_cache.cached(info.run_dir / f"study_{STUDY}_{policy}.json",
                                {**base_key, **key, "policy": policy}, timed(compute))
    out["nll"][policy] = np.asarray(value["nll"], np.float32)
    out["seconds"][policy] = value["seconds"]
    log(f"  {pe} {policy}: {len(value['nll'])} tokens, ppl "
        f"{table_cells.fmt(perplexity(out['nll'][policy]))} ({value['seconds']:.0f} s)")
  return out


def _digest(text: np.ndarray) -> str:
  import hashlib  # pylint: disable=g-import-not-at-top
  return hashlib.sha1(np.ascontiguousarray(text).tobytes()).hexdigest()[:16]


def plot(path, summary: Mapping[str, Mapping[str, Any]], settings: Settings) -> Any:
  """``streaming_perplexity.png``: perplexity vs query position, one panel per PE."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  from pejax.eval.report import set_readable_log_ticks  # pylint: disable=g-import-not-at-top
  pes = list(summary)
  fig, axes = plt.subplots(1, len(pes), figsize=(6 * len(pes), 4.2), squeeze=False)
  # window and sinks can coincide: window is drawn wide and pale underneath.
  styles = {"window": ("tab:red", "-", 4.0, 0.45), "sinks": ("tab:green", "-", 1.5, 1.0),
            "full": ("tab:blue", "--", 1.5, 1.0), "recompute": ("black", ":", 1.5, 1.0)}
  labels = {"window": f"window ({settings.cache_size})",
            "sinks": (f"sinks ({settings.sink_tokens} + "
                      f"{settings.cache_size - settings.sink_tokens})"),
            "full": "full cache (forward pass)",
            "recompute": f"sliding window + re-computation ({settings.cache_size})"}
  values = []
  for ax, pe in zip(axes[0], pes):
    for policy in POLICIES:
      if policy not in summary[pe]:
        continue
      buckets = [b for b in summary[pe][policy]["buckets"] if b["perplexity"] is not None]
      xs = [(b["start"] + b["end"]) / 2 for b in buckets]
      ys = [b["perplexity"] for b in buckets]
      values += ys
      color, style, width, alpha = styles[policy]
      ax.plot(xs, ys, style, color=color, label=labels[policy], linewidth=width, alpha=alpha)
    ax.axvline(settings.cache_size, color="gray", linewidth=0.8)
    ax.text(settings.cache_size, 1.0, f" cache = L = {settings.cache_size}", color="gray",
            fontsize=7, transform=ax.get_xaxis_transform(), va="top")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("query position (tokens streamed)")
    ax.set_ylabel("perplexity (per bucket of %d)" % settings.bucket)
    ax.set_title(pe)
    ax.grid(True, which="major", alpha=0.3)
  finite = [v for v in values if v is not None and math.isfinite(v)]
  if finite:
    for ax in axes[0]:
      ax.set_ylim(min(finite) * 0.9, max(finite) * 1.1)
      set_readable_log_ticks(ax.yaxis, min(finite) * 0.9, max(finite) * 1.1)
  handles, names = axes[0][0].get_legend_handles_labels()
  fig.legend(handles, names, loc="lower center", ncol=len(names), fontsize=8, frameon=False)
  fig.suptitle(f"Streaming {settings.stream_tokens} tokens through a {settings.cache_size}-slot "
               "KV cache", fontsize=10)
  fig.tight_layout(rect=(0, 0.07, 1, 1))
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def run(options: study_options.StudyOptions, *, settings: Optional[Settings] = None,
        log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Runs the study and writes its report; returns the results written to JSON."""
  base = base_config(options)
  settings = settings or settings_for(options, base)
  workdir = options.report_dir(STUDY)
  workdir.mkdir(parents=True, exist_ok=True)
  report = markdown_report.Report("Streaming with attention sinks (StreamingLLM)", study=STUDY,
                               options=options)
  report.decided_by = ("the full run (4-layer models at L = 1024, a 64K-token stream, one model "
                       "per PE)")
  log(f"{STUDY}: {', '.join(settings.pes)} at L={settings.train_len}, {settings.steps} steps; "
      f"stream {settings.stream_tokens} tokens through {settings.cache_size} slots")
  models = train_models(options, pes=settings.pes, log=log)
  report.add_runs([info for _, info in models.values()])
  report.models_per_arm(1)  # One model per PE.
  text = stream_text(trained_runs.load_corpus(str(base.data.name)).valid, settings.stream_tokens)
  summary, seconds, sink_mass, agreement = {}, {}, {}, {}
  for pe, (config, info) in models.items():
    measured = measure(info, config, text, settings=settings, log=log)
    summary[pe] = summarize(measured["nll"], settings)
    seconds[pe] = measured["seconds"]
    sink_mass[pe] = measured["sink_mass"]
    agreement[pe] = agreement_before_eviction(measured["nll"], settings.cache_size)
  for v in verdicts(summary, settings, sink_mass=sink_mass):
    report.add_verdict(v)

  c = settings.cache_size
  unigram = trained_runs.unigram_loss(str(base.data.name))
  report.section(
      "Setup",
      f"Models: {', '.join(settings.pes)}; {base.model.num_layers} layers, d_model "
      f"{base.model.d_model}, {base.model.num_heads} heads, byte vocabulary, trained at L = "
      f"{settings.train_len} on the `{base.data.name}` corpus for {settings.steps} steps (batch "
      f"{base.data.batch_size}; one model per PE, so no seed spread: every verdict is measured "
      f"on one model each, with the margins stated). Stream: the first "
      f"{settings.stream_tokens + 1} bytes of the validation split (its files concatenated), "
      f"{settings.stream_tokens} next-token predictions. `window` and `sinks` decode the whole "
      f"stream token by token with `Decoder.decode_step` through `init_cache(1, {c}, "
      f"eviction=...)` ({settings.chunk} steps per jitted `lax.scan` call); `sinks` keeps the "
      f"first {settings.sink_tokens} tokens plus {c - settings.sink_tokens} recent ones with "
      f"positions reassigned within the cache. `full` is one causal forward pass (blockwise "
      f"attention) over the first {settings.full_tokens} tokens: the numbers a full cache of "
      f"that many slots computes (a decode step equals the forward pass at its position; "
      f"checked below on the first {c} queries), without {settings.full_tokens} decode steps "
      f"over a growing cache; `recompute` runs a fresh forward pass over each window of {c} tokens "
      f"(positions 0..{c - 1}), advancing by {settings.recompute_stride} and scoring its last "
      f"{settings.recompute_stride} queries. Positions on the x axis are the query's (the last "
      f"token in context); buckets of {settings.bucket}. Unigram perplexity of the corpus: "
      f"{table_cells.fmt(math.exp(unigram) if unigram else None)}.")
  names = []  # Ranges in table order, without duplicates (past_L = evicted when F = N, C = L).
  for name in ("first", "second", "tail", "evicted", "past_L"):
    if summary_ranges(settings)[name] not in [summary_ranges(settings)[n] for n in names]:
      names.append(name)
  header = ["PE", "policy"] + [f"queries {range_label(n, settings)}" for n in names]
  rows = []
  for pe, policies in summary.items():
    for policy in POLICIES:
      if policy in policies:
        ranges = policies[policy]["ranges"]
        rows.append([pe, policy] + [table_cells.fmt(ranges[n]) for n in names])
  caption = (f"**Mean perplexity by query range** (`{range_label('first', settings)}`: nothing "
             f"evicted yet; `{range_label('tail', settings)}`: the last "
             f"{_k(settings.tail_tokens)}")
  if settings.full_tokens < settings.stream_tokens:
    caption += f"; `full` covers only the first {_k(settings.full_tokens)}: n/a beyond"
  report.table(header, rows, caption=caption + ")")
  png = plot(workdir / "streaming_perplexity.png", summary, settings)
  report.image(png, "perplexity vs position, per cache policy")
  pes = list(summary)
  bucket_header = ["queries"] + [f"{pe} {p}" for pe in pes for p in POLICIES
                                 if p in summary[pe]]
  bucket_rows = []
  for index, b in enumerate(summary[pes[0]]["window"]["buckets"]):
    row = [f"{_k(b['start'])}-{_k(b['end'])}"]
    for pe in pes:
      for p in POLICIES:
        if p in summary[pe]:
          buckets = summary[pe][p]["buckets"]
          row.append(table_cells.fmt(buckets[index]["perplexity"]) if index < len(buckets)
                     else "")
    bucket_rows.append(row)
  report.table(bucket_header, bucket_rows, caption="**Perplexity per bucket**")
  report.text("Largest difference between `window` and `sinks` in any bucket: " + "; ".join(
      f"{pe} {table_cells.fmt(window_sinks_gap(summary[pe]), 2)}%" for pe in pes
      if "window" in summary[pe] and "sinks" in summary[pe]) + ".")
  masses_uniform = uniform_first_token_mass(c, min_query=c // 2)
  report.table(
      ["PE"] + [f"layer {i + 1}" for i in range(len(next(iter(sink_mass.values()))))],
      [[pe] + [f"{m:.1e}" for m in masses] for pe, masses in sink_mass.items()],
      caption=(f"**Attention on the first token** (mean over heads and queries {c // 2}.."
               f"{c - 1} of {settings.sink_windows} fresh windows of {c} tokens; uniform "
               f"attention would give {masses_uniform:.1e})"))
  report.table(
      ["PE"] + [f"{p} vs full" for p in ("window", "sinks", "recompute")],
      [[pe] + [f"{agreement[pe].get(p, float('nan')):.1e}"
               for p in ("window", "sinks", "recompute")] for pe in pes],
      caption=(f"**Check: before any eviction (queries 0..{c - 1}) every policy computes the "
               "same thing** (max |NLL difference| to the full forward pass, nats)"))
  compute_rows = []
  for pe in pes:
    for p in POLICIES:
      n = summary[pe][p]["tokens"]
      compute_rows.append([pe, p, n, f"{seconds[pe][p]:.0f}",
                           f"{n / max(seconds[pe][p], 1e-9):.0f}"])
  total = sum(v for by_policy in seconds.values() for v in by_policy.values())
  report.table(["PE", "policy", "tokens scored", "wall s", "tokens/s"], compute_rows,
               caption=(f"**Compute** ({machine.describe_machine()}; load average "
                        f"{os.getloadavg()[0]:.1f} at the end): {total / 60:.1f} min for the "
                        "measurements below, timed when they were computed (a re-run reuses them from the run "
                        "directories; the header's wall time is that of the last run). "
                        "Reproduce: `" + options.command_line() + "`"))
  train_rows = [[pe, info.steps, table_cells.fmt(info.train_loss, 3),
                 table_cells.fmt(info.valid_loss, 3), info.train_time()]
                for pe, (_, info) in models.items()]
  report.table(["PE", "steps", "train loss", "valid loss at L", "train time"], train_rows,
               caption=f"**Training** (nats per byte; unigram {table_cells.fmt(unigram, 3)})")
  results = {
      "settings": dataclasses.asdict(settings),
      "ranges": {name: list(span) for name, span in summary_ranges(settings).items()},
      "summary": summary, "seconds": seconds, "sink_mass": sink_mass,
      "sink_mass_uniform": masses_uniform, "agreement_before_eviction": agreement,
      "runs": {pe: info.to_json() for pe, (_, info) in models.items()},
      "unigram_loss": unigram,
  }
  return markdown_report.write_report(report, workdir, results, study=STUDY, log=log)


if __name__ == "__main__":
  study_options.run_as_launch(STUDY)
