"""`tinker-tui show`: the store keeps what the dashboard needs, a `StoreSession` reads it
back as the same events, and the same dashboard draws the finished run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from pathlib import Path

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")

import pytest
from fake_session import GROUP_SIZE, scripted_events, wait_for_charts
from textual.pilot import Pilot

from tinker_tui.app.cli import main as cli_main
from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.interrupts import EXIT_OK
from tinker_tui.app.store_session import StoreSession
from tinker_tui.app.tui import TinkerTuiApp
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.events import (
    GroupDiscarded,
    GroupSampled,
    RunFinished,
    RunStarted,
    StartupProgressed,
    StepTrained,
)
from tinker_tui.engine.store import (
    SCHEMA_VERSION,
    NoSuchRun,
    RunStore,
    StoreError,
    StoreReader,
    find_run,
)


def write_run(path: Path, *, finish: bool = True) -> list:
    """Store the fake session's script (and its end) in a run store at `path`."""
    clock = FakeClock(1000.0)
    events = scripted_events(clock)
    if finish:
        clock.advance(1.0)
        events.append(
            RunFinished(
                time=clock.now(), status="completed", final_step=20, reason="reached max_steps"
            )
        )

    async def store_all() -> None:
        store = await RunStore.open(path)
        for event in events:
            store.handle(event)
        await store.close()

    asyncio.run(store_all())
    return events


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> tuple[Path, list]:
    path = tmp_path_factory.mktemp("show") / "runs.db"
    return path, write_run(path)


def fold(events) -> DashboardState:
    model = DashboardState(FakeClock())
    for event in events:
        model.apply(event)
    return model


# ------------------------------------------------------------------ the store's new rows


def test_the_store_keeps_groups_trajectories_evals_commands_and_measurements(stored):
    path, events = stored
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    groups = sum(1 for e in events if type(e).__name__ == "GroupSampled")
    assert db.execute("select count(*) from sampled_groups").fetchone()[0] == groups
    assert db.execute("select count(*) from trajectories").fetchone()[0] == groups * GROUP_SIZE
    assert db.execute("select count(*) from evals").fetchone()[0] == 4
    assert db.execute("select command from commands").fetchall() == [("set",)]
    assert db.execute("select count(*) from throughput").fetchone()[0] == 20
    # a trajectory keeps every turn, tool calls and results included
    (messages,) = db.execute(
        "select messages from trajectories where group_id = 40 and idx = 0"
    ).fetchone()
    assert '"tool_calls"' in messages and '"role": "tool"' in messages


async def test_rows_after_reads_incrementally_and_decodes_json(stored):
    path, _ = stored
    store = await StoreReader.open_readonly(path)
    try:
        first = await store.rows_after("steps", "run-0001", 0, limit=5)
        assert [r["step"] for r in first] == [1, 2, 3, 4, 5]
        assert isinstance(first[0]["metrics"], dict)
        rest = await store.rows_after("steps", "run-0001", first[-1]["rowid"])
        assert [r["step"] for r in rest] == list(range(6, 21))
        (group,) = [
            e
            for e in await store.events(await store.find_run("run-0001"), kinds={GroupSampled})
            if e.group_id == 40
        ]
        assert len(group.trajectories) == GROUP_SIZE
        messages = group.trajectories[0].messages
        assert messages[1]["tool_calls"][0]["function"]["name"] == "lookup"
        with pytest.raises(ValueError):
            await store.rows_after("runs; drop table runs", "run-0001")
    finally:
        await store.close()


async def test_read_only_open_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        await StoreReader.open_readonly(tmp_path / "missing.db")
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("create table t (x)").connection.commit()
    with pytest.raises(StoreError, match="not a tinker-tui run store"):
        await StoreReader.open_readonly(other)


async def test_a_version_1_store_reads_and_migrates(tmp_path):
    from tinker_tui.engine import store as store_module

    path = tmp_path / "v1.db"
    db = sqlite3.connect(path)
    db.executescript(store_module.MIGRATIONS[0])
    db.execute(f"PRAGMA application_id={store_module.APPLICATION_ID}")
    db.execute("PRAGMA user_version=1")
    db.execute("insert into runs (run_id, name, started_at) values ('old', 'n', 1.0)")
    db.commit()
    db.close()
    reader = await StoreReader.open_readonly(path)
    assert await reader.rows_after("trajectories", "old") == []  # no such table yet
    (started,) = await reader.events(await reader.find_run("old"))  # nothing else stored
    assert isinstance(started, RunStarted) and started.name == "n"
    await reader.close()
    writer = await RunStore.open(path)
    await writer.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert sqlite3.connect(path).execute("select run_id from runs").fetchall() == [("old",)]


