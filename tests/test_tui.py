"""The Textual app: snapshots of the dashboard and a pilot test for every key."""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")  # before Textual reads it, if first

import pytest
from fake_session import FakeSession
from textual.pilot import Pilot
from textual.widgets._footer import FooterKey

from app.tui import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, TinkerTuiApp
from app.widgets.checkpoints import CheckpointsTable
from app.widgets.status_bar import RunStatusPanel


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


async def until(predicate, pilot: Pilot, timeout: float = 2.0) -> None:
    """Let the app run until `predicate()` holds (the panes redraw on a timer)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.02)


# ------------------------------------------------------------------ snapshots


def test_snapshot_80x24(snap_compare):
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=settled)


def test_snapshot_160x48(snap_compare):
    assert snap_compare(make_app(), terminal_size=(160, 48), run_before=settled)


def test_snapshot_paused_with_reason(snap_compare):
    async def paused(pilot: Pilot) -> None:
        await settled(pilot)
        pilot.app.session.control.pause("eval running (3/10)")
        await settled(pilot)

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=paused)


# ------------------------------------------------------------------ keys


async def test_p_pauses_and_resumes_and_the_footer_follows():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        control = app.session.control
        assert "Pause" in footer_labels(app)

        await pilot.press("p")
        await pilot.pause()
        assert control.call_names() == ["pause"]
        assert control.paused
        assert "Resume" in footer_labels(app) and "Pause" not in footer_labels(app)
        await until(lambda: app.model.state == "paused", pilot)
        badge = app.screen.query_one(RunStatusPanel).query_one("#state-badge")
        await until(lambda: str(badge.render()).startswith("PAUSED"), pilot)

        await pilot.press("p")
        await pilot.pause()
        assert control.call_names() == ["pause", "resume"]
        assert not control.paused
        assert "Pause" in footer_labels(app) and "Resume" not in footer_labels(app)
        assert app.model.state == "running"


async def test_c_requests_a_checkpoint_and_the_table_gains_a_row():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        table = app.screen.query_one(CheckpointsTable)
        assert table.row_count == 2

        await pilot.press("c")
        assert app.session.control.call_names() == ["request_checkpoint"]
        await until(lambda: table.row_count == 3, pilot)  # redrawn by the timer
        newest = table.get_row_at(0)
        assert newest[:3] == ["20", "state", "manual-000020"]


async def test_q_stops_gracefully_and_exits_0():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await pilot.press("q")
        await pilot.pause()
    assert app.session.control.call_names() == ["stop"]
    assert app.return_code == EXIT_OK
    assert app.run_status == "stopped"
    assert app.run_error is None
    assert app.model.state == "finished"


async def test_ctrl_c_stops_gracefully_too():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.session.control.call_names() == ["stop"]
    assert app.return_code == EXIT_OK
    assert app.run_status == "stopped"


async def test_second_q_while_stopping_exits_at_once():
    app = make_app(FakeSession(finish_on_stop=False))
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await pilot.press("q")
        await pilot.pause()
        assert app.stopping and app.is_running
        labels = footer_labels(app)
        assert "Force quit" in labels and "Quit" not in labels
        assert "Pause" not in labels
        await pilot.press("q")
        await pilot.pause()
    assert app.session.control.call_names() == ["stop"]
    assert app.return_code == EXIT_INTERRUPTED
    assert app.run_status is None


async def test_ctrl_q_exits_immediately():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await pilot.press("ctrl+q")
        await pilot.pause()
    assert app.session.control.call_names() == []
    assert app.return_code == EXIT_INTERRUPTED


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
    assert {"pause", "resume", "checkpoint", "stop", "force_quit", "quit"} <= ids


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_every_pane_has_a_border_title(size):
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        panes = list(app.screen.query_one("#panes").children)
        assert len(panes) == 5
        for pane in panes:
            assert pane.border_title, pane
            assert pane.region.width > 0 and pane.region.height > 2, pane
