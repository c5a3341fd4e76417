"""The rows the dashboard's state keeps (checkpoints, log lines, evals, commands, groups),
frozen values the panes read. No Textual here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tinker_tui.app.view_maths import format_knob
from tinker_tui.engine.events import (
    CheckpointKind,
    TrajectorySummary,
)

# --------------------------------------------------------------------------- model rows


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    step: int
    kind: CheckpointKind
    name: str
    path: str
    time: float
    #: A person asked for it: the retention policy keeps it.
    requested: bool = False


@dataclass(frozen=True, slots=True)
class LogLine:
    """A log line; `count` > 1 when it stands for that many repeats of one message
    (numbers aside), the last of which it shows."""

    time: float
    level: str
    message: str
    count: int = 1


@dataclass(frozen=True, slots=True)
class EvalPoint:
    step: int
    policy_version: int
    reward: float
    time: float
    metrics: Mapping[str, float] = field(default_factory=dict)
    #: How it sampled (`EvalCompleted.protocol`; {} when not stored).
    protocol: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CommandRow:
    """A control command the engine received; `step` is the last trained step then."""

    time: float
    step: int
    command: str
    args: Mapping[str, Any]
    source: str

    def describe(self) -> str:
        if self.command == "set":
            name = str(self.args.get("name", "?"))
            old, new = self.args.get("old"), self.args.get("value")
            if isinstance(old, int | float) and isinstance(new, int | float):
                return f"set {name} {format_knob(name, old)} → {format_knob(name, new)}"
            return f"set {name} → {new}"
        if self.command == "rolled_back":
            old, new = self.args.get("old"), self.args.get("value")
            text = (
                f"rolled back to {self.args.get('checkpoint', '?')} "
                f"(step {self.args.get('to_step', '?')})"
            )
            best, by = self.args.get("best_step"), self.args.get("best_sampled_by")
            if isinstance(best, int) and isinstance(by, int):
                text += f", the weights (version {by}) that sampled best step {best}"
            if isinstance(old, int | float) and isinstance(new, int | float):
                text += (
                    f", learning_rate {format_knob('learning_rate', old)} → "
                    f"{format_knob('learning_rate', new)}"
                )
            reason = self.args.get("reason")
            return f"{text}: {reason}" if reason else text
        reason = self.args.get("reason")
        return f"{self.command} ({reason})" if reason else self.command


@dataclass(slots=True)
class GroupRecord:
    """One group of rollouts as the rollouts view shows it.

    `step` is the training step whose batch took the group (trained it, or counted it with
    equal rewards), or the step that was being collected when it was dropped; None while it
    waits in the queue. `discarded` is the reason the trainer dropped it, if it did;
    `at_best` marks a group whose rewards were all equal to the best group reward seen
    until then (a converged group, not a lost learning signal).
    """

    group_id: int
    scenario_id: str
    step: int | None
    policy_version: int
    time: float
    reward_mean: float | None = None
    num_tokens: int = 0
    trajectories: tuple[TrajectorySummary, ...] = ()
    discarded: str | None = None
    detail: str = ""
    trainer_version: int | None = None
    at_best: bool = False
    #: Members whose rollout failed and were dropped (the group trained with the rest), and
    #: why the first of them failed.
    failed: int = 0
    failure: str = ""


@dataclass(frozen=True, slots=True)
class ThroughputSample:
    time: float
    rollouts_per_s: float
    tokens_per_s: float
