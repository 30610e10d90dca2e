"""Positional-encoding construction cost against the memory-bandwidth floor of the same bytes.

Each PE operation is jitted alone and compared with a *floor*: ``x * a + b`` with runtime scalars
``a, b`` (XLA cannot fold it away) over an array of the same size as the operation's output, i.e.
one read and one write of those bytes. A ratio of 1 means the operation runs at memory speed.

* ``apply_rope`` (``half`` and ``interleaved`` complex form) on ``[B, L, H, D]`` queries, with
  ``[1, L]`` shared positions (the decoder's default) and with per-row ``[B, L]`` positions;
  floor over ``[B, L, H, D]``.
* ALiBi bias ``[1, H, L, L]`` (``alibi_bias``) and T5 bias ``[1, H, L, L]`` (bucket arithmetic +
  table gather, ``T5RelativeBias``), built from ``[1, L]`` positions; floor over ``[1, H, L, L]``
  (the bias only *writes* those bytes, the floor reads and writes them: a ratio below 1 is
  possible).

All variants run in one process in alternating rounds (A B C ... A B C ...), after warm-up;
median and min-max wall time and median CPU time per call are reported.

Usage::

  JAX_PLATFORMS=cpu python -m benchmarks.bias_construction [--rounds 20]

Writes ``benchmarks/results/bias_construction.{md,json}``.
"""

from __future__ import annotations

import argparse
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

from benchmarks import result_files  # pylint: disable=wrong-import-position
from pejax.encodings.alibi import alibi_bias, alibi_slopes
from pejax.encodings.rope import RopeConfig, apply_rope, rope_inv_freq
from pejax.encodings.t5_bias import T5RelativeBias

RESULTS = pathlib.Path(__file__).parent / "results"


def build_variants(batch: int, length: int, heads: int, head_dim: int,
                   bias_length: int) -> dict:
  """name -> (jitted fn, args, floor name)."""
  x = jax.random.normal(jax.random.key(0), (batch, length, heads, head_dim), jnp.float32)
  shared = jnp.arange(length, dtype=jnp.int32)[None]
  per_row = jnp.broadcast_to(shared, (batch, length))
  inv_freq, _ = rope_inv_freq(RopeConfig(head_dim))
  a, c = jnp.float32(1.0001), jnp.float32(0.5)
  floor = jax.jit(lambda x, a, c: x * a + c)
  bias_x = jax.random.normal(jax.random.key(1), (1, heads, bias_length, bias_length), jnp.float32)
  bias_pos = jnp.arange(bias_length, dtype=jnp.int32)[None]
  slopes = alibi_slopes(heads)
  t5 = T5RelativeBias(heads, rngs=nnx.Rngs(0))
  graph, state = nnx.split(t5)
  t5_fn = jax.jit(lambda state, p: nnx.merge(graph, state)(p, p))
  rope = lambda layout: jax.jit(lambda x, p: apply_rope(x, p, inv_freq, layout=layout))
  return {
      "floor [B,L,H,D]": (floor, (x, a, c), None),
      "apply_rope half, [1,L] positions": (rope("half"), (x, shared), "floor [B,L,H,D]"),
      "apply_rope half, [B,L] positions": (rope("half"), (x, per_row), "floor [B,L,H,D]"),
      "apply_rope interleaved, [1,L] positions": (rope("interleaved"), (x, shared),
                                                  "floor [B,L,H,D]"),
      "apply_rope interleaved, [B,L] positions": (rope("interleaved"), (x, per_row),
                                                  "floor [B,L,H,D]"),
      "floor [1,H,L,L]": (floor, (bias_x, a, c), None),
      "alibi bias [1,H,L,L]": (jax.jit(lambda p: alibi_bias(p, p, slopes)), (bias_pos,),
                               "floor [1,H,L,L]"),
      "t5 bias [1,H,L,L]": (t5_fn, (state, bias_pos), "floor [1,H,L,L]"),
  }


def run(args) -> dict:
  variants = build_variants(args.batch, args.length, args.heads, args.head_dim, args.bias_length)
  load_before = os.getloadavg()
  for fn, fn_args, _ in variants.values():
    for _ in range(3):
      jax.block_until_ready(fn(*fn_args))
  samples = {name: dict(wall=[], cpu=[]) for name in variants}
  for _ in range(args.rounds):
    for name, (fn, fn_args, _) in variants.items():
      c0, t0 = time.process_time(), time.perf_counter()
      for _ in range(args.inner):
        out = fn(*fn_args)
      jax.block_until_ready(out)
      samples[name]["wall"].append((time.perf_counter() - t0) / args.inner)
      samples[name]["cpu"].append((time.process_time() - c0) / args.inner)
  load_after = os.getloadavg()
  rows = []
  for name, (_, _, floor_name) in variants.items():
    wall, cpu = samples[name]["wall"], samples[name]["cpu"]
    floor_name = floor_name or name
    floor_wall = statistics.median(samples[floor_name]["wall"])
    floor_cpu = statistics.median(samples[floor_name]["cpu"])
    rows.append(dict(variant=name, floor=floor_name, median_ms=1e3 * statistics.median(wall),
                     min_ms=1e3 * min(wall), max_ms=1e3 * max(wall),
                     cpu_ms=1e3 * statistics.median(cpu),
                     wall_ratio_to_floor=statistics.median(wall) / floor_wall,
                     cpu_ratio_to_floor=statistics.median(cpu) / floor_cpu))
  setup = dict(batch=args.batch, length=args.length, heads=args.heads, head_dim=args.head_dim,
               bias_length=args.bias_length, rounds=args.rounds, inner=args.inner,
               jax=jax.__version__, cpu_count=os.cpu_count(), machine=platform.machine(),
               load_before=load_before, load_after=load_after,
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
  result = dict(setup=setup, rows=rows)
  s = setup
  lines = [
      "# PE construction vs the elementwise floor (same bytes)",
      "",
      f"RoPE on [B={s['batch']}, L={s['length']}, H={s['heads']}, D={s['head_dim']}] float32; "
      f"biases [1, H={s['heads']}, {s['bias_length']}, {s['bias_length']}] float32. Floor: "
      f"`x * a + b` (runtime scalars) over the same number of elements. One process, "
      f"{s['rounds']} alternating rounds x {s['inner']} calls after warm-up. jax {s['jax']}, "
      f"{s['cpu_count']} cores, load average before {s['load_before'][0]:.2f}, after "
      f"{s['load_after'][0]:.2f}. {s['date']}.",
      "",
      "| variant | median ms | min-max ms | x floor (wall) | CPU ms | x floor (CPU) |",
      "|---|---:|---:|---:|---:|---:|",
  ]
  for r in rows:
    lines.append(f"| {r['variant']} | {r['median_ms']:.3f} | {r['min_ms']:.3f}-{r['max_ms']:.3f}"
                 f" | {r['wall_ratio_to_floor']:.2f} | {r['cpu_ms']:.3f} | "
                 f"{r['cpu_ratio_to_floor']:.2f} |")
  lines.append("")
  text = "\n".join(lines)
  print(text)
  result_files.write(RESULTS, args.name, text, result)
  return result


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--length", type=int, default=1024)
  parser.add_argument("--heads", type=int, default=8)
  parser.add_argument("--head_dim", type=int, default=64)
  parser.add_argument("--bias_length", type=int, default=1024)
  parser.add_argument("--rounds", type=int, default=20)
  parser.add_argument("--inner", type=int, default=5)
  parser.add_argument("--name", default="bias_construction")
  return parser.parse_args(argv)


if __name__ == "__main__":
  run(parse_args())
