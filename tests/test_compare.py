"""`tinker-tui compare`: which runs a command line names, the table of what differs, the
comparison view (snapshots), and the run list of a dashboard that opens it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from compared_runs import RUNS, store_runs
from textual.pilot import Pilot

from tinker_tui.app.cli import main as cli_main
from tinker_tui.app.compare import (
    differing_settings,
    format_comparison,
    load_comparison,
    open_comparison,
    resolve_runs,
)
from tinker_tui.app.screens.compare import CompareApp, CompareScreen
from tinker_tui.engine.errors import UsageError


@pytest.fixture(scope="module")
def five(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("compare") / "runs.db"
    store_runs(path, [0, 1, 2, 3, 4])
    return path


@pytest.fixture
def other(tmp_path) -> Path:
    path = tmp_path / "other.db"
    store_runs(path, [0])  # the same id in a second store
    return path


async def test_runs_are_named_by_id_prefix_or_across_stores(five, other):
    pairs = await resolve_runs([five], ["run-lr1e-3", "run-g1"])
    assert [r.run_id for _, r in pairs] == ["run-lr1e-3", "run-g16"]
    with pytest.raises(UsageError, match="matches several runs"):
        await resolve_runs([five], ["run-lr", "run-g4"])
    with pytest.raises(UsageError, match="no run 'nope'"):
        await resolve_runs([five], ["nope", "run-g4"])
    with pytest.raises(UsageError, match="at least two runs"):
        await resolve_runs([five], ["run-g4", "run-g4"])
    pairs = await resolve_runs([five, other], ["run-g4", "run-lr3"])
    assert {p for p, _ in pairs} == {five}


async def test_the_table_names_what_differs_and_how_each_run_went(five):
    pairs = await resolve_runs([five], [r[0] for r in RUNS])
    runs = await load_comparison(pairs)
    assert differing_settings(runs) == ["learning_rate", "group_size"]  # not the W&B ids
    text = format_comparison(runs, now=0.0)
    lines = text.splitlines()
    assert lines[0].split() == [
        "RUN",
        "STATUS",
        "STEP",
        "FINAL",
        "BEST",
        "DURATION",
        "learning_rate",
        "group_size",
    ]
    by_name = {line.split("  ")[0]: line for line in lines[1:]}
    assert by_name["lr 1e-3"].split()[2:4] == ["completed", "12/12"]
    assert by_name["run-lr1e-2"].split()[1:3] == ["failed", "7/12"]
    assert by_name["group 16"].split()[2] == "interrupted"  # no end stored, no process
    assert by_name["run-lr1e-2"].split()[-2:] == ["0.01", "8"]
    assert by_name["group 16"].split()[-2:] == ["0.003", "16"]
    # the failing run's best reward came before it fell
    best = runs[2].state.rewards
    assert by_name["run-lr1e-2"].split()[3] == f"{best[-1][1]:.3f}"  # FINAL
    assert max(v for _, v in best) > best[-1][1]


def test_compare_headless_prints_the_table(five, capsys):
    code = cli_main(["compare", "run-lr1e-3", "run-lr3", "--db", str(five), "--no-ui"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[0].split()[-1] == "learning_rate"
    assert "lr 1e-3" in out and "lr 3e-3" in out


def test_compare_of_one_run_is_a_usage_error(five, capsys):
    assert cli_main(["compare", "run-g4", "--db", str(five), "--no-ui"]) == 2
    assert "at least two runs" in capsys.readouterr().err


# ------------------------------------------------------------------ the view


def compare_app(path: Path, ids: list[str], pairs: list | None = None) -> CompareApp:
    pairs = pairs if pairs is not None else asyncio.run(resolve_runs([path], ids))
    app = CompareApp(open_comparison(pairs), clock=lambda: 0.0)
    app.animation_level = "none"
    return app


async def drawn(pilot: Pilot) -> None:
    """Until every run is read and every chart is mounted and drawn."""
    app = pilot.app
    for _ in range(200):
        await pilot.pause(0.05)
        screen = app.screen
        if (
            isinstance(screen, CompareScreen)
            and all(r.session.loaded.is_set() for r in screen.runs)
            and screen._keys
            and not screen.pending
        ):
            break
    screen = app.screen
    assert isinstance(screen, CompareScreen)
    screen.refresh_compare()
    await pilot.pause(0.1)
    screen.refresh_compare()
    await pilot.pause()


TWO = [RUNS[0][0], RUNS[1][0]]
FIVE = [r[0] for r in RUNS]


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
@pytest.mark.parametrize("ids", [TWO, FIVE], ids=["2runs", "5runs"])
def test_snapshot_compare(snap_compare, five, ids, size):
    assert snap_compare(compare_app(five, ids), terminal_size=size, run_before=drawn)


def test_snapshot_compare_by_tokens_on_a_log_scale_last_steps(snap_compare, five):
    async def keys(pilot: Pilot) -> None:
        await drawn(pilot)
        await pilot.press("x", "x", "l", "z")
        pilot.app.clear_notifications()  # no toasts in a snapshot
        await drawn(pilot)

    assert snap_compare(compare_app(five, FIVE[:3]), terminal_size=(120, 36), run_before=keys)


async def test_compare_charts_draw_a_line_per_run_and_q_leaves(five):
    app = compare_app(five, FIVE, await resolve_runs([five], FIVE))
    async with app.run_test(size=(160, 48)) as pilot:
        await drawn(pilot)
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        chart = next(c for c in screen.charts() if c.key == "reward/mean")
        assert len(chart.states) == 5
        subtitle = str(chart.border_subtitle)
        assert subtitle.count("━") == 5
        await pilot.press("s")  # smoothing applies to every run
        assert {m.ema_beta for m in chart.states} == {screen.states[0].ema_beta}
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


# ------------------------------------------------------------------ from a dashboard


@pytest.fixture
def three(tmp_path) -> Path:
    path = tmp_path / "runs.db"
    store_runs(path, [0, 1, 3])
    return path


async def test_a_dashboard_lists_the_store_marks_runs_compares_and_names_its_run(three):
    from tinker_tui.app.screens.run_list import RunListScreen
    from tinker_tui.app.store_session import StoreSession
    from tinker_tui.app.tui import TinkerTuiApp
    from tinker_tui.engine.store import StoreReader, find_run

    path = three
    run = await find_run(path, "run-lr1e-3")
    app = TinkerTuiApp(StoreSession(path, run), refresh_interval=0.05)
    async with app.run_test(size=(120, 36)) as pilot:
        await asyncio.wait_for(app.session.loaded.wait(), timeout=10)
        await pilot.press("R")
        await pilot.pause(0.3)
        assert isinstance(app.screen, RunListScreen)
        assert app.screen.marked == {"run-lr1e-3"}  # its own run, marked
        app.screen.query_one("DataTable").move_cursor(row=0)  # newest first: run-g4
        await pilot.press("space", "c")
        await pilot.pause(0.3)
        assert isinstance(app.screen, CompareScreen)
        assert sorted(r.run.run_id for r in app.screen.runs) == ["run-g4", "run-lr1e-3"]
        await pilot.press("p")  # a comparison does not pass the dashboard's keys on
        await pilot.press("escape", "escape")
        await pilot.pause(0.2)
        # name the dashboard's run: a name, then a note
        await pilot.press("n")
        await pilot.pause(0.2)
        await pilot.press(*"baseline", "enter")  # replaces the name shown
        await pilot.pause(0.3)
        await pilot.press(*"first", "space", *"try", "enter")
        for _ in range(40):
            await pilot.pause(0.05)
            if app.state.run_name == "baseline":
                break
        assert (app.state.run_name, app.state.note) == ("baseline", "first try")
    async with await StoreReader.open_readonly(path) as store:
        stored = await store.run("run-lr1e-3")
    assert stored is not None and (stored.run_name, stored.note) == ("baseline", "first try")


async def test_the_run_lists_own_run_is_told_apart_from_the_cursor(three):
    """The pre-marked current run looked like the cursor: the first `space` unmarked it."""
    from tinker_tui.app.screens.run_list import RunListScreen
    from tinker_tui.app.store_session import StoreSession
    from tinker_tui.app.tui import TinkerTuiApp
    from tinker_tui.engine.store import find_run

    run = await find_run(three, "run-g4")  # the newest: the first row
    app = TinkerTuiApp(StoreSession(three, run), refresh_interval=0.05)
    async with app.run_test(size=(120, 36)) as pilot:
        await asyncio.wait_for(app.session.loaded.wait(), timeout=10)
        await pilot.press("R")
        await pilot.pause(0.3)
        screen = app.screen
        assert isinstance(screen, RunListScreen)
        table = screen.query_one("DataTable")
        assert screen.highlighted() != "run-g4"  # the cursor starts on another run
        own = table.get_row("run-g4")[0]
        assert "this run" in str(own), own
        await pilot.press("space")
        await pilot.pause(0.1)
        assert len(screen.marked) == 2 and "run-g4" in screen.marked
