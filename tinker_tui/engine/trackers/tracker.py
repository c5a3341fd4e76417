"""What every tracker is given: the run, and the rows of its samples tables.

A tracker's methods run on its feed's thread, one at a time, in the order of the events;
`start` and `finish` return lines for the user (where the records are, how to upload them).
The same methods write a stored run after the fact (`tinker-tui export --format ...`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

#: Columns of a samples table, one row per rollout.
SAMPLE_COLUMNS = (
    "step",
    "group_id",
    "scenario_id",
    "sample",
    "reward",
    "policy_version",
    "num_tokens",
    "conversation",
)
#: Longest conversation text a samples table keeps per rollout.
MAX_CONVERSATION_CHARS = 4000


@dataclass(frozen=True, slots=True)
class RunInfo:
    run_id: str
    name: str
    backend: str
    base_model: str
    config: Mapping[str, Any] = field(default_factory=dict)
    #: The step the run (re)starts after: a resumed run redoes the steps after it.
    start_step: int = 0
    #: The run's own name and note ("" when none).
    run_name: str = ""
    note: str = ""


class Tracker(Protocol):
    key: str  # "wandb" | "tensorboard"
    name: str  # as the user knows it: "W&B", "TensorBoard"

    def start(self, run: RunInfo) -> list[str]: ...

    def log_step(
        self, step: int, policy_version: int, metrics: Mapping[str, float], time: float
    ) -> None: ...

    def log_eval(
        self, step: int, policy_version: int, metrics: Mapping[str, float], time: float
    ) -> None: ...

    def log_checkpoint(self, step: int, kind: str, name: str, path: str) -> None: ...

    def log_samples(self, step: int, rows: list[tuple[Any, ...]]) -> None: ...

    def log_rollback(self, to_step: int, steps_undone: int, reason: str, time: float) -> None:
        """The run went back to its checkpoint at `to_step` (a rollback): the steps after it
        that were logged are undone, and are logged again as the run redoes them."""
        ...

    def finish(self, status: str) -> list[str]: ...

    def abort(self) -> None:
        """After a failure: release what can be released; never raises."""
        ...


def conversation_text(messages: Iterable[Mapping[str, Any]]) -> str:
    """A rollout's messages as `role: content` lines, cut to MAX_CONVERSATION_CHARS."""
    lines = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str):
            content = "" if content is None else str(content)
        lines.append(f"{message.get('role', '?')}: {content}")
    text = "\n".join(lines)
    if len(text) > MAX_CONVERSATION_CHARS:
        text = text[: MAX_CONVERSATION_CHARS - 1] + "…"
    return text


def numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The metrics a chart can draw (numbers; booleans and text left out)."""
    return {
        str(k): float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
