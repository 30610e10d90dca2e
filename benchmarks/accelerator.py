"""Attention and training throughput on an accelerator: pejax dense / blockwise, the Pallas
kernel, ``jax.nn.dot_product_attention`` (XLA) and cuDNN flash attention.

Ready to run in one go when a GPU (or TPU) is lent::

  python -m benchmarks.accelerator                   # full: 1K-16K tokens, <= 10 min (--budget_s)
  python -m benchmarks.accelerator --smoke           # tiny sizes; runs on CPU (Pallas interpreted)

Two parts, each case timed after its compiling call (median of ``--repeats`` calls, min-max kept):

1. **Attention**, one causal self-attention layer ``[B, L, H, D]`` (bf16 on an accelerator,
   float32 on CPU), forward and forward + backward (gradients of q, k, v and of the bias
   parameters), for each implementation and PE bias:

   * ``pejax-dense`` / ``pejax-blockwise``: :func:`pejax.nn.attention.attention`, the PE's
     ``bias`` hook (dense: one ``[1, H, L, L]`` array; blockwise: per tile);
   * ``pallas``: :func:`pejax.nn.attention.pallas.pallas_attention`, the bias computed inside the
     kernel (``none``, ``alibi``, ``t5``);
   * ``xla``: ``jax.nn.dot_product_attention(implementation="xla")``, the bias evaluated as an
     ``[1, H, L, L]`` array;
   * ``cudnn``: ``implementation="cudnn"`` (flash attention; GPU only), bias array likewise
     (cuDNN takes a bias but gives no gradient for it: T5 is skipped).

   Reported: milliseconds and achieved TFLOP/s with the causal FLOP count
   ``2 * 2 * B * H * L^2 * D / 2`` forward and 2.5x that for the backward pass (FlashAttention-2's
   convention: the backward pass has 5 of the 7 matmuls).
2. **Training**, tokens/s and MFU of the decoder's train step (forward, loss, gradients, AdamW)
   per attention implementation. The decoder reaches only dense / blockwise today; until the
   attention dispatch serves the others, this script routes the decoder's attention call to the
   Pallas kernel, XLA or cuDNN itself (``routed_attention``; XLA / cuDNN: no packing). MFU =
   ``(6 N + 6 * layers * L * d_model) * tokens/s / peak`` (PaLM appendix B, causal half of the
   attention term), N the non-embedding parameters plus the output projection; the peak bf16
   FLOP/s comes from a table of device kinds or ``--peak_tflops``.

Writes ``benchmarks/results/accelerator.{md,json}`` (``--smoke``: ``accelerator_smoke.*``) and
prints the tables. A case that cannot run on this platform (cuDNN off a CUDA GPU, a shape cuDNN
refuses, memory) is recorded with its one-line reason instead of a number.

References:
  Dao 2023, "FlashAttention-2", arXiv 2307.08691 (FLOP convention); Chowdhery et al. 2022,
  "PaLM", arXiv 2204.02311, appendix B (model FLOPs utilization).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import platform
import statistics
import sys
import time
import traceback
from typing import Any, Callable, Optional

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

# Peak dense bf16 matmul TFLOP/s per chip by device kind (vendor data sheets; no sparsity).
PEAK_TFLOPS = {
    "H200": 989.0, "H100": 989.0, "H800": 989.0, "A100": 312.0, "L4": 121.0, "A10G": 70.0,
    "TPU v4": 275.0, "TPU v5 lite": 197.0, "TPU v5e": 197.0, "TPU v5p": 459.0, "TPU v5": 459.0,
    "TPU v6 lite": 918.0, "TPU v6e": 918.0,
}
IMPLEMENTATIONS = ("pejax-dense", "pejax-blockwise", "pallas", "xla", "cudnn")
PES = ("none", "alibi", "t5")


def _peak_tflops(device, override: Optional[float]) -> Optional[float]:
  if override:
    return override
  kind = getattr(device, "device_kind", "")
  for name, value in sorted(PEAK_TFLOPS.items(), key=lambda item: -len(item[0])):
    if name.lower() in kind.lower():
      return value
  return None


def _time(fn: Callable[[], Any], repeats: int) -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  start = time.perf_counter()
  jax.block_until_ready(fn())
  first = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return dict(first_s=first, median_s=statistics.median(times), min_s=min(times),
              max_s=max(times))


def _pe(name: str, heads: int, dim: int):
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from pejax.nn.decoder_config import DecoderConfig  # pylint: disable=g-import-not-at-top
  from pejax.nn.positional import registry  # pylint: disable=g-import-not-at-top
  model = DecoderConfig(num_layers=1, d_model=heads * dim, num_heads=heads, pe=name)
  return registry.build_pe(registry.pe_config(name), model, rngs=nnx.Rngs(0))


def _attention_fn(impl: str, pe_name: str, *, heads: int, dim: int, interpret: bool,
                  block: int) -> Callable:
  """``f(q, k, v, pe_state) -> out`` for one implementation and PE (positions 0..L-1)."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from pejax.nn.attention import attention  # pylint: disable=g-import-not-at-top
  from pejax.nn.attention.pallas import pallas_attention  # pylint: disable=g-import-not-at-top

  pe = _pe(pe_name, heads, dim)
  graphdef, _ = nnx.split(pe)

  def fn(q, k, v, state):
    module = nnx.merge(graphdef, state)
    positions = jnp.arange(q.shape[1], dtype=jnp.int32)[None]
    if impl in ("pejax-dense", "pejax-blockwise"):
      bias = module.bias if module.has_bias else None
      return attention(q, k, v, q_positions=positions, k_positions=positions, bias=bias,
                       implementation=impl.split("-")[1], block_size=block)
    if impl == "pallas":
      return pallas_attention(q, k, v, q_positions=positions, k_positions=positions,
                              bias=module.kernel_bias(), interpret=interpret,
                              block_q=min(block, 128), block_k=min(block, 128))
    bias = module.bias(positions, positions).astype(q.dtype) if module.has_bias else None
    if impl == "cudnn" and bias is not None:
      bias = jax.lax.stop_gradient(bias)
    return jax.nn.dot_product_attention(q, k, v, bias=bias, is_causal=True,
                                        implementation=impl)
  return fn, nnx.state(pe)


