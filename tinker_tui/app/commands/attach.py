"""`tinker-tui attach [RUN]`: open the dashboard on a run another process runs (a headless
run, or one a `tinker-tui run` dashboard started and left).

The dashboard reads the run from the store and sends control commands (pause, resume,
checkpoint, eval, stop, knob changes) to that process through the authenticated local
endpoint it opened; its address and token are in `RUN.control.json` beside the store,
readable only by the user. RUN is a run id, a unique prefix, or omitted for the newest run
that has an endpoint. It is the dashboard `tinker-tui run` opens, with the same life cycle
(`app.tui`): `q` asks whether to stop the run or only detach; the run's end shows the
finish screen. Without a terminal it prints the run's progress like `--no-ui` until the
run ends.

Exit codes: 0 detached, or the run ended (1 if it failed); 130/143 stopped by SIGINT/SIGTERM;
2 no such run, or its endpoint does not answer.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.app.commands.common import add_db_option, store_path
from tinker_tui.app.interrupts import EXIT_FAILED, EXIT_OK
from tinker_tui.engine.errors import UsageError

if TYPE_CHECKING:
    from tinker_tui.engine.control.client import RemoteControl
    from tinker_tui.engine.control.interface import Session
    from tinker_tui.engine.store import StoredRun

FIND_RUN_TIMEOUT = 15.0  # seconds to wait for a just-started run to appear in the store


def add_parser(commands: Any) -> None:
    attach = commands.add_parser(
        "attach",
        help="watch and steer a running run",
        description="Open the dashboard on a run that another "
        "process runs (started with or without the "
        "dashboard), and steer it.",
    )
    attach.add_argument(
        "run",
        nargs="?",
        metavar="RUN",
        help="run id or a unique prefix of one (default: the newest running "
        "run with a control endpoint)",
    )
    add_db_option(attach)
    attach.add_argument(
        "--no-ui",
        action="store_true",
        help="print one line per step instead (also when not on a terminal)",
    )


def connect(db_path: Path, wanted: str | None) -> tuple[RemoteControl, str]:
    """A `RemoteControl` of the running run `wanted` names (None: the newest), through the
    package's one control client (`tinker_tui.control.connect`), and that run's id. A
    UsageError says what the run is when it is not running: as `show` words a run the store
    does not have, else how to show or continue it."""
    from tinker_tui.control import AmbiguousRun, ControlUnavailable, NoEndpoint, RunNotRunning
    from tinker_tui.control import connect as connect_run
    from tinker_tui.engine.control.client import RemoteControl

    try:
        client = connect_run(wanted, db=db_path)
        control = RemoteControl(client)
        control.refresh()
    except RunNotRunning as exc:
        raise _gone(db_path, exc.run_id, exc.pid, exc.control_file) from None
    except NoEndpoint as exc:
        if exc.wanted:
            raise _not_running(db_path, exc.wanted) from None
        raise UsageError(str(exc)) from None
    except AmbiguousRun as exc:
        raise UsageError(str(exc)) from None
    except (ControlUnavailable, PermissionError) as exc:
        raise UsageError(f"{exc}; the run may have ended: `tinker-tui show` shows it") from None
    return control, client.run_id


def _not_running(db_path: Path, wanted: str) -> UsageError:
    """No running run is `wanted`: in the words `show` uses when the store has no such
    run, else what the run is and how to look at it."""
    from tinker_tui.app.run_summary import db_flag
    from tinker_tui.engine.store import StoreError, find_run

    try:
        run = asyncio.run(find_run(db_path, wanted))
    except StoreError as exc:  # no such run (the same message as show's), or no store
        return UsageError(str(exc))
    status = run.status if run.status != "running" else "not running (its process is gone)"
    return UsageError(
        f"run {run.run_id} is {status}: nothing to attach to; "
        f"`tinker-tui show {run.run_id}{db_flag(db_path)}` shows it"
    )


def _gone(db_path: Path, run_id: str, pid: int | None, control_file: Path) -> UsageError:
    """A run whose process is gone, with the commands that show and continue it."""
    from tinker_tui.app.run_summary import db_flag, task_spec_for
    from tinker_tui.engine.store import StoreError, find_run

    try:
        run = asyncio.run(find_run(db_path, run_id))
        task = shlex.quote(run.task_spec or task_spec_for(run.name))
    except StoreError:
        task = "TASK"
    db = db_flag(db_path)
    return UsageError(
        f"run {run_id} is not running: its process (pid {pid}) is gone and its control file "
        f"{control_file} is stale. `tinker-tui show {run_id}{db}` shows it; "
        f"`tinker-tui run {task} --resume {run_id}{db}` continues it"
    )


async def wait_for_run(db_path: Path, run_id: str, timeout: float = FIND_RUN_TIMEOUT) -> StoredRun:
    from tinker_tui.engine.store import StoreError, find_run

    deadline = time.monotonic() + timeout
    while True:
        try:
            return await find_run(db_path, run_id)
        except StoreError:  # NoSuchRun, or no store file yet
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.25)  # the run has started but not yet written its row


async def follow_headless(session: Session) -> int:
    from tinker_tui.app.headless import HeadlessReporter
    from tinker_tui.app.run_summary import SummaryCollector, summary_lines

    session.events.subscribe(HeadlessReporter(db_path=session.db_path).handle)
    summary = SummaryCollector(db_path=session.db_path)
    session.events.subscribe(summary.handle)
    status = await session.run()
    print("\n".join(summary_lines(summary.summary())), flush=True)
    return EXIT_FAILED if status == "failed" else EXIT_OK


def main(args: argparse.Namespace) -> int:
    from tinker_tui.app.commands.common import wants_ui
    from tinker_tui.app.engine_process import RunningEngine
    from tinker_tui.app.interrupts import hold_signals
    from tinker_tui.app.run_summary import SummaryCollector
    from tinker_tui.app.store_session import StoreSession
    from tinker_tui.app.watch import watch

    db_path = store_path(args)
    control, run_id = connect(db_path, args.run)
    run = asyncio.run(wait_for_run(db_path, run_id))
    engine = RunningEngine(db_path, run_id, control.client.pid)
    session = StoreSession(db_path, run, control=control, follow=True, engine=engine)
    if not wants_ui(args):
        return asyncio.run(follow_headless(session))
    held = hold_signals()
    return watch(session, SummaryCollector(db_path=db_path), held)
