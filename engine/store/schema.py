"""The run store's file: its tables, the migrations between schema versions, and the checks
that a file is a run store this code may use.

The file is never overwritten: a file that is not SQLite, a SQLite database of another
application, a store written by a newer version of this code, a damaged store, or a database
another writer keeps locked raises `StoreError` naming the file, before anything is written
to it. Which event becomes which row is the codec's business (`codec.py`).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import aiosqlite
from tinker_tui.engine.errors import UsageError

logger = logging.getLogger(__name__)

#: Schema version written to `PRAGMA user_version`.
SCHEMA_VERSION = 4
#: `PRAGMA application_id` of a tinker-tui run store ("ttui").
APPLICATION_ID = 0x74747569


class StoreError(UsageError):
    """The run store cannot be opened or used (message names the file)."""


SCHEMA_V1 = """
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
SCHEMA_V2 = """
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
# A group's status: started -> sampled -> trained, or discarded (with a reason) from started
# or sampled; `unused` when the run ended first; `requeued` when a resume found it
# unconsumed at the checkpoint (its scenario runs again as a new group).
SCHEMA_V3 = """
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

# Version 4 adds the start-up of a run (StartupProgressed: loading the model, each format
# warm-up step with its loss, the first rollouts), so `show` and `attach` tell it as the
# live dashboard did. Only a new table.
SCHEMA_V4 = """
CREATE TABLE startup (
    id              INTEGER PRIMARY KEY,
    run_id          TEXT NOT NULL,
    time            REAL,
    phase           TEXT NOT NULL,
    done            INTEGER NOT NULL DEFAULT 0,
    total           INTEGER NOT NULL DEFAULT 0,
    loss            REAL,
    detail          TEXT NOT NULL DEFAULT ''
);
CREATE INDEX startup_run ON startup (run_id, id);
"""

#: Migrations from version N-1 to N; index 0 creates version 1 from an empty file.
MIGRATIONS: tuple[str, ...] = (SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4)


# ---------------------------------------------------------------------- opening checks


def is_locked(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


def store_error(path: Path, exc: BaseException) -> StoreError:
    msg = str(exc).lower()
    if is_locked(exc):
        return StoreError(f"run store {path} is locked by another writer ({exc})")
    if "not a database" in msg or "encrypted" in msg or "malformed" in msg:
        return StoreError(
            f"{path} is not a SQLite database (or is damaged); refusing to use it "
            f"as a run store ({exc})"
        )
    if "unable to open" in msg or "readonly" in msg or "read-only" in msg:
        return StoreError(f"cannot open run store {path} for writing ({exc})")
    return StoreError(f"run store {path}: {exc}")


async def prepare_schema(conn: aiosqlite.Connection, path: Path) -> None:
    """Check the file is ours (or empty) before writing anything, then create/migrate."""
    try:
        if await check_ownership(conn, path):
            await check_intact(conn, path)
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
            version = await check_ownership(conn, path)
            for v in range(version, SCHEMA_VERSION):
                for statement in _split_sql(MIGRATIONS[v]):
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
        raise store_error(path, exc) from exc


async def check_intact(conn: aiosqlite.Connection, path: Path) -> None:
    """StoreError if SQLite finds the file damaged. A damaged page may sit anywhere; without
    this check a run would append to the file and fail (or lose rows) later."""
    cur = await conn.execute("PRAGMA quick_check(3)")
    problems = [str(r[0]) for r in await cur.fetchall()]
    await cur.close()
    if problems != ["ok"]:
        raise StoreError(
            f"run store {path} is damaged ({'; '.join(problems)[:300]}); refusing to write "
            "to it: restore it from a backup, or pass another --db file")


async def check_ownership(conn: aiosqlite.Connection, path: Path) -> int:
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
    return int(version)


def _split_sql(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
