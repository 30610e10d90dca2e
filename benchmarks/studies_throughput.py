"""Models per hour of the algorithmic studies: one model at a time vs N models as one program.

An algorithmic study trains hundreds of tiny decoders (the study's model: 4 layers, d_model 64,
4 heads, batch 32, ~0.2M parameters), one per (task, PE, seed). Trained alone, each step is a
few small matmuls; :class:`pejax.train.ModelStack` trains N of them as one ``jax.vmap``-ed
program (:mod:`experiments.algorithmic.batched_fit`). This benchmark measures both on the
studies' own batches:

* ``ruoss``: Ruoss et al. 2023's reverse_string, training sizes 1..20, one size per batch (rows
  cut to four bucketed lengths; the models of one program draw different sizes, padded to the
  longest);
* ``kazemnejad``: Kazemnejad et al. 2023's reverse, sizes 1..10, every example its own size.

Configurations: ``N = 1`` is the single trainer of ``convergence.train_until`` (the bound
``make_train_step`` on :func:`pejax.train.model_inputs`); ``N > 1`` is ``ModelStack.step`` on N
models with seeds 0..N-1, each drawing its own batches (``default_rng([seed, 1])``), as the
batched trainer does. Both include drawing the batches on the host; neither includes the
held-out checks (every 100 steps in the studies).

Methodology: every (task, N) is a persistent worker process (setup and compilation excluded);
then ``--rounds`` rounds, in each of which every worker in turn runs ``--steps`` steps (only one
at a time: load drifts hit all alike), synchronized at the end. Per configuration: the median
wall and CPU seconds of a segment, and

  models/hour = N * 3600 / (seconds per step * steps per model),

with ``--steps_per_model`` (default 6000, the studies' cap) the steps a model trains; the ratio
batched / one-at-a-time does not depend on it. Memory: each worker's peak RSS
(``resource.getrusage``) and its growth over the worker's RSS before any model was built (the
imported and started runtime every configuration shares); the target is growth(N) <= N x growth(1).

Why a ratio is what it is: each configuration also reports the tokens it computes per step
over those its models drew (a program of N models pads every batch to the longest of the N: on
the Ruoss tasks, where a batch is one size, N = 6 computes ~1.4x the tokens), and its arithmetic
rate (6 x parameters x computed tokens per second) beside a plain matmul of the model's MLP shape
timed in the same worker. A step that already runs near the matmul rate is bound by arithmetic
and memory traffic, which N models multiply by N: batching then cannot beat one model at a time
on that machine, and its gain has to come from a device that one tiny model leaves idle.

Usage (the lead runs the full measurement on a quiet machine)::

  python -m benchmarks.studies_throughput                      # 3 rounds of 200 steps
  python -m benchmarks.studies_throughput --quick              # a smoke test, tiny sizes

Writes ``benchmarks/results/studies_throughput.{md,json}`` (``--out`` to change).
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

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# task label -> (synthetic task, largest training size, one size per batch)
TASKS = {"ruoss": ("reverse_string", 20, True), "kazemnejad": ("reverse", 10, False)}


def _rss_mib() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cpu_s() -> float:
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


def _median_seconds(call, repeats: int) -> float:
  """Median wall seconds of ``call()`` (a jitted call, waited for) after one untimed call."""
  import jax  # pylint: disable=g-import-not-at-top
  jax.block_until_ready(call())
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(call())
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def _matmul_gflops(rows: int, inner: int, cols: int, repeats: int = 50) -> float:
  """GFLOP/s of one jitted ``[rows, inner] @ [inner, cols]`` float32 matmul (the study
  model's MLP projection over a batch; median of ``repeats``): what this core does on the
  model's largest matmul, against which the training steps' rate is read."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  a, b = jnp.ones((rows, inner), jnp.float32), jnp.ones((inner, cols), jnp.float32)
  matmul = jax.jit(jnp.matmul)
  return 2.0 * rows * inner * cols / _median_seconds(lambda: matmul(a, b), repeats) / 1e9


def _fixed_cost_share(model, rows: int, length: int, repeats: int = 20) -> float:
  """The time of a gradient of ``model`` on 1 row over its time on ``rows`` rows (both of
  ``length`` tokens; medians): the share of a step that does not grow with the batch (dispatch,
  per-operation overhead), the most that training N models as one program can save per model."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  grad = nnx.jit(nnx.grad(lambda m, x, p: jnp.mean(m(x, positions=p) ** 2)))

  def seconds(count: int) -> float:
    tokens = jnp.zeros((count, length), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (count, length))
    return _median_seconds(lambda: grad(model, tokens, positions), repeats)

  return seconds(1) / seconds(rows)


def _study_config(quick: bool):
  from experiments import length_generalization  # pylint: disable=g-import-not-at-top
  from experiments.study import study_options  # pylint: disable=g-import-not-at-top
  config = length_generalization.base_config(study_options.StudyOptions())
  config.pe.name = "rope"
  if quick:
    config.model.num_layers, config.model.d_model = 1, 16
    config.data.batch_size = 4
  return config


def worker_main(args) -> None:
  """One configuration: answers ``run STEPS`` with a JSON line, until ``quit``."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from experiments.algorithmic import convergence  # pylint: disable=g-import-not-at-top
  from pejax.train import many  # pylint: disable=g-import-not-at-top
  from pejax.train import optimizer as optimizer_lib  # pylint: disable=g-import-not-at-top
  from pejax.train import train_step as train_step_lib  # pylint: disable=g-import-not-at-top

  jax.block_until_ready(jax.numpy.zeros(1))  # The runtime every configuration shares.
  base_rss = _rss_mib()
  task, top, one_size = TASKS[args.task]
  recipe = convergence.Recipe(max_steps=args.steps_per_model, one_size_per_batch=one_size,
                              check_examples=8)
  configs = []
  for seed in range(args.models):
    config = _study_config(args.quick)
    config.seed = seed
    configs.append(config)
  lo = 1
  makers = [convergence.fit_task(c, recipe, task=task, train_sizes=(lo, top))[0]
            for c in configs]
  rngs = [np.random.default_rng([c.seed, 1]) for c in configs]
  steps_taken = [0]
  tokens = {"computed": 0, "own": 0}  # Rows x row length: as computed (padded) and as drawn.
  optim = convergence.recipe_optim(configs[0], recipe)

  def count(batches) -> None:
    shapes = [b["inputs"].shape for b in batches]
    tokens["computed"] += len(shapes) * max(rows * length for rows, length in shapes)
    tokens["own"] += sum(rows * length for rows, length in shapes)

  count_params = lambda m: sum(x.size for x in jax.tree.leaves(nnx.state(m, nnx.Param)))
  if args.models == 1:
    model = convergence.build_model(configs[0])
    params = count_params(model)
    optimizer = optimizer_lib.create_optimizer(model, optim, total_steps=recipe.max_steps)
    bound = train_step_lib.bind_train_step(train_step_lib.make_train_step(), model, optimizer)

    def step():
      batch = makers[0](rngs[0], steps_taken[0])
      count([batch])
      return bound(train_step_lib.model_inputs(batch))["loss"]
  else:
    models = [convergence.build_model(c) for c in configs]
    params = count_params(models[0])
    stack = many.ModelStack(models, optim, total_steps=recipe.max_steps)
    del models

    def step():
      batches = [make(rng, steps_taken[0]) for make, rng in zip(makers, rngs)]
      count(batches)
      return stack.step(batches)["loss"]

  def segment(steps: int) -> dict:
    wall, cpu = time.perf_counter(), _cpu_s()
    tokens.update(computed=0, own=0)
    loss = None
    for _ in range(steps):
      loss = step()
      steps_taken[0] += 1
    jax.block_until_ready(loss)
    return {"wall_s": time.perf_counter() - wall, "cpu_s": _cpu_s() - cpu,
            "maxrss_mib": _rss_mib(), "base_rss_mib": base_rss, **tokens}

  started = time.perf_counter()
  first = segment(args.warmup)  # Compiles every row length the task draws, mostly.
  rows = configs[0].data.batch_size * 48  # A study batch of about the longest rows.
  share = (_fixed_cost_share(model, configs[0].data.batch_size, 48) if args.models == 1
           else None)
  print(json.dumps({"ready": True, "setup_s": time.perf_counter() - started,
                    "warmup_s": first["wall_s"], "params": int(params),
                    "fixed_cost_share": share,
                    "matmul_gflops": _matmul_gflops(rows, int(configs[0].model.d_model),
                                                    4 * int(configs[0].model.d_model))}),
        flush=True)
  for line in sys.stdin:
    command = line.split()
    if not command or command[0] == "quit":
      break
    print(json.dumps(segment(int(command[1]))), flush=True)


def _spawn(task: str, models: int, args) -> subprocess.Popen:
  command = [sys.executable, "-m", "benchmarks.studies_throughput", "--worker",
             f"--task={task}", f"--models={models}", f"--warmup={args.warmup}",
             f"--steps_per_model={args.steps_per_model}"] + (["--quick"] if args.quick else [])
  env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
  return subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)


