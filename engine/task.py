"""The task API: what a user writes to train their own agent.

A task is a source of scenarios, an async rollout that talks to an OpenAI-compatible
endpoint and returns a scored `Trajectory`, and optional settings. The engine runs the
rollout `group_size` times per scenario and trains on the group-relative advantages.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.trajectory import Trajectory

Message = dict[str, str]


@dataclass(frozen=True, slots=True)
class Scenario:
    """One thing to roll out: an id (for the log and the store) and the task's own data."""

    id: str
    data: Any


#: rollout(client, model, scenario) -> Trajectory; `client` is an `openai.AsyncOpenAI`.
Rollout = Callable[[Any, str, Scenario], Awaitable[Trajectory]]


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    #: Given the run's seeded random generator, yields training scenarios (may be endless).
    scenarios: Callable[[random.Random], Iterator[Scenario]]
    rollout: Rollout
    #: Optional held-out scenarios for the evaluator (a finite collection, run once each).
    eval_scenarios: Callable[[], Iterable[Scenario]] | None = None
    #: Optional supervised format examples (whole conversations, last assistant turn
    #: trained) run before RL when `warmup_steps` > 0.
    warmup: Sequence[Sequence[Message]] = ()
    #: Defaults for `RunConfig` fields that suit this task.
    settings: Mapping[str, Any] = field(default_factory=dict)
