"""Reading the run store: its runs, the one way to look a run up, a run's events read back
(all at once, or as another process writes them), its checkpoints and resume points.

`StoreReader` is the read side of every store: `RunStore` (the writer) is one, and
`StoreReader.open_readonly` opens one on a file another process may be writing, for `show`,
`attach`, `runs`, `export` and `run --resume`. Rows become events through the codec
(`codec.py`), so callers see typed events and `StoredRun`s, never tables or columns.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from tinker_tui.engine.events import (
    CheckpointSaved,
    CommandReceived,
    Event,
    RunResumed,
    RunStarted,
    TrajectoryTokens,
)
from tinker_tui.engine.store.codec import (
    READABLE_TABLES,
    REPLAYED,
    TRAJECTORIES,
    GroupFate,
    GroupSpan,
    Replayed,
    StoredRun,
    decode_checkpoint,
    decode_group_fate,
    decode_group_span,
    decode_resume_state,
    decode_row,
    decode_run,
    decode_tokens,
    group_of,
)
from tinker_tui.engine.store.log_lines import (
    legacy_down_seconds,
    legacy_log_event,
    run_log_events,
)
from tinker_tui.engine.store.records import StoredSweep, decode_sweep
from tinker_tui.engine.store.schema import (
    SCHEMA_VERSION,
    StoreError,
    check_ownership,
    is_damaged,
    store_error,
)

logger = logging.getLogger(__name__)

#: Rows read per query when reading a run's events.
_PAGE = 10_000

#: The first schema version that keeps session starts, resumes and tracker reports as
#: events with columns; older stores' log lines are read as `log_lines` knows them.
TYPED_LOG_EVENTS = 9


class NoSuchRun(StoreError):
    """No run (or more than one) answers to the name asked for; the message lists what the
    store has."""


def pick_run(
    runs: Sequence[StoredRun], wanted: str | None, *, where: str | Path, task: str | None = None
) -> StoredRun:
    """The run `wanted` names among `runs` (newest first): an exact id, else a unique prefix
    of one, else (None, "" or "latest") the newest run, of task `task` when given. NoSuchRun
    otherwise; `where` (the store) names what was searched."""
    if not runs:
        raise NoSuchRun(f"run store {where} has no runs yet")
    if wanted in (None, "", "latest"):
        candidates = [r for r in runs if task is None or r.name == task]
        if not candidates:
            raise NoSuchRun(f"no run of task {task!r} in {where}; runs: {_listing(runs)}")
        return candidates[0]
    exact = [r for r in runs if r.run_id == wanted]
    matches = exact or [r for r in runs if r.run_id.startswith(wanted)]
    if not matches:
        raise NoSuchRun(f"no run {wanted!r} in {where}; runs: {_listing(runs)}")
    if len(matches) > 1:
        raise NoSuchRun(f"{wanted!r} matches several runs: {_listing(matches)}")
    run = matches[0]
    if task is not None and run.name != task:
        raise NoSuchRun(f"run {run.run_id} is a run of task {run.name!r}, not {task!r}")
    return run


def _listing(runs: Sequence[StoredRun], most: int = 10) -> str:
    """Runs as `id (task)`, newest first."""
    shown = ", ".join(f"{r.run_id} ({r.name})" if r.name else r.run_id for r in runs[:most])
    return shown + (f", ... ({len(runs)} runs)" if len(runs) > most else "")


async def find_run(path: str | Path, wanted: str | None, *, task: str | None = None) -> StoredRun:
    """The run `wanted` names in the store at `path` (see `pick_run`), read-only."""
    async with await StoreReader.open_readonly(path) as store:
        return await store.find_run(wanted, task=task)


class EventCursor:
    """How far a reader has got in one run's stored events: the last row read of each table,
    and rollouts read before their group. Pass it to `StoreReader.events_after` again to get
    only what was stored since. `kinds` limits the events to those types (RunStarted
    included); None reads every type the store replays."""

    def __init__(self, run: StoredRun, kinds: Collection[type[Event]] | None = None) -> None:
        self.run = run
        # A kind reads its subclasses' tables too (LogEmitted: sessions and resumes).
        self._replayed: list[Replayed] = [
            r for r in REPLAYED if kinds is None or issubclass(r.event, tuple(kinds))
        ]
        self._started_given = kinds is not None and RunStarted not in kinds
        self._last: dict[str, int] = {r.table: 0 for r in self._replayed}
        self._last[TRAJECTORIES] = 0
        self._early_trajectories: dict[int, list[dict[str, Any]]] = {}
        #: Time of the latest event read so far (None before any).
        self.last_time: float | None = None


def _rewinds(event: Event) -> bool:
    """Whether the event marks where the run deleted its later rows: a rollback, or a
    resume (written right after)."""
    if isinstance(event, CommandReceived):
        return event.command == "rolled_back"
    return isinstance(event, RunResumed)


class StoreReader:
    """Queries on a run store's connection, one at a time (see the module docstring)."""

    def __init__(
        self, path: Path, conn: aiosqlite.Connection, *, schema_version: int = SCHEMA_VERSION
    ) -> None:
        # Use `await StoreReader.open_readonly(path)` (or `RunStore.open`): no I/O here.
        self.path = path
        self._conn: aiosqlite.Connection | None = conn
        self._db_lock = asyncio.Lock()  # one user of the connection at a time
        #: Schema version of the file (older only for a store opened read-only).
        self.schema_version = schema_version
        #: Opened by `open_readonly` (no writer on this connection): reads of events may
        #: hold a read transaction.
        self.readonly = False

    @classmethod
    async def open_readonly(cls, path: str | Path, *, busy_timeout: float = 5.0) -> StoreReader:
        """Open an existing store for reading only (another process may be writing it).

        Nothing is created or migrated; the result is a `StoreReader` (also when called as
        `RunStore.open_readonly`). StoreError if the file is missing or is not a run store
        this code can read.
        """
        path = Path(path).expanduser()
        if not path.is_file():
            raise StoreError(f"run store {path} does not exist")
        uri = f"{path.resolve().as_uri()}?mode=ro"
        try:
            conn = await aiosqlite.connect(
                uri, uri=True, isolation_level=None, timeout=busy_timeout
            )
        except sqlite3.Error as exc:
            raise store_error(path, exc) from exc
        try:
            conn.row_factory = sqlite3.Row
            version = await check_ownership(conn, path)
            if version == 0:
                raise StoreError(f"{path} is empty: not a tinker-tui run store")
        except sqlite3.Error as exc:
            await conn.close()
            raise store_error(path, exc) from exc
        except BaseException:
            await conn.close()
            raise
        reader = StoreReader(path, conn, schema_version=version)
        reader.readonly = True
        return reader

    async def close(self) -> None:
        """Close the connection. Safe to call more than once."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                await conn.close()
            except sqlite3.Error:
                logger.exception("closing run store %s failed", self.path)

    async def __aenter__(self) -> StoreReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _require_conn(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise StoreError(f"run store {self.path} is closed")
        return self._conn

    async def _fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        """The rows of one query. A store damaged past its header (SQLite finds it on the
        pages a query reads) is a StoreError naming the file, as at opening."""
        async with self._db_lock:
            conn = self._require_conn()
            try:
                return list(await conn.execute_fetchall(sql, tuple(params)))
            except sqlite3.DatabaseError as exc:
                if is_damaged(exc):
                    raise store_error(self.path, exc) from exc
                raise

    async def runs(self) -> list[StoredRun]:
        """All runs, newest first."""
        rows = await self._fetchall("SELECT * FROM runs ORDER BY started_at DESC, rowid DESC")
        return [decode_run(r) for r in rows]

    async def run(self, run_id: str) -> StoredRun | None:
        rows = await self._fetchall("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        return decode_run(rows[0]) if rows else None

    async def backend_sessions(self, run_id: str) -> list[tuple[float, str, str]]:
        """The backend sessions the run opened, oldest first: (time, session id, base
        model)."""
        try:
            rows = await self._fetchall(
                "SELECT time, session_id, base_model FROM "
                "backend_sessions WHERE run_id = ? ORDER BY id",
                (run_id,),
            )
        except sqlite3.OperationalError:  # a store from before version 7, read as it is
            return []
        return [(float(r["time"] or 0.0), r["session_id"], r["base_model"]) for r in rows]

    async def find_run(self, wanted: str | None, *, task: str | None = None) -> StoredRun:
        """The run `wanted` names: an exact id, a unique prefix, or None / "latest" for the
        newest (of `task`, if given). NoSuchRun, listing the store's runs, otherwise."""
        return pick_run(await self.runs(), wanted, where=self.path, task=task)

    # ------------------------------------------------------------------ a run's events

    async def events(
        self, run: StoredRun, kinds: Collection[type[Event]] | None = None
    ) -> list[Event]:
        """Every stored event of `run` (of the types in `kinds`, if given), in time order."""
        return await self.events_after(EventCursor(run, kinds))

    async def events_after(self, cursor: EventCursor) -> list[Event]:
        """The events of the cursor's run stored since the cursor's last read, in time order
        (events of equal times in the order the codec gives); moves the cursor past them.
        The first read starts with the run's RunStarted."""
        if not self.readonly:
            return await self._events_after(cursor)
        # One snapshot of the whole store: read table by table while the run writes, a
        # step could be read with the groups it took before those groups' own rows (their
        # table read before the commit that added both), and a dashboard then listed them
        # as "queued, waiting to be trained" for good.
        await self._fetchall("BEGIN")
        try:
            return await self._events_after(cursor)
        finally:
            await self._fetchall("COMMIT")

    async def _events_after(self, cursor: EventCursor) -> list[Event]:
        run = cursor.run
        ordered: list[tuple[float, int, int, Event]] = []
        if not cursor._started_given:
            cursor._started_given = True
            started = run.started()
            ordered.append((started.time, 0, 0, started))
        for order, replayed in enumerate(cursor._replayed, start=1):
            while True:
                rows = await self.rows_after(
                    replayed.table, run.run_id, cursor._last[replayed.table], _PAGE
                )
                if not rows:
                    break
                cursor._last[replayed.table] = rows[-1]["rowid"]
                await self._add_fates(replayed.table, run.run_id, rows)
                if replayed.with_trajectories:
                    rollouts = await self._trajectories_of(cursor, rows)
                decode = await self._decoder(replayed, run.run_id)
                for row in rows:
                    if replayed.with_trajectories:
                        event = decode(row, rollouts.pop(group_of(row), ()))
                    else:
                        event = decode(row)
                    if event is not None:
                        ordered.append((event.time, order, row["rowid"], event))
                if len(rows) < _PAGE:
                    break
        ordered.sort(key=lambda item: item[:3])
        rollback = next((item for item in ordered if _rewinds(item[3])), None)
        if rollback is not None:
            ordered = await self._up_to_rollback(cursor, ordered, rollback[0])
        if ordered:
            cursor.last_time = max(cursor.last_time or 0.0, ordered[-1][0])
        events = [event for *_, event in ordered]
        if rollback is not None:  # what was written after it, the steps trained again first
            events += await self._events_after(cursor)
        return events

    async def _decoder(self, replayed: Replayed, run_id: str) -> Callable[..., Event | None]:
        """How rows of the table become events: log rows of a store older than version 9
        (opened read-only, so not migrated) as the events those lines were written for,
        each resume with its time down (known from the run's earlier lines)."""
        if replayed.table != "log" or self.schema_version >= TYPED_LOG_EVENTS:
            return replayed.decode
        known = dict(run_log_events(run_id, await self._log_rows(run_id)))
        return lambda row: (
            known.get(row["rowid"])
            or legacy_log_event(
                row["run_id"], float(row["time"] or 0.0), row["level"], row["message"]
            )
        )

    async def _log_rows(self, run_id: str) -> list[sqlite3.Row]:
        """The run's log rows (id, time, level, message), in id order."""
        return await self._fetchall(
            "SELECT id, time, level, message FROM log WHERE run_id = ? ORDER BY id", (run_id,)
        )

    async def _up_to_rollback(
        self, cursor: EventCursor, ordered: list[tuple[float, int, int, Event]], at: float
    ) -> list[tuple[float, int, int, Event]]:
        """A rollback or a resume (at time `at`) deleted the rows of the steps it undid, and
        SQLite gives the rows written next the rowids the deleted ones had: rowids alone
        would skip the steps trained again. Each table's cursor goes back to its last row written up to the
        rollback, and this part of the read ends there; the rest is read on from it."""
        run_id = cursor.run.run_id
        for table in cursor._last:
            try:
                rows = await self._fetchall(
                    f"SELECT max(rowid) FROM {table} WHERE run_id = ? AND coalesce(time, 0) <= ?",
                    (run_id, at),
                )
            except sqlite3.OperationalError as exc:  # a table newer than the store
                if "no such table" not in str(exc).lower():
                    raise
                rows = []
            cursor._last[table] = int(rows[0][0] or 0) if rows else 0
        waiting = cursor._early_trajectories
        for group in list(waiting):
            waiting[group] = [r for r in waiting[group] if r["rowid"] <= cursor._last[TRAJECTORIES]]
            if not waiting[group]:
                del waiting[group]
        tables = {order: r.table for order, r in enumerate(cursor._replayed, start=1)}
        return [
            item
            for item in ordered
            if item[1] not in tables or item[2] <= cursor._last[tables[item[1]]]
        ]

    async def _add_fates(self, table: str, run_id: str, rows: list[dict[str, Any]]) -> None:
        """What the groups' life cycle knows and the rows do not: the groups each step took
        (`group_ids` of its StepTrained) and the step that dropped each discarded group."""
        if self.schema_version < 3 or table not in ("steps", "discarded_groups"):
            return
        if table == "steps":
            taken: dict[int, list[int]] = {}
            for fate in await self._lifecycle("step", [int(r["step"]) for r in rows], run_id):
                taken.setdefault(int(fate["step"]), []).append(int(fate["group_id"]))
            for row in rows:
                row["group_ids"] = tuple(taken.get(int(row["step"]), ()))
            return
        steps = {
            int(fate["group_id"]): int(fate["step"])
            for fate in await self._lifecycle("group_id", [group_of(r) for r in rows], run_id)
            if fate["step"] is not None
        }
        for row in rows:
            row["step"] = steps.get(group_of(row), -1)

    async def _lifecycle(self, column: str, values: list[int], run_id: str) -> list[sqlite3.Row]:
        """(group_id, step) of the run's groups whose `column` (step or group_id) is one of
        `values`, by group id."""
        out: list[sqlite3.Row] = []
        wanted = sorted(set(values))
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            out += await self._fetchall(
                f"SELECT group_id, step FROM group_lifecycle WHERE run_id = ? AND {column} IN "
                f"({','.join('?' * len(chunk))}) ORDER BY group_id",
                (run_id, *chunk),
            )
        return out

    async def last_metrics(self) -> dict[str, dict[str, Any]]:
        """Per run: the metrics of its last stored step (for `runs`: the latest reward)."""
        out: dict[str, dict[str, Any]] = {}
        rows = await self._fetchall(
            "SELECT s.run_id, s.metrics FROM steps s JOIN (SELECT run_id, max(step) AS last "
            "FROM steps GROUP BY run_id) t ON s.run_id = t.run_id AND s.step = t.last"
        )
        for row in rows:
            metrics = decode_row(row).get("metrics")
            if isinstance(metrics, dict):
                out[row["run_id"]] = metrics
        return out

    async def last_evals(self) -> dict[str, dict[str, Any]]:
        """Per run: its latest evaluation during the run, as {"step", "metrics",
        "protocol"} (protocol {} where it was not stored: before v14)."""
        protocol = ", protocol" if self.schema_version >= 14 else ""
        rows = await self._fetchall(
            f"SELECT run_id, step, metrics{protocol} FROM evals WHERE id IN "
            "(SELECT max(id) FROM evals GROUP BY run_id)"
        )
        out: dict[str, dict[str, Any]] = {}
        for row in rows:
            decoded = decode_row(row)
            metrics, stored = decoded.get("metrics"), decoded.get("protocol")
            out[row["run_id"]] = {
                "step": row["step"],
                "metrics": metrics if isinstance(metrics, dict) else {},
                "protocol": stored if isinstance(stored, dict) else {},
            }
        return out

    async def _trajectories_of(
        self, cursor: EventCursor, groups: list[dict[str, Any]]
    ) -> dict[int, list[dict[str, Any]]]:
        """The trajectory rows of these groups: they were committed with the groups, so
        reading them after the groups finds them all; rows of newer groups wait for theirs."""
        waiting = cursor._early_trajectories
        while True:
            rows = await self.rows_after(
                TRAJECTORIES, cursor.run.run_id, cursor._last[TRAJECTORIES], _PAGE
            )
            if not rows:
                break
            cursor._last[TRAJECTORIES] = rows[-1]["rowid"]
            for row in rows:
                waiting.setdefault(group_of(row), []).append(row)
            if len(rows) < _PAGE:
                break
        wanted = {group_of(g) for g in groups}
        return {g: waiting.pop(g) for g in wanted if g in waiting}

    async def rows_after(
        self, table: str, run_id: str, after: int = 0, limit: int = _PAGE
    ) -> list[dict[str, Any]]:
        """Rows of `table` for `run_id` whose rowid is above `after`, in rowid order, each
        with its `rowid`; JSON columns are decoded. For following a run another process
        writes: pass the last rowid seen. An empty list if the table does not exist (a store
        written before it was added)."""
        if table not in READABLE_TABLES:
            raise ValueError(f"unknown table {table!r}")
        # Unconfirmed checkpoints are not shown; a confirmed one gets a new rowid.
        confirmed = self._confirmed() if table == "checkpoints" else ""
        try:
            rows = await self._fetchall(
                f"SELECT rowid AS rowid, * FROM {table} WHERE run_id = ? AND rowid > ?"
                f"{confirmed} ORDER BY rowid LIMIT ?",
                (run_id, int(after), int(limit)),
            )
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc).lower():
                return []
            raise
        return [decode_row(row) for row in rows]

    # ------------------------------------------------------------------ checkpoints, groups

    def _confirmed(self) -> str:
        """SQL condition: a confirmed checkpoint (every row, in stores older than v3)."""
        return " AND confirmed = 1" if self.schema_version >= 3 else ""

    def _not_deleted(self) -> str:
        """SQL condition on `checkpoints`: not deleted by the retention policy (recorded
        since v6)."""
        return (
            " AND NOT EXISTS (SELECT 1 FROM checkpoint_deletions d WHERE d.run_id = "
            "checkpoints.run_id AND d.path = checkpoints.path)"
            if self.schema_version >= 6
            else ""
        )

    async def kept_checkpoints(self, run_id: str) -> list[CheckpointSaved]:
        """The run's confirmed checkpoints the retention policy has not deleted, in step
        order (what `RUN@STEP` can name: `export-model`, `run --init-from`, `eval`)."""
        rows = await self._fetchall(
            "SELECT * FROM checkpoints WHERE run_id = ?"
            + self._confirmed()
            + self._not_deleted()
            + " ORDER BY step, id",
            (run_id,),
        )
        return [decode_checkpoint(r) for r in rows]

    async def checkpoints(self, run_id: str) -> list[CheckpointSaved]:
        """The run's confirmed checkpoints, in step order, those the retention policy
        deleted since included (every checkpoint the run saved)."""
        rows = await self._fetchall(
            "SELECT * FROM checkpoints WHERE run_id = ?" + self._confirmed() + " ORDER BY step, id",
            (run_id,),
        )
        return [decode_checkpoint(r) for r in rows]

    async def resume_points(self, run_id: str) -> list[dict[str, Any]]:
        """Confirmed full checkpoints of the run that carry a resume state and still exist,
        newest first, as
        {"step", "kind", "name", "path", "time", "resume_state", "requested"} (a checkpoint whose state
        cannot be read is left out)."""
        if self.schema_version < 3:
            return []
        rows = await self._fetchall(
            "SELECT * FROM checkpoints WHERE run_id = ? AND kind = 'state' AND confirmed = 1 "
            "AND resume_state IS NOT NULL" + self._not_deleted() + " ORDER BY step DESC, id DESC",
            (run_id,),
        )
        points = []
        for row in rows:
            state = decode_resume_state(row)
            checkpoint = decode_checkpoint(row)
            if state is None:
                logger.warning("run store: unreadable resume state of %s", checkpoint.name)
                continue
            points.append(
                {
                    "step": checkpoint.step,
                    "kind": checkpoint.kind,
                    "name": checkpoint.name,
                    "path": checkpoint.path,
                    "time": checkpoint.time,
                    "resume_state": state,
                    "requested": checkpoint.requested,
                }
            )
        return points

    async def down_seconds(self, run_id: str) -> float:
        """Seconds the run was down between its sessions (a finished or stopped run, then
        its `--resume`), as each resume recorded it."""
        if self.schema_version < TYPED_LOG_EVENTS:
            return legacy_down_seconds(run_id, await self._log_rows(run_id))
        rows = await self._fetchall(
            "SELECT coalesce(sum(down_seconds), 0) FROM resumes WHERE run_id = ?", (run_id,)
        )
        return float(rows[0][0])

    async def last_record_before(self, run_id: str, time: float) -> float | None:
        """The time of the run's last log line or step before `time` (None if none): where
        a session that ended without a word of its own (killed) was last seen alive."""
        rows = await self._fetchall(
            "SELECT max(t) FROM (SELECT max(time) AS t FROM log WHERE run_id = ?1 AND time < ?2 "
            "UNION ALL SELECT max(time) FROM steps WHERE run_id = ?1 AND time < ?2)",
            (run_id, float(time)),
        )
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    async def last_states(self) -> dict[str, str]:
        """Per run: its last recorded state change ("running", "paused", "stopping"), so a
        live run that is paused can be listed as paused."""
        rows = await self._fetchall(
            "SELECT r.run_id, r.state FROM run_states r JOIN (SELECT run_id, max(id) AS last "
            "FROM run_states GROUP BY run_id) t ON r.run_id = t.run_id AND r.id = t.last"
        )
        return {row[0]: row[1] for row in rows}

    async def progress(self) -> dict[str, dict[str, int | None]]:
        """Per run: the last stored step and the step of the last confirmed full
        checkpoint ({"step", "checkpoint"}, None when there is none)."""
        out: dict[str, dict[str, int | None]] = {}
        for run_id, last in await self._fetchall(
            "SELECT run_id, max(step) FROM steps GROUP BY run_id"
        ):
            out.setdefault(run_id, {"step": None, "checkpoint": None})["step"] = last
        for run_id, last in await self._fetchall(
            "SELECT run_id, max(step) FROM checkpoints WHERE kind = 'state'"
            + self._confirmed()
            + " GROUP BY run_id"
        ):
            out.setdefault(run_id, {"step": None, "checkpoint": None})["checkpoint"] = last
        return out

    async def sweeps(self) -> list[StoredSweep]:
        """Every sweep with its runs, newest first ([] in stores older than v7)."""
        if self.schema_version < 7:
            return []
        runs: dict[str, list[sqlite3.Row]] = {}
        for row in await self._fetchall("SELECT * FROM sweep_runs ORDER BY sweep_id, idx"):
            runs.setdefault(row["sweep_id"], []).append(row)
        rows = await self._fetchall("SELECT * FROM sweeps ORDER BY created_at DESC, rowid DESC")
        return [decode_sweep(row, runs.get(row["sweep_id"], [])) for row in rows]

    async def find_sweep(self, wanted: str | None) -> StoredSweep:
        """The sweep `wanted` names: an exact id, a unique prefix, or None / "latest" for
        the newest. NoSuchRun, listing the store's sweeps, otherwise."""
        sweeps = await self.sweeps()
        if not sweeps:
            raise NoSuchRun(f"run store {self.path} has no sweeps")
        if wanted in (None, "", "latest"):
            return sweeps[0]
        matches = [s for s in sweeps if s.sweep_id == wanted] or [
            s for s in sweeps if s.sweep_id.startswith(wanted)
        ]
        listing = ", ".join(s.sweep_id for s in sweeps[:10])
        if not matches:
            raise NoSuchRun(f"no sweep {wanted!r} in {self.path}; sweeps: {listing}")
        if len(matches) > 1:
            raise NoSuchRun(
                f"{wanted!r} matches several sweeps: " + ", ".join(s.sweep_id for s in matches)
            )
        return matches[0]

    async def groups(self, run_id: str) -> list[GroupFate]:
        """What became of every group of the run, by scenario position then group id."""
        if self.schema_version < 3:
            return []
        rows = await self._fetchall(
            "SELECT * FROM group_lifecycle WHERE run_id = ? ORDER BY scenario_index, group_id",
            (run_id,),
        )
        return [decode_group_fate(r) for r in rows]

    async def group_spans(self, run_id: str, last: int = 400) -> list[GroupSpan]:
        """The run's `last` groups (by group id) with their times, oldest first: the
        timeline of the signals view."""
        if self.schema_version < 3:
            return []
        rows = await self._fetchall(
            "SELECT * FROM (SELECT * FROM group_lifecycle WHERE run_id = ? "
            "ORDER BY group_id DESC LIMIT ?) ORDER BY group_id",
            (run_id, int(last)),
        )
        return [decode_group_span(r) for r in rows]

    async def trained_tokens(
        self, run_id: str, group_id: int, index: int
    ) -> tuple[int, TrajectoryTokens, dict[int, str]] | None:
        """The tokens one trajectory was trained on: (the step, its arrays, the pieces of
        its token ids); None when the store has none (not trained, older than the run's
        `keep_token_steps`, or a store from before the token view)."""
        if self.schema_version < 11:
            return None
        rows = await self._fetchall(
            "SELECT * FROM trained_tokens WHERE run_id = ? AND group_id = ? AND idx = ?",
            (run_id, int(group_id), int(index)),
        )
        if not rows:
            return None
        tokens = decode_tokens(rows[0])
        ids = sorted(set(tokens.tokens.tolist()))
        pieces: dict[int, str] = {}
        for lo in range(0, len(ids), 500):  # SQLite's limit on parameters
            chunk = ids[lo : lo + 500]
            found = await self._fetchall(
                f"SELECT token, piece FROM token_pieces WHERE run_id = ? AND token IN "
                f"({', '.join('?' * len(chunk))})",
                (run_id, *chunk),
            )
            pieces.update({int(r["token"]): r["piece"] for r in found})
        return int(rows[0]["step"]), tokens, pieces
