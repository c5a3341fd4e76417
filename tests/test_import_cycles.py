"""No import cycles among the project's modules, read from the source (`import_graph`):
every import, at module level or inside a function, and those under `if TYPE_CHECKING:`.

A cycle through a function-level import still ties the modules together (neither can be
read, tested or moved without the other), and one through a type-only import does for the
reader; each failure names the modules and the lines. The layers (what may import what:
the engine never imports Textual nor the app, the engine's parts each import only what lies
below them) are import-linter's contracts in pyproject.toml, checked by `lint-imports`.
"""

from __future__ import annotations

import textwrap

import import_graph


def _where(edge: import_graph.Edge) -> str:
    kind = " (under TYPE_CHECKING)" if edge.typing_only else ""
    return f"{edge.importer} line {edge.line} imports {edge.imported}{kind}"


def cycle_report(deps: dict[str, dict[str, import_graph.Edge]]) -> str:
    lines = []
    for group, cycle in zip(import_graph.tangles(deps), import_graph.cycles(deps), strict=True):
        lines.append(f"{len(group)} modules import each other: {', '.join(group)}")
        lines.append("  one cycle: " + " -> ".join(cycle))
        lines += ["    " + _where(deps[a][b]) for a, b in zip(cycle, cycle[1:], strict=False)]
    return "\n".join(lines)


def test_no_import_cycles_among_project_modules():
    deps = import_graph.graph()
    assert not import_graph.tangles(deps), cycle_report(deps)


def test_the_graph_sees_every_kind_of_import():
    """A sanity check of the reader against the project itself: a function-level import,
    a relative-free `from package import module`, and a TYPE_CHECKING one are all edges."""
    deps = import_graph.graph()
    # function-level: the `run` command imports the dashboard's runner only when it runs
    assert "tinker_tui.app.watch" in deps["tinker_tui.app.commands.run"]
    assert not deps["tinker_tui.app.commands.run"]["tinker_tui.app.watch"].typing_only
    # `from tinker_tui.engine.local import lora` names the module lora, not the package
    assert "tinker_tui.engine.local.lora" in deps["tinker_tui.engine.local.sampling_client"]
    # type-only: an edge, left out of the runtime graph
    assert deps["tinker_tui.engine.local.lora"]["tinker_tui.engine.local.causal_lm"].typing_only
    runtime = import_graph.graph(runtime_only=True)
    assert "tinker_tui.engine.local.causal_lm" not in runtime["tinker_tui.engine.local.lora"]


def _package(tmp_path, files: dict[str, str]):
    for name, text in files.items():
        path = tmp_path / import_graph.PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return import_graph.graph(tmp_path)


def test_a_cycle_through_a_function_level_import_is_found_and_named(tmp_path):
    deps = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from tinker_tui import b\n",
            "b.py": "def late():\n    from tinker_tui.c import thing\n",
            "c.py": "from . import a\nthing = 1\n",
            "d.py": "import tinker_tui.a\n",  # imports into the cycle, not part of it
        },
    )
    cycles = import_graph.cycles(deps)
    assert cycles == [["tinker_tui.a", "tinker_tui.b", "tinker_tui.c", "tinker_tui.a"]]
    report = cycle_report(deps)
    assert "tinker_tui.b line 2 imports tinker_tui.c" in report


def test_a_type_only_cycle_is_found_and_a_lazy_package_is_not_one(tmp_path):
    deps = _package(
        tmp_path,
        {
            "__init__.py": "",
            "model.py": "from tinker_tui.adapter import install\n",
            "adapter.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from tinker_tui.model import Model\n",
            "pkg/__init__.py": "import importlib\n"
            "def __getattr__(name):\n"
            "    return importlib.import_module('tinker_tui.pkg.' + name)\n",
            "pkg/leaf.py": "from tinker_tui.pkg import other\n",
            "pkg/other.py": "X = 1\n",
        },
    )
    assert import_graph.cycles(deps) == [
        ["tinker_tui.adapter", "tinker_tui.model", "tinker_tui.adapter"]
    ]
