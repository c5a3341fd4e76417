"""The command line's answers to user mistakes: a clear message, exit code 2, no traceback."""

import json
import os
import subprocess
import sys
import time

import pytest


def run_cli(*args, tmp_path, timeout=60):
    env = {
        k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "TINKER_CREDENTIAL_CMD")
    }
    env["HOME"] = str(tmp_path)  # no stored Tinker credentials
    return subprocess.run(
        [sys.executable, "-m", "tinker_tui.app.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=tmp_path,
    )


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
        [
            sys.executable,
            "-c",
            "import sys, tinker_tui.app.cli; "
            "print(any(m in sys.modules for m in ('torch', 'textual', 'tinker_cookbook')))",
        ],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "False"


def test_the_dashboard_is_drawn_before_the_engine_stack_is_imported(tmp_path):
    """What `run TASK` does before the dashboard's first frame (check the plan, import the
    app and what watches the engine's process) imports nothing heavy: the first frame does
    not wait for torch."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from tinker_tui.app.cli import build_parser\n"
            "from tinker_tui.app.commands.run import plan_run\n"
            "from tinker_tui.app.engine_process import EngineProcess\n"
            "from tinker_tui.app.store_session import StoreSession\n"
            "from tinker_tui.app.tui import TinkerTuiApp\n"
            "from tinker_tui.app.watch import watch\n"
            "plan_run(build_parser().parse_args(['run', 'example', '--db', sys.argv[1]]))\n"
            "print(sorted(m for m in ('torch', 'transformers', 'tinker_cookbook', 'tinker', "
            "'numpy', 'fastapi', 'uvicorn') if m in sys.modules))",
            str(tmp_path / "runs.db"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "[]"


# ------------------------------------------------------------------ usage errors come first

#: Each mistake, what the one-line answer must say, and nothing heavy imported to say it.
USAGE_ERRORS = [
    (["run", "exampel"], "did you mean 'example'?"),
    (["run", "example", "--steps", "-1"], "max_steps must be at least 1"),
    (["run", "example", "--steps", "0"], "max_steps must be at least 1"),
    (["run", "example", "--learning-rate", "-1"], "learning_rate must be between 0 and 1"),
    (["run", "example", "--learning-rat", "1e-3"], "did you mean '--learning-rate'?"),
    (["run", "example", "--backend", "lokal"], "did you mean 'local'?"),
    (["run", "example", "--loss-fn", "ppx"], "did you mean 'ppo'?"),
    (["runs", "--db", "{tmp}/none.db"], "does not exist"),
    (["attach", "--db", "{tmp}/none.db"], "no control endpoint"),
    (["rn", "example"], "did you mean 'run'?"),
    (["run", "example", "--backend", "tinker"], "TINKER_API_KEY"),
    (["run", "example", "--db", "/nonexistent/dir/x.db"], "does not exist"),
    (["run", "example", "--db", "{tmp}/garbage.db"], "not a SQLite database"),
    (["run", "example", "--db", "{tmp}"], "is a folder"),
    (["run", "example", "--config", "{tmp}/bad.toml"], "did you mean 'learning_rate'?"),
    (["run", "{tmp}/broken_task.py"], "syntax error at line 2"),
    (["run", "example", "--resume", "--db", "{tmp}/none.db"], "nothing to resume"),
    (["show", "--db", "{tmp}/none.db"], "does not exist"),
    (["run", "example", "--base-model", "{tmp}/no-model"], "no-model/config.json does not exist"),
    (["run", "example", "--base-model", "Qwen/Qwen3-8B"], "Unknown base model 'Qwen/Qwen3-8B'"),
    (["run", "example", "--steps", "99999999999999999999"], "the largest whole number"),
    (["export", "nope", "--db", "{tmp}/garbage.db"], "not a SQLite database"),
]

HEAVY = ("torch", "transformers", "tinker_cookbook", "tinker", "textual", "numpy")

PROBE = """
import contextlib, io, json, sys
from tinker_tui.app.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    heavy = [m for m in json.loads(sys.argv[2]) if m in sys.modules]
    results.append({"code": code, "stderr": err.getvalue(), "heavy": heavy})
print(json.dumps(results))
"""


def test_every_usage_error_answers_in_one_line_without_importing_torch(tmp_path):
    (tmp_path / "garbage.db").write_bytes(b"this is not a database" * 100)
    (tmp_path / "bad.toml").write_text("learnin_rate = 1e-3\n")
    (tmp_path / "broken_task.py").write_text("x = 1\ndef (:\n")
    cases = [[a.replace("{tmp}", str(tmp_path)) for a in argv] for argv, _ in USAGE_ERRORS]
    env = {
        k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "TINKER_CREDENTIAL_CMD")
    }
    env["HOME"] = str(tmp_path)  # no stored Tinker credentials
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(cases), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    results = json.loads(probe.stdout)
    for (argv, expected), result in zip(USAGE_ERRORS, results, strict=True):
        assert result["code"] == 2, (argv, result)
        assert expected in result["stderr"], (argv, result["stderr"])
        lines = [line for line in result["stderr"].splitlines() if line.strip()]
        assert len(lines) <= 2 and "Traceback" not in result["stderr"], (argv, lines)
        assert result["heavy"] == [], (argv, result["heavy"])
    assert not (tmp_path / "runs").exists(), "nothing is created for a run that cannot start"
