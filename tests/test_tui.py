"""The Textual app: snapshots of every view and a pilot test for every key."""

from __future__ import annotations

import asyncio
import os

import pytest
from rich.cells import cell_len

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")  # before Textual reads it, if first

from fake_session import (
    FakeSession,
    converged_events,
    finished_events,
    run_started,
    startup_events,
    step_events,
    wait_for_charts,
)
from textual.command import CommandPalette
from textual.pilot import Pilot
from textual.widgets import Input, Label, Static
from textual.widgets._footer import FooterKey

from tinker_tui.app.interrupts import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_SIGTERM
from tinker_tui.app.screens.confirm_quit import QuitScreen
from tinker_tui.app.screens.confirm_rollback import RollbackScreen
from tinker_tui.app.screens.control import ControlScreen
from tinker_tui.app.screens.finished import FinishedScreen
from tinker_tui.app.screens.help import HelpScreen
from tinker_tui.app.screens.knob_edit import KnobEditScreen
from tinker_tui.app.screens.metrics import MetricsScreen
from tinker_tui.app.screens.rollouts import RolloutsScreen
from tinker_tui.app.screens.text_view import TextScreen
from tinker_tui.app.screens.too_small import TooSmallScreen
from tinker_tui.app.tui import VIEWS, TinkerTuiApp
from tinker_tui.app.widgets.chart_pane import ChartPane
from tinker_tui.app.widgets.checkpoints import CheckpointsTable
from tinker_tui.app.widgets.commands import CommandsTable
from tinker_tui.app.widgets.discarded import DiscardedPanel
from tinker_tui.app.widgets.knobs import KnobsTable
from tinker_tui.app.widgets.log import LogPanel
from tinker_tui.app.widgets.rewards import RewardsChart
from tinker_tui.app.widgets.rollout_detail import RolloutDetail
from tinker_tui.app.widgets.rollouts_tree import RolloutsTree
from tinker_tui.app.widgets.status_bar import RunStatusPanel
from tinker_tui.app.widgets.throughput import ThroughputPanel
from tinker_tui.app.widgets.updates import same_size


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
    await wait_for_charts(pilot)
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
        titled = pane.chart if isinstance(pane, ChartPane) else pane
        assert titled.border_title, pane
        assert pane.region.width > 0 and pane.region.height > 2, pane


@pytest.mark.parametrize(
    "size", [(60, 18), (80, 24), (100, 30), (160, 48)], ids=["60x18", "80x24", "100x30", "160x48"]
)
def test_snapshot_dashboard(snap_compare, size):
    assert snap_compare(make_app(), terminal_size=size, run_before=settled_with_titled_panes)


def test_snapshot_too_small_40x12(snap_compare):
    assert snap_compare(make_app(), terminal_size=(40, 12), run_before=settled)


def warming_up() -> FakeSession:
    return FakeSession(
        script=lambda clock: [run_started(clock)] + startup_events(clock, warmup_until=7)
    )


def test_snapshot_warm_up(snap_compare):
    assert snap_compare(make_app(warming_up()), terminal_size=(80, 24), run_before=settled)


def test_snapshot_converged(snap_compare):
    app = make_app(FakeSession(script=converged_events))
    assert snap_compare(app, terminal_size=(80, 24), run_before=settled)


def test_snapshot_finished(snap_compare):
    app = make_app(FakeSession(script=finished_events))
    assert snap_compare(app, terminal_size=(80, 24), run_before=settled)


def test_snapshot_metrics_view(snap_compare):
    async def metrics(pilot: Pilot) -> None:
        await settled(pilot)
        await press(pilot, "4")
        await until(lambda: isinstance(pilot.app.screen, MetricsScreen), pilot)
        await until(lambda: not pilot.app.screen.pending, pilot)
        pilot.app.refresh_panes()
        await pilot.pause()
        pilot.app.refresh_panes()
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(160, 48), run_before=metrics)


def test_snapshot_paused_with_reason(snap_compare):
    async def paused(pilot: Pilot) -> None:
        await settled(pilot)
        pilot.app.session.control.pause(
            "no learning signal: 94% of the last 32 groups had equal rewards below the best"
        )
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


def test_snapshot_confirm_rollback(snap_compare):
    async def asked(pilot: Pilot) -> None:
        await settled(pilot)
        await press(pilot, "b")

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=asked)


# ------------------------------------------------------------------ run control keys


