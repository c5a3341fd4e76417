"""`tinker-tui sweep`: the grid, the scheduler (fake engines: how many at once, what a
resume runs again), and a whole sweep of four small runs on the embedded backend, headless,
two of which fail."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tinker_tui.app.cli import main as cli_main
from tinker_tui.app.sweep import (
    SweepScheduler,
    combinations,
    default_parallel,
    parse_grid,
)
from tinker_tui.engine.errors import UsageError
from tinker_tui.engine.events import RunFinished, RunStarted
from tinker_tui.engine.store import RunStore, StoreReader
from tinker_tui.engine.store.records import StoredSweep, SweepRun, record_sweep


def test_the_grid_names_settings_and_makes_every_combination():
    grid = parse_grid(["learning-rate=1e-3,3e-3", "group_size=4,8,16"])
    assert grid == {"learning_rate": ["1e-3", "3e-3"], "group_size": ["4", "8", "16"]}
    combos = combinations(grid)
    assert len(combos) == 6 and combos[1] == {"learning_rate": "1e-3", "group_size": "8"}
    with pytest.raises(UsageError, match="did you mean 'learning_rate'"):
        parse_grid(["learning_rat=1"])
    with pytest.raises(UsageError, match="given twice"):
        parse_grid(["seed=1", "seed=2"])
    with pytest.raises(UsageError, match="every value"):
        parse_grid(["seed=1,"])
    with pytest.raises(UsageError, match="NAME=V1"):
        parse_grid(["seed"])


def test_a_bad_grid_value_is_a_grid_error_not_a_run_flags():
    """`--grid learning_rate=1e-3,abc` was reported as `run --learning-rate`'s error."""
    with pytest.raises(
        UsageError,
        match=r"^--grid learning_rate: learning_rate must be a "
        r"number, got 'abc'",
    ):
        parse_grid(["learning_rate=1e-3,abc"])
    with pytest.raises(UsageError, match=r"^--grid group_size: group_size must be a whole"):
        parse_grid(["group_size=4,4.5"])
    with pytest.raises(UsageError, match=r"^--grid advantage: advantage must be"):
        parse_grid(["advantage=mean,meen"])


def test_parallel_by_default_fits_the_machine():
    assert default_parallel("local", cpus=2) == 1
    assert default_parallel("local", cpus=8) == 4
    assert default_parallel("tinker", cpus=2) == 4


def test_a_bad_value_stops_the_sweep_before_anything_starts(tmp_path, capsys):
    db = tmp_path / "runs.db"
    code = cli_main(
        ["sweep", "example", "--grid", "learning_rate=1e-3,-1", "--no-ui", "--db", str(db)]
    )
    assert code == 2
    err = capsys.readouterr().err
    # checked as the grid is read: the grid's error, not a run's flag's
    assert err.startswith("tinker-tui: error: --grid learning_rate: learning_rate must be "), err
    assert not db.exists()


class FakeEngine:
    """An engine that ends after `polls` looks, with `code`; counts those alive at once."""

    alive = 0
    most = 0

    def __init__(self, argv: list[str], polls: int = 2, code: int = 0) -> None:
        self.argv, self.polls, self.code = argv, polls, code
        self.log_path = None
        self.started = False

    async def start(self) -> None:
        self.started = True
        FakeEngine.alive += 1
        FakeEngine.most = max(FakeEngine.most, FakeEngine.alive)

    def exit_code(self) -> int | None:
        self.polls -= 1
        if self.polls > 0:
            return None
        if self.polls == 0:
            FakeEngine.alive -= 1
        return self.code

    def send_signal(self, signum: int) -> bool:
        self.polls = 1
        return True


async def recorded_sweep(path: Path, n: int) -> StoredSweep:
    store = await RunStore.open(path, start=False)
    await store.close()
    sweep = StoredSweep(
        sweep_id="sweep-1",
        task="yes_no_maybe",
        task_spec="example",
        grid={"seed": [str(i) for i in range(n)]},
        run_args=["--steps", "2"],
        parallel=2,
        created_at=1.0,
        runs=tuple(SweepRun("sweep-1", i, f"run-{i}", {"seed": i}) for i in range(n)),
    )
    record_sweep(path, sweep)
    return sweep


