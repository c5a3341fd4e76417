"""The run's full checkpoints: when one is written, writing it, and which one a rollback uses.

A full checkpoint is the backend's weights and optimizer state plus the pipeline's resume
state, confirmed in one store row. They are written at a step boundary only: periodically
(`checkpoint_every`), when asked, near a new best step (so a rollback loses little), and
at the end. This object keeps the table of this run's checkpoints, from which a rollback
picks its target (the newest one holding the weights that sampled the best step, not the
best step's own, which holds its update: `engine.metrics.health`), and tells the backend
session's retention policy to keep that one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from tinker_tui.engine import faults
from tinker_tui.engine.backend.checkpoint_retention import checkpoint_name
from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.clock import Clock
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.events import CheckpointSaved, CheckpointStarted, EventBus, LogEmitted
from tinker_tui.engine.metrics.health import HealthWindow
from tinker_tui.engine.training.resume import ResumeState


class Checkpointer:
    def __init__(
        self,
        *,
        config: RunConfig,
        session: BackendSession,
        health: HealthWindow,
        bus: EventBus,
        clock: Clock,
        commit_events: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.config = config
        self.session = session
        self.health = health
        self.bus = bus
        self.clock = clock
        #: Full checkpoints this run can go back to: step -> (name, path, resume state).
        self.table: dict[int, tuple[str, str, ResumeState]] = {}
        #: The step of the last checkpoint written (or adopted on resume), if any.
        self.last_step: int | None = None
        #: The step whose checkpoint is being written now, if one is (`last_step` is set as
        #: it starts: a stop then is told it waits for it, not that it is written).
        self.writing: int | None = None
        #: Asked for (`Control.request_checkpoint`): written after the current step.
        self.requested = False
        #: Awaited after a checkpoint event is published, so the store commits its row
        #: before training goes on (the run passes the store's flush).
        self.commit_events = commit_events

    def due(self, step: int, best_before: tuple[int, float] | None) -> str | None:
        """Why a checkpoint is written after `step`, if one is: asked for, periodic, or near
        the best step (`best_before` is the best step before this one)."""
        every = self.config.checkpoint_every
        if self.requested:
            return "requested"
        if every and step % every == 0 and step < self.config.max_steps:
            return "periodic"
        if self._best_due(step, best_before):
            return "best step so far"
        return None

    def _best_due(self, step: int, best_before: tuple[int, float] | None) -> bool:
        """Checkpoints near the best step, for a rollback: after a step that beats the best so
        far, from step `checkpoint_every` on (the first steps beat it all the time), if the
        last full checkpoint is `checkpoint_every` / 3 steps old or more (at most two steps
        of a climb are lost to a rollback with the default 10). With `checkpoint_every`
        below 4 the periodic checkpoints are that close to any best step already."""
        every = self.config.checkpoint_every
        best = self.health.best_step
        if (
            every < 4
            or best is None
            or best == best_before
            or best[0] != step
            or step < every
            or step >= self.config.max_steps
        ):
            return False
        last = self.last_step
        return last is None or step - last >= max(1, every // 3)

    async def write(
        self, step: int, why: str, resume_state: Callable[[], ResumeState], *, warmup_done: bool
    ) -> None:
        """Write the checkpoint of `step` (unless it is written already, or the weights are
        not worth one); `resume_state` is taken before the first await."""
        self.requested = False
        name = checkpoint_name(step)
        if self.last_step == step:
            if why == "requested":
                self._mark_requested(step)
            return
        if not warmup_done:
            # The weights are the base's, or part-way through the format warm-up: no resume
            # could continue from them. A resumed run starts over and runs the warm-up.
            self._log(
                "info",
                f"no checkpoint ({why}): the format warm-up had not finished; "
                "a resumed run starts over and runs it",
            )
            return
        self.last_step = step
        self.writing = step
        try:
            await self._write(step, name, why, resume_state)
        finally:
            self.writing = None

    async def _write(
        self, step: int, name: str, why: str, resume_state: Callable[[], ResumeState]
    ) -> None:
        state = resume_state()
        self.bus.publish(
            CheckpointStarted(time=self.clock.now(), step=step, kind="state", name=name)
        )
        # Ordered by step for the retention policy (a step without gradient makes no new
        # version), as a resumed run's adopted checkpoints are.
        path = await self.session.save_state(name, step=step)
        faults.hit("checkpoint", state.step)
        requested = why == "requested"
        if requested:  # kept by the retention policy from now on
            self.session.retention.requested_state_steps.add(state.step)
        # Confirmed once this row is committed (with the resume state, in one row).
        self.bus.publish(
            CheckpointSaved(
                time=self.clock.now(),
                step=state.step,
                kind="state",
                name=name,
                path=path,
                resume_state=state.as_dict(),
                requested=requested,
            )
        )
        self.table[state.step] = (name, path, state)
        self.health.checkpointed(state.step, name, state.policy_version)
        self.keep_rollback_point()
        if self.commit_events is not None:
            await self.commit_events()
        self._log("info", f"checkpoint {name} saved ({why}): {path}")

    def _mark_requested(self, step: int) -> None:
        """Asked for at a step checkpointed already: that checkpoint is the one asked for
        (kept by retention, marked), published again as such."""
        name = checkpoint_name(step)
        if step in self.session.retention.requested_state_steps or step not in self.table:
            self._log(
                "info",
                f"checkpoint {name} is written already"
                + ("; it is kept" if step in self.session.retention.requested_state_steps else ""),
            )
            return
        _, path, state = self.table[step]
        self.session.retention.requested_state_steps.add(step)
        self.bus.publish(
            CheckpointSaved(
                time=self.clock.now(),
                step=step,
                kind="state",
                name=name,
                path=path,
                resume_state=state.as_dict(),
                requested=True,
            )
        )
        self._log("info", f"checkpoint {name} is written already; it is kept as asked for")

    def adopt(
        self, step: int, name: str, path: str, state: ResumeState, *, requested: bool = False
    ) -> None:
        """A full checkpoint an earlier process of this run saved (a resumed run);
        `requested`: a person asked for it, so the retention policy keeps it."""
        self.table[step] = (name, path, state)
        self.health.checkpointed(step, name, state.policy_version)
        if requested:
            self.session.retention.requested_state_steps.add(step)

    def restored(self, state: ResumeState) -> None:
        """The run continues from `state`: a start state (no checkpoint: warm-up not done)
        has no checkpoint of its step yet."""
        self.last_step = state.step if state.warmup_done else None

    def rewound(self, step: int) -> None:
        """A rollback went back to `step`: the checkpoints after it are gone with its steps."""
        self.table = {s: c for s, c in self.table.items() if s <= step}

    def rollback_target(self) -> tuple[int, str] | None:
        """(step, name) of the checkpoint a rollback would go back to now, if any."""
        target = self.health.rollback_point()
        return target if target is not None and target[0] in self.table else None

    def keep_rollback_point(self) -> None:
        """The checkpoint a rollback would use is kept by the retention policy."""
        target = self.health.rollback_point()
        self.session.retention.keep_state_step = target[0] if target else None

    def _log(self, level: str, message: str) -> None:
        self.bus.publish(LogEmitted(time=self.clock.now(), level=level, message=message))
