"""Exactly-once resume without a model: the pipeline's resume state, the store's group life
cycle, confirmed checkpoints and reconciliation, the v2 -> v3 migration, the run lock, and
the `runs`, `export` and `run --resume` commands on a store written from events."""

from __future__ import annotations

import asyncio
import csv
import json
import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bench.simulated import SimulatedClient, SimulatedPolicy, simulated_task
from tinker_tui import Scenario, Task
from tinker_tui.app.cli import main
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.events import (
    CheckpointDeleted,
    CheckpointSaved,
    CheckpointStarted,
    EvalCompleted,
    EventBus,
    GroupDiscarded,
    GroupSampled,
    GroupStarted,
    RunFinished,
    RunStarted,
    StepTrained,
    TrajectorySummary,
)
from tinker_tui.engine.store import (
    APPLICATION_ID,
    MIGRATIONS,
    SCHEMA_VERSION,
    RunStore,
    StoreReader,
)
from tinker_tui.engine.training.pipeline import Pipeline
from tinker_tui.engine.training.resume import (
    ResumeError,
    ResumeState,
    RunLock,
    RunLocked,
    ScenarioSource,
    run_is_live,
)


def make_pipeline(events, **overrides):
    session = SimulatedPolicy()
    config = RunConfig(
        max_steps=12, group_size=4, groups_per_step=2, rollout_workers=3, checkpoint_every=3
    ).with_overrides(overrides)
    bus = EventBus()
    bus.subscribe(events.append)
    pipeline = Pipeline(
        config=config,
        task=simulated_task(),
        session=session,
        client_factory=lambda: SimulatedClient(session),
        model_name="m",
        bus=bus,
        clock=FakeClock(),
        rng=random.Random(7),
    )
    return pipeline, session


def consumed(events, upto=None):
    """position -> [step that consumed it, ...] from a run's events (up to step `upto`)."""
    position = {e.group_id: e.scenario_index for e in events if isinstance(e, GroupStarted)}
    out: dict[int, list[int]] = {}
    dropped = set()
    for e in events:
        if isinstance(e, GroupDiscarded) and e.reason != "zero_variance":
            dropped.add(e.group_id)
            if upto is None or e.step <= upto:
                out.setdefault(position[e.group_id], []).append(e.step)
        elif isinstance(e, StepTrained) and (upto is None or e.step <= upto):
            for g in e.group_ids:
                out.setdefault(position[g], []).append(e.step)
    return out


async def test_a_crashed_pipeline_resumes_every_position_exactly_once():
    first: list = []
    pipeline, _ = make_pipeline(first)
    crash = asyncio.get_running_loop().create_future()

    def crash_at_step_8(e):
        if isinstance(e, StepTrained) and e.step == 8 and not crash.done():
            crash.set_result(None)

    pipeline.bus.subscribe(crash_at_step_8)
    run = asyncio.ensure_future(pipeline.run())
    await crash
    run.cancel()  # the process dies: nothing after this is recorded
    await asyncio.gather(run, return_exceptions=True)
    saved = [e for e in first if isinstance(e, CheckpointSaved)]
    assert [e.step for e in saved] == [3, 6]
    state = ResumeState.from_dict(json.loads(json.dumps(saved[-1].resume_state)))
    assert state.step == 6 and state.policy_version == 6
    assert state.pending, "groups were in flight or queued at the checkpoint"

    second: list = []
    resumed, session = make_pipeline(second)
    resumed.restore(state)
    assert await resumed.run() == "completed"
    assert [e.step for e in second if isinstance(e, StepTrained)] == list(range(7, 13))
    starts = [e for e in second if isinstance(e, GroupStarted)]
    # The positions drawn but untrained at the checkpoint run first, then new ones follow.
    assert [e.scenario_index for e in starts[: len(state.pending)]] == list(state.pending)
    assert starts[len(state.pending)].scenario_index == state.next_position
    assert all(e.scenario_id == f"s{e.scenario_index}" for e in starts)
    assert min(e.group_id for e in starts) >= state.next_group_id

    before, after = consumed(first, upto=6), consumed(second)
    assert not set(before) & set(after), "a position was consumed twice"
    everything = {**before, **after}
    assert all(len(steps) == 1 for steps in everything.values())
    drawn = {e.scenario_index for e in first + second if isinstance(e, GroupStarted)}
    assert drawn == set(range(max(drawn) + 1)), "no position skipped"
    leftovers = drawn - set(everything)
    final = [e for e in second if isinstance(e, CheckpointSaved)][-1].resume_state
    assert leftovers == set(final["pending"])


