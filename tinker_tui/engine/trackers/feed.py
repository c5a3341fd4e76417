"""`TrackerFeed`: hands a run's events to one tracker on a thread of its own.

`handle` runs on the event loop and only queues a call (no I/O, no import, no waiting), so
a tracker that is slow to import, slow to start or slow to write never slows a step. The
thread makes the calls in order. The first exception switches the tracker off for the rest
of the run: it is reported once as a warning, the run goes on. So is a tracker that falls
`max_backlog` calls behind. Everything the tracker has to say reaches the event bus as a
`TrackerReported` event, published on the loop's thread.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from tinker_tui.engine.clock import Clock
from tinker_tui.engine.events import (
    CheckpointSaved,
    CommandReceived,
    EvalCompleted,
    Event,
    GroupDiscarded,
    GroupSampled,
    RunFinished,
    RunStarted,
    StepTrained,
    TrackerReported,
)
from tinker_tui.engine.trackers.tracker import RunInfo, conversation_text

logger = logging.getLogger(__name__)

_CLOSE = object()
#: Groups kept for a samples table while they wait for their step (beyond: oldest dropped).
_MAX_GROUPS = 4096


class TrackerFeed:
    def __init__(
        self,
        tracker: Any,
        *,
        publish: Callable[[Event], None],
        clock: Clock,
        samples_every: int = 0,
        max_backlog: int = 10_000,
        close_timeout: float = 30.0,
    ) -> None:
        self.tracker = tracker
        self.samples_every = samples_every
        self.max_backlog = max_backlog
        self.close_timeout = close_timeout
        #: Set once the tracker failed (or fell behind); it is then off for good.
        self.failed = False
        self._publish = publish
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._queued = 0  # calls queued (loop thread)
        self._done = 0  # calls finished or skipped (tracker thread)
        self._groups: dict[int, GroupSampled] = {}
        self._thread = threading.Thread(
            target=self._work, daemon=True, name=f"tracker-{tracker.key}"
        )
        self._thread.start()

    # ------------------------------------------------------------------ loop side
    def handle(self, event: Event) -> None:
        """EventBus subscriber: queue the tracker call this event makes, if any."""
        if threading.get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self.handle, event)
            return
        if self.failed:
            return
        t = self.tracker
        if isinstance(event, StepTrained):
            self._call(
                t.log_step, event.step, event.policy_version, dict(event.metrics), event.time
            )
            groups = [
                g for g in (self._groups.pop(i, None) for i in event.group_ids) if g is not None
            ]
            if self.samples_every and event.step % self.samples_every == 0 and groups:
                self._call(self._log_samples, event.step, groups)
        elif isinstance(event, GroupSampled):
            if self.samples_every:
                self._groups[event.group_id] = event
                if len(self._groups) > _MAX_GROUPS:
                    self._groups.pop(next(iter(self._groups)))
        elif isinstance(event, GroupDiscarded):
            if event.reason != "zero_variance":  # those still count in their step's batch
                self._groups.pop(event.group_id, None)
        elif isinstance(event, EvalCompleted):
            self._call(
                t.log_eval, event.step, event.policy_version, dict(event.metrics), event.time
            )
        elif isinstance(event, CheckpointSaved):
            self._call(t.log_checkpoint, event.step, event.kind, event.name, event.path)
        elif isinstance(event, CommandReceived) and event.command == "rolled_back":
            to_step = event.args.get("to_step")
            if isinstance(to_step, int):
                self._groups.clear()  # sampled for steps that will not come
                self._call(
                    t.log_rollback,
                    to_step,
                    int(event.args.get("steps_undone") or 0),
                    str(event.args.get("reason") or ""),
                    event.time,
                )
        elif isinstance(event, RunStarted):
            self._call(
                t.start,
                RunInfo(
                    run_id=event.run_id,
                    name=event.name,
                    backend=event.backend,
                    base_model=event.base_model,
                    config=dict(event.config),
                    start_step=event.start_step,
                    run_name=event.run_name,
                    note=event.note,
                ),
            )
        elif isinstance(event, RunFinished):
            self._call(t.finish, event.status)

    def _call(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._queued - self._done >= self.max_backlog:
            self._fail(f"fell {self.max_backlog} records behind the run")
            return
        self._queued += 1
        self._calls.put((fn, args))

    async def close(self) -> None:
        """Let the thread finish what is queued (at most `close_timeout` seconds)."""
        self._calls.put(_CLOSE)
        await asyncio.to_thread(self._thread.join, self.close_timeout)
        if self._thread.is_alive():
            self._say(
                "warning",
                f"{self.tracker.name} was still writing after "
                f"{self.close_timeout:g} s; the run ends without waiting for "
                "it (its last records may be missing)",
            )

    # ------------------------------------------------------------------ tracker thread
    def _work(self) -> None:
        aborted = False
        while True:
            item = self._calls.get()
            if item is _CLOSE:
                if self.failed and not aborted:
                    self._abort()
                return
            fn, args = item
            try:
                if self.failed:
                    if not aborted:
                        aborted = True
                        self._abort()
                    continue
                for line in fn(*args) or ():
                    self._report("info", line)
            except Exception as exc:
                self._fail(_describe(exc), from_thread=True)
                aborted = True
                self._abort()
            finally:
                self._done += 1

    def _log_samples(self, step: int, groups: list[GroupSampled]) -> None:
        rows = [
            (
                step,
                g.group_id,
                g.scenario_id,
                i,
                t.reward,
                t.policy_version,
                t.num_tokens,
                conversation_text(t.messages),
            )
            for g in groups
            for i, t in enumerate(g.trajectories)
        ]
        if rows:
            self.tracker.log_samples(step, rows)

    def _abort(self) -> None:
        try:
            self.tracker.abort()
        except Exception:
            logger.debug("aborting %s failed", self.tracker.name, exc_info=True)

    # ------------------------------------------------------------------ reporting
    def _fail(self, why: str, *, from_thread: bool = False) -> None:
        if self.failed:
            return
        self.failed = True
        message = (
            f"{self.tracker.name} logging failed and is off for the rest of this run "
            f"(training goes on): {why}"
        )
        if from_thread:
            self._report("warning", message)
        else:
            self._say("warning", message)

    def _report(self, level: str, message: str) -> None:
        """From the tracker's thread: publish on the loop's thread."""
        try:
            self._loop.call_soon_threadsafe(self._say, level, message)
        except RuntimeError:  # the loop is closed: the run is over
            logger.warning("%s", message)

    def _say(self, level: str, message: str) -> None:
        self._publish(
            TrackerReported(
                time=self._clock.now(), level=level, message=message, tracker=self.tracker.key
            )
        )


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
