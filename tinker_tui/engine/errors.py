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

import errno
import os

EXIT_OK = 0
#: The run failed (or a bug): one line, the traceback with TINKER_TUI_DEBUG=1.
EXIT_FAILED = 1
#: A mistake the user can fix before anything runs: one line.
EXIT_USAGE = 2
#: The codes of how a run ended (a health stop, trained nothing, a budget stop) and of the
#: signals are the app's (`app.exit_codes`, which lists every code).


class TinkerTuiError(Exception):
    """An error tinker-tui raises on purpose; `exit_code` is what the command line exits
    with when it gets there (a class's own, or an instance's: an engine's that ended)."""

    exit_code: int = EXIT_FAILED


class UsageError(TinkerTuiError):
    """A mistake on the command line, in the settings, the task, the store or the
    environment: the message says what to change."""

    exit_code: int = EXIT_USAGE


class DiskFull(TinkerTuiError, OSError):
    """A write failed because the disk (or the user's quota on it) is full. The run stops
    and fails; what it had confirmed is kept, so `--resume` continues it once there is room."""

    @classmethod
    def writing(cls, what: str, path: str | os.PathLike[str]) -> DiskFull:
        """The error for `what` (a checkpoint, the run store...) that could not be written
        to `path`: it says the disk is full, where, and how much room is left."""
        import shutil  # here: every command imports this module first, before its signals
        from pathlib import Path  # are handled, so it imports only what all need

        folder = Path(path)
        while not folder.is_dir() and folder != folder.parent:
            folder = folder.parent
        try:
            free = f"{shutil.disk_usage(folder).free / 2**20:.1f} MiB free on its disk"
        except OSError:
            free = "free space unknown"
        return cls(
            f"no space left on device writing {what} {path} ({free}); make room "
            "there, then continue the run with --resume"
        )


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` says the disk (or the quota) is full: ENOSPC or EDQUOT from the OS,
    SQLITE_FULL from SQLite."""
    if isinstance(exc, DiskFull):
        return True
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == 13  # SQLITE_FULL (extended codes keep it)
