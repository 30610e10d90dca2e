"""Smoke tests of the image-grid study (experiments/image_grid): tiny runs, real files."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from absl.testing import absltest
import numpy as np
import pytest

from experiments.image_grid import digits
from experiments.image_grid import report
from experiments.image_grid import study
from experiments.image_grid import vit
from pejax.encodings import position_grids

_REPO = pathlib.Path(__file__).resolve().parents[2]


class ImageGridTest(absltest.TestCase):

  @pytest.mark.slow
  def test_tiny_study_writes_report(self):
    config = study.StudyConfig(pes=("learned", "rope_mixed"), seeds=(0,), steps=3, batch_size=16,
                               warmup_steps=1, d_model=16, num_heads=2, num_layers=1, mlp_dim=16)
    run = study.run_study(config, log=lambda _: None)
    workdir = pathlib.Path(self.create_tempdir().full_path)
    paths = report.write_report(workdir, run, {"command": "test", "date": "today",
                                               "machine": "cpu", "wall_seconds": 1.0})
    for path in paths.values():
      self.assertTrue(path.exists() and path.stat().st_size > 0, path)
    saved = json.loads(paths["results"].read_text())
    self.assertEqual(set(saved["results"]), {"learned", "rope_mixed"})
    self.assertIsNone(saved["results"]["learned"]["extrapolate"][0])  # n/a, not a number
    self.assertIsNone(saved["summary"]["learned"]["extrapolate"])
    for pe in ("learned", "rope_mixed"):
      for name in ("train_grid", "interpolate"):
        (acc,) = saved["results"][pe][name]
        self.assertBetween(acc, 0.0, 1.0)
    text = paths["report"].read_text()
    self.assertIn("| learned |", text)
    self.assertIn("n/a", text)
    self.assertIn("8x8 interpolated", text)
    self.assertEqual(paths["plot"].read_bytes()[:4], b"\x89PNG")

  @pytest.mark.slow
  def test_vit_accepts_any_grid(self):
    from flax import nnx  # pylint: disable=g-import-not-at-top
    forward = nnx.jit(lambda model, images: model(images))
    for pe in vit.PE_CHOICES:
      model = vit.TinyViT(vit.ViTConfig(pe=pe, d_model=16, num_heads=2, num_layers=1,
                                        mlp_dim=16), rngs=nnx.Rngs(0))
      small = forward(model, np.zeros((2, 8, 8), np.float32))
      large = forward(model, np.zeros((2, 16, 16), np.float32))
      self.assertEqual(small.shape, (2, 10))
      self.assertEqual(large.shape, (2, 10))
      self.assertTrue(np.all(np.isfinite(np.asarray(large))), pe)

  def test_liere_and_comrope_are_study_choices(self):
    self.assertContainsSubset(("axial_rope", "rope_mixed", "liere", "comrope"), vit.PE_CHOICES)
    self.assertEqual(study.StudyConfig().pes, vit.PE_CHOICES)
    with self.assertRaisesRegex(ValueError, "liere_block_size"):
      vit.ViTConfig(pe="liere", d_model=16, num_heads=2, liere_block_size=6)

  def test_comrope_is_relative_on_the_grid_and_liere_is_not(self):
    # Mean pooling over patches: a relative PE gives the same logits when every patch position
    # moves by one offset. ComRoPE's generators commute whatever they learned; LieRE's learned
    # row and column generators need not (at init both are axial RoPE, which commutes).
    from flax import nnx  # pylint: disable=g-import-not-at-top
    import jax  # pylint: disable=g-import-not-at-top
    images = np.random.RandomState(0).rand(2, 8, 8).astype(np.float32)
    positions = np.asarray(position_grids.grid_positions((4, 4)))
    shifted = positions + np.array([3, 5], np.int32)
    changes = {}
    for pe in ("comrope", "liere"):
      model = vit.TinyViT(vit.ViTConfig(pe=pe, d_model=16, num_heads=2, num_layers=1,
                                        mlp_dim=16), rngs=nnx.Rngs(0))
      at_init = abs(np.asarray(model(images, positions=shifted) - model(images,
                                                                         positions=positions)))
      self.assertLess(float(at_init.max()), 1e-4, pe)
      rope = model.blocks[0].rope
      keys = jax.random.split(jax.random.key(1), 2)
      rope.generator_params[...] = jax.random.normal(keys[0], rope.generator_params[...].shape)
      if rope.multipliers is not None:
        rope.multipliers[...] = jax.random.normal(keys[1], rope.multipliers[...].shape)
      learned = np.asarray(model(images, positions=shifted) - model(images, positions=positions))
      changes[pe] = float(np.abs(learned).max())
    self.assertLess(changes["comrope"], 1e-4)
    self.assertGreater(changes["liere"], 1e-3)

  @pytest.mark.slow
  def test_liere_and_comrope_train_in_the_study(self):
    config = study.StudyConfig(pes=("liere", "comrope"), seeds=(0,), steps=2, batch_size=8,
                               warmup_steps=1, d_model=16, num_heads=2, num_layers=1, mlp_dim=16)
    run = study.run_study(config, log=lambda _: None)
    for pe in ("liere", "comrope"):
      for name in ("train_grid", "extrapolate", "interpolate"):
        (acc,) = run["results"][pe][name]
        self.assertBetween(acc, 0.0, 1.0)
      self.assertTrue(np.isfinite(run["train_loss"][pe][0]), pe)

  def test_data(self):
    data = digits.load_digits_split()
    self.assertEqual(len(data.train_images) + len(data.test_images), 1797)
    self.assertEqual(data.train_images.shape[1:], (8, 8))
    self.assertLessEqual(float(data.train_images.max()), 1.0)
    up = digits.upsample(data.test_images[:3], 2, method="nearest")
    self.assertEqual(up.shape, (3, 16, 16))
    np.testing.assert_array_equal(np.asarray(up)[:, ::2, ::2], data.test_images[:3])
    with self.assertRaisesRegex(ValueError, "method"):
      digits.upsample(data.test_images[:1], 2, method="area51")

  def test_bad_config(self):
    with self.assertRaisesRegex(ValueError, "pes"):
      study.StudyConfig(pes=("alibi",))
    with self.assertRaisesRegex(ValueError, "steps"):
      study.StudyConfig(steps=0)

  @pytest.mark.slow
  def test_command_line(self):
    workdir = self.create_tempdir().full_path
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.image_grid", "--pes=axial_rope", "--steps=2",
         "--num_seeds=1", "--batch_size=8", "--d_model=16", "--num_heads=2", "--num_layers=1",
         f"--workdir={workdir}"],
        cwd=_REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn("| axial_rope |", proc.stdout)
    for name in ("report.md", "results.json", "image_grid.png"):
      self.assertTrue((pathlib.Path(workdir) / name).exists(), name)


if __name__ == "__main__":
  absltest.main()
