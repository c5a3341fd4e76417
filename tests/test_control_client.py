"""`tinker_tui.control.connect`: the public client of a run's control endpoint, on a
scripted run in another process (real store, real endpoint, real headless path), with the
operations and errors docs/control-api.md lists."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from test_attach import LIVE_FAKE_RUN, start_process

from tinker_tui import control
from tinker_tui.app.commands.common import DEFAULT_DB
from tinker_tui.engine.control.client import control_file_path


def test_the_default_store_is_the_command_lines():
    assert control.DEFAULT_STORE == DEFAULT_DB


def test_no_running_run_is_named_as_such(tmp_path):
    db = tmp_path / "runs.db"
    with pytest.raises(control.NoEndpoint, match="no control endpoint for any run"):
        control.connect(db=db)
    with pytest.raises(control.NoEndpoint, match="no running run 'abc'") as caught:
        control.connect("abc", db=db)
    assert caught.value.wanted == "abc"
    # a control file whose process is gone: stale, named with its pid
    stale = control_file_path(db, "gone-1")
    stale.write_text(json.dumps({"url": "http://127.0.0.1:9", "token": "x", "pid": 2**22 + 1}))
    with pytest.raises(control.RunNotRunning, match=r"run gone-1 is not running") as gone:
        control.connect(db=db)
    assert gone.value.pid == 2**22 + 1 and gone.value.control_file == stale
    # one that names no process, where nothing listens
    control_file_path(db, "deaf-1").write_text(
        json.dumps({"url": "http://127.0.0.1:9", "token": "x"})
    )
    with pytest.raises(control.ControlUnavailable, match="does not answer"):
        control.connect("deaf", db=db)


def test_connect_and_every_operation_on_a_live_run(tmp_path):
    db: Path = tmp_path / "runs.db"
    proc = start_process(["-c", LIVE_FAKE_RUN, str(db)])
    try:
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob("*.control.json")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no control endpoint appeared"
            time.sleep(0.05)
        run = control.connect(db=db)
        assert run.run_id == "live-0001" and run.pid == proc.pid
        assert control.connect("live", db=db).run_id == "live-0001"  # a prefix
        state = run.status()
        assert set(state) == {"run_id", "paused", "stopping", "knobs"}
        assert state["paused"] is False and "learning_rate" in state["knobs"]
        assert run.pause("a script looks")["paused"] is True
        assert run.checkpoint()["paused"] is True
        assert run.evaluate()["paused"] is True
        assert run.set("temperature", 0.7)["knobs"]["temperature"] == 0.7
        with pytest.raises(control.CommandRefused, match="learning_rate must be between") as bad:
            run.set("learning_rate", 5.0)
        assert bad.value.status == 400 and isinstance(bad.value, ValueError)
        with pytest.raises(control.CommandRefused, match="cannot be changed live"):
            run.set("max_steps", 3)
        assert run.resume()["paused"] is False
        assert run.rollback("a script rolls back", lr_scale=0.5)["stopping"] is False
        wrong = control.ControlClient(run.url, "not-the-token")
        with pytest.raises(PermissionError):
            wrong.status()
        assert run.stop("done")["stopping"] is True
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "paused: a script looks" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    with pytest.raises(control.NoEndpoint):
        control.connect(db=db)


def test_the_client_loads_no_web_framework_nor_torch():
    """A script (or a dashboard) that imports the client starts at once."""
    import subprocess
    import sys

    code = (
        "import sys, tinker_tui.control; "
        "print(sorted(m for m in ('torch', 'starlette', 'uvicorn', 'textual', 'aiosqlite') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "[]"
