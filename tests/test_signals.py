"""Signals in a real headless run (subprocess, local backend): SIGTERM stops gracefully with
143; a second signal exits at once and leaves the store consistent."""

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest


def start_run(tmp_path, fault=None):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TINKER_API_KEY", None)
    if fault:
        env["TINKER_TUI_FAULT"] = fault  # engine.faults: e.g. step 3's training is slow
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            "example",
            "--no-ui",
            "--steps",
            "500",
            "--warmup-steps",
            "0",
            "--db",
            str(tmp_path / "runs.db"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_for_step(proc, step):
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if line.startswith("step ") and int(line.split()[1].split("/")[0]) >= step:
            return
        assert time.monotonic() < deadline
    raise AssertionError(f"the run ended before step {step}: {proc.stderr.read()}")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_stop_gracefully(tmp_path, signum, code):
    """SIGHUP too: it died by the hang-up, leaving its control and lock files and a run
    marked running."""
    proc = start_run(tmp_path)
    try:
        wait_for_step(proc, 2)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert f"stopping: received {signal.Signals(signum).name}" in out
    db = sqlite3.connect(tmp_path / "runs.db")
    status, final_step = db.execute("select status, final_step from runs").fetchone()
    assert status == "stopped"
    assert db.execute("select max(step) from checkpoints").fetchone()[0] == final_step
    assert not list(tmp_path.glob("*.control.json")) and not list(tmp_path.glob("*.lock"))


def test_a_signal_the_run_was_started_ignoring_stays_ignored(tmp_path):
    """`nohup tinker-tui run … --no-ui &` ignores SIGHUP: taking it stopped the run when the
    terminal closed. The run goes on past the hang-up; SIGTERM still stops it."""
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
            "--warmup-steps",
            "0",
            "--db",
            str(tmp_path / "runs.db"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    try:
        proc.send_signal(signal.SIGHUP)  # while it starts: ignored too
        wait_for_step(proc, 2)
        proc.send_signal(signal.SIGHUP)
        wait_for_step(proc, 6)  # trains on
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "SIGHUP" not in out + err


def test_signals_after_the_run_stopped_keep_its_exit_code(tmp_path):
    """A second Ctrl+C that came once the run had stopped, while the interpreter tore down,
    raised a KeyboardInterrupt in an exit hook: the process died by SIGINT (-2) with a
    traceback. Signals from the summary line until the process is gone must not change its
    code."""
    proc = start_run(tmp_path)
    try:
        wait_for_step(proc, 2)
        proc.send_signal(signal.SIGINT)
        for line in proc.stdout:
            if " stopped at step " in line:  # the summary: the command is done
                break
        sent = 0
        while proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
                sent += 1
            time.sleep(0.002)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (proc.returncode, sent, err[-2000:])
    assert "Traceback" not in err and "Exception ignored" not in err, err[-2000:]


def test_second_signal_exits_at_once_with_a_consistent_store(tmp_path, capsys):
    """...and as a run that ends: no control file or lock file left beside the store, the
    summary of an interrupted run; `attach` then finds nothing to attach to."""
    from tinker_tui.app.cli import main

    proc = start_run(tmp_path, fault="train:slow:3")
    try:
        wait_for_step(proc, 2)
        time.sleep(1.0)  # step 3 trains, slowly: the graceful stop waits for it
        # Two of a kind may merge into one while pending; these two arrive in either order.
        proc.send_signal(signal.SIGINT)
        time.sleep(0.7)  # a person's second signal, after the stop was announced
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        out, _ = proc.communicate(timeout=30)
        elapsed = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
    second = {130: "SIGINT", 143: "SIGTERM"}[proc.returncode]
    assert elapsed < 5
    db = sqlite3.connect(tmp_path / "runs.db")
    assert db.execute("pragma integrity_check").fetchone() == ("ok",)
    # marked interrupted in the store: it said `running` for ever
    assert db.execute("select status, reason from runs").fetchone() == (
        "interrupted",
        f"{second} while stopping: stopped at once",
    )
    steps = [r[0] for r in db.execute("select step from steps order by step")]
    assert steps == list(range(1, len(steps) + 1))
    (run_id,) = db.execute("select run_id from runs").fetchone()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(run_id)) == [
        f"{run_id}.metrics.jsonl"
    ]
    assert f"run {run_id} interrupted at step " in out
    assert f"({second} while stopping: stopped at once)" in out
    assert f"continue:   tinker-tui run example --resume {run_id}" in out
    assert main(["attach", run_id, "--db", str(tmp_path / "runs.db"), "--no-ui"]) == 2
    err = capsys.readouterr().err
    # the store says it was interrupted (a run stopped at once is marked so)
    assert f"run {run_id} is interrupted: nothing to attach to" in err
    assert "does not answer" not in err


def _assert_one_graceful_stop(tmp_path, out, code):
    db = sqlite3.connect(tmp_path / "runs.db")
    status, final_step = db.execute("select status, final_step from runs").fetchone()
    assert status == "stopped", out[-2000:]
    assert "stopped at once" not in out
    assert db.execute("select max(step) from checkpoints").fetchone()[0] == final_step
    assert out.count("stopping: received SIGTERM") == 1
    return final_step


def test_two_signals_20_ms_apart_are_one_graceful_stop(tmp_path):
    """A shell's `kill` of a job and its group, or `timeout`: one stop request arriving
    twice. It was taken as a second Ctrl+C: stopped at once, no checkpoint, steps lost."""
    proc = start_run(tmp_path)
    try:
        wait_for_step(proc, 2)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-2000:]
    assert _assert_one_graceful_stop(tmp_path, out, 143) >= 2
    assert "Ctrl+C again stops at once" in out