async def test_resume_state_counts_groups_dropped_after_the_checkpoint_as_pending():
    events: list = []
    pipeline, session = make_pipeline(events, max_steps_off_policy=0)
    ledger = pipeline.scenarios
    groups = [ledger.draw()[0] for _ in range(4)]  # positions 0..3
    for group_id, step in zip(groups, (1, 2, None, 3), strict=True):
        if step is not None:
            assert ledger.consumed(group_id, step) == group_id
    pipeline.step = 2
    state = pipeline.resume_state()
    assert state.pending == (2, 3)  # open, or consumed only after the checkpoint
    assert ledger.at_checkpoint(3)["pending"] == (2,)  # 0 and 1 done for good, 3 by step 3
    assert state.next_position == 4 and state.next_group_id == 4


def test_scenario_source_replays_and_detects_a_stream_that_is_not_seeded():
    task = Task(
        name="t",
        rollout=None,
        scenarios=lambda rng: (
            Scenario(id=f"{i}-{rng.random():.6f}", data=i) for i in range(10**6)
        ),
    )
    first = ScenarioSource(task, random.Random(3))
    drawn = [first.draw() for _ in range(6)]
    again = ScenarioSource(
        task, random.Random(3), next_position=6, redo=[1, 4], rng_state=first.rng_state()
    )
    assert again.reproducible
    assert [again.draw() for _ in range(3)] == [drawn[1], drawn[4], (6, first.draw()[1])]

    unseeded = Task(
        name="u",
        rollout=None,
        scenarios=lambda rng: (
            Scenario(id=str(random.random()), data=rng.random()) for _ in range(10**6)
        ),
    )
    source = ScenarioSource(unseeded, random.Random(3))
    source.draw()
    other = ScenarioSource(
        unseeded, random.Random(4), next_position=1, rng_state=source.rng_state()
    )
    assert not other.reproducible


# ---------------------------------------------------------------------- store


def started(t=1.0, **kw):
    return RunStarted(
        time=t,
        run_id="r1",
        name="yes_no_maybe",
        backend="local",
        base_model="tiny",
        max_steps=4,
        start_step=0,
        config={"seed": 0},
        **kw,
    )


def group_events(gid, position, step=None, t=2.0, reason=None):
    out = [
        GroupStarted(
            time=t,
            group_id=gid,
            scenario_index=position,
            scenario_id=f"q{position}",
            policy_version=0,
        ),
        GroupSampled(
            time=t,
            group_id=gid,
            scenario_id=f"q{position}",
            policy_version=0,
            num_trajectories=2,
            num_tokens=10,
            reward_mean=0.5,
            scenario_index=position,
            trajectories=(
                TrajectorySummary(
                    reward=1.0,
                    policy_version=0,
                    num_tokens=5,
                    messages=({"role": "user", "content": "hi"},),
                ),
                TrajectorySummary(reward=0.0, policy_version=0, num_tokens=5),
            ),
        ),
    ]
    if reason is not None:
        out.append(
            GroupDiscarded(
                time=t,
                group_id=gid,
                scenario_id=f"q{position}",
                reason=reason,
                policy_version=0,
                trainer_version=0,
                num_tokens=10,
                scenario_index=position,
                step=step,
            )
        )
    return out


