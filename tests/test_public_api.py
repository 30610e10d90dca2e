"""The public API the project's design promises (docs/public_api.md) exists and is documented.

Besides the names docs/public_api.md lists, every public function and class of the subpackages'
``__all__`` carries its own Google-style docstring: ``Args:`` when it takes parameters,
``Returns:`` (or ``Yields:``) when it returns something, and a bracketed shape such as
``[B, L, H, D]`` when its signature mentions arrays. A module docstring does not count.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

from absl.testing import absltest
import jax

import pejax
import pejax.hf
import pejax.nn

# Packages whose ``__all__`` is the public API checked docstring by docstring.
PUBLIC_PACKAGES = (
    "pejax", "pejax.encodings", "pejax.nn", "pejax.data", "pejax.eval", "pejax.eval.ruler",
    "pejax.train", "pejax.parallel", "pejax.hf",
)

# Annotation text that marks a signature as taking or returning arrays.
_ARRAY_ANNOTATION = re.compile(r"Array|ndarray")
# A shape in brackets: "[B, L, H, D]", "[num_heads]", "[..., L]", "[*batch, L]", "[L + 1, D // 2]",
# "[split[a] / 2]"; not subscripts such as "x[0]" or "list[str]" (the bracket follows no
# identifier character).
_DIM = r"(?:\.\.\.|\*?[A-Za-z_0-9](?:[A-Za-z_0-9 +*/-]|\[[A-Za-z_0-9 +*/-]*\])*)"
_SHAPE = re.compile(rf"(?<![A-Za-z_0-9\]])\[\s*{_DIM}(?:\s*,\s*{_DIM})*\s*,?\s*\]")
_RETURNS = re.compile(r"^\s*(Returns|Yields):", re.MULTILINE)
_ARGS = re.compile(r"^\s*Args:", re.MULTILINE)


def _annotation_text(annotation: Any) -> str:
  if annotation is inspect.Signature.empty:
    return ""
  if isinstance(annotation, str):  # `from __future__ import annotations`.
    return annotation
  return inspect.formatannotation(annotation)


def _returns_nothing(annotation: Any) -> bool:
  return annotation is None or annotation is type(None) or annotation == "None"


def _takes_parameters(sig: inspect.Signature) -> bool:
  return any(name not in ("self", "cls") for name in sig.parameters)


def _own_doc(obj: Any) -> str:
  """The docstring written on ``obj`` itself (never inherited, never the module's)."""
  doc = obj.__doc__ if isinstance(obj.__doc__, str) else ""
  return inspect.cleandoc(doc) if doc else ""


def function_doc_problems(name: str, fn: Any) -> list[str]:
  """Docstring problems of a public function (empty when it is documented).

  Args:
    name: how the function is reported, e.g. ``"pejax.nn.build_pe"``.
    fn: the function (decorator wrappers such as ``jax.jit`` are unwrapped).

  Returns:
    One line per problem.
  """
  fn = inspect.unwrap(fn)
  doc = inspect.getdoc(fn) or ""
  if not doc.strip():
    return [f"{name}: no docstring of its own"]
  try:
    sig = inspect.signature(fn)
  except (TypeError, ValueError):
    return []
  problems = []
  if _takes_parameters(sig) and not _ARGS.search(doc):
    problems.append(f"{name}: takes parameters but its docstring has no Args:")
  if not _returns_nothing(sig.return_annotation) and not _RETURNS.search(doc):
    problems.append(f"{name}: returns a value but its docstring has no Returns:/Yields:")
  annotations = [p.annotation for p in sig.parameters.values()] + [sig.return_annotation]
  if any(_ARRAY_ANNOTATION.search(_annotation_text(a)) for a in annotations):
    if not _SHAPE.search(doc):
      problems.append(f"{name}: its signature mentions arrays but its docstring gives no shape "
                      "in brackets such as [B, L, D]")
  return problems


def _is_generated_doc(cls: type, doc: str) -> bool:
  # dataclasses and NamedTuple write "Name(field, ...)" when the class has no docstring.
  return doc.startswith(f"{cls.__name__}(")


def class_doc_problems(name: str, cls: type) -> list[str]:
  """Docstring problems of a public class and its public methods (empty when documented).

  Args:
    name: how the class is reported, e.g. ``"pejax.nn.Decoder"``.
    cls: the class; only methods defined in its own body (``vars(cls)``) are checked.

  Returns:
    One line per problem.
  """
  problems = []
  doc = _own_doc(cls)
  if len(doc) <= 20 or _is_generated_doc(cls, doc):
    problems.append(f"{name}: no real class docstring")
  for attr, value in vars(cls).items():
    if attr.startswith("_") and attr != "__call__":
      continue
    if isinstance(value, (staticmethod, classmethod)):
      value = value.__func__
    if not inspect.isfunction(value):
      continue
    if not getattr(value, "__qualname__", "").startswith(f"{cls.__qualname__}."):
      continue  # Generated or aliased, not written in this class body.
    method = f"{name}.{attr}"
    method_doc = _own_doc(value)
    if not method_doc:
      problems.append(f"{method}: no docstring of its own")
      continue
    try:
      sig = inspect.signature(value)
    except (TypeError, ValueError):
      continue
    if _takes_parameters(sig) and not _ARGS.search(method_doc):
      problems.append(f"{method}: takes parameters but its docstring has no Args:")
    returns = sig.return_annotation
    if (returns is not inspect.Signature.empty and not _returns_nothing(returns)
        and not _RETURNS.search(method_doc)):
      problems.append(f"{method}: returns a value but its docstring has no Returns:/Yields:")
  return problems


def public_doc_problems() -> list[str]:
  """Docstring problems of every public function and class of :data:`PUBLIC_PACKAGES`.

  Returns:
    One line per problem, each object checked once under the first name that exports it.
  """
  problems, seen = [], set()
  for package_name in PUBLIC_PACKAGES:
    package = importlib.import_module(package_name)
    for name in package.__all__:
      obj = getattr(package, name)
      if id(obj) in seen:
        continue
      seen.add(id(obj))
      qualified = f"{package_name}.{name}"
      if inspect.isclass(obj):
        if obj.__module__.startswith("pejax"):
          problems += class_doc_problems(qualified, obj)
      elif callable(obj) and inspect.isfunction(inspect.unwrap(obj)):
        problems += function_doc_problems(qualified, obj)
  return problems


# The transforms of docs/public_api.md (the decoder and hf names are checked below).
DESIGN_NAMES = (
    "sinusoidal_table", "sinusoidal_embedding", "RopeConfig", "LinearScaling", "NTKScaling",
    "DynamicNTKScaling", "YaRNScaling", "Llama3Scaling", "LongRoPEScaling", "rope_inv_freq",
    "rope_config_from_hf", "rope_config_to_hf", "apply_rope", "alibi_slopes", "alibi_bias",
    "t5_relative_position_bucket", "randomized_positions", "LearnedPositionEmbedding",
    "T5RelativeBias",
)


class PublicApiTest(absltest.TestCase):

  def test_design_names_exist(self):
    for name in DESIGN_NAMES:
      self.assertTrue(hasattr(pejax, name), name)
    self.assertTrue(hasattr(pejax.nn, "Decoder"))
    self.assertTrue(hasattr(pejax.nn, "DecoderConfig"))
    for name in ("from_pretrained", "save_pretrained", "load_tokenizer", "ByteTokenizer"):
      self.assertTrue(hasattr(pejax.hf, name), name)
    self.assertTrue(callable(pejax.generate))
    # A trained run out of pejax: load_run, python -m pejax.sample, python -m pejax.hf.export.
    self.assertTrue(callable(pejax.load_run))
    self.assertEqual(pejax.LoadedRun.__module__, "pejax.train.run_loading")
    for module in ("pejax.sample", "pejax.hf.export"):
      self.assertTrue(callable(importlib.import_module(module).main), module)

  def test_every_public_name_is_documented(self):
    self.assertEqual(len(set(pejax.__all__)), len(pejax.__all__))
    for name in pejax.__all__:
      if name == "__version__":
        continue
      obj = getattr(pejax, name)
      doc = inspect.getdoc(obj)
      self.assertTrue(doc and len(doc) > 20, f"{name} has no real docstring")

  def test_transforms_document_shapes_and_references(self):
    for name in ("apply_rope", "alibi_bias", "sinusoidal_table", "rope_inv_freq",
                 "t5_relative_position_bucket", "randomized_positions"):
      obj = getattr(pejax, name)
      module_doc = inspect.getdoc(inspect.getmodule(obj)) or ""
      doc = (inspect.getdoc(obj) or "") + module_doc
      self.assertIn("[", doc, f"{name}: no shapes documented")
      self.assertRegex(doc, r"arXiv|Press|Raffel|Vaswani|Su et al", f"{name}: no reference")

  def test_every_public_function_and_method_has_its_own_docstring(self):
    problems = public_doc_problems()
    self.assertEmpty(problems, f"{len(problems)} docstring problems:\n" + "\n".join(problems))

  def test_checker_reports_undocumented_function_in_documented_module(self):
    # This module has a docstring; the old test accepted it in place of the function's.
    def undocumented(x: jax.Array, n: int) -> jax.Array:
      return x * n

    def no_shapes(x: jax.Array) -> jax.Array:
      """Doubles.

      Args:
        x: the input.

      Returns:
        2 x.
      """
      return 2 * x

    def documented(x: jax.Array) -> jax.Array:
      """Doubles.

      Args:
        x: float32 `[B, L]`.

      Returns:
        `2 * x`, float32 [B, L].
      """
      return 2 * x

    self.assertTrue(inspect.getdoc(inspect.getmodule(undocumented)))
    self.assertEqual(function_doc_problems("undocumented", undocumented),
                     ["undocumented: no docstring of its own"])
    self.assertLen(function_doc_problems("no_shapes", no_shapes), 1)
    self.assertIn("no shape", function_doc_problems("no_shapes", no_shapes)[0])
    self.assertEmpty(function_doc_problems("documented", documented))

  def test_checker_reports_undocumented_class_and_methods(self):

    class Undocumented:

      def __call__(self, x: int) -> int:
        return x

      def method(self, x: int) -> int:
        """Identity, without sections."""
        return x

      def _private(self, x):
        return x

    problems = class_doc_problems("Undocumented", Undocumented)
    self.assertIn("Undocumented: no real class docstring", problems)
    self.assertIn("Undocumented.__call__: no docstring of its own", problems)
    self.assertTrue(any(p.startswith("Undocumented.method: takes parameters") for p in problems))
    self.assertTrue(any(p.startswith("Undocumented.method: returns") for p in problems))
    self.assertFalse(any("_private" in p for p in problems))

  def test_version(self):
    self.assertRegex(pejax.__version__, r"^\d+\.\d+\.\d+$")


if __name__ == "__main__":
  absltest.main()
