"""The one control interface through which the UI, signal handlers and other processes
steer a run, and the session shape every front end drives.

Front ends never reach into the pipeline; they call these methods and watch events. A
`Session` is everything the dashboard and the headless runner use of a run: the engine's
`Run` (this process drives it, headless), `app.store_session.StoreSession` (a stored run,
or one another process drives: the engine a dashboard started, or one it attached to) and
the tests' scripted fake all implement it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from tinker_tui.engine.clock import Clock
from tinker_tui.engine.events import EventBus, RunStatus


class Control(Protocol):
    @property
    def paused(self) -> bool: ...

    @property
    def stopping(self) -> bool:
        """A graceful stop was asked for; the run is winding down."""
        ...

    @property
    def health_stop_reason(self) -> str:
        """The health check's reason when it stopped the run (on_health_pause = stop), else
        empty: a headless run then exits with its own code."""
        ...

    def pause(self, reason: str = "paused by user") -> None:
        """No new rollouts start; in-flight ones finish; the trainer finishes its step."""

    def resume(self) -> None: ...

    def request_checkpoint(self) -> None:
        """Save a full checkpoint (with optimizer state) after the current step."""

    def stop(self, reason: str = "stopped by user") -> None:
        """Graceful stop: no new rollouts, finish the step, checkpoint, flush, return."""

    def request_eval(self) -> None:
        """Run the evaluator on the current policy as soon as possible."""

    def request_rollback(
        self, reason: str = "rolled back by user", lr_scale: float | None = None
    ) -> None:
        """Go back to the checkpoint of the weights that sampled the best step, with the learning
        rate scaled (default `rollback_lr_scale`); the steps after it are undone as a resume
        undoes them (`Pipeline.request_rollback`)."""

    def knobs(self) -> Mapping[str, float | int]:
        """Current values of the knobs that can change live (`engine.config.LIVE_KNOBS`)."""
        ...

    def set_knob(self, name: str, value: float | int) -> None:
        """Change a live knob; raises ValueError (`engine.config.check_knob`'s ConfigError)
        with a message for a bad name or value.
        Takes effect at the next rollout (temperature, workers) or step (the rest)."""


class Session(Protocol):
    """A run as a front end sees it: events out, commands in, and a coroutine to drive it."""

    @property
    def events(self) -> EventBus: ...

    @property
    def control(self) -> Control: ...

    @property
    def clock(self) -> Clock:
        """The clock the run's events are stamped with; rates are computed against it."""
        ...

    @property
    def run_id(self) -> str: ...

    @property
    def db_path(self) -> Path | None:
        """The run store the run records to (or is read from); None: no store."""
        ...

    @property
    def read_only(self) -> bool:
        """Nothing to steer: a stored run (`show`); every command is refused."""
        ...

    @property
    def attached(self) -> bool:
        """Driven by another process: commands go over its control endpoint (blocking
        calls, so a front end sends them from a thread) and leaving only detaches."""
        ...

    async def run(self) -> RunStatus:
        """Run to the end (or until stopped); returns how it ended."""
        ...