async def test_the_scheduler_keeps_n_going_and_a_failure_stops_none(tmp_path):
    path = tmp_path / "runs.db"
    sweep = await recorded_sweep(path, 5)
    FakeEngine.alive = FakeEngine.most = 0
    made: list[list[str]] = []

    def engine(argv: list[str], run_id: str) -> FakeEngine:
        made.append(argv)
        return FakeEngine(argv, polls=2 + len(made) % 3, code=1 if run_id == "run-1" else 0)

    ended = []
    runs = await SweepScheduler(
        path, sweep, 2, on_end=ended.append, poll_interval=0, start_engine=engine
    ).run()
    assert FakeEngine.most == 2 and len(made) == 5
    # no run stored a row here: an engine that ended 0 without one still did not complete
    assert {r.status for r in runs.values()} == {"failed"}
    assert sorted(r.idx for r in ended) == [0, 1, 2, 3, 4]
    assert made[0][:2] == ["run", "example"] and "--seed" in made[0]
    assert made[0][made[0].index("--name") + 1] == "seed=0"
    async with await StoreReader.open_readonly(path) as store:
        stored = await store.find_sweep("sweep")
    assert [r.status for r in stored.runs] == ["failed"] * 5
    assert stored.runs[1].exit_code == 1


async def test_resuming_runs_again_only_what_did_not_complete(tmp_path):
    path = tmp_path / "runs.db"
    sweep = await recorded_sweep(path, 3)
    store = await RunStore.open(path)  # run-0 completed; run-1 started, then its process died
    for run_id in ("run-0", "run-1"):
        store.handle(
            RunStarted(
                time=1.0,
                run_id=run_id,
                name="yes_no_maybe",
                backend="local",
                base_model="m",
                max_steps=2,
                start_step=0,
            )
        )
        if run_id == "run-0":
            store.handle(RunFinished(time=2.0, status="completed", final_step=2))
    await store.close()
    made: list[list[str]] = []

    def engine(argv: list[str], run_id: str) -> FakeEngine:
        made.append(argv)
        return FakeEngine(argv)

    runs = await SweepScheduler(path, sweep, 2, poll_interval=0, start_engine=engine).run()
    assert runs[0].status == "completed" and len(made) == 2
    assert made[0] == ["run", "example", "--resume", "run-1", "--db", str(path)]
    assert "--resume" not in made[1] and "--seed" in made[1]  # never started: starts


