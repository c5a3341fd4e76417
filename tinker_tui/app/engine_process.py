"""The engine in a process of its own, watched by a dashboard.

`tinker-tui run TASK` with the dashboard starts the headless run — the same command with
`--no-ui`, and the run id it chose pinned with `--run-id` — as `EngineProcess`, once the
dashboard has drawn its first frame: in a new
session (its own process group, so neither the terminal's Ctrl+C nor its hangup reaches
it), stdin from /dev/null, stdout and stderr appended to `RUN_ID.engine.log` beside the
store. The dashboard then reads the run from the store and steers it through its control
endpoint, exactly as `tinker-tui attach` does; the engine never depends on the dashboard
staying.

`RunningEngine` is the same view of a run some other process runs (`attach`): alive while
it holds the run's lock, signalled through the pid in its control file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Protocol

from tinker_tui.app.interrupts import EXIT_CODES, EXIT_FAILED
from tinker_tui.engine.errors import TinkerTuiError

ENGINE_LOG_SUFFIX = ".engine.log"
#: Lines of the engine's log a failure shows.
LOG_TAIL_LINES = 12
#: `exit_code()` of an engine that is gone when this process cannot know how it ended.
EXIT_UNKNOWN = -255


def engine_log_path(db_path: str | Path, run_id: str) -> Path:
    """Where the engine a dashboard started writes its output: beside the store."""
    return Path(db_path).expanduser().parent / f"{run_id}{ENGINE_LOG_SUFFIX}"


def log_tail(path: Path | None, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last `lines` non-empty lines of a log file ([] if there is none)."""
    if path is None:
        return []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return list(deque((line.rstrip("\n") for line in f if line.strip()), maxlen=lines))
    except OSError:
        return []


def describe_exit(code: int) -> str:
    """`exited with code 1`, `was killed by SIGKILL`, ..."""
    if code == EXIT_UNKNOWN:
        return "ended"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def exit_interrupts(code: int) -> bool:
    """Whether an engine that ended this way, without recording the run's end, interrupted
    the run rather than failed it: it stopped at once for a second SIGINT/SIGTERM (130/143,
    or killed by one), or it ended where this process cannot know how (as `tinker-tui runs`
    calls such a run interrupted). Either way `--resume` continues it."""
    return code == EXIT_UNKNOWN or code in EXIT_CODES.values() or -code in EXIT_CODES


class EngineExited(TinkerTuiError):
    """The engine ended before its run could be watched (a bad task, a broken store...):
    `lines` is what it said (its log's last lines), `exit_code` its own exit code."""

    def __init__(self, code: int, lines: list[str], log_path: Path | None) -> None:
        self.exit_code = code if code > 0 else EXIT_FAILED
        self.lines = lines
        self.log_path = log_path
        super().__init__(f"the engine {describe_exit(code)} before the run started")


class Engine(Protocol):
    """The process that runs a watched run."""

    log_path: Path | None

    def exit_code(self) -> int | None:
        """None while it runs; its exit code once gone (negative: killed by that signal;
        EXIT_UNKNOWN for a process that is gone but whose code this process cannot know)."""

    def send_signal(self, signum: int) -> bool:
        """Signal it (SIGINT/SIGTERM: the headless run's own stop); False if it is gone."""

    async def start(self) -> None:
        """Start it, where this process is the one to (and it has not started)."""


class EngineProcess:
    """An engine this dashboard starts (see the module docstring).

    It starts when the dashboard asks (`start`: once its first frame is drawn, so the
    engine's imports do not compete with the dashboard's for the CPU). A signal before that
    cancels it: it never starts, nothing of its run is stored, and its exit code is the
    signal's, as if it had started and been stopped by it at once."""

    def __init__(
        self, run_args: list[str], *, run_id: str, db_path: str | Path, watched: bool = True
    ) -> None:
        """`tinker-tui <run_args> --no-ui --watched --run-id RUN_ID`, not started yet
        (run_args: the `run` command's arguments as the user gave them). `watched`: False
        for a run no one watches as it goes (a sweep's): a health pause stops it."""
        self.command = [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            *run_args,
            "--no-ui",
            *(["--watched"] if watched else []),
            "--run-id",
            run_id,
        ]
        self.log_path: Path | None = engine_log_path(db_path, run_id)
        self.process: subprocess.Popen[bytes] | None = None
        #: The signal that came before the start, which then never happens.
        self.cancelled_by: int | None = None
        self._lock = threading.Lock()  # `start` runs in a thread; a signal may come meanwhile

    async def start(self) -> None:
        """Start the process, in a thread (a fork is not for the loop); nothing if it was
        cancelled or has started."""
        await asyncio.to_thread(self._start)

    def _start(self) -> None:
        with self._lock:
            if self.process is not None or self.cancelled_by is not None:
                return
            assert self.log_path is not None
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    self.command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=env,
                    close_fds=True,
                )

    def exit_code(self) -> int | None:
        with self._lock:
            if self.process is None:
                return -self.cancelled_by if self.cancelled_by is not None else None
            return self.process.poll()

    def send_signal(self, signum: int) -> bool:
        with self._lock:
            if self.process is None:
                if self.cancelled_by is None:
                    self.cancelled_by = signum
                return True
            if self.process.poll() is not None:
                return False
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signum)
                return True
            return False


class RunningEngine:
    """A run another process runs (`attach`): alive while the run's lock is held."""

    def __init__(self, db_path: str | Path, run_id: str, pid: int | None) -> None:
        self.db_path = Path(db_path)
        self.run_id = run_id
        self.pid = pid
        path = engine_log_path(db_path, run_id)
        self.log_path: Path | None = path if path.is_file() else None

    def exit_code(self) -> int | None:
        from tinker_tui.engine.training.resume import run_is_live

        return None if run_is_live(self.db_path, self.run_id) else EXIT_UNKNOWN

    def send_signal(self, signum: int) -> bool:
        if self.pid is None or self.exit_code() is not None:
            return False
        try:
            os.kill(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    async def start(self) -> None:
        """Nothing: another process started it."""
