"""The run store's file: its tables, the migrations between schema versions, and the checks
that a file is a run store this code may use.

The file is never overwritten: a file that is not SQLite, a SQLite database of another
application, a store written by a newer version of this code, a damaged store, or a database
another writer keeps locked raises `StoreError` naming the file, before anything is written
to it. `check_file` makes the same checks at once, with the standard library only and
without creating anything (no -wal or -shm file beside a damaged store), so a command can
refuse a bad store before it prints or starts anything. Which event becomes which row is the
codec's business (`codec.py`).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiosqlite

from tinker_tui.engine.errors import UsageError
from tinker_tui.engine.store.log_lines import migrate_log_lines

logger = logging.getLogger(__name__)

#: Schema version written to `PRAGMA user_version`.
SCHEMA_VERSION = 16
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

# Version 5 keeps what a task reports besides rewards: each trajectory's metrics (a JSON
# object, `Trajectory.metrics`), and per sampled group the members that failed and were
# dropped (the group trained with the rest) with the first failure's message.
SCHEMA_V5 = """
ALTER TABLE trajectories ADD COLUMN metrics TEXT NOT NULL DEFAULT '{}';
ALTER TABLE sampled_groups ADD COLUMN failed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sampled_groups ADD COLUMN detail TEXT NOT NULL DEFAULT '';
"""

# Version 6 keeps the checkpoints the retention policy deleted (CheckpointDeleted), so the
# dashboards list only checkpoints that still exist and a resume never picks a deleted one,
# and how the command line named each run's task (RunStarted.task_spec).
SCHEMA_V6 = """
ALTER TABLE runs ADD COLUMN task_spec TEXT NOT NULL DEFAULT '';
CREATE TABLE checkpoint_deletions (
    id              INTEGER PRIMARY KEY,
    run_id          TEXT NOT NULL,
    time            REAL,
    step            INTEGER NOT NULL,
    kind            TEXT NOT NULL,
    name            TEXT NOT NULL,
    path            TEXT NOT NULL
);
CREATE INDEX checkpoint_deletions_run ON checkpoint_deletions (run_id, path);
"""

# Version 7 keeps the backend sessions a run opened (BackendSessionOpened: the Tinker
# session ids the service bills by), for `tinker-tui cost`. Only a new table.
SCHEMA_V7 = """
CREATE TABLE backend_sessions (
    id              INTEGER PRIMARY KEY,
    run_id          TEXT NOT NULL,
    time            REAL,
    session_id      TEXT NOT NULL,
    base_model      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX backend_sessions_run ON backend_sessions (run_id, id);
"""

# Version 8 keeps a run's own name and note (`--name`, `--note`, editable from the
# dashboard; the task's name stays in `name`), and sweeps: a grid of settings, each
# combination a run of its own, grouped under the sweep's id with its status in the sweep.
SCHEMA_V8 = """
ALTER TABLE runs ADD COLUMN run_name TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN note TEXT NOT NULL DEFAULT '';
CREATE TABLE sweeps (
    sweep_id        TEXT PRIMARY KEY,
    task            TEXT NOT NULL DEFAULT '',
    task_spec       TEXT NOT NULL DEFAULT '',
    grid            TEXT NOT NULL DEFAULT '{}',
    run_args        TEXT NOT NULL DEFAULT '[]',
    parallel        INTEGER NOT NULL DEFAULT 1,
    created_at      REAL
);
CREATE TABLE sweep_runs (
    sweep_id        TEXT NOT NULL,
    idx             INTEGER NOT NULL,
    run_id          TEXT NOT NULL,
    settings        TEXT NOT NULL DEFAULT '{}',
    status          TEXT NOT NULL DEFAULT 'pending',
    exit_code       INTEGER,
    PRIMARY KEY (sweep_id, idx)
);
CREATE INDEX sweep_runs_run ON sweep_runs (run_id);
"""

# Version 9 keeps as events with columns what older versions wrote as log lines and read
# back by their text: a session start (SessionStarted: `sessions`), a resume (RunResumed:
# `resumes`, with what it redid and how long the run was down) and which tracker a
# tracker's line came from (`log.tracker`, NULL for other lines). `log_lines.py` moves an
# older store's lines into them (`DATA_MIGRATIONS`).
SCHEMA_V9 = """
ALTER TABLE log ADD COLUMN tracker TEXT;
CREATE TABLE sessions (
    id              INTEGER PRIMARY KEY,
    run_id          TEXT NOT NULL,
    time            REAL,
    backend         TEXT NOT NULL DEFAULT '',
    base_model      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX sessions_run ON sessions (run_id, id);
CREATE TABLE resumes (
    id              INTEGER PRIMARY KEY,
    run_id          TEXT NOT NULL,
    time            REAL,
    step            INTEGER NOT NULL,
    checkpoint      TEXT NOT NULL DEFAULT '',
    steps_undone    INTEGER NOT NULL DEFAULT 0,
    groups_requeued INTEGER NOT NULL DEFAULT 0,
    scenarios_pending INTEGER NOT NULL DEFAULT 0,
    down_seconds    REAL NOT NULL DEFAULT 0
);
CREATE INDEX resumes_run ON resumes (run_id, id);
"""

# Version 10 keeps why each run ended, typed (`RunFinished.cause`: "max_steps", "budget",
# "no_signal"...), so readers choose words and exit codes from it, not from the reason's text;
# and which checkpoints a person asked for (`CheckpointSaved.requested`), which retention keeps.
SCHEMA_V10 = """
ALTER TABLE runs ADD COLUMN cause TEXT NOT NULL DEFAULT '';
ALTER TABLE checkpoints ADD COLUMN requested INTEGER NOT NULL DEFAULT 0;
"""

# Version 11 keeps what each trained step trained, token by token (TokensTrained), for the
# token view: per trajectory its token ids, sampled and trainer logprobs, advantages, loss
# mask, sampling policy versions and the trainer's entropy, each a zlib-compressed array of
# fixed-width numbers (not JSON floats: a step holds thousands of tokens); and per run the
# tokenizer's piece of every token id it trained, so a stored run shows its tokens without
# its tokenizer. Only the latest `keep_token_steps` steps keep their tokens.
SCHEMA_V11 = """
CREATE TABLE trained_tokens (
    run_id          TEXT NOT NULL,
    step            INTEGER NOT NULL,
    group_id        INTEGER NOT NULL,
    idx             INTEGER NOT NULL,
    length          INTEGER NOT NULL,
    tokens          BLOB NOT NULL,
    sampled         BLOB NOT NULL,
    trainer         BLOB NOT NULL,
    advantage       BLOB NOT NULL,
    mask            BLOB NOT NULL,
    version         BLOB NOT NULL,
    entropy         BLOB,
    time            REAL,
    PRIMARY KEY (run_id, group_id, idx)
);
CREATE INDEX trained_tokens_step ON trained_tokens (run_id, step);
CREATE TABLE token_pieces (
    run_id          TEXT NOT NULL,
    token           INTEGER NOT NULL,
    piece           TEXT NOT NULL,
    PRIMARY KEY (run_id, token)
);
"""

# Version 12 keeps a step's distributions, not only its means: each trajectory's advantage
# and whether the length limit cut it off (finish reason `length`), and each step's reward
# and advantage histograms (a JSON object: name -> {"lo", "hi", "counts"}).
SCHEMA_V12 = """
ALTER TABLE trajectories ADD COLUMN advantage REAL;
ALTER TABLE trajectories ADD COLUMN truncated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE steps ADD COLUMN histograms TEXT NOT NULL DEFAULT '{}';
"""

# Version 13 keeps an evaluation's rollouts (a JSON list, each a trajectory's summary with
# its scenario id) so that `export` lists them beside training's samples.
SCHEMA_V13 = """
ALTER TABLE evals ADD COLUMN rollouts TEXT NOT NULL DEFAULT '[]';
"""

# Version 14 records a fork's parent (`run --init-from`: ``RUN@STEP`` or a tinker:// path)
# so `runs` and `compare` show lineage.
SCHEMA_V14 = """
ALTER TABLE runs ADD COLUMN parent TEXT NOT NULL DEFAULT '';
"""

# Version 15 keeps evaluations' protocols (engine.training.eval_protocol: sampling settings,
# renderer, k, success threshold) so that numbers of different protocols are never compared
# unmarked: a column of `evals`, and the evaluations of `tinker-tui eval` with every rollout
# of theirs (`eval_rollouts`, one row per scenario and sample, so a second invocation runs
# only the missing or failed ones). Rows of older versions have no protocol ('{}').
SCHEMA_V15 = """
ALTER TABLE evals ADD COLUMN protocol TEXT NOT NULL DEFAULT '{}';
CREATE TABLE eval_runs (
    eval_id         TEXT PRIMARY KEY,
    task            TEXT NOT NULL DEFAULT '',
    task_spec       TEXT NOT NULL DEFAULT '',
    model           TEXT NOT NULL DEFAULT '',
    run_id          TEXT NOT NULL DEFAULT '',
    step            INTEGER,
    backend         TEXT NOT NULL DEFAULT '',
    base_model      TEXT NOT NULL DEFAULT '',
    model_path      TEXT NOT NULL DEFAULT '',
    protocol        TEXT NOT NULL DEFAULT '{}',
    summary         TEXT NOT NULL DEFAULT '{}',
    created_at      REAL,
    updated_at      REAL
);
CREATE INDEX eval_runs_run ON eval_runs (run_id);
CREATE TABLE eval_rollouts (
    eval_id         TEXT NOT NULL,
    scenario_id     TEXT NOT NULL,
    sample          INTEGER NOT NULL,
    status          TEXT NOT NULL,
    reward          REAL,
    num_tokens      INTEGER,
    truncated       INTEGER NOT NULL DEFAULT 0,
    error           TEXT NOT NULL DEFAULT '',
    messages        TEXT NOT NULL DEFAULT '[]',
    metrics         TEXT NOT NULL DEFAULT '{}',
    time            REAL,
    PRIMARY KEY (eval_id, scenario_id, sample)
);
"""

# Version 16 records whether a fork took its parent's optimizer state (`--with-optimizer`),
# so a resume before the fork's first checkpoint takes it again.
SCHEMA_V16 = """
ALTER TABLE runs ADD COLUMN parent_optimizer INTEGER NOT NULL DEFAULT 0;
"""

#: Migrations from version N-1 to N; index 0 creates version 1 from an empty file.
MIGRATIONS: tuple[str, ...] = (
    SCHEMA_V1,
    SCHEMA_V2,
    SCHEMA_V3,
    SCHEMA_V4,
    SCHEMA_V5,
    SCHEMA_V6,
    SCHEMA_V7,
    SCHEMA_V8,
    SCHEMA_V9,
    SCHEMA_V10,
    SCHEMA_V11,
    SCHEMA_V12,
    SCHEMA_V13,
    SCHEMA_V14,
    SCHEMA_V15,
    SCHEMA_V16,
)
#: Rows a migration converts after its SQL ran, by the version it migrates to, in the same
#: transaction: (connection) -> None.
DATA_MIGRATIONS: dict[int, Callable[[aiosqlite.Connection], Awaitable[None]]] = {
    9: migrate_log_lines,
}


# ---------------------------------------------------------------------- opening checks


def is_locked(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


def is_damaged(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return "not a database" in msg or "encrypted" in msg or "malformed" in msg


def store_error(path: Path, exc: BaseException) -> StoreError:
    msg = str(exc).lower()
    if is_locked(exc):
        return StoreError(f"run store {path} is locked by another writer ({exc})")
    if is_damaged(exc):
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
                if v + 1 in DATA_MIGRATIONS:
                    await DATA_MIGRATIONS[v + 1](conn)
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


#: What SQLite asks to find a damaged page (a damaged page may sit anywhere; without this
#: check a run would append to the file and fail, or lose rows, later).
SQL_QUICK_CHECK = "PRAGMA quick_check(3)"
#: The application id, the schema version and the number of schema objects, in one row.
SQL_OWNERSHIP = (
    "SELECT (SELECT application_id FROM pragma_application_id), "
    "(SELECT user_version FROM pragma_user_version), "
    "(SELECT count(*) FROM sqlite_master)"
)


async def check_intact(conn: aiosqlite.Connection, path: Path) -> None:
    """StoreError if SQLite finds the file damaged."""
    cur = await conn.execute(SQL_QUICK_CHECK)
    problems = [str(r[0]) for r in await cur.fetchall()]
    await cur.close()
    refuse_damaged(path, problems)


def refuse_damaged(path: Path, problems: list[str]) -> None:
    if problems != ["ok"]:
        said = "; ".join(" ".join(p.split()) for p in problems)  # one line
        raise StoreError(
            f"run store {path} is damaged ({said[:300]}); refusing to write to it: restore "
            "it from a backup, or pass another --db file"
        )


async def check_ownership(conn: aiosqlite.Connection, path: Path) -> int:
    """The file's schema version (0 for an empty file); StoreError if it is not ours."""
    cur = await conn.execute(SQL_OWNERSHIP)
    row = await cur.fetchone()
    await cur.close()
    assert row is not None
    return schema_version_of(path, *row)


def schema_version_of(path: Path, app_id: Any, version: Any, objects: Any) -> int:
    """The schema version of a file with this application id, user version and number of
    schema objects (0 for an empty file); StoreError if it is not a store this code may use."""
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


# ---------------------------------------------------------------------- before anything runs

#: The first 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
#: Seconds `check_file` waits for another writer's lock: a run sharing the store holds it
#: for milliseconds per commit; longer is a writer that keeps it.
LOCK_WAIT = 0.5


def check_file(path: str | Path, *, lock_wait: float = LOCK_WAIT) -> None:
    """Refuse (StoreError, naming the file) a run store that `RunStore.open` would refuse:
    a folder, a file that is not SQLite, another application's database, a store of a newer
    schema, a damaged store, one another writer keeps locked, or one this process cannot write.
    A missing or empty file passes: it becomes a new store. Standard library only, so it
    costs milliseconds; it writes nothing and creates nothing beside the file."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise StoreError(f"run store {path} is a directory, not a database file")
    if not path.exists():
        _check_creatable(path)
        return
    if not path.is_file():
        raise StoreError(f"run store {path} is not a regular file")
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError as exc:
        raise StoreError(f"cannot read run store {path}: {exc.strerror or exc}") from None
    if header and not header.startswith(SQLITE_MAGIC):
        raise StoreError(
            f"{path} is not a SQLite database (or is damaged); refusing to use it as a run store"
        )
    if not os.access(path, os.W_OK):
        raise StoreError(f"cannot open run store {path} for writing: the file is read-only")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise StoreError(
            f"cannot open run store {path} for writing: its folder "
            f"{path.parent} is not writable (SQLite keeps its journal there)"
        )
    if not header:
        return
    # A WAL store (header bytes 18-19) no process has open has no -wal and -shm files; any
    # connection but an immutable one would create them. An immutable one takes no locks:
    # with no -shm file no other process holds one, so there is no lock to look for.
    wal = header[18:20] == b"\x02\x02"
    idle = wal and not any(Path(f"{path}{suffix}").exists() for suffix in ("-wal", "-shm"))
    try:
        if idle:
            conn = sqlite3.connect(
                f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1",
                uri=True,
                isolation_level=None,
            )
        else:
            conn = sqlite3.connect(path, timeout=lock_wait, isolation_level=None)
        try:
            if schema_version_of(path, *conn.execute(SQL_OWNERSHIP).fetchone()) == 0:
                return
            refuse_damaged(path, [str(r[0]) for r in conn.execute(SQL_QUICK_CHECK)])
            if not idle:
                conn.execute("BEGIN IMMEDIATE")  # another writer's lock, if it keeps one
                conn.execute("ROLLBACK")
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise store_error(path, exc) from exc


def _check_creatable(path: Path) -> None:
    """A new store: its nearest existing folder must let this process create it."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise StoreError(f"cannot create run store {path}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise StoreError(f"cannot create run store {path}: {folder} is not writable")
