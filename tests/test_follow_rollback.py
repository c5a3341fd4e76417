"""A reader that follows a run (the dashboard of `run`, `attach`, `show` on a running run)
across a rollback: the rollback deletes the later steps' rows, and SQLite gives the rows
written next the rowids the deleted ones had. A cursor that followed rowids alone skipped
the steps trained again (the dashboard sat at the rollback's step until the run passed the
step it had reached before)."""

from __future__ import annotations

from pathlib import Path

from tinker_tui.engine.events import CommandReceived, RunStarted, StepTrained
from tinker_tui.engine.store import EventCursor, RunStore, StoreReader


def _started() -> RunStarted:
    return RunStarted(
        time=100.0,
        run_id="r1",
        name="demo",
        backend="local",
        base_model="tiny",
        max_steps=50,
        start_step=0,
        config={},
    )


def _step(n: int, t: float) -> StepTrained:
    return StepTrained(time=t, step=n, policy_version=n, metrics={"reward/mean": 0.1 * n})


def _seen(events) -> list[object]:
    return [
        e.step if isinstance(e, StepTrained) else e.command
        for e in events
        if isinstance(e, StepTrained | CommandReceived)
    ]


async def _follow(tmp_path: Path, *, read_between: bool) -> list[object]:
    path = tmp_path / "runs.db"
    store = await RunStore.open(path)
    try:
        store.handle(_started())
        for n in range(1, 6):
            store.handle(_step(n, 100.0 + n))
        await store.flush()
        reader = await StoreReader.open_readonly(path)
        try:
            run = await reader.run("r1")
            assert run is not None
            cursor = EventCursor(run)
            seen = _seen(await reader.events_after(cursor))
            assert seen == [1, 2, 3, 4, 5]
            await store.reconcile("r1", 2)  # the rollback to step 2
            store.handle(CommandReceived(time=110.0, command="rolled_back", args={"to_step": 2}))
            await store.flush()
            if read_between:  # the follower reads the rollback before the new steps
                seen += _seen(await reader.events_after(cursor))
            for n in range(3, 7):
                store.handle(_step(n, 110.0 + n))
            await store.flush()
            seen += _seen(await reader.events_after(cursor))
            seen += _seen(await reader.events_after(cursor))  # nothing twice
            whole = await reader.events(run)  # read at once, as `show` reads a run
            assert _seen(whole) == [1, 2, "rolled_back", 3, 4, 5, 6]
            return seen
        finally:
            await reader.close()
    finally:
        await store.close()


async def test_a_follower_reads_the_steps_trained_again_after_a_rollback(tmp_path):
    assert await _follow(tmp_path, read_between=False) == [1, 2, 3, 4, 5, "rolled_back", 3, 4, 5, 6]


async def test_a_follower_that_read_the_rollback_first_still_reads_them(tmp_path):
    assert await _follow(tmp_path, read_between=True) == [1, 2, 3, 4, 5, "rolled_back", 3, 4, 5, 6]
