"""Where a PE's training step spends its work: XLA's cost analysis of the compiled step.

The companion of ``decoder_pe_cost.py`` for the PEs that miss their time target. Wall-clock
ratios on shared cores are noisy; the compiled step's floating-point operations and bytes
accessed (``compiled.cost_analysis()``) are exact and explain a ratio: a PE whose step does 2x
the flops of NoPE cannot run at 1.05x. Also split: the forward pass alone vs the whole step
(forward + backward + AdamW), to show which half a PE's extra work lands in.

Usage::

  JAX_PLATFORMS=cpu python benchmarks/pe_cost_profile.py [--pes cope,shaw,pope,t5]

Writes benchmarks/results/pe_cost_profile.{md,json} and prints the table.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from flax import nnx  # pylint: disable=g-import-not-at-top
import jax
import jax.numpy as jnp
import optax

from pejax.nn import Decoder, DecoderConfig, pe_names
from pejax.nn.positional import registry


def _cost(compiled) -> dict:
  analysis = compiled.cost_analysis()
  if isinstance(analysis, (list, tuple)):
    analysis = analysis[0] if analysis else {}
  return {"flops": float(analysis.get("flops", 0.0)),
          "bytes": float(analysis.get("bytes accessed", 0.0))}


def profile(name: str, *, batch: int, length: int, layers: int, d_model: int,
            heads: int) -> dict:
  """Cost analysis of the forward pass and the train step of one PE's decoder.

  Args:
    name: registry name.
    batch: B.
    length: L.
    layers: decoder blocks.
    d_model: model width.
    heads: attention heads.

  Returns:
    ``{"forward": {flops, bytes}, "step": {flops, bytes}}``.
  """
  pe = registry.registry_entry(name).make_config(context={"train_len": length})
  config = DecoderConfig(pe=pe, num_layers=layers, d_model=d_model, num_heads=heads,
                         attention="dense")
  model = Decoder(config, rngs=nnx.Rngs(0))
  optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
  tokens = jnp.zeros((batch, length + 1), jnp.int32)

  def loss(model, tokens):
    logits = model(tokens[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

  def step(model, optimizer, tokens):
    value, grads = nnx.value_and_grad(loss)(model, tokens)
    optimizer.update(model, grads)
    return value

  forward = nnx.jit(loss).lower(model, tokens).compile()
  train = nnx.jit(step).lower(model, optimizer, tokens).compile()
  return {"forward": _cost(forward), "step": _cost(train)}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--pes", default="", help="comma-separated PE names (default: all)")
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--length", type=int, default=256)
  parser.add_argument("--layers", type=int, default=2)
  parser.add_argument("--d_model", type=int, default=128)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"))
  args = parser.parse_args()
  names = [n for n in (args.pes.split(",") if args.pes else pe_names()) if n]
  if "none" not in names:
    names.insert(0, "none")
  dims = dict(batch=args.batch, length=args.length, layers=args.layers, d_model=args.d_model,
              heads=args.heads)
  results = {name: profile(name, **dims) for name in names}
  base = results["none"]
  lines = [
      "# Compiled training-step work per PE (XLA cost analysis), relative to `none`", "",
      f"fwd+bwd+AdamW and the forward alone, {args.layers} layers, d={args.d_model}, "
      f"{args.heads} heads, L={args.length}, B={args.batch}, dense attention, float32, "
      f"{jax.default_backend()}; {time.strftime('%Y-%m-%d %H:%M')}. Flops and bytes are "
      "exact counts of the compiled program (no timing noise).", "",
      "| PE | step GFLOP | step flops ratio | step bytes ratio | forward flops ratio | "
      "forward bytes ratio |",
      "|---|---:|---:|---:|---:|---:|"]
  for name, r in results.items():
    lines.append(
        f"| {name} | {r['step']['flops'] / 1e9:.3f} | "
        f"{r['step']['flops'] / base['step']['flops']:.3f} | "
        f"{r['step']['bytes'] / base['step']['bytes']:.3f} | "
        f"{r['forward']['flops'] / base['forward']['flops']:.3f} | "
        f"{r['forward']['bytes'] / base['forward']['bytes']:.3f} |")
  lines += ["", f"Command: `JAX_PLATFORMS=cpu python benchmarks/pe_cost_profile.py"
            f"{' --pes ' + args.pes if args.pes else ''}`"]
  text = "\n".join(lines) + "\n"
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "pe_cost_profile.md").write_text(text)
  (out / "pe_cost_profile.json").write_text(json.dumps(
      {"machine": platform.platform(), "dims": dims, "results": results}, indent=1))
  print(text)


if __name__ == "__main__":
  main()
