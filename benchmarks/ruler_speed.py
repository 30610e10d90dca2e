"""RULER evaluation speed (examples/s) by prompt length, its prefill share, and a long example's memory.

The target of the RULER issue: a 4K-token task evaluates a 2-layer pejax model at >= 20
examples/s on 2 CPU cores, and a 32K-token example needs < 2 GiB. This measures both with
:func:`pejax.eval.ruler.ruler_accuracy` as ``launch.py --config.eval.ruler`` runs it (greedy,
prompts left-padded to the length, ``batch`` prompts decoded together):

* per length: examples/s of one ``niah_single_1`` cell (median of ``--repeats`` after a warm-up
  call that compiles), and the prefill's share of it: ``pejax.generate`` of 1 new token vs the
  cell's budget on the same ``[batch, length]`` prompts (median of the same repeats);
* ``--long`` tokens (0: skipped): one example, batch 1, in a fresh process; its peak resident
  memory (``ru_maxrss``) and the same process's resident memory before the example (imports,
  model), and its wall time.

Model: ``--layers`` layers, d = ``--d_model``, ``--heads`` heads, RoPE, float32, random weights
(speed does not depend on them), byte-level tokenizer (a token is a byte). Attention is
``auto`` (blockwise past 1024 tokens on CPU).

Usage::

  JAX_PLATFORMS=cpu python -m benchmarks.ruler_speed [--repeats 3] [--long 32768]

Writes ``benchmarks/results/ruler_speed.{md,json}`` (``--out``, ``--name``).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from flax import nnx  # pylint: disable=g-import-not-at-top
import numpy as np

from benchmarks import result_files  # pylint: disable=wrong-import-position
from pejax import provenance as provenance_lib
from pejax.eval.ruler import model_eval
from pejax.hf.tokenizer import ByteTokenizer
from pejax.nn import Decoder, DecoderConfig
from pejax.nn.generation import generate

RESULTS = pathlib.Path(__file__).parent / "results"
TASK = "niah_single_1"


def make_model(args) -> Decoder:
  return Decoder(DecoderConfig(vocab_size=256, num_layers=args.layers, d_model=args.d_model,
                               num_heads=args.heads, pe="rope"), rngs=nnx.Rngs(0))


def _rss_mib() -> float:
  """Current resident set size in MiB (Linux /proc; peak RSS where unavailable)."""
  try:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) / 1024
  except OSError:
    pass
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_length(model, length: int, args, log) -> dict:
  """Examples/s of one RULER cell at ``length`` and the prefill's share of its time."""
  tokenizer = ByteTokenizer()

  def cell():
    return model_eval.ruler_accuracy(model, tokenizer, tasks=[TASK], lengths=[length],
                                     examples=args.examples, batch_size=args.batch,
                                     progress=None)[0]

  first = cell()  # Compiles this length's prefill and decode loop.
  seconds = []
  for _ in range(args.repeats):
    started = time.perf_counter()
    cell()
    seconds.append(time.perf_counter() - started)
  prompts = np.random.RandomState(0).randint(1, 256, (args.batch, length)).astype(np.int32)
  mask = np.ones_like(prompts)
  budgets = (1, first.new_tokens)
  for new in budgets:
    np.asarray(generate(model, prompts, prompt_mask=mask, max_new_tokens=new))  # Compile.
  runs = {new: [] for new in budgets}
  for _ in range(args.repeats):  # Alternating, so that a noisy moment hits both sides.
    for new in budgets:
      started = time.perf_counter()
      np.asarray(generate(model, prompts, prompt_mask=mask, max_new_tokens=new))
      runs[new].append(time.perf_counter() - started)
  timed = {new: statistics.median(r) for new, r in runs.items()}
  cell_s = statistics.median(seconds)
  row = dict(length=length, examples=args.examples, batch=args.batch,
             new_tokens=first.new_tokens, cell_s=cell_s,
             examples_per_s=args.examples / cell_s, cell_s_all=seconds,
             batch_prefill_s=timed[1], batch_generate_s=timed[first.new_tokens],
             prefill_share=timed[1] / timed[first.new_tokens],
             batch_prefill_s_all=runs[1], batch_generate_s_all=runs[first.new_tokens])
  log(f"  {length:>6} tokens: {row['examples_per_s']:.2f} examples/s (cell {cell_s:.2f} s); "
      f"prefill {timed[1]:.2f} s of {timed[first.new_tokens]:.2f} s per batch of {args.batch}")
  return row


