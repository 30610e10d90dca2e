"""The import graph of pejax is a DAG whose edges only run down the floors of CONTRIBUTING.md.

Every module under ``pejax/``, plus the upper floors ``experiments/**``, ``benchmarks/*.py`` and
``launch.py``, is parsed with ``ast`` (nothing is imported). Every import counts: module-level,
function-local (it runs on first call, so it closes a circle just as surely), the module paths
of a ``lazy_exports`` table and literal ``importlib.import_module("...")`` calls. Imports under
``if TYPE_CHECKING:`` are recorded but never run, so they are left out of the checks.

An import names the module it loads: ``from pejax.nn import attention`` is an edge to the
submodule ``pejax.nn.attention``; ``from pejax.nn import Decoder`` (a name, not a submodule)
and ``import pejax.nn`` are edges to the package's ``__init__``. So the usual "a package
``__init__`` re-exports its submodules, the submodules import one another directly" is no
circle, while a submodule that reads a name through its own package's ``__init__`` is one.

Three claims:

* no circle: no strongly connected component of more than one pejax module;
* the floors only run down: an import from a lower floor (``FLOORS``) to a higher one fails;
* no room is too big: no module under ``pejax/`` is over ``MAX_LINES`` lines.

``python -m tests.test_import_graph [ROOT]`` prints the census (rooms, floors, circles, upward
edges, file sizes) of the tree at ``ROOT`` (default: this checkout).
"""

from __future__ import annotations

import ast
import collections
from collections.abc import Iterable, Iterator, Mapping, Sequence
import dataclasses
import os
import pathlib
import sys

from absl.testing import absltest

# The tree checked: this checkout, or PEJAX_IMPORT_GRAPH_ROOT (to check another worktree).
ROOT = pathlib.Path(
    os.environ.get("PEJAX_IMPORT_GRAPH_ROOT", pathlib.Path(__file__).resolve().parents[1]))

# A module under pejax/ longer than this is more than one room.
MAX_LINES = 600
# The census lists modules over this many lines as the next candidates for a split.
WATCH_LINES = 400

# The floors, lowest first (CONTRIBUTING.md "Layers": data flows down, never back up). A module sits
# on the floor of the longest prefix below that names it; modules on one floor may import each
# other (the acyclicity check keeps them honest). An import from a lower floor to a higher one
# fails.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Standard-library-only helpers: lazy package exports, the process environment, the machine,
    # provenance.
    ("foundation", ("pejax.json_file", "pejax.lazy_exports", "pejax.runtime_env", "pejax.machine",
                    "pejax.one_line_parser", "pejax.provenance")),
    # Pure functions: tables, rotations, biases, frequency scalings.
    ("encodings", ("pejax.encodings",)),
    # Mesh, logical axes, sharding, jax.distributed start.
    ("parallel", ("pejax.parallel",)),
    # The Flax NNX decoder and attention; the PE through one interface.
    ("nn", ("pejax.nn",)),
    # Corpora, synthetic tasks, batch iterators.
    ("data", ("pejax.data",)),
    # Hugging Face checkpoints and tokenizers.
    ("hf", ("pejax.hf",)),
    # The experiment config and the decoder it describes: read by train and eval, so below them.
    ("config", ("pejax.experiment_config", "pejax.decoder_from_config")),
    # Train step, optimizer, checkpoints, metrics; perplexity-vs-length and friends.
    ("train/eval", ("pejax.train", "pejax.eval")),
    # The front door (the lazy pejax/__init__ re-exports every floor), run comparison and the
    # command line (launch.py's logic, pejax-launch / python -m pejax; studies are injected).
    ("top", ("pejax", "pejax.compare", "pejax.cli", "pejax.__main__", "pejax.hf.export")),
    # Study configs and the study library.
    ("experiments", ("experiments",)),
    # Entry points: the launcher and the benchmarks.
    ("entry", ("launch", "benchmarks")),
)

# Edge kinds: how the importing module reaches the imported one.
MODULE_LEVEL = "module-level"  # Runs when the importing module is imported.
LOCAL = "function-local"  # Runs when the function is first called.
LAZY = "lazy"  # A lazy_exports table or a literal importlib.import_module call.
TYPE_CHECKING_ONLY = "TYPE_CHECKING"  # Never runs.


