"""Nothing a user needs is cut at 80x24 or wider: a line that has no room is shortened by
a rule (whole parts dropped, advice left to a key), and a key opens it whole."""

from __future__ import annotations

import os

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")

import pytest
from test_tui import make_app, press, settled, until
from textual.widgets import Label

from tinker_tui.app.screens.text_view import TextScreen
from tinker_tui.app.widgets.checkpoints import CheckpointsTable
from tinker_tui.app.widgets.throughput import ThroughputPanel
from tinker_tui.engine.metrics.throughput import SAMPLER_BOUND


def shown(label: Label) -> str:
    return str(label.render())


@pytest.mark.parametrize("size", [(80, 24), (132, 40)])
async def test_the_throughput_lines_fit_whole_and_enter_opens_them(size):
    """At 132x40: '▶ sampler-bound: add workers or raise' and 'tokens 46k prefill (87%
    cached), 8.5k sa'."""
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        panel = app.screen.query_one(ThroughputPanel)
        width = panel.content_region.width
        verdict = panel.query_one("#verdict", Label)
        await until(lambda: "sampler-bound" in shown(verdict), pilot)
        for line in ("#idle", "#cost", "#verdict"):
            label = panel.query_one(line, Label)
            if label.display:
                text = shown(label)
                assert len(text) <= width and "…" not in text, (line, text, width)
        whole = f"▶ {app.state.throughput.verdict}"
        if len(whole) > width:
            assert shown(verdict) == "▶ sampler-bound · enter: why", shown(verdict)
        panel.focus()
        await press(pilot, "enter")
        assert isinstance(app.screen, TextScreen)
        assert whole in str(app.screen.text)


def test_a_verdict_without_room_keeps_its_headline():
    from tinker_tui.app.widgets.throughput import fit_verdict

    assert fit_verdict(f"▶ {SAMPLER_BOUND}", 80) == f"▶ {SAMPLER_BOUND}"
    assert fit_verdict(f"▶ {SAMPLER_BOUND}", 40) == "▶ sampler-bound · enter: why"
    assert fit_verdict(f"▶ {SAMPLER_BOUND}", 20) == "▶ sampler-bound"
    assert fit_verdict("▶ balanced", 5) == "▶ balanced"
    paused = "⏸ paused: no new rollouts start; 4 in flight finishing"
    assert fit_verdict(paused, 36) == "⏸ paused: no new rollouts start"
    assert fit_verdict(f"▶ {SAMPLER_BOUND}", 36, lines=2) == f"▶ {SAMPLER_BOUND}"


@pytest.mark.parametrize("size", [(80, 24), (132, 40)])
async def test_the_checkpoints_title_fits(size):
    """'6 saved · weights unchanged since ste…': the subtitle keeps its parts whole."""
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        table = app.screen.query_one(CheckpointsTable)
        subtitle = str(table.border_subtitle)
        assert len(subtitle) <= table.region.width - 4, (subtitle, table.region.width)
        assert subtitle.startswith(f"{len(app.state.checkpoints)} saved")


def test_the_checkpoints_subtitle_leaves_out_whole_parts():
    from tinker_tui.app.dashboard_state import DashboardState
    from tinker_tui.app.widgets.checkpoints import subtitle_text
    from tinker_tui.engine.clock import FakeClock
    from tinker_tui.engine.events import CheckpointSaved, StepTrained

    model = DashboardState(FakeClock())
    for step in range(1, 10):  # weights change at step 1 only
        model.apply(StepTrained(time=float(step), step=step, policy_version=1, metrics={}))
    model.apply(
        CheckpointSaved(time=9.0, step=9, name="step-000009", path="/x/step-000009", kind="state")
    )
    assert subtitle_text(model) == "1 saved · weights unchanged since step 1 · enter: path"
    assert subtitle_text(model, 40) == "1 saved · weights unchanged since step 1"
    assert subtitle_text(model, 36) == "1 saved · enter: path"


def test_a_path_without_room_loses_whole_folders_from_its_start():
    """'runs…s/step-000060' read as another name."""
    from tinker_tui.app.view_maths import shorten_path

    path = "/home/me/runs/checkpoints/yes_no_maybe-20261204/step-000060"
    assert shorten_path(path, 80) == path
    assert shorten_path(path, 40) == "…/yes_no_maybe-20261204/step-000060"
    assert shorten_path(path, 18) == "…/step-000060"
    assert len(shorten_path(path, 8)) == 8
    assert shorten_path("tinker://run-1/weights/step-000060", 24) == "…/weights/step-000060"


async def test_a_maximized_log_wraps_its_lines():
    from tinker_tui.app.widgets.log import LogPanel
    from tinker_tui.engine.events import LogEmitted

    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        words = " ".join(f"word{i}" for i in range(30)) + " THE-END"
        app.state.apply(LogEmitted(time=app.clock.now(), level="info", message=words))
        app.refresh_panes()
        await pilot.pause()
        log = app.screen.query_one(LogPanel)
        log.focus()
        app.screen.maximize(log)
        await pilot.pause()
        app.refresh_panes()
        await pilot.pause()
        assert log.has_class("-maximized")
        lines = [line.text for line in log.render_lines(log.content_region.reset_offset)]
        assert any("THE-END" in line for line in lines), lines


@pytest.mark.parametrize("size", [(80, 24), (132, 40)])
async def test_the_log_title_keeps_its_parts_whole(size):
    """At 80x24 it read "all · 18 lines · enter: whole · l…"."""
    from tinker_tui.app.widgets.log import LogPanel

    app = make_app()
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        log = app.screen.query_one(LogPanel)
        subtitle = str(log.border_subtitle)
        assert len(subtitle) <= log.region.width - 6, subtitle
        assert subtitle.endswith(("lines", "enter: whole", "l: level")), subtitle
