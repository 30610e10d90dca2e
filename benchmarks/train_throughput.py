"""Training throughput of the pejax decoder against the same model in PyTorch, side by side.

Model (both frameworks): the pejax ``Decoder`` defaults, 4 layers, d=128, 4 heads, SwiGLU
(hidden 512), RMSNorm, tied embeddings, vocabulary 256, RoPE (``--pe none`` for NoPE); batch 16 x
256 tokens, float32; AdamW with global-norm clipping and the warm-up + cosine schedule of
``pejax.train.create_optimizer`` (PyTorch: ``torch.optim.AdamW`` on the same schedule,
:mod:`benchmarks.torch_gpt`).

Methodology:

* every variant (framework x environment) is a separate, persistent worker process; all workers
  are pinned to the same cores (``taskset -c``), PyTorch with ``torch.set_num_threads(N)`` and
  XLA with its default intra-op pool (one thread per visible core = N);
* the first pejax worker writes its initial parameters; PyTorch workers load them (shapes and
  names asserted, so the parameter counts are equal) and all workers train on the same
  deterministic batches: the losses of the first ``--check`` steps are compared;
* warm-up (compilation, first steps) is excluded; then ``--rounds`` rounds, in each of which the
  workers run ``--steps`` steps one after the other (A B C A B C ...), only one at a time;
* per segment: wall time, process CPU time (``getrusage`` user + system, all threads) and minor
  page faults; reported as medians with min-max, ratios of medians against ``--baseline``, and
  the load average before and after.

Usage::

  python -m benchmarks.train_throughput [--rounds 8 --steps 3] [--variants pejax,torch,...]

Writes ``benchmarks/results/train_throughput.{md,json}``.
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
import tempfile
import time

from pejax.runtime_env import ALLOCATOR_TUNABLES

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = pathlib.Path(__file__).parent / "results"
HUGE = "glibc.malloc.hugetlb=1"
# No mmap for large blocks, no trimming: freed buffers are reused from the heap, never re-faulted.
NOMMAP = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"
# The same in a single arena: XLA's worker threads otherwise allocate from per-thread arenas, whose
# freed tops glibc hands back to the kernel (and faults in again on the next step).
ARENA1 = "glibc.malloc.arena_max=1:" + NOMMAP
# What launch.py and the studies apply (pejax.runtime_env).
LAUNCH = ":".join(f"{k}={v}" for k, v in ALLOCATOR_TUNABLES.items())

# name -> (framework, extra environment, options)
VARIANTS = {
    "pejax": ("pejax", {}, {}),
    "pejax+launch": ("pejax", {"GLIBC_TUNABLES": LAUNCH}, {}),
    "pejax+hugetlb": ("pejax", {"GLIBC_TUNABLES": HUGE}, {}),
    "pejax+hugetlb+nochunks": ("pejax", {"GLIBC_TUNABLES": HUGE}, {"chunk_from": 2**31}),
    "pejax+hugetlb+chunks": ("pejax", {"GLIBC_TUNABLES": HUGE}, {"chunk_from": 128}),
    "pejax+nochunks": ("pejax", {}, {"chunk_from": 2**31}),
    "pejax+chunks": ("pejax", {}, {"chunk_from": 128}),
    "pejax+nommap": ("pejax", {"GLIBC_TUNABLES": NOMMAP}, {}),
    "pejax+arena1": ("pejax", {"GLIBC_TUNABLES": ARENA1}, {}),
    "pejax+arena1+hugetlb": ("pejax", {"GLIBC_TUNABLES": ARENA1 + ":" + HUGE}, {}),
    "pejax+hugetlb+blockwise": ("pejax", {"GLIBC_TUNABLES": HUGE}, {"attention": "blockwise"}),
    "torch": ("torch", {}, {}),
    "torch+hugetlb": ("torch", {"GLIBC_TUNABLES": HUGE}, {}),
    "torch+hugetlb+passive": ("torch", {"GLIBC_TUNABLES": HUGE, "OMP_WAIT_POLICY": "PASSIVE"},
                              {}),
    "torch+passive": ("torch", {"OMP_WAIT_POLICY": "PASSIVE"}, {}),
    "torch.compile+passive": ("torch", {"OMP_WAIT_POLICY": "PASSIVE"}, {"compile": True}),
    "torch.compile+hugetlb": ("torch", {"GLIBC_TUNABLES": HUGE}, {"compile": True}),
}
DEFAULT_VARIANTS = "pejax,pejax+launch,pejax+hugetlb,torch,torch+passive"

OPTIM = dict(learning_rate=3e-3, warmup_steps=2, min_lr_ratio=0.1, weight_decay=0.1, b1=0.9,
             b2=0.98, clip_norm=1.0)
TOTAL_STEPS = 1000


def make_batches(num: int, batch: int, length: int, vocab: int, seed: int = 0) -> list[dict]:
  """Deterministic numpy batches: rows ``(a * t + b) % vocab`` with 10% random tokens."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(seed)
  batches = []
  for _ in range(num):
    a = rng.randint(1, 8, size=(batch, 1))
    b = rng.randint(0, vocab, size=(batch, 1))
    seq = (a * np.arange(length + 1)[None, :] + b) % vocab
    noise = rng.rand(batch, length + 1) < 0.1
    seq = np.where(noise, rng.randint(0, vocab, size=seq.shape), seq).astype(np.int32)
    batches.append({
        "inputs": seq[:, :-1].copy(), "targets": seq[:, 1:].copy(),
        "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (batch, length)).copy(),
        "loss_mask": np.ones((batch, length), np.float32)})
  return batches


