r"""Perplexity with a quantized KV cache: float32 vs bfloat16 vs int8 vs fp8 at 1-8x L.

    python -m experiments.kv_quantization --quick     # tiny models, L=128: indicative, < 1 min
    python -m experiments.kv_quantization             # the streaming_llm models (L=1024): 3 min
    python launch.py --study=kv_quantization --quick

(2 CPU cores; the models are the ``streaming_llm`` study's, trained first if absent: 22 min.)

The RoPE and ALiBi decoders of the ``streaming_llm`` study (reused from its runs directory, or
trained with the same settings) score the validation split in disjoint windows of 1x, 2x, 4x and
8x their training length L. Each window goes through ``Decoder.prefill`` into a cache made by
``init_cache(batch, length, dtype=...)``: the prefill writes the window's keys and values to the
cache and its attention reads them back from there, so the scores are those of attention over
the cache's (quantized) keys and values. Cache dtypes: float32 (the reference: the model's
compute dtype), bfloat16, int8 and fp8 (``float8_e4m3fn``); int8 and fp8 store float32 scales
per token and key/value head (keys quantized before the rotation). Reported: perplexity, and its
relative change against the float32 cache in percent; the issue's target is at most 1% at int8.
A forward pass without a cache is scored too (it must equal the float32 cache).

References:
  Hooper et al., "KVQuant: Towards 10 Million Context Length LLM Inference with KV Cache
  Quantization", NeurIPS 2024, arXiv:2401.18079 (per-token / per-channel KV quantization,
  pre-RoPE key quantization).
  Micikevicius et al., "FP8 Formats for Deep Learning", 2022, arXiv:2209.05433 (E4M3).
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
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

import ml_collections
import numpy as np

from experiments import streaming_llm
from experiments.study import expectations
from experiments.study import markdown_report
from experiments.study import result_cache
from experiments.study import study_options
from experiments.study import table_cells
from experiments.study import trained_runs
from pejax import machine
from pejax.eval import report as eval_report

STUDY = "kv_quantization"
# Cache dtype name -> the init_cache argument (float32 = the models' compute dtype).
CACHE_DTYPES = ("float32", "bfloat16", "int8", "fp8")
INT8_TARGET_PERCENT = 1.0  # The target: |relative perplexity change| <= 1% at int8.


@dataclasses.dataclass(frozen=True)
class Settings:
  """The sweep.

  Attributes:
    train_len: L of the models.
    multipliers: evaluation lengths as multiples of L.
    eval_tokens: validation tokens scored per length (disjoint windows).
    dtypes: cache dtypes compared (the first is the reference).
    pes: the models.
  """

  train_len: int
  multipliers: tuple
  eval_tokens: int
  dtypes: tuple = CACHE_DTYPES
  pes: tuple = streaming_llm.PES

  @property
  def lengths(self) -> List[int]:
    return [self.train_len * m for m in self.multipliers]


def settings_for(options: study_options.StudyOptions,
                 config: ml_collections.ConfigDict) -> Settings:
  """1, 2, 4, 8 x L; 16K tokens per length (quick: 2K)."""
  return Settings(train_len=int(config.data.train_len), multipliers=(1, 2, 4, 8),
                  eval_tokens=2048 if options.quick else 16384)


def cache_dtype_arg(name: str) -> Any:
  """The ``init_cache(dtype=...)`` argument for a dtype name of this study."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "int8": "int8",
          "fp8": "float8_e4m3fn"}[name]


@functools.lru_cache(maxsize=None)
def _window_nll_fn():
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  def nll_of(logits, targets):
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.sum(jnp.take_along_axis(log_probs, targets[..., None], axis=-1))

  @functools.partial(jax.jit, static_argnames=("graphdef", "dtype"))
  def window_nll(graphdef, state, inputs, targets, *, dtype):
    model = nnx.merge(graphdef, state)
    if dtype is None:  # No cache: the plain forward pass.
      return nll_of(model(inputs), targets)
    cache = model.init_cache(inputs.shape[0], inputs.shape[1], dtype=cache_dtype_arg(dtype))
    logits, _ = model.prefill(inputs, None, cache)
    return nll_of(logits, targets)

  return window_nll