def long_example(args) -> dict:
  """In this process: one ``args.child_long``-token example, batch 1; memory and time."""
  model = make_model(args)
  tokenizer = ByteTokenizer()
  before = _rss_mib()
  started = time.perf_counter()
  result = model_eval.ruler_accuracy(model, tokenizer, tasks=[TASK], lengths=[args.child_long],
                                     examples=1, batch_size=1, progress=None)[0]
  return dict(length=args.child_long, rss_before_mib=before,
              peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              seconds=time.perf_counter() - started, status=result.status,
              new_tokens=result.new_tokens)


def run(args, log=print) -> dict:
  started = time.time()
  model = make_model(args)
  lengths = [int(x) for x in args.lengths.split(",") if x]
  log(f"RULER speed: {args.layers} layers, d={args.d_model}, {args.heads} heads, task {TASK}, "
      f"{args.examples} examples a cell, batch {args.batch}")
  rows = [measure_length(model, length, args, log) for length in lengths]
  long = None
  if args.long:
    command = [sys.executable, "-m", "benchmarks.ruler_speed", "--child_long", str(args.long),
               "--layers", str(args.layers), "--d_model", str(args.d_model), "--heads",
               str(args.heads)]
    proc = subprocess.run(command, capture_output=True, text=True, check=False,
                          cwd=str(pathlib.Path(__file__).resolve().parents[1]))
    if proc.returncode:
      raise RuntimeError(f"the {args.long}-token example failed:\n{proc.stderr[-3000:]}")
    long = json.loads(proc.stdout.strip().splitlines()[-1])
    log(f"  {args.long} tokens, one example: peak RSS {long['peak_rss_mib']:.0f} MiB "
        f"({long['rss_before_mib']:.0f} MiB before it), {long['seconds']:.1f} s")
  result = dict(setup=dict(layers=args.layers, d_model=args.d_model, heads=args.heads,
                           task=TASK, examples=args.examples, batch=args.batch,
                           repeats=args.repeats),
                rows=rows, long=long,
                provenance=provenance_lib.provenance(command=args.command, started=started))
  p = result["provenance"]
  lines = [
      "# RULER evaluation speed",
      "",
      f"{args.layers} layers, d={args.d_model}, {args.heads} heads, RoPE, float32, random "
      f"weights, byte-level tokens; task `{TASK}`, {args.examples} examples a cell decoded "
      f"{args.batch} at a time (greedy, prompts left-padded to the length); median of "
      f"{args.repeats} repeats after a compiling call. Machine: {p.get('machine')}; commit "
      f"{p.get('commit')} (dirty: {p.get('dirty')}); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
      f"Command: `{args.command}`.",
      "",
      "Prefill share: `pejax.generate` of 1 new token over the same `[batch, length]` prompts, "
      "divided by the same call with the cell's generation budget (the two alternate within each repeat; "
      "medians).",
      "",
      "| length (tokens) | examples/s | cell s | new tokens | prefill s / batch | generate s / batch | prefill share |",
      "|---:|---:|---:|---:|---:|---:|---:|",
  ]
  for r in rows:
    lines.append(f"| {r['length']} | {r['examples_per_s']:.2f} | {r['cell_s']:.2f} | "
                 f"{r['new_tokens']} | {r['batch_prefill_s']:.2f} | "
                 f"{r['batch_generate_s']:.2f} | {r['prefill_share']:.0%} |")
  if long:
    lines += ["", f"One {long['length']}-token example (batch 1, fresh process): peak resident "
              f"memory {long['peak_rss_mib']:.0f} MiB, {long['rss_before_mib']:.0f} MiB of it "
              f"before the example (Python, JAX, the model); {long['seconds']:.1f} s "
              f"(compilation included), status {long['status']}."]
  lines.append("")
  text = "\n".join(lines)
  result_files.write(args.out, args.name, text, result)
  return result


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--layers", type=int, default=2)
  parser.add_argument("--d_model", type=int, default=64)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--lengths", default="1024,2048,4096")
  parser.add_argument("--examples", type=int, default=16)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--long", type=int, default=32768, help="tokens of the memory probe "
                      "(0: skip)")
  parser.add_argument("--child_long", type=int, default=0, help=argparse.SUPPRESS)
  parser.add_argument("--out", default=str(RESULTS))
  parser.add_argument("--name", default="ruler_speed")
  args = parser.parse_args(argv)
  for name in ("layers", "d_model", "heads", "examples", "batch", "repeats"):
    if getattr(args, name) < 1:
      parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
  if args.long < 0:
    parser.error(f"--long must be >= 0, got {args.long}")
  args.command = " ".join(["python -m benchmarks.ruler_speed",
                           *(argv if argv is not None else sys.argv[1:])])
  return args


def main(argv=None):
  args = parse_args(argv)
  if args.child_long:
    print(json.dumps(long_example(args)))
    return None
  return run(args)


if __name__ == "__main__":
  main()
