"""The one control interface through which the UI, signal handlers and (later) other
processes steer a run, and the session shape a front end drives.

Front ends never reach into the pipeline; they call these methods and watch events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from tinker_tui.engine.config import LIVE_KNOBS
from tinker_tui.engine.events import EventBus, RunStatus

__all__ = ["LIVE_KNOBS", "Control", "Session"]  # LIVE_KNOBS: defined with the settings


class Control(Protocol):
    @property
    def paused(self) -> bool: ...

    def pause(self, reason: str = "paused by user") -> None:
        """No new rollouts start; in-flight ones finish; the trainer finishes its step."""

    def resume(self) -> None: ...

    def request_checkpoint(self) -> None:
        """Save a full checkpoint (with optimizer state) after the current step."""

    def stop(self, reason: str = "stopped by user") -> None:
        """Graceful stop: no new rollouts, finish the step, checkpoint, flush, return."""

    def request_eval(self) -> None:
        """Run the evaluator on the current policy as soon as possible."""

    def knobs(self) -> Mapping[str, float | int]:
        """Current values of the knobs that can change live (`engine.config.LIVE_KNOBS`)."""
        ...

    def set_knob(self, name: str, value: float | int) -> None:
        """Change a live knob; raises ValueError (`engine.config.check_knob`'s ConfigError)
        with a message for a bad name or value.
        Takes effect at the next rollout (temperature, workers) or step (the rest)."""


class Session(Protocol):
    """A run as a front end sees it: events out, commands in, and a coroutine to drive it."""

    events: EventBus
    control: Control

    async def run(self) -> RunStatus:
        """Run to the end (or until stopped); returns how it ended."""
        ...