def test_a_graceful_stop_waits_for_a_slow_step_and_checkpoints_it(tmp_path):
    """A stop during a slow training call: the step finishes and is checkpointed, and the
    log says what the stop waits for (it was abandoned, losing every completed step)."""
    proc = start_run(tmp_path, fault="train:slow:3")
    try:
        wait_for_step(proc, 2)
        time.sleep(1.0)  # step 3's training is under way (it takes seconds)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-2000:]
    assert "  waiting for step 3's training call (running " in out
    assert "to finish, then a checkpoint; Ctrl+C again stops at once" in out
    assert _assert_one_graceful_stop(tmp_path, out, 143) == 3


def test_gnu_timeout_stops_the_run_gracefully(tmp_path):
    """`timeout` signals the run, then its whole process group, 20 ms apart."""
    import shutil

    timeout = shutil.which("timeout")
    if timeout is None:
        pytest.skip("no GNU timeout here")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TINKER_API_KEY", None)
    done = subprocess.run(
        [
            timeout,
            "-s",
            "TERM",
            "25",
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            "example",
            "--no-ui",
            "--steps",
            "100000",
            "--warmup-steps",
            "0",
            "--db",
            str(tmp_path / "runs.db"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 124, done.stderr[-2000:]  # timeout's own: it timed out
    _assert_one_graceful_stop(tmp_path, done.stdout, 143)


def test_attach_to_a_killed_run_says_its_process_is_gone(tmp_path, capsys):
    """kill -9 leaves the control file: `attach` names it stale instead of failing to
    connect to it."""
    from tinker_tui.app.cli import main

    proc = start_run(tmp_path)
    try:
        wait_for_step(proc, 1)
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    (control,) = tmp_path.glob("*.control.json")
    run_id = control.name.removesuffix(".control.json")
    db = str(tmp_path / "runs.db")
    assert main(["attach", run_id, "--db", db, "--no-ui"]) == 2
    err = capsys.readouterr().err
    assert f"run {run_id} is not running: its process (pid {proc.pid}) is gone" in err
    assert "does not answer" not in err
    # the commands that show and continue it name the task as the run was started
    assert f"`tinker-tui run example --resume {run_id} --db {db}` continues it" in err
    # no run named, none live: the newest that did not end is named, not "no endpoint"
    assert main(["attach", "--db", db, "--no-ui"]) == 2
    assert err == capsys.readouterr().err


async def test_dashboards_show_a_run_stopped_at_once_as_interrupted(tmp_path, monkeypatch):
    """The engine a dashboard started, stopped at once by a second SIGINT: that dashboard
    and one attached to the run both end it as interrupted, not failed."""
    from tinker_tui.app.commands.attach import connect
    from tinker_tui.app.engine_process import EngineProcess, RunningEngine
    from tinker_tui.app.run_summary import SummaryCollector, summary_lines
    from tinker_tui.app.store_session import StoreSession
    from tinker_tui.engine.events import StepTrained
    from tinker_tui.engine.store import find_run

    db = tmp_path / "runs.db"
    monkeypatch.setenv("TINKER_TUI_FAULT", "train:slow:2")  # the stop waits for step 2
    engine = EngineProcess(
        ["run", "example", "--steps", "500", "--warmup-steps", "0", "--db", str(db)],
        run_id="r-1",
        db_path=db,
    )
    started = StoreSession(db, run_id="r-1", follow=True, poll_interval=0.05, engine=engine)
    steps: list[int] = []
    started.events.subscribe(lambda e: isinstance(e, StepTrained) and steps.append(e.step))
    summary = SummaryCollector(task="example", db_path=db)
    started.events.subscribe(summary.handle)
    running = asyncio.ensure_future(started.run())
    try:
        deadline = time.monotonic() + 120
        while not steps:
            assert time.monotonic() < deadline and not running.done()
            await asyncio.sleep(0.05)
        first_step = time.monotonic()
        control, run_id = await asyncio.to_thread(connect, db, "r-1")
        pid = engine.process.pid
        attached = StoreSession(
            db,
            await find_run(db, run_id),
            control=control,
            follow=True,
            poll_interval=0.05,
            engine=RunningEngine(db, run_id, pid),
        )
        following = asyncio.ensure_future(attached.run())
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - first_step)))  # step 2 trains
        engine.send_signal(signal.SIGINT)
        await asyncio.sleep(0.7)  # a second signal, not the same one twice
        engine.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(running, 30) == "interrupted"
        assert await asyncio.wait_for(following, 30) == "interrupted"
        code = await asyncio.to_thread(engine.process.wait, 30)
    finally:
        if engine.process is not None and engine.process.poll() is None:
            engine.process.kill()
    assert code == 143
    assert started.finished is not None
    # the engine recorded it before it exited (the store said `running` for ever)
    assert started.finished.reason == "SIGTERM while stopping: stopped at once"
    assert summary_lines(summary.summary())[0].startswith("run r-1 interrupted at step ")


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
    tmp_path, monkeypatch, capsys
):
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


def test_the_dashboard_says_what_a_stop_waits_for_and_how_to_stop_at_once():
    from tinker_tui.app.dashboard_state import DashboardState
    from tinker_tui.app.widgets.status_bar import state_badge_text
    from tinker_tui.engine.clock import FakeClock
    from tinker_tui.engine.events import RunStateChanged

    model = DashboardState(FakeClock())
    model.apply(RunStateChanged(time=1.0, state="stopping", reason="received SIGTERM"))
    assert state_badge_text(model) == "STOPPING: finishing the step · ctrl+c again: at once"