async def test_a_version_4_store_reads_without_migrating(stored, tmp_path):
    """show/attach/export open a store read-only: one written before trajectory metrics and
    failed members (version 5) reads back with none of them, instead of failing."""
    import shutil

    path = tmp_path / "v4.db"
    shutil.copy(stored[0], path)
    db = sqlite3.connect(path)
    db.execute("alter table trajectories drop column metrics")
    db.execute("alter table sampled_groups drop column failed")
    db.execute("alter table sampled_groups drop column detail")
    db.execute("PRAGMA user_version=4")
    db.commit()
    db.close()
    run = await find_run(path, None)
    replayed = await StoreSession(path, run).read_all()
    groups = [e for e in replayed if type(e).__name__ == "GroupSampled"]
    assert groups and all(g.failed == 0 and g.detail == "" for g in groups)
    assert all(t.metrics == {} for g in groups for t in g.trajectories)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 4


# ------------------------------------------------------------------ the session read back


async def test_a_store_session_replays_what_the_live_run_showed(stored):
    path, events = stored
    run = await find_run(path, None)
    replayed = await StoreSession(path, run).read_all()
    live, again = fold(events[:-1]), fold(replayed)
    assert again.name == live.name and again.max_steps == live.max_steps
    assert again.rewards == live.rewards and again.step == live.step == 20
    assert again.discarded == live.discarded
    assert [(c.step, c.path) for c in again.checkpoints] == [
        (c.step, c.path) for c in live.checkpoints
    ]
    assert [(e.step, e.reward) for e in again.evals] == [(e.step, e.reward) for e in live.evals]
    assert again.knobs == live.knobs and again.initial_knobs == live.initial_knobs
    assert [c.describe() for c in again.commands] == [c.describe() for c in live.commands]
    assert again.throughput == live.throughput
    assert sorted(again.groups) == sorted(live.groups)
    for group_id, group in live.groups.records.items():
        other = again.groups[group_id]
        assert (other.step, other.discarded, other.trajectories, other.at_best) == (
            group.step,
            group.discarded,
            group.trajectories,
            group.at_best,
        ), group_id
    assert [line.message for line in again.log] == [line.message for line in live.log]
    # the start-up, as the live dashboard told it (every phase and warm-up step)
    startup = [e for e in events if isinstance(e, StartupProgressed)]
    assert [e for e in replayed if isinstance(e, StartupProgressed)] == startup
    # the groups each step took, and the step that dropped each discarded group
    steps = {e.step: e.group_ids for e in events if isinstance(e, StepTrained)}
    assert {e.step: e.group_ids for e in replayed if isinstance(e, StepTrained)} == {
        step: tuple(
            sorted(
                ids
                + tuple(
                    d.group_id
                    for d in events
                    if isinstance(d, GroupDiscarded) and d.step == step and d.group_id not in ids
                )
            )
        )
        for step, ids in steps.items()
    }
    assert again.groups.all_steps() == list(range(1, 21)) and again.groups.waiting() == []


async def test_find_run_by_prefix_latest_or_not_at_all(stored):
    path, _ = stored
    assert (await find_run(path, "run-0")).run_id == "run-0001"
    assert (await find_run(path, "latest")).run_id == "run-0001"
    with pytest.raises(NoSuchRun, match="runs: run-0001"):
        await find_run(path, "nope")


# ------------------------------------------------------------------ the dashboard of a stored run


def show_app(path: Path, run: dict | None = None) -> TinkerTuiApp:
    run = run if run is not None else asyncio.run(find_run(path, None))
    app = TinkerTuiApp(StoreSession(path, run), refresh_interval=0.05)
    app.animation_level = "none"
    return app


async def loaded(pilot: Pilot) -> None:
    app = pilot.app
    await asyncio.wait_for(app.session.loaded.wait(), timeout=10)
    await wait_for_charts(pilot)
    await pilot.pause()
    app.refresh_panes()
    await pilot.pause()


def test_snapshot_show_of_a_finished_run(snap_compare, stored):
    path, _ = stored
    assert snap_compare(show_app(path), terminal_size=(80, 24), run_before=loaded)


async def test_show_draws_the_run_read_only_and_q_quits(stored):
    path, _ = stored
    app = show_app(path, await find_run(path, None))
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        assert app.state.state == "finished" and app.state.status == "completed"
        assert app.read_only and app.mode_label == "finished run"
        assert app.clock.now() == app.state.finished_at  # drawn as of the end of the run
        footer = {k.description for k in app.screen.query("FooterKey")}
        assert "Quit" in footer and not footer & {"Pause", "Resume", "Checkpoint", "Eval"}
        await pilot.press("p", "c", "e")  # nothing to steer: no effect, no error
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == EXIT_OK


