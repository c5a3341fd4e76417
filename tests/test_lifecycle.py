"""The life cycle of `tinker-tui run` with the dashboard, end to end: the dashboard runs on
a real pseudo-terminal (80x24) and its engine, the real headless run of the example on the
local backend, in its own process. Signals come from outside, as a user's `kill` would.

- SIGINT to the dashboard stops the run gracefully, then it leaves with 130.
- SIGTERM the same with 143; a second one while stopping stops the engine at once.
- The terminal closing (SIGHUP) and `kill -9` of a dashboard leave the run going: `runs`
  lists it as running and `attach` brings it back; pause, resume, detach and stop from there.
- The run completing shows the finish screen until `q`; the terminal gets the summary.
- The engine killed shows as failed with its last log lines; an engine that fails before
  its run starts has its error printed, with its exit code.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import signal
import sqlite3
import struct
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from tinker_tui.engine.training.resume import RunLock, run_is_live

ROOT = Path(__file__).resolve().parent.parent
#: A short real run: no warm-up, no periodic checkpoint, no health pauses.
RUN_ARGS = ["--warmup-steps", "0", "--checkpoint-every", "0", "--health-window", "100000"]
ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][A-Z0-9]|[=>78])")
TIMEOUT = 120.0


class Dashboard:
    """`tinker-tui ARGS` on a pseudo-terminal of `size`, as a terminal would run it."""

    def __init__(self, args: list[str], *, size: tuple[int, int] = (80, 24)) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "TINKER_API_KEY")}
        env.update(TERM="xterm-256color", TEXTUAL_ANIMATIONS="none", PYTHONUNBUFFERED="1")
        argv = [sys.executable, "-m", "tinker_tui.app.cli", *args]
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: a session of its own with the terminal as its tty
            try:
                os.chdir(ROOT)
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        columns, rows = size
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self._output = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.returncode: int | None = None

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self._output += chunk

    def text(self) -> str:
        """Everything drawn or printed so far, escape sequences removed."""
        with self._lock:
            raw = self._output.decode(errors="replace")
        return ANSI.sub("", raw)

    def wait_for(self, pattern: str, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.text()):
            if self.poll() is not None:
                time.sleep(0.3)
                if re.search(pattern, self.text()):
                    return
                raise AssertionError(
                    f"the dashboard exited ({self.returncode}) before "
                    f"{pattern!r} showed:\n{self.text()[-3000:]}"
                )
            assert time.monotonic() < deadline, f"{pattern!r} never showed:\n{self.text()[-3000:]}"
            time.sleep(0.05)

    def wait_for_bytes(self, marker: bytes, timeout: float = TIMEOUT) -> None:
        """Until `marker` was written to the terminal (raw, escape sequences and all)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if marker in self._output:
                    return
            assert self.poll() is None, f"the dashboard exited ({self.returncode})"
            assert time.monotonic() < deadline, f"{marker!r} never written"
            time.sleep(0.002)

    def press(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def kill(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float = TIMEOUT) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            assert time.monotonic() < deadline, (
                f"the dashboard did not exit:\n{self.text()[-3000:]}"
            )
            time.sleep(0.05)
        self._reader.join(timeout=5)
        assert self.returncode is not None
        return self.returncode

    def hang_up(self) -> None:
        """Close the terminal: the kernel sends SIGHUP to the dashboard."""
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def close(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        with contextlib.suppress(OSError):
            os.close(self.fd)


@pytest.fixture
def dashboards():
    started: list[Dashboard] = []

    def start(args: list[str], **kwargs) -> Dashboard:
        dashboard = Dashboard(args, **kwargs)
        started.append(dashboard)
        return dashboard

    yield start
    for dashboard in started:
        dashboard.close()


@pytest.fixture
def store(tmp_path):
    """The run store; at the end, no engine of a test is left running."""
    db = tmp_path / "runs.db"
    yield db
    for control in tmp_path.glob("*.control.json"):
        with contextlib.suppress(Exception):
            os.kill(json.loads(control.read_text())["pid"], signal.SIGKILL)


def query(db: Path, sql: str) -> list[tuple]:
    if not db.exists():
        return []
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:  # not created yet
            return []


def wait_for_step(db: Path, step: int, dashboard: Dashboard | None = None) -> str:
    """Wait until the run in `db` trained `step`; its run id."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        rows = query(db, "select run_id, max(step) from steps")
        if rows and rows[0][1] is not None and rows[0][1] >= step:
            return rows[0][0]
        if dashboard is not None:
            assert dashboard.poll() is None, dashboard.text()[-3000:]
        assert time.monotonic() < deadline, f"no step {step} in time"
        time.sleep(0.1)


def run_row(db: Path) -> tuple:
    (row,) = query(db, "select run_id, status, final_step from runs")
    return row


def engine_pid(db: Path, run_id: str) -> int:
    control = db.parent / f"{run_id}.control.json"
    return int(json.loads(control.read_text())["pid"])


def wait_until_gone(db: Path, run_id: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while run_is_live(db, run_id):
        assert time.monotonic() < deadline, "the engine did not end"
        time.sleep(0.1)


def start_run(dashboards, db: Path, *extra: str) -> Dashboard:
    return dashboards(["run", "example", "--db", str(db), *RUN_ARGS, *extra])


# ------------------------------------------------------------------ signals to the dashboard


def test_sigint_to_the_dashboard_stops_the_run_gracefully_and_exits_130(dashboards, store):
    dashboard = start_run(dashboards, store, "--steps", "500")
    run_id = wait_for_step(store, 1, dashboard)
    assert (store.parent / f"{run_id}.engine.log").is_file()
    dashboard.kill(signal.SIGINT)
    assert dashboard.wait() == 130
    _, status, final_step = run_row(store)
    assert status == "stopped" and final_step >= 1
    assert query(store, "select max(step) from checkpoints")[0][0] == final_step
    assert not run_is_live(store, run_id)
    out = dashboard.text()
    assert f"run {run_id} stopped at step {final_step}/500 (received SIGINT)" in out, out[-1500:]
    assert f"tinker-tui run example --resume {run_id} --db {store}" in out


def test_sigterm_twice_stops_the_engine_at_once_with_the_store_intact(
    dashboards, store, monkeypatch
):
    monkeypatch.setenv("TINKER_TUI_FAULT", "train:slow:2")  # step 2 trains for seconds
    dashboard = start_run(dashboards, store, "--steps", "500")
    run_id = wait_for_step(store, 1, dashboard)
    time.sleep(1.0)  # step 2's training is under way: the graceful stop waits for it
    dashboard.kill(signal.SIGTERM)
    time.sleep(0.7)  # a second signal, once the stop was announced (not the same one twice)
    dashboard.kill(signal.SIGTERM)  # while it stops (a graceful stop may take a step)
    started = time.monotonic()
    assert dashboard.wait(timeout=30) == 143
    assert time.monotonic() - started < 10
    wait_until_gone(store, run_id, timeout=10)
    assert query(store, "pragma integrity_check") == [("ok",)]
    steps = [r[0] for r in query(store, "select step from steps order by step")]
    assert steps == list(range(1, len(steps) + 1))
    assert run_row(store)[1] == "interrupted"


def test_sigterm_twice_within_a_moment_is_one_graceful_stop(dashboards, store):
    """`timeout` (or a kill of a job's group) signals the dashboard twice, 20 ms apart."""
    dashboard = start_run(dashboards, store, "--steps", "500")
    run_id = wait_for_step(store, 1, dashboard)
    dashboard.kill(signal.SIGTERM)
    time.sleep(0.02)
    dashboard.kill(signal.SIGTERM)
    assert dashboard.wait(timeout=60) == 143
    _, status, final_step = run_row(store)
    assert status == "stopped" and final_step >= 1
    assert query(store, "select max(step) from checkpoints")[0][0] == final_step
    assert f"run {run_id} stopped at step {final_step}/500 (received SIGTERM)" in dashboard.text()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_before_the_engine_starts_leaves_no_run_and_one_line(dashboards, store, signum):
    """The engine starts once the dashboard has drawn its first frame. A signal sent once
    the dashboard has taken the terminal (before its first frame) cancels that start: the
    command leaves with 130/143 and one line, the engine never ran (no log) and the store
    has no run."""
    dashboard = start_run(dashboards, store, "--steps", "500")
    dashboard.wait_for_bytes(b"\x1b[?1049h")  # the alternate screen: the app has started
    dashboard.kill(signum)
    assert dashboard.wait() == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum]
    out = dashboard.text()
    assert re.search(r"run \S+ stopped before it started\s*$", out), out[-1500:]
    assert "Traceback" not in out
    assert not list(store.parent.glob("*.engine.log")), "the engine started"
    assert query(store, "select run_id from runs") == []


# ------------------------------------------------------------------ the run outlives its dashboard


def test_hangup_and_kill_9_leave_the_run_going_and_attach_brings_it_back(dashboards, store, capfd):
    from tinker_tui.app.cli import main

    dashboard = start_run(dashboards, store, "--steps", "500")
    run_id = wait_for_step(store, 1, dashboard)
    dashboard.hang_up()  # the terminal closes
    assert dashboard.wait() == 129
    step = query(store, "select max(step) from steps")[0][0]
    wait_for_step(store, step + 1)  # still training without its dashboard
    assert run_is_live(store, run_id)
    capfd.readouterr()
    assert main(["runs", "--db", str(store)]) == 0
    assert re.search(rf"{run_id}\s.*\srunning\s", capfd.readouterr().out)

    attached = dashboards(["attach", "--db", str(store)], size=(160, 48))
    attached.wait_for("ATTACHED|attached")
    attached.kill(signal.SIGKILL)
    attached.wait()
    later = query(store, "select max(step) from steps")[0][0]
    wait_for_step(store, later + 1)  # still training
    assert later >= step and run_is_live(store, run_id)

    attached = dashboards(["attach", run_id, "--db", str(store)])
    attached.wait_for("RUNNING")
    # p pauses the engine through its control endpoint: its store says so, and the badge
    # (drawn from the store) too; no new rollouts start, so at most one more step trains
    attached.press("p")
    attached.wait_for("PAUSED: paused by user")
    assert query(store, "select command from commands") == [("pause",)]
    paused_at = query(store, "select max(step) from steps")[0][0]
    time.sleep(1.0)
    assert query(store, "select max(step) from steps")[0][0] <= paused_at + 1
    attached.press("p")  # resumes: it trains on
    wait_for_step(store, paused_at + 2, attached)
    assert query(store, "select command from commands") == [("pause",), ("resume",)]
    attached.press("q")
    attached.wait_for(r"Detach \(d\)")
    attached.press("d")
    assert attached.wait() == 0
    assert f"tinker-tui attach {run_id} --db {store}" in attached.text()
    assert run_is_live(store, run_id)

    attached = dashboards(["attach", run_id, "--db", str(store)])
    attached.wait_for("RUNNING")
    attached.press("q")
    attached.wait_for(r"Stop run \(y\)")
    attached.press("y")
    assert attached.wait() == 0
    wait_until_gone(store, run_id)
    _, status, final_step = run_row(store)
    assert status == "stopped"
    assert f"run {run_id} stopped at step {final_step}/500 (stopped by user)" in attached.text()


# ------------------------------------------------------------------ the end of a run


def test_a_completed_run_shows_the_finish_screen_until_q_then_the_summary(dashboards, store):
    dashboard = start_run(dashboards, store, "--steps", "2")
    dashboard.wait_for("Run completed")
    time.sleep(0.5)
    assert dashboard.poll() is None  # the finish screen stays
    run_id, status, final_step = run_row(store)
    assert (status, final_step) == ("completed", 2)
    dashboard.press("q")
    assert dashboard.wait() == 0
    after = dashboard.text().rsplit("Run completed", 1)[1]
    assert f"run {run_id} completed at step 2/2 (reached max_steps)" in after
    assert "last checkpoint: step-000002 (step 2)" in after
    assert f"tinker-tui show {run_id} --db {store}" in after


def test_the_engine_killed_shows_as_failed_with_its_last_log_lines(dashboards, store):
    dashboard = dashboards(
        ["run", "example", "--db", str(store), *RUN_ARGS, "--steps", "500"], size=(160, 48)
    )
    run_id = wait_for_step(store, 1, dashboard)
    os.kill(engine_pid(store, run_id), signal.SIGKILL)
    dashboard.wait_for("Run failed")
    dashboard.wait_for("killed by SIGKILL")
    dashboard.wait_for(f"engine: run {run_id}: task yes_no_maybe")  # its log's last lines
    dashboard.press("q")
    assert dashboard.wait() == 1
    assert f"run {run_id} failed at step" in dashboard.text()


@pytest.mark.slow  # opt in (-m slow): the engine imports torch before it takes the run
def test_an_engine_that_fails_before_its_run_starts_prints_its_error(dashboards, store):
    """A failure only the engine meets: its run's lock is held by another process (as when
    two `--resume`s of one run pass their dashboards' checks together). Held here from the
    start, with the run id pinned as the dashboard pins it for its engine, so the dashboard,
    which checks everything else before it starts the engine, cannot refuse it first."""
    run_id = "example-held-elsewhere"
    held = RunLock(store, run_id)
    held.acquire()
    try:
        dashboard = start_run(dashboards, store, "--steps", "5", "--run-id", run_id)
        code = dashboard.wait()
    finally:
        held.release()
    out = dashboard.text()
    said = f"run {run_id} is running in another process (pid {os.getpid()})"
    assert said in out  # the engine's own error, from its output
    assert code == 2  # the engine's own exit code (a usage error), passed on
    assert "the engine exited with code 2 before the run started" in out
    assert not query(store, "select run_id from runs")  # nothing of it was stored
