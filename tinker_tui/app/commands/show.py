"""`tinker-tui show [RUN]`: the dashboard, rollouts and control views of a stored run.

RUN is a run id, a unique prefix of one, or omitted (or "latest") for the newest run in the
store. Without a terminal (or with `--no-ui`) it prints the run as the headless reporter
printed it: one line per step. `--log` prints the run's log instead, every message whole
(a failed rollout's traceback included), as the dashboard's log view holds it.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.app.commands.common import EXIT_OK, add_db_option, store_path
from tinker_tui.app.json_output import add_json_option

if TYPE_CHECKING:
    from tinker_tui.app.store_session import StoreSession
    from tinker_tui.engine.foreign.folder_reader import FolderFormat, FolderReader
    from tinker_tui.engine.store import StoredRun


def add_parser(commands: Any) -> None:
    show = commands.add_parser(
        "show",
        help="open the dashboard on a stored run",
        description="Open the dashboard on a run in the store "
        "(finished, or still running elsewhere).",
    )
    show.add_argument(
        "run",
        nargs="?",
        metavar="RUN",
        help="run id or a unique prefix of one (default: the newest run)",
    )
    add_db_option(show)
    show.add_argument(
        "--no-ui",
        action="store_true",
        help="print one line per step instead (also when not on a terminal)",
    )
    show.add_argument(
        "--log",
        action="store_true",
        help="print the run's log, every message whole (tracebacks included)",
    )
    folders = show.add_mutually_exclusive_group()
    folders.add_argument(
        "--cookbook",
        type=Path,
        metavar="DIR",
        help="watch a tinker-cookbook run folder instead (read-only; followed "
        "while the run writes)",
    )
    folders.add_argument(
        "--art",
        type=Path,
        metavar="DIR",
        help="watch an ART model folder instead (<art path>/<project>/models/<model>; "
        "read-only; followed while the run writes)",
    )
    add_json_option(show, "show")


def foreign_events(kind: FolderFormat, folder: Path) -> tuple[list[Any], FolderReader]:
    """Everything a run folder of another program holds now, as our events, and its
    reader."""
    from tinker_tui.engine.clock import SystemClock
    from tinker_tui.engine.foreign.folder_reader import open_folder

    reader = open_folder(kind, folder, SystemClock())
    return reader.poll(), reader


def folder_of(args: argparse.Namespace) -> tuple[FolderFormat, Path] | None:
    """The other program's run folder `show` was given (`--cookbook`, `--art`), if any."""
    if args.cookbook is not None:
        return "cookbook", args.cookbook
    if args.art is not None:
        return "art", args.art
    return None


def print_foreign(kind: FolderFormat, folder: Path) -> int:
    """`show --cookbook DIR --no-ui` (or `--art`): the folder's steps as the headless
    reporter prints them, then its summary (or that it has not ended yet)."""
    from tinker_tui.app.headless import HeadlessReporter
    from tinker_tui.app.run_summary import SummaryCollector, summary_lines

    events, reader = foreign_events(kind, folder)
    reporter = HeadlessReporter()
    summary = SummaryCollector()
    for event in events:
        reporter.handle(event)
        summary.handle(event)
    if reader.started is None:
        print(f"{folder}: no step recorded yet")
    elif reader.finished is not None:
        print("\n".join(summary_lines(summary.summary())))
    else:
        print(f"{reader.run_id} has not ended yet ({reader.not_ended}): step {reader.step} so far")
    return EXIT_OK


def foreign_document(kind: FolderFormat, folder: Path) -> dict[str, Any]:
    """`show --cookbook DIR --json` (or `--art`): the folder's run in the `show`
    document's shape."""
    from tinker_tui.app.json_output import checkpoint_record, document, step_record
    from tinker_tui.engine.events import CheckpointSaved, StepTrained

    events, reader = foreign_events(kind, folder)
    started, finished = reader.started, reader.finished
    run = (
        None
        if started is None
        else {
            "run_id": started.run_id,
            "name": started.name,
            "backend": started.backend,
            "base_model": started.base_model,
            "status": finished.status if finished else "running",
            "max_steps": started.max_steps or None,
            "final_step": reader.step,
            "started_at": started.time,
            "config": dict(started.config),
            "folder": str(folder),
        }
    )
    return document(
        "show",
        run=run,
        steps=[step_record(e) for e in events if isinstance(e, StepTrained)],
        evals=[],
        checkpoints=[checkpoint_record(e) for e in events if isinstance(e, CheckpointSaved)],
        sessions=[],
        resumes=[],
        finished=None
        if finished is None
        else {
            "status": finished.status,
            "cause": finished.cause or None,
            "reason": finished.reason or None,
            "final_step": finished.final_step,
            "time": finished.time,
        },
    )


