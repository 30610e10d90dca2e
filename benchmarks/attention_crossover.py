"""Where blockwise attention overtakes dense: the measurement behind ``"auto"``'s threshold.

One causal attention ``[B, L, 4, 32]`` float32 with ``B * L = 4096`` tokens (a training batch
cut into longer and longer sequences), forward and forward + backward, the dense schedule vs the
blockwise schedule (tile 512 and 256), at 256 ... 4096 tokens, alternating rounds in one process.
The crossover is the longest length at which dense is still the faster schedule (CPU time,
forward + backward: training is what ``auto`` serves); it is compared with the threshold that
:func:`pejax.nn.attention.choose_implementation` uses on this platform (``pejax.nn.attention.schedule.DENSE_UP_TO``).

Usage::

  JAX_PLATFORMS=cpu python -m benchmarks.attention_crossover [--rounds 5]

Writes benchmarks/results/attention_crossover.{md,json} and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp

from pejax.nn.attention import attention  # pylint: disable=g-import-not-at-top
from pejax.nn.attention import schedule as attention_schedule

VARIANTS = (("dense", 512), ("blockwise", 512), ("blockwise", 256))


def _fn(implementation: str, block: int, length: int, backward: bool):
  positions = jnp.arange(length, dtype=jnp.int32)[None]

  def forward(q, k, v):
    return attention(q, k, v, q_positions=positions, k_positions=positions,
                     implementation=implementation, block_size=block)

  if not backward:
    return jax.jit(forward)
  return jax.jit(jax.grad(lambda q, k, v: jnp.sum(forward(q, k, v) ** 2), argnums=(0, 1, 2)))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--tokens", type=int, default=4096)
  parser.add_argument("--lengths", default="256,512,1024,2048,4096")
  parser.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"))
  args = parser.parse_args()
  load_before = os.getloadavg()
  lengths = [int(x) for x in args.lengths.split(",")]
  cases = {}
  for length in lengths:
    batch = max(1, args.tokens // length)
    keys = jax.random.split(jax.random.key(length), 3)
    qkv = [jax.random.normal(key, (batch, length, 4, 32), jnp.float32) for key in keys]
    for backward in (False, True):
      for implementation, block in VARIANTS:
        fn = _fn(implementation, block, length, backward)
        jax.block_until_ready(fn(*qkv))
        cases[(length, backward, implementation, block)] = (fn, qkv, [], [])
  for _ in range(args.rounds):
    for (fn, qkv, walls, cpus) in cases.values():
      wall, cpu = time.perf_counter(), time.process_time()
      jax.block_until_ready(fn(*qkv))
      walls.append(time.perf_counter() - wall)
      cpus.append(time.process_time() - cpu)
  rows = [dict(length=length, backward=backward, variant=f"{impl} {block}" if impl ==
               "blockwise" else impl, wall_ms=1e3 * statistics.median(w),
               cpu_ms=1e3 * statistics.median(c))
          for (length, backward, impl, block), (_, _, w, c) in cases.items()]

  def best(length, backward, prefix):
    return min(r["cpu_ms"] for r in rows if r["length"] == length and r["backward"] == backward
               and r["variant"].startswith(prefix))

  dense_wins = [n for n in lengths if best(n, True, "dense") <= best(n, True, "blockwise")]
  crossover = max(dense_wins) if dense_wins else 0
  threshold = attention_schedule.DENSE_UP_TO.get(attention_schedule.platform())
  meta = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), cores=os.cpu_count(),
              jax=jax.__version__, backend=jax.default_backend(), load_before=load_before,
              load_after=os.getloadavg(), args=vars(args))
  lines = ["# Dense vs blockwise attention: the crossover behind `auto`", "",
           f"Causal attention [B, L, 4, 32] float32, B * L = {args.tokens} tokens; "
           f"{args.rounds} alternating rounds after compilation. {meta['date']}, "
           f"{meta['cores']} cores, jax {meta['jax']} ({meta['backend']}); load average before "
           f"{load_before[0]:.2f}, after {meta['load_after'][0]:.2f}.", "",
           "| L | pass | variant | median ms | CPU ms |", "|---:|---|---|---:|---:|"]
  for r in rows:
    lines.append(f"| {r['length']} | {'fwd+bwd' if r['backward'] else 'fwd'} | {r['variant']} | "
                 f"{r['wall_ms']:.1f} | {r['cpu_ms']:.1f} |")
  lines += ["", f"Longest length at which dense is faster (forward + backward, CPU time): "
            f"**{crossover}**; `auto` runs dense up to **{threshold}** on this platform "
            f"({'agrees' if threshold == crossover else 'DISAGREES: revisit DENSE_UP_TO'}).", "",
            "Command: `JAX_PLATFORMS=cpu python -m benchmarks.attention_crossover`", ""]
  text = "\n".join(lines)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "attention_crossover.md").write_text(text)
  (out / "attention_crossover.json").write_text(json.dumps(
      dict(meta=meta, rows=rows, crossover=crossover, threshold=threshold), indent=1))
  print(text)


if __name__ == "__main__":
  main()
