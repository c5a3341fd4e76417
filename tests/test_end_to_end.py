"""Whole runs of the built-in example on the real local backend."""

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time

from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.run import Run
from tinker_tui.examples.yes_no_maybe import TASK


async def test_headless_run_learns_and_records_everything(tmp_path):
    config = (
        RunConfig()
        .with_overrides(dict(TASK.settings))
        .with_overrides({"max_steps": 24, "checkpoint_every": 10})
    )
    run = Run(task=TASK, config=config, backend="local", db_path=tmp_path / "runs.db")
    steps = []
    run.events.subscribe(lambda e: steps.append(e) if type(e).__name__ == "StepTrained" else None)
    status = await asyncio.wait_for(run.run(), timeout=600)  # a hang fails, not blocks CI
    assert status == "completed"
    rewards = [e.metrics["reward/mean"] for e in steps]
    assert [e.step for e in steps] == list(range(1, 25))
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert last > first + 0.1, f"reward did not rise: {rewards}"

    db = sqlite3.connect(tmp_path / "runs.db")
    assert db.execute("select status, final_step from runs").fetchone() == ("completed", 24)
    assert [r[0] for r in db.execute("select step from steps order by step")] == list(range(1, 25))
    checkpoint_steps = [r[0] for r in db.execute("select step from checkpoints order by step")]
    # Every 10 steps, the final one, and (from step 10 on, 3 steps or more after the last)
    # a step that beat every step before it: a rollback point near the best (engine.metrics.health).
    periodic = [10, 20, 24]
    best_steps = [i + 1 for i, r in enumerate(rewards) if i + 1 >= 10 and r > max(rewards[:i])]
    assert set(periodic) <= set(checkpoint_steps), checkpoint_steps
    assert set(checkpoint_steps) - set(periodic) <= set(best_steps), (checkpoint_steps, rewards)
    assert db.execute("select count(*) from log").fetchone()[0] > 0


async def test_the_runs_policy_server_refuses_a_prompt_over_the_models_context(tmp_path):
    """The run hands the backend's context length (the embedded model's 2048 tokens) to its
    policy server: a longer prompt is refused with the OpenAI code, the run goes on."""
    import openai

    from tinker_tui.engine.events import LogEmitted
    from tinker_tui.engine.rollouts.task import Task
    from tinker_tui.examples.yes_no_maybe import rollout as example_rollout

    asked, refusals = [], []

    async def rollout(client, model, scenario):
        if not asked:  # the first rollout only
            asked.append(scenario.id)
            try:
                await client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": "yes " * 3000}], max_tokens=1
                )
            except openai.BadRequestError as refused:
                refusals.append(refused)
        return await example_rollout(client, model, scenario)

    config = RunConfig(
        max_steps=1,
        warmup_steps=0,
        checkpoint_every=0,
        group_size=2,
        groups_per_step=1,
        eval_at_start=False,
        eval_every=0,
    )
    run = Run(
        task=Task(name=TASK.name, scenarios=TASK.scenarios, rollout=rollout),
        config=config,
        backend="local",
        db_path=tmp_path / "runs.db",
    )
    logs = []
    run.events.subscribe(lambda e: logs.append(e.message) if isinstance(e, LogEmitted) else None)
    assert await asyncio.wait_for(run.run(), timeout=300) == "completed"
    [refused] = refusals
    assert refused.code == "context_length_exceeded"
    assert "maximum context length is 2048 tokens" in refused.message
    assert any(m.startswith("policy server on ") and "context 2048 tokens" in m for m in logs)


def test_sigint_stops_gracefully_with_checkpoint_and_rows(tmp_path):
    db_path = tmp_path / "runs.db"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TINKER_API_KEY", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            "example",
            "--no-ui",
            "--steps",
            "500",
            "--db",
            str(db_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        seen = []
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("step ") and line.split()[1].startswith("3/"):
                break
            assert time.monotonic() < deadline, "".join(seen)
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        out, err = proc.communicate(timeout=60)
        stop_seconds = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert stop_seconds < 30
    assert "Traceback" not in err
    assert "stopping: received SIGINT" in out

    db = sqlite3.connect(db_path)
    assert db.execute("pragma integrity_check").fetchone() == ("ok",)
    status, final_step = db.execute("select status, final_step from runs").fetchone()
    assert status == "stopped" and 3 <= final_step < 500
    steps = [r[0] for r in db.execute("select step from steps order by step")]
    assert steps == list(range(1, final_step + 1))
    step, kind, path = db.execute(
        "select step, kind, path from checkpoints order by step desc"
    ).fetchone()
    assert (step, kind) == (final_step, "state") and path.startswith("tinker://")
    saved = list((tmp_path / "checkpoints").rglob(f"step-{final_step:06d}"))
    assert saved and any(p.is_dir() and any(p.iterdir()) for p in saved)
