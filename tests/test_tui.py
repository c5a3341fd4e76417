"""The Textual app: snapshots of every view and a pilot test for every key."""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")  # before Textual reads it, if first

from fake_session import FakeSession
from textual.command import CommandPalette
from textual.pilot import Pilot
from textual.widgets import Input
from textual.widgets._footer import FooterKey
from tinker_tui.app.screens.confirm_quit import QuitScreen
from tinker_tui.app.screens.control import ControlScreen
from tinker_tui.app.screens.help import HelpScreen
from tinker_tui.app.screens.knob_edit import KnobEditScreen
from tinker_tui.app.screens.rollouts import RolloutsScreen
from tinker_tui.app.tui import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_SIGTERM, TinkerTuiApp
from tinker_tui.app.widgets.checkpoints import CheckpointsTable
from tinker_tui.app.widgets.commands import CommandsTable
from tinker_tui.app.widgets.log import LogPanel
from tinker_tui.app.widgets.rewards import RewardsChart
from tinker_tui.app.widgets.rollout_detail import RolloutDetail
from tinker_tui.app.widgets.rollouts_tree import RolloutsTree
from tinker_tui.app.widgets.status_bar import RunStatusPanel
from tinker_tui.app.widgets.throughput import ThroughputPanel


def make_app(session: FakeSession | None = None, *, refresh_interval: float = 0.05) -> TinkerTuiApp:
    session = session if session is not None else FakeSession()
    app = TinkerTuiApp(session, clock=session.clock, refresh_interval=refresh_interval)
    app.animation_level = "none"
    return app


async def settled(pilot: Pilot) -> None:
    """Wait until the session published its script, then redraw the panes from the model."""
    app = pilot.app
    assert isinstance(app, TinkerTuiApp)
    await asyncio.wait_for(app.session.script_done.wait(), timeout=5)
    await pilot.pause()
    app.refresh_panes()
    await pilot.pause()


def footer_labels(app: TinkerTuiApp) -> list[str]:
    return [key.description for key in app.screen.query(FooterKey)]


