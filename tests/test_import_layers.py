"""The import structure as a contract, read from the source (`import_graph`): every import,
at module level or inside a function, and those under `if TYPE_CHECKING:` too.

- No cycles among the project's modules. A cycle through a function-level import still
  ties the modules together (neither can be read, tested or moved without the other), and
  one through a type-only import does for the reader; each failure names the modules.
- The engine never imports the dashboard's toolkits (Textual, textual-serve, textual-plot)
  nor the app: it runs headless in its own process, and clients consume its events.
- The local backend never imports the pipeline: it is a Tinker-shaped backend, usable by
  any client of the SDK's interface.
- The commands' shared kit imports no other part of the app, so any command can use it.
- engine/ reads as the data path, and each of its parts imports only what lies below
  it: the shared modules at its top (settings, errors, events, clocks) import no part;
  metrics, rendering and the task side (rollouts) import neither the backend nor the
  pipeline; the backend seam imports neither the pipeline nor the servers; the policy
  server never reaches the pipeline; the store and the trackers only consume events;
  `engine.run` wires them all.
"""

from __future__ import annotations

import textwrap

import import_graph
import pytest

EDGES = import_graph.edges()

#: (importers, what they must never import, why)
LAYERS = [
    ("tinker_tui.engine", ("textual", "textual_serve", "textual_plot", "tinker_tui.app"),
     "the engine runs without a screen; clients consume its events"),
    ("tinker_tui.app.commands.common", ("tinker_tui.app",),
     "the commands' shared kit is a leaf every command imports"),
    # The data path's layers (engine's subpackages): each part imports only what lies below it.
    *[(f"tinker_tui.engine.{name}",
       tuple(f"tinker_tui.engine.{part}" for part in ("rollouts", "rendering", "backend",
                                                     "training", "metrics", "control",
                                                     "server", "store", "run")),
       "engine's shared modules import none of its parts")
      for name in ("config", "errors", "events", "clock", "did_you_mean", "checkpoint_paths",
                   "faults", "run_id", "loopback_http", "sampling_defaults", "collapse_level")],
    ("tinker_tui.engine.metrics",
     tuple(f"tinker_tui.engine.{part}" for part in ("rollouts", "rendering", "backend",
                                                   "training", "control", "server", "store",
                                                   "trackers", "run")),
     "what a run measures of itself is read by every part and reads none"),
    ("tinker_tui.engine.rendering",
     tuple(f"tinker_tui.engine.{part}" for part in ("rollouts", "backend", "training",
                                                   "control", "server", "store", "trackers",
                                                   "local", "run")),
     "messages <-> tokens knows nothing of who samples or trains"),
    ("tinker_tui.engine.rollouts",
     tuple(f"tinker_tui.engine.{part}" for part in ("backend", "training", "control",
                                                   "server", "store", "trackers", "local",
                                                   "run")),
     "the task side is what the rest reads: it reaches the policy server over HTTP only"),
    ("tinker_tui.engine.backend",
     tuple(f"tinker_tui.engine.{part}" for part in ("training", "control", "server", "store",
                                                   "trackers", "run")),
     "the backend seam lies below the pipeline and the endpoints that use it"),
    ("tinker_tui.engine.local",
     tuple(f"tinker_tui.engine.{part}" for part in ("rollouts", "rendering", "backend",
                                                   "training", "metrics", "control",
                                                   "server", "store", "trackers", "run")),
     "the local backend is a Tinker-shaped backend, not part of the pipeline"),
    ("tinker_tui.engine.server",
     tuple(f"tinker_tui.engine.{part}" for part in ("rollouts", "training", "control",
                                                   "store", "trackers", "run")),
     "the policy server serves samples; the pipeline drives it, not the other way"),
    ("tinker_tui.engine.training",
     tuple(f"tinker_tui.engine.{part}" for part in ("control", "trackers", "run")),
     "the pipeline is steered through its Control by the run, which wires the trackers"),
    ("tinker_tui.engine.control",
     tuple(f"tinker_tui.engine.{part}" for part in ("rollouts", "rendering", "backend",
                                                   "training", "server", "store", "trackers",
                                                   "local", "run")),
     "the control interface is what any front end drives, whatever runs behind it"),
    *[(f"tinker_tui.engine.{sink}",
       tuple(f"tinker_tui.engine.{part}" for part in ("rollouts", "rendering", "backend",
                                                     "training", "control", "server", "local",
                                                     "run")),
       "the store and the trackers only consume events")
      for sink in ("store", "trackers")],
]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


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


@pytest.mark.parametrize(("importers", "forbidden", "why"), LAYERS,
                         ids=[layer[0] for layer in LAYERS])
def test_layers(importers, forbidden, why):
    violations = [_where(edge) for edge in EDGES
                  if _within(edge.importer, importers)
                  and any(_within(edge.imported, name) for name in forbidden)]
    assert not violations, f"{importers} must not import {', '.join(forbidden)} ({why}):\n" \
        + "\n".join(violations)


def test_the_graph_sees_every_kind_of_import():
    """A sanity check of the reader against the project itself: a function-level import,
    a relative-free `from package import module`, and a TYPE_CHECKING one are all edges."""
    deps = import_graph.graph()
    # function-level: the `run` command imports the dashboard's runner only when it runs
    assert "tinker_tui.app.watch" in deps["tinker_tui.app.commands.run"]
    assert not deps["tinker_tui.app.commands.run"]["tinker_tui.app.watch"].typing_only
    # `from tinker_tui.engine.local import lora` names the module lora, not the package
    assert "tinker_tui.engine.local.lora" in deps["tinker_tui.engine.local.sampling_client"]
    # type-only, kept for the layers, left out of the runtime graph
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
    deps = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from tinker_tui import b\n",
        "b.py": "def late():\n    from tinker_tui.c import thing\n",
        "c.py": "from . import a\nthing = 1\n",
        "d.py": "import tinker_tui.a\n",  # imports into the cycle, not part of it
    })
    cycles = import_graph.cycles(deps)
    assert cycles == [["tinker_tui.a", "tinker_tui.b", "tinker_tui.c", "tinker_tui.a"]]
    report = cycle_report(deps)
    assert "tinker_tui.b line 2 imports tinker_tui.c" in report


def test_a_type_only_cycle_is_found_and_a_lazy_package_is_not_one(tmp_path):
    deps = _package(tmp_path, {
        "__init__.py": "",
        "model.py": "from tinker_tui.adapter import install\n",
        "adapter.py": "from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from tinker_tui.model import Model\n",
        "pkg/__init__.py": "import importlib\n"
                           "def __getattr__(name):\n"
                           "    return importlib.import_module('tinker_tui.pkg.' + name)\n",
        "pkg/leaf.py": "from tinker_tui.pkg import other\n",
        "pkg/other.py": "X = 1\n",
    })
    assert import_graph.cycles(deps) == [["tinker_tui.adapter", "tinker_tui.model",
                                          "tinker_tui.adapter"]]
