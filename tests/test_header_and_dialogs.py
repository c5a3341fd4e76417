"""What the screen says at once and whole: the run id in the header, the finish screen's
commands on one line, `show` of a finished run from its first frame, a view up to date
when switched to, the help whole at 80x24."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")

from fake_session import FakeSession, step_events, wait_for_charts
from test_show import write_run
from textual.pilot import Pilot

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.run_summary import SummaryCollector, next_commands
from tinker_tui.app.screens.finished import FinishedScreen
from tinker_tui.app.screens.help import HelpScreen
from tinker_tui.app.store_session import StoreSession
from tinker_tui.app.tui import TinkerTuiApp
from tinker_tui.app.widgets.status_bar import RunStatusPanel, run_label_text
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.events import RunStarted, StepTrained
from tinker_tui.engine.store import find_run


async def until(predicate, pilot: Pilot, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await pilot.pause(0.02)


def started(run_id: str) -> DashboardState:
    model = DashboardState(FakeClock())
    model.apply(
        RunStarted(
            time=0.0,
            run_id=run_id,
            name="yes_no_maybe",
            backend="local",
            base_model="tiny-chat",
            max_steps=60,
            start_step=0,
            config={},
        )
    )
    return model


def test_the_header_names_the_run_and_two_runs_of_one_task_read_apart():
    one = started("yes_no_maybe-20261201-205155-4352")
    two = started("yes_no_maybe-20261201-205201-9a0c")
    assert run_label_text("", one) == "yes_no_maybe-20261201-205155-4352 │ local · tiny-chat"
    assert run_label_text("attached", two, 80).startswith("attached │ yes_no_maybe-2026")
    # narrow: backend and model go first, then the id is cut in the middle, its end kept
    for width in (40, 30, 24):
        a, b = run_label_text("attached", one, width), run_label_text("attached", two, width)
        assert len(a) <= width and a != b, (a, b)
        assert a.endswith("-4352") and b.endswith("-9a0c")


def make_app(session: FakeSession) -> TinkerTuiApp:
    summary = SummaryCollector(task="example", db_path=Path("runs/a-longer/folder/tinker.db"))
    app = TinkerTuiApp(session, clock=session.clock, refresh_interval=0.05, summary=summary)
    app.animation_level = "none"
    return app


async def test_at_160_columns_the_finish_screens_commands_are_one_line_each():
    app = make_app(FakeSession(wait_for_stop=False))
    async with app.run_test(size=(160, 48)) as pilot:
        await until(lambda: isinstance(app.screen, FinishedScreen), pilot)
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FinishedScreen)
        text = screen.query_one("#finished-text")
        width = text.content_region.width
        commands = next_commands(screen.summary)
        assert any("--resume" in command for _, command in commands)
        label = max(len(what) for what, _ in commands) + 2
        for _, command in commands:  # beside its label, unwrapped
            assert label + len(command) <= width, (command, width)
        assert text.content_region.height == len(str(text.render()).splitlines())


async def test_at_80_columns_a_command_too_long_for_its_label_column_gets_its_own_line():
    app = make_app(FakeSession(wait_for_stop=False))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(lambda: isinstance(app.screen, FinishedScreen), pilot)
        await pilot.pause()
        lines = str(app.screen.query_one("#finished-text").render()).splitlines()
        resume = next(line for line in lines if "--resume" in line)
        assert resume.startswith("tinker-tui run example --resume run-0001")  # no label


def test_show_of_a_finished_run_draws_its_end_from_the_first_frame(tmp_path):
    db = tmp_path / "runs.db"
    write_run(db)
    asyncio.run(show_from_the_first_frame(db))


async def show_from_the_first_frame(db: Path) -> None:
    run = await find_run(db, None)
    app = TinkerTuiApp(StoreSession(db, run), refresh_interval=0.05)
    # before anything is read from the store: the run's row says how it ended
    assert app.state.state == "finished" and app.state.status == "completed"
    assert app.state.run_id == "run-0001" and app.state.phase_text() is None
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()  # the first frame, before the session has read the store
        status = app.screen.query_one(RunStatusPanel)
        badge = str(status.query_one("#state-badge").render())
        label = str(status.query_one("#run-label").render())
        assert badge.startswith("FINISHED (completed)") and "run-0001" in label
        assert "waiting" not in label and "STARTING" not in badge
        await asyncio.wait_for(app.session.loaded.wait(), timeout=10)
        await pilot.pause()
        assert app.state.state == "finished" and app.state.step == 20


async def test_a_view_switched_to_shows_the_step_of_now_in_its_first_frame():
    session = FakeSession()
    app = TinkerTuiApp(session, clock=session.clock, refresh_interval=60)  # no redraw tick
    async with app.run_test(size=(100, 30)) as pilot:
        await asyncio.wait_for(session.script_done.wait(), timeout=5)
        await wait_for_charts(pilot)
        await until(lambda: {"rollouts", "control", "metrics"} <= app._views_composed, pilot)
        await pilot.pause(0.2)
        for step in (21, 22, 23):
            for event in step_events(session.clock, step):
                session.publish(event)
        for view in ("rollouts", "control", "metrics"):
            app.action_view(view)  # what the key does; nothing has redrawn it since
            progress = str(app.screen.query_one("#progress-label").render())
            assert progress.startswith("step 23/50"), (view, progress)


async def test_the_help_is_whole_at_80x24():
    app = TinkerTuiApp(FakeSession(), refresh_interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await until(lambda: isinstance(app.screen, HelpScreen), pilot)
        await pilot.pause(0.2)
        dialog = app.screen.query_one("#help-dialog")
        assert dialog.max_scroll_y == 0 and dialog.border_subtitle == "esc closes"
        text = str(app.screen.query_one("#help-text").render())
        assert "this help" in text and "command palette" in text
    small = TinkerTuiApp(FakeSession(), refresh_interval=0.05)
    async with small.run_test(size=(60, 18)) as pilot:  # smaller: it scrolls, and says so
        await pilot.pause()
        await pilot.press("question_mark")
        await until(lambda: isinstance(small.screen, HelpScreen), pilot)
        await pilot.pause(0.2)
        assert "more" in str(small.screen.query_one("#help-dialog").border_subtitle)


async def test_the_palettes_screenshot_says_where_it_saves_when_there_is_no_downloads(
    tmp_path, monkeypatch
):
    """Textual's Screenshot writes to ~/Downloads and, without one, said only "Failed to
    save screenshot"."""
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir()
    here.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(here)
    app = TinkerTuiApp(FakeSession(), refresh_interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        commands = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert commands["Screenshot"] == f"Save an SVG of the screen in {here}"
        app.save_screen()
        await pilot.pause()
        saved = list(here.glob("*.svg"))
        assert len(saved) == 1 and saved[0].read_text().startswith("<svg")
        assert any(f"screenshot saved: {saved[0]}" in n.message for n in app._notifications)
    # a folder nobody can write to (root included): it says why
    session = FakeSession()
    session.db_path = Path("/proc/runs.db")
    app = TinkerTuiApp(session, refresh_interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.save_screen()
        await pilot.pause()
        assert any(
            n.message.startswith("screenshot not saved in /proc: ") for n in app._notifications
        ), [n.message for n in app._notifications]


def test_quit_now_says_whether_the_run_goes_on():
    driven = TinkerTuiApp(FakeSession())
    assert "the run stops at once" in driven.quit_now_help()
    session = FakeSession()
    session.attached = True
    assert "the run goes on in its own process" in TinkerTuiApp(session).quit_now_help()
    session = FakeSession()
    session.read_only = True
    assert "has ended, or is not running here" in TinkerTuiApp(session).quit_now_help()


def local_checkpoints(clock: FakeClock) -> list:
    """A local run of 30 steps whose weights last changed at step 12 (version 12): full
    state at 10, 20, 30, sampler weights up to version 12 only."""
    from fake_session import run_started

    from tinker_tui.engine.events import CheckpointSaved, StepTrained

    events: list = [run_started(clock)]
    for step in range(1, 31):
        clock.advance(1.0)
        version = min(step, 12)
        events.append(StepTrained(time=clock.now(), step=step, policy_version=version, metrics={}))
        if step <= 12:
            events.append(
                CheckpointSaved(
                    time=clock.now(),
                    step=version,
                    kind="sampler",
                    name=f"step-{version:06d}",
                    path=f"tinker://local-ab/sampler_weights/step-{version:06d}",
                )
            )
        if step % 10 == 0:
            events.append(
                CheckpointSaved(
                    time=clock.now(),
                    step=step,
                    kind="state",
                    name=f"step-{step:06d}",
                    path=f"tinker://local-ab/weights/step-{step:06d}",
                )
            )
    return events


async def test_a_local_runs_checkpoints_show_their_folder_and_sampler_weights_their_version(
    tmp_path,
):
    from tinker_tui.app.screens.text_view import TextScreen
    from tinker_tui.app.widgets.checkpoints import CheckpointsTable

    for kind, name in (("weights", "step-000030"), ("sampler_weights", "step-000012")):
        (tmp_path / "checkpoints" / "local-ab" / kind / name).mkdir(parents=True)
    session = FakeSession(script=local_checkpoints)
    session.db_path = tmp_path / "runs.db"
    app = TinkerTuiApp(session, clock=session.clock, refresh_interval=0.05)
    async with app.run_test(size=(160, 48)) as pilot:
        await asyncio.wait_for(session.script_done.wait(), timeout=5)
        table = app.screen.query_one(CheckpointsTable)
        await until(lambda: table.row_count == len(app.state.checkpoints) > 0, pilot)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        by_kind = {(r[0], r[1]): r[3] for r in rows}
        folder = tmp_path / "checkpoints" / "local-ab"
        for key, path in (
            (("30", "state"), folder / "weights" / "step-000030"),
            (("v12", "sampler"), folder / "sampler_weights" / "step-000012"),
        ):
            cell = by_kind[key]  # the folder, whole folders left out from its start
            assert cell.startswith("…/") and str(path).endswith(cell[1:]), (cell, path)
        # a folder not (or no longer) on disk: the path as saved
        cell = by_kind[("20", "state")]
        assert cell.startswith("…/") and "tinker://local-ab/weights/step-000020".endswith(
            cell[1:]
        ), cell
        assert "weights unchanged since step 12" in str(table.border_subtitle)
        table.focus()
        table.move_cursor(row=[r[0] for r in rows].index("v12"))
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, TextScreen), pilot)
        text = str(app.screen.query_one("#text-body").render())
        assert str(folder / "sampler_weights" / "step-000012") in text
        assert "(saved as tinker://local-ab/sampler_weights/step-000012)" in text
        assert "not per step: steps without a learning signal save none" in text


