"""The reward chart over a long run: markers thinned so the line stays visible."""

from __future__ import annotations

import asyncio
import math
import os

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")

from fake_session import FakeSession, run_started, wait_for_charts
from textual.pilot import Pilot

from tinker_tui.app.tui import TinkerTuiApp
from tinker_tui.app.widgets.rewards import RewardsChart
from tinker_tui.app.widgets.step_chart import MARKER_SPACING, thin_markers
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.events import (
    CheckpointSaved,
    EvalCompleted,
    Event,
    RunStateChanged,
    StepTrained,
)
from tinker_tui.engine.metrics import metric_keys as keys

BRAILLE = range(0x2801, 0x2900)  # a braille cell with at least one dot


def test_thin_markers_keeps_the_newest_of_each_stretch_and_all_of_sparse_ones():
    evals = [(step, 0.5) for step in range(20, 3001, 20)]  # an eval every 20 of 3000 steps
    kept = thin_markers(evals, 1, 3000, columns=67)
    columns = [math.floor((s - 1) / 2999 * 66) for s, _ in kept]
    assert all(b - a >= 1 for a, b in zip(columns, columns[1:], strict=False))
    assert len(kept) <= 67 // MARKER_SPACING + 1 < len(evals)
    assert kept[-1] == (3000, 0.5)  # the newest evaluation always shows
    sparse = [(5, 0.1), (10, 0.2), (15, 0.3), (20, 0.4)]
    assert thin_markers(sparse, 1, 20, columns=67) == sparse


def long_run(steps: int):
    def script(clock: FakeClock) -> list[Event]:
        events: list[Event] = [
            run_started(clock),
            RunStateChanged(time=clock.now(), state="running"),
        ]
        for step in range(1, steps + 1):
            clock.advance(0.5)
            reward = min(1.0, 0.3 + 0.7 * (1 - math.exp(-step / 300)))
            events.append(
                StepTrained(
                    time=clock.now(),
                    step=step,
                    policy_version=step,
                    metrics={keys.REWARD_MEAN: reward},
                )
            )
            if step % 20 == 0:
                events.append(
                    EvalCompleted(
                        time=clock.now(),
                        step=step,
                        policy_version=step,
                        metrics={keys.EVAL_REWARD_MEAN: reward},
                    )
                )
            if step % 10 == 0:
                events.append(
                    CheckpointSaved(
                        time=clock.now(),
                        step=step,
                        kind="state",
                        name=f"step-{step:06d}",
                        path=f"/runs/step-{step:06d}",
                    )
                )
        return events

    return script


async def test_at_thousands_of_steps_the_eval_markers_leave_the_line_visible():
    """An eval every 20 steps over 3000 steps at 80x24 drew a ◆ in every column: the line
    was only ◆. Now at most one in MARKER_SPACING columns has one, and the line shows."""
    session = FakeSession(script=long_run(3000))
    app = TinkerTuiApp(session, clock=session.clock, refresh_interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await asyncio.wait_for(session.script_done.wait(), timeout=20)
        await wait_for_charts(pilot)
        chart = app.screen.query_one(RewardsChart)

        async def drawn(pilot: Pilot) -> list[str]:
            for _ in range(100):
                app.refresh_panes()
                await pilot.pause(0.05)
                rows = ["".join(row) for row in chart.query_one("#plot")._buffer]
                if any("◆" in row for row in rows):
                    return rows
            raise AssertionError("the chart was not drawn")

        rows = await drawn(pilot)
        inner = [row[1:-1] for row in rows[1:-1]]  # inside the axes
        columns = len(inner[0])
        markers = sum(row.count("◆") for row in inner)
        line = {x for row in inner for x, char in enumerate(row) if ord(char) in BRAILLE}
        assert 0 < markers <= columns // MARKER_SPACING + 1, rows
        assert len(line) >= columns - markers - 2, rows  # the line runs across the chart
        rules = {x for row in inner for x, char in enumerate(row) if char == "┊"}
        assert len(rules) <= columns // MARKER_SPACING + 1, rows  # checkpoints thinned too