async def until(predicate, pilot: Pilot, timeout: float = 3.0) -> None:
    """Let the app run until `predicate()` holds (the panes redraw on a timer)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.02)


async def press(pilot: Pilot, *keys: str) -> None:
    for key in keys:
        await pilot.press(key)
        await pilot.pause()


# ------------------------------------------------------------------ snapshots


async def settled_with_titled_panes(pilot: Pilot) -> None:
    """`settled`, and every pane has a border title and room to show something."""
    await settled(pilot)
    panes = list(pilot.app.screen.query_one("#panes").children)
    assert len(panes) == 5
    for pane in panes:
        assert pane.border_title, pane
        assert pane.region.width > 0 and pane.region.height > 2, pane


def test_snapshot_80x24(snap_compare):
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=settled_with_titled_panes)


def test_snapshot_160x48(snap_compare):
    assert snap_compare(make_app(), terminal_size=(160, 48),
                        run_before=settled_with_titled_panes)


def test_snapshot_paused_with_reason(snap_compare):
    async def paused(pilot: Pilot) -> None:
        await settled(pilot)
        pilot.app.session.control.pause("eval running (3/10)")
        await settled(pilot)

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=paused)


def test_snapshot_help(snap_compare):
    async def help_open(pilot: Pilot) -> None:
        await settled(pilot)
        await press(pilot, "question_mark")

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=help_open)


def test_snapshot_rollouts_view(snap_compare):
    async def browsing(pilot: Pilot) -> None:
        await settled(pilot)
        await press(pilot, "2")
        await until(lambda: isinstance(pilot.app.screen, RolloutsScreen), pilot)
        pilot.app.refresh_panes()
        # step 20 → its first group (a tool-using rollout) → the first trajectory
        await press(pilot, "enter", "down", "enter", "down")
        pilot.app.refresh_panes()
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(100, 30), run_before=browsing)


def test_snapshot_confirm_quit(snap_compare):
    async def asked(pilot: Pilot) -> None:
        await settled(pilot)
        await press(pilot, "q")

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=asked)


# ------------------------------------------------------------------ run control keys


async def test_p_c_e_and_a_cancelled_quit():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        control = app.session.control
        assert "Pause" in footer_labels(app)

        # p pauses; the footer and the badge follow
        await press(pilot, "p")
        assert control.call_names() == ["pause"] and control.paused
        assert "Resume" in footer_labels(app) and "Pause" not in footer_labels(app)
        await until(lambda: app.model.state == "paused", pilot)
        badge = app.screen.query_one(RunStatusPanel).query_one("#state-badge")
        await until(lambda: str(badge.render()).startswith("PAUSED"), pilot)
        # p again resumes
        await press(pilot, "p")
        assert control.call_names() == ["pause", "resume"] and not control.paused
        assert "Pause" in footer_labels(app) and "Resume" not in footer_labels(app)
        assert app.model.state == "running"
        assert [c.command for c in app.model.commands[-2:]] == ["pause", "resume"]

        # c: a checkpoint, and the table gains a row (redrawn by the timer)
        table = app.screen.query_one(CheckpointsTable)
        assert table.row_count == 2
        await press(pilot, "c")
        assert control.call_names()[-1] == "request_checkpoint"
        await until(lambda: table.row_count == 3, pilot)
        newest = table.get_row_at(0)
        assert newest[0] == "20" and newest[1] == "state"
        assert newest[3].endswith("manual-000020")

        # e: an evaluation
        await press(pilot, "e")
        assert control.call_names()[-1] == "request_eval"
        assert app.model.last_eval is not None and app.model.last_eval.reward == 0.9

        # q asks first; n and escape cancel
        await press(pilot, "q")
        assert isinstance(app.screen, QuitScreen)
        await press(pilot, "n")
        assert not isinstance(app.screen, QuitScreen)
        await press(pilot, "q", "escape")
        assert app.is_running and not app.stopping
        assert "stop" not in control.call_names()


async def test_q_asks_then_stops_gracefully_and_exits_0():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await press(pilot, "q")
        assert isinstance(app.screen, QuitScreen)
        assert app.session.control.call_names() == []  # nothing before the answer
        await press(pilot, "y")
    assert app.session.control.call_names() == ["stop"]
    assert app.return_code == EXIT_OK
    assert app.run_status == "stopped"
    assert app.run_error is None
    assert app.model.state == "finished"


async def test_ctrl_c_asks_too_and_a_second_ctrl_c_confirms():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await press(pilot, "ctrl+c")
        assert isinstance(app.screen, QuitScreen)
        await press(pilot, "ctrl+c")
    assert app.session.control.call_names() == ["stop"]
    assert app.return_code == EXIT_OK
    assert app.run_status == "stopped"


async def test_quit_while_stopping_asks_then_exits_at_once():
    app = make_app(FakeSession(finish_on_stop=False))
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await press(pilot, "q", "y")
        assert app.stopping and app.is_running
        labels = footer_labels(app)
        assert "Force quit" in labels and "Quit" not in labels
        assert "Pause" not in labels
        await press(pilot, "q")
        assert isinstance(app.screen, QuitScreen) and app.screen.kind == "force"
        await press(pilot, "y")
    assert app.session.control.call_names() == ["stop"]
    assert app.return_code == EXIT_INTERRUPTED
    assert app.run_status is None


async def test_ctrl_q_exits_immediately():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await press(pilot, "ctrl+q")
    assert app.session.control.call_names() == []
    assert app.return_code == EXIT_INTERRUPTED


async def test_sigterm_stops_gracefully_without_asking():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        app.signal_stop()  # what the SIGTERM handler calls (not installed under run_test)
        await pilot.pause()
    assert app.session.control.calls == [("stop", "received SIGTERM")]
    assert app.return_code == EXIT_SIGTERM and app.run_status == "stopped"


# ------------------------------------------------------------------ navigation keys


async def test_help_palette_views_maximize_smoothing_and_log_level_keys():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        # ? opens help, escape closes it
        await press(pilot, "question_mark")
        assert isinstance(app.screen, HelpScreen)
        await press(pilot, "escape")
        assert not isinstance(app.screen, HelpScreen)
        # ctrl+p and : open the command palette, with the run's commands in it
        for key in ("ctrl+p", "colon"):
            await press(pilot, key)
            assert isinstance(app.screen, CommandPalette)
            titles = {c.title for c in app.get_system_commands(app.screen_stack[0])}
            assert {"Pause", "Checkpoint now", "Evaluate now", "View: rollouts",
                    "Set learning_rate"} <= titles
            await press(pilot, "escape")
            assert not isinstance(app.screen, CommandPalette)
        # + maximizes the focused pane (the chart when nothing is focused); esc restores
        await press(pilot, "plus")
        assert isinstance(app.screen.maximized, RewardsChart)
        await press(pilot, "plus")
        assert app.screen.maximized is None
        await press(pilot, "tab")
        assert isinstance(app.focused, ThroughputPanel)
        await press(pilot, "plus")
        assert isinstance(app.screen.maximized, ThroughputPanel)
        await press(pilot, "escape")
        assert app.screen.maximized is None
        # s cycles the reward smoothing
        assert app.model.ema_beta == 0.9
        await press(pilot, "s")
        assert app.model.ema_beta == 0.95
        chart = app.screen.query_one(RewardsChart)
        await until(lambda: "ema(0.95)" in str(chart.border_subtitle), pilot)
        # l cycles the log level: debug → info → warning shows the one warning
        log = app.screen.query_one(LogPanel)
        before = len(log.lines)
        await press(pilot, "l", "l")
        assert log.minimum == "warning"
        await until(lambda: len(log.lines) == 1 < before, pilot)
        # 1, 2, 3 switch views
        await press(pilot, "2")
        assert isinstance(app.screen, RolloutsScreen)
        await press(pilot, "3")
        assert isinstance(app.screen, ControlScreen)
        await until(lambda: app.screen.query_one(CommandsTable).row_count == 1, pilot)
        await press(pilot, "1")
        assert app.current_mode == "dashboard"


async def test_rollouts_browse_every_turn_and_filter_with_slash():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        await press(pilot, "2")
        app.refresh_panes()
        tree = app.screen.query_one(RolloutsTree)
        await until(lambda: len(tree.root.children) == 20, pilot)
        # step 20 → group 40 → its first trajectory, which called a tool
        await press(pilot, "enter", "down", "enter", "down")
        detail = app.screen.query_one(RolloutDetail)
        assert detail.ref is not None and detail.ref.kind == "trajectory"
        text = str(app.screen.query_one("#rollout-text").render())
        for expected in ("tool call lookup", "tool result (lookup)", "reward", "policy v19"):
            assert expected in text, text
        # / filters: the two stale groups' steps
        await press(pilot, "slash")
        assert isinstance(app.focused, Input)
        await pilot.press(*"stale")
        await until(lambda: len(tree.root.children) == 2, pilot)  # steps 4 and 15
        assert "2 of 41 groups match" in str(tree.border_subtitle)
        await press(pilot, "enter")  # back to the tree
        assert app.focused is tree
        tree.cursor_line = 0
        await until(lambda: "discarded, stale" in str(
            app.screen.query_one("#rollout-text").render()), pilot)
        await press(pilot, "escape")  # clears the filter
        await until(lambda: len(tree.root.children) == 20, pilot)


async def test_enter_edits_a_knob_with_confirmation_and_shows_refusals():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await press(pilot, "3")
        await until(lambda: app.focused is not None, pilot)
        # a value the engine refuses: its message, nothing applied
        await press(pilot, "down", "enter")  # temperature
        assert isinstance(app.screen, KnobEditScreen) and app.screen.knob == "temperature"
        await pilot.press(*"5")
        await press(pilot, "enter", "enter")
        message = str(app.screen.query_one("#knob-message").render())
        assert "temperature must be between 0 and 2" in message
        await press(pilot, "escape")
        assert app.session.control.call_names() == []
        # learning_rate: type, enter checks, enter again applies
        await press(pilot, "up", "enter")
        assert isinstance(app.screen, KnobEditScreen) and app.screen.knob == "learning_rate"
        await pilot.press(*"0.0005")
        await press(pilot, "enter")
        assert app.session.control.call_names() == []  # checked, not yet applied
        await press(pilot, "enter")
        assert not isinstance(app.screen, KnobEditScreen)
    assert app.session.control.calls == [("set_knob", "learning_rate=0.0005")]
    assert app.model.knobs["learning_rate"] == 0.0005
    assert [c.step for c in app.model.knob_markers()] == [12, 20]  # markers on the chart


async def test_the_mouse_focuses_panes_and_presses_buttons():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await pilot.click("#log")
        assert isinstance(app.focused, LogPanel)
        await press(pilot, "3")
        await until(lambda: app.screen.query("#action-checkpoint"), pilot)
        await pilot.click("#action-checkpoint")
        await pilot.click("#action-pause")
        await pilot.pause()
    assert app.session.control.call_names()[:2] == ["request_checkpoint", "pause"]


# ------------------------------------------------------------------ run outcomes and structure


async def test_a_run_that_completes_exits_0_with_its_status():
    app = make_app(FakeSession(wait_for_stop=False))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
    assert app.return_code == EXIT_OK
    assert app.run_status == "completed"


async def test_a_run_that_raises_exits_1_and_keeps_the_error():
    app = make_app(FakeSession(fail_with=RuntimeError("backend exploded")))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
    assert app.return_code == EXIT_FAILED
    assert app.run_status is None
    assert app.run_error is not None and "RuntimeError: backend exploded" in app.run_error
    assert isinstance(app.run_exception, RuntimeError)


async def test_bindings_carry_ids():
    ids = {binding.id for binding in TinkerTuiApp.BINDINGS}
    assert {"pause", "resume", "checkpoint", "eval", "stop", "force_quit", "quit", "help",
            "view_dashboard", "view_rollouts", "view_control", "maximize",
            "command_palette"} <= ids
