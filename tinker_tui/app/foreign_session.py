"""A run another program trains, watched from its own run folder (`show --cookbook`,
`show --art`).

`ForeignSession` is a `Session` over an incremental reader of the folder
(`engine.foreign.folder_reader.FolderReader`): it publishes what the folder holds, then polls
it every `poll_interval` seconds for what the run writes next, until the folder says the
run ended. Control stays with the program that trains: every command is refused, and the
dashboard says it is watching (`mode_label`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tinker_tui.app.store_session import ReadOnlyControl
from tinker_tui.engine.clock import Clock, FakeClock, SystemClock
from tinker_tui.engine.control.interface import Control
from tinker_tui.engine.events import Event, EventBus, RunFinished, RunStatus
from tinker_tui.engine.foreign.folder_reader import FolderReader


class ForeignSession:
    """A read-only `Session` over a foreign run folder (see the module docstring)."""

    read_only = True
    attached = False
    follow = True
    db_path: Path | None = None
    engine = None

    def __init__(
        self, reader: FolderReader, *, poll_interval: float = 0.25, clock: Clock | None = None
    ) -> None:
        self.reader = reader
        self.run_id = reader.run_id
        self.events = EventBus()
        self.control: Control = ReadOnlyControl(
            f"watching a {reader.backend} run: the program that trains it steers it"
        )
        #: What the folder holds now (read before the dashboard starts): a run that has
        #: ended is drawn as of its end, as `show` draws a finished run of ours.
        self._held = reader.poll()
        self.ended_before = reader.finished is not None
        if clock is None:
            clock = (
                FakeClock(reader.finished.time) if reader.finished is not None else SystemClock()
            )
        self.clock = clock
        self.poll_interval = poll_interval
        self.mode_label = f"watching ({reader.backend})"
        self.finished: RunFinished | None = None
        self.loaded = asyncio.Event()

    async def publish_new(self) -> list[Event]:
        events, self._held = self._held + await asyncio.to_thread(self.reader.poll), []
        for event in events:
            self.events.publish(event)
        return events

    async def run(self) -> RunStatus:
        """Follow the folder until it records the run's end; a run that had ended before
        stays on screen until quit."""
        await self.publish_new()
        self.loaded.set()
        if self.ended_before:
            await asyncio.Event().wait()
        while self.reader.finished is None:
            await asyncio.sleep(self.poll_interval)
            await self.publish_new()
        self.finished = self.reader.finished
        return self.reader.finished.status

    async def read_tail(self) -> None:
        """Nothing is written after a foreign run's end that we read."""

    def note_label(self, run_name: str, note: str) -> None:
        """A foreign run's name is its folder's: nothing to store."""
