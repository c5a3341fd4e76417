"""A reader that follows a run (`show`/`attach` opened on it, the dashboard of `run --resume`)
across a resume by another process: the resume deletes the rows after its checkpoint, and
SQLite gives the rows written next the rowids the deleted ones had. A cursor that followed
rowids alone skipped the steps trained again, as at a rollback (`test_follow_rollback`);
the resume's event (RunResumed), written right after the deletion, is where the reader goes
back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.events import RunFinished, RunResumed, RunStarted, StepTrained
from tinker_tui.engine.store import EventCursor, RunStore, StoreReader


def _started(time: float, start_step: int) -> RunStarted:
    return RunStarted(
        time=time,
        run_id="r1",
        name="demo",
        backend="local",
        base_model="tiny",
        max_steps=50,
        start_step=start_step,
        config={},
    )


def _step(n: int, t: float) -> StepTrained:
    return StepTrained(time=t, step=n, policy_version=n, metrics={"reward/mean": 0.1 * n})


def _steps(events) -> list[int]:
    return [e.step for e in events if isinstance(e, StepTrained)]


async def _stopped_run(path: Path) -> None:
    store = await RunStore.open(path)
    try:
        store.handle(_started(100.0, 0))
        for n in range(1, 6):
            store.handle(_step(n, 100.0 + n))
        store.handle(RunFinished(time=106.0, status="stopped", reason="asked", final_step=5))
        await store.flush()
    finally:
        await store.close()


async def _resume(
    path: Path,
    *,
    steps: range,
    to_step: int = 2,
    between: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """What `run --resume` writes: its start, the deletion after the checkpoint at
    `to_step`, the resume's log line, then (after `between`) the steps trained again."""
    store = await RunStore.open(path)
    try:
        store.handle(_started(120.0, to_step))
        await store.flush()
        await store.reconcile("r1", to_step)
        store.handle(
            RunResumed(
                time=121.0,
                run_id="r1",
                step=to_step,
                checkpoint=f"step-{to_step:06d}",
                steps_undone=5 - to_step,
            )
        )
        if between is not None:
            await store.flush()
            await between()
        for n in steps:
            store.handle(_step(n, 121.0 + n))
        await store.flush()
    finally:
        await store.close()


async def test_a_follower_reads_the_steps_trained_again_after_a_resume(tmp_path):
    path = tmp_path / "runs.db"
    await _stopped_run(path)
    reader = await StoreReader.open_readonly(path)
    try:
        run = await reader.run("r1")
        assert run is not None
        cursor = EventCursor(run)  # opened on the stopped run, before the resume
        seen = _steps(await reader.events_after(cursor))
        assert seen == [1, 2, 3, 4, 5]
        await _resume(path, steps=range(3, 7))
        seen += _steps(await reader.events_after(cursor))
        seen += _steps(await reader.events_after(cursor))  # nothing twice
        assert seen == [1, 2, 3, 4, 5, 3, 4, 5, 6]
        # read at once, as `show` reads a run: each step once
        assert _steps(await reader.events(run)) == [1, 2, 3, 4, 5, 6]
    finally:
        await reader.close()


async def test_a_follower_that_read_the_resume_first_still_reads_them(tmp_path):
    path = tmp_path / "runs.db"
    await _stopped_run(path)
    reader = await StoreReader.open_readonly(path)
    try:
        run = await reader.run("r1")
        assert run is not None
        cursor = EventCursor(run)
        seen = _steps(await reader.events_after(cursor))

        async def read() -> None:  # the resume's start and log line, no step yet
            seen.extend(_steps(await reader.events_after(cursor)))

        await _resume(path, steps=range(3, 7), between=read)
        seen += _steps(await reader.events_after(cursor))
        assert seen == [1, 2, 3, 4, 5, 3, 4, 5, 6]
    finally:
        await reader.close()


async def test_a_dashboard_following_across_a_resume_shows_the_run_as_stored(tmp_path):
    """The steps the resume undid leave the dashboard that had shown them, as at a rollback:
    it ends as one that read the run at once."""
    path = tmp_path / "runs.db"
    await _stopped_run(path)
    reader = await StoreReader.open_readonly(path)
    try:
        run = await reader.run("r1")
        assert run is not None
        cursor = EventCursor(run)
        following = DashboardState(FakeClock(0.0))
        for event in await reader.events_after(cursor):
            following.apply(event)
        assert following.groups.trained_steps == [1, 2, 3, 4, 5]
        await _resume(path, steps=range(3, 7))
        for event in await reader.events_after(cursor):
            following.apply(event)
        at_once = DashboardState(FakeClock(0.0))
        for event in await reader.events(run):
            at_once.apply(event)
    finally:
        await reader.close()
    assert following.groups.trained_steps == at_once.groups.trained_steps == [1, 2, 3, 4, 5, 6]
    assert following.rewards == at_once.rewards
