"""The evaluations of `tinker-tui eval` in the run store: one row per evaluation (what was
evaluated, under which protocol, its latest summary) and one per rollout (scenario, sample),
written as each rollout ends, so an interrupted evaluation resumes where it stopped: a
second invocation runs only the rollouts that are missing or failed.

An evaluation's id is derived from what it evaluates (task, weights) and its protocol with
k left out, so the same command line finds its earlier rollouts, and a larger k adds samples
to them. Writes are short transactions with the standard library's sqlite3, like
`records.py` (call them in a thread from a loop); the store must be current (`RunStore.open`
migrates it).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_tui.engine.store.records import write
from tinker_tui.engine.store.schema import store_error

OK = "ok"
FAILED = "failed"


@dataclass(frozen=True, slots=True)
class EvalTarget:
    """What an evaluation evaluates: the task, and the weights (a run's checkpoint, or a
    base model as it is)."""

    task: str
    task_spec: str
    #: How the command line named the model (RUN@STEP, or the base model's name).
    model: str
    backend: str
    base_model: str
    #: The weights' path: sampler weights, or a full checkpoint ("" for the base model).
    model_path: str = ""
    run_id: str = ""
    step: int | None = None


@dataclass(frozen=True, slots=True)
class StoredRollout:
    scenario_id: str
    sample: int
    status: str
    reward: float | None
    num_tokens: int | None = None
    truncated: bool = False
    error: str = ""


@dataclass(frozen=True, slots=True)
class StoredEval:
    eval_id: str
    target: EvalTarget
    protocol: Mapping[str, Any]
    summary: Mapping[str, Any]
    created_at: float
    updated_at: float
    rollouts: Sequence[StoredRollout] = field(default_factory=tuple)


def eval_id(target: EvalTarget, protocol_key: str) -> str:
    """The id of the evaluation of `target` under the protocol whose key is `protocol_key`."""
    what = json.dumps(
        [target.task_spec or target.task, target.backend, target.base_model, target.model_path],
    )
    digest = hashlib.sha256(f"{what}|{protocol_key}".encode()).hexdigest()[:12]
    return f"eval-{digest}"


def begin_eval(path: str | Path, eid: str, target: EvalTarget, protocol: Mapping[str, Any]) -> None:
    """Record the evaluation (again: its protocol, as this invocation runs it)."""
    now = time.time()
    write(
        path,
        [
            (
                "INSERT INTO eval_runs (eval_id, task, task_spec, model, run_id, step, backend, "
                "base_model, model_path, protocol, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (eval_id) DO UPDATE SET protocol = excluded.protocol, "
                "model = excluded.model, updated_at = excluded.updated_at",
                (
                    eid,
                    target.task,
                    target.task_spec,
                    target.model,
                    target.run_id,
                    target.step,
                    target.backend,
                    target.base_model,
                    target.model_path,
                    json.dumps(dict(protocol)),
                    now,
                    now,
                ),
            )
        ],
    )


def record_rollout(
    path: str | Path,
    eid: str,
    rollout: StoredRollout,
    *,
    messages: Sequence[Any] = (),
    metrics: Mapping[str, Any] | None = None,
) -> None:
    """Keep one rollout's outcome (a failed one is replaced when it runs again)."""
    write(
        path,
        [
            (
                "INSERT OR REPLACE INTO eval_rollouts (eval_id, scenario_id, sample, status, "
                "reward, num_tokens, truncated, error, messages, metrics, time) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    eid,
                    rollout.scenario_id,
                    rollout.sample,
                    rollout.status,
                    rollout.reward,
                    rollout.num_tokens,
                    int(rollout.truncated),
                    rollout.error,
                    json.dumps(list(messages), default=str),
                    json.dumps(dict(metrics or {}), default=str),
                    time.time(),
                ),
            )
        ],
    )


def finish_eval(path: str | Path, eid: str, summary: Mapping[str, Any]) -> None:
    write(
        path,
        [
            (
                "UPDATE eval_runs SET summary = ?, updated_at = ? WHERE eval_id = ?",
                (json.dumps(dict(summary)), time.time(), eid),
            )
        ],
    )


def _read(path: str | Path, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
    try:
        conn = sqlite3.connect(f"file:{Path(path).expanduser()}?mode=ro", uri=True, timeout=5.0)
        try:
            conn.row_factory = sqlite3.Row
            return conn.execute(sql, tuple(params)).fetchall()
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []  # a store older than evaluations: none
        raise store_error(Path(path), exc) from exc
    except sqlite3.Error as exc:
        raise store_error(Path(path), exc) from exc


def stored_rollouts(path: str | Path, eid: str) -> list[StoredRollout]:
    return [
        StoredRollout(
            scenario_id=r["scenario_id"],
            sample=int(r["sample"]),
            status=r["status"],
            reward=r["reward"],
            num_tokens=r["num_tokens"],
            truncated=bool(r["truncated"]),
            error=r["error"] or "",
        )
        for r in _read(
            path,
            "SELECT * FROM eval_rollouts WHERE eval_id = ? ORDER BY scenario_id, sample",
            (eid,),
        )
    ]


def _json(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def stored_evals(path: str | Path, run_id: str | None = None) -> list[StoredEval]:
    """The evaluations in the store (of one run, when `run_id` is given), oldest first."""
    where, params = ("WHERE run_id = ?", (run_id,)) if run_id is not None else ("", ())
    rows = _read(path, f"SELECT * FROM eval_runs {where} ORDER BY updated_at", params)
    return [
        StoredEval(
            eval_id=r["eval_id"],
            target=EvalTarget(
                task=r["task"],
                task_spec=r["task_spec"],
                model=r["model"],
                backend=r["backend"],
                base_model=r["base_model"],
                model_path=r["model_path"],
                run_id=r["run_id"],
                step=r["step"],
            ),
            protocol=_json(r["protocol"]),
            summary=_json(r["summary"]),
            created_at=float(r["created_at"] or 0.0),
            updated_at=float(r["updated_at"] or 0.0),
        )
        for r in rows
    ]
