"""The run store: every engine event, persisted to SQLite without blocking the event loop.

`RunStore.handle` is an `EventBus` subscriber. It only stamps the event with the run it belongs
to and appends it to an in-memory queue; one writer task drains the queue and writes everything
queued at that moment (up to `max_batch` events) in one transaction, so a burst of thousands of
events costs a handful of commits. SQLite itself runs in aiosqlite's thread.

Events other than `RunStarted` carry no run id: they belong to the run of the most recent
`RunStarted` handed to this store. A `LogEmitted` before any run is stored with a NULL run id;
any other event before the first `RunStarted` is dropped (and counted in `dropped`).

The file is never overwritten: a file that is not SQLite, a SQLite database of another
application, a store written by a newer version of this code, or a database another writer
keeps locked makes `RunStore.open` raise `StoreError` naming the file, before anything is
written to it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import aiosqlite
from tinker_tui.engine import faults
from tinker_tui.engine.events import (
    CheckpointSaved,
    CheckpointStarted,
    CommandReceived,
    EvalCompleted,
    Event,
    GroupDiscarded,
    GroupSampled,
    GroupStarted,
    LogEmitted,
    RunFinished,
    RunStarted,
    RunStateChanged,
    StepTrained,
    ThroughputMeasured,
)

logger = logging.getLogger(__name__)

#: Schema version written to `PRAGMA user_version`.
SCHEMA_VERSION = 3
#: `PRAGMA application_id` of a tinker-tui run store ("ttui").
APPLICATION_ID = 0x74747569

_SCHEMA_V1 = """
CREATE TABLE runs (
    run_id          TEXT PRIMARY KEY,
    name            TEXT NOT NULL DEFAULT '',
    backend         TEXT NOT NULL DEFAULT '',
    base_model      TEXT NOT NULL DEFAULT '',
    config          TEXT NOT NULL DEFAULT '{}',
    status          TEXT NOT NULL DEFAULT 'running',
    reason          TEXT NOT NULL DEFAULT '',
    started_at      REAL,
    ended_at        REAL,
    max_steps       INTEGER,
    start_step      INTEGER NOT NULL DEFAULT 0,
    final_step      INTEGER,
    groups_sampled  INTEGER NOT NULL DEFAULT 0,
    tokens_sampled  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_started_at ON runs (started_at);

CREATE TABLE steps (
    run_id          TEXT NOT NULL,
    step            INTEGER NOT NULL,
    policy_version  INTEGER,
    time            REAL,
    metrics         TEXT NOT NULL DEFAULT '{}',
    UNIQUE (run_id, step)
);

CREATE TABLE checkpoints (
    id              INTEGER PRIMARY KEY,
    run_id          TEXT NOT NULL,
    step            INTEGER NOT NULL,
    kind            TEXT NOT NULL,
    name            TEXT NOT NULL,
    path            TEXT NOT NULL,
    time            REAL
);
CREATE INDEX checkpoints_run ON checkpoints (run_id, kind, step);

CREATE TABLE discarded_groups (
    id              INTEGER PRIMARY KEY,
    run_id          TEXT NOT NULL,
    group_id        INTEGER,
    scenario_id     TEXT,
    reason          TEXT NOT NULL,
    policy_version  INTEGER,
    trainer_version INTEGER,
    num_tokens      INTEGER,
    detail          TEXT NOT NULL DEFAULT '',
    time            REAL
);
CREATE INDEX discarded_groups_run ON discarded_groups (run_id);

CREATE TABLE log (
    id              INTEGER PRIMARY KEY,
    run_id          TEXT,
    time            REAL,
    level           TEXT NOT NULL,
    message         TEXT NOT NULL
);
CREATE INDEX log_run ON log (run_id, id);

CREATE TABLE run_states (
    id              INTEGER PRIMARY KEY,
    run_id          TEXT NOT NULL,
    time            REAL,
    state           TEXT NOT NULL,
    reason          TEXT NOT NULL DEFAULT ''
);
CREATE INDEX run_states_run ON run_states (run_id, id);
"""

# Version 2 adds what the dashboard reads back for `show` and `attach`: the sampled groups
# and every trajectory's summary (the rollouts view), evaluations, control commands and
# the pipeline's throughput measurements. Only new tables: version 1 rows are unchanged.
_SCHEMA_V2 = """
CREATE TABLE sampled_groups (
    id              INTEGER PRIMARY KEY,
    run_id          TEXT NOT NULL,
    group_id        INTEGER,
    scenario_id     TEXT,
    policy_version  INTEGER,
    num_trajectories INTEGER,
    num_tokens      INTEGER,
    reward_mean     REAL,
    time            REAL
);
CREATE INDEX sampled_groups_run ON sampled_groups (run_id, id);

CREATE TABLE trajectories (
    id              INTEGER PRIMARY KEY,
    run_id          TEXT NOT NULL,
    group_id        INTEGER,
    idx             INTEGER NOT NULL,
    reward          REAL,
    policy_version  INTEGER,
    num_tokens      INTEGER,
    messages        TEXT NOT NULL DEFAULT '[]',
    time            REAL
);
CREATE INDEX trajectories_run ON trajectories (run_id, group_id, idx);

CREATE TABLE evals (
    id              INTEGER PRIMARY KEY,
    run_id          TEXT NOT NULL,
    step            INTEGER,
    policy_version  INTEGER,
    time            REAL,
    metrics         TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX evals_run ON evals (run_id, id);

CREATE TABLE commands (
    id              INTEGER PRIMARY KEY,
    run_id          TEXT NOT NULL,
    time            REAL,
    command         TEXT NOT NULL,
    args            TEXT NOT NULL DEFAULT '{}',
    source          TEXT NOT NULL DEFAULT ''
);
CREATE INDEX commands_run ON commands (run_id, id);

CREATE TABLE throughput (
    id              INTEGER PRIMARY KEY,
    run_id          TEXT NOT NULL,
    time            REAL,
    measured        TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX throughput_run ON throughput (run_id, id);
"""

# Version 3 adds what an exactly-once resume needs: the life cycle of every group (its
# scenario's position in the run's scenario stream, the policy versions, the step that
# trained it or the reason it was dropped), and for checkpoints whether they are confirmed
# (written AND recorded) and the resume state saved with them. Rows of older versions
# were written only after their checkpoint was saved: they count as confirmed.
_SCHEMA_V3 = """
CREATE TABLE group_lifecycle (
    run_id          TEXT NOT NULL,
    group_id        INTEGER NOT NULL,
    scenario_index  INTEGER NOT NULL,
    scenario_id     TEXT NOT NULL DEFAULT '',
    status          TEXT NOT NULL,
    policy_version  INTEGER,
    sampled_version INTEGER,
    trainer_version INTEGER,
    step            INTEGER,
    reason          TEXT NOT NULL DEFAULT '',
    detail          TEXT NOT NULL DEFAULT '',
    num_tokens      INTEGER,
    reward_mean     REAL,
    started_at      REAL,
    sampled_at      REAL,
    finished_at     REAL,
    PRIMARY KEY (run_id, group_id)
);
CREATE INDEX group_lifecycle_position ON group_lifecycle (run_id, scenario_index);
ALTER TABLE checkpoints ADD COLUMN confirmed INTEGER NOT NULL DEFAULT 1;
ALTER TABLE checkpoints ADD COLUMN resume_state TEXT;
"""

# Migrations from version N-1 to N; index 0 creates version 1 from an empty file.
_MIGRATIONS: list[str] = [_SCHEMA_V1, _SCHEMA_V2, _SCHEMA_V3]

#: Life cycle of a group (`group_lifecycle.status`): started -> sampled -> trained, or
#: discarded (with a reason) from started or sampled; `unused` when the run ended first;
#: `requeued` when a resume found it unconsumed at the checkpoint (its scenario runs again
#: as a new group).
GROUP_STATUSES = ("started", "sampled", "trained", "discarded", "unused", "requeued")

_SQL_RUN_STARTED = """
INSERT INTO runs (run_id, name, backend, base_model, config, status, started_at, max_steps,
                  start_step)
VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?)
ON CONFLICT (run_id) DO UPDATE SET
    name = excluded.name, backend = excluded.backend, base_model = excluded.base_model,
    config = excluded.config, status = 'running', reason = '', ended_at = NULL,
    final_step = NULL, max_steps = excluded.max_steps, start_step = excluded.start_step
"""
_SQL_RUN_FINISHED = (
    "UPDATE runs SET status = ?, reason = ?, ended_at = ?, final_step = ? WHERE run_id = ?"
)
_SQL_STEP = """
INSERT INTO steps (run_id, step, policy_version, time, metrics) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (run_id, step) DO UPDATE SET
    policy_version = excluded.policy_version, time = excluded.time, metrics = excluded.metrics
"""
# A checkpoint row is inserted unconfirmed when writing starts; once saved it is replaced
# (new rowid, so readers that follow rowids see it) by a confirmed row with its resume state.
_SQL_CHECKPOINT_STARTED = (
    "INSERT INTO checkpoints (run_id, step, kind, name, path, time, confirmed) "
    "VALUES (?, ?, ?, ?, '', ?, 0)"
)
_SQL_CHECKPOINT_UNCONFIRMED = (
    "DELETE FROM checkpoints WHERE run_id = ? AND kind = ? AND name = ? AND confirmed = 0"
)
_SQL_CHECKPOINT = (
    "INSERT INTO checkpoints (run_id, step, kind, name, path, time, confirmed, resume_state) "
    "VALUES (?, ?, ?, ?, ?, ?, 1, ?)"
)
_SQL_GROUP_STARTED = """
INSERT INTO group_lifecycle (run_id, group_id, scenario_index, scenario_id, status,
                             policy_version, started_at)
VALUES (?, ?, ?, ?, 'started', ?, ?)
"""
_SQL_GROUP_SAMPLED = """
UPDATE group_lifecycle SET status = 'sampled', sampled_version = ?, num_tokens = ?,
                           reward_mean = ?, sampled_at = ?
WHERE run_id = ? AND group_id = ? AND status = 'started'
"""
_SQL_GROUP_DISCARDED = """
UPDATE group_lifecycle SET status = 'discarded', reason = ?, detail = ?, step = ?,
                           trainer_version = ?, finished_at = ?
WHERE run_id = ? AND group_id = ? AND status IN ('started', 'sampled')
"""
_SQL_GROUP_TRAINED = """
UPDATE group_lifecycle SET status = 'trained', step = ?, trainer_version = ?, finished_at = ?
WHERE run_id = ? AND group_id = ? AND status = 'sampled'
"""
_SQL_GROUPS_UNUSED = """
UPDATE group_lifecycle SET status = 'unused', detail = 'the run ended before it was trained'
WHERE run_id = ? AND status IN ('started', 'sampled')
"""
_SQL_DISCARDED = """
INSERT INTO discarded_groups (run_id, group_id, scenario_id, reason, policy_version,
                              trainer_version, num_tokens, detail, time)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_SQL_LOG = "INSERT INTO log (run_id, time, level, message) VALUES (?, ?, ?, ?)"
_SQL_STATE = "INSERT INTO run_states (run_id, time, state, reason) VALUES (?, ?, ?, ?)"
_SQL_SAMPLED_GROUP = """
INSERT INTO sampled_groups (run_id, group_id, scenario_id, policy_version, num_trajectories,
                            num_tokens, reward_mean, time)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""
_SQL_TRAJECTORY = """
INSERT INTO trajectories (run_id, group_id, idx, reward, policy_version, num_tokens, messages,
                          time)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""
_SQL_EVAL = "INSERT INTO evals (run_id, step, policy_version, time, metrics) VALUES (?, ?, ?, ?, ?)"
_SQL_COMMAND = "INSERT INTO commands (run_id, time, command, args, source) VALUES (?, ?, ?, ?, ?)"
_SQL_THROUGHPUT = "INSERT INTO throughput (run_id, time, measured) VALUES (?, ?, ?)"
_SQL_REQUEUE = """
UPDATE group_lifecycle SET
    detail = 'was ' || status || coalesce(' (' || nullif(reason, '') || ')', '')
             || coalesce(' at step ' || step, '') || '; run again on resuming from step ' || ?1,
    status = 'requeued', step = NULL, reason = ''
WHERE run_id = ?2 AND (status IN ('started', 'sampled', 'unused')
                       OR (status IN ('trained', 'discarded') AND step > ?1))
"""
_SQL_RECOUNT = """
UPDATE runs SET groups_sampled = (SELECT count(*) FROM sampled_groups WHERE run_id = ?1),
                tokens_sampled = (SELECT coalesce(sum(num_tokens), 0) FROM sampled_groups
                                  WHERE run_id = ?1)
WHERE run_id = ?1
"""
_SQL_MAX_GROUP_ID = """
SELECT max(g) FROM (SELECT max(group_id) AS g FROM group_lifecycle WHERE run_id = ?1
                    UNION ALL SELECT max(group_id) FROM sampled_groups WHERE run_id = ?1
                    UNION ALL SELECT max(group_id) FROM discarded_groups WHERE run_id = ?1)
"""
_SQL_GROUPS = (
    "UPDATE runs SET groups_sampled = groups_sampled + ?, tokens_sampled = tokens_sampled + ? "
    "WHERE run_id = ?"
)
# Tables whose rows are independent of each other's order; written with one executemany each.
# The group life cycle comes last, in its own order (a group's events arrive in that order).
_TABLE_SQL = (_SQL_STEP, _SQL_CHECKPOINT_STARTED, _SQL_CHECKPOINT_UNCONFIRMED, _SQL_CHECKPOINT,
              _SQL_DISCARDED, _SQL_LOG, _SQL_STATE,
              _SQL_SAMPLED_GROUP, _SQL_TRAJECTORY, _SQL_EVAL, _SQL_COMMAND, _SQL_THROUGHPUT,
              _SQL_GROUP_STARTED, _SQL_GROUP_SAMPLED, _SQL_GROUP_DISCARDED, _SQL_GROUP_TRAINED,
              _SQL_GROUPS_UNUSED)

#: Tables `RunStore.rows_after` reads (each has a run_id column).
READABLE_TABLES = ("steps", "checkpoints", "discarded_groups", "log", "run_states",
                   "sampled_groups", "trajectories", "evals", "commands", "throughput",
                   "group_lifecycle")

#: Seconds of event encoding on the loop between two turns given to other tasks.
_PREPARE_SLICE = 0.002

# sqlite3 errors caused by one row's data: skip the row, keep the batch.
_ROW_ERRORS = (
    sqlite3.IntegrityError,
    sqlite3.InterfaceError,
    sqlite3.ProgrammingError,
    sqlite3.DataError,
    OverflowError,
    TypeError,
    ValueError,
)


class StoreError(Exception):
    """The run store cannot be opened or used (message names the file)."""


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    try:
        return float(obj)  # numpy / torch scalars
    except (TypeError, ValueError):
        return str(obj)


_ENCODER = json.JSONEncoder(default=_json_default)  # NaN/inf allowed: json.loads reads them back


def _dumps(obj: Any) -> str:
    return _ENCODER.encode(obj)


def _int_or_none(x: Any) -> int | None:
    return None if x is None else int(x)


def _float_or_none(x: Any) -> float | None:
    return None if x is None else float(x)


def _str(x: Any) -> str:
    return x if isinstance(x, str) else str(x)


class _Batch:
    """Rows prepared from a batch of events, grouped for few round trips to SQLite."""

    __slots__ = ("runs_ops", "table_rows", "group_counts", "events", "confirms")

    def __init__(self) -> None:
        self.runs_ops: list[tuple[str, tuple[Any, ...]]] = []  # order matters: kept as given
        self.table_rows: dict[str, list[tuple[Any, ...]]] = {sql: [] for sql in _TABLE_SQL}
        self.group_counts: dict[str, list[int]] = {}  # run_id -> [groups, tokens]
        self.events = 0
        self.confirms: list[int] = []  # steps of the checkpoints this batch confirms


class RunStore:
    """Persists engine events to a SQLite file; see the module docstring."""

    def __init__(
        self,
        path: Path,
        conn: aiosqlite.Connection,
        *,
        max_batch: int = 1000,
        commit_interval: float = 0.05,
        busy_timeout: float = 5.0,
    ) -> None:
        # Use `await RunStore.open(path)`; the constructor does no I/O.
        self.path = path
        self._conn: aiosqlite.Connection | None = conn
        self._max_batch = max(1, int(max_batch))
        self._commit_interval = max(0.0, float(commit_interval))
        self._busy_timeout = busy_timeout
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._queue: deque[tuple[str | None, Any]] = deque()
        self._wake = asyncio.Event()  # the queue is not empty, or we are stopping
        self._hurry = asyncio.Event()  # flush/close: write now, skip the commit interval
        self._db_lock = asyncio.Lock()  # one user of the connection at a time
        self._writer: asyncio.Task[None] | None = None
        self._stopping = False
        self._closed = False
        self._close_done: asyncio.Future[None] | None = None
        self._enqueued = 0  # events accepted by handle()
        self._processed = 0  # events the writer has finished with (written or dropped)
        self._urgent_until = 0  # flush() asked for everything up to this count, no delay
        self._flush_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._last_commit = 0.0
        self._warned_closed = False
        self._current_run: str | None = None
        #: Schema version of the file (older only for a store opened read-only).
        self.schema_version = SCHEMA_VERSION
        #: Write transactions committed by the writer (schema setup not counted).
        self.commits = 0
        #: Events written (their rows are committed).
        self.written = 0
        #: Events that could not be stored (bad event, no run yet, store closed, write failure).
        self.dropped = 0
        #: Errors logged by the writer (bad events, rows, failed transactions).
        self.errors = 0

    # ------------------------------------------------------------------ opening

    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        start: bool = True,
        max_batch: int = 1000,
        commit_interval: float = 0.05,
        busy_timeout: float = 5.0,
    ) -> RunStore:
        """Open (creating if needed) the store at `path` and start its writer task.

        `commit_interval` is the least time between two write transactions while events
        trickle in (flush/close skip it); `busy_timeout` is how long to wait for another
        writer's lock, at open and on each write.
        """
        path = Path(path).expanduser()
        if path.is_dir():
            raise StoreError(f"run store {path} is a directory, not a database file")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the directory for run store {path}: {exc}") from exc
        try:
            conn = await aiosqlite.connect(str(path), isolation_level=None, timeout=busy_timeout)
        except sqlite3.Error as exc:
            raise _store_error(path, exc) from exc
        try:
            conn.row_factory = sqlite3.Row
            await _prepare_schema(conn, path)
        except BaseException:
            await conn.close()
            raise
        store = cls(
            path,
            conn,
            max_batch=max_batch,
            commit_interval=commit_interval,
            busy_timeout=busy_timeout,
        )
        if start:
            store.start()
        return store

    def start(self) -> None:
        """Start the writer task (idempotent). `open` does this unless `start=False`."""
        if self._closed or self._stopping:
            raise StoreError(f"run store {self.path} is closed")
        if self._writer is None:
            self._writer = self._loop.create_task(self._write_loop(), name="run-store-writer")

    async def __aenter__(self) -> RunStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ events in

    @property
    def current_run_id(self) -> str | None:
        """The run that events handed to `handle` now belong to."""
        return self._current_run

    @property
    def pending(self) -> int:
        """Events handed to `handle` and not yet committed or dropped."""
        return self._enqueued - self._processed

    def handle(self, event: Event) -> None:
        """EventBus subscriber: queue `event` for the writer. Never blocks, never does I/O."""
        if threading.get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self.handle, event)
            return
        if self._stopping or self._closed:
            self.dropped += 1
            if not self._warned_closed:
                self._warned_closed = True
                logger.warning(
                    "run store %s is closed; dropping %s", self.path, type(event).__name__
                )
            return
        if isinstance(event, RunStarted):
            self._current_run = event.run_id
        self._queue.append((self._current_run, event))
        self._enqueued += 1
        self._wake.set()

    async def flush(self) -> None:
        """Wait until every event handed to `handle` before this call is committed (or dropped)."""
        target = self._enqueued
        if self._processed >= target:
            return
        if self._writer is None:
            raise StoreError(f"run store {self.path}: writer not started (call start())")
        if self._writer.done():
            raise StoreError(f"run store {self.path}: writer task has stopped")
        fut: asyncio.Future[None] = self._loop.create_future()
        self._flush_waiters.append((target, fut))
        self._urgent_until = max(self._urgent_until, target)
        self._wake.set()
        self._hurry.set()
        # If the writer dies while we wait, don't hang.
        done, _ = await asyncio.wait({fut, self._writer}, return_when=asyncio.FIRST_COMPLETED)
        if fut not in done:
            fut.cancel()
            if self._processed < target:
                raise StoreError(f"run store {self.path}: writer stopped before flushing")

    async def close(self) -> None:
        """Flush, stop the writer and close the connection. Safe to call more than once."""
        if self._close_done is not None:
            await asyncio.shield(self._close_done)
            return
        done = self._close_done = self._loop.create_future()
        try:
            self._stopping = True
            self._wake.set()
            self._hurry.set()
            if self._writer is not None:
                try:
                    # Shielded: cancelling close() must not kill the writer mid-transaction.
                    await asyncio.shield(self._writer)
                except asyncio.CancelledError:
                    if not self._writer.cancelled():
                        raise  # close() itself was cancelled
                    logger.warning("run store %s: writer was cancelled", self.path)
            await self._drain_all()  # leftovers if the writer was cancelled or never started
            self._resolve_waiters(force=True)
            if self._conn is not None:
                conn, self._conn = self._conn, None
                try:
                    await conn.close()
                except sqlite3.Error:
                    logger.exception("closing run store %s failed", self.path)
            self._closed = True
            done.set_result(None)
        except BaseException:
            # Not closed: let a later close() try again.
            self._close_done = None
            done.cancel()
            raise

    # ------------------------------------------------------------------ writer

    async def _write_loop(self) -> None:
        while True:
            if not self._queue:
                if self._stopping:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            if (
                self._commit_interval > 0
                and not self._stopping
                and self._processed >= self._urgent_until
            ):
                delay = self._last_commit + self._commit_interval - self._loop.time()
                if delay > 0:
                    # Coalesce a trickle of events into one transaction; flush/close cut this short.
                    self._hurry.clear()
                    try:
                        await asyncio.wait_for(self._hurry.wait(), delay)
                    except TimeoutError:
                        pass
            await self._write_some()

    async def _drain_all(self) -> None:
        while self._queue:
            await self._write_some()

    async def _write_some(self) -> None:
        n = min(len(self._queue), self._max_batch)
        items = [self._queue.popleft() for _ in range(n)]
        try:
            batch = await self._prepare(items)
            await self._write_batch(batch)
        except Exception:  # never let the writer die
            self.errors += 1
            self.dropped += n
            logger.exception("run store %s: could not write %d events", self.path, n)
        finally:
            self._processed += n
            self._last_commit = self._loop.time()
            self._resolve_waiters()

    def _resolve_waiters(self, force: bool = False) -> None:
        keep = []
        for target, fut in self._flush_waiters:
            if force or target <= self._processed:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((target, fut))
        self._flush_waiters = keep

    async def _prepare(self, items: list[tuple[str | None, Any]]) -> _Batch:
        batch = _Batch()
        # Keep the loop responsive on big batches: give it a turn every couple of ms (a
        # group with its trajectories takes ~0.1 ms to encode; 128 of them stalled 20 ms).
        deadline = time.perf_counter() + _PREPARE_SLICE
        for run_id, event in items:
            if time.perf_counter() > deadline:
                await asyncio.sleep(0)
                deadline = time.perf_counter() + _PREPARE_SLICE
            try:
                stored = self._add_event(batch, run_id, event)
            except Exception:
                self.errors += 1
                self.dropped += 1
                logger.exception("run store: bad event %r; skipped", event)
                continue
            if stored:
                batch.events += 1
            else:
                self.dropped += 1
        return batch

    def _add_event(self, batch: _Batch, run_id: str | None, e: Any) -> bool:
        """Append the rows for one event; False if it is not stored (not an error)."""
        if isinstance(e, LogEmitted):
            batch.table_rows[_SQL_LOG].append(
                (run_id, _float_or_none(e.time), _str(e.level), _str(e.message))
            )
            return True
        if isinstance(e, RunStarted):
            batch.runs_ops.append(
                (
                    _SQL_RUN_STARTED,
                    (
                        _str(e.run_id),
                        _str(e.name),
                        _str(e.backend),
                        _str(e.base_model),
                        _dumps(dict(e.config)),
                        _float_or_none(e.time),
                        _int_or_none(e.max_steps),
                        int(e.start_step),
                    ),
                )
            )
            return True
        if not isinstance(e, Event):
            raise TypeError(f"not an engine event: {type(e).__name__}")
        if run_id is None:
            logger.warning("run store: %s before any RunStarted; dropped", type(e).__name__)
            return False
        t = _float_or_none(e.time)
        if isinstance(e, StepTrained):
            metrics = {str(k): v for k, v in dict(e.metrics).items()}
            batch.table_rows[_SQL_STEP].append(
                (run_id, int(e.step), _int_or_none(e.policy_version), t, _dumps(metrics))
            )
            if e.group_ids:
                # The version the gradient was taken against (a skipped step made none).
                version = int(e.policy_version) - (0 if metrics.get("train/skipped") else 1)
                batch.table_rows[_SQL_GROUP_TRAINED].extend(
                    (int(e.step), version, t, run_id, int(g)) for g in e.group_ids)
        elif isinstance(e, GroupSampled):
            counts = batch.group_counts.setdefault(run_id, [0, 0])
            counts[0] += 1
            counts[1] += int(e.num_tokens)
            group_id = _int_or_none(e.group_id)
            batch.table_rows[_SQL_SAMPLED_GROUP].append(
                (run_id, group_id, _str(e.scenario_id), _int_or_none(e.policy_version),
                 _int_or_none(e.num_trajectories), _int_or_none(e.num_tokens),
                 _float_or_none(e.reward_mean), t)
            )
            for idx, trajectory in enumerate(e.trajectories):
                batch.table_rows[_SQL_TRAJECTORY].append(
                    (run_id, group_id, idx, _float_or_none(trajectory.reward),
                     _int_or_none(trajectory.policy_version), _int_or_none(trajectory.num_tokens),
                     _dumps([dict(m) for m in trajectory.messages]), t)
                )
            batch.table_rows[_SQL_GROUP_SAMPLED].append(
                (_int_or_none(e.policy_version), _int_or_none(e.num_tokens),
                 _float_or_none(e.reward_mean), t, run_id, group_id))
        elif isinstance(e, GroupStarted):
            batch.table_rows[_SQL_GROUP_STARTED].append(
                (run_id, int(e.group_id), int(e.scenario_index), _str(e.scenario_id),
                 _int_or_none(e.policy_version), t))
        elif isinstance(e, CheckpointStarted):
            batch.table_rows[_SQL_CHECKPOINT_STARTED].append(
                (run_id, int(e.step), _str(e.kind), _str(e.name), t))
        elif isinstance(e, EvalCompleted):
            metrics = {str(k): v for k, v in dict(e.metrics).items()}
            batch.table_rows[_SQL_EVAL].append(
                (run_id, _int_or_none(e.step), _int_or_none(e.policy_version), t,
                 _dumps(metrics))
            )
        elif isinstance(e, CommandReceived):
            batch.table_rows[_SQL_COMMAND].append(
                (run_id, t, _str(e.command), _dumps(dict(e.args)), _str(e.source))
            )
        elif isinstance(e, ThroughputMeasured):
            measured = {
                name: getattr(e, name, None) for name in (
                    "window", "rollouts_per_s", "sampled_tokens_per_s", "trained_tokens_per_s",
                    "queue_depth", "in_flight", "trainer_busy", "sampler_busy", "verdict",
                    "loop_lag_p99")
            }
            measured["staleness_in_flight"] = {str(k): v for k, v in e.staleness_in_flight.items()}
            measured["staleness_queued"] = {str(k): v for k, v in e.staleness_queued.items()}
            batch.table_rows[_SQL_THROUGHPUT].append((run_id, t, _dumps(measured)))
        elif isinstance(e, CheckpointSaved):
            batch.table_rows[_SQL_CHECKPOINT_UNCONFIRMED].append(
                (run_id, _str(e.kind), _str(e.name)))
            batch.table_rows[_SQL_CHECKPOINT].append(
                (run_id, int(e.step), _str(e.kind), _str(e.name), _str(e.path), t,
                 _dumps(dict(e.resume_state)) if e.resume_state else None)
            )
            batch.confirms.append(int(e.step))
        elif isinstance(e, GroupDiscarded):
            batch.table_rows[_SQL_DISCARDED].append(
                (
                    run_id,
                    _int_or_none(e.group_id),
                    _str(e.scenario_id),
                    _str(e.reason),
                    _int_or_none(e.policy_version),
                    _int_or_none(e.trainer_version),
                    _int_or_none(e.num_tokens),
                    _str(e.detail),
                    t,
                )
            )
            batch.table_rows[_SQL_GROUP_DISCARDED].append(
                (_str(e.reason), _str(e.detail), int(e.step) if e.step >= 0 else None,
                 _int_or_none(e.trainer_version), t, run_id, _int_or_none(e.group_id)))
        elif isinstance(e, RunStateChanged):
            batch.table_rows[_SQL_STATE].append((run_id, t, _str(e.state), _str(e.reason)))
        elif isinstance(e, RunFinished):
            batch.runs_ops.append(
                (
                    _SQL_RUN_FINISHED,
                    (_str(e.status), _str(e.reason), t, _int_or_none(e.final_step), run_id),
                )
            )
            batch.table_rows[_SQL_GROUPS_UNUSED].append((run_id,))
        else:
            logger.debug("run store: ignoring %s", type(e).__name__)
            return False
        return True

    async def _write_batch(self, batch: _Batch) -> None:
        if not batch.events:
            return
        attempts = 3
        for attempt in range(1, attempts + 1):
            try:
                async with self._db_lock:
                    bad_rows = await self._transaction(batch)
                break
            except sqlite3.OperationalError as exc:
                if _is_locked(exc) and attempt < attempts:
                    logger.warning("run store %s is locked; retrying the write", self.path)
                    await asyncio.sleep(0.1 * attempt)
                    continue
                raise
        self.commits += 1
        self.written += batch.events - bad_rows
        self.dropped += bad_rows

    async def _transaction(self, batch: _Batch) -> int:
        """Write the batch in one transaction; returns the number of rows skipped as bad."""
        conn = self._require_conn()
        bad = 0
        await conn.execute("BEGIN IMMEDIATE")
        try:
            for sql, params in batch.runs_ops:
                if not await self._execute_row(conn, sql, params):
                    bad += 1
            for sql, rows in batch.table_rows.items():
                if rows:
                    bad += await self._execute_rows(conn, sql, rows)
            if batch.group_counts:
                rows = [(g, t, run_id) for run_id, (g, t) in batch.group_counts.items()]
                await conn.executemany(_SQL_GROUPS, rows)
            if batch.confirms:
                faults.hit("commit", max(batch.confirms))  # test hook; see engine.faults
            await conn.execute("COMMIT")
        except BaseException:
            try:
                await conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise
        return bad

    async def _execute_row(self, conn: aiosqlite.Connection, sql: str, params: Any) -> bool:
        try:
            cur = await conn.execute(sql, params)
        except _ROW_ERRORS as exc:
            self.errors += 1
            logger.error("run store: row %r not written: %s", params, exc)
            return False
        if sql is _SQL_RUN_FINISHED and cur.rowcount == 0:
            logger.warning("run store: RunFinished for unknown run %r", params[-1])
        await cur.close()
        return True

    async def _execute_rows(
        self, conn: aiosqlite.Connection, sql: str, rows: list[tuple[Any, ...]]
    ) -> int:
        await conn.execute("SAVEPOINT rows")
        try:
            await conn.executemany(sql, rows)
        except _ROW_ERRORS:
            # Find the bad rows one by one; the good ones are still written.
            await conn.execute("ROLLBACK TO rows")
            await conn.execute("RELEASE rows")
            bad = 0
            for params in rows:
                if not await self._execute_row(conn, sql, params):
                    bad += 1
            return bad
        await conn.execute("RELEASE rows")
        return 0

    # ------------------------------------------------------------------ reads

    def _require_conn(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise StoreError(f"run store {self.path} is closed")
        return self._conn

    async def _fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        async with self._db_lock:
            conn = self._require_conn()
            return list(await conn.execute_fetchall(sql, tuple(params)))

    async def runs(self) -> list[dict[str, Any]]:
        """All runs, newest first; `config` is decoded to a dict."""
        rows = await self._fetchall("SELECT * FROM runs ORDER BY started_at DESC, rowid DESC")
        return [_run_row(r) for r in rows]

    async def run(self, run_id: str) -> dict[str, Any] | None:
        rows = await self._fetchall("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        return _run_row(rows[0]) if rows else None

    async def steps(self, run_id: str) -> list[tuple[int, dict[str, Any]]]:
        """(step, metrics) for each step of the run, in step order."""
        rows = await self._fetchall(
            "SELECT step, metrics FROM steps WHERE run_id = ? ORDER BY step", (run_id,)
        )
        return [(r["step"], json.loads(r["metrics"])) for r in rows]

    def _confirmed(self) -> str:
        """SQL condition: a confirmed checkpoint (every row, in stores older than v3)."""
        return " AND confirmed = 1" if self.schema_version >= 3 else ""

    async def checkpoints(self, run_id: str) -> list[dict[str, Any]]:
        """The run's confirmed checkpoints, in step order."""
        rows = await self._fetchall(
            "SELECT run_id, step, kind, name, path, time FROM checkpoints WHERE run_id = ?"
            + self._confirmed() + " ORDER BY step, id",
            (run_id,),
        )
        return [dict(r) for r in rows]

    async def latest_checkpoint(self, run_id: str, kind: str = "state") -> dict[str, Any] | None:
        """The confirmed checkpoint of `kind` with the highest step (the last saved on ties),
        or None."""
        rows = await self._fetchall(
            "SELECT run_id, step, kind, name, path, time FROM checkpoints "
            "WHERE run_id = ? AND kind = ?" + self._confirmed()
            + " ORDER BY step DESC, id DESC LIMIT 1",
            (run_id, kind),
        )
        return dict(rows[0]) if rows else None

    # Resume (engine.resume, engine.run).

    async def resume_points(self, run_id: str) -> list[dict[str, Any]]:
        """Confirmed full checkpoints of the run that carry a resume state, newest first;
        `resume_state` is decoded (rows whose state cannot be read are left out)."""
        if self.schema_version < 3:
            return []
        rows = await self._fetchall(
            "SELECT run_id, step, kind, name, path, time, resume_state FROM checkpoints "
            "WHERE run_id = ? AND kind = 'state' AND confirmed = 1 "
            "AND resume_state IS NOT NULL ORDER BY step DESC, id DESC",
            (run_id,),
        )
        points = []
        for row in rows:
            try:
                state = json.loads(row["resume_state"])
            except ValueError:
                logger.warning("run store: unreadable resume state of %s", row["name"])
                continue
            if isinstance(state, dict):
                points.append({**dict(row), "resume_state": state})
        return points

    async def reconcile(self, run_id: str, step: int) -> dict[str, int]:
        """Make the stored run look as it was when its checkpoint at `step` was taken, in
        one transaction: steps and evaluations after `step` and checkpoints after it (or
        never confirmed) are deleted; groups not consumed by `step` (started, sampled,
        unused, or trained / dropped at a later step) become `requeued`, and their rows in
        sampled_groups, trajectories and discarded_groups are deleted. Call with nothing
        of this run waiting to be written (`flush` first).

        Returns {"steps_removed", "groups_requeued", "next_group_id"}."""
        async with self._db_lock:
            conn = self._require_conn()
            await conn.execute("BEGIN IMMEDIATE")
            try:
                cur = await conn.execute(_SQL_REQUEUE, (int(step), run_id))
                requeued = cur.rowcount
                for table in ("sampled_groups", "trajectories", "discarded_groups"):
                    await conn.execute(
                        f"DELETE FROM {table} WHERE run_id = ?1 AND group_id IN (SELECT "
                        "group_id FROM group_lifecycle WHERE run_id = ?1 AND status = "
                        "'requeued')", (run_id,))
                cur = await conn.execute("DELETE FROM steps WHERE run_id = ? AND step > ?",
                                         (run_id, int(step)))
                steps_removed = cur.rowcount
                await conn.execute("DELETE FROM evals WHERE run_id = ? AND step > ?",
                                   (run_id, int(step)))
                await conn.execute("DELETE FROM checkpoints WHERE run_id = ? AND "
                                   "(step > ? OR confirmed = 0)", (run_id, int(step)))
                await conn.execute(_SQL_RECOUNT, (run_id,))
                cur = await conn.execute(_SQL_MAX_GROUP_ID, (run_id,))
                row = await cur.fetchone()
                await conn.execute("COMMIT")
            except BaseException:
                try:
                    await conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise
        top = row[0] if row is not None else None
        return {"steps_removed": steps_removed, "groups_requeued": requeued,
                "next_group_id": 0 if top is None else int(top) + 1}

    async def progress(self) -> dict[str, dict[str, int | None]]:
        """Per run: the last stored step and the step of the last confirmed full
        checkpoint ({"step", "checkpoint"}, None when there is none)."""
        out: dict[str, dict[str, int | None]] = {}
        for run_id, last in await self._fetchall(
                "SELECT run_id, max(step) FROM steps GROUP BY run_id"):
            out.setdefault(run_id, {"step": None, "checkpoint": None})["step"] = last
        for run_id, last in await self._fetchall(
                "SELECT run_id, max(step) FROM checkpoints WHERE kind = 'state'"
                + self._confirmed() + " GROUP BY run_id"):
            out.setdefault(run_id, {"step": None, "checkpoint": None})["checkpoint"] = last
        return out

    async def groups(self, run_id: str) -> list[dict[str, Any]]:
        """The life cycle of every group of the run, by scenario position then group id."""
        if self.schema_version < 3:
            return []
        rows = await self._fetchall(
            "SELECT * FROM group_lifecycle WHERE run_id = ? ORDER BY scenario_index, group_id",
            (run_id,),
        )
        return [dict(r) for r in rows]

    async def discarded(self, run_id: str) -> list[dict[str, Any]]:
        rows = await self._fetchall(
            "SELECT run_id, group_id, scenario_id, reason, policy_version, trainer_version, "
            "num_tokens, detail, time FROM discarded_groups WHERE run_id = ? ORDER BY id",
            (run_id,),
        )
        return [dict(r) for r in rows]

    async def log(self, run_id: str | None, limit: int = 200) -> list[dict[str, Any]]:
        """The last `limit` log lines of the run, oldest first (run_id None: lines outside runs)."""
        rows = await self._fetchall(
            "SELECT * FROM (SELECT id, run_id, time, level, message FROM log "
            "WHERE run_id IS ? ORDER BY id DESC LIMIT ?) ORDER BY id",
            (run_id, int(limit)),
        )
        return [{k: r[k] for k in ("run_id", "time", "level", "message")} for r in rows]

    async def states(self, run_id: str) -> list[dict[str, Any]]:
        """State changes of the run, in order."""
        rows = await self._fetchall(
            "SELECT run_id, time, state, reason FROM run_states WHERE run_id = ? ORDER BY id",
            (run_id,),
        )
        return [dict(r) for r in rows]

    # Read helpers for `show` and `attach` (which open the store with `open_readonly`).

    async def has_table(self, table: str) -> bool:
        rows = await self._fetchall(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        )
        return bool(rows)

    async def rows_after(
        self, table: str, run_id: str, after: int = 0, limit: int = 10_000
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
        out = []
        for row in rows:
            d = dict(row)
            for column in ("metrics", "messages", "args", "measured", "config"):
                if isinstance(d.get(column), str):
                    try:
                        d[column] = json.loads(d[column])
                    except ValueError:
                        pass
            out.append(d)
        return out

    async def trajectories(self, run_id: str, group_id: int) -> list[dict[str, Any]]:
        """The trajectory summaries of one sampled group, in order (messages decoded)."""
        if not await self.has_table("trajectories"):
            return []
        rows = await self._fetchall(
            "SELECT group_id, idx, reward, policy_version, num_tokens, messages, time "
            "FROM trajectories WHERE run_id = ? AND group_id = ? ORDER BY idx",
            (run_id, int(group_id)),
        )
        return [{**dict(r), "messages": json.loads(r["messages"])} for r in rows]

    @classmethod
    async def open_readonly(cls, path: str | Path, *, busy_timeout: float = 5.0) -> RunStore:
        """Open an existing store for reading only (another process may be writing it).

        Nothing is created or migrated and no writer runs; `handle` must not be used.
        Raises StoreError if the file is missing or is not a run store this code can read.
        """
        path = Path(path).expanduser()
        if not path.is_file():
            raise StoreError(f"run store {path} does not exist")
        uri = f"{path.resolve().as_uri()}?mode=ro"
        try:
            conn = await aiosqlite.connect(uri, uri=True, isolation_level=None,
                                           timeout=busy_timeout)
        except sqlite3.Error as exc:
            raise _store_error(path, exc) from exc
        try:
            conn.row_factory = sqlite3.Row
            version = await _check_ownership(conn, path)
            if version == 0:
                raise StoreError(f"{path} is empty: not a tinker-tui run store")
        except sqlite3.Error as exc:
            await conn.close()
            raise _store_error(path, exc) from exc
        except BaseException:
            await conn.close()
            raise
        store = cls(path, conn, busy_timeout=busy_timeout)
        store.schema_version = version
        store._stopping = True  # read-only: handle() drops events
        return store


# ---------------------------------------------------------------------- helpers


def _run_row(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    try:
        d["config"] = json.loads(d.get("config") or "{}")
    except ValueError:
        pass
    return d


def _is_locked(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


def _store_error(path: Path, exc: BaseException) -> StoreError:
    msg = str(exc).lower()
    if _is_locked(exc):
        return StoreError(f"run store {path} is locked by another writer ({exc})")
    if "not a database" in msg or "encrypted" in msg or "malformed" in msg:
        return StoreError(
            f"{path} is not a SQLite database (or is damaged); refusing to use it "
            f"as a run store ({exc})"
        )
    if "unable to open" in msg or "readonly" in msg or "read-only" in msg:
        return StoreError(f"cannot open run store {path} for writing ({exc})")
    return StoreError(f"run store {path}: {exc}")


async def _prepare_schema(conn: aiosqlite.Connection, path: Path) -> None:
    """Check the file is ours (or empty) before writing anything, then create/migrate."""
    try:
        if await _check_ownership(conn, path):
            await _check_intact(conn, path)
        # Only now change the file: WAL mode is persistent and rewrites the header.
        cur = await conn.execute("PRAGMA journal_mode=WAL")
        row = await cur.fetchone()
        await cur.close()
        if row is None or str(row[0]).lower() != "wal":
            logger.warning(
                "run store %s: WAL journal mode unavailable (got %r)", path, row[0] if row else None
            )
        await conn.execute("PRAGMA synchronous=NORMAL")
        await conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-check inside the write lock: another process may have set the file up.
            version = await _check_ownership(conn, path)
            for v in range(version, SCHEMA_VERSION):
                for statement in _split_sql(_MIGRATIONS[v]):
                    await conn.execute(statement)
            if version < SCHEMA_VERSION:
                await conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
                await conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            await conn.execute("COMMIT")
        except BaseException:
            try:
                await conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise
    except sqlite3.Error as exc:
        raise _store_error(path, exc) from exc


async def _check_intact(conn: aiosqlite.Connection, path: Path) -> None:
    """StoreError if SQLite finds the file damaged. A damaged page may sit anywhere; without
    this check a run would append to the file and fail (or lose rows) later."""
    cur = await conn.execute("PRAGMA quick_check(3)")
    problems = [str(r[0]) for r in await cur.fetchall()]
    await cur.close()
    if problems != ["ok"]:
        raise StoreError(
            f"run store {path} is damaged ({'; '.join(problems)[:300]}); refusing to write "
            "to it: restore it from a backup, or pass another --db file")


async def _check_ownership(conn: aiosqlite.Connection, path: Path) -> int:
    """The file's schema version (0 for an empty file); StoreError if it is not ours."""

    async def scalar(sql: str) -> Any:
        cur = await conn.execute(sql)
        row = await cur.fetchone()
        await cur.close()
        return row[0] if row else None

    app_id = await scalar("PRAGMA application_id")
    version = await scalar("PRAGMA user_version")
    objects = await scalar("SELECT count(*) FROM sqlite_master")
    if app_id == 0 and version == 0 and objects == 0:
        return 0  # a new (or empty) file
    if app_id != APPLICATION_ID:
        raise StoreError(
            f"{path} is a SQLite database but not a tinker-tui run store "
            f"(application_id={app_id}, user_version={version}); refusing to modify it"
        )
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"run store {path} has schema version {version}, newer than this tinker-tui "
            f"supports ({SCHEMA_VERSION}); upgrade tinker-tui or use another store file"
        )
    if version < 1:
        raise StoreError(f"run store {path} has an invalid schema version {version}")
    return version


def _split_sql(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
