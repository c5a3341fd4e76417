"""The end of a run in the dashboard: the finish screen (snapshots of a completed and a
failed run), the summary the terminal gets, signals, and a run whose engine process died
without recording its end. In process, on the scripted session and a real store; the
subprocess tests of the same life cycle are in test_lifecycle.py."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
from pathlib import Path

import pytest

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")

from fake_session import FakeSession, finished_events, scripted_events
from textual.pilot import Pilot

from tinker_tui.app.engine_process import EngineExited, EngineProcess
from tinker_tui.app.interrupts import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from tinker_tui.app.run_summary import SummaryCollector, summary_lines
from tinker_tui.app.screens.confirm_quit import QuitScreen
from tinker_tui.app.screens.finished import FinishedScreen
from tinker_tui.app.store_session import StoreSession
from tinker_tui.app.tui import TinkerTuiApp
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.events import LogEmitted, RunFinished, TrackerReported
from tinker_tui.engine.store import RunStore, find_run
from tinker_tui.engine.training.resume import RunLock

FAILURE = "RuntimeError: the sampler lost its weights"


def make_app(session: FakeSession) -> TinkerTuiApp:
    summary = SummaryCollector(task="example", db_path=Path("runs/elsewhere.db"))
    app = TinkerTuiApp(session, clock=session.clock, refresh_interval=0.05, summary=summary)
    app.animation_level = "none"
    return app


async def until(predicate, pilot: Pilot, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await pilot.pause(0.02)


async def finished(pilot: Pilot) -> None:
    await until(lambda: isinstance(pilot.app.screen, FinishedScreen), pilot)
    await pilot.pause()


# ------------------------------------------------------------------ snapshots


def test_snapshot_finished_run(snap_compare):
    app = make_app(FakeSession(wait_for_stop=False))
    assert snap_compare(app, terminal_size=(80, 24), run_before=finished)


def test_snapshot_failed_run(snap_compare):
    app = make_app(FakeSession(wait_for_stop=False, end=("failed", FAILURE)))
    assert snap_compare(app, terminal_size=(80, 24), run_before=finished)


# ------------------------------------------------------------------ the finish screen


async def test_the_finish_screen_says_how_the_run_ended_and_q_leaves_with_its_code():
    app = make_app(FakeSession(wait_for_stop=False))
    async with app.run_test(size=(100, 30)) as pilot:
        await finished(pilot)
        text = str(app.screen.query_one("#finished-text").render())
        assert "reached max_steps" in text and "20 of 50" in text
        assert "final 0.834" in text and "best 0.838 (step 19)" in text
        assert "step-000010 (step 10)" in text  # the last full checkpoint, not the sampler's
        assert "tinker-tui show run-0001 --db runs/elsewhere.db" in text
        assert "tinker-tui run example --resume run-0001 --db runs/elsewhere.db --steps 100" in text
        await pilot.press("escape")  # look at the dashboard; the run stays finished
        await pilot.pause()
        assert not isinstance(app.screen, FinishedScreen) and app.is_running
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == EXIT_OK and app.run_status == "completed"


async def test_the_finish_screen_shows_over_a_dialog_open_when_the_run_ends():
    """Help open when the run ends: the finish screen is what shows, and esc then returns to
    the dashboard, not to the help."""
    from tinker_tui.app.screens.help import HelpScreen

    session = FakeSession()
    app = make_app(session)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await until(lambda: isinstance(app.screen, HelpScreen), pilot)
        session.control.stop("stopped elsewhere")  # the run ends while help is open
        await finished(pilot)
        assert not any(isinstance(s, HelpScreen) for s in app.screen_stack)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, FinishedScreen | HelpScreen) and app.is_running


async def test_a_failed_run_shows_its_reason_and_last_log_lines_and_exits_1():
    app = make_app(FakeSession(wait_for_stop=False, end=("failed", FAILURE)))
    async with app.run_test(size=(100, 30)) as pilot:
        await finished(pilot)
        text = str(app.screen.query_one("#finished-text").render())
        assert FAILURE in text and "last log lines" in text
        assert f"run failed: {FAILURE}" in text
        assert "tinker-tui run example --resume run-0001" in text
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == EXIT_FAILED and app.run_status == "failed"


async def test_stop_from_q_leaves_once_stopped_without_the_finish_screen():
    app = make_app(FakeSession())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(lambda: app.session.script_done.is_set(), pilot)
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen) and app.screen.kind == "stop"
        await pilot.press("y")
        await pilot.pause()
    assert app.return_code == EXIT_OK and app.run_status == "stopped"


async def test_sigint_stops_gracefully_and_a_second_one_leaves_at_once():
    app = make_app(FakeSession())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(lambda: app.session.script_done.is_set(), pilot)
        app.signal_received(signal.SIGINT)  # what the handler calls (none under run_test)
        await pilot.pause()
    assert app.session.control.calls == [("stop", "received SIGINT")]
    assert app.return_code == EXIT_INTERRUPTED and app.run_status == "stopped"

    app = make_app(FakeSession(finish_on_stop=False))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(lambda: app.session.script_done.is_set(), pilot)
        app.signal_received(signal.SIGINT)
        await pilot.pause()
        assert app.stopping and app.is_running
        app.signal_received(signal.SIGINT)  # within a moment: the same stop (`timeout`)
        await pilot.pause()
        assert app.stopping and app.is_running
        app.session.clock.advance(0.6)  # a person's second Ctrl+C
        app.signal_received(signal.SIGINT)
        await pilot.pause()
    assert app.return_code == EXIT_INTERRUPTED and app.run_status is None


# ------------------------------------------------------------------ the summary


def test_the_summary_names_status_steps_rewards_checkpoint_store_and_next_commands():
    clock = FakeClock(0.0)
    collector = SummaryCollector(task="blue.py", db_path=Path("runs/tinker-tui.db"))
    for event in scripted_events(clock):
        collector.handle(event)
    collector.handle(
        TrackerReported(
            time=clock.now(),
            level="info",
            tracker="wandb",
            message="W&B: upload with `wandb sync x`",
        )
    )
    collector.handle(
        RunFinished(time=clock.now(), status="stopped", final_step=20, reason="stopped by user")
    )
    lines = summary_lines(collector.summary())
    assert lines[0] == "run run-0001 stopped at step 20/50 (stopped by user)"
    assert "  reward: final 0.834, best 0.838 at step 19" in lines
    assert "  last checkpoint: step-000010 (step 10)" in lines
    assert "  store: runs/tinker-tui.db" in lines
    assert "  look again: tinker-tui show run-0001" in lines  # the default store: no --db
    assert "  continue:   tinker-tui run blue.py --resume run-0001" in lines
    assert lines[-1] == "W&B: upload with `wandb sync x`"  # where the records went, last


def test_the_summary_of_a_resumed_headless_run_covers_the_whole_run(tmp_path, capsys):
    """Best reward and last checkpoint come from the steps before the resume too (the store
    has them; this process's events start at the resume)."""
    from tinker_tui.app.cli import main

    db = tmp_path / "runs.db"
    args = [
        "run",
        "example",
        "--no-ui",
        "--db",
        str(db),
        "--warmup-steps",
        "0",
        "--checkpoint-every",
        "2",
    ]
    assert main([*args, "--steps", "4"]) == 0
    with sqlite3.connect(db) as conn:  # a best no later step can reach: step 2's
        (metrics,) = conn.execute("select metrics from steps where step = 2").fetchone()
        conn.execute(
            "update steps set metrics = ? where step = 2",
            (json.dumps({**json.loads(metrics), "reward/mean": 2.0}),),
        )
    capsys.readouterr()
    assert main([*args, "--steps", "5", "--resume", "--checkpoint-every", "0"]) == 0
    out = capsys.readouterr().out.splitlines()
    (headline,) = [i for i, line in enumerate(out) if " completed at step 5/5 " in line]
    assert out[headline + 1].endswith(", best 2.000 at step 2")
    assert out[headline + 2] == "  last checkpoint: step-000005 (step 5)"


# ------------------------------------------------------------------ an engine that died


class DeadEngine:
    """An engine process that is gone (killed, crashed) and left a log."""

    def __init__(self, log_path: Path | None, code: int | None = -9) -> None:
        self.log_path = log_path
        self.code = code
        self.signals: list[int] = []

    def exit_code(self) -> int | None:
        return self.code

    def send_signal(self, signum: int) -> bool:
        self.signals.append(signum)
        return False

    async def start(self) -> None:
        """Started before the test (and gone)."""


async def store_events(path: Path, events: list) -> None:
    store = await RunStore.open(path)
    for event in events:
        store.handle(event)
    await store.close()


async def test_an_engine_gone_without_an_end_shows_as_failed_with_its_last_log_lines(tmp_path):
    path = tmp_path / "runs.db"
    await store_events(path, scripted_events(FakeClock(1000.0)))
    log = tmp_path / "run-0001.engine.log"
    log.write_text(
        "step   20/50  reward 0.814\nTraceback (most recent call last):\n"
        "MemoryError: out of memory\n"
    )
    session = StoreSession(
        path, run_id="run-0001", follow=True, poll_interval=0.05, engine=DeadEngine(log)
    )
    seen: list = []
    session.events.subscribe(seen.append)
    assert await asyncio.wait_for(session.run(), 10) == "failed"
    end = seen[-1]
    assert isinstance(end, RunFinished) and end.final_step == 20
    assert end.reason == "the engine process was killed by SIGKILL without finishing the run"
    logged = [
        (e.level, e.message)
        for e in seen
        if isinstance(e, LogEmitted) and e.message.startswith("engine: ")
    ]
    assert logged == [
        ("info", "engine: step   20/50  reward 0.814"),  # output, not an error
        ("error", "engine: Traceback (most recent call last):"),
        ("error", "engine: MemoryError: out of memory"),
    ]


class LiveEngine(DeadEngine):
    """An engine process still running (it may hold its run's lock)."""

    def __init__(self) -> None:
        super().__init__(None, code=None)


WANDB_LAST_WORD = "W&B: offline run saved: files in wandb/; upload with `wandb sync x`"


async def test_what_the_engine_writes_as_it_closes_reaches_the_finish_screen_and_summary(tmp_path):
    """The trackers' last lines come after the run's end (the engine closes them before its
    store): the finish screen and the summary on exit still get them."""
    path = tmp_path / "runs.db"
    clock = FakeClock(1000.0)
    lock = RunLock(path, "run-0001")
    lock.acquire()  # the engine holds its run until its store is closed
    store = await RunStore.open(path)
    for event in finished_events(clock):
        store.handle(event)
    await store.flush()
    session = StoreSession(
        path, await find_run(path, "run-0001"), follow=True, poll_interval=0.05, engine=LiveEngine()
    )
    summary = SummaryCollector(task="example", db_path=path)
    app = TinkerTuiApp(session, refresh_interval=0.05, summary=summary)
    async with app.run_test(size=(120, 40)) as pilot:
        await finished(pilot)

        def shown() -> str:
            return str(app.screen.query_one("#finished-text").render())

        assert "Run completed" in str(app.screen.query_one("#finished-dialog").border_title)
        assert "wandb sync" not in shown()
        store.handle(
            TrackerReported(
                time=clock.now(), level="info", tracker="wandb", message=WANDB_LAST_WORD
            )
        )
        store.handle(LogEmitted(time=clock.now(), level="info", message="W&B run closed"))
        await store.close()
        lock.release()
        await until(lambda: WANDB_LAST_WORD in shown(), pilot)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == EXIT_OK
    lines = summary_lines(summary.summary())
    assert lines[-1] == WANDB_LAST_WORD and "W&B run closed" not in lines


async def test_an_engine_that_ends_before_its_run_starts_raises_what_it_said(tmp_path):
    log = tmp_path / "run-9.engine.log"
    log.write_text("tinker-tui: error: run store runs.db is locked by another writer\n")
    session = StoreSession(
        tmp_path / "runs.db",
        run_id="run-9",
        follow=True,
        poll_interval=0.05,
        engine=DeadEngine(log, code=2),
    )
    try:
        await asyncio.wait_for(session.run(), 10)
    except EngineExited as exc:
        assert exc.exit_code == 2 and exc.lines == [
            "tinker-tui: error: run store runs.db is locked by another writer"
        ]
    else:
        raise AssertionError("no EngineExited")


async def test_an_engine_stopped_before_its_run_was_stored_leaves_no_log(tmp_path):
    """A signal to the engine while it imported: it said so and ended with 130, its run never
    stored. Its log held only that line, left beside the store ("nothing is stored")."""
    log = tmp_path / "run-9.engine.log"
    log.write_text("tinker-tui: stopped by SIGINT; nothing was started\n")
    session = StoreSession(
        tmp_path / "runs.db",
        run_id="run-9",
        follow=True,
        poll_interval=0.05,
        engine=DeadEngine(log, code=130),
    )
    with pytest.raises(EngineExited) as caught:
        await asyncio.wait_for(session.run(), 10)
    assert caught.value.exit_code == 130 and caught.value.log_path is None
    assert caught.value.lines == ["tinker-tui: stopped by SIGINT; nothing was started"]
    assert not log.exists()


class StartingEngine(LiveEngine):
    """An engine process still importing: no control endpoint yet, but it takes signals."""

    def send_signal(self, signum: int) -> bool:
        self.signals.append(signum)
        return True


async def test_a_stop_before_the_engine_takes_commands_is_a_signal_to_it(tmp_path):
    """Until the engine listens, its control refuses commands: a stop goes to the process
    (SIGTERM, which stops a headless run as a stop command would)."""
    engine = StartingEngine()
    session = StoreSession(
        tmp_path / "runs.db", run_id="run-9", follow=True, poll_interval=0.05, engine=engine
    )
    app = TinkerTuiApp(session)
    async with app.run_test() as pilot:
        await pilot.pause()
        app.begin_stop()
        await pilot.pause()
        assert engine.signals == [signal.SIGTERM] and app.stopping
        app.exit()


async def test_a_signal_before_the_engine_starts_cancels_its_start(tmp_path):
    """The dashboard starts its engine only after its first frame: a signal held while it
    loaded stops the run before that, so the engine never starts and nothing is stored;
    the app leaves with the signal's code and the session says the engine was stopped."""
    path = tmp_path / "runs.db"
    engine = EngineProcess(["run", "example", "--db", str(path)], run_id="run-9", db_path=path)
    session = StoreSession(path, run_id="run-9", follow=True, poll_interval=0.05, engine=engine)
    app = TinkerTuiApp(session, refresh_interval=0.05, held_signals=[signal.SIGTERM])
    async with app.run_test() as pilot:
        await until(lambda: app.return_code is not None, pilot)
    assert app.return_code == 143
    assert isinstance(app.run_exception, EngineExited) and app.leave_code == 143
    assert engine.process is None and engine.exit_code() == -signal.SIGTERM
    assert app.run_exception.log_path is None  # it never wrote one
    assert not path.exists() and not engine.log_path.exists()


async def test_the_session_starts_its_engine_and_reports_what_it_said(tmp_path):
    """The engine is made unstarted; the session's run starts its process (here one that
    fails at once, on a store that is not one) and reports what it said."""
    path = tmp_path / "runs.db"
    path.write_bytes(b"this is not a run store" * 100)
    engine = EngineProcess(["run", "example", "--db", str(path)], run_id="run-9", db_path=path)
    session = StoreSession(path, run_id="run-9", follow=True, poll_interval=0.05, engine=engine)
    assert engine.process is None
    try:
        await asyncio.wait_for(session.run(), 60)
    except EngineExited as exc:
        assert exc.exit_code == 2 and exc.log_path == engine.log_path
        assert any(str(path) in line for line in exc.lines)
    else:
        raise AssertionError("no EngineExited")
    assert engine.process is not None and engine.exit_code() == 2


def test_a_health_stop_after_a_rollback_quotes_one_best_in_reason_and_summary():
    """A rollback undid the best step (0.75 at step 5): the collapse that stops the run
    later still measures from it, so the summary names that one too, said alike, beside
    the best of the steps the run holds."""
    from tinker_tui.engine.events import CommandReceived, StepTrained

    collector = SummaryCollector(task="example", db_path=Path("runs/tinker-tui.db"))

    def step(n: int, reward: float) -> StepTrained:
        flat = {"discarded/zero_variance": 8.0} if reward == 0.0 else {}
        return StepTrained(
            time=float(n),
            step=n,
            policy_version=n,
            group_ids=tuple(range(8)),
            metrics={"reward/mean": reward, **flat},
        )

    for n, reward in enumerate([0.5, 0.5, 0.5, 0.5, 0.75, 0.3], start=1):
        collector.handle(step(n, reward))
    collector.handle(
        CommandReceived(
            time=6.5,
            command="rolled_back",
            source="engine",
            args={
                "to_step": 4,
                "checkpoint": "step-000004",
                "value": 1e-5,
                "best_step": 5,
                "best": 0.75,
                "best_sampled_by": 4,
            },
        )
    )
    for n in range(5, 12):
        collector.handle(step(n, 0.0))
    summary = collector.summary()
    assert summary.collapse, "the fall after the undone best is named a collapse"
    collector.handle(
        RunFinished(
            time=20.0,
            status="stopped",
            final_step=11,
            reason=f"health: {summary.collapse}",
            cause="collapse",
        )
    )
    lines = summary_lines(collector.summary())
    assert "best 0.750 at step 5" in lines[0], lines[0]
    assert lines[1] == (
        "  reward: final 0.000, best 0.500 at step 1 (0.750 at step 5 before a rollback undid it)"
    )
