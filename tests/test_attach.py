"""`tinker-tui attach`: the control endpoint of a headless run, and a dashboard in another
process that pauses, resumes and stops it."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")

import pytest
from fake_session import FakeSession

from tinker_tui.app.commands.attach import connect, wait_for_run
from tinker_tui.app.interrupts import EXIT_OK
from tinker_tui.app.screens.confirm_quit import QuitScreen
from tinker_tui.app.store_session import StoreSession
from tinker_tui.app.tui import TinkerTuiApp
from tinker_tui.engine.control.client import find_control_file
from tinker_tui.engine.control.endpoint import (
    MAX_BODY,
    ControlClient,
    ControlServer,
    ControlUnavailable,
    RemoteControl,
    control_file_path,
)
from tinker_tui.engine.errors import UsageError

# ------------------------------------------------------------------ the endpoint, in process


async def test_the_endpoint_needs_the_token_and_applies_every_command(tmp_path):
    session = FakeSession()
    control_file = control_file_path(tmp_path / "runs.db", "run-1")
    server = ControlServer(session.control, run_id="run-1")
    await server.start(control_file)
    try:
        assert stat.S_IMODE(control_file.stat().st_mode) == 0o600
        description = json.loads(control_file.read_text())
        assert description["url"].startswith("http://127.0.0.1:")
        assert description["run_id"] == "run-1" and description["pid"] == os.getpid()

        wrong = ControlClient(description["url"], "not-the-token")
        with pytest.raises(PermissionError):
            await asyncio.to_thread(wrong.state)

        remote = RemoteControl(ControlClient.from_file(control_file))
        state = await asyncio.to_thread(remote.refresh)
        assert state["paused"] is False and state["knobs"]["learning_rate"] == 2e-3
        await asyncio.to_thread(remote.pause, "from another process")
        assert remote.paused and session.control.paused
        await asyncio.to_thread(remote.resume)
        await asyncio.to_thread(remote.request_checkpoint)
        await asyncio.to_thread(remote.request_eval)
        await asyncio.to_thread(remote.set_knob, "temperature", 0.7)
        assert remote.knobs()["temperature"] == 0.7
        with pytest.raises(ValueError, match="learning_rate must be between 0 and 1"):
            await asyncio.to_thread(remote.set_knob, "learning_rate", 5.0)
        with pytest.raises(ValueError, match="unknown command"):
            await asyncio.to_thread(remote.client.command, "explode")
        await asyncio.to_thread(remote.stop, "done")
        assert session.control.calls == [
            ("pause", "from another process"),
            ("resume", ""),
            ("request_checkpoint", ""),
            ("request_eval", ""),
            ("set_knob", "temperature=0.7"),
            ("stop", "done"),
        ]
    finally:
        await server.stop()
    assert not control_file.exists()
    with pytest.raises(ControlUnavailable):
        await asyncio.to_thread(remote.refresh)


async def test_the_endpoint_answers_bad_requests_in_its_json(tmp_path):
    session = FakeSession()
    server = ControlServer(session.control, run_id="run-1")
    await server.start()

    def call(method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        try:
            connection.request(
                method, path, body=body, headers={"Authorization": f"Bearer {server.token}"}
            )
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()

    try:
        assert await asyncio.to_thread(call, "POST", "/v1/state") == (405, {"error": "use GET"})
        assert await asyncio.to_thread(call, "GET", "/v1/command") == (405, {"error": "use POST"})
        assert await asyncio.to_thread(call, "GET", "/v2/x") == (
            404,
            {"error": "no such endpoint /v2/x"},
        )
        assert await asyncio.to_thread(call, "POST", "/v1/command", b"{" * (MAX_BODY + 1)) == (
            413,
            {"error": "body too large"},
        )
        assert await asyncio.to_thread(call, "POST", "/v1/command", b"{not json") == (
            400,
            {"error": "the body is not JSON"},
        )
        assert await asyncio.to_thread(call, "POST", "/v1/command", b'{"args": 1}') == (
            400,
            {"error": 'expected {"command": ..., "args": {...}}'},
        )
        assert session.control.calls == []
    finally:
        await server.stop()


async def test_a_half_sent_request_is_closed_after_the_timeout(tmp_path, caplog):
    caplog.set_level("DEBUG")
    session = FakeSession()
    server = ControlServer(session.control, run_id="run-1", request_timeout=0.3)
    await server.start()
    try:
        for request in (
            b"GET /v1/state HTTP/1.1\r\nHost: x\r\n",  # the head never ends
            b"POST /v1/command HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + server.token.encode()
            + b"\r\nContent-Length: 50\r\n\r\n{",
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(request)
            started = time.monotonic()
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, no answer
            assert 0.25 <= time.monotonic() - started < 3
            writer.close()
        assert session.control.calls == []
    finally:
        await server.stop()
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]


def test_attach_names_what_is_missing(tmp_path):
    with pytest.raises(UsageError, match="no control endpoint for any run"):
        connect(tmp_path / "runs.db", None)
    stale = control_file_path(tmp_path / "runs.db", "gone")
    stale.write_text(json.dumps({"url": "http://127.0.0.1:9", "token": "x", "run_id": "gone"}))
    with pytest.raises(UsageError, match="does not answer"):
        connect(tmp_path / "runs.db", "gone")


def test_attach_to_no_such_run_says_what_show_says(tmp_path):
    """`attach nosuchrun` said "no control endpoint for run 'nosuchrun'" where `show` said
    there is no such run; a run that has ended is named as such."""
    from test_show import write_run

    from tinker_tui.engine.store import NoSuchRun, find_run

    db = tmp_path / "runs.db"
    write_run(db)
    with pytest.raises(NoSuchRun) as shown:
        asyncio.run(find_run(db, "nosuchrun"))
    with pytest.raises(UsageError) as attached:
        connect(db, "nosuchrun")
    assert str(attached.value) == str(shown.value)
    assert str(attached.value).startswith("no run 'nosuchrun'")
    with pytest.raises(
        UsageError,
        match=r"run run-0001 is completed: nothing to attach to; "
        r"`tinker-tui show run-0001 --db ",
    ):
        connect(db, "run-0001")


# ------------------------------------------------------------------ a headless run in another process

ROOT = Path(__file__).resolve().parent.parent

#: A scripted run (real store, real control endpoint, real headless path) in its own process.
LIVE_FAKE_RUN = (
    "import asyncio, sys; sys.path[:0] = ['tests', '.']\n"
    "from fake_session import LiveFakeSession\n"
    "from tinker_tui.app.commands.run import run_headless\n"
    "sys.exit(asyncio.run(run_headless(LiveFakeSession(sys.argv[1]))))\n"
)


def start_process(args: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TINKER_API_KEY", None)
    return subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


async def attach_pause_resume_stop(proc: subprocess.Popen, db_path: Path, timeout: float) -> str:
    """Attach a dashboard to the run `proc` runs, press p, p, q, y; returns the run id."""
    deadline = time.monotonic() + timeout
    while not list(db_path.parent.glob("*.control.json")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no control endpoint appeared"
        await asyncio.sleep(0.05)
    control, run_id = connect(db_path, None)
    run = await wait_for_run(db_path, run_id)
    session = StoreSession(db_path, run, control=control, follow=True, poll_interval=0.1)
    app = TinkerTuiApp(session, refresh_interval=0.1)
    app.animation_level = "none"

    async with app.run_test(size=(80, 24)) as pilot:

        async def until(predicate, what: str, *, run_may_end: bool = False) -> None:
            while not predicate():
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                assert run_may_end or proc.poll() is None, proc.communicate()
                await pilot.pause(0.05)

        await until(lambda: app.state.step >= 2, "the run to train two steps")
        await pilot.press("p")
        await until(lambda: app.state.state == "paused", "the paused state in the store")
        assert control.paused and app.state.reason == "paused by user"
        await until(
            lambda: app.state.commands and app.state.commands[-1].command == "pause",
            "the pause command in the store",
        )
        # no new rollouts start: at most what was already sampled is trained
        await pilot.pause(0.5)
        paused_at = app.state.step
        await pilot.pause(1.0)
        assert app.state.step <= paused_at + 1

        await pilot.press("p")
        await until(lambda: app.state.state == "running", "the run to resume")
        await until(lambda: app.state.step >= paused_at + 2, "steps after resuming")
        assert not control.paused

        await pilot.press("q")
        assert isinstance(app.screen, QuitScreen) and app.screen.kind == "stop_attached"
        await pilot.press("y")  # stop the run, not only this dashboard
        # The run ends, then the dashboard (it reads the end from the store): the process
        # may well be gone first.
        await until(lambda: not app.is_running, "the run to stop", run_may_end=True)
    assert app.return_code == EXIT_OK and app.run_status == "stopped"
    return run_id


def check_finished(proc: subprocess.Popen, db_path: Path, run_id: str) -> None:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "paused: paused by user" in out and f"run {run_id} stopped at step" in out
    assert not list(db_path.parent.glob("*.control.json")), "the endpoint file is removed"
    lines = (db_path.parent / f"{run_id}.metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(line) for line in lines]
    assert metrics and metrics[0]["event"] == "step" and "reward/mean" in metrics[0]


async def test_attach_pauses_resumes_and_stops_a_headless_run_in_another_process(tmp_path):
    db_path = tmp_path / "runs.db"
    proc = start_process(["-c", LIVE_FAKE_RUN, str(db_path)])
    try:
        run_id = await attach_pause_resume_stop(proc, db_path, timeout=30)
        check_finished(proc, db_path, run_id)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.slow
async def test_attach_steers_the_real_example_run_headless(tmp_path):
    """The same, on `tinker-tui run example --no-ui` (the local backend: slower to start).
    Opt-in: the default suite proves it in two halves, the dashboard, endpoint and headless
    path with a scripted run (above), and p, p, d and q-y from `attach` on the real engine
    (test_lifecycle.py, the hang-up test)."""
    db_path = tmp_path / "runs.db"
    proc = start_process(
        [
            "-m",
            "tinker_tui.app.cli",
            "run",
            "example",
            "--no-ui",
            "--steps",
            "2000",
            "--warmup-steps",
            "0",
            "--checkpoint-every",
            "0",
            "--db",
            str(db_path),
        ]
    )
    try:
        run_id = await attach_pause_resume_stop(proc, db_path, timeout=150)
        check_finished(proc, db_path, run_id)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_checkpoint_asked_for_while_paused_is_written_at_once(tmp_path):
    """Paused with the trainer idle, the control endpoint's checkpoint command (what `c`
    sends from `attach`) writes the checkpoint at once, at the current step: the pause may
    last, the checkpoint must not wait for the resume."""
    import sqlite3

    db_path = tmp_path / "runs.db"
    proc = start_process(
        [
            "-m",
            "tinker_tui.app.cli",
            "run",
            "example",
            "--no-ui",
            "--steps",
            "2000",
            "--warmup-steps",
            "0",
            "--checkpoint-every",
            "0",
            "--db",
            str(db_path),
        ]
    )

    def last_step() -> int:
        try:
            with sqlite3.connect(db_path) as db:
                return db.execute("select coalesce(max(step), 0) from steps").fetchone()[0]
        except sqlite3.OperationalError:  # the store is being made
            return 0

    def checkpoints() -> list[int]:
        with sqlite3.connect(db_path) as db:
            return [
                r[0]
                for r in db.execute(
                    "select step from checkpoints where kind = 'state' and confirmed = 1"
                )
            ]

    def until(predicate, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)

    try:
        until(lambda: list(tmp_path.glob("*.control.json")), "the control endpoint", 120)
        client = ControlClient.from_file(find_control_file(db_path))
        until(lambda: db_path.exists() and last_step() >= 2, "two steps", 120)
        assert client.command("pause")["state"]["paused"]
        quiet = [last_step(), time.monotonic()]  # the in-flight groups are trained (or not)

        def trainer_idle() -> bool:
            if last_step() != quiet[0]:
                quiet[:] = [last_step(), time.monotonic()]
            return time.monotonic() - quiet[1] > 1.5

        until(trainer_idle, "the paused run to go quiet", 30)
        step = last_step()
        assert checkpoints() == []
        client.command("checkpoint")
        until(lambda: checkpoints() == [step], f"the checkpoint of step {step}", 15)
        assert client.state()["paused"] and last_step() == step
        client.command("stop")
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    with sqlite3.connect(db_path) as db:
        log = [r[0] for r in db.execute("select message from log")]
    assert "checkpoint requested; the run is paused: writing it now" in log
    assert "run yes_no_maybe" in out and f"stopped at step {step}/2000" in out
