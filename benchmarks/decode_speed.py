"""Greedy decoding speed and cache memory per KV-cache kind, at 1K / 8K / 32K tokens of context.

One fixed model (4 layers, d=128, 4 heads, RoPE, float32, random weights: speed does not depend on
them), batch 1, a prompt of C tokens, greedy. Cache kinds:

* ``float32 full``: no eviction, the compute dtype (C + N slots);
* ``int8 full`` / ``fp8 full``: the same cache quantized (float32 scales per token and head);
* ``window 1024``: a ring buffer of 1024 slots (``cache_eviction="window"``);
* ``sinks 4+1020``: 4 sink tokens + a ring of 1020 (``cache_eviction="sinks"``).

Decode tokens/s excludes the prefill: ``pejax.generate`` is timed with N + 1 and with 1 new
tokens, side by side (alternating, median of ``--repeats``), and N / (t(N + 1) - t(1)) is
reported. At long contexts the prefill (seconds) dwarfs N decode steps, so that difference is
noisy; the table also gives the same decode loop timed on its own (``decode_step`` in one jitted
``lax.scan`` over N + 1 and over 1 steps, from one prefilled cache, the same difference) and,
above ``--generate_max_context``, only that (say so in the table). Cache bytes: the sum of
``nbytes`` over the cache pytree's arrays for C + N tokens.

Usage::

  JAX_PLATFORMS=cpu python -m benchmarks.decode_speed [--repeats 3]

Writes ``benchmarks/results/decode_speed.{md,json}``.
"""

from __future__ import annotations

import argparse
import functools
import os
import pathlib
import platform
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from flax import nnx  # pylint: disable=g-import-not-at-top
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import result_files  # pylint: disable=wrong-import-position
import pejax
from pejax.nn import Decoder, DecoderConfig

RESULTS = pathlib.Path(__file__).parent / "results"
RING = 1024  # Slots of the evicting caches.
SINKS = 4

def cache_kinds(ring: int = RING, sinks: int = SINKS) -> dict:
  """name -> the cache arguments of ``pejax.generate`` (cache_size None = prompt + new tokens)."""
  return {
      "float32 full": dict(cache_dtype=None, cache_eviction="none", cache_size=None,
                           sink_tokens=0),
      "int8 full": dict(cache_dtype="int8", cache_eviction="none", cache_size=None,
                        sink_tokens=0),
      "fp8 full": dict(cache_dtype="float8_e4m3fn", cache_eviction="none", cache_size=None,
                       sink_tokens=0),
      f"window {ring}": dict(cache_dtype=None, cache_eviction="window", cache_size=ring,
                             sink_tokens=0),
      f"sinks {sinks}+{ring - sinks}": dict(cache_dtype=None, cache_eviction="sinks",
                                            cache_size=ring, sink_tokens=sinks),
  }


def make_model(args) -> Decoder:
  config = DecoderConfig(pe=args.pe, num_layers=args.layers, d_model=args.d_model,
                         num_heads=args.heads)
  return Decoder(config, rngs=nnx.Rngs(0))


def init_cache_for(model: Decoder, kind: dict, context: int, new: int):
  """The cache ``pejax.generate`` builds for this kind (batch 1, ``context + new`` tokens)."""
  size = kind["cache_size"] or context + new
  kwargs = {"dtype": kind["cache_dtype"], "eviction": kind["cache_eviction"]}
  if kind["cache_eviction"] == "sinks":
    kwargs["sink_tokens"] = kind["sink_tokens"]
  return model.init_cache(1, size, **kwargs)


def cache_bytes(cache) -> int:
  """Sum of ``nbytes`` over the cache pytree's arrays."""
  return int(sum(np.asarray(leaf).nbytes for leaf in jax.tree.leaves(cache)))


def _generate(model, prompt, new, kind):
  return jax.block_until_ready(pejax.generate(model, prompt, max_new_tokens=new, **kind))


