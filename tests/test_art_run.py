"""`show --art DIR` and `compare --art DIR`: an ART model folder (`history.jsonl`, the
trajectories' parquet files, checkpoint folders) read as our events, drawn by the same
dashboard, followed while it is written."""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import timedelta
from pathlib import Path

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")

import pytest
from art_folder import START, log_train_step, log_val, new_model, reward_of
from compared_runs import store_runs
from fake_session import wait_for_charts
from textual.pilot import Pilot

from tinker_tui.app.cli import main as cli_main
from tinker_tui.app.foreign_session import ForeignSession
from tinker_tui.app.tui import TinkerTuiApp
from tinker_tui.engine.clock import FakeClock, SystemClock
from tinker_tui.engine.events import (
    CheckpointDeleted,
    CheckpointSaved,
    EvalCompleted,
    GroupSampled,
    RunStarted,
    StepTrained,
)
from tinker_tui.engine.foreign.art_run import ArtRun, mapped_metrics, split_of

STEPS = 6
REAL = Path(__file__).parent / "data" / "art_model" / "mail" / "models" / "agent-001"


@pytest.fixture
def written(tmp_path) -> Path:
    folder = new_model(tmp_path / "art" / "mail" / "models" / "agent-001")
    for step in range(STEPS):
        log_train_step(folder, step)
        if step % 3 == 2:
            log_val(folder, step, 0.5 + 0.01 * step)
    return folder


def test_rows_map_by_split_onto_our_metrics():
    row = {"train/reward": 0.5, "time/step_wall_s": 2.0, "loss/train": 0.1, "step": 3}
    assert split_of(row) == "train"
    assert mapped_metrics(row) == {"reward/mean": 0.5, "time/step": 2.0, "loss/train": 0.1}
    assert split_of({"val/reward": 0.4, "step": 3}) == "val"
    assert mapped_metrics({"val/reward": 0.4}) == {"eval/reward_mean": 0.4}


def test_a_folder_reads_as_a_run_step_by_step(written):
    reader = ArtRun(written, FakeClock())
    events = reader.poll()
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.run_id == "art:mail/agent-001" and started.backend == "art"
    assert started.base_model == "Qwen/Qwen3-4B-Instruct-2507"
    steps = [e for e in events if isinstance(e, StepTrained)]
    # ART step s's rollouts train our step s + 1
    assert [s.step for s in steps] == list(range(1, STEPS + 1))
    mean = sum(reward_of(0, g, m) for g in range(2) for m in range(3)) / 6
    assert steps[0].metrics["reward/mean"] == pytest.approx(mean)
    groups = [e for e in events if isinstance(e, GroupSampled)]
    assert len(groups) == 2 * STEPS and groups[0].num_trajectories == 3
    assert groups[0].scenario_id == "inbox-0" and groups[0].policy_version == 0
    assert set(steps[0].group_ids) == {g.group_id for g in groups if g.policy_version == 0}
    first = groups[0].trajectories[1]
    assert [m["content"] for m in first.messages] == ["find mail 0", "answer 1"]
    assert first.metrics == {"found": False} and first.reward == reward_of(0, 0, 1)
    evals = [e for e in events if isinstance(e, EvalCompleted)]
    assert [(e.step, e.metrics["eval/reward_mean"]) for e in evals] == [(2, 0.52), (5, 0.55)]
    checkpoints = [e for e in events if isinstance(e, CheckpointSaved)]
    assert [(c.step, c.name) for c in checkpoints] == [(2, "0002"), (4, "0004"), (6, "0006")]
    # stamped by the rows' own recorded_at: 3 s a step
    assert steps[-1].time - steps[0].time == pytest.approx(3.0 * (STEPS - 1))
    assert reader.poll() == [] and reader.finished is None


def test_a_half_written_row_or_file_waits_for_the_next_poll(written):
    reader = ArtRun(written, FakeClock())
    reader.poll()
    history = written / "history.jsonl"
    row = json.dumps({"train/reward": 0.9, "step": STEPS, "recorded_at": "2026-12-01T13:00:00"})
    with history.open("a") as file:
        file.write(row[:20])
    (written / "trajectories" / "train" / f"{STEPS:04d}.parquet").write_bytes(b"PAR1")
    assert reader.poll() == []
    with history.open("a") as file:
        file.write(row[20:] + "\n")
    (written / "trajectories" / "train" / f"{STEPS:04d}.parquet").unlink()
    [step] = reader.poll()
    assert isinstance(step, StepTrained) and step.step == STEPS + 1
    assert step.metrics["reward/mean"] == 0.9


