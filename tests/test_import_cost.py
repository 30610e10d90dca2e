"""``import pejax`` and ``import pejax.encodings`` load only what they need (lazy re-exports)."""

import json
import os
import pathlib
import subprocess
import sys

from absl.testing import absltest

import pejax
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
HEAVY = ("flax", "optax", "orbax", "orbax.checkpoint", "ml_collections", "matplotlib")


def _modules_after(statement: str) -> list[str]:
  """Which of HEAVY a fresh interpreter has loaded after running ``statement``."""
  code = f"import json, sys\n{statement}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
  proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=120, check=True)
  return json.loads(proc.stdout.splitlines()[-1])


class ImportCostTest(absltest.TestCase):

  @pytest.mark.slow
  def test_pure_transforms_import_no_training_stack(self):
    self.assertEqual(_modules_after("import pejax, pejax.encodings\n"
                                    "pejax.apply_rope, pejax.alibi_bias, pejax.sinusoidal_table"),
                     [])
    # An NNX module loads Flax (and Flax loads Optax), but still no Orbax or ml_collections.
    loaded = _modules_after("import pejax.encodings; pejax.encodings.LearnedPositionEmbedding")
    self.assertIn("flax", loaded)
    self.assertNotIn("orbax", loaded)
    self.assertNotIn("ml_collections", loaded)

  def test_every_lazy_name_resolves(self):
    for name in pejax.__all__:
      self.assertIsNotNone(getattr(pejax, name), name)
    for name in ("nn", "encodings", "train", "data", "eval", "parallel"):
      self.assertEqual(getattr(pejax, name).__name__, f"pejax.{name}")
    self.assertContainsSubset(set(pejax.__all__), set(dir(pejax)))
    with self.assertRaisesRegex(AttributeError, "no attribute 'apply_rop'"):
      getattr(pejax, "apply_rop")


if __name__ == "__main__":
  absltest.main()
