"""Causal attention alone: pejax dense / blockwise against PyTorch's scaled_dot_product_attention.

Inputs ``q, k, v`` of shape ``[B, L, H, D]`` (default B=1, H=4, D=32, the heads of the benchmark
decoder), float32, causal, no bias. Timed: forward and, with ``--backward``, forward + backward
(gradient of ``sum(out * g)`` with respect to q, k, v).

Methodology: one persistent worker process per framework (PyTorch / JAX), both pinned to the
same cores with the same thread count (``torch.set_num_threads``; XLA's default pool = one thread
per visible core). The parent alternates the requests (jax dense, jax blockwise, torch, jax
dense, ...) so that load drifts hit all alike; each request times ``--inner`` calls after
excluded warm-up calls. Reported: median wall time with min-max and the median process-CPU
time per call, ratios to torch. Memory: the XLA compiler's own accounting of the temporary
buffers of each jitted function (``compiled.memory_analysis()``, deterministic, up to 32K tokens
without running it) and, for PyTorch, the growth of peak RSS.

Usage::

  python -m benchmarks.attention_vs_torch [--lengths 1024,2048,4096 --rounds 5]

Writes ``benchmarks/results/attention_vs_torch.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = pathlib.Path(__file__).parent / "results"
JAX_VARIANTS = ("pejax dense", "pejax blockwise 512", "pejax blockwise 256")
TORCH_VARIANTS = ("torch sdpa",)


def _jax_worker(args):
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  from pejax.nn.attention import attention  # pylint: disable=g-import-not-at-top

  fns, inputs = {}, {}

  def get(variant: str, length: int):
    key = (variant, length)
    if key not in fns:
      impl = "dense" if "dense" in variant else "blockwise"
      block = int(variant.split()[-1]) if impl == "blockwise" else 512

      def fwd(q, k, v):
        pos = jnp.arange(q.shape[1], dtype=jnp.int32)[None]
        return attention(q, k, v, q_positions=pos, k_positions=pos, implementation=impl,
                         block_size=block)

      if args.backward:
        def f(q, k, v, g):
          out, vjp = jax.vjp(fwd, q, k, v)
          return vjp(g)
      else:
        f = lambda q, k, v, g: fwd(q, k, v)
      fns[key] = jax.jit(f)
    if length not in inputs:
      shape = (args.batch, length, args.heads, args.head_dim)
      keys = jax.random.split(jax.random.key(0), 4)
      inputs[length] = [jax.random.normal(kk, shape, jnp.float32) for kk in keys]
    return fns[key], inputs[length]

  def run(variant, length, inner):
    fn, xs = get(variant, length)
    jax.block_until_ready(fn(*xs))
    times, cpus = [], []
    for _ in range(inner):
      u0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
      jax.block_until_ready(fn(*xs))
      t1, u1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
      times.append(t1 - t0)
      cpus.append(u1.ru_utime - u0.ru_utime + u1.ru_stime - u0.ru_stime)
    return times, cpus

  def memory(variant, length):
    """XLA's temp-buffer bytes for this function (compile only, nothing runs)."""
    fn, _ = get(variant, 8)
    shape = jax.ShapeDtypeStruct((args.batch, length, args.heads, args.head_dim), jnp.float32)
    analysis = fn.lower(shape, shape, shape, shape).compile().memory_analysis()
    return None if analysis is None else int(analysis.temp_size_in_bytes)

  return run, memory


def _torch_worker(args):
  import torch  # pylint: disable=g-import-not-at-top
  import torch.nn.functional as F  # pylint: disable=g-import-not-at-top

  torch.set_num_threads(args.threads)
  inputs = {}

  def run(variant, length, inner):
    del variant
    if length not in inputs:
      g = torch.Generator().manual_seed(0)
      shape = (args.batch, args.heads, length, args.head_dim)  # SDPA takes [B, H, L, D].
      inputs[length] = [torch.randn(shape, generator=g, requires_grad=i < 3) for i in range(4)]
    q, k, v, grad = inputs[length]

    def call():
      if args.backward:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(out, (q, k, v), grad)
      else:
        with torch.no_grad():
          F.scaled_dot_product_attention(q, k, v, is_causal=True)

    call()
    times, cpus = [], []
    for _ in range(inner):
      u0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
      call()
      t1, u1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
      times.append(t1 - t0)
      cpus.append(u1.ru_utime - u0.ru_utime + u1.ru_stime - u0.ru_stime)
    return times, cpus

  return run, None


