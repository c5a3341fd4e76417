"""The project's import graph, read from the source (nothing is imported): every `import`
and `from ... import` in every module under tinker_tui/, at module level or inside a
function, and `importlib.import_module("...")` with a literal name.

A function-level import is an edge like any other: it runs the first time the function
does, and a cycle through one is still a cycle (it only moves the failure from import
time to the first call, or hides a partly initialised module behind it). An import under
`if TYPE_CHECKING:` never runs; it is marked `typing_only` (a cycle through it still ties
the modules together for the reader; `graph(runtime_only=True)` leaves it out).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tinker_tui"


@dataclass(frozen=True)
class Edge:
    importer: str  # a project module, dotted
    imported: str  # the module named: a project module where it names one, else as written
    line: int
    typing_only: bool  # under `if TYPE_CHECKING:`: never runs


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (`pkg/__init__.py` is `pkg`)."""
    modules: dict[str, Path] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, typing_only: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node below `node`, each with whether it sits under `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for part in child.body:
                yield part, True
                yield from _walk(part, True)
            for part in child.orelse:
                yield part, typing_only
                yield from _walk(part, typing_only)
            continue
        yield child, typing_only
        yield from _walk(child, typing_only)


def edges(modules: dict[str, Path] | None = None) -> list[Edge]:
    modules = project_modules() if modules is None else modules
    found: list[Edge] = []
    for importer, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        for node, typing_only in _walk(tree):
            named: list[str] = []
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = package.split(".")
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    # `from pkg import sub`: the submodule where there is one, else pkg
                    named.append(sub if sub in modules else base)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                named = [node.args[0].value]
            for name in named:
                found.append(Edge(importer, name, getattr(node, "lineno", 0), typing_only))
    return found


def graph(root: Path = ROOT, *, runtime_only: bool = False) -> dict[str, dict[str, Edge]]:
    """Project module -> {project module it imports: the first such import}; with
    `runtime_only`, without the imports under `if TYPE_CHECKING:`."""
    modules = project_modules(root)
    result: dict[str, dict[str, Edge]] = {name: {} for name in modules}
    for edge in edges(modules):
        if (
            edge.imported in modules
            and edge.imported != edge.importer
            and not (runtime_only and edge.typing_only)
        ):
            result[edge.importer].setdefault(edge.imported, edge)
    return result


def tangles(deps: dict[str, dict[str, Edge]]) -> list[list[str]]:
    """The groups of modules that import each other (directly or around a cycle): the
    strongly connected groups of more than one module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in deps[node]:
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(deps):
        if node not in index:
            connect(node)
    return sorted(groups)


def cycles(deps: dict[str, dict[str, Edge]]) -> list[list[str]]:
    """One cycle per tangle, as a closed path of modules: the shortest through the group's
    first module (a tangle holds several when its modules import each other many ways)."""
    return [_shortest_cycle(group[0], set(group), deps) for group in tangles(deps)]


def _shortest_cycle(start: str, group: set[str], deps: dict[str, dict[str, Edge]]) -> list[str]:
    """The shortest path start -> ... -> start within `group` (breadth first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(deps[node]):
                if target not in group:
                    continue
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    return [start]
