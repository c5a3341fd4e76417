"""SIGINT, SIGTERM and SIGKILL at uniformly random moments of a real run's life, from the
process's start: the imports, the model build, the format warm-up, the first rollouts,
training and checkpoints, the end. Each stopped run is then resumed to its end with
`--resume`, and its store must pass the exactly-once checks (tests/exactly_once.py): intact,
steps 1..N once, every scenario position trained once or dropped with a reason.

The moments are fractions of a reference run's duration on this machine (one fault-free run,
timed from its start to its exit, which passes the same checks), drawn from a fixed seed
list: the same fractions in every CI run, wherever their seconds land. A signal that comes
before the run recorded anything leaves nothing to resume, and `--resume` must say so. The
default suite runs three moments; `-m slow` runs the sweep (`SWEEP_SEEDS` per signal) and
prints its table: fault, moment, where the run was, exit code, seconds from the signal to
the exit, resumed or not, positions consumed twice.

The test hook points of tests/test_faults.py stop runs at exact places; this file finds
what falls between them.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from exactly_once import integrity, positions_consumed_twice, problems

from tinker_tui.app.cli import main

STEPS = 4
ARGS = ["--steps", str(STEPS), "--checkpoint-every", "2", "--warmup-steps", "12"]
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}
#: (signal, seed): the default suite's moments (fractions 0.46, 0.84 and 0.24 of a run).
DEFAULT = [("SIGINT", 9), ("SIGTERM", 0), ("SIGKILL", 4)]
SWEEP_SEEDS = range(100, 120)


def fraction(seed: int) -> float:
    return random.Random(seed).random()


def environment() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for name in ("TINKER_API_KEY", "TINKER_CREDENTIAL_CMD", "TINKER_TUI_FAULT"):
        env.pop(name, None)
    return env


def start(db: Path) -> subprocess.Popen[bytes]:
    out = open(db.with_suffix(".out"), "wb")  # noqa: SIM115 - closed with the process
    err = open(db.with_suffix(".err"), "wb")  # noqa: SIM115
    return subprocess.Popen(
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
        ],
        stdout=out,
        stderr=err,
        env=environment(),
    )


@dataclass
class Trial:
    fault: str
    fraction: float
    seconds: float = 0.0  # after the start, when the signal was sent
    phase: str = ""  # where the run was then
    code: int | None = None  # the exit status as a shell shows it (128 + signal)
    exit_s: float | None = None  # from the signal to the exit
    resumed: str = ""
    duplicates: int = 0
    problems: list[str] = field(default_factory=list)

    def row(self) -> str:
        exit_s = "-" if self.exit_s is None else f"{self.exit_s:.2f}"
        return (
            f"{self.fault:<8} {self.fraction:5.3f} {self.seconds:6.1f}  {self.phase:<22} "
            f"{self.code!s:>4} {exit_s:>6}  {self.resumed:<26} {self.duplicates}"
        )


HEADER = (
    f"{'fault':<8} {'frac':>5} {'at s':>6}  {'where the run was':<22} {'exit':>4} "
    f"{'exit s':>6}  {'resumed':<26} duplicates"
)


def where(db: Path, at: float) -> str:
    """The run's phase at wall time `at`, from what its store recorded."""
    if not db.exists():
        return "imports (no store)"
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        run = conn.execute("select run_id, started_at, ended_at from runs").fetchone()
        if run is None or run[1] is None or at < run[1]:
            return "before the run began"
        if run[2] is not None and at >= run[2]:
            return "after the run ended"
        marks = [
            (
                t,
                "model build"
                if phase == "loading_model"
                else "warm-up"
                if phase == "warmup"
                else "first rollouts",
            )
            for t, phase in conn.execute("select time, phase from startup")
        ]
        marks += [
            (t, f"training (step {s} done)")
            for t, s in conn.execute("select time, step from steps")
        ]
        before = [m for m in marks if m[0] <= at]
        return max(before)[1] if before else "run started"
    finally:
        conn.close()


