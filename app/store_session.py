"""A session read back from the run store, for `tinker-tui show` and `tinker-tui attach`.

The store holds every event a run published (`engine.store`). `StoreSession` turns its rows
back into the same typed events, in time order, and publishes them on its own event bus,
so the one dashboard draws a live run, a finished run and a run another process runs.

- `show` (`follow=False`): everything is published at once; `run()` then waits until the
  app quits. Its control is `ReadOnlyControl`: nothing to steer.
- `attach` (`follow=True`): new rows are polled every `poll_interval` seconds; commands go
  to the running process through `engine.control_server.RemoteControl`. `run()` returns
  when the run has finished.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tinker_tui.engine.clock import Clock, FakeClock, SystemClock
from tinker_tui.engine.control import Control
from tinker_tui.engine.control_server import ControlUnavailable
from tinker_tui.engine.events import (
    CheckpointSaved,
    CommandReceived,
    EvalCompleted,
    Event,
    EventBus,
    GroupDiscarded,
    GroupSampled,
    LogEmitted,
    RunFinished,
    RunStarted,
    RunStateChanged,
    RunStatus,
    StepTrained,
    ThroughputMeasured,
    TrajectorySummary,
)
from tinker_tui.engine.store import RunStore, StoreError

logger = logging.getLogger(__name__)

# Tables read back, and the order of events with equal times (a command before the state
# change it caused, a group before the step that trained it, ...).
_TABLE_ORDER = {
    "commands": 1,
    "run_states": 2,
    "log": 3,
    "sampled_groups": 4,
    "discarded_groups": 5,
    "steps": 6,
    "evals": 7,
    "checkpoints": 8,
    "throughput": 9,
}


class NoSuchRun(StoreError):
    """The store has no run of that id (the message lists what it has)."""


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


def _summaries(rows: list[dict[str, Any]]) -> tuple[TrajectorySummary, ...]:
    rows = sorted(rows, key=lambda r: r["idx"])
    return tuple(
        TrajectorySummary(
            reward=float(r["reward"]) if r["reward"] is not None else float("nan"),
            policy_version=int(r["policy_version"] or 0),
            num_tokens=int(r["num_tokens"] or 0),
            messages=tuple(m for m in (r["messages"] or []) if isinstance(m, dict)),
        )
        for r in rows
    )


def _histogram(data: Any) -> dict[int, int]:
    if not isinstance(data, dict):
        return {}
    out = {}
    for key, value in data.items():
        try:
            out[int(key)] = int(value)
        except (TypeError, ValueError):
            continue
    return out


def row_event(table: str, row: dict[str, Any], trajectories: tuple[TrajectorySummary, ...] = ()
              ) -> Event | None:
    """The event a stored row records (None for a row this code cannot read)."""
    t = float(row.get("time") or 0.0)
    if table == "steps":
        return StepTrained(time=t, step=int(row["step"]), policy_version=int(
            row["policy_version"] or 0), metrics=dict(row.get("metrics") or {}))
    if table == "checkpoints":
        return CheckpointSaved(time=t, step=int(row["step"]), kind=row["kind"],
                               name=row["name"], path=row["path"])
    if table == "discarded_groups":
        return GroupDiscarded(time=t, group_id=int(row["group_id"] or 0),
                              scenario_id=row["scenario_id"] or "", reason=row["reason"],
                              policy_version=int(row["policy_version"] or 0),
                              trainer_version=int(row["trainer_version"] or 0),
                              num_tokens=int(row["num_tokens"] or 0), detail=row["detail"] or "")
    if table == "log":
        return LogEmitted(time=t, level=row["level"], message=row["message"])
    if table == "run_states":
        return RunStateChanged(time=t, state=row["state"], reason=row["reason"] or "")
    if table == "sampled_groups":
        return GroupSampled(time=t, group_id=int(row["group_id"] or 0),
                            scenario_id=row["scenario_id"] or "",
                            policy_version=int(row["policy_version"] or 0),
                            num_trajectories=int(row["num_trajectories"] or 0),
                            num_tokens=int(row["num_tokens"] or 0),
                            reward_mean=float(row["reward_mean"] or 0.0),
                            trajectories=trajectories)
    if table == "evals":
        return EvalCompleted(time=t, step=int(row["step"] or 0),
                             policy_version=int(row["policy_version"] or 0),
                             metrics=dict(row.get("metrics") or {}))
    if table == "commands":
        args = row.get("args")
        return CommandReceived(time=t, command=row["command"],
                               args=dict(args) if isinstance(args, dict) else {},
                               source=row["source"] or "")
    if table == "throughput":
        m = row.get("measured")
        if not isinstance(m, dict):
            return None
        return ThroughputMeasured(
            time=t, window=float(m.get("window", 0.0)),
            rollouts_per_s=float(m.get("rollouts_per_s", 0.0)),
            sampled_tokens_per_s=float(m.get("sampled_tokens_per_s", 0.0)),
            trained_tokens_per_s=float(m.get("trained_tokens_per_s", 0.0)),
            queue_depth=int(m.get("queue_depth", 0)), in_flight=int(m.get("in_flight", 0)),
            trainer_busy=float(m.get("trainer_busy", 0.0)),
            sampler_busy=float(m.get("sampler_busy", 0.0)), verdict=str(m.get("verdict", "")),
            staleness_in_flight=_histogram(m.get("staleness_in_flight")),
            staleness_queued=_histogram(m.get("staleness_queued")),
            loop_lag_p99=float(m.get("loop_lag_p99") or 0.0))
    return None


def run_started(row: Mapping[str, Any]) -> RunStarted:
    config = row.get("config")
    return RunStarted(time=float(row.get("started_at") or 0.0), run_id=row["run_id"],
                      name=row.get("name") or "", backend=row.get("backend") or "",
                      base_model=row.get("base_model") or "",
                      max_steps=int(row.get("max_steps") or 0),
                      start_step=int(row.get("start_step") or 0),
                      config=dict(config) if isinstance(config, dict) else {})


def run_finished(row: Mapping[str, Any]) -> RunFinished | None:
    if row.get("status") in (None, "running"):
        return None
    return RunFinished(time=float(row.get("ended_at") or row.get("started_at") or 0.0),
                       status=row["status"], final_step=int(row.get("final_step") or 0),
                       reason=row.get("reason") or "")


async def resolve_run(store: RunStore, wanted: str | None) -> dict[str, Any]:
    """The run `wanted` names: an exact id, a unique prefix, or None / "latest" for the
    newest run. NoSuchRun (listing the runs) otherwise."""
    runs = await store.runs()
    if not runs:
        raise NoSuchRun(f"run store {store.path} has no runs yet")
    if wanted in (None, "", "latest"):
        return runs[0]
    exact = [r for r in runs if r["run_id"] == wanted]
    if exact:
        return exact[0]
    matches = [r for r in runs if r["run_id"].startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    listing = ", ".join(r["run_id"] for r in runs[:10]) + (" ..." if len(runs) > 10 else "")
    if matches:
        raise NoSuchRun(f"{wanted!r} matches several runs: "
                        + ", ".join(r["run_id"] for r in matches[:10]))
    raise NoSuchRun(f"no run {wanted!r} in {store.path}; runs: {listing}")


class StoreSession:
    """A `Session` whose events come from the run store (see the module docstring).

    The store is opened (read-only) inside `run()`, on the loop that drives the session.

    Args:
        db_path: The run store.
        run: The run's row (`find_run`).
        control: How commands reach the run; `ReadOnlyControl()` when nothing can.
        follow: Keep polling for new rows until the run finishes (attach).
        poll_interval: Seconds between polls when following.
    """

    def __init__(self, db_path: str | Path, run: Mapping[str, Any], *,
                 control: Control | None = None, follow: bool = False,
                 poll_interval: float = 0.5) -> None:
        self.db_path = Path(db_path)
        self.store: RunStore | None = None
        self.run_row = dict(run)
        self.run_id: str = run["run_id"]
        self.events = EventBus()
        self.control: Control = control if control is not None else ReadOnlyControl()
        self.follow = follow
        self.poll_interval = poll_interval
        self.read_only = bool(getattr(self.control, "read_only", False))
        self.remote = bool(getattr(self.control, "remote", False))
        self.attached = follow
        self.finished: RunFinished | None = None
        self._last: dict[str, int] = dict.fromkeys([*_TABLE_ORDER, "trajectories"], 0)
        self._pending_trajectories: dict[int, list[dict[str, Any]]] = {}
        self._started = False
        self._warned_unreachable = False
        self._last_time: float | None = None
        #: Set once everything stored so far has been published.
        self.loaded = asyncio.Event()
        #: The clock to draw against: a finished run shown with `show` is drawn as of its
        #: end (rates and elapsed time stay as they were); a followed run on the system clock.
        self.clock: Clock
        if follow:
            self.clock = SystemClock()
        else:
            end = self.run_row.get("ended_at") or self.run_row.get("started_at") or 0.0
            self.clock = FakeClock(float(end))

    async def read_new(self) -> list[Event]:
        """Events for the rows written since the last call, in time order."""
        assert self.store is not None
        ordered: list[tuple[float, int, int, Event]] = []
        if not self._started:
            self._started = True
            ordered.append((float(self.run_row.get("started_at") or 0.0), 0, 0,
                            run_started(self.run_row)))
        for table, order in _TABLE_ORDER.items():
            while True:
                rows = await self.store.rows_after(table, self.run_id, self._last[table])
                if not rows:
                    break
                self._last[table] = rows[-1]["rowid"]
                trajectories: dict[int, list[dict[str, Any]]] = {}
                if table == "sampled_groups":
                    trajectories = await self._trajectories_for(rows)
                for row in rows:
                    extra: tuple[TrajectorySummary, ...] = ()
                    if table == "sampled_groups":
                        extra = _summaries(trajectories.pop(int(row["group_id"] or 0), []))
                    event = row_event(table, row, extra)
                    if event is not None:
                        ordered.append((event.time, order, row["rowid"], event))
                if len(rows) < 10_000:
                    break
        ordered.sort(key=lambda item: item[:3])
        if ordered:
            self._last_time = max(self._last_time or 0.0, ordered[-1][0])
        return [event for *_, event in ordered]

    async def _trajectories_for(self, groups: list[dict[str, Any]]) -> dict[int, list[dict]]:
        """Trajectory rows of these groups: they were committed with the groups, so reading
        them after the groups finds them all; rows of newer groups wait for their group."""
        assert self.store is not None
        while True:
            rows = await self.store.rows_after("trajectories", self.run_id,
                                               self._last["trajectories"])
            if not rows:
                break
            self._last["trajectories"] = rows[-1]["rowid"]
            for row in rows:
                self._pending_trajectories.setdefault(int(row["group_id"] or 0), []).append(row)
            if len(rows) < 10_000:
                break
        wanted = {int(g["group_id"] or 0) for g in groups}
        return {g: self._pending_trajectories.pop(g) for g in wanted
                if g in self._pending_trajectories}

    async def read_all(self) -> list[Event]:
        """Every stored event of the run, in time order (opens and closes the store)."""
        self.store = await RunStore.open_readonly(self.db_path)
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
        self.store = await RunStore.open_readonly(self.db_path)
        try:
            await self.publish_new()
            if not self.follow:
                finished = run_finished(self.run_row)
                if finished is not None:
                    self.events.publish(finished)
                else:
                    if isinstance(self.clock, FakeClock) and self._last_time is not None:
                        self.clock.advance(self._last_time - self.clock.now())
                    self.events.publish(LogEmitted(
                        time=self.clock.now(), level="warning",
                        message="the store has no end for this run: it is still running "
                                "(attach follows it) or its process died"))
                self.loaded.set()
                await asyncio.Event().wait()  # a stored run stays on screen until quit
            self.loaded.set()
            while True:
                await self._refresh_control()
                row = await self.store.run(self.run_id)
                await self.publish_new()
                finished = run_finished(row) if row is not None else None
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


async def find_run(db_path: str | Path, wanted: str | None) -> dict[str, Any]:
    """The row of the run `wanted` names in the store at `db_path` (see `resolve_run`)."""
    store = await RunStore.open_readonly(db_path)
    try:
        return await resolve_run(store, wanted)
    finally:
        await store.close()
