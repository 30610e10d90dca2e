"""apply_rope (both layouts) against the memory-bandwidth floor of an elementwise pass.

The floor is ``x * a + b`` with runtime scalars ``a`` and ``b`` (XLA cannot fold it away): it
reads and writes the same bytes as a rotation. Each variant is jitted, warmed up, then timed in
alternating rounds (A B C A B C ...) in one process; we report the median and min-max per variant
and the ratio of medians to the floor.

    python -m benchmarks.rope_throughput [--shape 8,1024,8,64] [--repeats 30]

Writes benchmarks/results/rope_throughput.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import time

import jax
import jax.numpy as jnp

import pejax

RESULTS = pathlib.Path(__file__).parent / "results"


def _timed(fn, *args) -> float:
  start = time.perf_counter()
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - start


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--shape", default="8,1024,8,64", help="B,L,H,D")
  parser.add_argument("--repeats", type=int, default=30)
  parser.add_argument("--inner", type=int, default=5, help="calls per timed sample")
  args = parser.parse_args()
  b, l, h, d = (int(v) for v in args.shape.split(","))
  x = jax.random.normal(jax.random.PRNGKey(0), (b, l, h, d), jnp.float32)
  positions = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
  inv_freq, _ = pejax.rope_inv_freq(pejax.RopeConfig(d))
  a, c = jnp.float32(1.0001), jnp.float32(0.5)

  variants = {
      "floor x*a+b": (jax.jit(lambda x, a, c: x * a + c), (x, a, c)),
      "apply_rope half": (jax.jit(lambda x, p: pejax.apply_rope(x, p, inv_freq, layout="half")),
                          (x, positions)),
      "apply_rope interleaved (complex)": (
          jax.jit(lambda x, p: pejax.apply_rope(x, p, inv_freq, layout="interleaved")),
          (x, positions)),
  }
  for fn, fn_args in variants.values():  # Compile and warm up.
    for _ in range(3):
      jax.block_until_ready(fn(*fn_args))
  samples = {name: [] for name in variants}
  for _ in range(args.repeats):
    for name, (fn, fn_args) in variants.items():
      samples[name].append(sum(_timed(fn, *fn_args) for _ in range(args.inner)) / args.inner)

  floor = statistics.median(samples["floor x*a+b"])
  rows = []
  for name, values in samples.items():
    med = statistics.median(values)
    rows.append({"variant": name, "median_ms": med * 1e3, "min_ms": min(values) * 1e3,
                 "max_ms": max(values) * 1e3, "ratio_to_floor": med / floor,
                 "gbytes_per_s": 2 * x.nbytes / med / 1e9})
  meta = {"shape": [b, l, h, d], "dtype": "float32", "repeats": args.repeats,
          "inner": args.inner, "jax": jax.__version__, "device": str(jax.devices()[0]),
          "cpu_count": os.cpu_count(), "machine": platform.machine(),
          "loadavg_1m_5m_15m": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
  lines = [f"# apply_rope vs elementwise floor, shape {args.shape} float32", "",
           f"{meta['date']}, jax {meta['jax']} on {meta['device']} ({meta['cpu_count']} cores, "
           f"load {tuple(round(v, 2) for v in meta['loadavg_1m_5m_15m'])}); {args.repeats} "
           f"alternating rounds x {args.inner} calls.", "",
           "| variant | median ms | min-max ms | x floor | GB/s (read+write) |",
           "|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['variant']} | {r['median_ms']:.3f} | {r['min_ms']:.3f}-{r['max_ms']:.3f} "
                 f"| {r['ratio_to_floor']:.2f} | {r['gbytes_per_s']:.1f} |")
  report = "\n".join(lines)
  print(report)
  RESULTS.mkdir(parents=True, exist_ok=True)
  (RESULTS / "rope_throughput.md").write_text(report + "\n")
  (RESULTS / "rope_throughput.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                           indent=1))


if __name__ == "__main__":
  main()