def test_a_checkpoint_the_program_deletes_leaves_the_list(written):
    reader = ArtRun(written, FakeClock())
    reader.poll()
    (written / "checkpoints" / "0002").rmdir()
    [gone] = reader.poll()
    assert isinstance(gone, CheckpointDeleted) and gone.step == 2


def test_not_an_art_folder_is_one_line_and_exit_2(tmp_path, capsys):
    assert cli_main(["show", "--art", str(tmp_path), "--no-ui"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not an ART model folder" in err and "\n" not in err
    assert cli_main(["show", "--art", str(tmp_path / "nope"), "--no-ui"]) == 2
    assert "no folder" in capsys.readouterr().err


def test_headless_show_prints_the_step_lines_and_says_it_follows(written, capsys):
    assert cli_main(["show", "--art", str(written), "--no-ui"]) == 0
    out = capsys.readouterr().out
    assert f"step    {STEPS}" in out and "reward" in out
    assert "has not ended yet (ART writes no end marker): step 6 so far" in out


def test_show_json_has_the_steps_evals_and_checkpoints(written, capsys):
    assert cli_main(["show", "--art", str(written), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["run"]["backend"] == "art" and doc["run"]["status"] == "running"
    assert len(doc["steps"]) == STEPS
    assert [c["name"] for c in doc["checkpoints"]] == ["0002", "0004", "0006"]


@pytest.mark.skipif(not REAL.is_dir(), reason="the folder ART wrote is not in this checkout")
def test_the_folder_art_itself_wrote_reads_as_a_run():
    reader = ArtRun(REAL, FakeClock())
    events = reader.poll()
    steps = [e for e in events if isinstance(e, StepTrained)]
    groups = [e for e in events if isinstance(e, GroupSampled)]
    evals = [e for e in events if isinstance(e, EvalCompleted)]
    assert steps and groups and evals
    assert all("reward/mean" in s.metrics for s in steps)
    assert all(g.trajectories and g.trajectories[0].messages for g in groups)
    assert set(steps[0].group_ids) == {g.group_id for g in groups if g.policy_version == 0}


# ------------------------------------------------------------------ the dashboard


def watch_app(folder: Path, clock: FakeClock | None = None) -> TinkerTuiApp:
    """The dashboard on a folder; `clock` fixes "now" (a snapshot: ART's runs never end,
    so elapsed times would otherwise run on)."""
    reader = ArtRun(folder, clock or SystemClock())
    app = TinkerTuiApp(
        ForeignSession(reader, poll_interval=0.1, clock=clock), refresh_interval=0.05
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
    folder = new_model(tmp_path / "live")
    log_train_step(folder, 0)
    app = watch_app(folder)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        assert app.state.step == 1 and app.mode_label == "watching (art)"
        for step in range(1, 4):
            log_train_step(folder, step)
            wrote = time.monotonic()
            while app.state.step < step + 1:
                assert time.monotonic() - wrote < 1.0, f"step {step + 1} not shown in 1 s"
                await pilot.pause(0.02)
        assert [c.name for c in app.state.checkpoints] == ["0002", "0004"]
        assert len(app.state.groups) == 8
        await pilot.press("p")  # nothing to steer from here
        await pilot.pause()
        assert app.state.state != "paused"
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


def after_the_last_row() -> FakeClock:
    return FakeClock((START + timedelta(seconds=3.0 * STEPS + 1)).timestamp())


def test_snapshot_art_run_80x24(snap_compare, written):
    app = watch_app(written, after_the_last_row())
    assert snap_compare(app, terminal_size=(80, 24), run_before=loaded)


def test_snapshot_art_run_160x48(snap_compare, written):
    app = watch_app(written, after_the_last_row())
    assert snap_compare(app, terminal_size=(160, 48), run_before=loaded)


# ------------------------------------------------------------------ compare


def test_compare_an_art_folder_with_one_of_our_runs(written, tmp_path, capsys):
    db = tmp_path / "runs.db"
    (ours,) = store_runs(db, [0])
    assert cli_main(["compare", ours, "--art", str(written), "--db", str(db), "--no-ui"]) == 0
    out = capsys.readouterr().out.splitlines()
    row = next(line for line in out if line.startswith("art:"))
    assert row.split()[1:3] == ["running", "6/?"], row  # ART does not say its length
