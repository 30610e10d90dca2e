"""Dense vs blockwise attention: forward time and peak memory of the decoder by sequence length.

Model: the 2-layer d=128, 4-head decoder (ALiBi by default, so the per-tile bias path is
exercised; ``--pe`` changes it), batch 1, float32, blockwise tile 512. Each case (implementation,
length) runs in its own subprocess, so that its peak resident memory
(``getrusage(RUSAGE_SELF).ru_maxrss``) is not contaminated by other cases; a ``baseline`` case
(128 tokens) gives the memory of the runtime, the model and the compiled code alone. Within a
subprocess the first call (compile + run) is excluded and the next ``repeats`` calls are timed.
Cases alternate dense, blockwise, dense, blockwise... over ``--rounds`` rounds; medians and
min-max are over all timed calls. Finally one 32,768-token forward pass with blockwise attention
(wall time of a timed call after the compiling one, and peak RSS).

Usage::

  JAX_PLATFORMS=cpu python benchmarks/attention_scaling.py [--rounds 2 --long 32768]

Writes benchmarks/results/attention_scaling.{md,json} and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

LENGTHS = (1024, 4096, 8192)


def run_case(impl: str, length: int, repeats: int, pe: str) -> dict:
  """Runs one case in this process and returns its timings and peak RSS."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  from pejax.nn import Decoder, DecoderConfig  # pylint: disable=g-import-not-at-top
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top

  # The PE's defaults; a bounded (learned) table covers the length.
  pe_config = registry.registry_entry(pe).make_config(context={"train_len": max(length, 1)})
  config = DecoderConfig(pe=pe_config, num_layers=2, d_model=128, num_heads=4, block_size=512)
  model = Decoder(config, rngs=nnx.Rngs(0))
  forward = nnx.jit(lambda model, tokens: model(tokens, attention=impl))
  tokens = jax.random.randint(jax.random.key(0), (1, length), 0, 256, dtype=jnp.int32)
  start = time.perf_counter()
  logits = jax.block_until_ready(forward(model, tokens))
  first_s = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    logits = jax.block_until_ready(forward(model, tokens))
    times.append(time.perf_counter() - start)
  return dict(impl=impl, length=length, first_call_s=first_s, times_s=times,
              finite=bool(jnp.all(jnp.isfinite(logits))),
              peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def spawn(impl: str, length: int, repeats: int, pe: str) -> dict:
  """Runs one case in a fresh subprocess (separate peak-memory accounting)."""
  command = [sys.executable, __file__, "--case", f"{impl},{length},{repeats}", "--pe", pe]
  result = subprocess.run(command, check=True, capture_output=True, text=True,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
  case = json.loads(result.stdout.strip().splitlines()[-1])
  print(f"  {impl:9s} L={length:6d}: median "
        f"{1e3 * statistics.median(case['times_s']) if case['times_s'] else float('nan'):9.1f} "
        f"ms, peak RSS {case['peak_rss_mib']:7.0f} MiB", flush=True)
  return case


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--case", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--pe", default="alibi")
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=3, help="timed calls per subprocess")
  parser.add_argument("--long", type=int, default=32768, help="0 skips the long run")
  parser.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"))
  args = parser.parse_args()
  if args.case:
    impl, length, repeats = args.case.split(",")
    print(json.dumps(run_case(impl, int(length), int(repeats), args.pe)))
    return

  load_before = os.getloadavg()
  start_all = time.perf_counter()
  baseline = spawn("dense", 128, 1, args.pe)
  cases = {}
  for _ in range(args.rounds):
    for length in LENGTHS:
      for impl in ("dense", "blockwise"):
        repeats = args.repeats if length <= 4096 else max(1, args.repeats - 1)
        case = spawn(impl, length, repeats, args.pe)
        entry = cases.setdefault((impl, length), dict(times_s=[], peak_rss_mib=[], finite=[]))
        entry["times_s"] += case["times_s"]
        entry["peak_rss_mib"].append(case["peak_rss_mib"])
        entry["finite"].append(case["finite"])
  long_case = spawn("blockwise", args.long, 1, args.pe) if args.long else None
  load_after = os.getloadavg()

  rows = []
  for (impl, length), entry in sorted(cases.items(), key=lambda kv: (kv[0][1], kv[0][0] !=
                                                                    "dense")):
    times = entry["times_s"]
    peak = max(entry["peak_rss_mib"])
    rows.append(dict(impl=impl, length=length, median_ms=1e3 * statistics.median(times),
                     min_ms=1e3 * min(times), max_ms=1e3 * max(times), calls=len(times),
                     peak_rss_mib=peak, above_baseline_mib=peak - baseline["peak_rss_mib"],
                     finite=all(entry["finite"])))
  setup = dict(pe=args.pe, layers=2, d_model=128, heads=4, batch=1, block_size=512,
               dtype="float32", rounds=args.rounds, repeats=args.repeats,
               baseline_rss_mib=baseline["peak_rss_mib"], cpu_count=os.cpu_count(),
               machine=platform.machine(), load_before=load_before, load_after=load_after,
               total_runtime_s=time.perf_counter() - start_all,
               date=time.strftime("%Y-%m-%d %H:%M"))
  lines = [
      "# Dense vs blockwise attention: forward time and peak memory",
      "",
      f"2-layer decoder, d=128, 4 heads, pe={args.pe}, batch 1, float32, blockwise tile 512, CPU "
      f"({os.cpu_count()} cores). Each case in its own subprocess; peak RSS = ru_maxrss of that "
      f"subprocess (baseline at 128 tokens: {baseline['peak_rss_mib']:.0f} MiB). First call "
      f"(compile) excluded; {args.rounds} alternating rounds. Load average before "
      f"{load_before[0]:.2f}, after {load_after[0]:.2f}. {setup['date']}.",
      "",
      "| tokens | attention | median forward (ms) | min-max (ms) | calls | peak RSS (MiB) | "
      "above baseline (MiB) |",
      "|---:|---|---:|---:|---:|---:|---:|",
  ]
  for r in rows:
    lines.append(f"| {r['length']} | {r['impl']} | {r['median_ms']:.1f} | "
                 f"{r['min_ms']:.1f}-{r['max_ms']:.1f} | {r['calls']} | {r['peak_rss_mib']:.0f} | "
                 f"{r['above_baseline_mib']:.0f} |")
  if long_case:
    lines += [
        "",
        f"**{args.long} tokens, blockwise**: forward {long_case['times_s'][0]:.1f} s (first call "
        f"with compilation {long_case['first_call_s']:.1f} s), peak RSS "
        f"{long_case['peak_rss_mib']:.0f} MiB "
        f"({long_case['peak_rss_mib'] - baseline['peak_rss_mib']:.0f} MiB above baseline), "
        f"logits finite: {long_case['finite']}.",
    ]
  lines += ["", "Command: `JAX_PLATFORMS=cpu python benchmarks/attention_scaling.py "
            f"--rounds {args.rounds} --long {args.long}`", ""]
  text = "\n".join(lines)
  print(text)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "attention_scaling.md").write_text(text)
  (out / "attention_scaling.json").write_text(json.dumps(
      dict(setup=setup, rows=rows, baseline=baseline, long=long_case), indent=2))


if __name__ == "__main__":
  main()
