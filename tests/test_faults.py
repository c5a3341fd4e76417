"""Stop a real run (subprocess, local backend) at a named point with SIGKILL, SIGINT or SIGTERM,
then resume it: the store is intact, the run ends at its last step, every scenario position
is trained exactly once or dropped with a reason, and the steps are 1..N exactly once. The
points include the start-up: the model build and the format warm-up, before any checkpoint.

The faulted runs use the test hook in engine/faults.py (TINKER_TUI_FAULT). They run two at
a time in a module fixture; each test then resumes its run in this process through the
command line's `main` (the model is loaded once per test session that way).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from exactly_once import check_exactly_once, confirmed_steps, integrity

from tinker_tui.app.cli import main
from tinker_tui.engine.faults import ENV

STEPS = 6
ARGS = ["--warmup-steps", "0", "--steps", str(STEPS), "--checkpoint-every", "2"]
#: The cases that stop during the start-up run a short format warm-up.
WARMUP_STEPS = 6
# (point, step): during step 4's rollouts (step 3 is recorded, the last checkpoint is 2),
# step 3's training, or the writing and the confirming of checkpoint 4. Plus a kill during
# the very first rollout: no checkpoint at all, so the run starts over under its id.
POINTS = [("rollout", 4), ("train", 3), ("checkpoint", 4), ("commit", 4)]
CASES = [(point, action, step) for point, step in POINTS for action in ("kill", "int")]
CASES.append(("rollout", "kill", 1))
# A graceful stop during the model build or the format warm-up: no checkpoint (the weights
# are not yet worth one), and the resumed run starts over, warm-up included.
START_UP = [("build", "int", 0), ("warmup", "term", 3)]
CASES += START_UP


def run_cli(db: Path, *extra: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TINKER_API_KEY", None)
    env.pop(ENV, None)
    if fault:
        env[ENV] = fault
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            "example",
            "--no-ui",
            "--db",
            str(db),
            *ARGS,
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def faulted(tmp_path_factory):
    """{case: (db path, completed process)} for every case, run two at a time."""

    def one(case):
        point, action, step = case
        db = tmp_path_factory.mktemp(f"{point}-{action}") / "runs.db"
        extra = ("--warmup-steps", str(WARMUP_STEPS)) if case in START_UP else ()
        return case, (db, run_cli(db, *extra, fault=f"{point}:{action}:{step}"))

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, CASES))


def test_a_missing_checkpoint_falls_back_to_the_one_before_and_never_costs_rows(
    faulted, tmp_path, capsys
):
    """Runs before the matrix below resumes these stores: works on copies."""
    source, _ = faulted[("checkpoint", "int", 4)]
    assert confirmed_steps(source)[-2:] == [2, 4]

    def copy(name: str) -> tuple[Path, dict[int, Path]]:
        folder = tmp_path / name
        shutil.copytree(source.parent, folder)
        with sqlite3.connect(folder / "runs.db") as conn:
            paths = dict(conn.execute("select step, path from checkpoints where confirmed = 1"))
        return folder / "runs.db", {
            step: folder / "checkpoints" / path.removeprefix("tinker://")
            for step, path in paths.items()
        }

    db, folders = copy("one-missing")
    shutil.rmtree(folders[4])
    assert main(["run", "example", "--no-ui", "--db", str(db), "--resume"]) == 0
    assert "could not be loaded" in capsys.readouterr().out
    check_exactly_once(db, STEPS)

    db, folders = copy("all-missing")
    for folder in folders.values():
        shutil.rmtree(folder)
    with sqlite3.connect(db) as conn:
        before = conn.execute("select count(*), max(step) from steps").fetchone()
    assert main(["run", "example", "--no-ui", "--db", str(db), "--resume"]) == 2
    assert "no confirmed checkpoint could be loaded" in capsys.readouterr().err
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*), max(step) from steps").fetchone() == before
        assert (
            conn.execute(
                "select count(*) from group_lifecycle where status = 'requeued'"
            ).fetchone()[0]
            == 0
        )


@pytest.mark.parametrize(
    "point,action,step", CASES, ids=[f"{a}-during-{p}-{s}" for p, a, s in CASES]
)
def test_stopped_run_resumes_exactly_once(faulted, point, action, step, capsys):
    db, proc = faulted[(point, action, step)]
    expected = {"kill": -9, "int": 130, "term": 143}[action]
    assert proc.returncode == expected, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert integrity(db) == "ok"
    if (point, action, step) in START_UP:
        signal = {"int": "SIGINT", "term": "SIGTERM"}[action]
        assert f"stopping: received {signal}" in proc.stdout
        assert "stopped at step 0/" in proc.stdout
        assert confirmed_steps(db) == [], "no checkpoint of weights no resume could use"
    elif action == "kill":
        # Killed before checkpoint 4 was confirmed: the last is 2 (none when killed at once).
        assert confirmed_steps(db) == ([] if step == 1 else [2])
        if point in ("checkpoint", "commit"):
            with sqlite3.connect(db) as conn:
                # The state was written; its row never became confirmed.
                assert (
                    conn.execute(
                        "select count(*) from checkpoints where step = 4 and confirmed = 1"
                    ).fetchone()[0]
                    == 0
                )
    else:
        assert "stopping: received SIGINT" in proc.stdout
        assert confirmed_steps(db)[-1] >= 2

    assert main(["run", "example", "--no-ui", "--db", str(db), "--resume"]) == 0
    out = capsys.readouterr().out
    assert f"completed at step {STEPS}/" in out
    assert integrity(db) == "ok"
    check_exactly_once(db, STEPS)  # the metrics file's steps too
    with sqlite3.connect(db) as conn:
        log = [r[0] for r in conn.execute("select message from log")]
        resumes = conn.execute("select count(*) from resumes").fetchone()[0]
    assert resumes >= 1
    if (point, action, step) in START_UP:  # stopped before it finished: run once, on resume
        assert len([m for m in log if m.startswith("format warm-up: ")]) == 1, log


def test_resuming_a_completed_run_does_nothing_until_steps_are_raised(faulted, capsys):
    db, _ = faulted[("train", "kill", 3)]
    if confirmed_steps(db)[-1] < STEPS:  # the matrix test above has not resumed it yet
        assert main(["run", "example", "--no-ui", "--db", str(db), "--resume"]) == 0
    with sqlite3.connect(db) as conn:
        before = conn.execute("select count(*) from steps").fetchone()[0]
    assert main(["run", "example", "--no-ui", "--db", str(db), "--resume"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from steps").fetchone()[0] == before
    assert main(["runs", "--db", str(db)]) == 0
    assert " completed " in capsys.readouterr().out


def test_a_resumed_run_deletes_the_checkpoints_from_before_the_resume_in_turn(tmp_path):
    """The retention policy counts the checkpoints the run saved before it was resumed: they
    were kept for good (a long run resumed often filled its disk)."""
    db = tmp_path / "runs.db"
    common = [
        "run",
        "example",
        "--no-ui",
        "--db",
        str(db),
        "--checkpoint-every",
        "1",
        "--keep-last-checkpoints",
        "2",
    ]
    # Beside the last two, retention keeps one more: the checkpoint a rollback would resume
    # from (the weights that sampled the best step), when it is older.
    assert main([*common, "--steps", "4"]) == 0
    kept = sorted(p.name for p in tmp_path.glob("checkpoints/**/weights/*"))
    assert kept[-2:] == ["step-000003", "step-000004"] and len(kept) <= 3
    assert main([*common, "--steps", "7", "--resume"]) == 0
    kept = sorted(p.name for p in tmp_path.glob("checkpoints/**/weights/*"))
    assert kept[-2:] == ["step-000006", "step-000007"] and len(kept) <= 3
    with sqlite3.connect(db) as conn:
        deleted = [
            step
            for (step,) in conn.execute(
                "select step from checkpoint_deletions where kind = 'state' order by id"
            )
        ]
    assert sorted(deleted) == [s for s in range(1, 6) if f"step-{s:06d}" not in kept]
    assert len(deleted) >= 4  # the ones saved before the resume are deleted in turn too
