"""tinker-tui: run and watch RL post-training of language models from the terminal.

What a task file needs is importable from here::

    from tinker_tui import Scenario, Task, Trajectory

The code lives in three folders at the repository's top, installed under this name:
`tinker_tui.engine` (backends, policy server, pipeline, store, events; never imports
Textual), `tinker_tui.app` (command line, dashboard, headless reporter) and
`tinker_tui.examples` (the built-in tasks). Names are loaded on first use, so
`import tinker_tui` (and `tinker-tui --help`) stays instant.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "Message",
    "Scenario",
    "Task",
    "TaskError",
    "Trajectory",
    "TrajectoryError",
]

#: Public name -> the module that defines it.
_EXPORTS = {
    "Message": "tinker_tui.engine.task",
    "Scenario": "tinker_tui.engine.task",
    "Task": "tinker_tui.engine.task",
    "TaskError": "tinker_tui.engine.task",
    "Trajectory": "tinker_tui.engine.trajectory",
    "TrajectoryError": "tinker_tui.engine.trajectory",
}

if TYPE_CHECKING:
    from tinker_tui.engine.task import Message, Scenario, Task, TaskError
    from tinker_tui.engine.trajectory import Trajectory, TrajectoryError


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tinker_tui' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