def test_show_without_a_terminal_prints_one_line_per_step(stored, capsys):
    path, events = stored
    assert cli_main(["show", "--db", str(path), "--no-ui"]) == 0
    out = capsys.readouterr().out
    steps = [e for e in events if isinstance(e, StepTrained)]
    lines = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(lines) == len(steps)
    assert "reward" in lines[-1] and "rollouts/s" in lines[-1] and "staleness" in lines[-1]
    assert "completed at step 20/" in out


def test_show_names_the_task_as_the_run_was_started(tmp_path, capsys, monkeypatch):
    """A run of a task file: `show` printed `run TASK --resume`; the store keeps how the
    command line named the task (a file by its absolute path, as a shell takes it)."""
    from tinker_tui.app.task_loader import spec_to_store

    task_file = tmp_path / "my tasks" / "calc.py"
    task_file.parent.mkdir()
    task_file.write_text("")
    monkeypatch.chdir(task_file.parent)
    assert spec_to_store("calc.py") == str(task_file)
    assert spec_to_store("calc.py:OTHER") == f"{task_file}:OTHER"
    assert spec_to_store("example") == "example" and spec_to_store("pkg.mod") == "pkg.mod"
    path = tmp_path / "runs.db"

    async def store_run() -> None:
        store = await RunStore.open(path)
        store.handle(
            RunStarted(
                time=1.0,
                run_id="calc-1",
                name="calc",
                backend="local",
                base_model="tiny",
                max_steps=5,
                start_step=0,
                task_spec=spec_to_store("calc.py"),
            )
        )
        store.handle(RunFinished(time=2.0, status="stopped", final_step=0, reason="user"))
        await store.close()

    asyncio.run(store_run())
    assert cli_main(["show", "--db", str(path), "--no-ui"]) == 0
    out = capsys.readouterr().out
    assert f"tinker-tui run '{task_file}' --resume calc-1 --db {path}" in out


def test_show_of_an_unknown_run_is_a_usage_error(stored, capsys):
    path, _ = stored
    assert cli_main(["show", "nope", "--db", str(path), "--no-ui"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_show_log_prints_every_stored_message_whole(tmp_path, capsys):
    from tinker_tui.engine.events import LogEmitted

    path = tmp_path / "runs.db"
    events = write_run(path)
    logs = [e for e in events if isinstance(e, LogEmitted)]
    assert logs  # the script logs
    assert cli_main(["show", "--db", str(path), "--log"]) == 0
    out = capsys.readouterr().out
    assert out == "".join(f"{e.level}: {e.message}\n" for e in logs)


async def test_show_follows_a_run_still_running_read_only_until_it_ends(tmp_path):
    """`show` of a run whose process still holds it: drawn as it goes (not a frozen
    snapshot), labelled read-only, refusing commands, and finished when the run ends."""
    from fake_session import LiveFakeSession

    from tinker_tui.app.commands.show import shown_session
    from tinker_tui.app.tui import TinkerTuiApp
    from tinker_tui.engine.training.resume import RunLock

    path = tmp_path / "runs.db"
    live = LiveFakeSession(str(path), step_seconds=0.05, max_steps=40, run_id="live-0001")
    lock = RunLock(path, "live-0001")
    lock.acquire()  # what a running engine holds
    running = asyncio.create_task(live.run())
    try:
        run = None
        while run is None:
            await asyncio.sleep(0.05)
            with contextlib.suppress(StoreError):  # the store or its run not there yet
                run = await find_run(path, "live-0001")
        session = shown_session(path, run)
        assert session.follow and session.read_only
        app = TinkerTuiApp(session, refresh_interval=0.05)
        async with app.run_test(size=(120, 40)) as pilot:

            async def step_shown() -> int:
                await pilot.pause(0.2)
                return app.state.step

            first = await step_shown()
            while (later := await step_shown()) <= first:
                pass
            assert later > first  # it moves
            assert "read-only" in app.mode_label
            await pilot.press("p")
            await pilot.pause(0.2)
            assert not live.control.paused  # read-only: nothing reaches the run
            await asyncio.wait_for(running, 30)
            while app.state.state != "finished":
                await pilot.pause(0.1)
            assert app.state.step == 40
    finally:
        lock.release()
        live.control.stop("test over")
        await asyncio.gather(running, return_exceptions=True)


def test_show_of_a_run_whose_process_is_gone_is_the_stored_snapshot(tmp_path):
    """No end in the store and nobody holds the run: it was interrupted; shown as stored."""
    from tinker_tui.app.commands.show import shown_session

    path = tmp_path / "runs.db"
    write_run(path, finish=False)
    session = shown_session(path, asyncio.run(find_run(path, None)))
    assert not session.follow and session.read_only