def write_run(path: Path):
    """A run killed during step 4: checkpoint 2 confirmed, checkpoint 4 only started."""

    async def go():
        store = await RunStore.open(path)
        store.handle(started())
        for gid in range(8):
            for e in group_events(
                gid, gid, step=2 if gid == 3 else None, reason="zero_variance" if gid == 3 else None
            ):
                store.handle(e)
        for s, gids in ((1, (0, 1)), (2, (2, 3)), (3, (4, 5))):
            store.handle(
                StepTrained(
                    time=3.0 + s,
                    step=s,
                    policy_version=s,
                    metrics={"reward/mean": 0.1 * s},
                    group_ids=gids,
                )
            )
            if s == 2:
                store.handle(CheckpointStarted(time=5.5, step=2, kind="state", name="step-2"))
                store.handle(
                    CheckpointSaved(
                        time=5.6,
                        step=2,
                        kind="state",
                        name="step-2",
                        path="tinker://a/weights/2",
                        resume_state=ResumeState(
                            step=2,
                            policy_version=2,
                            next_position=6,
                            pending=(4, 5),
                            next_group_id=6,
                        ).as_dict(),
                    )
                )
        store.handle(
            GroupDiscarded(
                time=7.0,
                group_id=6,
                scenario_id="q6",
                reason="stale",
                policy_version=0,
                trainer_version=3,
                num_tokens=10,
                scenario_index=6,
                step=4,
            )
        )
        store.handle(CheckpointStarted(time=8.0, step=4, kind="state", name="step-4"))
        await store.close()

    asyncio.run(go())


def test_group_life_cycle_and_confirmed_checkpoints_are_stored(tmp_path):
    path = tmp_path / "runs.db"
    write_run(path)
    db = sqlite3.connect(path)
    rows = db.execute(
        "select group_id, scenario_index, status, step, reason "
        "from group_lifecycle order by group_id"
    ).fetchall()
    assert rows == [
        (0, 0, "trained", 1, ""),
        (1, 1, "trained", 1, ""),
        (2, 2, "trained", 2, ""),
        (3, 3, "discarded", 2, "zero_variance"),
        (4, 4, "trained", 3, ""),
        (5, 5, "trained", 3, ""),
        (6, 6, "discarded", 4, "stale"),
        (7, 7, "sampled", None, ""),
    ]
    assert db.execute("select step, confirmed, path from checkpoints order by step").fetchall() == [
        (2, 1, "tinker://a/weights/2"),
        (4, 0, ""),
    ]

    async def read():
        store = await StoreReader.open_readonly(path)
        try:
            assert [c.step for c in await store.checkpoints("r1")] == [2]
            assert [r["step"] for r in await store.rows_after("checkpoints", "r1")] == [2]
            points = await store.resume_points("r1")
            assert [p["step"] for p in points] == [2]
            assert points[0]["resume_state"]["pending"] == [4, 5]
        finally:
            await store.close()

    asyncio.run(read())


def test_a_checkpoint_the_retention_deleted_is_no_resume_point(tmp_path):
    path = tmp_path / "runs.db"
    write_run(path)

    async def go():
        store = await RunStore.open(path)
        try:
            store.handle(started())
            store.handle(CheckpointStarted(time=8.0, step=4, kind="state", name="step-4"))
            store.handle(
                CheckpointSaved(
                    time=8.1,
                    step=4,
                    kind="state",
                    name="step-4",
                    path="tinker://a/weights/4",
                    resume_state=ResumeState(
                        step=4, policy_version=4, next_position=8, pending=(), next_group_id=8
                    ).as_dict(),
                )
            )
            await store.flush()
            assert [p["step"] for p in await store.resume_points("r1")] == [4, 2]
            store.handle(
                CheckpointDeleted(
                    time=8.2, step=2, kind="state", name="step-2", path="tinker://a/weights/2"
                )
            )
            await store.flush()
            assert [p["step"] for p in await store.resume_points("r1")] == [4]
            # still listed among the checkpoints the run saved (a tracker export shows them)
            assert [c.step for c in await store.checkpoints("r1")] == [2, 4]
        finally:
            await store.close()

    asyncio.run(go())


