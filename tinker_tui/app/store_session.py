"""A session read back from the run store, for `tinker-tui show`, `attach` and `run`.

The store holds every event a run published (`engine.store`). `StoreSession` reads them back
as the same typed events, in time order, and publishes them on its own event bus,
so the one dashboard draws a live run, a finished run and a run another process runs.

- `show` (`follow=False`): everything is published at once; `run()` then waits until the
  app quits. Its control is `ReadOnlyControl`: nothing to steer.
- `attach` and `run` (`follow=True`): new events are polled every `poll_interval` seconds;
  commands go to the engine's process through `engine.control.endpoint.RemoteControl`. `run()`
  returns when the run has finished, or when its process is gone without finishing it:
  then the run is shown as interrupted (stopped at once by a second signal; for `attach`,
  which cannot know how its process ended, always) or failed (a crash, `kill -9`), with the
  engine's last log lines.
  `run` starts the session before its engine has started (`run=None`): `run()` starts it
  (`Engine.start`: the dashboard calls `run()` once its first frame is drawn), waits for its
  control endpoint and its row in the store, and raises `EngineExited` if the engine ends
  first (or a signal cancelled its start).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tinker_tui.engine.clock import Clock, FakeClock, SystemClock
from tinker_tui.engine.control.client import ControlUnavailable, RemoteControl
from tinker_tui.engine.control.interface import Control
from tinker_tui.engine.events import (
    Event,
    EventBus,
    LogEmitted,
    RunFinished,
    RunLabelled,
    RunStatus,
    StepTrained,
)
from tinker_tui.engine.store import EventCursor, StoredRun, StoreReader

if TYPE_CHECKING:
    from tinker_tui.app.engine_process import Engine

#: Seconds `StoreSession.read_tail` waits at most for an ended run's engine to let go of it
#: (its trackers get up to 30 s to finish writing; most take well under one).
TAIL_TIMEOUT = 35.0


#: A line of the engine's output that reports an error (an exception's last line, a
#: traceback's start, a warning or error of the headless run), not a step line.
_SAYS_ERROR = re.compile(
    r"(Traceback|\w*(Error|Exception|Interrupt)\b|(tinker-tui: )?"
    r"(error|warning)\b)"
)


class ReadOnlyControl:
    """The control of a run that is over (or that this process cannot reach): every
    command is refused with a message the dashboard shows."""

    read_only = True

    def __init__(self, why: str = "this run is not running here; nothing to control") -> None:
        self.why = why

    @property
    def paused(self) -> bool:
        return False

    @property
    def stopping(self) -> bool:
        return False

    @property
    def health_stop_reason(self) -> str:
        return ""

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise ValueError(self.why)

    pause = resume = request_checkpoint = stop = request_eval = request_rollback = _refuse

    def knobs(self) -> Mapping[str, float | int]:
        return {}

    def set_knob(self, name: str, value: float | int) -> None:
        self._refuse()


class StartingControl(ReadOnlyControl):
    """The control while the engine has no endpoint yet: commands are refused, for now."""

    read_only = False

    def __init__(self) -> None:
        super().__init__("the run is still starting; try again in a moment")


class StoreSession:
    """A `Session` whose events come from the run store (see the module docstring).

    The store is opened (read-only) inside `run()`, on the loop that drives the session.

    Args:
        db_path: The run store.
        run: The run (`engine.store.find_run`); None to wait for run `run_id` to appear.
        run_id: The run to wait for when `run` is None.
        control: How commands reach the run; `ReadOnlyControl()` when nothing can. When
            None for a run still starting, its control file is read once it appears.
        follow: Keep polling for new events until the run finishes (attach, run).
        poll_interval: Seconds between polls when following.
        engine: The process that runs the run, when known (`app.engine_process`): its end
            without a recorded end is the run's failure.
        kinds: Only events of these types (`EventCursor`); None: every type (a comparison
            reads only what its charts draw).
    """

    #: Seconds between control-state refreshes while following (knobs, paused).
    CONTROL_REFRESH = 1.0

    def __init__(
        self,
        db_path: str | Path,
        run: StoredRun | None = None,
        *,
        run_id: str | None = None,
        control: Control | None = None,
        follow: bool = False,
        poll_interval: float = 0.25,
        engine: Engine | None = None,
        kinds: Collection[type[Event]] | None = None,
    ) -> None:
        if run is None and not (follow and run_id):
            raise ValueError("a StoreSession without a stored run follows a run_id")
        self.db_path = Path(db_path)
        self.store: StoreReader | None = None
        self.stored_run = run
        self.run_id = run.run_id if run is not None else str(run_id)
        self.events = EventBus()
        if control is None:
            control = StartingControl() if run is None else ReadOnlyControl()
        self.control: Control = control
        self.follow = follow
        self.poll_interval = poll_interval
        self.engine = engine
        self.read_only = isinstance(control, ReadOnlyControl) and control.read_only
        self.remote = follow or isinstance(control, RemoteControl)
        self.attached = follow
        self.finished: RunFinished | None = None
        #: Whether `read_tail` has read what the engine wrote after the run's end.
        self.tail_read = False
        self.kinds = kinds
        self._cursor = EventCursor(run, kinds) if run is not None else None
        self._warned_unreachable = False
        self._last_step = run.start_step if run is not None else 0
        self._label = (run.run_name, run.note) if run is not None else ("", "")
        self._next_control_refresh = 0.0
        #: Set once everything stored so far has been published.
        self.loaded = asyncio.Event()
        #: The clock to draw against: a finished run shown with `show` is drawn as of its
        #: end (rates and elapsed time stay as they were); a followed run on the system clock.
        self.clock: Clock
        if follow or run is None:
            self.clock = SystemClock()
        else:
            self.clock = FakeClock(float(run.ended_at or run.started_at or 0.0))

    async def read_new(self) -> list[Event]:
        """Events stored since the last call, in time order."""
        assert self.store is not None and self._cursor is not None
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
            if isinstance(event, StepTrained):
                self._last_step = event.step
            self.events.publish(event)
        return len(events)

    async def run(self) -> RunStatus:
        if self.stored_run is None:
            await self._wait_for_start()
        self.store = await StoreReader.open_readonly(self.db_path)
        try:
            await self.publish_new()
            if not self.follow:
                await self._show_stored()
            self.loaded.set()
            while True:
                unreachable = await self._refresh_control()
                stored = await self.store.run(self.run_id)
                await self.publish_new()
                if stored is not None:
                    self.note_label(stored.run_name, stored.note)
                finished = stored.finished() if stored is not None else None
                if (
                    finished is None
                    and self.engine is not None
                    and self.engine.exit_code() is not None
                ):
                    finished = await self._engine_gone()
                if unreachable and finished is None:  # not merely closed with the run's end
                    self._warn_unreachable(unreachable)
                if finished is not None:
                    await self.publish_new()  # rows committed with the end of the run
                    self.finished = finished
                    self.events.publish(finished)
                    return finished.status
                await asyncio.sleep(self.poll_interval)
        finally:
            await self.store.close()

    def note_label(self, run_name: str, note: str) -> None:
        """Publish the run's name and note when they changed (edited from a dashboard)."""
        if (run_name, note) != self._label:
            self._label = (run_name, note)
            self.events.publish(RunLabelled(time=self.clock.now(), run_name=run_name, note=note))

    async def _show_stored(self) -> None:
        """`show`: the stored run's end (or a warning that it has none), then wait."""
        assert self.stored_run is not None and self._cursor is not None
        if self.store is not None:  # the run may have ended since it was looked up
            fresh = await self.store.run(self.run_id)
            self.stored_run = fresh if fresh is not None else self.stored_run
        finished = self.stored_run.finished()
        if finished is not None:
            self.events.publish(finished)
        else:
            last = self._cursor.last_time
            if isinstance(self.clock, FakeClock) and last is not None:
                self.clock.advance(last - self.clock.now())
            self.events.publish(
                LogEmitted(
                    time=self.clock.now(),
                    level="warning",
                    message="the store has no end for this run: it is still running "
                    "(attach follows it) or its process died",
                )
            )
        self.loaded.set()
        await asyncio.Event().wait()  # a stored run stays on screen until quit

    async def _wait_for_start(self) -> None:
        """Start the engine (`Engine.start`), then wait until it has a control endpoint and
        its run is in the store; EngineExited if the engine ends first (the command prints
        what it said), or was cancelled by a signal before it started."""
        from tinker_tui.app.engine_process import EngineExited, exit_interrupts, log_tail
        from tinker_tui.engine.control.client import control_file_path
        from tinker_tui.engine.store import StoreError, find_run

        if self.engine is not None:
            await self.engine.start()
        where = (
            f"; its output goes to {self.engine.log_path}"
            if self.engine and self.engine.log_path
            else ""
        )
        self._log("info", f"starting the engine for run {self.run_id}{where}")
        control_file = control_file_path(self.db_path, self.run_id)
        while True:
            code = self.engine.exit_code() if self.engine is not None else None
            if isinstance(self.control, StartingControl) and control_file.is_file():
                await self._connect(control_file)
            if not isinstance(self.control, StartingControl) or code is not None:
                try:
                    self.stored_run = await find_run(self.db_path, self.run_id)
                except StoreError:  # no row (or no store file) yet
                    pass
                else:
                    self._cursor = EventCursor(self.stored_run, self.kinds)
                    self._last_step = self.stored_run.start_step
                    self._label = (self.stored_run.run_name, self.stored_run.note)
                    return
            if code is not None:
                assert self.engine is not None
                log = self.engine.log_path
                lines = log_tail(log)
                if exit_interrupts(code) and log is not None:
                    # stopped before its run was stored: nothing started, nothing to keep
                    with contextlib.suppress(OSError):
                        log.unlink()
                raise EngineExited(code, lines, log if log and log.is_file() else None)
            await asyncio.sleep(self.poll_interval)

    async def _connect(self, control_file: Path) -> None:
        from tinker_tui.engine.control.client import ControlClient

        try:
            control = RemoteControl(ControlClient.from_file(control_file))
            await asyncio.to_thread(control.refresh)
        except (ControlUnavailable, PermissionError, ValueError):
            return  # not listening yet, or already gone: the next poll tells
        self.control = control

    async def _engine_gone(self) -> RunFinished | None:
        """The engine's process ended: the run's stored end if it wrote one, else an
        interruption (`exit_interrupts`) or a failure, with the engine's last log lines."""
        from tinker_tui.app.engine_process import describe_exit, exit_interrupts, log_tail

        assert self.store is not None and self.engine is not None
        await self.publish_new()
        stored = await self.store.run(self.run_id)
        finished = stored.finished() if stored is not None else None
        if finished is not None:
            return finished
        self.control = ReadOnlyControl("the run's process is gone; nothing to control")
        code = self.engine.exit_code()
        code = code if code is not None else 0
        interrupted = exit_interrupts(code)
        for line in log_tail(self.engine.log_path):  # its output: step lines, then what broke
            level = "warning" if interrupted else "error"
            self._log(level if _SAYS_ERROR.match(line) else "info", f"engine: {line}")
        return RunFinished(
            time=self.clock.now(),
            status="interrupted" if interrupted else "failed",
            cause="interrupted" if interrupted else "failed",
            final_step=self._last_step,
            reason=f"the engine process {describe_exit(code)} without finishing the run",
        )

    def _log(self, level: str, message: str) -> None:
        self.events.publish(LogEmitted(time=self.clock.now(), level=level, message=message))

    async def _refresh_control(self) -> str | None:
        """Refresh the control's state (knobs, paused) now and then; what went wrong, if
        the endpoint could not be reached."""
        control = self.control
        now = time.monotonic()
        if not isinstance(control, RemoteControl) or now < self._next_control_refresh:
            return None
        self._next_control_refresh = now + self.CONTROL_REFRESH
        try:
            await asyncio.to_thread(control.refresh)
        except (ControlUnavailable, PermissionError, ValueError) as exc:
            return str(exc)
        self._warned_unreachable = False
        return None

    def _warn_unreachable(self, problem: str) -> None:
        if not self._warned_unreachable and (
            self.engine is None or self.engine.exit_code() is None
        ):
            self._warned_unreachable = True
            self._log("warning", f"cannot reach the run's control endpoint: {problem}")

    async def read_tail(self, timeout: float = TAIL_TIMEOUT) -> None:
        """After the run's end: publish what its engine still writes while it closes (the
        trackers' last lines: where W&B and TensorBoard put the run's records), until the
        engine lets go of the run (or ends), at most `timeout` seconds. Once per session."""
        from tinker_tui.engine.training.resume import run_is_live

        if self.finished is None or self.tail_read or self._cursor is None:
            return
        deadline = time.monotonic() + timeout

        def writing() -> bool:
            if self.engine is not None and self.engine.exit_code() is not None:
                return False
            return run_is_live(self.db_path, self.run_id)

        self.store = await StoreReader.open_readonly(self.db_path)
        try:
            while await asyncio.to_thread(writing) and time.monotonic() < deadline:
                await self.publish_new()
                await asyncio.sleep(self.poll_interval)
            await self.publish_new()
            self.tail_read = True
        finally:
            await self.store.close()
