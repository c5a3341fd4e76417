"""`show --cookbook DIR` and `compare --cookbook DIR`: a tinker-cookbook run folder, written
here by the cookbook's own writer (`TrainingRunStore`), read through its own reader as our
events, drawn by the same dashboard, followed while it is written."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")

import pytest
from compared_runs import store_runs
from fake_session import wait_for_charts
from textual.pilot import Pilot
from tinker_cookbook.stores import LocalStorage, TrainingRunStore

from tinker_tui.app.cli import main as cli_main
from tinker_tui.app.foreign_session import ForeignSession
from tinker_tui.app.tui import TinkerTuiApp
from tinker_tui.engine.clock import FakeClock, SystemClock
from tinker_tui.engine.events import (
    CheckpointSaved,
    EvalCompleted,
    GroupSampled,
    RunFinished,
    StepTrained,
)
from tinker_tui.engine.foreign.cookbook_run import CookbookRun, mapped_metrics

BATCHES = 8


def write_batch(
    store: TrainingRunStore,
    i: int,
    *,
    rollouts: bool = True,
    batches: int = BATCHES,
    extra: dict | None = None,
) -> None:
    """What the cookbook's RL loop writes for batch `i` (0-based): its rollout summaries,
    its metrics, and a checkpoint every 4 batches (the last one final)."""
    if rollouts:
        store.write_rollouts(
            i,
            [
                {
                    "schema_version": 1,
                    "split": "train",
                    "iteration": i,
                    "group_idx": g,
                    "traj_idx": t,
                    "tags": ["arith"],
                    "sampling_client_step": i,
                    "total_reward": float((g + t + i) % 3 == 0),
                    "final_reward": 0.0,
                    "trajectory_metrics": {"correct": float((g + t) % 2)},
                    "steps": [
                        {
                            "step_idx": 0,
                            "ob_len": 30,
                            "ac_len": 10 + t,
                            "reward": 1.0,
                            "episode_done": True,
                            "metrics": {},
                            "logs": {"answer": str(g + t)},
                        }
                    ],
                    "final_ob_len": 42,
                }
                for g in range(3)
                for t in range(4)
            ],
        )
    store.write_metrics(
        {
            "progress/batch": i,
            "progress/done_frac": (i + 1) / batches,
            "optim/lr": 4e-5,
            "env/all/reward/total": 0.2 + 0.6 * i / batches,
            "env/all/ac_tokens_per_turn": 11.5,
            "env/arith/reward/total": 0.1 + 0.5 * i / batches,
            "optim/entropy": 0.9 - 0.05 * i,
            "optim/kl_sample_train_v1": 0.001 * i,
            "time/total": 2.0 + 0.25 * (i % 2),
            "time/sample": 1.25,
            "note": "text is not a metric",
            **(extra or {}),
        },
        step=i,
    )
    if (i + 1) % 4 == 0:
        store.write_checkpoint(
            {
                "name": f"{i + 1:06d}",
                "batch": i + 1,
                "state_path": f"tinker://run/weights/{i + 1:06d}",
                "sampler_path": f"tinker://run/sampler_weights/{i + 1:06d}",
                **({"final": True} if i + 1 == batches else {}),
            }
        )


def cookbook_folder(
    folder: Path, batches_done: int = BATCHES, *, rollouts: bool = True
) -> TrainingRunStore:
    store = TrainingRunStore(LocalStorage(folder))
    store.write_config(
        {
            "model_name": "Qwen/Qwen3-4B-Instruct-2507",
            "learning_rate": 4e-5,
            "log_path": str(folder),
            "dataset_builder": {"batch_size": 3},
        }
    )
    for i in range(batches_done):
        write_batch(store, i, rollouts=rollouts)
    return store


@pytest.fixture
def finished(tmp_path) -> Path:
    folder = tmp_path / "arith-rl"
    cookbook_folder(folder)
    return folder


# ------------------------------------------------------------------ the events


def test_metrics_map_onto_ours_and_keep_the_rest_under_their_names():
    got = mapped_metrics(
        {
            "step": 3,
            "env/all/reward/total": 0.5,
            "time/total": 2.0,
            "optim/lr": 1e-4,
            "env/math/reward/total": 0.25,
            "flag": True,
            "name": "x",
            "bad": float("nan"),
        }
    )
    assert got == {
        "reward/mean": 0.5,
        "time/step": 2.0,
        "optim/lr": 1e-4,
        "env/math/reward/total": 0.25,
    }


def test_a_finished_folder_reads_as_a_run(finished):
    reader = CookbookRun(finished, FakeClock())
    events = reader.poll()
    started = reader.started
    assert started is not None and started.max_steps == BATCHES
    assert started.base_model == "Qwen/Qwen3-4B-Instruct-2507"
    assert started.config["dataset_builder.batch_size"] == 3
    steps = [e for e in events if isinstance(e, StepTrained)]
    assert [s.step for s in steps] == list(range(1, BATCHES + 1))
    assert steps[-1].metrics["reward/mean"] == pytest.approx(0.2 + 0.6 * 7 / 8)
    # stamped from the records' own durations: replays draw the same
    assert steps[-1].time - started.time == pytest.approx(
        sum(2.0 + 0.25 * (i % 2) for i in range(BATCHES))
    )
    groups = [e for e in events if isinstance(e, GroupSampled)]
    assert len(groups) == 3 * BATCHES and groups[0].num_trajectories == 4
    assert set(steps[0].group_ids) == {g.group_id for g in groups if g.policy_version == 0}
    checkpoints = [e for e in events if isinstance(e, CheckpointSaved)]
    assert [(c.step, c.name, c.kind) for c in checkpoints] == [
        (4, "000004", "state"),
        (8, "000008", "state"),
    ]
    assert isinstance(events[-1], RunFinished) and events[-1].final_step == BATCHES
    assert reader.poll() == []


def test_an_evaluators_numbers_and_rollouts_are_evaluations(tmp_path):
    """rl.train evaluates the weights batch i samples with before training it, merging
    `<name>/...` into batch i's record, and saves the rollouts under the evaluator's label."""
    folder = tmp_path / "with-evals"
    store = cookbook_folder(folder, batches_done=0)
    for i in range(BATCHES):
        if i % 4 == 0:
            store.write_rollouts(
                i,
                [
                    {
                        "split": "eval/test",
                        "iteration": i,
                        "group_idx": g,
                        "traj_idx": 0,
                        "tags": [f"held-out-{g}"],
                        "total_reward": float(g),
                        "steps": [{"step_idx": 0, "ob_len": 20, "ac_len": 5, "reward": 0.0}],
                    }
                    for g in range(2)
                ],
                base_name="eval_test",
            )
        write_batch(
            store, i, extra={"test/env/all/reward/total": 0.5 + i / 100} if i % 4 == 0 else {}
        )
    events = CookbookRun(folder, FakeClock()).poll()
    evals = [e for e in events if isinstance(e, EvalCompleted)]
    assert [(e.step, e.metrics["eval/reward_mean"]) for e in evals] == [(0, 0.5), (4, 0.54)]
    assert "test/env/all/reward/total" in evals[0].metrics
    assert [t.reward for t in evals[1].trajectories] == [0.0, 1.0]
    assert evals[1].scenario_ids == ("held-out-0", "held-out-1")
    steps = [e for e in events if isinstance(e, StepTrained)]
    assert events.index(evals[1]) < events.index(steps[4])  # before the batch it sampled


def test_not_a_cookbook_folder_is_one_line_and_exit_2(tmp_path, capsys):
    assert cli_main(["show", "--cookbook", str(tmp_path), "--no-ui"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a tinker-cookbook run folder" in err and "\n" not in err
    assert cli_main(["show", "latest", "--cookbook", str(tmp_path), "--no-ui"]) == 2
    assert "give no RUN" in capsys.readouterr().err


# ------------------------------------------------------------------ headless


def test_headless_show_prints_the_step_lines_and_how_to_look_again(finished, capsys):
    assert cli_main(["show", "--cookbook", str(finished), "--no-ui"]) == 0
    out = capsys.readouterr().out
    assert "step    8/8  reward 0.725" in out
    assert "checkpoint 000008 (state) at step 8" in out
    assert f"look again: tinker-tui show --cookbook {finished}" in out
    assert "--resume" not in out  # another program trains it


def test_show_json_has_the_steps_and_checkpoints(finished, capsys):
    assert cli_main(["show", "--cookbook", str(finished), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "tinker-tui.show/1" and doc["run"]["status"] == "completed"
    assert len(doc["steps"]) == BATCHES and doc["steps"][0]["metrics"]["reward/mean"] == 0.2
    assert [c["name"] for c in doc["checkpoints"]] == ["000004", "000008"]


# ------------------------------------------------------------------ the dashboard


def watch_app(folder: Path) -> TinkerTuiApp:
    app = TinkerTuiApp(
        ForeignSession(CookbookRun(folder, SystemClock()), poll_interval=0.1), refresh_interval=0.05
    )
    app.animation_level = "none"
    return app


async def loaded(pilot: Pilot) -> None:
    app = pilot.app
    await asyncio.wait_for(app.session.loaded.wait(), timeout=10)
    await wait_for_charts(pilot)
    await pilot.pause()
    app.refresh_panes()
    await pilot.pause()


async def test_a_live_folder_shows_each_new_step_within_a_second(tmp_path):
    folder = tmp_path / "live"
    store = cookbook_folder(folder, batches_done=2)
    app = watch_app(folder)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        assert app.state.step == 2 and app.mode_label == "watching (cookbook)"
        for i in range(2, BATCHES):
            write_batch(store, i)
            wrote = time.monotonic()
            while app.state.step < i + 1:
                assert time.monotonic() - wrote < 1.0, f"step {i + 1} not shown in 1 s"
                await pilot.pause(0.02)
        assert [c.name for c in app.state.checkpoints] == ["000004", "000008"]
        await pilot.press("p", "c", "e")  # nothing to steer from here
        await pilot.pause()
        assert app.state.state == "finished" and app.state.status == "completed"


async def test_watching_refuses_control_and_q_leaves(finished):
    app = watch_app(finished)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        assert app.read_only and app.state.status == "completed"
        footer = {k.description for k in app.screen.query("FooterKey")}
        assert not footer & {"Pause", "Resume", "Checkpoint", "Eval"}
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


def test_snapshot_cookbook_run_80x24(snap_compare, finished):
    assert snap_compare(watch_app(finished), terminal_size=(80, 24), run_before=loaded)


def test_snapshot_cookbook_run_160x48(snap_compare, finished):
    assert snap_compare(watch_app(finished), terminal_size=(160, 48), run_before=loaded)


# ------------------------------------------------------------------ compare


def test_compare_a_cookbook_folder_with_one_of_our_runs(finished, tmp_path, capsys):
    db = tmp_path / "runs.db"
    (ours,) = store_runs(db, [0])
    assert cli_main(["compare", ours, "--cookbook", str(finished), "--db", str(db), "--no-ui"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:6] == ["RUN", "STATUS", "STEP", "FINAL", "BEST", "DURATION"]
    row = next(line for line in out if line.startswith("arith-rl") or line.startswith("cookbook:"))
    assert row.split()[1:4] == ["completed", "8/8", "0.725"]
    assert "backend" in out[0]  # local against cookbook


def test_compare_needs_two_runs_with_folders_counted(finished, capsys):
    assert cli_main(["compare", "--cookbook", str(finished), "--no-ui"]) == 2
    assert "at least two runs" in capsys.readouterr().err


# ------------------------------------------------------------------ the cookbook's own loop


@pytest.mark.e2e  # the cookbook's loop runs `git` to record where it ran
async def test_the_cookbook_rl_loop_is_watched_live_as_it_trains(tmp_path, monkeypatch):
    """The cookbook's rl.train through the Tinker double, watched while it writes: every
    step it records is drawn, its rollouts carry the logtree's conversations, and its final
    checkpoint ends the run."""
    import threading

    from cookbook_toy import QUESTION, train_through
    from tinker_double import API_KEY, TinkerDouble

    monkeypatch.setenv("TINKER_API_KEY", API_KEY)
    folder = tmp_path / "toy-rl"
    folder.mkdir()
    (folder / "metrics.jsonl").touch()  # `show` may be opened before the first step
    with TinkerDouble(tmp_path / "service") as double:
        failed: list[BaseException] = []

        def trains() -> None:
            try:
                train_through(double.base_url, folder)
            except BaseException as error:  # noqa: BLE001  (reported by the test)
                failed.append(error)

        trainer = threading.Thread(target=trains, daemon=True)
        app = watch_app(folder)
        async with app.run_test(size=(120, 40)) as pilot:
            trainer.start()
            seen = set()
            deadline = time.monotonic() + 240
            while app.state.status is None and time.monotonic() < deadline and not failed:
                seen.add(app.state.step)
                await pilot.pause(0.05)
            trainer.join(timeout=60)
            assert not failed, failed
            assert app.state.status == "completed" and app.state.step == 6
            assert len(seen) > 2  # drawn step by step, not at the end only
            records = TrainingRunStore(LocalStorage(folder, mkdir=False)).read_metrics()
            assert [r for _, r in app.state.rewards] == pytest.approx(
                [r["env/all/reward/total"] for r in records]
            )
            group = app.state.groups[app.state.groups.by_step[1][0]]
            assert group.trajectories[0].messages[0]["content"] == QUESTION


@pytest.fixture
def one_of_ours(tmp_path) -> Path:
    db = tmp_path / "runs.db"
    store_runs(db, [0])
    return db


async def test_the_compare_view_draws_a_cookbook_folder_beside_our_run(finished, one_of_ours):
    from tinker_tui.app.compare import foreign_compared, open_comparison, resolve_runs
    from tinker_tui.app.screens.compare import CompareApp, CompareScreen

    pairs = await resolve_runs([one_of_ours], ["run-lr1e-3"], others=1)
    app = CompareApp(
        [*open_comparison(pairs), foreign_compared("cookbook", finished)], clock=lambda: 0.0
    )
    async with app.run_test(size=(160, 48)) as pilot:
        for _ in range(200):
            await pilot.pause(0.05)
            screen = app.screen
            if isinstance(screen, CompareScreen) and all(
                r.session.loaded.is_set() for r in screen.runs
            ):
                break
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        screen.refresh_compare()
        await pilot.pause(0.1)
        chart = next(c for c in screen.charts() if c.key == "reward/mean")
        assert len(chart.states) == 2
        assert [len(m.rewards) for m in chart.states] == [12, BATCHES]
        await pilot.press("q")
        await pilot.pause()