async def test_p_c_e_b_and_a_cancelled_quit():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        control = app.session.control
        assert "Pause" in footer_labels(app)

        # p pauses; the footer and the badge follow
        await press(pilot, "p")
        assert control.call_names() == ["pause"] and control.paused
        assert "Resume" in footer_labels(app) and "Pause" not in footer_labels(app)
        await until(lambda: app.state.state == "paused", pilot)
        badge = app.screen.query_one(RunStatusPanel).query_one("#state-badge")
        await until(lambda: str(badge.render()).startswith("PAUSED"), pilot)
        # p again resumes
        await press(pilot, "p")
        assert control.call_names() == ["pause", "resume"] and not control.paused
        assert "Pause" in footer_labels(app) and "Resume" not in footer_labels(app)
        assert app.state.state == "running"
        assert [c.command for c in app.state.commands[-2:]] == ["pause", "resume"]

        # c: a checkpoint, and the table gains a row (redrawn by the timer)
        table = app.screen.query_one(CheckpointsTable)
        assert table.row_count == 2
        await press(pilot, "c")
        assert control.call_names()[-1] == "request_checkpoint"
        await until(lambda: table.row_count == 3, pilot)
        newest = table.get_row_at(0)
        assert newest[0] == "20✓" and newest[1] == "state"  # asked for: kept, marked
        assert "✓ asked for" in str(table.border_subtitle)
        assert newest[3].endswith("000020") and "…" in newest[3]  # cut in the middle
        assert app.state.checkpoints.rows[-1].path.endswith("/weights/manual-000020")

        # e: an evaluation
        await press(pilot, "e")
        assert control.call_names()[-1] == "request_eval"
        assert app.state.last_eval is not None and app.state.last_eval.reward == 0.9

        # b: roll back to the checkpoint of the weights that sampled the best step, at lr x0.5
        target = app.state.health_window.rollback_point()
        assert target is not None and target[0] <= app.state.health_window.best_step[0]
        # b asks first, saying what it undoes; n cancels, y rolls back
        await press(pilot, "b")
        assert isinstance(app.screen, RollbackScreen)
        said = str(app.screen.query_one("#rollback-text", Static).render())
        undone = app.state.step - target[0]
        assert f"undoes {undone} steps ({target[0] + 1}-{app.state.step})" in said, said
        assert "learning rate" in said and "×0.5" in said, said
        await press(pilot, "n")
        assert not isinstance(app.screen, RollbackScreen)
        assert "request_rollback" not in control.call_names()
        await press(pilot, "b", "y")
        assert control.calls[-1] == (
            "request_rollback",
            f"by hand: roll back to step {target[0]} at lr x0.5 x0.5",
        )

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
    assert app.state.state == "finished"


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
            assert {
                "Pause",
                "Checkpoint now",
                "Evaluate now",
                "View: rollouts",
                "Set learning_rate",
            } <= titles
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
        assert app.state.ema_beta == 0.9
        await press(pilot, "s")
        assert app.state.ema_beta == 0.95
        chart = app.screen.query_one(RewardsChart)
        await until(lambda: "ema(0.95)" in str(chart.border_subtitle), pilot)
        # l cycles the log level: debug → info → warning shows the one warning
        log = app.screen.query_one(LogPanel)
        before = len(log.lines)
        await press(pilot, "l", "l")
        assert log.minimum == "warning"
        await until(lambda: len(log.lines) == 1 < before, pilot)
        total = app.state.log.total
        await until(
            lambda: str(log.border_subtitle).startswith(f"≥ warning · 1 of {total:,} lines"), pilot
        )  # what it shows, of how many
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
        await until(
            lambda: "discarded, stale" in str(app.screen.query_one("#rollout-text").render()), pilot
        )
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
        await press(pilot, "backspace")  # the value changes: the refusal of the last goes
        message = str(app.screen.query_one("#knob-message").render())
        assert "between" not in message and message.startswith("enter: check the value")
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
    assert app.state.knobs["learning_rate"] == 0.0005
    assert [c.step for c in app.state.knob_markers()] == [12, 20]  # markers on the chart


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


async def test_a_run_that_completes_stays_until_q_then_exits_0_with_its_status():
    app = make_app(FakeSession(wait_for_stop=False))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(lambda: isinstance(app.screen, FinishedScreen), pilot)
        assert app.is_running and app.return_code is None
        await press(pilot, "q")
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
    assert {
        "pause",
        "resume",
        "checkpoint",
        "eval",
        "stop",
        "force_quit",
        "quit",
        "help",
        "view_dashboard",
        "view_rollouts",
        "view_control",
        "maximize",
        "command_palette",
    } <= ids


