"""Signals in a real headless run (subprocess, local backend): SIGTERM stops gracefully with
143; a second signal exits at once and leaves the store consistent."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest


def start_run(tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TINKER_API_KEY", None)
    return subprocess.Popen(
        [sys.executable, "-m", "tinker_tui.app.cli", "run", "example", "--no-ui", "--steps", "500",
         "--warmup-steps", "0", "--db", str(tmp_path / "runs.db")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_step(proc, step):
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if line.startswith("step ") and int(line.split()[1].split("/")[0]) >= step:
            return
        assert time.monotonic() < deadline
    raise AssertionError(f"the run ended before step {step}: {proc.stderr.read()}")


def test_sigterm_stops_gracefully_with_143(tmp_path):
    proc = start_run(tmp_path)
    try:
        wait_for_step(proc, 2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "stopping: received SIGTERM" in out
    db = sqlite3.connect(tmp_path / "runs.db")
    status, final_step = db.execute("select status, final_step from runs").fetchone()
    assert status == "stopped"
    assert db.execute("select max(step) from checkpoints").fetchone()[0] == final_step


def test_second_signal_exits_at_once_with_a_consistent_store(tmp_path):
    proc = start_run(tmp_path)
    try:
        wait_for_step(proc, 2)
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        proc.communicate(timeout=30)
        elapsed = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert elapsed < 5
    db = sqlite3.connect(tmp_path / "runs.db")
    assert db.execute("pragma integrity_check").fetchone() == ("ok",)
    steps = [r[0] for r in db.execute("select step from steps order by step")]
    assert steps == list(range(1, len(steps) + 1))


def test_a_ctrl_c_an_import_swallowed_still_stops_the_command(tmp_path, monkeypatch, capsys):
    """A SIGINT while the engine is imported becomes a KeyboardInterrupt wherever the main
    thread is; code that clears it (here: an except clause) must not let the run go on."""
    from tinker_tui.app.cli import main
    from tinker_tui.app.commands import run

    built = []

    def build_session(plan, **kwargs):
        try:
            signal.raise_signal(signal.SIGINT)  # as if pressed during the imports
        except KeyboardInterrupt:
            pass  # lost, as an import can lose it
        built.append(plan)
        return object()

    monkeypatch.setattr(run, "build_session", build_session)
    monkeypatch.setattr(run, "run_headless", lambda session: pytest.fail("the run started"))
    db = tmp_path / "runs.db"
    assert main(["run", "example", "--no-ui", "--db", str(db)]) == 130
    assert built, "the session was built"
    assert not db.exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_sigterm_while_the_command_checks_its_plan_ends_it_with_143_and_one_line(
        tmp_path, monkeypatch, capsys):
    """Before the command handles signals itself, SIGTERM ends it as SIGINT does: its exit
    code, one line, no traceback, nothing started; the handlers are put back."""
    from tinker_tui.app.cli import main
    from tinker_tui.app.commands import run

    def plan_run(args):
        signal.raise_signal(signal.SIGTERM)  # as if sent while the task loads
        pytest.fail("the signal did not stop the command")

    monkeypatch.setattr(run, "plan_run", plan_run)
    db = tmp_path / "runs.db"
    assert main(["run", "example", "--no-ui", "--db", str(db)]) == 143
    assert capsys.readouterr().err == "tinker-tui: stopped by SIGTERM; nothing was started\n"
    assert not db.exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
