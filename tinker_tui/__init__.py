"""tinker-tui: run and watch RL post-training of language models from the terminal.

What a task file needs is importable from here::

    from tinker_tui import Scenario, Task, Trajectory

and the helpers: `scenarios_from_jsonl` / `scenarios_from_dataset` (scenarios from data),
`mix_tasks` (several tasks in one run), `member_clients` (a group rollout's per-member
clients), `group_advantages` (the built-in advantage rules, for a task's own `advantages`
hook to build on).

The code lives in three folders of this package (linked from the repository's top):
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
    "Reward",
    "Scenario",
    "ScenarioSet",
    "Task",
    "TaskError",
    "Trajectory",
    "TrajectoryError",
    "group_advantages",
    "member_clients",
    "mix_tasks",
    "scenarios_from_dataset",
    "scenarios_from_jsonl",
]

#: Public name -> the module that defines it.
_EXPORTS = {
    "Message": "tinker_tui.engine.rollouts.task",
    "Reward": "tinker_tui.engine.rollouts.trajectory",
    "Scenario": "tinker_tui.engine.rollouts.task",
    "ScenarioSet": "tinker_tui.engine.rollouts.scenario_data",
    "Task": "tinker_tui.engine.rollouts.task",
    "TaskError": "tinker_tui.engine.rollouts.task",
    "Trajectory": "tinker_tui.engine.rollouts.trajectory",
    "TrajectoryError": "tinker_tui.engine.rollouts.trajectory",
    "group_advantages": "tinker_tui.engine.training.advantages",
    "member_clients": "tinker_tui.engine.rollouts.task",
    "mix_tasks": "tinker_tui.engine.rollouts.task",
    "scenarios_from_dataset": "tinker_tui.engine.rollouts.scenario_data",
    "scenarios_from_jsonl": "tinker_tui.engine.rollouts.scenario_data",
}

if TYPE_CHECKING:
    from tinker_tui.engine.rollouts.scenario_data import (
        ScenarioSet,
        scenarios_from_dataset,
        scenarios_from_jsonl,
    )
    from tinker_tui.engine.rollouts.task import (
        Message,
        Scenario,
        Task,
        TaskError,
        member_clients,
        mix_tasks,
    )
    from tinker_tui.engine.rollouts.trajectory import Reward, Trajectory, TrajectoryError
    from tinker_tui.engine.training.advantages import group_advantages


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tinker_tui' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