# ------------------------------------------------------------------ issue-13 behaviours


async def test_rollouts_hold_still_while_steps_arrive_and_home_shows_them():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        await press(pilot, "2")
        app.refresh_panes()
        tree = app.screen.query_one(RolloutsTree)
        await until(lambda: len(tree.root.children) == 20, pilot)
        # every trained step is listed, newest first
        assert [n.data.step for n in tree.root.children] == list(range(20, 0, -1))
        # open step 15 and read its first group
        await press(pilot, "down", "down", "down", "down", "down", "enter", "down")
        opened, line, top = tree.cursor_node, tree.cursor_line, tree.scroll_y
        assert opened.data.kind == "group" and opened.data.step == 15
        detail_before = str(app.screen.query_one("#rollout-text").render())
        # three steps arrive while reading
        session = app.session
        for step in (21, 22, 23):
            for event in step_events(session.clock, step):
                session.publish(event)
        app.refresh_panes()
        await pilot.pause()
        assert tree.cursor_node is opened and tree.cursor_line == line
        assert tree.scroll_y == top and opened.parent.is_expanded
        assert str(app.screen.query_one("#rollout-text").render()) == detail_before
        assert len(tree.root.children) == 20  # announced, not inserted
        assert "▲ 3 new steps" in str(tree.border_subtitle)
        # home shows them, newest first, and follows again
        await press(pilot, "home")
        assert [n.data.step for n in tree.root.children][:4] == [23, 22, 21, 20]
        assert tree.cursor_line == 0 and "new step" not in str(tree.border_subtitle)
        # following: the next step goes straight in
        for event in step_events(session.clock, 24):
            session.publish(event)
        app.refresh_panes()
        await pilot.pause()
        assert tree.root.children[0].data.step == 24


async def test_the_rollouts_filter_keeps_its_text_and_gives_focus_back():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        await press(pilot, "2")
        tree = app.screen.query_one(RolloutsTree)
        field = app.screen.query_one("#rollout-filter", Input)
        await press(pilot, "slash")
        await pilot.press(*"stale")
        await press(pilot, "enter")
        assert app.focused is tree and field.display and field.value == "stale"
        await until(lambda: len(tree.root.children) == 2, pilot)
        # / again edits the same filter: nothing is cleared or replaced
        await press(pilot, "slash")
        assert app.focused is field and field.value == "stale"
        await pilot.press("space", *"q02")
        await press(pilot, "enter")
        assert field.value == "stale q02" and app.focused is tree
        await until(lambda: len(tree.root.children) == 1, pilot)
        await press(pilot, "enter", "down")  # open the stale q02 group
        opened = tree.cursor_node.data
        assert opened.kind == "group"
        # escape clears it (and hides the field); the open group stays under the cursor
        await press(pilot, "escape")
        assert field.value == "" and not field.has_class("-visible")
        await until(lambda: len(tree.root.children) == 20, pilot)
        assert tree.cursor_node.data == opened and tree.cursor_node.parent.is_expanded
        assert str(app.screen.query_one("#rollout-text").render()).startswith(
            f"group {opened.group_id}"
        )


async def test_enter_opens_a_log_line_and_a_checkpoint_path_whole():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        log = app.screen.query_one(LogPanel)
        log.focus()
        await pilot.pause()
        # the cursor starts on the newest line (step 20's); up twice, past step 15's (info
        # lines are not merged): the knob change
        await press(pilot, "up", "up", "enter")
        assert isinstance(app.screen, TextScreen)
        text = str(app.screen.query_one("#text-body").render())
        assert "learning_rate changed from 0.002 to 0.001" in text
        await press(pilot, "escape")
        table = app.screen.query_one(CheckpointsTable)
        table.focus()
        await press(pilot, "enter")
        assert isinstance(app.screen, TextScreen)
        assert "/tmp/runs/run-0001/sampler_weights/step-000020" in str(
            app.screen.query_one("#text-body").render()
        )


