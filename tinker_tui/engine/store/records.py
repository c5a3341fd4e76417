"""What clients write into a run store besides the engine's events: a run's name and note
(edited from a dashboard while the engine may be writing the same file), and sweeps
(`tinker-tui sweep`: the grid, and each combination's run and status in it).

Each write is one short transaction with the standard library's sqlite3, waiting for the
engine's writer as SQLite's busy timeout allows; call them in a thread from a loop. The
store's schema must be current (`RunStore.open` creates and migrates it). The sweeps are
read back through `StoreReader.sweeps`, decoded here.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_tui.engine.store.schema import StoreError, store_error

#: Seconds a write waits for the engine's writer to let go of the file.
BUSY_TIMEOUT = 5.0

#: A sweep run's status while the sweep has not seen it end.
SWEEP_PENDING = "pending"
SWEEP_RUNNING = "running"


@dataclass(frozen=True)
class SweepRun:
    """One combination of a sweep: its run and how it went, as the sweep recorded it
    (`status`: pending, running, then the run's end: completed, stopped, failed,
    interrupted)."""

    sweep_id: str
    idx: int
    run_id: str
    settings: Mapping[str, Any]
    status: str = SWEEP_PENDING
    exit_code: int | None = None


@dataclass(frozen=True)
class StoredSweep:
    """A sweep: the task, the grid of settings, the flags every run shares, its runs."""

    sweep_id: str
    task: str
    task_spec: str
    grid: Mapping[str, Sequence[Any]]
    run_args: Sequence[str]
    parallel: int
    created_at: float
    runs: Sequence[SweepRun] = field(default_factory=tuple)


def _connect(path: str | Path) -> sqlite3.Connection:
    path = Path(path).expanduser()
    if not path.is_file():
        raise StoreError(f"run store {path} does not exist")
    return sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)


def write(path: str | Path, statements: Sequence[tuple[str, Sequence[Any]]]) -> int:
    """Run `statements` in one transaction; the rows the last one changed."""
    try:
        conn = _connect(path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            changed = 0
            for sql, params in statements:
                changed = conn.execute(sql, tuple(params)).rowcount
            conn.execute("COMMIT")
            return changed
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        if "no such column" in str(exc) or "no such table" in str(exc):
            raise StoreError(
                f"run store {path} is older than this tinker-tui; run any "
                "`tinker-tui run` on it once to upgrade it"
            ) from None
        raise store_error(Path(path), exc) from exc
    except sqlite3.Error as exc:
        raise store_error(Path(path), exc) from exc


def set_run_label(path: str | Path, run_id: str, run_name: str, note: str) -> None:
    """Give a stored run its name and note; StoreError if the store has no such run."""
    changed = write(
        path,
        [("UPDATE runs SET run_name = ?, note = ? WHERE run_id = ?", (run_name, note, run_id))],
    )
    if not changed:
        raise StoreError(f"no run {run_id!r} in {path}")


def record_sweep(path: str | Path, sweep: StoredSweep) -> None:
    """Store a new sweep and its runs (all pending)."""
    statements: list[tuple[str, Sequence[Any]]] = [
        (
            "INSERT INTO sweeps (sweep_id, task, task_spec, grid, run_args, parallel, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                sweep.sweep_id,
                sweep.task,
                sweep.task_spec,
                json.dumps(dict(sweep.grid)),
                json.dumps(list(sweep.run_args)),
                int(sweep.parallel),
                sweep.created_at,
            ),
        )
    ]
    for run in sweep.runs:
        statements.append(
            (
                "INSERT INTO sweep_runs (sweep_id, idx, run_id, settings, status) "
                "VALUES (?, ?, ?, ?, ?)",
                (sweep.sweep_id, run.idx, run.run_id, json.dumps(dict(run.settings)), run.status),
            )
        )
    write(path, statements)


def set_sweep_run_status(
    path: str | Path, sweep_id: str, idx: int, status: str, exit_code: int | None = None
) -> None:
    write(
        path,
        [
            (
                "UPDATE sweep_runs SET status = ?, exit_code = ? WHERE sweep_id = ? AND idx = ?",
                (status, exit_code, sweep_id, idx),
            )
        ],
    )


def set_sweep_parallel(path: str | Path, sweep_id: str, parallel: int) -> None:
    """A resumed sweep's own `--parallel`, kept for the next resume."""
    write(path, [("UPDATE sweeps SET parallel = ? WHERE sweep_id = ?", (int(parallel), sweep_id))])


def _json(text: Any, default: Any) -> Any:
    try:
        value = json.loads(text or "null")
    except ValueError:
        return default
    return value if isinstance(value, type(default)) else default


def decode_sweep(row: sqlite3.Row, runs: Sequence[sqlite3.Row]) -> StoredSweep:
    """A row of `sweeps` and its rows of `sweep_runs` (in index order)."""
    return StoredSweep(
        sweep_id=row["sweep_id"],
        task=row["task"] or "",
        task_spec=row["task_spec"] or "",
        grid=_json(row["grid"], {}),
        run_args=_json(row["run_args"], []),
        parallel=int(row["parallel"] or 1),
        created_at=float(row["created_at"] or 0.0),
        runs=tuple(
            SweepRun(
                sweep_id=r["sweep_id"],
                idx=int(r["idx"]),
                run_id=r["run_id"],
                settings=_json(r["settings"], {}),
                status=r["status"] or "",
                exit_code=r["exit_code"],
            )
            for r in runs
        ),
    )
