"""tests/test_import_graph.py: the core's packages depend on each other one way.

Every `.py` file under core/tensorkiln is read with `ast` (nothing is imported), and
each import, at module level or inside a function, becomes an edge between two
nodes: the top-level subpackage or module of tensorkiln the file belongs to
(`tensorkiln.tir`, `tensorkiln.cli`, ...) and the one it imports from. Uses of
the facade (`import tensorkiln as tk; tk.compile(...)`) count as imports of the
module the facade's attribute comes from. `tensorkiln/__init__.py` is the facade
and is not a source.

The package graph must be acyclic (style guide, "What we avoid": two packages
that import each other), and a few directions are pinned explicitly.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

import tensorkiln

CORE = Path(tensorkiln.__file__).parent
PLUGIN_PREFIX = "tensorkiln_"   # tensorkiln_cpu_llvm, tensorkiln_opencl, tensorkiln_cuda, a vendor's plugin


@dataclass(frozen=True)
class Edge:
    """One import: `source` (a core node) uses `target` at file:line."""

    source: str
    target: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target}  ({self.file}:{self.line})"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_core_module(name: str, root: Path) -> bool:
    location = root.parent / Path(*name.split("."))
    return location.is_dir() or location.with_suffix(".py").is_file()


def _facade_target(attribute: str, root: Path) -> str | None:
    """The module that `tensorkiln.<attribute>` comes from; None for plain values (__version__)."""
    if _is_core_module(f"tensorkiln.{attribute}", root):
        return f"tensorkiln.{attribute}"
    lazy = getattr(tensorkiln, "_LAZY", {})   # the facade's table: attribute -> (module, name)
    if attribute in lazy:
        return lazy[attribute][0]
    return None


def node_of(module: str) -> str | None:
    """`tensorkiln.tir.nodes` -> `tensorkiln.tir`; a plugin -> its package; else None."""
    parts = module.split(".")
    if parts[0].startswith(PLUGIN_PREFIX):
        return parts[0]
    if parts[0] != "tensorkiln" or len(parts) < 2:
        return None
    return ".".join(parts[:2])


def _resolve(module: str | None, level: int, package: str) -> str:
    if level == 0:
        return module or ""
    base = package.split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _imported_modules(path: Path, root: Path) -> list[tuple[str, int]]:
    """Every module `path` imports, as (dotted name, line), with relative imports resolved."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    facade_names: set[str] = set()
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append((alias.name, node.lineno))
                if alias.name == "tensorkiln" and alias.asname:
                    facade_names.add(alias.asname)
                elif alias.name.split(".")[0] == "tensorkiln" and not alias.asname:
                    facade_names.add("tensorkiln")
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, package)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if base == "tensorkiln":
                    target = _facade_target(alias.name, root)
                    if target:
                        found.append((target, node.lineno))
                elif _is_core_module(submodule, root):
                    found.append((submodule, node.lineno))
                else:
                    found.append((base, node.lineno))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.args[0].value, node.lineno))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in facade_names):
            target = _facade_target(node.attr, root)
            if target:
                found.append((target, node.lineno))
    return found


def collect_edges(root: Path = CORE) -> list[Edge]:
    """Every import between two different nodes, from every file under `root`."""
    edges = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "__init__.py":
            continue  # the public facade
        source = node_of(_module_name(path, root))
        for module, line in _imported_modules(path, root):
            target = node_of(module)
            edge = Edge(source, target, str(path.relative_to(root.parent)), line)
            if target and target != source and edge not in edges:
                edges.append(edge)
    return edges