def worker_main(args) -> None:
  reply = os.fdopen(os.dup(1), "w", buffering=1)
  os.dup2(2, 1)
  run, memory = (_jax_worker if args.worker == "jax" else _torch_worker)(args)
  reply.write(json.dumps({"ready": True}) + "\n")
  for line in sys.stdin:
    request = json.loads(line)
    if request["op"] == "quit":
      break
    if request["op"] == "memory":
      reply.write(json.dumps({"bytes": memory(request["variant"], request["length"])}) + "\n")
      continue
    times, cpus = run(request["variant"], request["length"], request["inner"])
    reply.write(json.dumps({"times": times, "cpus": cpus,
                            "maxrss_mib": resource.getrusage(
                                resource.RUSAGE_SELF).ru_maxrss / 1024}) + "\n")


def _spawn(kind: str, args) -> subprocess.Popen:
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT),
         "OMP_NUM_THREADS": str(args.threads)}
  command = [sys.executable, "-m", "benchmarks.attention_vs_torch", "--worker", kind,
             "--batch", str(args.batch), "--heads", str(args.heads), "--head_dim",
             str(args.head_dim), "--threads", str(args.threads)]
  if args.backward:
    command.append("--backward")
  if args.cores and shutil.which("taskset"):
    command = ["taskset", "-c", args.cores] + command
  return subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          bufsize=1)


def _ask(proc, request: dict | None = None) -> dict:
  if request is not None:
    proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.flush()
  answer = proc.stdout.readline()
  if not answer:
    raise RuntimeError(f"worker {proc.args} died")
  return json.loads(answer)