# ------------------------------------------------------------------------------------------------
# Workers.


def flat_params(model) -> dict:
  """A pejax model's ``nnx.Param`` arrays keyed ``"blocks/0/attention/query/kernel"``."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  return {"/".join(str(k) for k in path): np.asarray(v[...], np.float32)
          for path, v in nnx.state(model, nnx.Param).flat_state()}


def _pejax_worker(args, options: dict, params_path: str):
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from pejax.nn import Decoder, DecoderConfig  # pylint: disable=g-import-not-at-top
  from pejax.nn.attention import dense as dense_attention  # pylint: disable=g-import-not-at-top
  from pejax.train import bind_train_step  # pylint: disable=g-import-not-at-top
  from pejax.train import create_optimizer, make_train_step  # pylint: disable=g-import-not-at-top
  from pejax.train import model_inputs  # pylint: disable=g-import-not-at-top

  if "chunk_from" in options:  # Causal chunking of dense attention from this length on.
    dense_attention.CHUNK_FROM = options["chunk_from"]
  config = DecoderConfig(vocab_size=args.vocab, num_layers=args.layers, d_model=args.d_model,
                         num_heads=args.heads, pe=args.pe,
                         attention=options.get("attention", "auto"))
  model = Decoder(config, rngs=nnx.Rngs(0))
  params = flat_params(model)
  if not os.path.exists(params_path):
    np.savez(params_path + ".tmp.npz", **params)
    os.replace(params_path + ".tmp.npz", params_path)
  optimizer = create_optimizer(model, ml_collections.ConfigDict(OPTIM), total_steps=TOTAL_STEPS)
  train_step = bind_train_step(make_train_step(), model, optimizer)  # As the training loop.
  # Through the batch protocol as the training loop does (rows sharing positions: one [1, L] row).
  batches = [{k: jax.device_put(v) for k, v in model_inputs(b).items()}
             for b in make_batches(args.num_batches, args.batch, args.length, args.vocab)]

  def step(i: int):
    return train_step(batches[i % len(batches)])["loss"]

  def sync(loss) -> float:
    return float(jax.block_until_ready(loss))

  info = dict(params=int(sum(v.size for v in params.values())), framework="jax " + jax.__version__)
  return step, sync, info


def _torch_worker(args, options: dict, params_path: str):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top

  from benchmarks import torch_gpt  # pylint: disable=g-import-not-at-top

  torch.set_num_threads(args.threads)
  torch.manual_seed(0)
  model = torch_gpt.TorchGPT(vocab_size=args.vocab, num_layers=args.layers, d_model=args.d_model,
                             num_heads=args.heads, mlp_hidden=4 * args.d_model, pe=args.pe,
                             max_length=args.length)
  for _ in range(600):  # Wait for the pejax worker's initial parameters.
    if os.path.exists(params_path):
      break
    time.sleep(0.5)
  with np.load(params_path) as data:
    params = {k: data[k] for k in data.files}
  torch_gpt.load_pejax_params(model, params)
  optimizer, scheduler = torch_gpt.make_optimizer(
      model, total_steps=TOTAL_STEPS, **{k: v for k, v in OPTIM.items() if k != "clip_norm"})
  forward = torch.compile(model) if options.get("compile") else model
  batches = []
  for b in make_batches(args.num_batches, args.batch, args.length, args.vocab):
    batches.append({"inputs": torch.from_numpy(b["inputs"]).long(),
                    "targets": torch.from_numpy(b["targets"]).long(),
                    "loss_mask": torch.from_numpy(b["loss_mask"])})

  def step(i: int):
    return torch_gpt.train_step(forward, optimizer, scheduler, batches[i % len(batches)],
                                clip_norm=OPTIM["clip_norm"])

  info = dict(params=int(sum(p.numel() for p in model.parameters())),
              framework="torch " + torch.__version__,
              torch_threads=torch.get_num_threads())
  return step, lambda loss: float(loss), info


def worker_main(args) -> None:
  """Serves ``run N`` requests on stdin; answers one JSON line per request on the real stdout."""
  reply = os.fdopen(os.dup(1), "w", buffering=1)
  os.dup2(2, 1)  # Library prints go to stderr.
  framework, _, options = VARIANTS[args.worker]
  start = time.perf_counter()
  builder = _pejax_worker if framework == "pejax" else _torch_worker
  step, sync, info = builder(args, options, args.params_path)
  setup_s = time.perf_counter() - start
  counter = 0
  losses = []
  first_step_s = None
  for _ in range(args.check):  # The first steps: compilation + loss check.
    t = time.perf_counter()
    losses.append(sync(step(counter)))
    if first_step_s is None:
      first_step_s = time.perf_counter() - t
    counter += 1
  for _ in range(args.warmup):
    sync(step(counter))
    counter += 1
  reply.write(json.dumps(dict(ready=True, losses=losses, setup_s=setup_s,
                              first_step_s=first_step_s, **info)) + "\n")
  for line in sys.stdin:
    command = line.split()
    if not command or command[0] == "quit":
      break
    steps = int(command[1])
    usage, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    loss = None
    for _ in range(steps):
      loss = step(counter)
      counter += 1
    sync(loss)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    reply.write(json.dumps(dict(
        wall_s=wall / steps, cpu_s=cpu / steps,
        minflt=(after.ru_minflt - usage.ru_minflt) / steps,
        maxrss_mib=after.ru_maxrss / 1024, loadavg=os.getloadavg()[0])) + "\n")


# ------------------------------------------------------------------------------------------------
# Parent.


def _spawn(name: str, args, params_path: str) -> subprocess.Popen:
  _, extra_env, _ = VARIANTS[name]
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": str(args.threads),
         "MKL_NUM_THREADS": str(args.threads), "PYTHONPATH": str(ROOT), **extra_env}
  env.pop("GLIBC_TUNABLES", None) if "GLIBC_TUNABLES" not in extra_env else None
  command = [sys.executable, "-m", "benchmarks.train_throughput", "--worker", name,
             "--params_path", params_path]
  for key in ("batch", "length", "layers", "d_model", "heads", "vocab", "pe", "threads", "check",
              "warmup", "num_batches"):
    command += [f"--{key}", str(getattr(args, key))]
  if args.cores and shutil.which("taskset"):
    command = ["taskset", "-c", args.cores] + command
  return subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          bufsize=1)


def _ask(proc: subprocess.Popen, line: str | None = None) -> dict:
  if line is not None:
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
  answer = proc.stdout.readline()
  if not answer:
    raise RuntimeError(f"worker {proc.args} died (exit code {proc.poll()})")
  return json.loads(answer)


def _median_range(values: list[float]) -> tuple[float, float, float]:
  return statistics.median(values), min(values), max(values)


def run(args) -> dict:
  """Runs the alternating comparison; returns the result dict (also written to results/)."""
  names = args.variants.split(",")
  for name in names:
    if name not in VARIANTS:
      raise ValueError(f"--variants: unknown {name!r}, choose from {list(VARIANTS)}")
  load_before = os.getloadavg()
  tmp = tempfile.mkdtemp(prefix="pejax_bench_")
  params_path = os.path.join(tmp, "init_params.npz")
  procs, ready = {}, {}
  pejax_first = sorted(names, key=lambda n: VARIANTS[n][0] != "pejax")
  for name in pejax_first:  # Start sequentially: setup/compilation do not overlap timings.
    procs[name] = _spawn(name, args, params_path)
    try:
      ready[name] = _ask(procs[name])
    except RuntimeError as e:
      print(f"{name}: failed to start: {e}", flush=True)
      procs.pop(name).kill()
      continue
    print(f"{name}: ready, first step {ready[name]['first_step_s']:.1f} s, "
          f"losses {['%.5f' % x for x in ready[name]['losses']]}", flush=True)
  names = [n for n in names if n in procs]
  segments = {name: [] for name in names}
  for r in range(args.rounds):
    for name in names:
      segments[name].append(_ask(procs[name], f"run {args.steps}"))
    print(f"round {r + 1}/{args.rounds}: " + ", ".join(
        f"{n} {args.batch * args.length / segments[n][-1]['wall_s']:.0f} tok/s" for n in names),
          flush=True)
  for proc in procs.values():
    proc.stdin.write("quit\n")
    proc.stdin.close()
    proc.wait(timeout=60)
  shutil.rmtree(tmp, ignore_errors=True)
  load_after = os.getloadavg()

  tokens = args.batch * args.length
  baseline = args.baseline if args.baseline in names else names[0]
  reference_losses = next((ready[n]["losses"] for n in names if VARIANTS[n][0] == "pejax"), None)
  base_wall = statistics.median(s["wall_s"] for s in segments[baseline])
  base_cpu = statistics.median(s["cpu_s"] for s in segments[baseline])
  rows = []
  for name in names:
    wall = [s["wall_s"] for s in segments[name]]
    cpu = [s["cpu_s"] for s in segments[name]]
    base_round = [s["wall_s"] for s in segments[baseline]]
    w_med, w_min, w_max = _median_range(wall)
    c_med, _, _ = _median_range(cpu)
    loss_diff = None
    if reference_losses:
      loss_diff = max(abs(a - b) for a, b in zip(ready[name]["losses"], reference_losses))
    rows.append(dict(
        variant=name, framework=ready[name]["framework"], params=ready[name]["params"],
        env=VARIANTS[name][1], options=VARIANTS[name][2],
        tokens_per_s=tokens / w_med, tokens_per_s_min=tokens / w_max,
        tokens_per_s_max=tokens / w_min, step_ms=1e3 * w_med,
        cpu_step_ms=1e3 * c_med, tokens_per_cpu_s=tokens / c_med,
        wall_speed_vs_baseline=base_wall / w_med, cpu_speed_vs_baseline=base_cpu / c_med,
        per_round_speed=[b / w for b, w in zip(base_round, wall)],
        minflt_per_step=statistics.median(s["minflt"] for s in segments[name]),
        maxrss_mib=max(s["maxrss_mib"] for s in segments[name]),
        first_step_s=ready[name]["first_step_s"], setup_s=ready[name]["setup_s"],
        losses=ready[name]["losses"], max_loss_diff_vs_pejax=loss_diff))
  params = {r["params"] for r in rows}
  setup = dict(batch=args.batch, length=args.length, layers=args.layers, d_model=args.d_model,
               heads=args.heads, vocab=args.vocab, pe=args.pe, mlp="swiglu", dtype="float32",
               optimizer=OPTIM, threads=args.threads, cores=args.cores, rounds=args.rounds,
               steps_per_segment=args.steps, check_steps=args.check, warmup_steps=args.warmup,
               baseline=baseline, same_param_count=len(params) == 1,
               cpu_count=os.cpu_count(), machine=platform.machine(),
               processor=platform.processor(), load_before=load_before, load_after=load_after,
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
  result = dict(setup=setup, rows=rows)
  text = to_markdown(result)
  print(text)
  RESULTS.mkdir(parents=True, exist_ok=True)
  (RESULTS / f"{args.name}.md").write_text(text)
  (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=1))
  return result


def to_markdown(result: dict) -> str:
  s, rows = result["setup"], result["rows"]
  lines = [
      "# Training throughput: pejax vs PyTorch, same model, side by side",
      "",
      f"{s['layers']} layers, d={s['d_model']}, {s['heads']} heads, SwiGLU, tied embeddings, "
      f"pe={s['pe']}, vocab {s['vocab']}, batch {s['batch']} x {s['length']} tokens, float32, "
      f"AdamW + clipping + warm-up/cosine. {rows[0]['params']:,} parameters in every variant "
      f"(asserted: {s['same_param_count']}). One persistent process per variant, pinned to cores "
      f"{s['cores']} with {s['threads']} threads each; {s['rounds']} alternating rounds x "
      f"{s['steps_per_segment']} steps after {s['check_steps']} loss-check + "
      f"{s['warmup_steps']} warm-up steps. Load average before {s['load_before'][0]:.2f}, after "
      f"{s['load_after'][0]:.2f} ({s['cpu_count']} cores). {s['date']}.",
      "",
      f"| variant | tokens/s (median) | min-max | wall speed vs {s['baseline']} | per-round | "
      f"CPU ms/step | CPU speed vs {s['baseline']} | page faults/step | peak RSS MiB | "
      f"first step s | max loss diff vs pejax |",
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  ]
  for r in rows:
    diff = "" if r["max_loss_diff_vs_pejax"] is None else f"{r['max_loss_diff_vs_pejax']:.1e}"
    lines.append(
        f"| {r['variant']} | {r['tokens_per_s']:.0f} | {r['tokens_per_s_min']:.0f}-"
        f"{r['tokens_per_s_max']:.0f} | {r['wall_speed_vs_baseline']:.2f}x | "
        f"{min(r['per_round_speed']):.2f}-{max(r['per_round_speed']):.2f} | "
        f"{r['cpu_step_ms']:.0f} | {r['cpu_speed_vs_baseline']:.2f}x | "
        f"{r['minflt_per_step']:.0f} | {r['maxrss_mib']:.0f} | {r['first_step_s']:.1f} | "
        f"{diff} |")
  lines += ["", "Losses of the first steps (same initial weights, same batches): "]
  for r in rows:
    lines.append(f"- {r['variant']}: " + ", ".join(f"{x:.5f}" for x in r["losses"]))
  lines.append("")
  return "\n".join(lines)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--variants", default=DEFAULT_VARIANTS)
  parser.add_argument("--baseline", default="torch")
  parser.add_argument("--rounds", type=int, default=8)
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--check", type=int, default=4, help="loss-checked steps (incl. compile)")
  parser.add_argument("--warmup", type=int, default=2)
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--length", type=int, default=256)
  parser.add_argument("--layers", type=int, default=4)
  parser.add_argument("--d_model", type=int, default=128)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--vocab", type=int, default=256)
  parser.add_argument("--pe", default="rope", choices=("rope", "none"))
  parser.add_argument("--threads", type=int, default=os.cpu_count())
  parser.add_argument("--cores", default=f"0-{os.cpu_count() - 1}")
  parser.add_argument("--num_batches", type=int, default=8)
  parser.add_argument("--name", default="train_throughput", help="results file stem")
  parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--params_path", default=None, help=argparse.SUPPRESS)
  return parser.parse_args(argv)


def main(argv=None) -> None:
  args = parse_args(argv)
  if args.worker:
    worker_main(args)
  else:
    run(args)


if __name__ == "__main__":
  main()