def show_foreign(args: argparse.Namespace, kind: FolderFormat, folder: Path) -> int:
    from tinker_tui.app.commands.common import wants_ui
    from tinker_tui.engine.errors import UsageError

    if args.run or args.log:
        raise UsageError(f"--{kind} shows a run folder: give no RUN and no --log with it")
    if args.json:
        from tinker_tui.app.json_output import print_json

        print_json(foreign_document(kind, folder))
        return EXIT_OK
    if not wants_ui(args):
        return print_foreign(kind, folder)
    from tinker_tui.app.foreign_session import ForeignSession
    from tinker_tui.app.tui import TinkerTuiApp
    from tinker_tui.engine.clock import SystemClock
    from tinker_tui.engine.foreign.folder_reader import open_folder

    app = TinkerTuiApp(ForeignSession(open_folder(kind, folder, SystemClock())))
    app.run()
    if app.run_exception is not None:
        raise app.run_exception
    return app.return_code or EXIT_OK


async def print_run(db_path: Path, run: StoredRun) -> int:
    """Replay the stored run through the headless reporter."""
    from tinker_tui.app.headless import HeadlessReporter
    from tinker_tui.app.run_summary import SummaryCollector, summary_lines
    from tinker_tui.app.store_session import StoreSession

    session = StoreSession(db_path, run)
    reporter = HeadlessReporter(db_path=db_path)
    summary = SummaryCollector(db_path=db_path)
    for event in await session.read_all():
        reporter.handle(event)
        summary.handle(event)
    finished = run.finished()
    if finished is not None:
        summary.handle(finished)
        print("\n".join(summary_lines(summary.summary())))
    else:
        print(f"run {run.run_id} has no end in the store (still running, or its process died)")
    return EXIT_OK


async def print_log(db_path: Path, run: StoredRun) -> int:
    """Every stored log message of the run, whole, oldest first."""
    from tinker_tui.app.store_session import StoreSession
    from tinker_tui.engine.events import LogEmitted

    session = StoreSession(db_path, run)
    for event in await session.read_all():
        if isinstance(event, LogEmitted):
            print(f"{event.level}: {event.message}")
    return EXIT_OK


async def show_document(db_path: Path, run: StoredRun) -> dict[str, Any]:
    """`show --json`: the run as `runs --json` lists it, with its steps, evaluations,
    checkpoints, sessions and resumes as stored, and its end."""
    from tinker_tui.app.commands.runs import read_records
    from tinker_tui.app.json_output import (
        checkpoint_record,
        document,
        resume_record,
        session_record,
        step_record,
    )
    from tinker_tui.engine.events import (
        CheckpointSaved,
        EvalCompleted,
        RunResumed,
        SessionStarted,
        StepTrained,
    )
    from tinker_tui.engine.store import StoreReader

    (record,) = [r for r in await read_records(db_path) if r["run_id"] == run.run_id]
    async with await StoreReader.open_readonly(db_path) as store:
        events = await store.events(
            run, {StepTrained, EvalCompleted, CheckpointSaved, SessionStarted, RunResumed}
        )
    finished = run.finished()
    return document(
        "show",
        run=record,
        steps=[step_record(e) for e in events if isinstance(e, StepTrained)],
        evals=[
            {**step_record(e), "protocol": dict(e.protocol) or None}
            for e in events
            if isinstance(e, EvalCompleted)
        ],
        checkpoints=[checkpoint_record(e) for e in events if isinstance(e, CheckpointSaved)],
        sessions=[session_record(e) for e in events if isinstance(e, SessionStarted)],
        resumes=[resume_record(e) for e in events if isinstance(e, RunResumed)],
        finished=None
        if finished is None
        else {
            "status": finished.status,
            "cause": finished.cause or None,
            "reason": finished.reason or None,
            "final_step": finished.final_step,
            "time": finished.time,
        },
    )


def shown_session(db_path: Path, run: StoredRun) -> StoreSession:
    """A finished run as stored; a run still running is followed as it goes, read-only
    (`attach` steers it), until it ends."""
    from tinker_tui.app.engine_process import RunningEngine
    from tinker_tui.app.run_summary import db_flag
    from tinker_tui.app.store_session import ReadOnlyControl, StoreSession
    from tinker_tui.engine.training.resume import run_is_live

    if run.finished() is None and run_is_live(db_path, run.run_id):
        why = f"shown with show; to steer it: tinker-tui attach {run.run_id}{db_flag(db_path)}"
        return StoreSession(
            db_path,
            run,
            control=ReadOnlyControl(why),
            follow=True,
            engine=RunningEngine(db_path, run.run_id, pid=None),
        )
    return StoreSession(db_path, run)


def main(args: argparse.Namespace) -> int:
    from tinker_tui.app.commands.common import wants_ui
    from tinker_tui.engine.store import find_run

    foreign = folder_of(args)
    if foreign is not None:
        return show_foreign(args, *foreign)
    run = asyncio.run(find_run(store_path(args), args.run))
    if args.json:
        from tinker_tui.app.json_output import print_json

        print_json(asyncio.run(show_document(store_path(args), run)))
        return EXIT_OK
    if args.log:
        return asyncio.run(print_log(store_path(args), run))
    if not wants_ui(args):
        return asyncio.run(print_run(store_path(args), run))
    from tinker_tui.app.tui import TinkerTuiApp

    app = TinkerTuiApp(shown_session(store_path(args), run))
    app.run()
    if app.run_exception is not None:  # reported by the command line, now the screen is back
        raise app.run_exception
    return app.return_code or EXIT_OK  # 130/143 when a signal closed it