@functools.partial(jax.jit, static_argnames=("graphdef", "steps"))
def _decode_loop(graphdef, state, cache, token, start, *, steps):
  """``steps`` greedy decode steps from ``cache`` (the loop ``pejax.generate`` runs)."""
  model = nnx.merge(graphdef, state)

  def body(carry, i):
    token, cache = carry
    position = jnp.reshape(start + i, (1, 1)).astype(jnp.int32)
    logits, cache = model.decode_step(token.reshape(1, 1), position, cache)
    return (jnp.argmax(logits[0, -1]).astype(jnp.int32), cache), None

  (token, _), _ = jax.lax.scan(body, (token, cache), jnp.arange(steps, dtype=jnp.int32))
  return token


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _prefill(graphdef, state, cache, prompt):
  model = nnx.merge(graphdef, state)
  logits, cache = model.prefill(prompt, None, cache)
  return jnp.argmax(logits[0, -1]).astype(jnp.int32), cache


def measure_context(model: Decoder, context: int, args, *, kinds: dict,
                    log=print) -> list[dict]:
  """Rows of one context length: every kind, both timing methods where enabled."""
  prompt = np.random.RandomState(context).randint(0, 256, size=(1, context)).astype(np.int32)
  new = args.new
  use_generate = context <= args.generate_max_context
  graphdef, state = nnx.split(model)
  rows = []
  prefilled = {}
  for name, kind in kinds.items():
    cache = init_cache_for(model, kind, context, new + 1)
    row = dict(context=context, kind=name, new_tokens=new, cache_bytes=cache_bytes(cache),
               cache_slots=kind["cache_size"] or context + new + 1)
    t0 = time.perf_counter()
    token, cache = _prefill(graphdef, state, cache, jnp.asarray(prompt))
    jax.block_until_ready(cache)
    row["prefill_first_call_s"] = time.perf_counter() - t0
    prefilled[name] = (token, cache)
    for steps in (new + 1, 1):  # Compile both loop lengths.
      jax.block_until_ready(_decode_loop(graphdef, state, cache, token, jnp.int32(context),
                                         steps=steps))
    if use_generate:
      for n in (new + 1, 1):
        _generate(model, prompt, n, kind)  # Compile + warm up.
    rows.append(row)
    log(f"  {context} {name}: prepared ({row['prefill_first_call_s']:.1f} s first prefill)")
  loop_times = {name: {new + 1: [], 1: []} for name in kinds}
  gen_times = {name: {new + 1: [], 1: []} for name in kinds}
  for _ in range(args.repeats):  # Side by side: every kind and length in each round.
    for name, kind in kinds.items():
      token, cache = prefilled[name]
      for steps in (new + 1, 1):
        t0 = time.perf_counter()
        jax.block_until_ready(_decode_loop(graphdef, state, cache, token, jnp.int32(context),
                                           steps=steps))
        loop_times[name][steps].append(time.perf_counter() - t0)
        if use_generate:
          t0 = time.perf_counter()
          _generate(model, prompt, steps, kind)
          gen_times[name][steps].append(time.perf_counter() - t0)
  for row in rows:
    name = row["kind"]
    loop = statistics.median(loop_times[name][new + 1]) - statistics.median(loop_times[name][1])
    row["loop_tokens_per_s"] = new / loop if loop > 0 else None
    row["loop_step_ms"] = 1e3 * loop / new
    if use_generate:
      long_t = statistics.median(gen_times[name][new + 1])
      short_t = statistics.median(gen_times[name][1])
      row["generate_s"] = {"n_plus_1": gen_times[name][new + 1], "one": gen_times[name][1]}
      row["generate_tokens_per_s"] = new / (long_t - short_t) if long_t > short_t else None
      row["prefill_s"] = short_t
    else:
      row["generate_tokens_per_s"] = None
      row["prefill_s"] = row["prefill_first_call_s"]
    log(f"  {context} {name}: decode {row['loop_tokens_per_s'] or float('nan'):.0f} tok/s "
        f"(loop), generate {row['generate_tokens_per_s'] or float('nan'):.0f} tok/s, "
        f"{row['cache_bytes'] / 2**20:.1f} MiB")
  return rows


def _fmt(x, digits=0):
  return "n/a" if x is None else f"{x:.{digits}f}"


