"""Compile time of the train step, and KV-cache decoding against recomputing the whole prefix.

Compile: for each PE, a fresh 4-layer d=128 decoder and the library's train step
(``pejax.train.make_train_step`` + ``create_optimizer``, batch 16 x 256). The first call traces,
compiles and runs; its time minus the median of the following steps is the compile cost. The
process CPU time of the first call is reported too.

Decoding (same model, RoPE): generate ``--new`` tokens greedily after a ``--prompt`` prompt,

* ``kv cache``: one ``prefill`` then ``decode_step`` per token (each jitted once), keys cached
  before rotation (the default, exact for length-dependent scalings) or after;
* ``recompute``: a full forward pass over a fixed ``[B, prompt + new]`` buffer per token (static
  shape, one compilation; the causal mask makes the unfilled tail irrelevant), reading the logits
  at the current position: what decoding costs without a cache.

The three methods alternate over ``--rounds`` rounds after a warm-up generation; the greedy
outputs are checked to be identical. Reported: new tokens per second (median, min-max) and the
ratio to ``recompute``.

Usage::

  JAX_PLATFORMS=cpu python -m benchmarks.compile_and_decode [--rounds 3]

Writes ``benchmarks/results/compile_and_decode.{md,json}``.
"""

from __future__ import annotations

import argparse
import dataclasses
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
import ml_collections
import numpy as np

from benchmarks import result_files  # pylint: disable=wrong-import-position
from pejax.nn import Decoder, DecoderConfig
from pejax.nn.positional import registry
from pejax.train import create_optimizer, make_train_step

RESULTS = pathlib.Path(__file__).parent / "results"
OPTIM = dict(learning_rate=3e-3, warmup_steps=2, min_lr_ratio=0.1, weight_decay=0.1, b1=0.9,
             b2=0.98, clip_norm=1.0)


def compile_times(args) -> list[dict]:
  rows = []
  rng = np.random.RandomState(0)
  tokens = rng.randint(0, 256, size=(args.batch, args.length + 1)).astype(np.int32)
  batch = {"inputs": jnp.asarray(tokens[:, :-1]), "targets": jnp.asarray(tokens[:, 1:]),
           "positions": jnp.broadcast_to(jnp.arange(args.length, dtype=jnp.int32),
                                         (args.batch, args.length)),
           "loss_mask": jnp.ones((args.batch, args.length), jnp.float32)}
  for pe in args.pes.split(","):
    # The PE's defaults; a bounded (learned) table covers the length.
    pe_config = registry.registry_entry(pe).make_config(context={"train_len": args.length})
    config = DecoderConfig(pe=pe_config, num_layers=args.layers, d_model=args.d_model,
                           num_heads=args.heads)
    model = Decoder(config, rngs=nnx.Rngs(0))
    optimizer = create_optimizer(model, ml_collections.ConfigDict(OPTIM), total_steps=1000)
    step = make_train_step()
    c0, t0 = time.process_time(), time.perf_counter()
    jax.block_until_ready(step(model, optimizer, batch))
    first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
    steady = []
    for _ in range(3):
      t0 = time.perf_counter()
      jax.block_until_ready(step(model, optimizer, batch))
      steady.append(time.perf_counter() - t0)
    rows.append(dict(pe=pe, first_call_s=first, first_call_cpu_s=first_cpu,
                     step_s=statistics.median(steady),
                     compile_s=first - statistics.median(steady)))
    print(f"compile {pe}: {rows[-1]['compile_s']:.1f} s", flush=True)
  return rows


