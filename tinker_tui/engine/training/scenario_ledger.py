"""Which scenario each group came from, and which a checkpoint has consumed.

The pipeline's part of exactly-once resume (`engine.training.resume`): every group gets the
position of its scenario in the run's stream; a position stays open until the step that
consumes it (trains the group, or drops it while collecting its batch), so a checkpoint at
step s knows what to run again. A resume or a rollback rebuilds the stream from the seed."""

from __future__ import annotations

import random
from typing import Any

from tinker_tui.engine.rollouts.task import Scenario, Task
from tinker_tui.engine.training.resume import ResumeState, ScenarioSource


class ScenarioLedger:
    """The scenario stream by position, the group ids, and the positions still open."""

    def __init__(self, task: Task, rng: random.Random) -> None:
        self._task = task
        # `restore` replays the stream from the generator's starting state: keep it.
        self._rng = rng
        self._rng_start = rng.getstate()
        self._source = ScenarioSource(task, rng)
        self.next_group_id = 0
        self._position_of: dict[int, int] = {}  # group id -> scenario position
        # Drawn positions not yet known to be consumed at a checkpoint: position -> the step
        # that consumed it (trained, or dropped while collecting its batch), None while open.
        self._open: dict[int, int | None] = {}

    @property
    def exhausted(self) -> bool:
        """The task's scenarios ran out."""
        return self._source.exhausted

    def draw(self) -> tuple[int, int, Scenario]:
        """The next scenario, as (group id, position, scenario); raises what
        `ScenarioSource.draw` raises (ran out, or the task's scenarios failed)."""
        position, scenario = self._source.draw()
        group_id = self.next_group_id
        self.next_group_id += 1
        self._position_of[group_id] = position
        self._open[position] = None
        return group_id, position, scenario

    def position(self, group_id: int) -> int:
        """The group's scenario position (-1 if it has none)."""
        return self._position_of.get(group_id, -1)

    def consumed(self, group_id: int, step: int) -> int:
        """The group is consumed by `step` (trained, or dropped while collecting it);
        returns its scenario position (-1 if it has none)."""
        position = self._position_of.pop(group_id, -1)
        if position in self._open:
            self._open[position] = step
        return position

    def at_checkpoint(self, step: int) -> dict[str, Any]:
        """The `ResumeState` fields of a checkpoint at `step`: a position counts as consumed
        only if the step that consumed it is at most `step`; the rest (in flight, queued,
        held by the trainer, dropped while collecting the next batch) are run again."""
        pending = [p for p, at in self._open.items() if at is None or at > step]
        for position in [p for p, at in self._open.items() if at is not None and at <= step]:
            del self._open[position]  # consumed for good: later checkpoints are later steps
        return {
            "next_position": self._source.next_position,
            "pending": tuple(sorted(set(pending) | set(self._source.waiting()))),
            "next_group_id": self.next_group_id,
            "rng_state": self._source.rng_state(),
        }

    def restore(self, state: ResumeState) -> bool:
        """Continue from a checkpoint's resume state: the stream replayed from the seed to
        the saved position, the positions it had not consumed drawn first. Returns whether
        the task's scenarios replayed reproducibly (the random state matched)."""
        self._rng.setstate(self._rng_start)
        self._source = ScenarioSource(
            self._task,
            self._rng,
            next_position=state.next_position,
            redo=state.pending,
            rng_state=state.rng_state,
        )
        self.next_group_id = state.next_group_id
        self._position_of.clear()
        self._open.clear()
        return self._source.reproducible
