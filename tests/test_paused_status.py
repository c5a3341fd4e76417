"""Paused is a status everywhere: `runs` (and serve's list, which reads the same table), the
headless run's lines, the detach message. A paused run nobody watches says how to resume it,
and says it again while the pause lasts. `runs`' duration leaves out the time a resumed run
was down between its sessions."""

import asyncio
import io
import re
import time

from waiting import wait_until

from tinker_tui.app.commands.run import build_session, plan_run, run_headless
from tinker_tui.app.commands.runs import _duration, read_table
from tinker_tui.app.watch import detach_lines
from tinker_tui.engine.events import StepTrained


def _args(db, *extra):
    from tinker_tui.app.cli import build_parser

    return build_parser().parse_args(
        [
            "run",
            "example",
            "--no-ui",
            "--db",
            str(db),
            "--warmup-steps",
            "0",
            "--eval-every",
            "0",
            *extra,
        ]
    )


async def test_a_paused_headless_run_says_how_to_resume_and_lists_as_paused(tmp_path, capsys):
    db = tmp_path / "runs.db"
    session = build_session(plan_run(_args(db, "--steps", "500")))
    table = {}

    def watch(event):
        if isinstance(event, StepTrained) and event.step == 2:
            session.control.pause("paused from a page since closed")

    session.events.subscribe(watch)
    running = asyncio.ensure_future(run_headless(session, pause_reminder=0.6))
    out = ""
    while "still paused after" not in out:  # said again while the pause lasts
        await asyncio.sleep(0.1)
        out += capsys.readouterr().out
        assert not running.done(), out
        if session.control.paused and "rows" not in table:
            table["rows"] = await wait_until(lambda: _paused_rows(db), "the pause's row")
    assert (
        "paused: paused from a page since closed\n  it waits, paused, until resumed: "
        "tinker-tui attach " in out
    )
    (row,) = table["rows"]
    assert row["STATUS"] == "paused"
    session.control.stop("test")
    assert await asyncio.wait_for(running, 60) == 0
    (row,) = await read_table(db)
    assert row["STATUS"] == "stopped · by user"


async def test_the_headless_lines_of_a_pause(tmp_path):
    from tinker_tui.app.headless import HeadlessReporter
    from tinker_tui.engine.events import RunStarted, RunStateChanged

    out = io.StringIO()
    reporter = HeadlessReporter(out, db_path=tmp_path / "r.db")
    reporter.handle(
        RunStarted(
            time=0.0,
            run_id="r-1",
            name="t",
            backend="local",
            base_model="m",
            max_steps=9,
            start_step=0,
        )
    )
    reporter.handle(RunStateChanged(time=1.0, state="paused", reason="paused by user"))
    reporter.paused_reminder(600.0)
    lines = out.getvalue().splitlines()[1:]
    flag = f" --db {tmp_path / 'r.db'}"
    assert lines[0] == "paused: paused by user"
    assert re.fullmatch(
        rf"  it waits, paused, until resumed: tinker-tui attach r-1{re.escape(flag)}"
        r", then p \(or stop it: kill -TERM \d+\)",
        lines[1],
    )
    assert lines[2].startswith("still paused after 10 min; it waits, paused, until resumed")


def test_detaching_from_a_paused_run_says_it_stays_paused_and_how_to_resume():
    assert detach_lines("r-1", None, "paused", "paused by user") == [
        "detached from run r-1: it stays paused in its own process (paused by user)",
        "  resume it:    tinker-tui attach r-1, then p",
        "  list runs:    tinker-tui runs",
    ]
    assert (
        detach_lines("r-1", None, "running")[0]
        == "detached from run r-1: it goes on in its own process"
    )


async def test_runs_duration_leaves_out_the_time_between_a_finished_run_and_its_resume(tmp_path):
    from tinker_tui.engine.store import StoreReader

    db = tmp_path / "runs.db"
    first = build_session(plan_run(_args(db, "--steps", "2")))
    assert await first.run() == "completed"
    # down 3 s between the run and its resume: the resume's clock runs 3 s ahead
    plan = await asyncio.to_thread(plan_run, _args(db, "--steps", "4", "--resume", first.run_id))
    assert await build_session(plan, AheadClock(3.0)).run() == "completed"
    async with await StoreReader.open_readonly(db) as store:
        down = await store.down_seconds(first.run_id)
        run = await store.run(first.run_id)
    assert 3.0 <= down < 3.0 + (run.ended_at - run.started_at) / 2
    (row,) = await read_table(db)
    assert row["DURATION"] == _duration(run.ended_at - run.started_at - down)


async def _paused_rows(db) -> list | None:
    rows = await read_table(db)
    return rows if rows and rows[0]["STATUS"] == "paused" else None


class AheadClock:
    """The system's clock, `seconds` ahead: a process started that much later."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def now(self) -> float:
        return time.time() + self.seconds
