"""``python -m experiments.image_grid [--quick]``: PEs for images at a larger patch grid.

Trains a tiny ViT per positional encoding on scikit-learn's 8x8 digits at a 4x4 patch grid and
evaluates at an 8x8 grid (upsampled images); writes ``report.md``, ``results.json`` and
``image_grid.png`` into ``--workdir``. ``--quick`` (one seed, few steps) takes about a minute or
two on 2 CPU cores; the default runs 3 seeds with more steps.
"""

from __future__ import annotations

# Run as a program: re-execute with the allocator settings before the imports below, not
# after them (pejax.runtime_env; importing it loads nothing else).
from pejax import runtime_env  # pylint: disable=wrong-import-position
runtime_env.apply_when_main(__name__)
# pylint: disable=wrong-import-position

import datetime
import sys
import time

from absl import app
from absl import flags
from absl import logging

from experiments.image_grid import report
from experiments.image_grid import study
from experiments.image_grid import vit
from pejax import provenance

_QUICK = flags.DEFINE_bool("quick", False, "One seed and few steps (about a minute on 2 CPUs).")
_WORKDIR = flags.DEFINE_string("workdir", "runs/image_grid", "Output directory.")
_PES = flags.DEFINE_list("pes", list(vit.PE_CHOICES), "Positional encodings to compare.")
_NUM_SEEDS = flags.DEFINE_integer("num_seeds", 0, "Seeds per PE; 0 means 1 (quick) or 3.")
_STEPS = flags.DEFINE_integer("steps", 0, "Training steps per run; 0 means 300 (quick) or 1500.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 128, "Images per training step.")
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 3e-3, "Peak AdamW learning rate.")
_D_MODEL = flags.DEFINE_integer("d_model", 64, "ViT width.")
_NUM_HEADS = flags.DEFINE_integer("num_heads", 4, "ViT attention heads.")
_NUM_LAYERS = flags.DEFINE_integer("num_layers", 2, "ViT blocks.")
_EVAL_SCALE = flags.DEFINE_integer("eval_scale", 2, "Upsampling factor of evaluation images.")
_UPSAMPLE = flags.DEFINE_enum("upsample_method", "bilinear", ["nearest", "bilinear", "bicubic"],
                              "jax.image.resize method for evaluation images.")


def main(argv):
  del argv
  quick = _QUICK.value
  num_seeds = _NUM_SEEDS.value or (1 if quick else 3)
  config = study.StudyConfig(
      pes=tuple(_PES.value),
      seeds=tuple(range(num_seeds)),
      steps=_STEPS.value or (300 if quick else 1500),
      batch_size=_BATCH_SIZE.value,
      learning_rate=_LEARNING_RATE.value,
      warmup_steps=50 if quick else 100,
      eval_scale=_EVAL_SCALE.value,
      upsample_method=_UPSAMPLE.value,
      d_model=_D_MODEL.value,
      num_heads=_NUM_HEADS.value,
      num_layers=_NUM_LAYERS.value,
  )
  start = time.perf_counter()
  started = time.time()
  run = study.run_study(config, log=logging.info)
  command = " ".join(["python -m experiments.image_grid"] + sys.argv[1:])
  record = provenance.provenance(command=command, started=started)
  meta = {
      "command": command,
      "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
      "machine": record["machine"],
      "wall_seconds": time.perf_counter() - start,
      "provenance": record,
  }
  paths = report.write_report(_WORKDIR.value, run, meta)
  print(report.format_table(run))
  print(f"wrote {paths['report']}, {paths['results']}, {paths['plot']}")


if __name__ == "__main__":
  app.run(main)