def shell_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def run_trial(tmp: Path, fault: str, frac: float, reference: float, capsys) -> Trial:
    trial = Trial(fault, frac)
    db = tmp / "runs.db"
    started = time.monotonic()
    proc = start(db)
    time.sleep(max(0.0, frac * reference - (time.monotonic() - started)))
    trial.seconds = time.monotonic() - started
    sent_wall = time.time()
    ended_first = proc.poll() is not None
    if not ended_first:
        proc.send_signal(SIGNALS[fault])
    sent = time.monotonic()
    try:
        proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        trial.problems.append("the run did not exit within 180 s of the signal")
    trial.exit_s = None if ended_first else time.monotonic() - sent
    trial.code = shell_code(proc.returncode)
    trial.phase = "exited before it" if ended_first else where(db, sent_wall)
    err = db.with_suffix(".err").read_text(errors="replace")

    expected = {"SIGINT": {130}, "SIGTERM": {143}, "SIGKILL": {137}}[fault]
    if ended_first or trial.phase == "after the run ended":
        expected = expected | {0}
    before_the_engine = trial.phase == "imports (no store)"
    if before_the_engine:
        # Python's own handling (a KeyboardInterrupt while it imports), or the default action
        # of SIGTERM (143 too); nothing was recorded, so nothing is lost.
        expected = expected | ({1} if fault == "SIGINT" else set())
    if trial.code not in expected:
        trial.problems.append(
            f"exit {trial.code}, expected one of {sorted(expected)}: {err[-2000:]}"
        )
    early_interrupt = before_the_engine and err.rstrip().endswith("KeyboardInterrupt")
    if "Traceback" in err and not early_interrupt:
        trial.problems.append(f"a traceback: {err[-2000:]}")
    if db.exists() and integrity(db) != "ok":
        trial.problems.append(f"store damaged: {integrity(db)}")

    capsys.readouterr()
    code = main(["run", "example", "--no-ui", "--db", str(db), "--resume"])
    out, resume_err = capsys.readouterr()
    recorded = db.exists() and _has_run(db)
    if not recorded:
        trial.resumed = "nothing recorded: refused"
        if code != 2 or not ("nothing to resume" in resume_err or "no run" in resume_err):
            trial.problems.append(f"--resume of nothing: exit {code}, {resume_err!r}")
        return trial
    if code != 0:
        trial.problems.append(f"--resume exit {code}: {resume_err[-2000:]}")
    trial.resumed = f"yes, to step {STEPS}" if code == 0 else f"no (exit {code})"
    if "nothing to do" in out:
        trial.resumed = "was complete: nothing to do"
    trial.problems += problems(db, STEPS)
    trial.duplicates = positions_consumed_twice(db)
    return trial


def _has_run(db: Path) -> bool:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return conn.execute("select count(*) from runs").fetchone()[0] > 0
        finally:
            conn.close()
    except sqlite3.Error:
        return False


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> float:
    """Seconds a fault-free run takes here, from its start to its exit; it must pass the
    same checks."""
    db = tmp_path_factory.mktemp("reference") / "runs.db"
    started = time.monotonic()
    proc = start(db)
    assert proc.wait(timeout=600) == 0, db.with_suffix(".err").read_text()
    seconds = time.monotonic() - started
    found = problems(db, STEPS)
    assert not found, found
    return seconds


@pytest.mark.parametrize("fault,seed", DEFAULT, ids=[f"{f}-{s}" for f, s in DEFAULT])
def test_a_signal_at_a_random_moment_then_resume(fault, seed, reference, tmp_path, capsys):
    trial = run_trial(tmp_path, fault, fraction(seed), reference, capsys)
    assert not trial.problems, f"{trial.row()}\n" + "\n".join(trial.problems)


@pytest.mark.slow
def test_sweep_of_random_moments(reference, tmp_path, capsys):
    """Opt-in (`-m slow`, minutes): every signal at `SWEEP_SEEDS` moments; prints the table."""
    trials = []
    with capsys.disabled():  # each row as it comes: the sweep takes many minutes
        print(f"\nreference run: {reference:.1f} s; load {os.getloadavg()[0]:.1f}\n{HEADER}")
    for seed in SWEEP_SEEDS:
        for fault in SIGNALS:
            folder = tmp_path / f"{fault}-{seed}"
            folder.mkdir()
            trials.append(run_trial(folder, fault, fraction(seed), reference, capsys))
            with capsys.disabled():
                print(
                    trials[-1].row() + ("" if not trials[-1].problems else "   PROBLEM"), flush=True
                )
    with capsys.disabled():
        print(f"\n{len(trials)} trials, sorted; load {os.getloadavg()[0]:.1f}\n{HEADER}")
        for trial in sorted(trials, key=lambda t: (t.fault, t.fraction)):
            print(trial.row() + ("" if not trial.problems else "   PROBLEM"))
    failed = [t for t in trials if t.problems]
    assert not failed, "\n\n".join(t.row() + "\n" + "\n".join(t.problems) for t in failed)
