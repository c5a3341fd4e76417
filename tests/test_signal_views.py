"""The signals view (5: distributions, funnel, timeline) and the scenarios view (6: the
board), drawn by `show` from a stored run; their maths on known inputs."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
from pathlib import Path

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")

import pytest
from fake_session import scripted_events, wait_for_charts
from textual.pilot import Pilot

from tinker_tui.app.dashboard_rows import GroupRecord
from tinker_tui.app.signal_maths import (
    classify,
    histogram_line,
    pass_line,
    scenario_board,
    sorted_board,
    step_funnel,
    timeline,
)
from tinker_tui.app.store_session import StoreSession
from tinker_tui.app.tui import TinkerTuiApp
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.events import (
    GroupDiscarded,
    GroupSampled,
    GroupStarted,
    RunFinished,
    StepTrained,
    TrajectorySummary,
)
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.rollouts.distributions import histogram
from tinker_tui.engine.store import GroupSpan, RunStore, find_run


def summary(reward, truncated=False, advantage=None):
    return TrajectorySummary(
        reward=reward, policy_version=0, num_tokens=3, truncated=truncated, advantage=advantage
    )


def record(group_id, scenario, rewards, step, discarded=None, truncated=0, failed=0):
    return GroupRecord(
        group_id=group_id,
        scenario_id=scenario,
        step=step,
        policy_version=0,
        time=0.0,
        trajectories=tuple(summary(r, truncated=i < truncated) for i, r in enumerate(rewards)),
        discarded=discarded,
        failed=failed,
    )


# ---------------------------------------------------------------------- maths


def test_a_steps_funnel_counts_each_fate():
    groups = [
        record(1, "a", [1, 0], 3),
        record(2, "a", [1, 1], 3, "zero_variance"),
        record(3, "b", [0, 1], 3, "stale", truncated=1),
        record(4, "b", [], 3, "error"),
        record(5, "c", [0, 1], 3, truncated=2, failed=1),
    ]
    f = step_funnel(groups, 3)
    assert (f.groups, f.stale, f.no_signal, f.failed, f.trained) == (5, 1, 1, 1, 2)
    assert (f.rollouts, f.truncated, f.dropped_members) == (8, 3, 1)


def test_the_board_classes_scenarios_by_their_pass_rate():
    groups = [
        record(1, "never", [0, 0], 1),
        record(2, "never", [0, 0], 2),
        record(3, "always", [1, 1], 1, "zero_variance"),
        record(4, "mixed", [1, 0], 1),
        record(5, "mixed", [0, 0], 2),
        record(6, "mostly", [1, 1, 1, 1, 1, 0], 2),
        record(7, "late", [0.5, 0.5], None),
    ]  # still waiting: no step yet
    assert pass_line(groups) == 1
    board = {row.scenario_id: row for row in scenario_board(groups)}
    assert board["never"].kind == "never solved" and board["never"].drawn == 2
    assert board["always"].kind == "always solved" and board["always"].no_signal == 1
    assert board["mixed"].pass_rate == 0.25 and board["mixed"].kind == "high variance"
    assert board["mixed"].trend == [0.5, 0.0]
    assert board["mostly"].kind == "mostly solved"
    assert board["late"].kind == "never solved" and board["late"].trend == []
    assert [r.scenario_id for r in sorted_board(list(board.values()), "pass rate")][:2] == [
        "always",
        "mostly",
    ]
    assert sorted_board(list(board.values()), "drawn")[0].scenario_id == "mixed"
    assert classify(math.nan) == "no rollouts" and classify(0.1) == "mostly failed"
    assert pass_line([record(1, "a", [0, -1], 1)]) is None  # no rollout rewarded


def test_histogram_line_scales_to_the_fullest_bin():
    assert histogram_line(histogram([0, 0, 0, 0, 1], bins=3)) == "█ ▂"
    assert histogram_line({"counts": [0, 0]}) == ""


def test_the_timeline_places_each_phase_in_time():
    spans = [
        GroupSpan(1, "a", "trained", 0, 1, 1, "", 0.0, 5.0, 10.0),
        GroupSpan(2, "b", "discarded", 1, 2, 1, "stale", 5.0, 10.0, 10.0),
        GroupSpan(3, "c", "started", 2, None, None, "", 10.0, None, None),
    ]
    rows, t0, t1 = timeline(spans, 11)
    assert (t0, t1) == (0.0, 10.0)
    first = rows[0].segments
    assert first[0][:3] == (0, 5, "━") and first[1][:3] == (6, 10, "┄")
    assert first[2][:3] == (10, 10, "█")
    assert rows[1].segments[-1][2] == "✗" and rows[1].end == "stale"
    assert rows[2].segments[0][:2] == (10, 10) and rows[2].label == "g3 v2"


# ---------------------------------------------------------------------- the views


def signal_events(clock: FakeClock) -> list:
    """The fake session's script with what a run of this version records besides: four
    scenario ids drawn again and again, each rollout's advantage and truncation, each step's
    distributions, two reward components and its histograms."""
    out = []
    groups: dict[int, GroupSampled] = {}
    for event in scripted_events(clock):
        if isinstance(event, GroupStarted | GroupSampled | GroupDiscarded):
            event = dataclasses.replace(event, scenario_id=event.scenario_id.split("-")[0])
        if isinstance(event, GroupSampled):
            mean = event.reward_mean
            members = tuple(
                dataclasses.replace(
                    t, advantage=t.reward - mean, truncated=i == 0 and event.group_id % 3 == 0
                )
                for i, t in enumerate(event.trajectories)
            )
            event = dataclasses.replace(event, trajectories=members)
            groups[event.group_id] = event
        if isinstance(event, StepTrained):
            members = [t for g in event.group_ids if g in groups for t in groups[g].trajectories]
            metrics = dict(event.metrics)
            lengths = sorted(t.num_tokens for t in members) or [0]
            metrics.update(
                {
                    keys.ZERO_VARIANCE_FRAC: 0.5 if event.step in (7, 18) else 0.0,
                    keys.TRUNCATED_FRAC: sum(t.truncated for t in members) / max(1, len(members)),
                    keys.RESPONSE_LEN_MEAN: sum(lengths) / len(lengths),
                    keys.RESPONSE_LEN_P50: float(lengths[len(lengths) // 2]),
                    keys.RESPONSE_LEN_P90: float(lengths[-1]),
                    keys.RESPONSE_LEN_MAX: float(lengths[-1]),
                    "reward/component/format": 1.0,
                    "reward/component/format/std": 0.0,
                    "reward/component/answer": event.metrics[keys.REWARD_MEAN],
                    "reward/component/answer/std": 0.4,
                }
            )
            event = dataclasses.replace(
                event,
                metrics=metrics,
                histograms={
                    "reward": histogram(t.reward for t in members),
                    "advantage": histogram(t.advantage for t in members),
                },
            )
        out.append(event)
    return out


@pytest.fixture(scope="module")
def signal_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("signals") / "runs.db"
    clock = FakeClock(1000.0)
    events = signal_events(clock)
    clock.advance(1.0)
    events.append(RunFinished(time=clock.now(), status="completed", final_step=20))

    async def store_all() -> None:
        store = await RunStore.open(path)
        for event in events:
            store.handle(event)
        await store.close()

    asyncio.run(store_all())
    return path


def show_app(path: Path, run=None) -> TinkerTuiApp:
    run = run if run is not None else asyncio.run(find_run(path, None))
    app = TinkerTuiApp(StoreSession(path, run), refresh_interval=0.05)
    app.animation_level = "none"
    return app


async def loaded(pilot: Pilot) -> None:
    app = pilot.app
    await asyncio.wait_for(app.session.loaded.wait(), timeout=10)
    await wait_for_charts(pilot)
    app.refresh_panes()
    await pilot.pause()


async def on_signals(pilot: Pilot) -> None:
    await loaded(pilot)
    await pilot.press("5")
    screen = pilot.app.screen
    for _ in range(200):
        if getattr(screen, "spans", None) is not None:
            break
        await pilot.pause(0.02)
    assert screen.spans, "the timeline was not read from the store"
    if pilot.app.size.width < 100:  # step 18: a group without signal in the funnel
        await pilot.press("left_square_bracket", "left_square_bracket")
    pilot.app.refresh_panes()
    await pilot.pause()


async def on_scenarios(pilot: Pilot) -> None:
    await loaded(pilot)
    await pilot.press("6")
    pilot.app.refresh_panes()
    await pilot.pause()


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_snapshot_signals_view(snap_compare, signal_store, size):
    assert snap_compare(show_app(signal_store), terminal_size=size, run_before=on_signals)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_snapshot_scenarios_view(snap_compare, signal_store, size):
    assert snap_compare(show_app(signal_store), terminal_size=size, run_before=on_scenarios)


async def test_the_signals_view_steps_back_and_the_board_opens_rollouts(signal_store):
    from tinker_tui.app.screens.rollouts import RolloutsScreen
    from tinker_tui.app.screens.signals import SignalsScreen
    from tinker_tui.app.widgets.signals import DistributionsPanel, FunnelPanel

    app = show_app(signal_store, await find_run(signal_store, None))
    async with app.run_test(size=(120, 36)) as pilot:
        await loaded(pilot)
        await pilot.press("5")
        screen = app.screen
        assert isinstance(screen, SignalsScreen)
        assert screen.shown_step(app.state) == 20
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert screen.shown_step(app.state) == 18
        funnel = str(screen.query_one(FunnelPanel).render())
        assert "no signal" in funnel and "step 18" in str(
            screen.query_one(FunnelPanel).border_subtitle
        )
        text = str(screen.query_one(DistributionsPanel).render())
        assert "answer dominates" in text and "50%" in text  # half its groups: no signal
        await pilot.press("end")
        assert screen.shown_step(app.state) == 20
        await pilot.press("6")
        await pilot.pause()
        app.refresh_panes()
        await pilot.pause()
        board = app.screen.query_one("#scenario-board")
        assert board.row_count == 4
        first = board.coordinate_to_cell_key(board.cursor_coordinate).row_key.value
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, RolloutsScreen)
        assert app.screen.query_one("#rollout-filter").value == f"scenario:{first}"
