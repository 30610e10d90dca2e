"""PaTH attention, dense vs blockwise: training-step time at 1K tokens, peak memory by length.

Model: the decoder with ``pe="path"`` (PaTH's reference-layer defaults), ``--layers`` layers of
width ``--d_model`` with ``--heads`` heads, batch 1, float32, byte vocabulary. A training step is
``jax.value_and_grad`` of the next-token cross-entropy over the model's parameters, jitted.

* **Step time** (``--time_length``, 1024 by default): dense (the whole ``[L, L]`` PaTH logits,
  :func:`pejax.path_logits` in chunks of 64) and blockwise (:func:`pejax.path_attention`, blocks of
  ``--block_size``) in one process, after one compiling call each, alternating dense, blockwise,
  dense, ... over ``--rounds`` rounds; medians and min-max.
* **Peak memory** (``--memory_lengths``): one training step per (schedule, length) in its own
  subprocess, peak resident memory ``ru_maxrss``; a 256-token case gives the memory of the
  runtime, the model and the compiled code alone ("above baseline" subtracts it). Dense runs
  only up to ``--dense_max`` tokens (its logits and their gradients are O(L^2)).

Usage::

  python -m benchmarks.path_attention [--rounds 5 --memory_lengths 4096,8192,16384]

Writes ``benchmarks/results/path_attention.{md,json}`` and prints the table.

References:
  Yang et al. 2025, "PaTH Attention", arXiv 2505.16381.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import result_files  # pylint: disable=wrong-import-position
from pejax import provenance as provenance_lib  # pylint: disable=wrong-import-position

RESULTS = pathlib.Path(__file__).parent / "results"


def make_step(args, length: int, implementation: str):
  """The jitted training step of the PaTH decoder and its inputs."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top

  from pejax.nn import Decoder, DecoderConfig  # pylint: disable=g-import-not-at-top

  config = DecoderConfig(pe="path", num_layers=args.layers, d_model=args.d_model,
                         num_heads=args.heads, block_size=args.block_size)
  model = Decoder(config, rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(model, nnx.Param)
  tokens = jax.random.randint(jax.random.key(0), (1, length + 1), 0, 256, dtype=jnp.int32)

  def loss(params):
    logits = nnx.merge(graphdef, params)(tokens[:, :-1], attention=implementation)
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

  step = jax.jit(jax.value_and_grad(loss))
  return lambda: jax.block_until_ready(step(params))


def memory_case(args) -> dict:
  """In this process: one compiled training step at ``args.child_length``; peak RSS."""
  implementation, length = args.child_impl, args.child_length
  run = make_step(args, length, implementation)
  started = time.perf_counter()
  loss, _ = run()
  return dict(implementation=implementation, length=length, loss=float(loss),
              seconds_with_compile=time.perf_counter() - started,
              peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def spawn(args, implementation: str, length: int, log) -> dict:
  command = [sys.executable, "-m", "benchmarks.path_attention", "--child_impl", implementation,
             "--child_length", str(length), "--layers", str(args.layers), "--d_model",
             str(args.d_model), "--heads", str(args.heads), "--block_size", str(args.block_size)]
  proc = subprocess.run(command, capture_output=True, text=True, check=False,
                        cwd=str(pathlib.Path(__file__).resolve().parents[1]))
  if proc.returncode:
    raise RuntimeError(f"{implementation} at {length} tokens failed:\n{proc.stderr[-3000:]}")
  case = json.loads(proc.stdout.strip().splitlines()[-1])
  log(f"  {implementation:9s} {length:6d} tokens: peak RSS {case['peak_rss_mib']:7.0f} MiB, "
      f"{case['seconds_with_compile']:.1f} s with compilation")
  return case


def run(args, log=print) -> dict:
  started = time.time()
  log(f"PaTH decoder: {args.layers} layers, d={args.d_model}, {args.heads} heads, block "
      f"{args.block_size}")
  steps = {impl: make_step(args, args.time_length, impl) for impl in ("dense", "blockwise")}
  losses = {impl: float(step()[0]) for impl, step in steps.items()}  # Compiling calls.
  times = {impl: [] for impl in steps}
  for _ in range(args.rounds):
    for impl, step in steps.items():
      t0 = time.perf_counter()
      step()
      times[impl].append(time.perf_counter() - t0)
  timing = {impl: dict(median_s=statistics.median(ts), min_s=min(ts), max_s=max(ts), times_s=ts,
                       loss=losses[impl]) for impl, ts in times.items()}
  ratio = timing["blockwise"]["median_s"] / timing["dense"]["median_s"]
  log(f"  step at {args.time_length} tokens: dense {timing['dense']['median_s']:.3f} s, "
      f"blockwise {timing['blockwise']['median_s']:.3f} s (ratio {ratio:.2f})")
  baseline = spawn(args, "blockwise", 256, log)
  lengths = [int(x) for x in args.memory_lengths.split(",") if x]
  memory = []
  for length in lengths:
    for impl in ("dense", "blockwise"):
      if impl == "dense" and length > args.dense_max:
        continue
      case = spawn(args, impl, length, log)
      case["above_baseline_mib"] = case["peak_rss_mib"] - baseline["peak_rss_mib"]
      memory.append(case)
  result = dict(setup=dict(layers=args.layers, d_model=args.d_model, heads=args.heads,
                           block_size=args.block_size, rounds=args.rounds,
                           time_length=args.time_length),
                timing=timing, blockwise_over_dense=ratio, baseline=baseline, memory=memory,
                provenance=provenance_lib.provenance(command=args.command, started=started))
  p = result["provenance"]
  lines = [
      "# PaTH attention: dense vs blockwise",
      "",
      f"Decoder with `pe=\"path\"` (reference-layer defaults), {args.layers} layers, "
      f"d={args.d_model}, {args.heads} heads, batch 1, float32; a training step is "
      f"`value_and_grad` of the cross-entropy, jitted. Blockwise blocks of {args.block_size}; "
      f"dense logits in chunks of 64. Machine: {p.get('machine')}; commit {p.get('commit')} "
      f"(dirty: {p.get('dirty')}); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
      f"Command: `{args.command}`.",
      "",
      f"## Step time at {args.time_length} tokens ({args.rounds} rounds, alternating, after a "
      "compiling call)",
      "",
      "| schedule | median step (s) | min-max (s) | loss |",
      "|:--|---:|---:|---:|",
  ]
  for impl in ("dense", "blockwise"):
    t = timing[impl]
    lines.append(f"| {impl} | {t['median_s']:.3f} | {t['min_s']:.3f}-{t['max_s']:.3f} | "
                 f"{t['loss']:.5f} |")
  lines += ["", f"Blockwise / dense step time: **{ratio:.2f}x**.", "",
            "## Peak memory of one training step (each in its own process)", "",
            f"Baseline (256 tokens, blockwise): {baseline['peak_rss_mib']:.0f} MiB.", "",
            "| tokens | schedule | peak RSS (MiB) | above baseline (MiB) | s (with compile) |",
            "|---:|:--|---:|---:|---:|"]
  for case in memory:
    lines.append(f"| {case['length']} | {case['implementation']} | {case['peak_rss_mib']:.0f} | "
                 f"{case['above_baseline_mib']:.0f} | {case['seconds_with_compile']:.1f} |")
  lines.append("")
  result_files.write(args.out, args.name, "\n".join(lines), result)
  return result


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--layers", type=int, default=2)
  parser.add_argument("--d_model", type=int, default=64)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--block_size", type=int, default=128)
  parser.add_argument("--time_length", type=int, default=1024)
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--memory_lengths", default="4096,8192,16384")
  parser.add_argument("--dense_max", type=int, default=4096,
                      help="longest length the dense schedule runs at in the memory table")
  parser.add_argument("--child_impl", default="", help=argparse.SUPPRESS)
  parser.add_argument("--child_length", type=int, default=0, help=argparse.SUPPRESS)
  parser.add_argument("--out", default=str(RESULTS))
  parser.add_argument("--name", default="path_attention")
  args = parser.parse_args(argv)
  for name in ("layers", "d_model", "heads", "block_size", "time_length", "rounds"):
    if getattr(args, name) < 1:
      parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
  if args.child_impl not in ("", "dense", "blockwise"):
    parser.error(f"--child_impl must be dense or blockwise, got {args.child_impl!r}")
  args.command = " ".join(["python -m benchmarks.path_attention",
                           *(argv if argv is not None else sys.argv[1:])])
  return args


def main(argv=None):
  args = parse_args(argv)
  if args.child_impl:
    print(json.dumps(memory_case(args)))
    return None
  return run(args)


if __name__ == "__main__":
  main()