def _over_budget(args) -> Optional[str]:
  """A reason to skip the next case once ``--budget_s`` seconds have passed since the start."""
  if args.budget_s and time.perf_counter() - args.start > args.budget_s:
    return f"time budget of {args.budget_s:.0f} s spent before this case"
  return None


def _skip_reason(impl: str, pe_name: str, backend: str) -> Optional[str]:
  if impl == "cudnn" and backend != "gpu":
    return "cuDNN flash attention needs a CUDA GPU"
  if impl == "cudnn" and pe_name == "t5":
    return "cuDNN gives no gradient for a bias (T5's table is learned)"
  return None


def attention_cases(args, backend: str, dtype) -> list[dict]:
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  rows = []
  interpret = backend == "cpu"
  check_length = min(args.lengths)
  for length in args.lengths:
    batch = max(1, args.tokens // length)
    for pe_name in args.pes:
      reference = None  # pejax-dense output and dq at the shortest length: the numbers check.
      for impl in args.implementations:
        row = dict(part="attention", impl=impl, pe=pe_name, length=length, batch=batch,
                   heads=args.heads, head_dim=args.head_dim, dtype=str(jnp.dtype(dtype)))
        reason = _skip_reason(impl, pe_name, backend) or _over_budget(args)
        if reason:
          rows.append(dict(row, skipped=reason))
          continue
        try:
          fn, state = _attention_fn(impl, pe_name, heads=args.heads, dim=args.head_dim,
                                    interpret=interpret, block=args.block)
          keys = jax.random.split(jax.random.PRNGKey(length), 3)
          shape = (batch, length, args.heads, args.head_dim)
          q, k, v = (jax.random.normal(key, shape, dtype) for key in keys)
          forward = jax.jit(fn)
          grads = jax.jit(jax.grad(
              lambda q, k, v, s: jnp.sum(fn(q, k, v, s).astype(jnp.float32)),
              argnums=(0, 1, 2, 3)))
          flops = 2 * 2 * batch * args.heads * length * length * args.head_dim / 2
          fwd = _time(lambda: forward(q, k, v, state), args.repeats)
          both = _time(lambda: grads(q, k, v, state), args.repeats)
          if length == check_length:
            # On the device, the first check that the kernels compute the right numbers:
            # max |difference| from pejax-dense of the output and of dq (float32).
            out = forward(q, k, v, state).astype(jnp.float32)
            dq = grads(q, k, v, state)[0].astype(jnp.float32)
            if reference is None:
              ref_fn, ref_state = _attention_fn("pejax-dense", pe_name, heads=args.heads,
                                                dim=args.head_dim, interpret=interpret,
                                                block=args.block)
              reference = (jax.jit(ref_fn)(q, k, v, ref_state).astype(jnp.float32),
                           jax.jit(jax.grad(lambda q, k, v, s: jnp.sum(
                               ref_fn(q, k, v, s).astype(jnp.float32))))(
                                   q, k, v, ref_state).astype(jnp.float32))
            row.update(max_abs_diff_out=float(jnp.max(jnp.abs(out - reference[0]))),
                       max_abs_diff_dq=float(jnp.max(jnp.abs(dq - reference[1]))))
          row.update(forward_ms=fwd["median_s"] * 1e3, forward_range_ms=(
              fwd["min_s"] * 1e3, fwd["max_s"] * 1e3),
                     forward_tflops=flops / fwd["median_s"] / 1e12,
                     backward_ms=both["median_s"] * 1e3,
                     backward_tflops=3.5 * flops / both["median_s"] / 1e12,
                     compile_s=fwd["first_s"] + both["first_s"])
        except Exception as error:  # pylint: disable=broad-except
          row["skipped"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
          if args.verbose:
            traceback.print_exc()
        rows.append(row)
        print(_attention_line(row), flush=True)
        args.checkpoint(rows, None)
  return rows


# Training. --------------------------------------------------------------------------------------


@contextlib.contextmanager
def routed_attention(impl: str, interpret: bool):
  """Routes the decoder's attention call to ``impl`` for the duration (a benchmark stand-in for
  the attention dispatch). The decoder runs with ``attention="blockwise"``, so the PE bias
  arrives as the PE's bound ``bias`` method, from which the in-kernel bias is built.

  The patch is invisible to jit caches: a function jitted once at module level
  (``pejax.train.eval_step``) and traced earlier for the same model config keeps its unrouted
  trace. Trace fresh functions, or change a config field, inside the context.

  Args:
    impl: one of ``IMPLEMENTATIONS``.
    interpret: run the Pallas kernel in interpret mode (CPU).

  Yields:
    The decoder's ``attention`` setting to use inside the context.
  """
  import jax  # pylint: disable=g-import-not-at-top
  from pejax.nn import self_attention  # pylint: disable=g-import-not-at-top
  from pejax.nn.attention.pallas import pallas_attention  # pylint: disable=g-import-not-at-top

  original = self_attention.attention
  original_served = self_attention.kernel_bias_served
  if impl in ("pejax-dense", "pejax-blockwise"):
    yield impl.split("-")[1]
    return
  if impl not in ("pallas", "xla", "cudnn"):
    raise ValueError(f"impl must be one of {IMPLEMENTATIONS}, got {impl!r}")

  def routed(q, k, v, *, q_positions, k_positions, bias=None, kernel_bias=None,
             implementation=None, causal=True, q_offset=0, kv_length=None, q_segment_ids=None,
             k_segment_ids=None, block_size=None, window=None, q_features=None, k_features=None,
             logits_fn=None, bias_grad=True, chunk_size=None):
    del implementation, block_size, bias_grad
    unserved = dict(q_offset=q_offset != 0, kv_length=kv_length is not None,
                    chunk_size=chunk_size is not None,
                    segment_ids=impl != "pallas" and q_segment_ids is not None,
                    features=q_features is not None
                    or k_features is not None, logits_fn=logits_fn is not None)
    if any(unserved.values()):
      raise ValueError(f"the {impl} route serves plain causal batches only, got "
                       f"{sorted(key for key, value in unserved.items() if value)}")
    if impl == "pallas":
      if bias is not None and kernel_bias is None:
        raise ValueError("the pallas route needs a PE with a kernel_bias() hook")
      return pallas_attention(q, k, v, q_positions=q_positions, k_positions=k_positions,
                              bias=None if bias is None else kernel_bias, causal=causal,
                              window=window,
                              q_segment_ids=q_segment_ids, k_segment_ids=k_segment_ids,
                              interpret=interpret)
    dense_bias = None if bias is None else bias(q_positions, k_positions).astype(q.dtype)
    if impl == "cudnn" and dense_bias is not None:
      dense_bias = jax.lax.stop_gradient(dense_bias)
    groups = q.shape[2] // k.shape[2]
    if groups > 1:
      k, v = (x.repeat(groups, axis=2) for x in (k, v))
    return jax.nn.dot_product_attention(q, k, v, bias=dense_bias, is_causal=causal,
                                        implementation=impl,
                                        local_window_size=None if window is None
                                        else (window - 1, 0))

  self_attention.attention = routed
  if impl == "pallas":  # The decoder then hands its PE's kernel bias over (also on CPU).
    self_attention.kernel_bias_served = lambda: True
  try:
    yield "blockwise"  # The decoder's implementation name while routed.
  finally:
    self_attention.attention = original
    self_attention.kernel_bias_served = original_served


def training_cases(args, backend: str, dtype_name: str, peak: Optional[float]) -> list[dict]:
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  from pejax.nn import Decoder, DecoderConfig  # pylint: disable=g-import-not-at-top
  from pejax.train import optimizer as optimizer_lib  # pylint: disable=g-import-not-at-top
  from pejax.train.train_step import make_train_step  # pylint: disable=g-import-not-at-top

  optim = ml_collections.ConfigDict(dict(learning_rate=1e-4, warmup_steps=10, min_lr_ratio=0.1,
                                         weight_decay=0.1, b1=0.9, b2=0.95, clip_norm=1.0))
  rows = []
  for length in args.train_lengths:
    batch = max(1, args.train_tokens // length)
    for pe_name in args.train_pes:
      for impl in args.implementations:
        row = dict(part="training", impl=impl, pe=pe_name, length=length, batch=batch,
                   layers=args.layers, d_model=args.d_model, heads=args.heads, dtype=dtype_name)
        reason = _skip_reason(impl, pe_name, backend) or _over_budget(args)
        if reason:
          rows.append(dict(row, skipped=reason))
          continue
        try:
          with routed_attention(impl, backend == "cpu") as implementation:
            config = DecoderConfig(
                num_layers=args.layers, d_model=args.d_model, num_heads=args.heads,
                pe=pe_name, dtype=dtype_name, attention=implementation, block_size=args.block)
            model = Decoder(config, rngs=nnx.Rngs(0))
            optimizer = optimizer_lib.create_optimizer(model, optim, total_steps=1000)
            step = make_train_step(donate=True)
            tokens = jax.random.randint(jax.random.PRNGKey(0), (batch, length + 1), 0,
                                        config.vocab_size, jnp.int32)
            data = dict(inputs=tokens[:, :-1], targets=tokens[:, 1:],
                        positions=jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32),
                                                   (batch, length)),
                        loss_mask=jnp.ones((batch, length), jnp.float32))
            timing = _time(lambda: step(model, optimizer, data)["loss"], args.repeats)
          params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
          embed = config.vocab_size * config.d_model
          n = params - embed + (embed if config.tie_embeddings else 0)
          flops_per_token = 6 * n + 6 * args.layers * length * args.d_model
          tokens_per_s = batch * length / timing["median_s"]
          row.update(step_ms=timing["median_s"] * 1e3, tokens_per_s=tokens_per_s,
                     compile_s=timing["first_s"], params=params,
                     mfu=None if peak is None else flops_per_token * tokens_per_s / (peak * 1e12))
        except Exception as error:  # pylint: disable=broad-except
          row["skipped"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
          if args.verbose:
            traceback.print_exc()
        rows.append(row)
        print(_training_line(row), flush=True)
        args.checkpoint(None, rows)
  return rows


# Reporting. -------------------------------------------------------------------------------------


def _f(x, digits=2):
  return "n/a" if x is None else f"{x:.{digits}f}"


def _attention_line(r: dict) -> str:
  head = f"| {r['impl']} | {r['pe']} | {r['length']} | {r['batch']} |"
  if "skipped" in r:
    return head + f" skipped: {r['skipped']} | | | | |"
  check = ""
  if "max_abs_diff_out" in r:
    check = f" {r['max_abs_diff_out']:.1e} / {r['max_abs_diff_dq']:.1e}"
  return head + (f" {_f(r['forward_ms'])} | {_f(r['forward_tflops'])} | {_f(r['backward_ms'])} |"
                 f" {_f(r['backward_tflops'])} |{check} |")


def _training_line(r: dict) -> str:
  head = f"| {r['impl']} | {r['pe']} | {r['length']} | {r['batch']} |"
  if "skipped" in r:
    return head + f" skipped: {r['skipped']} | | |"
  mfu = "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
  return head + f" {_f(r['step_ms'])} | {r['tokens_per_s']:.0f} | {mfu} |"


def markdown(setup: dict, attention_rows: list[dict], training_rows: list[dict]) -> str:
  lines = [
      "# Accelerator benchmark", "",
      f"`{setup['command']}` on {setup['device']} ({setup['backend']}, peak "
      f"{_f(setup['peak_tflops'], 0)} TFLOP/s bf16), jax {setup['jax']}, {setup['date']}.",
      "", "## Attention (causal; fwd+bwd includes the bias-parameter gradients)", "",
      "| impl | PE | L | B | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |"
      " max diff vs dense: out / dq |",
      "|:--|:--|--:|--:|--:|--:|--:|--:|--:|",
  ]
  lines += [_attention_line(r) for r in attention_rows]
  lines += ["", f"## Training step ({setup['layers']} layers, d_model {setup['d_model']}, "
            f"{setup['heads']} heads)", "",
            "| impl | PE | L | B | step ms | tokens/s | MFU |", "|:--|:--|--:|--:|--:|--:|--:|"]
  lines += [_training_line(r) for r in training_rows]
  return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> dict:
  """Runs the benchmark; returns the JSON record it writes.

  Args:
    argv: command-line arguments (``None``: ``sys.argv[1:]``).

  Returns:
    ``{"setup", "attention", "training"}``.
  """
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--smoke", action="store_true", help="tiny sizes (CPU: Pallas interpreted)")
  parser.add_argument("--lengths", default="1024,4096,16384")
  parser.add_argument("--tokens", type=int, default=32768, help="B * L per attention case")
  parser.add_argument("--train_lengths", default="2048,8192")
  parser.add_argument("--train_tokens", type=int, default=65536, help="B * L per train step")
  parser.add_argument("--heads", type=int, default=16)
  parser.add_argument("--head_dim", type=int, default=64)
  parser.add_argument("--layers", type=int, default=8)
  parser.add_argument("--d_model", type=int, default=1024)
  parser.add_argument("--block", type=int, default=512, help="blockwise tile (Pallas: <= 128)")
  parser.add_argument("--pes", default=",".join(PES), help="PE biases of the attention part")
  parser.add_argument("--train_pes", default="alibi", help="PE biases of the training part")
  parser.add_argument("--budget_s", type=float, default=480.0,
                      help="start no new case after this many seconds (0: no limit); the "
                           "results are written after every case")
  parser.add_argument("--implementations", default=",".join(IMPLEMENTATIONS))
  parser.add_argument("--repeats", type=int, default=10)
  parser.add_argument("--peak_tflops", type=float, default=None)
  parser.add_argument("--skip_training", action="store_true")
  parser.add_argument("--verbose", action="store_true")
  parser.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"))
  args = parser.parse_args(argv)
  if args.smoke:
    args.lengths, args.tokens, args.train_lengths, args.train_tokens = "32", 64, "32", 64
    args.train_pes = args.pes
    args.heads, args.head_dim, args.layers, args.d_model = 2, 16, 1, 32
    args.block, args.repeats = 16, 1
  args.lengths = [int(x) for x in str(args.lengths).split(",")]
  args.train_lengths = [int(x) for x in str(args.train_lengths).split(",")]
  args.pes = args.pes.split(",")
  args.train_pes = args.train_pes.split(",")
  args.start = time.perf_counter()
  args.implementations = args.implementations.split(",")
  for impl in args.implementations:
    if impl not in IMPLEMENTATIONS:
      parser.error(f"--implementations: unknown {impl!r}; choose from {IMPLEMENTATIONS}")

  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  backend = jax.default_backend()
  device = jax.devices()[0]
  dtype, dtype_name = (jnp.float32, "float32") if backend == "cpu" else (jnp.bfloat16, "bfloat16")
  peak = _peak_tflops(device, args.peak_tflops)
  setup = dict(command="python -m benchmarks.accelerator " + " ".join(argv or sys.argv[1:]),
               backend=backend, device=getattr(device, "device_kind", str(device)),
               peak_tflops=peak, jax=jax.__version__, machine=platform.machine(),
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               load=os.getloadavg(), layers=args.layers, d_model=args.d_model,
               heads=args.heads, smoke=args.smoke,
               measured_on_accelerator=backend in ("gpu", "tpu"))
  print(f"backend {backend}, device {setup['device']}, peak {peak} TFLOP/s", flush=True)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  stem = "accelerator_smoke" if args.smoke else "accelerator"
  record = dict(setup=setup, attention=[], training=[])

  def checkpoint(attention_rows, training_rows):
    # Written after every case, so that a run cut short still leaves its tables.
    if attention_rows is not None:
      record["attention"] = attention_rows
    if training_rows is not None:
      record["training"] = training_rows
    (out / f"{stem}.json").write_text(json.dumps(record, indent=1, default=str))
    (out / f"{stem}.md").write_text(markdown(setup, record["attention"], record["training"]))

  args.checkpoint = checkpoint
  attention_rows = attention_cases(args, backend, dtype)
  training_rows = None if args.skip_training else training_cases(args, backend, dtype_name,
                                                                  peak)
  checkpoint(attention_rows, training_rows)
  print(markdown(setup, record["attention"], record["training"]))
  return record


if __name__ == "__main__":
  main()
