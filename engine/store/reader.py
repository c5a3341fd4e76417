"""Reading the run store: runs, their checkpoints and resume points, and their rows.

`StoreReader` is the read side of every store: `RunStore` (the writer) is one, and
`StoreReader.open_readonly` opens one on a file another process may be writing, for `show`,
`attach`, `runs`, `export` and `run --resume`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiosqlite
from tinker_tui.engine.store.codec import JSON_COLUMNS, run_row
from tinker_tui.engine.store.schema import SCHEMA_VERSION, StoreError, check_ownership, store_error

logger = logging.getLogger(__name__)

#: Tables `rows_after` reads (each has a run_id column).
READABLE_TABLES = ("steps", "checkpoints", "discarded_groups", "log", "run_states",
                   "sampled_groups", "trajectories", "evals", "commands", "throughput",
                   "group_lifecycle")


class StoreReader:
    """Queries on a run store's connection, one at a time (see the module docstring)."""

    def __init__(self, path: Path, conn: aiosqlite.Connection, *,
                 schema_version: int = SCHEMA_VERSION) -> None:
        # Use `await StoreReader.open_readonly(path)` (or `RunStore.open`): no I/O here.
        self.path = path
        self._conn: aiosqlite.Connection | None = conn
        self._db_lock = asyncio.Lock()  # one user of the connection at a time
        #: Schema version of the file (older only for a store opened read-only).
        self.schema_version = schema_version

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
            conn = await aiosqlite.connect(uri, uri=True, isolation_level=None,
                                           timeout=busy_timeout)
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
        return StoreReader(path, conn, schema_version=version)

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
        async with self._db_lock:
            conn = self._require_conn()
            return list(await conn.execute_fetchall(sql, tuple(params)))

    async def runs(self) -> list[dict[str, Any]]:
        """All runs, newest first; `config` is decoded to a dict."""
        rows = await self._fetchall("SELECT * FROM runs ORDER BY started_at DESC, rowid DESC")
        return [run_row(r) for r in rows]

    async def run(self, run_id: str) -> dict[str, Any] | None:
        rows = await self._fetchall("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        return run_row(rows[0]) if rows else None

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
            for column in JSON_COLUMNS:
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