@pytest.mark.e2e  # the sweep's scheduler starts each run's process
def test_a_sweep_of_four_small_runs_headless_two_fail_the_rest_complete(tmp_path, capsys):
    """Four real runs on the embedded backend, one at a time; the two with a renderer the
    model cannot use fail at start-up, and the sweep goes on; then --resume runs again
    only those two (they fail again)."""
    db = tmp_path / "runs.db"
    os.environ["OMP_NUM_THREADS"] = "1"
    code = cli_main(
        [
            "sweep",
            "example",
            "--grid",
            "renderer=role_colon,nope",
            "--grid",
            "learning_rate=3e-3,1e-2",
            "--steps",
            "2",
            "--warmup-steps",
            "5",
            "--parallel",
            "1",
            "--no-ui",
            "--db",
            str(db),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1, out
    lines = out.splitlines()
    assert lines[0].startswith("sweep sweep-") and "4 runs of yes_no_maybe" in lines[0]
    ended = [line for line in lines if line.startswith("[")]
    assert len(ended) == 4
    assert [line.split(": ")[1].split(" ")[0] for line in ended] == [
        "completed",
        "completed",
        "failed",
        "failed",
    ]
    assert "renderer 'nope'" in ended[2]
    assert "2 completed, 2 failed" in out and "sweep --resume" in out
    table = [line for line in lines if line.startswith("renderer=")]
    assert len(table) == 4 and all("2/2" in line for line in table[:2])

    async def stored() -> list:
        async with await StoreReader.open_readonly(db) as store:
            return [await store.find_sweep(None), await store.runs()]

    sweep, runs = asyncio.run(stored())
    assert {r.run_id for r in sweep.runs} == {r.run_id for r in runs}  # each its own run
    assert [r.status for r in sweep.runs] == ["completed", "completed", "failed", "failed"]
    assert {r.run_name for r in runs} >= {"renderer=role_colon learning_rate=0.003"}

    code = cli_main(["sweep", "--resume", sweep.sweep_id[:12], "--no-ui", "--db", str(db)])
    out = capsys.readouterr().out
    assert code == 1 and "2 to run" in out
    assert len([line for line in out.splitlines() if line.startswith("[")]) == 2


# ------------------------------------------------------------------ the sweep's dashboard


@pytest.fixture
def swept(tmp_path) -> tuple[Path, str]:
    """A sweep of the five stored runs of `compared_runs` (one pending: no row yet)."""
    from compared_runs import RUNS, store_runs

    path = tmp_path / "runs.db"
    store_runs(path, [0, 1, 2, 3])
    sweep = StoredSweep(
        sweep_id="sweep-20261201-120000-ab12",
        task="yes_no_maybe",
        task_spec="example",
        grid={"learning_rate": ["1e-3", "3e-3", "1e-2"]},
        run_args=[],
        parallel=1,
        created_at=1.0,
        runs=tuple(
            SweepRun(
                "sweep-20261201-120000-ab12",
                i,
                RUNS[i][0],
                {"learning_rate": RUNS[i][2], "group_size": RUNS[i][3]},
                status=RUNS[i][4] if i < 4 else "pending",
            )
            for i in range(5)
        ),
    )
    record_sweep(path, sweep)
    return path, sweep.sweep_id


def test_snapshot_sweep_view(snap_compare, swept):
    from tinker_tui.app.screens.sweep import SweepApp, SweepScreen

    path, sweep_id = swept

    async def loaded(pilot) -> None:
        for _ in range(100):
            await pilot.pause(0.05)
            screen = pilot.app.screen
            if (
                isinstance(screen, SweepScreen)
                and screen._rows
                and all(c.session.loaded.is_set() for c in screen.compared.values())
                and len(screen.compared) == 4
            ):
                break
        await pilot.app.screen.reload()
        await pilot.pause()

    app = SweepApp(path, sweep_id, clock=lambda: 0.0)
    app.animation_level = "none"
    assert snap_compare(app, terminal_size=(100, 20), run_before=loaded)


async def test_the_sweep_view_compares_the_marked_runs(swept):
    from tinker_tui.app.screens.compare import CompareScreen
    from tinker_tui.app.screens.sweep import SweepApp, SweepScreen

    path, sweep_id = swept
    app = SweepApp(path, sweep_id)
    async with app.run_test(size=(120, 30)) as pilot:
        for _ in range(100):
            await pilot.pause(0.05)
            if isinstance(app.screen, SweepScreen) and len(app.screen.compared) == 4:
                break
        await pilot.press("space", "down", "down", "space", "c")
        await pilot.pause(0.2)
        assert isinstance(app.screen, CompareScreen)
        assert [r.run.run_id for r in app.screen.runs] == ["run-lr1e-3", "run-lr1e-2"]
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, SweepScreen)


def test_sweep_rows_share_one_sparkline_scale_and_a_finished_sweep_marks_its_best():
    """Each row's sparkline was scaled to its own range: a flat 0.1 run and a flat 0.9 run
    drew the same bars."""
    from tinker_tui.app.screens.sweep import best_row
    from tinker_tui.app.view_maths import text_sparkline

    assert text_sparkline([0.1, 0.1], 4, (0.0, 1.0)) != text_sparkline([0.9, 0.9], 4, (0.0, 1.0))
    assert text_sparkline([0.0, 1.0], 4, (0.0, 1.0)) == "▁█"
    rows = [
        ["", "1", "lr=1", "completed", "5/5", "", "0.250", ""],
        ["", "2", "lr=2", "completed", "5/5", "", "0.750", ""],
        ["", "3", "lr=3", "failed", "2/5", "", "-", ""],
    ]
    assert best_row(rows) == 1
    assert best_row([["", "1", "x", "failed", "-", "", "-", ""]]) is None
