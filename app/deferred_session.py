"""A session whose engine is built after the dashboard's first frame.

Building the engine imports torch, transformers and the backend: seconds on an idle
machine, tens of seconds on a busy one. `tinker-tui run` checks everything that needs no
model first, then opens the dashboard on a `DeferredSession`; its `run()` imports the
engine in a thread, builds it on the loop, forwards the engine's events to its own bus and
drives it. Until the engine exists the dashboard shows "starting the engine"; from then on
every line it shows comes from the engine's events (its start-up phases included).

A stop asked for before the engine exists ends the run before it starts (nothing is
recorded); the other commands are refused with "the run is still starting".
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tinker_tui.engine.clock import Clock, SystemClock
from tinker_tui.engine.events import EventBus, RunFinished, RunStatus

#: Modules whose import is the slow part of building the engine (done in a thread).
ENGINE_MODULES = ("tinker_tui.engine.run",)


class StartingControl:
    """The control while the engine is being built; forwards to it once it exists."""

    def __init__(self, owner: DeferredSession) -> None:
        self._owner = owner

    def _target(self) -> Any:
        session = self._owner.session
        if session is None:
            raise ValueError("the run is still starting; try again in a moment")
        return session.control

    @property
    def paused(self) -> bool:
        session = self._owner.session
        return bool(session is not None and session.control.paused)

    def pause(self, reason: str = "paused by user") -> None:
        self._target().pause(reason)

    def resume(self) -> None:
        self._target().resume()

    def request_checkpoint(self) -> None:
        self._target().request_checkpoint()

    def request_eval(self) -> None:
        self._target().request_eval()

    def stop(self, reason: str = "stopped by user") -> None:
        if self._owner.session is None:
            self._owner.stop_reason = reason
            return
        self._owner.session.control.stop(reason)

    def knobs(self) -> Mapping[str, float | int]:
        session = self._owner.session
        return session.control.knobs() if session is not None else {}

    def set_knob(self, name: str, value: float | int) -> None:
        self._target().set_knob(name, value)


class DeferredSession:
    """A `Session` that builds the real one (`build(clock)`) when `run()` starts.

    Args:
        build: Makes the engine's session; called on the loop after its modules were
            imported in a thread.
        clock: The clock the engine is given (the dashboard draws against it too).
        db_path: The run store, for whoever asks before the engine exists.
    """

    def __init__(self, build: Callable[[Clock], Any], *, clock: Clock | None = None,
                 db_path: Path | None = None) -> None:
        self._build = build
        self.clock: Clock = clock or SystemClock()
        self.db_path = db_path
        self.events = EventBus()
        self.control = StartingControl(self)
        self.session: Any = None
        self.stop_reason: str | None = None

    async def run(self) -> RunStatus:
        for module in ENGINE_MODULES:
            await asyncio.to_thread(importlib.import_module, module)
        if self.stop_reason is not None:
            return self._stopped_before_start()
        self.session = self._build(self.clock)
        self.session.events.subscribe(self.events.publish)
        return await self.session.run()

    def _stopped_before_start(self) -> RunStatus:
        self.events.publish(RunFinished(time=self.clock.now(), status="stopped", final_step=0,
                                        reason=f"{self.stop_reason} before the run started"))
        return "stopped"