def test_reconcile_undoes_everything_after_the_checkpoint(tmp_path):
    path = tmp_path / "runs.db"
    write_run(path)

    async def go():
        async with await RunStore.open(path) as store:
            counts = await store.reconcile("r1", 2)
            assert counts == {"steps_removed": 1, "groups_requeued": 4, "next_group_id": 8}
            assert await store.reconcile("r1", 2) == {
                **counts,
                "steps_removed": 0,
                "groups_requeued": 0,
            }

    asyncio.run(go())
    db = sqlite3.connect(path)
    assert [r[0] for r in db.execute("select step from steps order by step")] == [1, 2]
    statuses = dict(db.execute("select group_id, status from group_lifecycle"))
    assert [g for g, s in statuses.items() if s == "requeued"] == [4, 5, 6, 7]
    detail = db.execute("select detail from group_lifecycle where group_id = 4").fetchone()[0]
    assert detail == "was trained at step 3; run again on resuming from step 2"
    assert db.execute("select count(*) from sampled_groups").fetchone()[0] == 4
    assert db.execute("select count(*) from trajectories").fetchone()[0] == 8
    assert db.execute("select group_id, reason from discarded_groups").fetchall() == [
        (3, "zero_variance")
    ]
    assert db.execute("select step, confirmed from checkpoints").fetchall() == [(2, 1)]
    assert db.execute("select groups_sampled, tokens_sampled from runs").fetchone() == (4, 40)


def test_run_finished_marks_untrained_groups_unused(tmp_path):
    async def go():
        async with await RunStore.open(tmp_path / "runs.db") as store:
            store.handle(started())
            for e in group_events(0, 0) + group_events(1, 1)[:1]:
                store.handle(e)
            store.handle(RunFinished(time=9.0, status="completed", final_step=4))
            await store.flush()
            return [(g.status, g.detail) for g in await store.groups("r1")]

    assert asyncio.run(go()) == [("unused", "the run ended before it was trained")] * 2