def windows_of(tokens: np.ndarray, length: int, max_tokens: int) -> tuple:
  """Disjoint ``(inputs, targets)`` windows ``[N, length]`` covering up to ``max_tokens``."""
  count = min(max_tokens, tokens.shape[0] - 1) // length
  if count < 1:
    raise ValueError(f"the split ({tokens.shape[0]} tokens) is shorter than one window of "
                     f"{length}")
  span = count * length
  inputs = np.asarray(tokens[:span], np.int32).reshape(count, length)
  targets = np.asarray(tokens[1:span + 1], np.int32).reshape(count, length)
  return inputs, targets


def cache_perplexity(model, tokens: np.ndarray, *, length: int, dtype: Optional[str],
                     max_tokens: int, tokens_per_batch: int = 8192) -> Dict[str, Any]:
  """Perplexity of ``model`` on disjoint windows of ``length`` prefilled into a ``dtype`` cache.

  Args:
    model: a :class:`pejax.nn.Decoder`.
    tokens: ``[T]`` validation tokens.
    length: window length.
    dtype: a name of :data:`CACHE_DTYPES`, or ``None`` for the forward pass without a cache.
    max_tokens: most tokens scored.
    tokens_per_batch: windows per call = ``max(1, tokens_per_batch // length)``.

  Returns:
    ``{"perplexity", "nll", "tokens", "seconds"}``.
  """
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  inputs, targets = windows_of(tokens, length, max_tokens)
  batch = max(1, min(inputs.shape[0], tokens_per_batch // length))
  usable = inputs.shape[0] // batch * batch  # Whole batches: one compilation per length.
  graphdef, state = nnx.split(model)
  fn = _window_nll_fn()
  started = time.time()
  total = 0.0
  for start in range(0, usable, batch):
    total += float(fn(graphdef, state, jnp.asarray(inputs[start:start + batch]),
                      jnp.asarray(targets[start:start + batch]), dtype=dtype))
  count = usable * length
  nll = total / count
  return {"perplexity": math.exp(nll), "nll": nll, "tokens": count,
          "seconds": time.time() - started}


def relative_change(value: Optional[float], reference: Optional[float]) -> Optional[float]:
  """``100 * (value / reference - 1)``, ``None`` when either is missing."""
  if value is None or not reference:
    return None
  return 100.0 * (value / reference - 1.0)


def verdicts(table: Mapping[str, Mapping[int, Mapping[str, Mapping[str, Any]]]], *,
             train_len: int) -> List[expectations.Verdict]:
  """int8 within the target at every (PE, length) of ``table`` (pe -> length -> dtype -> row)."""
  out = []
  for pe, by_length in table.items():
    for length, row in by_length.items():
      ref = row.get("float32", {}).get("perplexity")
      q = row.get("int8", {}).get("perplexity")
      change = relative_change(q, ref)
      out.append(expectations.verdict(
          f"{pe} at {length} ({length // train_len}x L): an int8 KV cache (per-token scales) "
          "leaves perplexity within 1% (the issue's target; KVQuant, Hooper et al. 2024)",
          f"abs(int8 / float32 - 1) <= {INT8_TARGET_PERCENT:g}%",
          f"float32 {table_cells.fmt(ref, 3)}, int8 {table_cells.fmt(q, 3)} "
          f"({_signed(change)})",
          lambda change=change: abs(change) <= INT8_TARGET_PERCENT))
  return out


def _signed(percent: Optional[float]) -> str:
  return "n/a" if percent is None else f"{percent:+.3f}%"


def run(options: study_options.StudyOptions, *, settings: Optional[Settings] = None,
        log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Runs the study and writes its report; returns the results written to JSON."""
  base = streaming_llm.base_config(options)
  settings = settings or settings_for(options, base)
  workdir = options.report_dir(STUDY)
  workdir.mkdir(parents=True, exist_ok=True)
  report = markdown_report.Report("Quantized KV cache: perplexity of float32, bfloat16, int8, fp8",
                               study=STUDY, options=options)
  report.decided_by = "the full run (the streaming_llm models at L = 1024, 16K tokens a length)"
  log(f"{STUDY}: {', '.join(settings.pes)} (the {streaming_llm.STUDY} models, L="
      f"{settings.train_len}); cache dtypes {list(settings.dtypes)} at {settings.lengths}")
  models = streaming_llm.train_models(options, pes=settings.pes, log=log)
  report.add_runs([info for _, info in models.values()])
  report.models_per_arm(1)  # The streaming_llm models: one per PE.
  valid = trained_runs.load_corpus(str(base.data.name)).valid
  table: Dict[str, Dict[int, Dict[str, Dict[str, Any]]]] = {}
  for pe, (config, info) in models.items():

    def compute(config=config, info=info, pe=pe):
      model = trained_runs.load_model(info.run_dir, config)
      out = {}
      for length in settings.lengths:
        row = {}
        for dtype in (None,) + tuple(settings.dtypes):
          row[dtype or "no cache"] = cache_perplexity(model, valid, length=length, dtype=dtype,
                                                      max_tokens=settings.eval_tokens)
        ref = row["float32"]["perplexity"]
        log(f"  {pe} {length}: " + ", ".join(
            f"{d} {table_cells.fmt(r['perplexity'], 3)} "
            f"({_signed(relative_change(r['perplexity'], ref))})" for d, r in row.items()))
        out[str(length)] = row
      return out

    key = {"lengths": settings.lengths, "eval_tokens": settings.eval_tokens,
           "dtypes": list(settings.dtypes), "steps": info.steps}
    cells = result_cache.cached(info.run_dir / f"study_{STUDY}.json", key, compute)
    table[pe] = {int(l): row for l, row in cells.items()}
  for v in verdicts(table, train_len=settings.train_len):
    report.add_verdict(v)

  report.section(
      "Setup",
      f"Models: the `{streaming_llm.STUDY}` study's {', '.join(settings.pes)} decoders "
      f"({base.model.num_layers} layers, d_model {base.model.d_model}, {base.model.num_heads} "
      f"heads, float32, trained at L = {settings.train_len}; one model each, no seed spread). "
      f"Each length scores {settings.eval_tokens} validation tokens in disjoint windows "
      "(fewer when the windows do not divide it into whole batches: see `tokens`). Every window "
      "is one `prefill` into `init_cache(batch, length, dtype=...)`; its attention reads the "
      "keys and values back from the cache, so it sees the quantized values. `no cache` is the "
      "plain forward pass (equal to the float32 cache up to float rounding).")
  header = ["PE", "length", "tokens"] + [f"{d}" for d in ("no cache",) + tuple(settings.dtypes)]
  rows = []
  for pe, by_length in table.items():
    for length, row in by_length.items():
      ref = row["float32"]["perplexity"]
      cells = [pe, f"{length} ({length // settings.train_len}x)", row["float32"]["tokens"]]
      for d in ("no cache",) + tuple(settings.dtypes):
        p = row[d]["perplexity"]
        cells.append(table_cells.fmt(p, 3) if d in ("no cache", "float32") else
                     f"{table_cells.fmt(p, 3)} ({_signed(relative_change(p, ref))})")
      rows.append(cells)
  report.table(header, rows, caption="**Perplexity by cache dtype** (relative change vs the "
               "float32 cache in parentheses)")
  series = {}
  for pe, by_length in table.items():
    for d in settings.dtypes[1:]:
      series[f"{pe} {d}"] = [(l, relative_change(r[d]["perplexity"], r["float32"]["perplexity"]))
                             for l, r in by_length.items()]
  png = eval_report.plot_curves(
      workdir / "kv_quantization.png", series, xlabel="evaluation length (bytes)",
      ylabel="perplexity change vs float32 cache (%)", logx=True,
      vline=settings.train_len, vline_label=f"train length {settings.train_len}",
      hline=INT8_TARGET_PERCENT, hline_label="int8 target +1%",
      styles={k: ("-" if k.startswith("rope") else "--") for k in series},
      title="Quantized KV cache: relative perplexity change")
  report.image(png, "relative perplexity change vs length")
  time_rows = [[pe, table_cells.fmt(sum(r["seconds"] for row in by_length.values()
                                         for r in row.values()), 0)]
               for pe, by_length in table.items()]
  report.table(["PE", "wall s (all lengths and dtypes)"], time_rows,
               caption=f"**Compute** ({machine.describe_machine()}). Reproduce: "
               f"`{options.command_line()}`")
  results = {"settings": {**dataclasses.asdict(settings), "lengths": settings.lengths},
             "table": {pe: {str(l): row for l, row in by_length.items()}
                       for pe, by_length in table.items()},
             "relative_change_percent": {
                 pe: {str(l): {d: relative_change(row[d]["perplexity"],
                                                  row["float32"]["perplexity"])
                               for d in row} for l, row in by_length.items()}
                 for pe, by_length in table.items()},
             "runs": {pe: info.to_json() for pe, (_, info) in models.items()}}
  return markdown_report.write_report(report, workdir, results, study=STUDY, log=log)


if __name__ == "__main__":
  study_options.run_as_launch(STUDY)
