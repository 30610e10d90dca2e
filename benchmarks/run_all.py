"""Runs every benchmark, each in its own process, and writes a summary of the issue's targets.

Usage (from the repository root, PyTorch from the optional ``bench`` extra)::

  python -m benchmarks.run_all            # full run (about 15 minutes on 2 quiet CPU cores)
  python -m benchmarks.run_all --quick    # reduced sizes (smoke test; overwrites results/)
  python -m benchmarks.run_all --only train_throughput,attention_vs_torch

Benchmarks that need PyTorch are skipped (and reported as such) when it is not installed. Each
benchmark writes ``benchmarks/results/<name>.{md,json}``; this script then writes
``benchmarks/results/summary.{md,json}``: the machine, load, command and date, and one line per
target of the performance issue with the measured ratio (wall clock and CPU time).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = pathlib.Path(__file__).parent / "results"

# name -> (module, full arguments, quick arguments, needs torch)
BENCHMARKS = {
    "train_throughput": (
        "benchmarks.train_throughput",
        ["--variants", "pejax,pejax+launch,pejax+hugetlb,pejax+arena1+hugetlb,torch,"
         "torch+passive,torch.compile+passive", "--baseline", "torch+passive",
         "--rounds", "6", "--steps", "3"],
        ["--variants", "pejax,pejax+launch,torch+passive", "--baseline", "torch+passive",
         "--rounds", "2",
         "--steps", "1",
         "--layers", "1", "--batch", "4", "--length", "64"],
        True),
    "attention_vs_torch": (
        "benchmarks.attention_vs_torch", ["--rounds", "4"],
        ["--rounds", "1", "--inner", "1", "--lengths", "256,1024",
         "--memory_lengths", "1024,4096"], True),
    "attention_vs_torch_backward": (
        "benchmarks.attention_vs_torch", ["--backward", "--rounds", "3",
                                          "--lengths", "1024,4096"],
        ["--backward", "--rounds", "1", "--inner", "1", "--lengths", "256",
         "--memory_lengths", "1024"], True),
    "bias_construction": ("benchmarks.bias_construction", ["--rounds", "20"],
                          ["--rounds", "3", "--length", "256", "--bias_length", "256"], False),
    "decoder_pe_cost": ("benchmarks.decoder_pe_cost", ["--rounds", "10", "--steps", "3"],
                        ["--rounds", "2", "--steps", "1", "--length", "64"], False),
    "attention_scaling": ("benchmarks.attention_scaling", ["--rounds", "2", "--long", "32768"],
                          ["--rounds", "1", "--repeats", "1", "--long", "0"], False),
    "compile_and_decode": ("benchmarks.compile_and_decode", ["--rounds", "3"],
                           ["--rounds", "1", "--pes", "rope", "--new", "8", "--prompt", "16",
                            "--batch", "2", "--length", "32", "--layers", "1"], False),
    "decode_speed": ("benchmarks.decode_speed", ["--repeats", "3"],
                     ["--repeats", "1", "--contexts", "64,128", "--new", "4", "--ring", "32",
                      "--layers", "1"], False),
    "ruler_speed": ("benchmarks.ruler_speed", ["--repeats", "3"],
                    ["--repeats", "1", "--lengths", "512", "--examples", "2", "--batch", "2",
                     "--long", "0"], False),
    "attention_crossover": ("benchmarks.attention_crossover", ["--rounds", "5"],
                            ["--rounds", "1", "--tokens", "1024", "--lengths", "256,512"], False),
    "roofline": ("benchmarks.roofline", ["--rounds", "10", "--steps", "3"],
                 ["--rounds", "2", "--steps", "1", "--batch", "4", "--length", "64",
                  "--layers", "1"], False),
    "rope_throughput": ("benchmarks.rope_throughput", ["--repeats", "20"],
                        ["--repeats", "3", "--shape", "2,128,4,32"], False),
}


def _load(name: str):
  path = RESULTS / f"{name}.json"
  return json.loads(path.read_text()) if path.exists() else None


def _fmt(x, digits=2):
  return "n/a" if x is None else f"{x:.{digits}f}"


def targets() -> list[dict]:
  """One dict per target: name, goal, measured wall / CPU ratios, met."""
  out = []
  for stem in ("train_throughput",):  # The other train_throughput_*.md are earlier studies.
    tt = _load(stem)
    if not tt:
      continue
    rows = {r["variant"]: r for r in tt["rows"]}
    eager = [r for n, r in rows.items() if n.startswith("torch+") or n == "torch"]
    # torch.compile without OMP_WAIT_POLICY=PASSIVE spins at barriers under load: not a fair
    # reference, so only the passive variant counts.
    compiled = [r for n, r in rows.items() if n.startswith("torch.compile") and "passive" in n]
    # PyTorch's best eager variant (by CPU time) is the reference: the fairest comparison.
    best = min(eager, key=lambda r: r["cpu_step_ms"]) if eager else None
    for name, r in rows.items():
      if not name.startswith("pejax"):
        continue
      references = ((best, 1.15), (compiled[0] if compiled else None, 1.0))
      for ref, threshold in references:
        if ref is None:
          continue
        out.append(dict(
            target=f"training tokens/s ({stem}), {name} vs {ref['variant']}",
            goal=f">= {threshold}x", wall=r["tokens_per_s"] / ref["tokens_per_s"],
            cpu=r["tokens_per_cpu_s"] / ref["tokens_per_cpu_s"], higher_is_better=True,
            threshold=threshold))
  pe = _load("decoder_pe_cost")
  if pe:
    for r in pe["rows"]:
      if r["pe"] != "none":
        out.append(dict(target=f"PE training-step cost, {r['pe']} / none", goal="<= 1.05x",
                        wall=r["ratio"], cpu=r["cpu_ratio"], higher_is_better=False,
                        threshold=1.05))
  bias = _load("bias_construction")
  if bias:
    for r in bias["rows"]:
      if r["variant"].startswith("apply_rope"):
        out.append(dict(target=f"{r['variant']} / elementwise floor", goal="<= 1.5x",
                        wall=r["wall_ratio_to_floor"], cpu=r["cpu_ratio_to_floor"],
                        higher_is_better=False, threshold=1.5))
  for name, what in (("attention_vs_torch", "forward"),
                     ("attention_vs_torch_backward", "forward+backward")):
    att = _load(name)
    if not att:
      continue
    for r in att["rows"]:
      if r["length"] == 4096 and r["variant"].startswith("pejax blockwise"):
        out.append(dict(target=f"{r['variant']} causal attention {what} at 4K / torch SDPA",
                        goal="<= 1.5x", wall=r["wall_ratio_to_torch"],
                        cpu=r["cpu_ratio_to_torch"], higher_is_better=False, threshold=1.5))
    memory = {(m["variant"], m["length"]): m["temp_mib"] for m in att.get("memory", [])}
    lengths = sorted({n for _, n in memory})
    if len(lengths) >= 2:
      lo, hi = lengths[-2], lengths[-1]
      for variant in ("pejax blockwise 512", "pejax dense"):
        a, b = memory.get((variant, lo)), memory.get((variant, hi))
        if a and b:
          out.append(dict(
              target=f"{variant} {what} temp memory growth {lo} -> {hi} tokens "
                     f"(linear = {hi / lo:.0f}x, quadratic = {(hi / lo) ** 2:.0f}x)",
              goal=f"~{hi / lo:.0f}x", wall=b / a, cpu=None, higher_is_better=False,
              threshold=1.25 * hi / lo))
  crossover = _load("attention_crossover")
  if crossover and crossover.get("threshold"):
    out.append(dict(
        target=f"auto's dense/blockwise threshold ({crossover['threshold']} tokens) / measured "
               f"crossover ({crossover['crossover']} tokens, attention_crossover)",
        goal="= 1.0x", wall=crossover["threshold"] / max(crossover["crossover"], 1), cpu=None,
        higher_is_better=False, threshold=1.0))
  roof = _load("roofline")
  if roof:
    out.append(dict(
        target=f"roofline: training step {roof['achieved_gflops']:.1f} GFLOP/s (PaLM model "
               f"FLOPs) / peak float32 matmul {roof['peak_gflops']:.1f} GFLOP/s (roofline)",
        goal="(a number, no target)", wall=roof["fraction"], cpu=None, higher_is_better=True,
        threshold=0.0))
  for t in out:
    value = t["cpu"] if t["cpu"] is not None else t["wall"]
    t["met_cpu"] = None if t["cpu"] is None else (
        t["cpu"] >= t["threshold"] if t["higher_is_better"] else t["cpu"] <= t["threshold"])
    t["met_wall"] = (t["wall"] >= t["threshold"] if t["higher_is_better"]
                     else t["wall"] <= t["threshold"])
    del value
  return out


def write_summary(command: str, ran: dict) -> str:
  rows = targets()
  meta = dict(command=command, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              machine=platform.machine(), processor=platform.processor(),
              cpu_count=os.cpu_count(), loadavg=os.getloadavg(), python=sys.version.split()[0],
              ran=ran)
  yes = lambda m: "" if m is None else ("yes" if m else "**no**")
  lines = ["# Benchmark summary: targets of the performance issue", "",
           f"Command: `{command}`; {meta['date']}; {meta['cpu_count']} cores "
           f"({meta['machine']}), load average at the end {meta['loadavg'][0]:.2f}. "
           "Wall-clock ratios are from alternating side-by-side runs; CPU-time ratios "
           "(process user + system time) are less sensitive to the machine's other load.", "",
           "| target | goal | measured (wall) | measured (CPU time) | met (wall / CPU) |",
           "|---|---|---:|---:|:---:|"]
  for t in rows:
    lines.append(f"| {t['target']} | {t['goal']} | {_fmt(t['wall'])} | {_fmt(t['cpu'])} | "
                 f"{yes(t['met_wall'])} / {yes(t['met_cpu'])} |")
  lines += ["", "Benchmarks run: " + ", ".join(f"{k} ({v})" for k, v in ran.items()), ""]
  text = "\n".join(lines)
  RESULTS.mkdir(parents=True, exist_ok=True)
  (RESULTS / "summary.md").write_text(text)
  (RESULTS / "summary.json").write_text(json.dumps(dict(meta=meta, targets=rows), indent=1))
  return text


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true", help="small sizes, few rounds")
  parser.add_argument("--only", default="", help="comma-separated benchmark names")
  parser.add_argument("--summary_only", action="store_true", help="rebuild summary.md only")
  args = parser.parse_args(argv)
  command = "python -m benchmarks.run_all " + " ".join(argv if argv is not None else
                                                       sys.argv[1:])
  names = [n for n in args.only.split(",") if n] or list(BENCHMARKS)
  for name in names:
    if name not in BENCHMARKS:
      raise ValueError(f"--only: unknown benchmark {name!r}, choose from {list(BENCHMARKS)}")
  has_torch = importlib.util.find_spec("torch") is not None
  ran = {}
  if not args.summary_only:
    for name in names:
      module, full, quick, needs_torch = BENCHMARKS[name]
      if needs_torch and not has_torch:
        print(f"== {name}: skipped (PyTorch not installed: pip install -e .[bench])", flush=True)
        ran[name] = "skipped, no torch"
        continue
      extra = list(quick if args.quick else full)
      if name == "attention_vs_torch_backward":
        extra += ["--name", name]
      print(f"== {name}: {module} {' '.join(extra)}", flush=True)
      start = time.perf_counter()
      env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
      proc = subprocess.run([sys.executable, "-m", module] + extra, cwd=ROOT, env=env,
                            check=False)
      ran[name] = (f"ok, {time.perf_counter() - start:.0f} s" if proc.returncode == 0
                   else f"FAILED (exit {proc.returncode})")
  print(write_summary(command, ran))


if __name__ == "__main__":
  main()
