"""`run TASK --init-from RUN@STEP` starts a new run from another run's weights: its first
step's reward starts where the parent ended (not where a fresh run starts), it is recorded
as the parent's child, and `runs` and `compare` show that lineage. Local backend, the
example task."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tinker_tui.app.cli import main, parse
from tinker_tui.app.commands.run import build_session, fork_of, plan_run
from tinker_tui.engine.events import LogEmitted, StepTrained
from tinker_tui.engine.fork import InitFrom
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.store import find_run


async def train(db: Path, *argv: str) -> tuple[str, list[float], list[str]]:
    """A run through the command line's own planning; its id, step rewards and log."""
    args = parse(["run", "example", "--db", str(db), "--no-ui", "--seed", "1", *argv])
    run = build_session(await asyncio.to_thread(plan_run, args))
    rewards: list[float] = []
    logs: list[str] = []

    def seen(event: object) -> None:
        if isinstance(event, StepTrained):
            rewards.append(event.metrics[keys.REWARD_MEAN])
        elif isinstance(event, LogEmitted):
            logs.append(event.message)

    run.events.subscribe(seen)
    assert await run.run() == "completed"
    return run.run_id, rewards, logs


async def test_a_fork_starts_at_its_parents_reward(tmp_path, capsys):
    db = tmp_path / "runs.db"
    parent, parent_rewards, _ = await train(db, "--steps", "8", "--checkpoint-every", "4")
    _, fresh, _ = await train(db, "--steps", "1", "--warmup-steps", "0")
    fork, fork_rewards, log = await train(db, "--steps", "2", "--init-from", f"{parent}@8")
    assert any(f"forked from {parent}@8" in line for line in log), log
    assert any("format warm-up skipped" in line for line in log), log
    # Measured (seed 1): parent 0.766 -> 0.898 over 8 steps, a fresh run starts at 0.797,
    # the fork's first step 1.0 (sampled from the weights after the parent's last update).
    start, parent_end = fork_rewards[0], parent_rewards[-1]
    assert parent_rewards[-1] > parent_rewards[0]  # the parent learned something to inherit
    assert abs(start - parent_end) <= 0.15, (start, parent_end)
    assert abs(start - parent_end) < abs(start - fresh[0]), (start, parent_end, fresh)
    assert (await find_run(db, fork)).parent == f"{parent}@8"
    assert (await find_run(db, parent)).parent == ""
    # resumed, the fork continues from its own checkpoint and keeps its parent
    resumed, more, log = await train(db, "--steps", "3", "--resume", fork)
    assert resumed == fork and len(more) == 1 and not any("forked" in m for m in log)
    assert (await find_run(db, fork)).parent == f"{parent}@8"

    # with its optimizer state too (a full checkpoint: step 4's)
    child, _, log = await train(
        db, "--steps", "1", "--init-from", f"{parent}@4", "--with-optimizer"
    )
    assert any("weights and optimizer state" in line for line in log), log
    # a resume before a fork's first checkpoint starts over from what the fork first took
    again = await asyncio.to_thread(fork_of, db, child)
    assert again is not None and again.with_optimizer and again.parent == f"{parent}@4"
    assert "/weights/" in again.path  # the full state, not sampler weights
    plain = await asyncio.to_thread(fork_of, db, fork)
    assert plain == InitFrom(path=plain.path, parent=f"{parent}@8")

    capsys.readouterr()
    assert await asyncio.to_thread(main, ["runs", "--db", str(db)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[-1] == "PARENT"
    assert next(line for line in table if line.startswith(fork)).split()[-1] == f"{parent}@8"
    assert await asyncio.to_thread(main, ["runs", "--db", str(db), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)["runs"]
    assert {r["run_id"]: r["parent"] for r in records}[child] == f"{parent}@4"
    argv = ["compare", parent, fork, "--db", str(db), "--no-ui"]
    assert await asyncio.to_thread(main, argv) == 0
    compared = capsys.readouterr().out
    assert "parent" in compared and f"{parent}@8" in compared


async def test_bad_init_from_is_one_line(tmp_path, capsys):
    db = tmp_path / "runs.db"
    parent, _, _ = await train(db, "--steps", "1", "--checkpoint-every", "0")
    cases = [
        (["--init-from", f"{parent}@7"], "no checkpoint at step 7"),
        (["--init-from", "nosuchrun@1"], "no run 'nosuchrun'"),
        (["--with-optimizer"], "--with-optimizer needs --init-from"),
        (["--init-from", f"{parent}@1", "--resume", parent], "cannot be used with --resume"),
    ]
    for extra, words in cases:
        argv = ["run", "example", "--db", str(db), "--no-ui", *extra]
        assert await asyncio.to_thread(main, argv) == 2, extra
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, err


async def test_a_fork_on_tinker_through_the_sdk(tmp_path, monkeypatch):
    """The Tinker side: the parent's checkpoint is the service's, the fork loads it with
    `create_training_client_from_state` (weights) or `..._with_optimizer`, through the real
    SDK to the service double."""
    from tinker_double import TinkerDouble

    from tinker_tui.engine.local import DEFAULT_BASE_MODEL

    db = tmp_path / "runs.db"
    small = ["--backend", "tinker", "--base-model", DEFAULT_BASE_MODEL, "--eval-every", "0"]
    small += ["--group-size", "4", "--groups-per-step", "2", "--warmup-steps", "0"]
    with TinkerDouble(tmp_path / "service") as double:
        for name, value in double.env().items():
            monkeypatch.setenv(name, value)
        parent, _, _ = await train(db, *small, "--steps", "2", "--checkpoint-every", "1")
        for extra in ([], ["--with-optimizer"]):
            fork, rewards, log = await train(
                db, *small, "--steps", "1", "--init-from", f"{parent}@2", *extra
            )
            assert len(rewards) == 1
            line = next(line for line in log if line.startswith("forked from"))
            assert f"{parent}@2" in line and "tinker://" in line, line
            assert (await find_run(db, fork)).parent == f"{parent}@2"
