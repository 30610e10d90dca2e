"""The committed tiny Hugging Face checkpoints (tests/golden/make_hf_model_fixtures.py)."""

from __future__ import annotations

import functools
import json
import pathlib

from flax import nnx
import numpy as np

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
CASES = tuple(EXPECTED["cases"])
PROMPTS = np.asarray(EXPECTED["prompts"], np.int32)  # [2, 12]
PARITY_TOLERANCE = 1e-4  # max |logit diff| / max |logit| (the target).


def path(name: str) -> pathlib.Path:
  """The fixture directory ``name``."""
  return FIXTURES / name


def reference_logits(name: str) -> np.ndarray:
  """transformers' float32 logits ``[2, 12, V]`` of :data:`PROMPTS`."""
  return np.load(FIXTURES / name / "logits.npy")


@functools.lru_cache(maxsize=None)
def load(name: str, **overrides):
  """``pejax.hf.from_pretrained`` of a fixture, once per process and arguments."""
  import pejax.hf  # pylint: disable=g-import-not-at-top
  return pejax.hf.from_pretrained(path(name), **overrides)


@nnx.jit
def logits(model, tokens):
  """``model(tokens)`` jitted: one program a model and shape, not one per primitive."""
  return model(tokens)


def relative_error(logits, reference) -> float:
  """``max |logits - reference| / max |reference|``."""
  return float(np.abs(np.asarray(logits, np.float64) - reference).max()
               / np.abs(reference).max())
