"""Subprocess side of tests/parallel: runs on 8 fake CPU devices and prints JSON results.

The fake devices come from ``XLA_FLAGS=--xla_force_host_platform_device_count=8``, which must be
set before JAX initializes, hence a fresh process (``tests/parallel/test_mesh_training.py``
starts it). Modes:

  check       (1) one train step per PE (rope, alibi, t5) on a ``data=4,model=2`` mesh and on one
              device (device 0 of the same process) from identical parameters, with plain SGD so
              that updated parameters compare elementwise (Adam's first step divides each
              gradient by its own magnitude and amplifies rounding in near-zero entries); (2) the
              eval step on the mesh and on one device, on 3 rows the data axis does not divide;
              (3) two AdamW steps on the mesh, a checkpoint of step 2, then step 3 on the mesh:
              the test restores that checkpoint on one device and runs step 3 itself.
  timing      steady-state step time on the 8-device mesh and on one device, side by side.

Usage: ``python tests/parallel/mesh_worker.py MODE OUT_DIR``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8").strip()
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

# pylint: disable=g-import-not-at-top,wrong-import-position
from flax import nnx
import jax
import ml_collections
import numpy as np
import optax

from pejax import experiment_config
from pejax import parallel
from pejax.nn import Decoder, DecoderConfig
from pejax.train import checkpoint as checkpoint_lib
from pejax.train import experiment
from pejax.train import optimizer as optimizer_lib
from pejax.train import train_step as train_step_lib

MESH_SPEC = "data=4,model=2"
BATCH, LENGTH, STEPS = 8, 16, 4


def model_config(pe: str) -> DecoderConfig:
  return DecoderConfig(pe=pe, num_layers=1, d_model=32, num_heads=4, vocab_size=64,
                       mlp_ratio=2.0, attention="dense")


def optim_config() -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      learning_rate=1e-2, warmup_steps=0, min_lr_ratio=0.1, weight_decay=0.1, b1=0.9, b2=0.98,
      clip_norm=1.0))


def batch_at(step: int, vocab: int = 64) -> dict[str, np.ndarray]:
  rng = np.random.default_rng([7, step])
  tokens = rng.integers(0, vocab, (BATCH, LENGTH + 1), dtype=np.int32)
  return {
      "inputs": tokens[:, :-1], "targets": tokens[:, 1:],
      "positions": np.broadcast_to(np.arange(LENGTH, dtype=np.int32), (BATCH, LENGTH)).copy(),
      "loss_mask": np.ones((BATCH, LENGTH), np.float32),
  }


ADAMW_STEP = train_step_lib.make_train_step(
    learning_rate_fn=optimizer_lib.schedule_from_config(optim_config(), total_steps=STEPS))
SGD_STEP = train_step_lib.make_train_step()


def build(pe: str, mesh=None, *, sgd: bool = False):
  """Model, optimizer and train step; on ``mesh`` if given (same initial values either way)."""
  model = Decoder(model_config(pe), rngs=nnx.Rngs(params=0))
  if mesh is not None:
    parallel.shard_module(model, mesh)
  if sgd:
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
  else:
    optimizer = optimizer_lib.create_optimizer(model, optim_config(), total_steps=STEPS)
  if mesh is not None:
    parallel.shard_module(optimizer, mesh)
  return model, optimizer, SGD_STEP if sgd else ADAMW_STEP


def run_step(model, optimizer, step, batch, mesh=None):
  batch = train_step_lib.model_inputs(batch)
  if mesh is None:
    return {k: float(v) for k, v in jax.device_get(step(model, optimizer, batch)).items()}
  with parallel.mesh_context(mesh):
    metrics = step(model, optimizer, parallel.shard_batch(batch, mesh))
  return {k: float(v) for k, v in jax.device_get(metrics).items()}


def params_of(model) -> dict[str, np.ndarray]:
  flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
  return {"/".join(map(str, path)): np.asarray(jax.device_get(v[...])) for path, v in flat}


def mode_check(out: pathlib.Path) -> dict:
  mesh = parallel.make_mesh(MESH_SPEC)
  results = {"mesh": dict(mesh.shape), "devices": jax.device_count(), "step": {}}
  for pe in ("rope", "alibi", "t5"):
    single = build(pe, sgd=True)
    sharded = build(pe, mesh, sgd=True)
    before = params_of(single[0])
    m_single = run_step(*single, batch_at(0))
    m_mesh = run_step(*sharded, batch_at(0), mesh)
    after_single, after_mesh = params_of(single[0]), params_of(sharded[0])
    query = sharded[0].blocks[0].attention.query.kernel[...]
    results["step"][pe] = {
        "loss_single": m_single["loss"], "loss_mesh": m_mesh["loss"],
        "grad_norm_single": m_single["grad_norm"], "grad_norm_mesh": m_mesh["grad_norm"],
        "max_param_diff": max(float(np.max(np.abs(after_single[k] - after_mesh[k])))
                              for k in after_single),
        "min_param_change": min(float(np.max(np.abs(after_single[k] - before[k])))
                                for k in after_single),
        "query_spec": str(query.sharding.spec),
        "query_devices": len(query.sharding.device_set),
    }

  # Eval step on 3 rows (data=4 does not divide them: the batch is left to the partitioner).
  model_single, _, _ = build("alibi")
  model_mesh, _, _ = build("alibi", mesh)
  rows = {k: v[:3] for k, v in batch_at(5).items()}
  eval_single = jax.device_get(train_step_lib.eval_step(model_single, rows))
  with parallel.mesh_context(mesh):
    eval_mesh = jax.device_get(train_step_lib.eval_step(model_mesh, rows))
  results["eval"] = {"single": float(eval_single["nll_sum"]), "mesh": float(eval_mesh["nll_sum"])}
  # Blockwise attention (the PE bias evaluated per tile) on the mesh.
  blockwise = nnx.jit(lambda m, x: m(x, attention="blockwise"))
  logits_single = np.asarray(blockwise(model_single, rows["inputs"]))
  with parallel.mesh_context(mesh):
    logits_mesh = np.asarray(jax.device_get(blockwise(model_mesh, rows["inputs"])))
  results["blockwise_max_logit_diff"] = float(np.max(np.abs(logits_single - logits_mesh)))

  # Checkpoint of step 2 written on the mesh (AdamW, as in training runs).
  model, optimizer, step = build("rope", mesh)
  losses = [run_step(model, optimizer, step, batch_at(i), mesh)["loss"] for i in range(2)]
  directory = out / "checkpoints"
  with checkpoint_lib.Checkpointer(directory, async_save=False) as ckpt:
    ckpt.save(2, model=model, optimizer=optimizer, data_state={"step": 2})
  losses.append(run_step(model, optimizer, step, batch_at(2), mesh)["loss"])
  np.savez(out / "batch_2.npz", **batch_at(2))
  # Restore onto another mesh (fsdp=4: parameters and moments split over the model width too).
  other_mesh = parallel.make_mesh("fsdp=4,model=2")
  model, optimizer, step = build("rope", other_mesh)
  with checkpoint_lib.Checkpointer(directory) as ckpt:
    ckpt.restore(model, optimizer)
  other_loss = run_step(model, optimizer, step, batch_at(2), other_mesh)["loss"]
  moment_specs = sorted({str(x.sharding.spec) for x in jax.tree.leaves(
      nnx.state(optimizer, nnx.optimizer.OptVariable))})
  results["checkpoint"] = {
      "losses": losses, "directory": str(directory), "batch": str(out / "batch_2.npz"),
      # JSON-safe: the PE as its registry name and flat fields (pejax.nn.pe_config rebuilds it).
      "model_config": {**dataclasses.asdict(model_config("rope")),
                       "pe": model_config("rope").pe_name,
                       "pe_fields": model_config("rope").pe.fields()},
      "optim_config": optim_config().to_dict(), "total_steps": STEPS,
      "other_mesh": dict(other_mesh.shape), "other_mesh_loss": other_loss,
      "other_mesh_query_spec": str(model.blocks[0].attention.query.kernel[...].sharding.spec),
      "other_mesh_moment_specs": moment_specs}

  # The whole experiment (what launch.py runs) on the mesh.
  lines = []
  config = experiment_config_for(out / "run")
  run = experiment.train_and_evaluate(config, log=lines.append)
  results["experiment"] = {
      "config": json.loads(config.to_json_best_effort()),
      "losses": run.train.losses, "workdir": str(run.workdir),
      "mesh_line": [line for line in lines if line.startswith("mesh:")],
      "files": sorted(p.name for p in run.workdir.iterdir())}
  return results


def experiment_config_for(workdir: pathlib.Path):
  """A tiny experiment (its JSON goes to the test, which runs it on one device)."""
  config = experiment_config.get_default_config()
  config.workdir = str(workdir)
  config.model.num_layers, config.model.d_model, config.model.num_heads = 1, 32, 2
  config.data.train_len, config.data.batch_size = 32, 8
  config.train.steps, config.train.log_every = 3, 1
  config.train.eval_every, config.train.checkpoint_every = 0, 0
  config.optim.warmup_steps = 1
  config.eval.lens = "32"
  config.eval.num_tokens = 128
  config.mesh.spec = "" if jax.device_count() == 1 else MESH_SPEC
  return config


def mode_timing(out: pathlib.Path, repeats: int = 60) -> dict:
  """Median and minimum wall time of a train step (batch placement and metric read included).

  The two placements alternate step by step, so that load from other processes affects both
  alike; the minimum is the least disturbed figure.
  """
  del out
  mesh = parallel.make_mesh(MESH_SPEC)
  runs = {"one_device": (build("rope"), None), "mesh_8": (build("rope", mesh), mesh)}
  times = {name: [] for name in runs}
  for name, (state, where) in runs.items():
    run_step(*state, batch_at(0), where)  # Compile.
  for i in range(repeats):
    for name, (state, where) in runs.items():
      start = time.perf_counter()
      run_step(*state, batch_at(i + 1), where)
      times[name].append(time.perf_counter() - start)
  results = {f"{name}_{stat}_ms": 1e3 * float(fn(t)) for name, t in times.items()
             for stat, fn in (("median", np.median), ("min", np.min))}
  results["ratio_median"] = results["mesh_8_median_ms"] / results["one_device_median_ms"]
  results["ratio_min"] = results["mesh_8_min_ms"] / results["one_device_min_ms"]
  return results


def main() -> None:
  mode, out = sys.argv[1], pathlib.Path(sys.argv[2])
  out.mkdir(parents=True, exist_ok=True)
  results = {"check": mode_check, "timing": mode_timing}[mode](out)
  (out / f"{mode}.json").write_text(json.dumps(results, indent=1))
  print(json.dumps(results))


if __name__ == "__main__":
  main()