def strongly_connected_components(edges: list[Edge]) -> list[list[str]]:
    """The package groups (more than one node) in which every node reaches every other."""
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in edges:
        graph[edge.source].add(edge.target)
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(start: str) -> None:
        # iterative Tarjan: (node, iterator over its successors)
        work = [(start, iter(sorted(graph[start])))]
        index[start] = lowlink[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = lowlink[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    lowlink[node] = min(lowlink[node], index[successor])
            else:
                work.pop()
                if work:
                    lowlink[work[-1][0]] = min(lowlink[work[-1][0]], lowlink[node])
                if lowlink[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def describe_cycles(edges: list[Edge]) -> str:
    """Each cycle group with every edge inside it and where that edge is."""
    lines = []
    for component in strongly_connected_components(edges):
        members = set(component)
        lines.append(f"cycle among {', '.join(component)}:")
        lines.extend(f"    {edge}" for edge in edges
                     if edge.source in members and edge.target in members)
    return "\n".join(lines)


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return collect_edges()


def test_edges_are_found(edges):
    # guards the scanner itself: tir's passes import tir, te imports tir, cli imports the compiler
    pairs = {(edge.source, edge.target) for edge in edges}
    assert ("tensorkiln.te", "tensorkiln.tir") in pairs
    assert ("tensorkiln.cli", "tensorkiln.compiler") in pairs


def test_package_graph_is_acyclic(edges):
    cycles = describe_cycles(edges)
    assert not cycles, "packages that import each other:\n" + cycles


def import_path(edges: list[Edge], source: str, target: str) -> list[Edge]:
    """The shortest chain of imports by which `source` reaches `target` ([] when it does not)."""
    first_edge: dict[tuple[str, str], Edge] = {}
    for edge in edges:
        first_edge.setdefault((edge.source, edge.target), edge)
    came_from: dict[str, Edge | None] = {source: None}
    frontier = [source]
    while frontier and target not in came_from:
        following = []
        for node in frontier:
            for (start, end), edge in first_edge.items():
                if start == node and end not in came_from:
                    came_from[end] = edge
                    following.append(end)
        frontier = following
    chain: list[Edge] = []
    node = target
    while came_from.get(node) is not None:
        chain.append(came_from[node])
        node = came_from[node].source
    return chain[::-1]


@pytest.mark.parametrize("source, target", [
    ("tensorkiln.tir", "tensorkiln.te"),             # lowering sits above the IR it lowers into
    ("tensorkiln.te", "tensorkiln.sdk"),             # plugins build on the sdk, the sdk on te and tir
    ("tensorkiln.tir", "tensorkiln.sdk"),
    ("tensorkiln.runtime", "tensorkiln.compiler"),   # a loaded package runs without the compiler
    ("tensorkiln.conformance", "tensorkiln.cli"),    # the cli adds the kit's subcommands, not the reverse
])
def test_layer_never_reaches_the_layer_above(edges, source, target):
    chain = import_path(edges, source, target)
    assert not chain, f"{source} reaches {target}:\n" + "\n".join(f"    {edge}" for edge in chain)


def test_core_never_imports_a_plugin(edges):
    assert [str(edge) for edge in edges if edge.target.startswith(PLUGIN_PREFIX)] == []


def test_scanner_sees_a_reintroduced_cycle(tmp_path):
    # a tir module that imports te must show up as a te <-> tir cycle, with its line
    root = tmp_path / "tensorkiln"
    for package in ("te", "tir"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "te" / "schedule.py").write_text("from ..tir import nodes\n")
    (root / "tir" / "nodes.py").write_text("def f():\n    from ..te import schedule\n")
    report = describe_cycles(collect_edges(root))
    assert "cycle among tensorkiln.te, tensorkiln.tir" in report
    assert "tensorkiln/tir/nodes.py:2" in report


def test_scanner_sees_plugins_and_the_facade(tmp_path):
    root = tmp_path / "tensorkiln"
    (root / "compiler").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "compiler" / "__init__.py").write_text("")
    (root / "runtime.py").write_text("def f():\n    import tensorkiln as tk\n    return tk.compile\n\n"
                                     "def g():\n    from tensorkiln_cpu_llvm import plugin\n")
    found = {(edge.target, edge.line) for edge in collect_edges(root)}
    assert ("tensorkiln.compiler", 3) in found          # tk.compile comes from tensorkiln.compiler
    assert ("tensorkiln_cpu_llvm", 6) in found