def _ask(proc: subprocess.Popen, line: str | None = None) -> dict:
  if line is not None:
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
  answer = proc.stdout.readline()
  if not answer:
    raise RuntimeError(f"worker {proc.args} died (exit code {proc.poll()})")
  return json.loads(answer)


def run(args) -> dict:
  """Runs the alternating measurement; returns the record (also written to ``--out``)."""
  from pejax import machine  # pylint: disable=g-import-not-at-top
  tasks = [t for t in args.tasks.split(",") if t]
  unknown = [t for t in tasks if t not in TASKS]
  if unknown:
    raise ValueError(f"--tasks: unknown {unknown}, choose from {sorted(TASKS)}")
  sizes = sorted({int(n) for n in args.sizes.split(",")} | {1})
  if sizes[0] < 1:
    raise ValueError(f"--sizes must be positive model counts, got {args.sizes!r}")
  load_before = os.getloadavg()
  start = time.time()
  procs, ready = {}, {}
  for task in tasks:
    for n in sizes:  # One after another: setup and compilation do not overlap.
      procs[(task, n)] = _spawn(task, n, args)
      ready[(task, n)] = _ask(procs[(task, n)])
      print(f"{task} N={n}: ready ({ready[(task, n)]['setup_s']:.0f} s)", flush=True)
  segments = {key: [] for key in procs}
  for r in range(args.rounds):
    for key, proc in procs.items():
      segments[key].append(_ask(proc, f"run {args.steps}"))
    print(f"round {r + 1}/{args.rounds}: " + ", ".join(
        f"{t} N={n} {segments[(t, n)][-1]['wall_s']:.1f} s" for t, n in procs), flush=True)
  for proc in procs.values():
    proc.stdin.write("quit\n")
    proc.stdin.close()
    proc.wait(timeout=120)
  rows = []
  for (task, n), segs in segments.items():
    wall = statistics.median(s["wall_s"] for s in segs)
    cpu = statistics.median(s["cpu_s"] for s in segs)
    per_step = wall / args.steps
    rss = max(s["maxrss_mib"] for s in segs)
    base = segs[0]["base_rss_mib"]
    computed = sum(s["computed"] for s in segs)
    params = ready[(task, n)]["params"]
    rows.append(dict(task=task, models=n, step_ms=1e3 * per_step, cpu_step_ms=1e3 * cpu /
                     args.steps, models_per_hour=n * 3600.0 / (per_step * args.steps_per_model),
                     params=params, padding=computed / max(1, sum(s["own"] for s in segs)),
                     tokens_per_step=computed / (len(segs) * args.steps),
                     gflops=6.0 * params * computed / sum(s["wall_s"] for s in segs) / 1e9,
                     matmul_gflops=ready[(task, n)]["matmul_gflops"],
                     wall_s=[s["wall_s"] for s in segs], maxrss_mib=rss, base_rss_mib=base,
                     model_rss_mib=rss - base))
  for row in rows:
    alone = next(r for r in rows if r["task"] == row["task"] and r["models"] == 1)
    row["speedup"] = row["models_per_hour"] / alone["models_per_hour"]
    row["rss_growth_vs_n_alone"] = row["model_rss_mib"] / max(
        1e-9, row["models"] * alone["model_rss_mib"])
  shares = {t: ready[(t, 1)]["fixed_cost_share"] for t in tasks}
  command = "python -m benchmarks.studies_throughput " + " ".join(args.argv)
  record = dict(setup=dict(
      tasks={t: dict(zip(("task", "train_max", "one_size_per_batch"), TASKS[t])) for t in tasks},
      sizes=sizes, steps=args.steps, rounds=args.rounds, warmup=args.warmup,
      steps_per_model=args.steps_per_model, quick=args.quick, fixed_cost_share=shares,
      machine=machine.describe_machine(), load_before=load_before, load_after=os.getloadavg(),
      minutes=round((time.time() - start) / 60, 1),
      date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), command=command), rows=rows)
  text = to_markdown(record)
  print(text)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "studies_throughput.md").write_text(text)
  (out / "studies_throughput.json").write_text(json.dumps(record, indent=1))
  return record