def run(args) -> dict:
  lengths = [int(x) for x in args.lengths.split(",")]
  memory_lengths = [int(x) for x in args.memory_lengths.split(",")]
  load_before = os.getloadavg()
  procs = {"jax": _spawn("jax", args), "torch": _spawn("torch", args)}
  for proc in procs.values():
    _ask(proc)
  variants = [(v, "jax") for v in JAX_VARIANTS] + [(v, "torch") for v in TORCH_VARIANTS]
  samples = {(v, n): dict(times=[], cpus=[]) for v, _ in variants for n in lengths}
  for r in range(args.rounds):
    for length in lengths:
      for variant, kind in variants:
        inner = args.inner if length <= 4096 else 1
        answer = _ask(procs[kind], dict(op="run", variant=variant, length=length, inner=inner))
        samples[(variant, length)]["times"] += answer["times"]
        samples[(variant, length)]["cpus"] += answer["cpus"]
    print(f"round {r + 1}/{args.rounds} done", flush=True)
  memory = {}
  for variant in JAX_VARIANTS:
    for length in memory_lengths:
      memory[(variant, length)] = _ask(procs["jax"], dict(op="memory", variant=variant,
                                                           length=length))["bytes"]
  for proc in procs.values():
    proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
    proc.stdin.close()
    proc.wait(timeout=60)
  load_after = os.getloadavg()

  rows = []
  for length in lengths:
    torch_wall = statistics.median(samples[("torch sdpa", length)]["times"])
    torch_cpu = statistics.median(samples[("torch sdpa", length)]["cpus"])
    for variant, _ in variants:
      s = samples[(variant, length)]
      wall, cpu = statistics.median(s["times"]), statistics.median(s["cpus"])
      rows.append(dict(variant=variant, length=length, median_ms=1e3 * wall,
                       min_ms=1e3 * min(s["times"]), max_ms=1e3 * max(s["times"]),
                       cpu_ms=1e3 * cpu, calls=len(s["times"]),
                       wall_ratio_to_torch=wall / torch_wall,
                       cpu_ratio_to_torch=cpu / torch_cpu))
  memory_rows = [dict(variant=v, length=n, temp_mib=None if b is None else b / 2**20)
                 for (v, n), b in memory.items()]
  setup = dict(batch=args.batch, heads=args.heads, head_dim=args.head_dim, dtype="float32",
               causal=True, backward=args.backward, threads=args.threads, cores=args.cores,
               rounds=args.rounds, inner=args.inner, cpu_count=os.cpu_count(),
               machine=platform.machine(), load_before=load_before, load_after=load_after,
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
  result = dict(setup=setup, rows=rows, memory=memory_rows)
  text = to_markdown(result)
  print(text)
  sys.path.insert(0, str(ROOT))  # Also when run as a script.
  from benchmarks import result_files  # pylint: disable=g-import-not-at-top
  result_files.write(RESULTS, args.name, text, result)
  return result


def to_markdown(result: dict) -> str:
  s = result["setup"]
  what = "forward + backward" if s["backward"] else "forward"
  lines = [
      f"# Causal attention {what}: pejax vs torch scaled_dot_product_attention",
      "",
      f"q, k, v [{s['batch']}, L, {s['heads']}, {s['head_dim']}] float32, causal. Separate "
      f"persistent processes per framework, pinned to cores {s['cores']}, {s['threads']} threads "
      f"each; {s['rounds']} alternating rounds x {s['inner']} calls (1 past 4K) after warm-up. "
      f"Load average before {s['load_before'][0]:.2f}, after {s['load_after'][0]:.2f} "
      f"({s['cpu_count']} cores). {s['date']}.",
      "",
      "| L | variant | median ms | min-max ms | x torch (wall) | CPU ms | x torch (CPU) |",
      "|---:|---|---:|---:|---:|---:|---:|",
  ]
  for r in result["rows"]:
    lines.append(f"| {r['length']} | {r['variant']} | {r['median_ms']:.1f} | "
                 f"{r['min_ms']:.1f}-{r['max_ms']:.1f} | {r['wall_ratio_to_torch']:.2f} | "
                 f"{r['cpu_ms']:.1f} | {r['cpu_ratio_to_torch']:.2f} |")
  if result["memory"]:
    lengths = sorted({m["length"] for m in result["memory"]})
    variants = sorted({m["variant"] for m in result["memory"]}, key=JAX_VARIANTS.index)
    table = {(m["variant"], m["length"]): m["temp_mib"] for m in result["memory"]}
    lines += ["", f"XLA temporary buffers of the jitted {what} (MiB, from "
              "`compiled.memory_analysis()`; inputs and outputs excluded):", "",
              "| variant | " + " | ".join(f"{n}" for n in lengths) + " |",
              "|---|" + "---:|" * len(lengths)]
    for v in variants:
      cells = ["n/a" if table[(v, n)] is None else f"{table[(v, n)]:.1f}" for n in lengths]
      lines.append(f"| {v} | " + " | ".join(cells) + " |")
  lines.append("")
  return "\n".join(lines)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--lengths", default="1024,2048,4096")
  parser.add_argument("--memory_lengths", default="1024,4096,8192,16384,32768")
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--inner", type=int, default=3)
  parser.add_argument("--batch", type=int, default=1)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--head_dim", type=int, default=32)
  parser.add_argument("--backward", action="store_true")
  parser.add_argument("--threads", type=int, default=os.cpu_count())
  parser.add_argument("--cores", default=f"0-{os.cpu_count() - 1}")
  parser.add_argument("--name", default=None, help="results file stem")
  parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.name is None:
    args.name = "attention_vs_torch" + ("_backward" if args.backward else "")
  return args


def main(argv=None) -> None:
  args = parse_args(argv)
  if args.worker:
    worker_main(args)
  else:
    run(args)


if __name__ == "__main__":
  main()
