"""The dashboard on a run another process runs (`tinker-tui run` and `tinker-tui attach`),
and what the terminal gets when it closes: the run's summary, how to attach again after a
detach, or what the engine said when it ended before its run started."""

from __future__ import annotations

import asyncio
import gc
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tinker_tui.app.interrupts import EXIT_FAILED, EXIT_OK
from tinker_tui.app.run_summary import SummaryCollector, db_flag, summary_lines

if TYPE_CHECKING:
    from tinker_tui.app.notify import Notifier
    from tinker_tui.app.store_session import StoreSession


def _say(lines: list[str], *, err: bool = False) -> None:
    """Print, unless the terminal is gone (after SIGHUP)."""
    try:
        print("\n".join(lines), file=sys.stderr if err else sys.stdout, flush=True)
    except OSError:
        pass


#: Allocations between the collector's young passes in the dashboard's process (Python's
#: default is 700): a frame allocates thousands of short-lived objects, and a pass in the
#: middle of one moves them on to the older generations, whose passes are the long ones.
YOUNG_THRESHOLD = 7000


def calm_collector() -> None:
    """Make the garbage collector's pauses short in a process that only runs the
    dashboard: what it has loaded so far (Textual, the app) lives as long as the process,
    so it is frozen out of every full pass, and young passes come less often. Measured
    while following a run at full speed: full passes of 85-95 ms of CPU every 2-3 s,
    keys waiting behind them, became passes of 25 ms of CPU at most."""
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def _read_tail(session: StoreSession, summary: SummaryCollector) -> None:
    """Left before the engine let go of its ended run: what it still writes (its trackers'
    last lines) belongs in the summary. A signal meanwhile skips it."""
    if session.tail_read:
        return
    unsubscribe = session.events.subscribe(summary.handle)
    try:
        asyncio.run(session.read_tail())
    except KeyboardInterrupt:
        pass
    finally:
        unsubscribe()


def watch(
    session: StoreSession,
    summary: SummaryCollector,
    held: list[int] | None = None,
    *,
    notifier: Notifier | None = None,
) -> int:
    """Open the dashboard on `session` (a following `StoreSession`) until the user leaves;
    returns the exit code (see `app.tui`). `held`: the signals `app.interrupts.hold_signals`
    kept meanwhile; `notifier`: the run's alerts (`run --notify`)."""
    from tinker_tui.app.engine_process import EngineExited, describe_exit
    from tinker_tui.app.tui import TinkerTuiApp

    engine = session.engine
    summary.set_engine_log(engine.log_path if engine is not None else None)
    app = TinkerTuiApp(session, summary=summary, held_signals=held, notifier=notifier)
    calm_collector()
    app.run()
    error = app.run_exception
    if isinstance(error, EngineExited):
        where = f"; its output: {error.log_path}" if error.log_path else ""
        code = engine.exit_code() if engine is not None else None
        if app.leave_code is not None:  # the user stopped it before it had started
            _say([f"run {session.run_id} stopped before it started{where}"])
            return app.leave_code
        said = error.lines or []
        _say(
            said
            + [
                f"tinker-tui: the engine {describe_exit(code if code is not None else EXIT_FAILED)} "
                f"before the run started{where}"
            ],
            err=True,
        )
        return error.exit_code
    if error is not None:  # reported by the command line, now the screen is back
        raise error
    if not app.detached and session.finished is not None:
        _read_tail(session, summary)
    result = summary.summary()
    if app.detached:
        _say(detach_lines(session.run_id, session.db_path, app.state.state, app.state.reason))
    elif result.run_id:
        _say(summary_lines(result))
    return app.return_code if app.return_code is not None else EXIT_OK


def detach_lines(run_id: str, db_path: Path | None, state: str, reason: str = "") -> list[str]:
    """What leaving a run that goes on in its own process says: a paused run stays paused
    (nothing resumes it by itself), and how to resume it."""
    db = db_flag(db_path)
    if state == "paused":
        return [
            f"detached from run {run_id}: it stays paused in its own process"
            + (f" ({reason})" if reason else ""),
            f"  resume it:    tinker-tui attach {run_id}{db}, then p",
            f"  list runs:    tinker-tui runs{db}",
        ]
    return [
        f"detached from run {run_id}: it goes on in its own process",
        f"  attach again: tinker-tui attach {run_id}{db}",
        f"  list runs:    tinker-tui runs{db}",
    ]
