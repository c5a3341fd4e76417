"""The root of every error tinker-tui raises on purpose, and the exit code each one means.

Each error class says, once, what the process exits with when it reaches the command line:
`UsageError` (and everything below it: a bad setting, task, store or environment) exits 2
with one line and no traceback; any other `TinkerTuiError` is a failed run and exits 1. The
command line catches `TinkerTuiError` in one place (`app.cli.main`) and prints it.

Error classes keep the builtin base that callers catch where one fits (`ConfigError` is
still a `ValueError`, `ControlUnavailable` a `ConnectionError`). The local backend's errors
are not here: they mirror the Tinker SDK's classes, as the real service raises them.
"""

from __future__ import annotations

from typing import ClassVar

EXIT_OK = 0
#: The run failed (or a bug): one line, the traceback with TINKER_TUI_DEBUG=1.
EXIT_FAILED = 1
#: A mistake the user can fix before anything runs: one line.
EXIT_USAGE = 2


class TinkerTuiError(Exception):
    """An error tinker-tui raises on purpose; `exit_code` is what the command line exits
    with when it gets there."""

    exit_code: ClassVar[int] = EXIT_FAILED


class UsageError(TinkerTuiError):
    """A mistake on the command line, in the settings, the task, the store or the
    environment: the message says what to change."""

    exit_code: ClassVar[int] = EXIT_USAGE
