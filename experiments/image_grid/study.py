"""Train a tiny ViT per positional encoding at one patch grid, evaluate at a larger one.

Protocol: every PE trains on the 8x8 digits with 2x2 patches (a 4x4 grid) and is evaluated on
the held-out digits (1) as trained and (2) upsampled by ``eval_scale`` (16x16 images, an 8x8
grid) in two ways:

* ``extrapolate``: integer positions of the larger grid (0..7), offsets never seen in training;
  n/a for the learned table (it has no rows past the training grid);
* ``interpolate``: the larger grid squeezed into the training range, float positions
  ``0, 0.5, ..., 3.5`` (:func:`pejax.encodings.position_grids.interpolation_scale`) for the
  sinusoidal and rotary encodings; for the learned table its bilinear resize to 8x8, as ViT /
  DeiT do when fine-tuning at a higher resolution.

With upsampled images, interpolated positions put every patch where its content was in training;
extrapolated positions keep the training *spacing* of positions instead. Both meet content the
model never saw (each new patch covers a quarter of an old one), so all PEs lose accuracy; the
comparison is between PEs under the same shift.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional

from absl import logging
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments.image_grid import digits
from experiments.image_grid import vit
from pejax.encodings import position_grids
from pejax.train import optimizer as optimizer_lib

EVALS = ("train_grid", "extrapolate", "interpolate")


@dataclasses.dataclass(frozen=True)
class StudyConfig:
  """Everything that defines one run of the study.

  Attributes:
    pes: positional encodings to compare (``vit.PE_CHOICES``).
    seeds: model / data-order seeds; each PE trains once per seed.
    steps: optimizer steps per training run.
    batch_size: images per step.
    learning_rate: peak AdamW learning rate (linear warm-up, cosine decay to 10%).
    warmup_steps: warm-up steps.
    weight_decay: AdamW decoupled weight decay.
    eval_scale: integer upsampling factor of the evaluation images (2: 16x16, an 8x8 grid).
    upsample_method: ``jax.image.resize`` method for the evaluation images.
    d_model: ViT width.
    num_heads: ViT heads.
    num_layers: ViT blocks.
    mlp_dim: ViT MLP width.
    patch_size: patch side (2: a 4x4 grid on the 8x8 digits).
  """
  pes: tuple[str, ...] = vit.PE_CHOICES
  seeds: tuple[int, ...] = (0, 1, 2)
  steps: int = 1500
  batch_size: int = 128
  learning_rate: float = 3e-3
  warmup_steps: int = 100
  weight_decay: float = 0.05
  eval_scale: int = 2
  upsample_method: str = "bilinear"
  d_model: int = 64
  num_heads: int = 4
  num_layers: int = 2
  mlp_dim: int = 128
  patch_size: int = 2

  def __post_init__(self):
    for pe in self.pes:
      if pe not in vit.PE_CHOICES:
        raise ValueError(f"pes must contain names from {list(vit.PE_CHOICES)}, got {pe!r}")
    if not self.pes or not self.seeds:
      raise ValueError(f"pes and seeds must not be empty, got {self.pes!r}, {self.seeds!r}")
    for name in ("steps", "batch_size", "eval_scale"):
      value = getattr(self, name)
      if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if self.upsample_method not in digits.UPSAMPLE_METHODS:
      raise ValueError(
          f"upsample_method must be one of {list(digits.UPSAMPLE_METHODS)}, got "
          f"{self.upsample_method!r}")

  def model_config(self, pe: str) -> vit.ViTConfig:
    return vit.ViTConfig(pe=pe, patch_size=self.patch_size, d_model=self.d_model,
                         num_heads=self.num_heads, num_layers=self.num_layers,
                         mlp_dim=self.mlp_dim)


def _loss_fn(model: vit.TinyViT, images, labels, positions):
  logits = model(images, positions=positions)
  return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


@nnx.jit
def _train_step(model: vit.TinyViT, optimizer: nnx.Optimizer, images, labels, positions):
  loss, grads = nnx.value_and_grad(_loss_fn)(model, images, labels, positions)
  optimizer.update(model, grads)
  return loss


@nnx.jit
def _accuracy(model: vit.TinyViT, images, labels, positions):
  logits = model(images, positions=positions)
  return jnp.mean((jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32))


def train_one(config: StudyConfig, pe: str, seed: int, data: digits.DigitsSplit
              ) -> tuple[vit.TinyViT, float]:
  """Trains one model; returns it and its final training loss (mean of the last 20 steps)."""
  model_config = config.model_config(pe)
  model = vit.TinyViT(model_config, rngs=nnx.Rngs(params=seed))
  schedule = optimizer_lib.warmup_cosine_schedule(
      learning_rate=config.learning_rate, total_steps=config.steps,
      warmup_steps=min(config.warmup_steps, config.steps - 1), min_lr_ratio=0.1)
  tx = optax.adamw(schedule, b1=0.9, b2=0.98, weight_decay=config.weight_decay)
  opt = nnx.Optimizer(model, tx, wrt=nnx.Param)
  positions = position_grids.grid_positions(model_config.train_grid)
  rng = np.random.default_rng(seed)
  n = len(data.train_images)
  order = rng.permutation(n)
  cursor = 0
  losses = []
  for _ in range(config.steps):
    if cursor + config.batch_size > n:
      order, cursor = rng.permutation(n), 0
    idx = order[cursor:cursor + config.batch_size]
    cursor += config.batch_size
    loss = _train_step(model, opt, jnp.asarray(data.train_images[idx]),
                       jnp.asarray(data.train_labels[idx]), positions)
    losses.append(loss)
  return model, float(np.mean(jax.device_get(losses[-20:])))


def evaluate(model: vit.TinyViT, config: StudyConfig, data: digits.DigitsSplit
             ) -> dict[str, Optional[float]]:
  """Test accuracy at the training grid and at the upsampled grid (extrapolate / interpolate)."""
  cfg = model.config
  labels = jnp.asarray(data.test_labels)
  small = jnp.asarray(data.test_images)
  large = digits.upsample(data.test_images, config.eval_scale, method=config.upsample_method)
  side = large.shape[-1] // cfg.patch_size
  large_grid = (side, side)
  results: dict[str, Optional[float]] = {
      "train_grid": float(_accuracy(model, small, labels,
                                    position_grids.grid_positions(cfg.train_grid)))}
  if cfg.pe == "learned":
    results["extrapolate"] = None  # a learned table has no rows for unseen positions.
  else:
    results["extrapolate"] = float(_accuracy(model, large, labels,
                                             position_grids.grid_positions(large_grid)))
  scale = position_grids.interpolation_scale(cfg.train_grid, large_grid)
  results["interpolate"] = float(_accuracy(
      model, large, labels, position_grids.grid_positions(large_grid, scale=scale)))
  return results


def run_study(config: StudyConfig, *, log: Callable[[str], None] = logging.info) -> dict:
  """Trains and evaluates every (PE, seed); returns JSON-ready results.

  Returns:
    ``{"config": ..., "results": {pe: {eval: [accuracy per seed]}}, "train_loss": {pe: [...]},
    "seconds": {pe: [...]}, "num_params": {pe: int}, "data": {...}}``; accuracies are floats in
    [0, 1] or None (n/a).
  """
  data = digits.load_digits_split()
  results, train_loss, seconds, num_params = {}, {}, {}, {}
  for pe in config.pes:
    results[pe] = {name: [] for name in EVALS}
    train_loss[pe], seconds[pe] = [], []
    for seed in config.seeds:
      start = time.perf_counter()
      model, loss = train_one(config, pe, seed, data)
      scores = evaluate(model, config, data)
      elapsed = time.perf_counter() - start
      for name in EVALS:
        results[pe][name].append(scores[name])
      train_loss[pe].append(loss)
      seconds[pe].append(elapsed)
      num_params[pe] = int(sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param))))
      log(f"{pe:>10s} seed {seed}: loss {loss:.3f} | " + " ".join(
          f"{k} {'n/a' if v is None else f'{v:.3f}'}" for k, v in scores.items())
          + f" | {elapsed:.1f}s")
  return {
      "config": dataclasses.asdict(config),
      "results": results,
      "train_loss": train_loss,
      "seconds": seconds,
      "num_params": num_params,
      "data": {"train": int(len(data.train_images)), "test": int(len(data.test_images)),
               "image_size": int(data.train_images.shape[-1])},
  }
