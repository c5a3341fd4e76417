"""Log lines that stores older than version 9 kept for events, and the events they were.

Before version 9 a session start, a resume and a tracker's report were stored as log lines
and read back by their text. Version 9 keeps them as events with columns of their own
(`schema.py`); this module is the only place that still knows their text: the migration to
version 9 moves an older store's lines into those columns (`migrate_log_lines`), and a
reader that opens an older store read-only (it cannot migrate it) decodes its log rows the
same way (`run_log_events`) and counts its time down with `legacy_down_seconds`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from typing import Any

import aiosqlite

from tinker_tui.engine.events import LogEmitted, RunResumed, SessionStarted, TrackerReported

#: "starting {backend} backend, base model {base_model}": what each process that ran (or
#: resumed) a run logged first.
_SESSION = re.compile(
    r"starting (?P<backend>\S+) backend, base model (?P<base_model>.*)\Z", re.DOTALL
)
#: "resuming run {run_id} from checkpoint {name} (step {n}): {k} later step(s) undone, {g}
#: group(s) to run again ({p} scenario(s) drawn but untrained)", or "... from the start ...".
_RESUME = re.compile(
    r"resuming run (?P<run_id>\S+) from (?:checkpoint (?P<checkpoint>\S+) \(step (?P<step>\d+)\)"
    r"|the start)(?:[^:]*: (?P<undone>\d+) later step\(s\) undone, (?P<requeued>\d+) group\(s\)"
    r" to run again \((?P<pending>\d+) scenario\(s\) drawn but untrained\))?"
)
#: Outside trackers by the name each of their lines began with ("W&B: logging to ...").
TRACKER_LINE_NAMES = {"W&B": "wandb", "TensorBoard": "tensorboard"}


def legacy_log_event(
    run_id: str | None, time: float, level: str, message: str, down_seconds: float = 0.0
) -> LogEmitted:
    """The event an older store's log line was written for: a SessionStarted, a
    RunResumed (of run `run_id`, down `down_seconds`), a TrackerReported, else the line."""
    name, sep, _ = message.partition(": ")
    if sep and name in TRACKER_LINE_NAMES:
        return TrackerReported(
            time=time, level=level, message=message, tracker=TRACKER_LINE_NAMES[name]
        )
    session = _SESSION.match(message)
    if session is not None:
        return SessionStarted(
            time=time, backend=session["backend"], base_model=session["base_model"]
        )
    resume = _RESUME.match(message)
    if resume is not None and run_id is not None and resume["run_id"] == run_id:
        return RunResumed(
            time=time,
            run_id=run_id,
            step=int(resume["step"] or 0),
            checkpoint=resume["checkpoint"] or "",
            steps_undone=int(resume["undone"] or 0),
            groups_requeued=int(resume["requeued"] or 0),
            scenarios_pending=int(resume["pending"] or 0),
            down_seconds=down_seconds,
        )
    return LogEmitted(time=time, level=level, message=message)


def run_log_events(
    run_id: str, rows: Sequence[Any], times: Sequence[float] | None = None
) -> list[tuple[int, LogEmitted]]:
    """(row id, event) for each of one run's log rows (id, time, level, message; in id
    order). A resume's time down is the gap before the last session start ahead of it, from
    the latest line the run logged before that start (as version 8 counted it). `times`:
    the times of all the run's lines, sorted, when `rows` are only some of them."""
    if times is None:
        times = sorted(float(r[1]) for r in rows if r[1] is not None)
    events: list[tuple[int, LogEmitted]] = []
    starts = 0
    down = 0.0
    for row_id, time, level, message in rows:
        event = legacy_log_event(run_id, float(time or 0.0), level, message, down)
        if isinstance(event, SessionStarted):
            starts += 1
            before = bisect.bisect_left(times, event.time)  # lines strictly before it
            down = max(0.0, event.time - times[before - 1]) if starts > 1 and before else 0.0
        events.append((int(row_id), event))
    return events


def legacy_down_seconds(run_id: str, rows: Sequence[Any]) -> float:
    """Seconds run `run_id` was down between its sessions, from its log rows in an older
    store (id, time, level, message; in id order)."""
    return float(
        sum(e.down_seconds for _, e in run_log_events(run_id, rows) if isinstance(e, RunResumed))
    )


_SQL_SESSION = "INSERT INTO sessions (run_id, time, backend, base_model) VALUES (?, ?, ?, ?)"
_SQL_RESUME = (
    "INSERT INTO resumes (run_id, time, step, checkpoint, steps_undone, "
    "groups_requeued, scenarios_pending, down_seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


async def migrate_log_lines(conn: aiosqlite.Connection) -> None:
    """Version 9's data: each run's session starts and resumes leave `log` for `sessions`
    and `resumes`, and tracker lines get their tracker. Run inside the migration's
    transaction, after its SQL."""
    # Only the lines that may be events are read whole (the old readers' LIKE patterns);
    # of the others, their times (a session start's time down is measured from them).
    rows = await conn.execute_fetchall(
        "SELECT id, run_id, time, level, message FROM log WHERE run_id IS NOT NULL AND ("
        "message LIKE 'starting % backend, base model %' OR message LIKE 'resuming run %' "
        "OR substr(message, 1, 5) = 'W&B: ' OR substr(message, 1, 13) = 'TensorBoard: ') "
        "ORDER BY run_id, id"
    )
    by_run: dict[str, list[Any]] = {}
    for row in rows:
        by_run.setdefault(row[1], []).append((row[0], row[2], row[3], row[4]))
    times: dict[str, list[float]] = {}
    for run_id, time in await conn.execute_fetchall(
        "SELECT run_id, time FROM log WHERE run_id IS NOT NULL AND time IS NOT NULL "
        "ORDER BY run_id, time"
    ):
        times.setdefault(run_id, []).append(float(time))
    for run_id, run_rows in by_run.items():
        for row_id, event in run_log_events(run_id, run_rows, times.get(run_id, [])):
            if isinstance(event, TrackerReported):
                await conn.execute(
                    "UPDATE log SET tracker = ? WHERE id = ?", (event.tracker, row_id)
                )
                continue
            if isinstance(event, SessionStarted):
                await conn.execute(
                    _SQL_SESSION, (run_id, event.time, event.backend, event.base_model)
                )
            elif isinstance(event, RunResumed):
                await conn.execute(
                    _SQL_RESUME,
                    (
                        run_id,
                        event.time,
                        event.step,
                        event.checkpoint,
                        event.steps_undone,
                        event.groups_requeued,
                        event.scenarios_pending,
                        event.down_seconds,
                    ),
                )
            else:
                continue
            await conn.execute("DELETE FROM log WHERE id = ?", (row_id,))