def test_a_version_2_store_is_migrated_and_its_checkpoints_count_as_confirmed(tmp_path):
    path = tmp_path / "runs.db"
    with sqlite3.connect(path) as db:
        for script in MIGRATIONS[:2]:
            db.executescript(script)
        db.execute(f"PRAGMA application_id={APPLICATION_ID}")
        db.execute("PRAGMA user_version=2")
        db.execute("INSERT INTO runs (run_id, name) VALUES ('old', 'yes_no_maybe')")
        db.execute(
            "INSERT INTO checkpoints (run_id, step, kind, name, path, time) "
            "VALUES ('old', 10, 'state', 'step-10', 'tinker://x/weights/10', 1.0)"
        )
    db.close()

    async def go():
        async with await RunStore.open(path) as store:
            assert [c.step for c in await store.checkpoints("old")] == [10]
            assert await store.resume_points("old") == []

    asyncio.run(go())
    db = sqlite3.connect(path)
    assert db.execute("pragma user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("select confirmed, resume_state from checkpoints").fetchone() == (1, None)


def test_run_lock_refuses_a_second_holder_and_is_gone_after_release(tmp_path):
    db = tmp_path / "runs.db"
    lock = RunLock(db, "r1")
    lock.acquire()
    try:
        assert run_is_live(db, "r1")
        with pytest.raises(RunLocked, match="running in another process"):
            RunLock(db, "r1").acquire()
    finally:
        lock.release()
    assert not run_is_live(db, "r1") and not lock.path.exists()


# ---------------------------------------------------------------------- commands


def test_runs_lists_an_interrupted_run_with_its_checkpoint(tmp_path, capsys):
    path = tmp_path / "runs.db"
    write_run(path)
    assert main(["runs", "--db", str(path)]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == [
        "RUN",
        "TASK",
        "BACKEND",
        "STATUS",
        "STEP",
        "REWARD",
        "CKPT",
        "STARTED",
        "DURATION",
    ]
    assert row.split()[:7] == ["r1", "yes_no_maybe", "local", "interrupted", "3/4", "0.300", "2"]


def test_runs_says_why_a_run_ended_beside_its_status(tmp_path, capsys):
    """The typed cause, not the reason's text: a run that trained nothing reads as such."""
    path = tmp_path / "runs.db"
    write_run(path)

    async def finish():
        store = await RunStore.open(path)
        store.handle(started())
        store.handle(
            RunFinished(
                time=9.0,
                status="completed",
                final_step=4,
                reason="reached max_steps",
                cause="no_signal",
            )
        )
        await store.close()

    asyncio.run(finish())
    assert main(["runs", "--db", str(path)]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert row[header.index("STATUS") :].startswith("completed · trained nothing  ")
    assert main(["runs", "--db", str(path), "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)["runs"]
    assert (record["status"], record["cause"]) == ("completed", "no_signal")


def test_export_jsonl_and_csv(tmp_path, capsys):
    path = tmp_path / "runs.db"
    write_run(path)
    out = tmp_path / "out.jsonl"
    assert main(["export", "r", "--db", str(path), "-o", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    metrics = [r for r in records if r["record"] == "metrics"]
    samples = [r for r in records if r["record"] == "sample"]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert metrics[0]["reward/mean"] == pytest.approx(0.1)
    assert len(samples) == 16
    assert samples[0]["messages"] == [{"role": "user", "content": "hi"}]
    assert {(s["group_id"], s["status"], s["step"]) for s in samples if s["sample"] == 0} >= {
        (0, "trained", 1),
        (3, "discarded", 2),
        (7, "sampled", None),
    }

    folder = tmp_path / "csv"
    assert main(["export", "r1", "--db", str(path), "--format", "csv", "-o", str(folder)]) == 0
    with open(folder / "r1-metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows] == ["1", "2", "3"] and "reward/mean" in rows[0]
    with open(folder / "r1-samples.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 16 and json.loads(rows[0]["messages"])[0]["content"] == "hi"
    capsys.readouterr()
    assert (
        main(["export", "r1", "--db", str(path), "--format", "csv", "--what", "metrics", "-o", "-"])
        == 0
    )
    assert capsys.readouterr().out.splitlines()[0].startswith("kind,run_id,step")
    assert main(["export", "r1", "--db", str(path), "--format", "csv", "-o", "-"]) == 2
    # two tables never go to a path that reads as a file: refused, not made a folder
    assert (
        main(["export", "r1", "--db", str(path), "--format", "csv", "-o", str(tmp_path / "x.csv")])
        == 2
    )
    assert "names a file" in capsys.readouterr().err and not (tmp_path / "x.csv").exists()
    assert (
        main(["export", "r1", "--db", str(path), "--format", "csv", "-o", str(tmp_path / "tables")])
        == 0
    )
    assert (tmp_path / "tables" / "r1-samples.csv").exists()
    assert main(["export", "nope", "--db", str(path)]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_export_lists_eval_rollouts_and_says_a_live_run_is_partial(tmp_path, capsys):
    path = tmp_path / "runs.db"
    write_run(path)

    async def add_eval():
        store = await RunStore.open(path)
        store.handle(started())  # the process that wrote the rest, going on
        store.handle(
            EvalCompleted(
                time=6.5,
                step=2,
                policy_version=2,
                metrics={"eval/reward_mean": 0.5},
                scenario_ids=("e0", "e1"),
                trajectories=(
                    TrajectorySummary(
                        reward=1.0,
                        policy_version=2,
                        num_tokens=3,
                        messages=({"role": "user", "content": "2+2"},),
                    ),
                    TrajectorySummary(reward=0.0, policy_version=2, num_tokens=4),
                ),
            )
        )
        await store.close()

    asyncio.run(add_eval())
    out = tmp_path / "out.jsonl"
    lock = RunLock(path, "r1")  # the run's process is still alive
    lock.acquire()
    try:
        assert main(["export", "r1", "--db", str(path), "-o", str(out)]) == 0
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert "r1 is still running" in err and "partial" in err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    evals = [r for r in records if r["record"] == "sample" and r["kind"] == "eval"]
    assert [(r["scenario_id"], r["reward"], r["step"], r["group_id"]) for r in evals] == [
        ("e0", 1.0, 2, None),
        ("e1", 0.0, 2, None),
    ]
    assert evals[0]["messages"] == [{"role": "user", "content": "2+2"}]
    trained = [r for r in records if r["record"] == "sample" and r["kind"] == "train"]
    assert len(trained) == 16
    # once its process is gone the same export is not called partial
    assert main(["export", "r1", "--db", str(path), "-o", str(out)]) == 0
    assert "still running" not in capsys.readouterr().err


def test_resume_refuses_what_it_cannot_do(tmp_path, capsys):
    path = tmp_path / "runs.db"
    assert main(["run", "example", "--no-ui", "--db", str(path), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    write_run(path)
    assert main(["run", "example", "--no-ui", "--db", str(path), "--resume", "zz"]) == 2
    assert "no run 'zz'" in capsys.readouterr().err
    assert (
        main(["run", "example", "--no-ui", "--db", str(path), "--resume", "r1", "--seed", "5"]) == 2
    )
    assert "--seed cannot change" in capsys.readouterr().err
    assert (
        main(["run", "example", "--no-ui", "--db", str(path), "--resume", "--backend", "tinker"])
        == 2
    )
    assert "cannot be resumed with --backend tinker" in capsys.readouterr().err
    lock = RunLock(path, "r1")  # as a live process running it holds
    lock.acquire()
    try:
        assert main(["run", "example", "--no-ui", "--db", str(path), "--resume"]) == 2
        assert "running in another process" in capsys.readouterr().err
    finally:
        lock.release()


def test_resume_with_fewer_steps_than_its_checkpoint_is_refused_before_anything_loads(tmp_path):
    """`--steps` below the checkpoint's step: a usage error from the plan (no torch imported,
    no engine started) that leaves the stored run as it was."""
    path = tmp_path / "runs.db"
    write_run(path)  # its last checkpoint: step 2
    before = path.read_bytes()
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "tinker_tui.app.cli",
            "run",
            "example",
            "--no-ui",
            "--db",
            str(path),
            "--resume",
            "r1",
            "--steps",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "run r1 resumes from step 2; --steps 1 must be larger (e.g. --steps 4)" in proc.stderr
    imported = {
        line.split("|")[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "torch" not in imported and "tinker_tui.engine.run" not in imported
    assert path.read_bytes() == before
    assert not list(tmp_path.glob("*.lock")) and not list(tmp_path.glob("*.control.json"))


# ---------------------------------------------------------------------- stopped in start-up


async def test_a_pipeline_stopped_before_it_began_checkpoints_only_a_warmed_up_policy():
    for warmed_up in (False, True):
        events: list = []
        pipeline, session = make_pipeline(events)
        pipeline.warmup_done = warmed_up
        pipeline.stop("a signal during the start-up")
        assert await pipeline.run() == "stopped"
        assert not [e for e in events if isinstance(e, GroupStarted | StepTrained)]
        assert "running" not in [getattr(e, "state", None) for e in events]
        saved = [e for e in events if isinstance(e, CheckpointSaved)]
        if warmed_up:  # the warm-up's result: a resumed run need not repeat it
            assert [(e.step, e.resume_state["warmup_done"]) for e in saved] == [(0, True)]
        else:
            assert saved == [], "weights no resume could use were checkpointed"


def start_state_run(path: Path, *, resume_state) -> None:
    """A run stopped before step 1, whose one checkpoint (step 0) has `resume_state`."""

    async def go():
        store = await RunStore.open(path)
        store.handle(started())
        store.handle(CheckpointStarted(time=2.0, step=0, kind="state", name="step-0"))
        store.handle(
            CheckpointSaved(
                time=2.1,
                step=0,
                kind="state",
                name="step-0",
                path="tinker://a/weights/0",
                resume_state=resume_state,
            )
        )
        await store.close()

    asyncio.run(go())


def resume_points_of(path: Path):
    from tinker_tui.app.task_loader import load_task
    from tinker_tui.engine.run import Run

    async def go():
        run = Run(
            task=load_task("example"),
            config=RunConfig(),
            backend="local",
            db_path=path,
            run_id="r1",
            resume=True,
        )
        store = await RunStore.open(path)
        try:
            return await run._resume_points(store)
        finally:
            await store.close()

    return asyncio.run(go())


def test_a_checkpoint_from_before_the_warm_up_finished_means_starting_over(tmp_path):
    """Stores recorded before a stop during the start-up stopped writing such checkpoints:
    the run starts over (warm-up included), never 'recorded by an older tinker-tui'."""
    path = tmp_path / "runs.db"
    start_state_run(
        path,
        resume_state=ResumeState(
            step=0,
            policy_version=0,
            next_position=0,
            pending=(),
            next_group_id=0,
            warmup_done=False,
        ).as_dict(),
    )
    assert resume_points_of(path) == []

    older = tmp_path / "older.db"
    start_state_run(older, resume_state=None)
    with pytest.raises(ResumeError, match="recorded by an older tinker-tui"):
        resume_points_of(older)