async def test_keys_typed_behind_q_open_nothing_on_the_closing_app():
    """`q` then `?` in one burst: the help was pushed on an app tearing down, and its
    mount failed with a traceback on the terminal."""
    app = TinkerTuiApp(FakeSession(), refresh_interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await asyncio.wait_for(app.session.script_done.wait(), timeout=5)
        await pilot.pause()
        assert app.check_action("help", ()) is True
        app.exit()
        assert app.check_action("help", ()) is False
        assert app.check_action("view", ("metrics",)) is False


def test_a_model_folder_run_keeps_its_model_name_in_the_header():
    """A Hugging Face folder as the base model is a long path: the header dropped the model
    (backend and model gave way first). It shows the folder's name, the model's."""
    model = DashboardState(FakeClock())
    model.apply(
        RunStarted(
            time=0.0,
            run_id="my_task-20261204-101010-ab12",
            name="my_task",
            backend="local",
            base_model="/home/someone/models/hub/Qwen3-0.6B-real-format",
            max_steps=60,
            start_step=0,
            config={},
        )
    )
    for width in (80, 64):
        text = run_label_text("attached", model, width)
        assert len(text) <= width and "Qwen3-0.6B-real-format" in text, text
        assert text.endswith("-ab12 │ local · Qwen3-0.6B-real-format") or text.endswith(
            "-ab12 │ Qwen3-0.6B-real-format"
        ), text


def test_the_status_line_says_what_the_version_is_and_why_it_stopped():
    """`v11` stopped moving at step 12 with nothing saying why."""
    from tinker_tui.app.widgets.status_bar import progress_text

    model = started("yes_no_maybe-20261201-205155-4352")
    for step in range(1, 6):  # each step trained: a new version of the weights
        model.apply(StepTrained(time=float(step), step=step, policy_version=step, metrics={}))
    assert "│ weights v5 │" in progress_text(model, 10.0)
    for step in range(6, 10):  # trained nothing: the version stays
        model.apply(StepTrained(time=float(step), step=step, policy_version=5, metrics={}))
    text = progress_text(model, 10.0)
    assert "weights v5 since step 5 (no gradient)" in text, text
    short = progress_text(model, 10.0, width=40)
    assert len(short) <= 40 and "v5" in short, short
