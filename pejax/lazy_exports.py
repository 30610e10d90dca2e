"""Lazy re-exports for package ``__init__`` files (PEP 562 module ``__getattr__``).

``import pejax`` or ``import pejax.encodings`` loads only what it needs: a name is imported from
its module the first time it is read, so the pure transforms never pull in Flax, Optax, Orbax or
ml_collections (in the manner of optax's lazy sub-namespaces).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
import importlib
import sys
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], *, submodules: tuple[str, ...] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
  """Returns ``(__getattr__, __dir__)`` for ``package`` that import each name on first use.

  Args:
    package: the package's ``__name__``.
    exports: public name -> absolute module path the name is read from.
    submodules: subpackage names (``"nn"``) that attribute access imports, so that
      ``pejax.nn.Decoder`` works after a plain ``import pejax``.

  Returns:
    The module-level ``__getattr__`` and ``__dir__`` functions for the package.
  """

  def __getattr__(name: str) -> Any:  # pylint: disable=invalid-name
    module = sys.modules[package]
    if name in exports:
      value = getattr(importlib.import_module(exports[name]), name)
    elif name in submodules:
      value = importlib.import_module(f"{package}.{name}")
    else:
      raise AttributeError(f"module {package!r} has no attribute {name!r}")
    setattr(module, name, value)  # Later reads skip __getattr__.
    return value

  def __dir__() -> list[str]:  # pylint: disable=invalid-name
    return sorted(set(vars(sys.modules[package])) | set(exports) | set(submodules))

  return __getattr__, __dir__