def decode_benchmark(args) -> tuple[list[dict], dict]:
  total = args.prompt + args.new
  base = DecoderConfig(pe="rope", num_layers=args.layers, d_model=args.d_model,
                       num_heads=args.heads)
  models = {
      "kv cache (keys cached before rotation, default)": Decoder(base, rngs=nnx.Rngs(0)),
      "kv cache (keys cached after rotation)": Decoder(
          dataclasses.replace(base, cache_rotated_keys=True), rngs=nnx.Rngs(0)),
  }
  recompute_model = Decoder(base, rngs=nnx.Rngs(0))
  prompt = jnp.asarray(np.random.RandomState(1).randint(
      0, 256, size=(args.decode_batch, args.prompt)).astype(np.int32))

  @nnx.jit
  def prefill(model, tokens, cache):
    logits, cache = model.prefill(tokens, None, cache)
    return jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32), cache

  @nnx.jit
  def decode(model, token, position, cache):
    logits, cache = model.decode_step(token[:, None], position, cache)
    return jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32), cache

  @nnx.jit
  def full(model, buffer, index):
    logits = model(buffer)
    row = jax.lax.dynamic_index_in_dim(logits, index, axis=1, keepdims=False)
    return jnp.argmax(row, axis=-1).astype(jnp.int32)

  def generate_cached(model):
    cache = model.init_cache(args.decode_batch, total)
    token, cache = prefill(model, prompt, cache)
    out = [token]
    for i in range(args.new - 1):
      position = jnp.full((args.decode_batch, 1), args.prompt + i, jnp.int32)
      token, cache = decode(model, token, position, cache)
      out.append(token)
    return np.asarray(jax.block_until_ready(jnp.stack(out, axis=1)))

  def generate_recompute(model):
    buffer = jnp.zeros((args.decode_batch, total), jnp.int32).at[:, :args.prompt].set(prompt)
    out = []
    for i in range(args.new):
      token = full(model, buffer, args.prompt - 1 + i)
      buffer = buffer.at[:, args.prompt + i].set(token)
      out.append(token)
    return np.asarray(jax.block_until_ready(jnp.stack(out, axis=1)))

  methods = {name: (lambda m=m: generate_cached(m)) for name, m in models.items()}
  methods["recompute full prefix"] = lambda: generate_recompute(recompute_model)
  outputs = {name: fn() for name, fn in methods.items()}  # Compile + warm up.
  reference = outputs["recompute full prefix"]
  same = {name: bool(np.array_equal(out, reference)) for name, out in outputs.items()}
  times = {name: [] for name in methods}
  for _ in range(args.rounds):
    for name, fn in methods.items():
      t0 = time.perf_counter()
      fn()
      times[name].append(time.perf_counter() - t0)
  generated = args.decode_batch * args.new
  base = statistics.median(times["recompute full prefix"])
  rows = [dict(method=name, tokens_per_s=generated / statistics.median(t),
               tokens_per_s_min=generated / max(t), tokens_per_s_max=generated / min(t),
               speedup_vs_recompute=base / statistics.median(t), same_tokens=same[name])
          for name, t in times.items()]
  return rows, dict(prompt=args.prompt, new=args.new, batch=args.decode_batch)


def run(args) -> dict:
  load_before = os.getloadavg()
  compile_rows = compile_times(args)
  decode_rows, decode_setup = decode_benchmark(args)
  load_after = os.getloadavg()
  setup = dict(layers=args.layers, d_model=args.d_model, heads=args.heads, batch=args.batch,
               length=args.length, rounds=args.rounds, jax=jax.__version__,
               cpu_count=os.cpu_count(), machine=platform.machine(), load_before=load_before,
               load_after=load_after, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               **{f"decode_{k}": v for k, v in decode_setup.items()})
  result = dict(setup=setup, compile=compile_rows, decode=decode_rows)
  s = setup
  lines = [
      "# Train-step compile time and KV-cache decoding",
      "",
      f"{s['layers']} layers, d={s['d_model']}, {s['heads']} heads, SwiGLU, float32; jax "
      f"{s['jax']}, {s['cpu_count']} cores, load average before {s['load_before'][0]:.2f}, after "
      f"{s['load_after'][0]:.2f}. {s['date']}.",
      "",
      f"Train step (`make_train_step`, batch {s['batch']} x {s['length']}): compile = first call "
      "- median steady step.",
      "",
      "| PE | compile s | first call s (CPU s) | steady step ms |",
      "|---|---:|---:|---:|",
  ]
  for r in compile_rows:
    lines.append(f"| {r['pe']} | {r['compile_s']:.1f} | {r['first_call_s']:.1f} "
                 f"({r['first_call_cpu_s']:.1f}) | {1e3 * r['step_s']:.0f} |")
  lines += [
      "",
      f"Greedy decoding, RoPE, batch {s['decode_batch']}, prompt {s['decode_prompt']}, "
      f"{s['decode_new']} new tokens; {s['rounds']} alternating rounds after a warm-up "
      "generation.",
      "",
      "| method | new tokens/s (median) | min-max | x recompute | same tokens |",
      "|---|---:|---:|---:|:---:|",
  ]
  for r in decode_rows:
    lines.append(f"| {r['method']} | {r['tokens_per_s']:.1f} | {r['tokens_per_s_min']:.1f}-"
                 f"{r['tokens_per_s_max']:.1f} | {r['speedup_vs_recompute']:.1f} | "
                 f"{'yes' if r['same_tokens'] else 'NO'} |")
  lines.append("")
  text = "\n".join(lines)
  print(text)
  result_files.write(RESULTS, args.name, text, result)
  return result


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--pes", default="none,rope,alibi,t5")
  parser.add_argument("--layers", type=int, default=4)
  parser.add_argument("--d_model", type=int, default=128)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--length", type=int, default=256)
  parser.add_argument("--prompt", type=int, default=128)
  parser.add_argument("--new", type=int, default=128)
  parser.add_argument("--decode_batch", type=int, default=1)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--name", default="compile_and_decode")
  return parser.parse_args(argv)


if __name__ == "__main__":
  run(parse_args())
