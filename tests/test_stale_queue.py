"""The rollouts view's "queued N groups … waiting to be trained" never lists groups a step
took: a dashboard following a live store read a step (with the groups it took) in the same
poll as, or before, those groups' own rows, and listed them as queued for good."""

import sqlite3

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.events import (
    GroupSampled,
    RunStarted,
    StepTrained,
    TrajectorySummary,
)
from tinker_tui.engine.store import RunStore, StoreReader
from tinker_tui.engine.store.reader import EventCursor


def _sampled(group_id, time):
    return GroupSampled(
        time=time,
        group_id=group_id,
        scenario_id="s",
        policy_version=0,
        num_trajectories=2,
        num_tokens=4,
        reward_mean=0.5,
        trajectories=(
            TrajectorySummary(reward=0.0, policy_version=0, num_tokens=2),
            TrajectorySummary(reward=1.0, policy_version=0, num_tokens=2),
        ),
    )


def test_a_group_a_step_took_before_its_row_was_read_is_not_left_queued():
    model = DashboardState(FakeClock())
    model.apply(
        RunStarted(
            time=0.0,
            run_id="r",
            name="t",
            backend="local",
            base_model="m",
            max_steps=9,
            start_step=0,
        )
    )
    model.apply(StepTrained(time=2.0, step=1, policy_version=1, metrics={}, group_ids=(7,)))
    model.apply(_sampled(7, 1.0))  # its row came in a later read
    assert model.groups.waiting() == []
    assert [g.group_id for g in model.groups.of(1)] == [7]


async def test_a_poll_reads_one_snapshot_of_the_store(tmp_path, monkeypatch):
    """A commit between the reads of two tables is not half seen: the poll sees the store
    as it was when it began, the next poll the rest."""
    db = tmp_path / "runs.db"
    store = await RunStore.open(db)
    store.handle(
        RunStarted(
            time=0.0,
            run_id="r",
            name="t",
            backend="local",
            base_model="m",
            max_steps=9,
            start_step=0,
        )
    )
    await store.flush()
    reader = await StoreReader.open_readonly(db)
    run = await reader.run("r")
    cursor = EventCursor(run)
    original = StoreReader.rows_after
    written = []

    async def rows_after(self, table, run_id, after=0, limit=10_000):
        if table == "steps" and not written:  # the engine commits a step meanwhile
            written.append(True)
            with sqlite3.connect(db) as other:
                other.execute(
                    "INSERT INTO steps (run_id, step, policy_version, time, metrics) "
                    "VALUES ('r', 1, 1, 2.0, '{}')"
                )
        return await original(self, table, run_id, after, limit)

    monkeypatch.setattr(StoreReader, "rows_after", rows_after)
    first = await reader.events_after(cursor)
    assert written and not any(isinstance(e, StepTrained) for e in first)
    second = await reader.events_after(cursor)
    assert [e.step for e in second if isinstance(e, StepTrained)] == [1]
    await reader.close()
    await store.close()
