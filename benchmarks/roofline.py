"""The training step's achieved FLOP/s against this machine's measured peak matmul FLOP/s.

Peak: the best median FLOP/s of a jitted float32 ``[n, n] @ [n, n]`` product over a few sizes
(XLA:CPU's own GEMM, all cores), i.e. what this machine reaches on the one operation a training
step is made of. Achieved: the model FLOPs of one training step of the ``train_throughput``
model (4 layers, d=128, 4 heads, L=256, B=16, RoPE, SwiGLU, tied embeddings, float32) divided
by its median step time. Model FLOPs follow the PaLM convention (Chowdhery et al. 2022, arXiv
2204.02311, appendix B): ``6 N T`` for the parameter matmuls (N parameters, T tokens; forward 2,
backward 4 FLOPs per parameter and token) plus ``6 * 2 * layers * L * d * T`` for the attention
products ``q k^T`` and ``p v`` over the full square (the causal half actually computed is
reported too). Optimizer, norms, softmax and elementwise work are not counted: they are the
distance between the two numbers that no matmul can close.

Usage::

  JAX_PLATFORMS=cpu python -m benchmarks.roofline [--rounds 10 --steps 3]

Writes benchmarks/results/roofline.{md,json} and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp
import ml_collections
from flax import nnx

from benchmarks.train_throughput import OPTIM, TOTAL_STEPS, make_batches
from pejax.nn import Decoder, DecoderConfig
from pejax.train import bind_train_step, create_optimizer, make_train_step, model_inputs


def peak_matmul_flops(sizes=(512, 1024, 2048), repeats: int = 10) -> dict:
  """Best median FLOP/s of a jitted float32 square matmul over ``sizes``."""
  best = {}
  for n in sizes:
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    f = jax.jit(jnp.dot)
    f(a, b).block_until_ready()
    times = []
    for _ in range(repeats):
      start = time.perf_counter()
      f(a, b).block_until_ready()
      times.append(time.perf_counter() - start)
    best[n] = 2 * n ** 3 / statistics.median(times)
  return best


def model_flops(config: DecoderConfig, params: int, batch: int, length: int) -> tuple[float,
                                                                                       float]:
  """(PaLM model FLOPs of one training step, the same with causal attention halved)."""
  tokens = batch * length
  attention = 6 * 2 * config.num_layers * length * config.d_model * tokens
  return 6 * params * tokens + attention, 6 * params * tokens + attention / 2


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=10)
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--length", type=int, default=256)
  parser.add_argument("--layers", type=int, default=4)
  parser.add_argument("--d_model", type=int, default=128)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"))
  args = parser.parse_args()
  load_before = os.getloadavg()

  config = DecoderConfig(vocab_size=256, num_layers=args.layers, d_model=args.d_model,
                         num_heads=args.heads, pe="rope")
  model = Decoder(config, rngs=nnx.Rngs(0))
  params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
  optimizer = create_optimizer(model, ml_collections.ConfigDict(OPTIM), total_steps=TOTAL_STEPS)
  step = bind_train_step(make_train_step(), model, optimizer)  # As the training loop.
  batches = [{k: jax.device_put(v) for k, v in model_inputs(b).items()}
             for b in make_batches(4, args.batch, args.length, 256)]
  for i in range(3):
    jax.block_until_ready(step(batches[i % 4]))
  peak = peak_matmul_flops()
  step_times = []
  for r in range(args.rounds):
    start = time.perf_counter()
    for i in range(args.steps):
      out = step(batches[(r + i) % 4])
    jax.block_until_ready(out)
    step_times.append((time.perf_counter() - start) / args.steps)
  step_s = statistics.median(step_times)
  full, causal = model_flops(config, params, args.batch, args.length)
  peak_flops = max(peak.values())
  rows = dict(params=params, step_ms=1e3 * step_s, model_gflop=full / 1e9,
              model_gflop_causal=causal / 1e9, achieved_gflops=full / step_s / 1e9,
              achieved_gflops_causal=causal / step_s / 1e9,
              peak_gflops=peak_flops / 1e9,
              peak_by_size={str(n): v / 1e9 for n, v in peak.items()},
              fraction=full / step_s / peak_flops, fraction_causal=causal / step_s / peak_flops)
  meta = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), cores=os.cpu_count(),
              machine=platform.machine(), jax=jax.__version__, backend=jax.default_backend(),
              load_before=load_before, load_after=os.getloadavg(), args=vars(args))
  lines = [
      "# Roofline: training-step FLOP/s vs peak matmul FLOP/s", "",
      f"{meta['date']}, {meta['cores']} cores ({meta['machine']}), jax {meta['jax']} "
      f"({meta['backend']}); load average before {load_before[0]:.2f}, after "
      f"{meta['load_after'][0]:.2f}. Model: {args.layers} layers, d={args.d_model}, "
      f"{args.heads} heads, L={args.length}, B={args.batch}, {params:,} parameters; "
      f"{args.rounds} rounds x {args.steps} steps.", "",
      "| quantity | value |", "|---|---:|",
      f"| peak matmul (float32 GEMM, best of {', '.join(map(str, peak))}) | "
      f"{rows['peak_gflops']:.1f} GFLOP/s |",
      f"| training step (median) | {rows['step_ms']:.1f} ms |",
      f"| model FLOPs per step (PaLM: 6NT + full-square attention) | {rows['model_gflop']:.2f} "
      "GFLOP |",
      f"| achieved | {rows['achieved_gflops']:.1f} GFLOP/s = **{100 * rows['fraction']:.0f}%** "
      "of peak |",
      f"| achieved, causal half of attention only | {rows['achieved_gflops_causal']:.1f} GFLOP/s "
      f"= {100 * rows['fraction_causal']:.0f}% of peak |", "",
      "Command: `JAX_PLATFORMS=cpu python -m benchmarks.roofline`", ""]
  text = "\n".join(lines)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "roofline.md").write_text(text)
  (out / "roofline.json").write_text(json.dumps(dict(meta=meta, **rows), indent=1))
  print(text)


if __name__ == "__main__":
  main()
