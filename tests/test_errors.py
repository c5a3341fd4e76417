"""One error root: every error class tinker-tui defines derives from `TinkerTuiError` and
carries its exit code, and the command line turns any of them into one line and that code."""

import argparse
import importlib
import inspect
import pkgutil

import httpx
import pytest
import tinker

import tinker_tui.app
import tinker_tui.engine
from tinker_tui.app import cli
from tinker_tui.engine.backend.choice import BackendError
from tinker_tui.engine.backend.retry import BackendTimeoutError
from tinker_tui.engine.config import ConfigError
from tinker_tui.engine.errors import EXIT_FAILED, EXIT_USAGE, TinkerTuiError, UsageError
from tinker_tui.engine.rollouts.task import TaskError
from tinker_tui.engine.rollouts.trajectory import TrajectoryError
from tinker_tui.engine.store import StoreError


def defined_exception_classes():
    """(module name, class) for every exception class defined in tinker_tui.app and .engine."""
    names = []
    for package in (tinker_tui.app, tinker_tui.engine):
        names += [
            info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
        ]
    found = []
    for name in names:
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == name:
                found.append((name, value))
    return found


def test_every_error_class_derives_from_the_root_or_mirrors_the_sdk():
    classes = defined_exception_classes()
    assert len(classes) >= 14
    strays = [
        f"{module}.{cls.__name__}"
        for module, cls in classes
        if not issubclass(cls, TinkerTuiError | tinker.TinkerError)
    ]
    assert strays == []
    # The local backend's errors are the SDK's classes (as the real service raises them).
    local = [cls for module, cls in classes if module.startswith("tinker_tui.engine.local")]
    assert local and all(issubclass(cls, tinker.TinkerError) for cls in local)


def test_builtin_bases_are_kept_where_callers_catch_them():
    assert issubclass(ConfigError, ValueError) and issubclass(TaskError, ValueError)
    assert issubclass(TrajectoryError, ValueError)
    assert issubclass(BackendTimeoutError, TimeoutError)
    from tinker_tui.engine.control.endpoint import ControlUnavailable

    assert issubclass(ControlUnavailable, ConnectionError)


@pytest.mark.parametrize(
    "error, code",
    [
        (ConfigError("max_steps must be at least 1, got 0"), EXIT_USAGE),
        (TaskError("the task has no rollout"), EXIT_USAGE),
        (StoreError("run store x.db does not exist"), EXIT_USAGE),
        (BackendError("set TINKER_API_KEY"), EXIT_USAGE),
        (UsageError("no run 'x'"), EXIT_USAGE),
        (TrajectoryError("reward is nan"), EXIT_FAILED),
        (BackendTimeoutError("forward_backward took over 600 s"), EXIT_FAILED),
        (RuntimeError("a bug"), EXIT_FAILED),
    ],
)
def test_the_command_line_prints_one_line_and_exits_with_the_errors_code(
    monkeypatch, capsys, error, code
):
    command = importlib.import_module("tinker_tui.app.commands.runs")

    def fail(args: argparse.Namespace) -> int:
        raise error

    monkeypatch.setattr(command, "main", fail)
    monkeypatch.delenv("TINKER_TUI_DEBUG", raising=False)
    assert cli.main(["runs"]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(error) in err and "Traceback" not in err
    assert err.startswith(
        "tinker-tui: error: " if code == EXIT_USAGE else "tinker-tui: runs failed: "
    )


@pytest.mark.parametrize("name", ["run", "eval", "chat", "export-model", "sweep", "serve"])
def test_a_commands_failure_names_the_command_not_a_run(monkeypatch, capsys, name):
    """A backend failing a command that is not a run says which command failed ("eval
    failed: ..."), in one line, and exits 1 (a run's own still says "run failed")."""
    command = importlib.import_module(f"tinker_tui.app.commands.{name.replace('-', '_')}")
    error = tinker.APIConnectionError(request=httpx.Request("POST", "http://service"))

    def fail(args: argparse.Namespace) -> int:
        raise error

    monkeypatch.setattr(command, "main", fail)
    monkeypatch.delenv("TINKER_TUI_DEBUG", raising=False)
    assert cli.main(_argv(name)) == EXIT_FAILED
    err = capsys.readouterr().err
    assert err == (
        f"tinker-tui: {name} failed: APIConnectionError: {error} "
        "(set TINKER_TUI_DEBUG=1 for the traceback)\n"
    )


def _argv(name: str) -> list[str]:
    """The least each command parses."""
    return {
        "run": ["run", "example"],
        "eval": ["eval", "example", "--model", "m"],
        "chat": ["chat", "r"],
        "export-model": ["export-model", "r@1", "out"],
        "sweep": ["sweep", "example", "--grid", "learning_rate=1e-3,1e-4"],
        "serve": ["serve"],
    }[name]
