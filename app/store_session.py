"""A session read back from the run store, for `tinker-tui show` and `tinker-tui attach`.

The store holds every event a run published (`engine.store`). `StoreSession` reads them back
as the same typed events, in time order, and publishes them on its own event bus,
so the one dashboard draws a live run, a finished run and a run another process runs.

- `show` (`follow=False`): everything is published at once; `run()` then waits until the
  app quits. Its control is `ReadOnlyControl`: nothing to steer.
- `attach` (`follow=True`): new events are polled every `poll_interval` seconds; commands go
  to the running process through `engine.control_server.RemoteControl`. `run()` returns
  when the run has finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from tinker_tui.engine.clock import Clock, FakeClock, SystemClock
from tinker_tui.engine.control import Control
from tinker_tui.engine.control_server import ControlUnavailable
from tinker_tui.engine.events import Event, EventBus, LogEmitted, RunFinished, RunStatus
from tinker_tui.engine.store import EventCursor, StoredRun, StoreReader


class ReadOnlyControl:
    """The control of a run that is over (or that this process cannot reach): every
    command is refused with a message the dashboard shows."""

    read_only = True

    def __init__(self, why: str = "this run is not running here; nothing to control") -> None:
        self.why = why

    @property
    def paused(self) -> bool:
        return False

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise ValueError(self.why)

    pause = resume = request_checkpoint = stop = request_eval = _refuse

    def knobs(self) -> Mapping[str, float | int]:
        return {}

    def set_knob(self, name: str, value: float | int) -> None:
        self._refuse()


class StoreSession:
    """A `Session` whose events come from the run store (see the module docstring).

    The store is opened (read-only) inside `run()`, on the loop that drives the session.

    Args:
        db_path: The run store.
        run: The run (`engine.store.find_run`).
        control: How commands reach the run; `ReadOnlyControl()` when nothing can.
        follow: Keep polling for new events until the run finishes (attach).
        poll_interval: Seconds between polls when following.
    """

    def __init__(self, db_path: str | Path, run: StoredRun, *,
                 control: Control | None = None, follow: bool = False,
                 poll_interval: float = 0.5) -> None:
        self.db_path = Path(db_path)
        self.store: StoreReader | None = None
        self.stored_run = run
        self.run_id = run.run_id
        self.events = EventBus()
        self.control: Control = control if control is not None else ReadOnlyControl()
        self.follow = follow
        self.poll_interval = poll_interval
        self.read_only = bool(getattr(self.control, "read_only", False))
        self.remote = bool(getattr(self.control, "remote", False))
        self.attached = follow
        self.finished: RunFinished | None = None
        self._cursor = EventCursor(run)
        self._warned_unreachable = False
        #: Set once everything stored so far has been published.
        self.loaded = asyncio.Event()
        #: The clock to draw against: a finished run shown with `show` is drawn as of its
        #: end (rates and elapsed time stay as they were); a followed run on the system clock.
        self.clock: Clock
        if follow:
            self.clock = SystemClock()
        else:
            self.clock = FakeClock(float(run.ended_at or run.started_at or 0.0))

    async def read_new(self) -> list[Event]:
        """Events stored since the last call, in time order."""
        assert self.store is not None
        return await self.store.events_after(self._cursor)

    async def read_all(self) -> list[Event]:
        """Every stored event of the run, in time order (opens and closes the store)."""
        self.store = await StoreReader.open_readonly(self.db_path)
        try:
            return await self.read_new()
        finally:
            await self.store.close()

    async def publish_new(self) -> int:
        events = await self.read_new()
        for event in events:
            self.events.publish(event)
        return len(events)

    async def run(self) -> RunStatus:
        self.store = await StoreReader.open_readonly(self.db_path)
        try:
            await self.publish_new()
            if not self.follow:
                finished = self.stored_run.finished()
                if finished is not None:
                    self.events.publish(finished)
                else:
                    last = self._cursor.last_time
                    if isinstance(self.clock, FakeClock) and last is not None:
                        self.clock.advance(last - self.clock.now())
                    self.events.publish(LogEmitted(
                        time=self.clock.now(), level="warning",
                        message="the store has no end for this run: it is still running "
                                "(attach follows it) or its process died"))
                self.loaded.set()
                await asyncio.Event().wait()  # a stored run stays on screen until quit
            self.loaded.set()
            while True:
                await self._refresh_control()
                stored = await self.store.run(self.run_id)
                await self.publish_new()
                finished = stored.finished() if stored is not None else None
                if finished is not None:
                    await self.publish_new()  # rows committed with the end of the run
                    self.finished = finished
                    self.events.publish(finished)
                    return finished.status
                await asyncio.sleep(self.poll_interval)
        finally:
            await self.store.close()

    async def _refresh_control(self) -> None:
        refresh = getattr(self.control, "refresh", None)
        if refresh is None:
            return
        try:
            await asyncio.to_thread(refresh)
        except (ControlUnavailable, PermissionError, ValueError) as exc:
            if not self._warned_unreachable:
                self._warned_unreachable = True
                self.events.publish(LogEmitted(
                    time=self.clock.now(), level="warning",
                    message=f"cannot reach the run's control endpoint: {exc}"))
            return
        self._warned_unreachable = False