@dataclasses.dataclass(frozen=True)
class Edge:
  """One import of a module of the tree by another.

  Attributes:
    source: the importing module (dotted name).
    target: the imported module (dotted name; a package stands for its ``__init__``).
    path: the importing file, relative to the root.
    line: the line of the import statement.
    kind: ``MODULE_LEVEL``, ``LOCAL``, ``LAZY`` or ``TYPE_CHECKING_ONLY``.
  """

  source: str
  target: str
  path: str
  line: int
  kind: str

  @property
  def runs(self) -> bool:
    """Whether the import can ever execute (TYPE_CHECKING-only imports never do)."""
    return self.kind != TYPE_CHECKING_ONLY


@dataclasses.dataclass(frozen=True)
class Module:
  """One Python file of the tree.

  Attributes:
    name: the dotted module name (``pejax.nn`` for ``pejax/nn/__init__.py``).
    path: the file, relative to the root.
    is_package: whether the file is a package ``__init__.py``.
    lines: the number of lines of the file.
  """

  name: str
  path: str
  is_package: bool
  lines: int


def discover_modules(root: pathlib.Path) -> dict[str, Module]:
  """Finds the modules of ``pejax/``, ``experiments/``, ``benchmarks/`` and ``launch.py``.

  Args:
    root: the repository root.

  Returns:
    Dotted module name -> ``Module``, sorted by name.
  """
  files: list[pathlib.Path] = []
  for top in ("pejax", "experiments"):
    files.extend((root / top).rglob("*.py"))
  files.extend((root / "benchmarks").glob("*.py"))
  if (root / "launch.py").is_file():
    files.append(root / "launch.py")
  modules = {}
  for file in files:
    relative = file.relative_to(root)
    parts = list(relative.with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
      parts.pop()
    name = ".".join(parts)
    text = file.read_text(encoding="utf-8")
    modules[name] = Module(name, relative.as_posix(), is_package, len(text.splitlines()))
  return dict(sorted(modules.items()))


def _is_type_checking_test(test: ast.expr) -> bool:
  """Whether an ``if`` test is ``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
  if isinstance(test, ast.Name):
    return test.id == "TYPE_CHECKING"
  return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _walk_imports(node: ast.AST, kind: str) -> Iterator[tuple[ast.AST, str]]:
  """Yields every import-like node under ``node`` with how it runs.

  Args:
    node: the node whose children are walked.
    kind: the kind of the enclosing context (``MODULE_LEVEL`` at the top).

  Yields:
    ``(node, kind)`` for each ``Import``, ``ImportFrom`` and ``Call`` node.
  """
  for child in ast.iter_child_nodes(node):
    child_kind = kind
    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
      child_kind = LOCAL if kind == MODULE_LEVEL else kind
    if isinstance(child, ast.If) and _is_type_checking_test(child.test):
      yield from _walk_imports(child.test, kind)
      for statement in child.body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
          yield statement, TYPE_CHECKING_ONLY
        yield from _walk_imports(statement, TYPE_CHECKING_ONLY)
      for statement in child.orelse:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
          yield statement, kind
        yield from _walk_imports(statement, kind)
      continue
    if isinstance(child, (ast.Import, ast.ImportFrom, ast.Call)):
      yield child, child_kind
    yield from _walk_imports(child, child_kind)


def _lazy_targets(call: ast.Call) -> list[str]:
  """The literal module paths a call imports: ``import_module("m")`` or a ``lazy_exports`` table.

  Args:
    call: a call node.

  Returns:
    The dotted module names (a ``lazy_exports`` table's values; its ``submodules`` are read by
    ``_lazy_submodules``).
  """
  func = call.func
  name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
  if name == "import_module":
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(
        call.args[0].value, str):
      return [call.args[0].value]
    return []
  if name != "lazy_exports":
    return []
  targets = []
  for argument in call.args[1:2]:
    if isinstance(argument, ast.Dict):
      targets.extend(value.value for value in argument.values
                     if isinstance(value, ast.Constant) and isinstance(value.value, str))
  return targets


def _lazy_submodules(call: ast.Call) -> list[str]:
  """The ``submodules=(...)`` names of a ``lazy_exports`` call (relative to the package)."""
  for keyword in call.keywords:
    if keyword.arg == "submodules" and isinstance(keyword.value, (ast.Tuple, ast.List)):
      return [element.value for element in keyword.value.elts
              if isinstance(element, ast.Constant) and isinstance(element.value, str)]
  return []


def _resolve(name: str, modules: Mapping[str, Module]) -> str | None:
  """The module of the tree that ``name`` loads (its longest known prefix), if any."""
  parts = name.split(".")
  while parts:
    candidate = ".".join(parts)
    if candidate in modules:
      return candidate
    parts.pop()
  return None


def _module_assignments(tree: ast.Module) -> dict[str, ast.expr]:
  """Module-level ``NAME = value`` assignments (to read a ``lazy_exports`` table by name)."""
  assignments = {}
  for statement in tree.body:
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(
        statement.targets[0], ast.Name):
      assignments[statement.targets[0].id] = statement.value
    elif isinstance(statement, ast.AnnAssign) and isinstance(
        statement.target, ast.Name) and statement.value is not None:
      assignments[statement.target.id] = statement.value
  return assignments


def module_edges(module: Module, root: pathlib.Path,
                 modules: Mapping[str, Module]) -> list[Edge]:
  """Every import of a module of the tree made by ``module``.

  Args:
    module: the importing module.
    root: the repository root.
    modules: every module of the tree (``discover_modules``).

  Returns:
    The edges, in file order.
  """
  tree = ast.parse((root / module.path).read_text(encoding="utf-8"), filename=module.path)
  assignments = _module_assignments(tree)
  package = module.name if module.is_package else module.name.rpartition(".")[0]
  edges = []

  def add(target: str | None, node: ast.AST, kind: str) -> None:
    if target is not None and target != module.name:
      edges.append(Edge(module.name, target, module.path, node.lineno, kind))

  for node, kind in _walk_imports(tree, MODULE_LEVEL):
    if isinstance(node, ast.Import):
      for alias in node.names:
        add(_resolve(alias.name, modules), node, kind)
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        base = package.split(".") if package else []
        base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
        origin = ".".join(base + ([node.module] if node.module else []))
      else:
        origin = node.module or ""
      for alias in node.names:
        submodule = f"{origin}.{alias.name}"
        add(submodule if submodule in modules else _resolve(origin, modules), node, kind)
    else:
      call = node
      # A lazy_exports table passed by name: read the module-level assignment.
      resolved_args = []
      for argument in call.args:
        if isinstance(argument, ast.Name) and argument.id in assignments:
          resolved_args.append(assignments[argument.id])
        else:
          resolved_args.append(argument)
      call = ast.Call(func=call.func, args=resolved_args, keywords=call.keywords)
      lazy_kind = kind if kind == TYPE_CHECKING_ONLY else LAZY
      for target in _lazy_targets(call):
        add(_resolve(target, modules), node, lazy_kind)
      for name in _lazy_submodules(call):
        add(_resolve(f"{module.name}.{name}", modules), node, lazy_kind)
  return edges


def import_graph(root: pathlib.Path) -> tuple[dict[str, Module], list[Edge]]:
  """The modules of the tree at ``root`` and every import between them.

  Args:
    root: the repository root.

  Returns:
    ``(modules, edges)``: ``discover_modules(root)`` and the edges of all its modules.
  """
  modules = discover_modules(root)
  edges = [edge for module in modules.values() for edge in module_edges(module, root, modules)]
  return modules, edges


def floor_of(name: str) -> int:
  """The index in ``FLOORS`` of the floor that holds module ``name``.

  Args:
    name: a dotted module name.

  Returns:
    The floor index (0 is the lowest).

  Raises:
    KeyError: when no floor names the module (add it to ``FLOORS``).
  """
  best, best_length = None, -1
  for index, (_, prefixes) in enumerate(FLOORS):
    for prefix in prefixes:
      if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best_length:
        best, best_length = index, len(prefix)
  if best is None:
    raise KeyError(f"no floor in FLOORS holds module {name!r}")
  return best


def strongly_connected_components(nodes: Iterable[str],
                                  edges: Iterable[tuple[str, str]]) -> list[list[str]]:
  """Tarjan's strongly connected components, iteratively (no recursion limit).

  Args:
    nodes: the graph's nodes.
    edges: ``(source, target)`` pairs.

  Returns:
    Every component, each sorted, biggest first.
  """
  successors: dict[str, list[str]] = collections.defaultdict(list)
  for source, target in edges:
    successors[source].append(target)
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on_stack: set[str] = set()
  components = []
  for start in sorted(nodes):
    if start in index:
      continue
    work = [(start, iter(sorted(set(successors[start]))))]
    index[start] = low[start] = len(index)
    stack.append(start)
    on_stack.add(start)
    while work:
      node, children = work[-1]
      child = next(children, None)
      if child is not None:
        if child not in index:
          index[child] = low[child] = len(index)
          stack.append(child)
          on_stack.add(child)
          work.append((child, iter(sorted(set(successors[child])))))
        elif child in on_stack:
          low[node] = min(low[node], index[child])
        continue
      work.pop()
      if work:
        low[work[-1][0]] = min(low[work[-1][0]], low[node])
      if low[node] == index[node]:
        component = []
        while True:
          member = stack.pop()
          on_stack.discard(member)
          component.append(member)
          if member == node:
            break
        components.append(sorted(component))
  return sorted(components, key=lambda component: (-len(component), component))


def circles(modules: Mapping[str, Module], edges: Sequence[Edge], *,
            include_type_checking: bool = False) -> list[list[str]]:
  """The import circles among pejax modules: components of more than one module.

  Args:
    modules: every module of the tree.
    edges: every edge of the tree.
    include_type_checking: whether ``TYPE_CHECKING``-only imports count (they never run, so
      the test leaves them out; the census also shows the circles of names in annotations).

  Returns:
    The components of more than one module, biggest first.
  """
  pejax_edges = [(edge.source, edge.target) for edge in edges
                 if (edge.runs or include_type_checking)
                 and _in_pejax(edge.source) and _in_pejax(edge.target)]
  nodes = [name for name in modules if _in_pejax(name)]
  return [c for c in strongly_connected_components(nodes, pejax_edges) if len(c) > 1]


def describe_circle(component: Sequence[str], edges: Sequence[Edge], *,
                    include_type_checking: bool = False) -> str:
  """The modules of a circle and the imports that close it, one per line.

  Args:
    component: the modules of one strongly connected component.
    edges: every edge of the tree.
    include_type_checking: whether to list ``TYPE_CHECKING``-only imports too.

  Returns:
    A multi-line description naming each inner import's file, line and kind.
  """
  members = set(component)
  inner = [(edge.source, edge.target) for edge in edges
           if (edge.runs or include_type_checking) and edge.source in members
           and edge.target in members]
  lines = [f"circle of {len(component)} modules: {', '.join(component)}",
           f"  shortest: {' -> '.join(shortest_cycle(component, inner))}"]
  seen = set()
  for edge in edges:
    if ((edge.runs or include_type_checking) and edge.source in members
        and edge.target in members):
      key = (edge.source, edge.target, edge.kind)
      if key not in seen:
        seen.add(key)
        lines.append(f"  {edge.path}:{edge.line}: {edge.source} -> {edge.target} ({edge.kind})")
  return "\n".join(lines)


def shortest_cycle(component: Sequence[str], edges: Iterable[tuple[str, str]]) -> list[str]:
  """A shortest closed walk through a strongly connected component (breadth-first).

  Args:
    component: the modules of one strongly connected component of more than one module.
    edges: ``(source, target)`` pairs inside the component.

  Returns:
    The modules of the circle, the first repeated at the end (``[a, b, a]``).
  """
  successors: dict[str, set[str]] = collections.defaultdict(set)
  for source, target in edges:
    successors[source].add(target)
  best: list[str] = []
  for start in sorted(component):
    parents = {start: start}
    queue = collections.deque([start])
    found = None
    while queue and found is None:
      node = queue.popleft()
      for child in sorted(successors[node]):
        if child == start:
          found = node
          break
        if child not in parents:
          parents[child] = node
          queue.append(child)
    if found is None:
      continue
    path = [found]
    while path[-1] != start:
      path.append(parents[path[-1]])
    cycle = path[::-1] + [start]
    if not best or len(cycle) < len(best):
      best = cycle
  return best


def upward_edges(edges: Sequence[Edge]) -> list[Edge]:
  """The imports that run from a lower floor to a higher one.

  Args:
    edges: every edge of the tree.

  Returns:
    The edges (that can run) whose target sits on a higher floor than their source (modules
    no floor holds are left to ``test_every_module_has_a_floor``).
  """
  return [edge for edge in edges
          if edge.runs and _has_floor(edge.source) and _has_floor(edge.target)
          and floor_of(edge.target) > floor_of(edge.source)]


def describe_upward(edge: Edge) -> str:
  """One line naming an upward import's file, line, modules and floors."""
  source_floor, target_floor = FLOORS[floor_of(edge.source)][0], FLOORS[floor_of(edge.target)][0]
  return (f"{edge.path}:{edge.line}: {edge.source} ({source_floor}) imports {edge.target} "
          f"({target_floor}) ({edge.kind})")


def oversized(modules: Mapping[str, Module], limit: int = MAX_LINES) -> list[Module]:
  """The modules under ``pejax/`` over ``limit`` lines, longest first.

  Args:
    modules: every module of the tree.
    limit: the most lines a module may have.

  Returns:
    The modules over the limit.
  """
  return sorted((module for module in modules.values()
                 if _in_pejax(module.name) and module.lines > limit),
                key=lambda module: (-module.lines, module.name))


def rooms(modules: Mapping[str, Module]) -> list[str]:
  """The rooms of pejax: its subpackages and top-level modules.

  Args:
    modules: every module of the tree.

  Returns:
    Dotted names such as ``pejax.nn`` (a subpackage) and ``pejax.compare`` (a module), sorted.
  """
  return sorted({".".join(name.split(".")[:2]) for name in modules
                 if _in_pejax(name) and name != "pejax"})


def census(root: pathlib.Path) -> str:
  """The census of the tree at ``root``: rooms, floors, circles, upward edges, file sizes.

  Args:
    root: the repository root.

  Returns:
    A multi-line report.
  """
  modules, edges = import_graph(root)
  pejax_modules = {name: module for name, module in modules.items() if _in_pejax(name)}
  out = [f"census of {root}"]
  room_names = rooms(modules)
  out.append(f"\nrooms ({len(room_names)}):")
  for room in room_names:
    members = [m for m in pejax_modules.values()
               if m.name == room or m.name.startswith(room + ".")]
    kind = "package" if modules[room].is_package else "module"
    out.append(f"  {room:<28} {kind:<8} {len(members):>3} modules "
               f"{sum(m.lines for m in members):>6} lines")
  out.append(f"\nfloors ({len(FLOORS)}, lowest first):")
  for index, (floor, _) in enumerate(FLOORS):
    members = sorted({".".join(name.split(".")[:2]) for name in modules
                      if _has_floor(name) and floor_of(name) == index})
    out.append(f"  {index} {floor:<12} {', '.join(members)}")
  unplaced = [name for name in modules if not _has_floor(name)]
  out.append(f"modules no floor holds: {len(unplaced)} {', '.join(unplaced)}")
  found = circles(modules, edges)
  out.append(f"\ncircles (strongly connected components of >1 pejax module, imports that run): "
             f"{len(found)}")
  out.extend(describe_circle(component, edges) for component in found)
  typed = circles(modules, edges, include_type_checking=True)
  out.append(f"circles counting TYPE_CHECKING-only imports too (tested): {len(typed)}")
  out.extend(f"  {len(component)} modules: {', '.join(component)}" for component in typed)
  upward = upward_edges(edges)
  out.append(f"\nupward edges: {len(upward)}")
  out.extend(f"  {describe_upward(edge)}" for edge in upward)
  kinds = collections.Counter(edge.kind for edge in edges)
  out.append(f"\nedges: {len(edges)} ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
  over = oversized(modules)
  out.append(f"\nmodules under pejax/ over {MAX_LINES} lines: {len(over)}")
  out.extend(f"  {m.path:<44} {m.lines:>5}" for m in over)
  watch = oversized(modules, WATCH_LINES)
  out.append(f"modules under pejax/ over {WATCH_LINES} lines: {len(watch)}")
  out.extend(f"  {m.path:<44} {m.lines:>5}" for m in watch)
  largest = sorted(pejax_modules.values(), key=lambda m: (-m.lines, m.name))[:10]
  out.append(f"largest 10 of {len(pejax_modules)} modules under pejax/ "
             f"({sum(m.lines for m in pejax_modules.values())} lines in all):")
  out.extend(f"  {m.path:<44} {m.lines:>5}" for m in largest)
  return "\n".join(out)


def _in_pejax(name: str) -> bool:
  """Whether a dotted module name is pejax or under it."""
  return name == "pejax" or name.startswith("pejax.")


class ImportGraphTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.modules, cls.edges = import_graph(ROOT)

  def test_every_module_has_a_floor(self):
    unplaced = [name for name in self.modules if not _has_floor(name)]
    if unplaced:
      self.fail("modules no floor of FLOORS holds: " + ", ".join(unplaced))

  def test_no_import_circle_among_pejax_modules(self):
    # TYPE_CHECKING-only imports count too: a circle a reader must follow is a circle.
    found = circles(self.modules, self.edges, include_type_checking=True)
    if found:
      self.fail("import circles:\n" + "\n".join(
          describe_circle(component, self.edges) for component in found))

  def test_imports_only_run_down_the_floors(self):
    upward = upward_edges(self.edges)
    if upward:
      self.fail("imports from a lower floor to a higher one:\n" + "\n".join(
          describe_upward(edge) for edge in upward))

  def test_no_module_over_the_line_limit(self):
    over = oversized(self.modules)
    if over:
      self.fail(f"modules under pejax/ over {MAX_LINES} lines:\n" + "\n".join(
          f"  {module.path}: {module.lines}" for module in over))


class GraphMachineryTest(absltest.TestCase):
  """The checks above would fail if their claim were false."""

  def test_a_circle_is_found(self):
    components = strongly_connected_components(
        "abcd", [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])
    self.assertEqual(components, [["a", "b", "c"], ["d"]])
    self.assertEqual(shortest_cycle(["a", "b", "c"], [("a", "b"), ("b", "c"), ("c", "a"),
                                                      ("b", "a")]), ["a", "b", "a"])

  def test_from_package_import_submodule_is_an_edge_to_the_submodule(self):
    modules = {name: Module(name, "", name in ("pejax", "pejax.nn"), 1)
               for name in ("pejax", "pejax.nn", "pejax.nn.attention", "pejax.nn.decoder")}
    decoder = Module("pejax.nn.decoder", "pejax/nn/decoder.py", False, 1)
    source = ("from pejax.nn import attention\nfrom pejax.nn import Decoder\n"
              "from . import attention as a\nfrom .attention import attention\n"
              "def f():\n  import pejax.nn\n"
              "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n  from pejax import nn\n")
    root = pathlib.Path(self.create_tempdir().full_path)
    (root / "pejax" / "nn").mkdir(parents=True)
    (root / decoder.path).write_text(source, encoding="utf-8")
    got = [(edge.target, edge.kind) for edge in module_edges(decoder, root, modules)]
    self.assertEqual(got, [
        ("pejax.nn.attention", MODULE_LEVEL), ("pejax.nn", MODULE_LEVEL),
        ("pejax.nn.attention", MODULE_LEVEL), ("pejax.nn.attention", MODULE_LEVEL),
        ("pejax.nn", LOCAL), ("pejax.nn", TYPE_CHECKING_ONLY)])

  def test_an_upward_import_is_found(self):
    edge = Edge("pejax.encodings.rope", "pejax.nn.decoder", "pejax/encodings/rope.py", 3,
                MODULE_LEVEL)
    self.assertEqual(upward_edges([edge]), [edge])
    self.assertEmpty(upward_edges([dataclasses.replace(edge, kind=TYPE_CHECKING_ONLY)]))
    self.assertIn("(encodings) imports pejax.nn.decoder (nn)", describe_upward(edge))


def _has_floor(name: str) -> bool:
  """Whether some floor of ``FLOORS`` holds module ``name``."""
  try:
    floor_of(name)
  except KeyError:
    return False
  return True


def main(argv: Sequence[str]) -> None:
  """Prints the census of the tree at ``argv[1]`` (default: this checkout).

  Args:
    argv: the command line; ``--census`` is accepted and ignored (printing it is the default).
  """
  arguments = [argument for argument in argv[1:] if argument != "--census"]
  print(census(pathlib.Path(arguments[0]).resolve() if arguments else ROOT))


if __name__ == "__main__":
  main(sys.argv)