def to_markdown(record: dict) -> str:
  s = record["setup"]
  lines = [
      "# Algorithmic studies: models per hour, one at a time vs N as one program", "",
      f"{s['date']}, {s['machine']}, load {s['load_before'][0]:.1f} -> {s['load_after'][0]:.1f}"
      f", {s['minutes']} min" + (" (--quick: tiny model, not the studies')" if s["quick"] else "")
      + ".", "", f"`{s['command']}`", "",
      f"Median of {s['rounds']} alternating segments of {s['steps']} steps per configuration "
      f"(after {s['warmup']} warm-up steps). models/hour = N x 3600 / (seconds per step x "
      f"{s['steps_per_model']} steps per model); speed-up = models/hour over N = 1's (the single "
      "trainer). RSS growth: peak RSS minus the worker's RSS before building any model; the "
      "target is growth(N) <= N x growth(1). Tokens: rows x row length computed per step "
      "(in a program of N models every batch is padded to the longest of the N) over those "
      "the models drew; GFLOP/s: 6 x parameters x computed tokens per second (the usual "
      "training estimate, attention excluded), beside what one jitted matmul of the model's "
      "MLP shape does in the same worker: a step near that rate is bound by arithmetic, which "
      "a program of N models multiplies by N.", "",
      "| task | N | step (ms) | CPU step (ms) | models/hour | speed-up | tokens computed / drawn "
      "| GFLOP/s | matmul GFLOP/s | peak RSS (MiB) | growth (MiB) | growth / (N x growth(1)) |",
      "|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
  shares = s.get("fixed_cost_share", {})
  if shares:
    lines[-2:-2] = [
        "Fixed cost per step (a gradient of one model on 1 row over its time on a whole batch, "
        "rows of 48 tokens; what does not grow with the work, hence the most N models in one "
        "program can save per model): " + ", ".join(
            f"{t} {v:.2f}" for t, v in shares.items() if v is not None) + ".", ""]
  for r in record["rows"]:
    lines.append(f"| {r['task']} | {r['models']} | {r['step_ms']:.1f} | {r['cpu_step_ms']:.1f} "
                 f"| {r['models_per_hour']:.1f} | {r['speedup']:.2f}x | {r['padding']:.2f} | "
                 f"{r['gflops']:.1f} | {r['matmul_gflops']:.1f} | {r['maxrss_mib']:.0f} | "
                 f"{r['model_rss_mib']:.0f} | {r['rss_growth_vs_n_alone']:.2f} |")
  return "\n".join(lines) + "\n"


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--tasks", default="ruoss,kazemnejad", help="comma-separated: ruoss, "
                      "kazemnejad")
  parser.add_argument("--sizes", default="1,3,6,12", help="models per program (1 = alone)")
  parser.add_argument("--steps", type=int, default=200, help="steps per timed segment")
  parser.add_argument("--rounds", type=int, default=3, help="segments per configuration")
  parser.add_argument("--warmup", type=int, default=40, help="untimed steps after setup")
  parser.add_argument("--steps_per_model", type=int, default=6000,
                      help="steps a model trains (models/hour; the studies' cap)")
  parser.add_argument("--quick", action="store_true", help="tiny model and counts (smoke)")
  parser.add_argument("--out", default=str(RESULTS))
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--task", default="ruoss", help=argparse.SUPPRESS)
  parser.add_argument("--models", type=int, default=1, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  args.argv = list(sys.argv[1:] if argv is None else argv)
  for name in ("steps", "rounds", "steps_per_model"):
    if getattr(args, name) < 1:
      parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
  if args.warmup < 1:
    parser.error(f"--warmup must be >= 1, got {args.warmup}")
  return args


def main(argv=None) -> None:
  args = parse_args(argv)
  if args.worker:
    worker_main(args)
  else:
    run(args)


if __name__ == "__main__":
  main()
