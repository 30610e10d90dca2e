"""What the golden scripts of this directory share: loading a reference file, writing float32.

The scripts run in their own venv (torch, the reference projects), from this directory, so they
``import golden_io``; pejax never imports this file.
"""

import importlib.util

import numpy as np


def load_function(path: str, module_name: str, function: str):
  """``function`` of the Python file at ``path`` (a reference implementation fetched by hand)."""
  spec = importlib.util.spec_from_file_location(module_name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return getattr(module, function)


def _rounded(v):
  if isinstance(v, list):
    return [_rounded(x) for x in v]
  return float(f"{v:.9g}")  # 9 significant digits identify a float32 exactly.


def float32_lists(t) -> list:
  """A torch tensor (any float dtype, gradients detached) or array as nested lists of float32
  values, each written with the 9 significant digits that identify it."""
  if hasattr(t, "detach"):  # torch, without importing it here.
    t = t.detach().float().cpu().numpy()
  return _rounded(np.asarray(t, np.float32).tolist())
