"""The command line's answers to user mistakes: a clear message, exit code 2, no traceback."""

import os
import subprocess
import sys
import time

import pytest


def run_cli(*args, tmp_path, timeout=60):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TINKER_API_KEY", "TINKER_CREDENTIAL_CMD")}
    env["HOME"] = str(tmp_path)  # no stored Tinker credentials
    return subprocess.run([sys.executable, "-m", "tinker_tui.app.cli", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=tmp_path)


def test_tinker_backend_without_key_fails_at_once_naming_the_variable(tmp_path):
    started = time.monotonic()
    result = run_cli("run", "example", "--backend", "tinker", "--no-ui", tmp_path=tmp_path)
    assert result.returncode == 2
    assert "TINKER_API_KEY" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 30
    assert not (tmp_path / "runs").exists(), "nothing is created for a run that cannot start"


def test_unknown_task_is_a_usage_error(tmp_path):
    result = run_cli("run", "no-such-task", "--no-ui", tmp_path=tmp_path)
    assert result.returncode == 2
    assert "unknown task 'no-such-task'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("steps", ["0", "-3"])
def test_bad_step_count_is_a_usage_error(tmp_path, steps):
    result = run_cli("run", "example", "--no-ui", "--steps", steps, tmp_path=tmp_path)
    assert result.returncode == 2
    assert "max_steps must be at least 1" in result.stderr


def test_help_does_not_import_the_heavy_stack(tmp_path):
    result = run_cli("--help", tmp_path=tmp_path)
    assert result.returncode == 0
    assert "run" in result.stdout
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, tinker_tui.app.cli; "
         "print(any(m in sys.modules for m in ('torch', 'textual', 'tinker_cookbook')))"],
        capture_output=True, text=True)
    assert probe.stdout.strip() == "False"