async def test_tables_fit_their_columns_when_filled_not_when_next_idle():
    """A table filled while the app stayed busy was drawn with columns as wide as their
    labels ("sampler" cut to "samp"): Textual widens them only once the table goes idle."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        tables = [CheckpointsTable(), CommandsTable(), KnobsTable()]
        await app.screen.mount_all(tables)
        await pilot.pause()
        checkpoints, commands, knobs = tables
        # filled and measured with no await between: no idle turn can have run
        checkpoints.update_from_state(app.state, 0.0)
        commands.update_from_state(app.state)
        knobs.update_from_state(app.state, {"learning_rate": 0.000123456})
        for table in tables:
            assert table.row_count > 0
            for row in range(table.row_count):
                for column, cell in zip(table.ordered_columns, table.get_row_at(row), strict=True):
                    assert cell_len(str(cell)) <= column.content_width, (table, cell)
        kinds = [str(checkpoints.get_row_at(row)[1]) for row in range(checkpoints.row_count)]
        assert "sampler" in kinds
        widths = [c.get_render_width(checkpoints) for c in checkpoints.ordered_columns]
        assert sum(widths) <= checkpoints.content_region.width  # the path fits


async def test_pause_shows_at_once_in_every_pane():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        panel = app.screen.query_one(ThroughputPanel)
        await press(pilot, "p")
        app.refresh_panes()
        await pilot.pause()
        assert str(panel.query_one("#verdict").render()).startswith("⏸ paused")
        assert "paused" in str(panel.query_one("#rollouts-unit").render())
        assert panel.has_class("-paused")
        progress = str(app.screen.query_one("#progress-label").render())
        assert "ETA paused" in progress
        await press(pilot, "p")
        app.refresh_panes()
        await pilot.pause()
        assert str(panel.query_one("#verdict").render()).startswith("▶ sampler-bound")


async def test_the_metrics_view_charts_every_metric_the_run_records():
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settled(pilot)
        await press(pilot, "4")
        app.refresh_panes()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MetricsScreen)
        await until(lambda: not screen.pending, pilot)
        keys = [chart.key for chart in screen.charts()]
        assert keys == app.state.metric_keys()
        assert {
            "reward/mean",
            "loss",
            "optim/lr",
            "time/train",
            "task/correct",
            "eval/reward_mean",
            "throughput/sampled_tokens_per_s",
        } <= set(keys)
        # a metric the task starts reporting later gets its chart
        session = app.session
        for event in step_events(session.clock, 21):
            session.publish(event)
        from tinker_tui.engine.events import StepTrained

        session.publish(
            StepTrained(
                time=session.clock.now(),
                step=22,
                policy_version=22,
                metrics={"task/bits_right": 7.0},
            )
        )
        await until(lambda: "task/bits_right" in [chart.key for chart in screen.charts()], pilot)
        # the picker hides one (space on the highlighted key: reward/mean)
        picker = screen.query_one("#metric-picker")
        assert picker.display  # wide enough to show it
        picker.focus()
        await pilot.pause()
        picker.highlighted = 0
        await press(pilot, "space")
        await until(lambda: "reward/mean" not in [chart.key for chart in screen.charts()], pilot)
        assert "reward/mean" in screen.hidden
        # smoothing applies to these charts too
        await press(pilot, "s")
        assert app.state.ema_beta == 0.95


async def test_the_metrics_view_mounts_its_charts_a_few_per_redraw():
    app = make_app(refresh_interval=3600)  # redraws only when the test asks
    async with app.run_test(size=(160, 48)) as pilot:
        await asyncio.wait_for(app.session.script_done.wait(), timeout=5)
        await wait_for_charts(pilot)
        await press(pilot, "4")
        screen = app.screen
        assert isinstance(screen, MetricsScreen)
        total = len(app.state.metric_keys())
        counts = [len(screen.charts())]  # what showing the view drew, if it drew yet
        while True:
            app.refresh_panes()
            await pilot.pause()
            counts.append(len(screen.charts()))
            if not screen.pending:
                break
        batch = MetricsScreen.MOUNT_BATCH
        assert total > 2 * batch and counts[-1] == total
        steps = [b - a for a, b in zip(counts, counts[1:], strict=False)]
        assert all(0 < step <= batch for step in steps) and len(steps) >= 2, counts
        assert [chart.key for chart in screen.charts()] == app.state.metric_keys()


async def test_a_terminal_too_small_gets_a_notice_that_goes_when_it_grows():
    app = make_app()
    async with app.run_test(size=(40, 12)) as pilot:
        await settled(pilot)
        await until(lambda: isinstance(app.screen, TooSmallScreen), pilot)
        text = str(app.screen.query_one("#too-small-text").render())
        assert "Terminal too small: 40×12" in text and "step 20/50" in text
        await press(pilot, "2")  # views wait; run keys still work
        await press(pilot, "p")
        assert app.session.control.paused
        await pilot.resize_terminal(80, 24)
        await until(lambda: not isinstance(app.screen, TooSmallScreen), pilot)
        assert app.current_mode == "dashboard"


def test_chart_tick_labels_fit_the_margin_and_tell_ticks_apart():
    from tinker_tui.app.widgets.step_chart import CompactAxisFormatter, format_value

    formatter = CompactAxisFormatter()
    for low, high in [
        (0.00099, 0.00111),
        (0.0009, 0.0016),
        (-0.0011, -0.00099),
        (1e5, 3e6),
        (0.5, 0.9),
        (1000, 1300),
    ]:
        labels = formatter.get_labels_for_ticks(formatter.get_ticks(low, high))
        assert len(set(labels)) == len(labels), labels
        assert max(len(label) for label in labels) <= 8, labels
    ticks = formatter.get_ticks(0.00099, 0.00111)
    assert formatter.get_labels_for_ticks(ticks)[:2] == ["1.00e-3", "1.02e-3"]
    assert formatter.get_labels_for_ticks(formatter.get_ticks(0.0009, 0.0016))[1] == "1.0e-3"
    assert [format_value(v) for v in (0.00012, -2.5e7, 0.5, 12345.0)] == [
        "1.2e-4",
        "-2.5e7",
        "0.5",
        "12.3k",
    ]
    assert "0.0" in formatter.get_labels_for_ticks([-1e-17, 0.5, 1.0])  # never "-0.0"
    # a short chart: no two ticks in one row (a flat 1.0 must not sit on a "1.02" row)
    formatter.rows = lambda: 4
    ticks, labels = formatter.get_ticks_and_labels(0.945, 1.055)
    assert labels == ["0.95", "1.00", "1.05"]
    assert all(b - a >= (1.055 - 0.945) / 4 for a, b in zip(ticks, ticks[1:], strict=False))
    assert formatter.get_ticks_and_labels(-0.5, 0.5)[1] == ["-0.5", "0.0", "0.5"]  # a flat 0
    formatter.rows = lambda: 19  # a tall one keeps the usual ticks
    assert formatter.get_ticks_and_labels(0.25, 0.95)[1] == [
        "0.3",
        "0.4",
        "0.5",
        "0.6",
        "0.7",
        "0.8",
        "0.9",
    ]


def test_chart_step_axis_ticks_are_whole_steps():
    from tinker_tui.app.widgets.step_chart import StepAxisFormatter

    formatter = StepAxisFormatter()
    assert formatter.get_ticks_and_labels(1, 2) == ([1.0, 2.0], ["1", "2"])
    assert formatter.get_ticks_and_labels(1, 4)[1] == ["1", "2", "3", "4"]
    ticks, labels = formatter.get_ticks_and_labels(1, 200)
    assert labels[:3] == ["50", "100", "150"] and all(t == int(t) for t in ticks)
    # a narrow plot labels fewer steps, so no two labels run together ("45")
    formatter.columns = lambda: 13
    assert formatter.get_ticks_and_labels(1, 8)[1] == ["2", "4", "6", "8"]
    formatter.columns = lambda: 60
    assert formatter.get_ticks_and_labels(1, 8)[1] == [str(s) for s in range(1, 9)]


def test_groups_left_when_a_run_ends_are_not_called_queued():
    from tinker_tui.app.dashboard_state import DashboardState
    from tinker_tui.app.widgets.rollout_detail import detail_content
    from tinker_tui.app.widgets.rollouts_tree import RolloutRef, waiting_label
    from tinker_tui.engine.clock import FakeClock

    clock = FakeClock()
    model = DashboardState(clock)
    events = finished_events(clock)
    left = step_events(clock, 21, rewards=(0.0, 1.0) * 8)[:-1]  # sampled, not taken
    for event in events[:-1] + left:
        model.apply(event)
    waiting = model.groups.waiting()
    assert waiting and str(waiting_label(waiting, model)).startswith("queued")
    model.apply(events[-1])  # the run ends: nothing will train them now
    assert str(waiting_label(waiting, model)).startswith("left over")
    text = detail_content(model, RolloutRef("waiting", None)).plain
    assert "never trained" in text and "waiting" not in text


def test_a_stored_run_waits_for_the_store_not_for_an_engine():
    session = FakeSession()
    session.read_only = True  # what `show` reads from the store
    assert make_app(session).state.phase_text().startswith("reading the run store… ")
    assert make_app().state.phase_text().startswith("starting the engine… ")


def test_the_rollouts_detail_says_what_the_run_does_before_its_first_rollouts():
    from tinker_tui.app.dashboard_state import DashboardState
    from tinker_tui.app.widgets.rollout_detail import detail_content
    from tinker_tui.engine.clock import FakeClock

    clock = FakeClock()
    model = DashboardState(clock)
    for event in [run_started(clock)] + startup_events(clock, warmup_until=7):
        model.apply(event)
    text = detail_content(model, None).plain
    assert text.startswith(f"No rollouts yet: {model.phase_text()}.")
    assert "format warm-up" in text


async def test_views_are_composed_ahead_and_switching_keeps_the_footer_until_keys_change():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        # every view is composed in the background, before any key asks for it
        await until(lambda: all(app.get_screen_stack(view) for view in VIEWS), pilot)
        dashboard = app.screen
        keys = list(dashboard.query(FooterKey))
        assert "Smooth" in footer_labels(app)
        await press(pilot, "3")
        assert isinstance(app.screen, ControlScreen)
        assert "Smooth" not in footer_labels(app)  # `s` applies to the dashboard and metrics
        await press(pilot, "1")
        assert app.screen is dashboard
        # the same keys shown: the footer was not rebuilt, on either switch
        assert list(dashboard.query(FooterKey)) == keys
        assert "Smooth" in footer_labels(app)
        # the keys change: it is
        await press(pilot, "p")
        await until(lambda: "Resume" in footer_labels(app), pilot)
        assert list(dashboard.query(FooterKey)) != keys


async def test_a_text_update_lays_the_screen_out_only_when_the_widget_can_change_size():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        progress = app.screen.query_one("#progress-label", Label)  # sized by its text
        assert same_size(progress, "step 1/50", "step 2/50")
        assert not same_size(progress, "step 9/50", "step 10/50")
        assert not same_size(progress, "step 1/50", "step 1/50\nETA 00:10")
        assert not same_size(progress, "x", "y" * (progress.content_region.width + 5))
        health = app.screen.query_one(DiscardedPanel)  # sized by the panes' grid
        assert same_size(health, "learning", "no learning signal\nstale 3")


def test_run_says_it_starts_the_engine_and_attach_that_it_reads_the_store(tmp_path):
    """`run`'s session starts the engine (its run is not stored yet); `attach` follows a
    stored run another process runs."""
    from tinker_tui.app.store_session import StoreSession

    starting = StoreSession(tmp_path / "runs.db", run_id="run-0001", follow=True)
    assert TinkerTuiApp(starting).state.phase_text().startswith("starting the engine… ")
    db = tmp_path / "show.db"
    from test_show import write_run

    from tinker_tui.engine.store import find_run

    write_run(db)
    attached = StoreSession(db, asyncio.run(find_run(db, None)), follow=True)
    assert TinkerTuiApp(attached).state.phase_text().startswith("reading the run store… ")


@pytest.mark.parametrize("height", [18, 21, 23])
async def test_the_reward_chart_keeps_room_at_the_smallest_heights(height):
    """At 60x18 (the smallest size the views take) the reward pane had only its borders:
    the panes above and below kept their usual rows."""
    from tinker_tui.app.widgets.step_chart import MIN_PLOT_ROWS

    app = make_app()
    async with app.run_test(size=(60 if height == 18 else 80, height)) as pilot:
        await settled(pilot)
        chart = app.screen.query_one("#rewards")
        assert chart.content_region.height >= 3 + (height - 18) // 2, chart.content_region
        # rows to plot in, not only axes and labels (at 60x18 it had none)
        rewards = app.screen.query_one(RewardsChart)
        await until(lambda: rewards._plot_rows() >= MIN_PLOT_ROWS, pilot)
        assert rewards.margin_bottom == (0 if height == 18 else 1)  # step labels gave way
        verdict = app.screen.query_one(ThroughputPanel).query_one("#verdict")
        assert verdict.region.height >= 1  # the verdict still shows (the idle line gives way)
