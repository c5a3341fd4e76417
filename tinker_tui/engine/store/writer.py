"""Writing the run store: every engine event, persisted to SQLite without blocking the loop.

`RunStore.handle` is an `EventBus` subscriber. It only stamps the event with the run it belongs
to and appends it to an in-memory queue; one writer task drains the queue and writes everything
queued at that moment (up to `max_batch` events) in one transaction, so a burst of thousands of
events costs a handful of commits. SQLite itself runs in aiosqlite's thread. Which rows an event
becomes is the codec's business (`codec.py`); a row SQLite rejects is skipped, not its batch.

Events other than `RunStarted` carry no run id: they belong to the run of the most recent
`RunStarted` handed to this store. A `LogEmitted` before any run is stored with a NULL run id;
any other event before the first `RunStarted` is dropped (and counted in `dropped`).

`RunStore.open` refuses a file that is not a run store this code may write (`schema.py`).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosqlite

from tinker_tui.engine import faults
from tinker_tui.engine.errors import DiskFull, is_disk_full
from tinker_tui.engine.events import Event, RunStarted
from tinker_tui.engine.store.codec import (
    SQL_GROUP_COUNTS,
    SQL_RUN_FINISHED,
    Row,
    Rows,
    encode,
)
from tinker_tui.engine.store.reader import StoreReader
from tinker_tui.engine.store.schema import (
    StoreError,
    is_locked,
    prepare_schema,
    store_error,
)

logger = logging.getLogger(__name__)

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

# Reconciling a run to a checkpoint (`RunStore.reconcile`): groups not consumed by the
# checkpoint's step run again, the run's counters are counted again, and the next group id
# continues after every group the run has recorded.
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


class RunStore(StoreReader):
    """Persists engine events to a SQLite file (see the module docstring); reads like a
    `StoreReader`."""

    def __init__(
        self,
        path: Path,
        conn: aiosqlite.Connection,
        *,
        max_batch: int = 1000,
        commit_interval: float = 0.05,
    ) -> None:
        # Use `await RunStore.open(path)`; the constructor does no I/O.
        super().__init__(path, conn)
        self._max_batch = max(1, int(max_batch))
        self._commit_interval = max(0.0, float(commit_interval))
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._queue: deque[tuple[str | None, Any]] = deque()
        self._wake = asyncio.Event()  # the queue is not empty, or we are stopping
        self._hurry = asyncio.Event()  # flush/close: write now, skip the commit interval
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
        #: Write transactions committed by the writer (schema setup not counted).
        self.commits = 0
        #: Events written (their rows are committed).
        self.written = 0
        #: Events that could not be stored (bad event, no run yet, store closed, write failure).
        self.dropped = 0
        #: Errors logged by the writer (bad events, rows, failed transactions).
        self.errors = 0
        #: Set when the disk is full: nothing more is written (the store keeps a whole prefix
        #: of the run's events, which a resume reconciles) and `flush` raises it.
        self.failure: DiskFull | None = None
        #: Called once with `failure` when it is set (the run stops then).
        self.on_failure: Callable[[DiskFull], None] | None = None

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
            raise store_error(path, exc) from exc
        try:
            conn.row_factory = sqlite3.Row
            await prepare_schema(conn, path)
        except BaseException:
            await conn.close()
            raise
        store = cls(
            path,
            conn,
            max_batch=max_batch,
            commit_interval=commit_interval,
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
        """Wait until every event handed to `handle` before this call is committed (or dropped).
        Raises `DiskFull` once the disk is full: the run cannot go on unrecorded."""
        if self.failure is not None:
            raise self.failure
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
        if self.failure is not None:
            raise self.failure

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
            await super().close()
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
            if self.failure is not None:
                raise self.failure
            batch = await self._prepare(items)
            await self._write_batch(batch)
        except Exception as exc:  # never let the writer die
            self.errors += 1
            self.dropped += n
            if not is_disk_full(exc):
                logger.exception("run store %s: could not write %d events", self.path, n)
            elif self.failure is None:
                self.failure = DiskFull.writing("run store", self.path)
                logger.error("%s", self.failure)
                if self.on_failure is not None:
                    self.on_failure(self.failure)
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

    async def _prepare(self, items: list[tuple[str | None, Any]]) -> Rows:
        batch = Rows()
        # Keep the loop responsive on big batches: give it a turn every couple of ms (a
        # group with its trajectories takes ~0.1 ms to encode; 128 of them stalled 20 ms).
        deadline = time.perf_counter() + _PREPARE_SLICE
        for run_id, event in items:
            if time.perf_counter() > deadline:
                await asyncio.sleep(0)
                deadline = time.perf_counter() + _PREPARE_SLICE
            try:
                stored = encode(batch, run_id, event)
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

    async def _write_batch(self, batch: Rows) -> None:
        if not batch.events:
            return
        attempts = 3
        for attempt in range(1, attempts + 1):
            try:
                async with self._db_lock:
                    bad_rows = await self._transaction(batch)
                break
            except sqlite3.OperationalError as exc:
                if is_locked(exc) and attempt < attempts:
                    logger.warning("run store %s is locked; retrying the write", self.path)
                    await asyncio.sleep(0.1 * attempt)
                    continue
                raise
        self.commits += 1
        self.written += batch.events - bad_rows
        self.dropped += bad_rows

    async def _transaction(self, batch: Rows) -> int:
        """Write the batch in one transaction; returns the number of rows skipped as bad."""
        conn = self._require_conn()
        bad = 0
        await conn.execute("BEGIN IMMEDIATE")
        try:
            for sql, params in batch.run_ops:
                if not await self._execute_row(conn, sql, params):
                    bad += 1
            for sql, rows in batch.by_statement.items():
                if rows:
                    bad += await self._execute_rows(conn, sql, rows)
            if batch.group_counts:
                rows = [(g, t, run_id) for run_id, (g, t) in batch.group_counts.items()]
                await conn.executemany(SQL_GROUP_COUNTS, rows)
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
        if sql is SQL_RUN_FINISHED and cur.rowcount == 0:
            logger.warning("run store: RunFinished for unknown run %r", params[-1])
        await cur.close()
        return True

    async def _execute_rows(self, conn: aiosqlite.Connection, sql: str, rows: list[Row]) -> int:
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

    # ------------------------------------------------------------------ resume

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
                        "'requeued')",
                        (run_id,),
                    )
                cur = await conn.execute(
                    "DELETE FROM steps WHERE run_id = ? AND step > ?", (run_id, int(step))
                )
                steps_removed = cur.rowcount
                await conn.execute(
                    "DELETE FROM evals WHERE run_id = ? AND step > ?", (run_id, int(step))
                )
                await conn.execute(
                    "DELETE FROM trained_tokens WHERE run_id = ? AND step > ?", (run_id, int(step))
                )
                await conn.execute(
                    "DELETE FROM checkpoints WHERE run_id = ? AND (step > ? OR confirmed = 0)",
                    (run_id, int(step)),
                )
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
        return {
            "steps_removed": steps_removed,
            "groups_requeued": requeued,
            "next_group_id": 0 if top is None else int(top) + 1,
        }