def run(args, *, log=print) -> dict:
  load_before = os.getloadavg()
  model = make_model(args)
  kinds = {k: v for k, v in cache_kinds(args.ring, args.sinks).items()
           if not args.kinds or k in args.kinds.split(",")}
  contexts = [int(c) for c in args.contexts.split(",")]
  started = time.time()
  rows = []
  for context in contexts:
    rows += measure_context(model, context, args, kinds=kinds, log=log)
  setup = dict(pe=args.pe, layers=args.layers, d_model=args.d_model, heads=args.heads,
               new=args.new, repeats=args.repeats, contexts=contexts,
               generate_max_context=args.generate_max_context, jax=jax.__version__,
               cpu_count=os.cpu_count(), machine=platform.machine(),
               platform=jax.devices()[0].platform, load_before=load_before,
               load_after=os.getloadavg(), wall_s=time.time() - started,
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
  result = dict(setup=setup, rows=rows)
  s = setup
  lines = [
      "# Decoding speed and cache memory per KV-cache kind",
      "",
      f"{s['layers']} layers, d={s['d_model']}, {s['heads']} heads, pe={s['pe']}, float32 "
      f"compute, random weights, batch 1, greedy, {s['new']} new tokens after a prompt of the "
      f"given context; jax {s['jax']} on {s['platform']}, {s['cpu_count']} cores "
      f"({s['machine']}), load average before {s['load_before'][0]:.2f}, after "
      f"{s['load_after'][0]:.2f}; {s['date']}; {s['wall_s']:.0f} s. Command: "
      f"`{args.command}`.",
      "",
      f"`generate` = N / (t(generate N + 1) - t(generate 1)), median of {s['repeats']} "
      "alternating repeats (the prefill cancels out; at long contexts it dominates both "
      "times, so this difference is noisy). `decode loop` = the same difference for "
      "`decode_step` in one jitted `lax.scan` from one prefilled cache (no prefill in the "
      f"timed call). Above {s['generate_max_context']} tokens of context only the decode loop "
      "is timed (each `generate` call would re-run a long prefill). Cache bytes: sum of the "
      "cache arrays' `nbytes` for context + N + 1 tokens (keys, values, scales, positions, "
      "bookkeeping). n/a: t(N + 1) <= t(1), the prefill's noise exceeded N decode steps.",
      "",
      "| context | cache kind | slots | cache MiB | decode tok/s (generate) | decode tok/s "
      "(decode loop) | ms / token (loop) | prefill s |",
      "|---:|---|---:|---:|---:|---:|---:|---:|",
  ]
  for r in rows:
    lines.append(f"| {r['context']} | {r['kind']} | {r['cache_slots']} | "
                 f"{r['cache_bytes'] / 2**20:.2f} | {_fmt(r['generate_tokens_per_s'])} | "
                 f"{_fmt(r['loop_tokens_per_s'])} | {_fmt(r['loop_step_ms'], 2)} | "
                 f"{_fmt(r['prefill_s'], 2)} |")
  lines.append("")
  text = "\n".join(lines)
  log(text)
  result_files.write(args.out, args.name, text, result)
  return result


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--pe", default="rope")
  parser.add_argument("--layers", type=int, default=4)
  parser.add_argument("--d_model", type=int, default=128)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--contexts", default="1024,8192,32768")
  parser.add_argument("--new", type=int, default=64)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--generate_max_context", type=int, default=8192)
  parser.add_argument("--ring", type=int, default=RING, help="slots of the evicting caches")
  parser.add_argument("--sinks", type=int, default=SINKS, help="sink tokens of the sinks cache")
  parser.add_argument("--kinds", default="", help="comma-separated subset of: "
                      + ", ".join(cache_kinds()))
  parser.add_argument("--out", default=str(RESULTS))
  parser.add_argument("--name", default="decode_speed")
  args = parser.parse_args(argv)
  args.command = "python -m benchmarks.decode_speed " + " ".join(
      argv if argv is not None else sys.argv[1:])
  return args


def main(argv=None) -> dict:
  return run(parse_args(argv))


if __name__ == "__main__":
  main()
