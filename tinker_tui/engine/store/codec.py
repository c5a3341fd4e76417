"""Events <-> rows: the one place that knows, for every event the store keeps, its table and
columns, how the event becomes rows and how rows become the event again.

The writer hands each event to `encode`, which adds the event's rows to a `Rows` batch, keyed
by the statement that writes them. The reader turns rows back into the same typed events with
the decoders that `REPLAYED` lists (table by table, in the order of events with equal times),
a run's row into a `StoredRun` (whose RunStarted / RunFinished it gives back) and a group's
life-cycle row into a `GroupFate`. An event may touch several tables: a `GroupSampled` is a
row of `sampled_groups`, one row of `trajectories` per rollout, an update of the group's life
cycle and of the run's counters. Nothing outside the store package names a table or a column.

Each event type has one section below: its statements, its encoder, its decoder. A new event
type to store: a table in `schema.py` (a new schema version), a section here, an entry in
`_ENCODERS` and, if it is read back, in `REPLAYED`.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tinker_tui.engine.events import (
    BackendSessionOpened,
    CheckpointDeleted,
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
    RunResumed,
    RunStarted,
    RunStateChanged,
    SessionStarted,
    StalledRollout,
    StartupProgressed,
    StepTrained,
    ThroughputMeasured,
    TokensTrained,
    TrackerReported,
    TrajectorySummary,
    TrajectoryTokens,
)
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.store.json_private import c_encoder

logger = logging.getLogger(__name__)

#: Row = the values of one statement's parameters, in the statement's column order.
Row = tuple[Any, ...]


class StoredRow(Protocol):
    """A row read from the store, by column name (a `sqlite3.Row`, or a dict of one)."""

    def __getitem__(self, column: str, /) -> Any: ...


# ---------------------------------------------------------------------- values


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
# The C encoder `_ENCODER.encode` builds on every call, built once: a group's rows encode 2
# JSON columns per rollout, and building it was most of each call's cost. A cyclic value is
# a RecursionError, reported and skipped like a ValueError (see `json_private.c_encoder`).
_C_ENCODE = c_encoder(_ENCODER)


def _dumps(obj: Any) -> str:
    # A rollout's metrics and messages are often empty: two encoder calls per trajectory row.
    kind = type(obj)
    if (kind is dict or kind is tuple) and not obj:
        return "{}" if kind is dict else "[]"
    if _C_ENCODE is None or isinstance(obj, str):
        return _ENCODER.encode(obj)
    return "".join(_C_ENCODE(obj, 0))


def _int_or_none(x: Any) -> int | None:
    return None if x is None else int(x)


def _float_or_none(x: Any) -> float | None:
    return None if x is None else float(x)


def _str(x: Any) -> str:
    return x if isinstance(x, str) else str(x)


def _column(row: StoredRow, name: str) -> Any:
    """A column a store of an older schema may not have (None then)."""
    try:
        return row[name]
    except (IndexError, KeyError):  # sqlite3.Row, dict
        return None


def _time(row: StoredRow) -> float:
    return float(row["time"] or 0.0)


def _dict(value: Any) -> dict[str, Any]:
    """A decoded JSON object column (an empty dict for anything else)."""
    return dict(value) if isinstance(value, dict) else {}


# ---------------------------------------------------------------------- RunStarted, RunFinished
# A row of `runs` per run: inserted by RunStarted (a resumed run's RunStarted makes it running
# again and keeps its first start time), closed by RunFinished, which also marks the groups
# the run never trained as unused.

SQL_RUN_STARTED = """
INSERT INTO runs (run_id, name, backend, base_model, config, status, started_at, max_steps,
                  start_step, task_spec, run_name, note, parent, parent_optimizer)
VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id) DO UPDATE SET
    name = excluded.name, backend = excluded.backend, base_model = excluded.base_model,
    config = excluded.config, status = 'running', reason = '', cause = '', ended_at = NULL,
    final_step = NULL, max_steps = excluded.max_steps, start_step = excluded.start_step,
    task_spec = CASE WHEN excluded.task_spec != '' THEN excluded.task_spec ELSE task_spec END,
    run_name = CASE WHEN excluded.run_name != '' THEN excluded.run_name ELSE run_name END,
    note = CASE WHEN excluded.note != '' THEN excluded.note ELSE note END,
    parent = CASE WHEN excluded.parent != '' THEN excluded.parent ELSE parent END,
    parent_optimizer = CASE WHEN excluded.parent != '' THEN excluded.parent_optimizer
                       ELSE parent_optimizer END
"""
SQL_RUN_FINISHED = (
    "UPDATE runs SET status = ?, reason = ?, ended_at = ?, final_step = ?, cause = ? "
    "WHERE run_id = ?"
)
_SQL_GROUPS_UNUSED = """
UPDATE group_lifecycle SET status = 'unused', detail = 'the run ended before it was trained'
WHERE run_id = ? AND status IN ('started', 'sampled')
"""


def _encode_run_started(rows: Rows, run_id: str | None, e: RunStarted) -> None:
    rows.run_ops.append(
        (
            SQL_RUN_STARTED,
            (
                _str(e.run_id),
                _str(e.name),
                _str(e.backend),
                _str(e.base_model),
                _dumps(dict(e.config)),
                _float_or_none(e.time),
                _int_or_none(e.max_steps),
                int(e.start_step),
                _str(e.task_spec),
                _str(e.run_name),
                _str(e.note),
                _str(e.parent),
                int(bool(e.parent_optimizer)),
            ),
        )
    )


def _encode_run_finished(rows: Rows, run_id: str, e: RunFinished) -> None:
    finished = (
        _str(e.status),
        _str(e.reason),
        _float_or_none(e.time),
        _int_or_none(e.final_step),
        _str(e.cause),
        run_id,
    )
    rows.run_ops.append((SQL_RUN_FINISHED, finished))
    rows.by_statement[_SQL_GROUPS_UNUSED].append((run_id,))


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run as the store has it: its row of `runs`."""

    run_id: str
    #: The task's name.
    name: str
    backend: str
    base_model: str
    #: The settings the run started (or was last resumed) with.
    config: dict[str, Any]
    #: "running" until it finishes, then its RunStatus (a killed run stays "running").
    status: str
    reason: str
    started_at: float | None
    ended_at: float | None
    max_steps: int | None
    start_step: int
    final_step: int | None
    groups_sampled: int
    tokens_sampled: int
    #: How the command line named the task ("" in stores older than v6).
    task_spec: str = ""
    #: The run's own name and note ("" when none; stores older than v7 have none).
    run_name: str = ""
    note: str = ""
    #: Why it ended (`StopCause`; "" while running, and in stores older than v10).
    cause: str = ""
    #: The checkpoint a fork started from, ``RUN@STEP`` or a path ("" when none, and in
    #: stores older than v14).
    parent: str = ""
    #: The fork took the parent's optimizer state too (False in stores older than v16).
    parent_optimizer: bool = False

    @property
    def label(self) -> str:
        """How lists and legends name the run: its name, else its id."""
        return self.run_name or self.run_id

    def started(self) -> RunStarted:
        """The run's RunStarted, as its last start recorded it (time: its first start)."""
        return RunStarted(
            time=float(self.started_at or 0.0),
            run_id=self.run_id,
            name=self.name,
            backend=self.backend,
            base_model=self.base_model,
            max_steps=int(self.max_steps or 0),
            start_step=self.start_step,
            config=dict(self.config),
            task_spec=self.task_spec,
            run_name=self.run_name,
            note=self.note,
            parent=self.parent,
            parent_optimizer=self.parent_optimizer,
        )

    def finished(self) -> RunFinished | None:
        """The run's RunFinished; None while the store has no end for it."""
        if self.status in ("", "running"):
            return None
        return RunFinished(
            time=float(self.ended_at or self.started_at or 0.0),
            status=self.status,  # type: ignore[arg-type]  # as recorded
            final_step=int(self.final_step or 0),
            reason=self.reason,
            cause=self.cause,  # type: ignore[arg-type]  # as recorded
        )


def decode_run(row: StoredRow) -> StoredRun:
    """A row of `runs` as a StoredRun."""
    try:
        config = json.loads(row["config"] or "{}")
    except ValueError:
        config = {}
    return StoredRun(
        run_id=row["run_id"],
        name=row["name"] or "",
        backend=row["backend"] or "",
        base_model=row["base_model"] or "",
        config=config if isinstance(config, dict) else {},
        status=row["status"] or "",
        reason=row["reason"] or "",
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        max_steps=row["max_steps"],
        start_step=int(row["start_step"] or 0),
        final_step=row["final_step"],
        groups_sampled=int(row["groups_sampled"] or 0),
        tokens_sampled=int(row["tokens_sampled"] or 0),
        task_spec=_column(row, "task_spec") or "",
        run_name=_column(row, "run_name") or "",
        note=_column(row, "note") or "",
        cause=_column(row, "cause") or "",
        parent=_column(row, "parent") or "",
        parent_optimizer=bool(_column(row, "parent_optimizer") or 0),
    )


# ---------------------------------------------------------------------- StepTrained
# A row of `steps` (one per step: a step written again replaces it); the groups its batch
# took become trained.

_SQL_STEP = """
INSERT INTO steps (run_id, step, policy_version, time, metrics, histograms)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id, step) DO UPDATE SET
    policy_version = excluded.policy_version, time = excluded.time, metrics = excluded.metrics,
    histograms = excluded.histograms
"""
_SQL_GROUP_TRAINED = """
UPDATE group_lifecycle SET status = 'trained', step = ?, trainer_version = ?, finished_at = ?
WHERE run_id = ? AND group_id = ? AND status = 'sampled'
"""


def _encode_step(rows: Rows, run_id: str, e: StepTrained) -> None:
    t = _float_or_none(e.time)
    metrics = {str(k): v for k, v in dict(e.metrics).items()}
    step = (
        run_id,
        int(e.step),
        _int_or_none(e.policy_version),
        t,
        _dumps(metrics),
        _dumps(e.histograms),
    )
    trained = []
    if e.group_ids:
        # The version the gradient was taken against (a skipped step made none).
        version = int(e.policy_version) - (0 if metrics.get(keys.TRAIN_SKIPPED) else 1)
        trained = [(int(e.step), version, t, run_id, int(g)) for g in e.group_ids]
    rows.by_statement[_SQL_STEP].append(step)
    rows.by_statement[_SQL_GROUP_TRAINED].extend(trained)


def _decode_step(row: Mapping[str, Any]) -> StepTrained:
    # `group_ids` is not a column: the reader adds it from the groups' life cycle (a dict)
    return StepTrained(
        time=_time(row),
        step=int(row["step"]),
        policy_version=int(row["policy_version"] or 0),
        metrics=_dict(row["metrics"]),
        group_ids=tuple(row.get("group_ids") or ()),
        histograms=_dict(_added(row, "histograms", None)),
    )


# ---------------------------------------------------------------------- GroupStarted
# The group's row of `group_lifecycle`, with its scenario's position in the run's stream.

_SQL_GROUP_STARTED = """
INSERT INTO group_lifecycle (run_id, group_id, scenario_index, scenario_id, status,
                             policy_version, started_at)
VALUES (?, ?, ?, ?, 'started', ?, ?)
"""


def _encode_group_started(rows: Rows, run_id: str, e: GroupStarted) -> None:
    rows.by_statement[_SQL_GROUP_STARTED].append(
        (
            run_id,
            int(e.group_id),
            int(e.scenario_index),
            _str(e.scenario_id),
            _int_or_none(e.policy_version),
            _float_or_none(e.time),
        )
    )


@dataclass(frozen=True, slots=True)
class GroupFate:
    """What became of one group: its row of `group_lifecycle`, which its GroupStarted,
    GroupSampled, GroupDiscarded and the StepTrained that took it keep up to date."""

    group_id: int
    #: Position of its scenario in the run's scenario stream.
    scenario_index: int
    scenario_id: str
    #: started, sampled, trained, discarded, unused or requeued (see schema.py).
    status: str
    #: The step that trained or dropped it.
    step: int | None
    #: Why it was dropped.
    reason: str
    detail: str


def decode_group_fate(row: StoredRow) -> GroupFate:
    return GroupFate(
        group_id=group_of(row),
        scenario_index=int(row["scenario_index"]),
        scenario_id=row["scenario_id"] or "",
        status=row["status"],
        step=row["step"],
        reason=row["reason"] or "",
        detail=row["detail"] or "",
    )


@dataclass(frozen=True, slots=True)
class GroupSpan:
    """When one group was sampled, waited and was taken (its `group_lifecycle` row's
    times and versions): a bar of the groups' timeline."""

    group_id: int
    scenario_id: str
    #: started, sampled, trained, discarded, unused or requeued (see schema.py).
    status: str
    #: The policy version it was started with, and the trainer's when it was taken.
    policy_version: int | None
    trainer_version: int | None
    step: int | None
    reason: str
    started_at: float | None
    sampled_at: float | None
    finished_at: float | None


def decode_group_span(row: StoredRow) -> GroupSpan:
    return GroupSpan(
        group_id=group_of(row),
        scenario_id=row["scenario_id"] or "",
        status=row["status"],
        policy_version=_int_or_none(row["policy_version"]),
        trainer_version=_int_or_none(row["trainer_version"]),
        step=_int_or_none(row["step"]),
        reason=row["reason"] or "",
        started_at=_float_or_none(row["started_at"]),
        sampled_at=_float_or_none(row["sampled_at"]),
        finished_at=_float_or_none(row["finished_at"]),
    )


# ---------------------------------------------------------------------- GroupSampled
# A row of `sampled_groups`, a row of `trajectories` per rollout (its index in the group as
# `idx`, its messages as JSON); the group becomes sampled and the run counts its tokens.

_SQL_SAMPLED_GROUP = """
INSERT INTO sampled_groups (run_id, group_id, scenario_id, policy_version, num_trajectories,
                            num_tokens, reward_mean, time, failed, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_SQL_TRAJECTORY = """
INSERT INTO trajectories (run_id, group_id, idx, reward, policy_version, num_tokens, messages,
                          time, metrics, advantage, truncated)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_SQL_GROUP_SAMPLED = """
UPDATE group_lifecycle SET status = 'sampled', sampled_version = ?, num_tokens = ?,
                           reward_mean = ?, sampled_at = ?
WHERE run_id = ? AND group_id = ? AND status = 'started'
"""
#: Adds a batch's sampled groups and tokens to its run's counters: (groups, tokens, run_id).
SQL_GROUP_COUNTS = (
    "UPDATE runs SET groups_sampled = groups_sampled + ?, tokens_sampled = tokens_sampled + ? "
    "WHERE run_id = ?"
)


def _encode_group_sampled(rows: Rows, run_id: str, e: GroupSampled) -> None:
    t = _float_or_none(e.time)
    group_id, version = _int_or_none(e.group_id), _int_or_none(e.policy_version)
    tokens, reward_mean = int(e.num_tokens), _float_or_none(e.reward_mean)
    group = (
        run_id,
        group_id,
        _str(e.scenario_id),
        version,
        _int_or_none(e.num_trajectories),
        tokens,
        reward_mean,
        t,
        int(e.failed),
        _str(e.detail),
    )
    # Eight or more rows per group: the conversions written out, not called per value.
    trajectories = [
        (
            run_id,
            group_id,
            idx,
            None if m.reward is None else float(m.reward),
            None if m.policy_version is None else int(m.policy_version),
            None if m.num_tokens is None else int(m.num_tokens),
            _dumps(m.messages),
            t,
            _dumps(m.metrics),
            None if m.advantage is None else float(m.advantage),
            int(bool(m.truncated)),
        )
        for idx, m in enumerate(e.trajectories)
    ]
    rows.by_statement[_SQL_SAMPLED_GROUP].append(group)
    rows.by_statement[_SQL_TRAJECTORY].extend(trajectories)
    rows.by_statement[_SQL_GROUP_SAMPLED].append(
        (version, tokens, reward_mean, t, run_id, group_id)
    )
    counts = rows.group_counts.setdefault(run_id, [0, 0])
    counts[0] += 1
    counts[1] += tokens


def _decode_group_sampled(row: StoredRow, trajectories: Sequence[StoredRow] = ()) -> GroupSampled:
    """The group's event, with the summaries of its rollouts (their `trajectories` rows)."""
    return GroupSampled(
        time=_time(row),
        group_id=group_of(row),
        scenario_id=row["scenario_id"] or "",
        policy_version=int(row["policy_version"] or 0),
        num_trajectories=int(row["num_trajectories"] or 0),
        num_tokens=int(row["num_tokens"] or 0),
        reward_mean=float(row["reward_mean"] or 0.0),
        trajectories=_summaries(trajectories),
        failed=int(_added(row, "failed", 0) or 0),
        detail=_added(row, "detail", "") or "",
    )


def _summaries(rows: Sequence[StoredRow]) -> tuple[TrajectorySummary, ...]:
    return tuple(
        TrajectorySummary(
            reward=float(r["reward"]) if r["reward"] is not None else float("nan"),
            policy_version=int(r["policy_version"] or 0),
            num_tokens=int(r["num_tokens"] or 0),
            messages=tuple(m for m in (r["messages"] or []) if isinstance(m, dict)),
            metrics=_metrics(_added(r, "metrics", None)),
            advantage=_float_or_none(_added(r, "advantage", None)),
            truncated=bool(_added(r, "truncated", 0)),
        )
        for r in sorted(rows, key=lambda r: r["idx"])
    )


def _added(row: StoredRow, column: str, default: Any) -> Any:
    """A column a later schema version added: a read-only reader does not migrate an older
    store, so its rows may lack it (`sqlite3.Row` raises IndexError, a dict KeyError)."""
    try:
        return row[column]
    except (IndexError, KeyError):
        return default


def _metrics(value: Any) -> dict[str, float | bool]:
    """A trajectory's stored metrics: numbers and booleans by name (anything else dropped)."""
    return {str(k): v for k, v in _dict(value).items() if isinstance(v, bool | int | float)}


def group_of(row: StoredRow) -> int:
    """The group a row of `sampled_groups`, `trajectories` or `group_lifecycle` is about."""
    return int(row["group_id"] or 0)


# ---------------------------------------------------------------------- GroupDiscarded
# A row of `discarded_groups`; the group becomes discarded, at the step that dropped it.

_SQL_DISCARDED = """
INSERT INTO discarded_groups (run_id, group_id, scenario_id, reason, policy_version,
                              trainer_version, num_tokens, detail, time)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_SQL_GROUP_DISCARDED = """
UPDATE group_lifecycle SET status = 'discarded', reason = ?, detail = ?, step = ?,
                           trainer_version = ?, finished_at = ?
WHERE run_id = ? AND group_id = ? AND status IN ('started', 'sampled')
"""


def _encode_group_discarded(rows: Rows, run_id: str, e: GroupDiscarded) -> None:
    t = _float_or_none(e.time)
    group_id, reason, detail = _int_or_none(e.group_id), _str(e.reason), _str(e.detail)
    trainer_version = _int_or_none(e.trainer_version)
    discarded = (
        run_id,
        group_id,
        _str(e.scenario_id),
        reason,
        _int_or_none(e.policy_version),
        trainer_version,
        _int_or_none(e.num_tokens),
        detail,
        t,
    )
    fate = (
        reason,
        detail,
        int(e.step) if e.step >= 0 else None,
        trainer_version,
        t,
        run_id,
        group_id,
    )
    rows.by_statement[_SQL_DISCARDED].append(discarded)
    rows.by_statement[_SQL_GROUP_DISCARDED].append(fate)


def _decode_group_discarded(row: Mapping[str, Any]) -> GroupDiscarded:
    return GroupDiscarded(
        time=_time(row),
        group_id=group_of(row),
        scenario_id=row["scenario_id"] or "",
        reason=row["reason"],
        policy_version=int(row["policy_version"] or 0),
        trainer_version=int(row["trainer_version"] or 0),
        num_tokens=int(row["num_tokens"] or 0),
        detail=row["detail"] or "",
        # not a column: the reader adds it from the groups' life cycle
        step=int(row.get("step", -1)),
    )


# ---------------------------------------------------------------------- checkpoints
# CheckpointStarted inserts an unconfirmed row of `checkpoints`; CheckpointSaved replaces it
# (a new rowid, so readers that follow rowids see it) by a confirmed row with its resume state.

_SQL_CHECKPOINT_STARTED = (
    "INSERT INTO checkpoints (run_id, step, kind, name, path, time, confirmed) "
    "VALUES (?, ?, ?, ?, '', ?, 0)"
)
_SQL_CHECKPOINT_UNCONFIRMED = (
    "DELETE FROM checkpoints WHERE run_id = ? AND kind = ? AND name = ? AND confirmed = 0"
)
#: A checkpoint saved again (asked for once it was written) replaces its row.
_SQL_CHECKPOINT_AGAIN = (
    "DELETE FROM checkpoints WHERE run_id = ? AND kind = ? AND path = ? AND confirmed = 1"
)
_SQL_CHECKPOINT = (
    "INSERT INTO checkpoints (run_id, step, kind, name, path, time, confirmed, resume_state, "
    "requested) VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?)"
)


def _encode_checkpoint_started(rows: Rows, run_id: str, e: CheckpointStarted) -> None:
    rows.by_statement[_SQL_CHECKPOINT_STARTED].append(
        (run_id, int(e.step), _str(e.kind), _str(e.name), _float_or_none(e.time))
    )


def _encode_checkpoint_saved(rows: Rows, run_id: str, e: CheckpointSaved) -> None:
    step, kind, name = int(e.step), _str(e.kind), _str(e.name)
    saved = (
        run_id,
        step,
        kind,
        name,
        _str(e.path),
        _float_or_none(e.time),
        _dumps(dict(e.resume_state)) if e.resume_state else None,
        int(bool(e.requested)),
    )
    rows.by_statement[_SQL_CHECKPOINT_UNCONFIRMED].append((run_id, kind, name))
    if e.requested:
        rows.by_statement[_SQL_CHECKPOINT_AGAIN].append((run_id, kind, _str(e.path)))
    rows.by_statement[_SQL_CHECKPOINT].append(saved)
    rows.confirms.append(step)


_SQL_CHECKPOINT_DELETED = (
    "INSERT INTO checkpoint_deletions (run_id, time, step, kind, name, path) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)


def _encode_checkpoint_deleted(rows: Rows, run_id: str, e: CheckpointDeleted) -> None:
    rows.by_statement[_SQL_CHECKPOINT_DELETED].append(
        (run_id, _float_or_none(e.time), int(e.step), _str(e.kind), _str(e.name), _str(e.path))
    )


def _decode_checkpoint_deleted(row: StoredRow) -> CheckpointDeleted:
    return CheckpointDeleted(
        time=_time(row), step=int(row["step"]), kind=row["kind"], name=row["name"], path=row["path"]
    )


_SQL_BACKEND_SESSION = (
    "INSERT INTO backend_sessions (run_id, time, session_id, base_model) VALUES (?, ?, ?, ?)"
)


def _encode_backend_session(rows: Rows, run_id: str, e: BackendSessionOpened) -> None:
    rows.by_statement[_SQL_BACKEND_SESSION].append(
        (run_id, _float_or_none(e.time), _str(e.session_id), _str(e.base_model))
    )


def decode_checkpoint(row: StoredRow) -> CheckpointSaved:
    """A row of `checkpoints` as the CheckpointSaved that wrote it (its resume state is
    `decode_resume_state`'s)."""
    return CheckpointSaved(
        time=_time(row),
        step=int(row["step"]),
        kind=row["kind"],
        name=row["name"],
        path=row["path"],
        requested=bool(_column(row, "requested")),
    )


# ---------------------------------------------------------------------- EvalCompleted
# A row of `evals`, metrics as JSON, its rollouts as a JSON list (each with `scenario_id`).

_SQL_EVAL = (
    "INSERT INTO evals (run_id, step, policy_version, time, metrics, rollouts, protocol) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def _encode_eval(rows: Rows, run_id: str, e: EvalCompleted) -> None:
    metrics = {str(k): v for k, v in dict(e.metrics).items()}
    rollouts = [
        {
            "scenario_id": scenario_id,
            "reward": _float_or_none(t.reward),
            "policy_version": _int_or_none(t.policy_version),
            "num_tokens": _int_or_none(t.num_tokens),
            "messages": list(t.messages),
            "metrics": dict(t.metrics),
            "truncated": bool(t.truncated),
        }
        for scenario_id, t in zip(e.scenario_ids, e.trajectories, strict=True)
    ]
    rows.by_statement[_SQL_EVAL].append(
        (
            run_id,
            _int_or_none(e.step),
            _int_or_none(e.policy_version),
            _float_or_none(e.time),
            _dumps(metrics),
            _dumps(rollouts),
            _dumps(dict(e.protocol)),
        )
    )


def _decode_eval(row: StoredRow) -> EvalCompleted:
    stored = _added(row, "rollouts", None)
    rollouts = [r for r in (stored if isinstance(stored, list) else []) if isinstance(r, dict)]
    return EvalCompleted(
        time=_time(row),
        step=int(row["step"] or 0),
        policy_version=int(row["policy_version"] or 0),
        metrics=_dict(row["metrics"]),
        protocol=_dict(_added(row, "protocol", None)),
        scenario_ids=tuple(str(r.get("scenario_id") or "") for r in rollouts),
        trajectories=tuple(
            TrajectorySummary(
                reward=float("nan") if r.get("reward") is None else float(r["reward"]),
                policy_version=int(r.get("policy_version") or 0),
                num_tokens=int(r.get("num_tokens") or 0),
                messages=tuple(m for m in r.get("messages") or [] if isinstance(m, dict)),
                metrics=_metrics(r.get("metrics")),
                truncated=bool(r.get("truncated")),
            )
            for r in rollouts
        ),
    )


# ---------------------------------------------------------------------- CommandReceived
# A row of `commands`, args as JSON.

_SQL_COMMAND = "INSERT INTO commands (run_id, time, command, args, source) VALUES (?, ?, ?, ?, ?)"


def _encode_command(rows: Rows, run_id: str, e: CommandReceived) -> None:
    rows.by_statement[_SQL_COMMAND].append(
        (run_id, _float_or_none(e.time), _str(e.command), _dumps(dict(e.args)), _str(e.source))
    )


def _decode_command(row: StoredRow) -> CommandReceived:
    return CommandReceived(
        time=_time(row), command=row["command"], args=_dict(row["args"]), source=row["source"] or ""
    )


# ---------------------------------------------------------------------- ThroughputMeasured
# A row of `throughput`: every measured field in one JSON object (`measured`).

_SQL_THROUGHPUT = "INSERT INTO throughput (run_id, time, measured) VALUES (?, ?, ?)"
_MEASURED = (
    "window",
    "rollouts_per_s",
    "sampled_tokens_per_s",
    "trained_tokens_per_s",
    "queue_depth",
    "in_flight",
    "trainer_busy",
    "sampler_busy",
    "verdict",
    "loop_lag_p99",
)


def _encode_throughput(rows: Rows, run_id: str, e: ThroughputMeasured) -> None:
    measured = {name: getattr(e, name, None) for name in _MEASURED}
    measured["staleness_in_flight"] = {str(k): v for k, v in e.staleness_in_flight.items()}
    measured["staleness_queued"] = {str(k): v for k, v in e.staleness_queued.items()}
    if e.stalled:
        measured["stalled"] = [
            {
                "group_id": s.group_id,
                "scenario_id": s.scenario_id,
                "age": s.age,
                "waiting_at": s.waiting_at,
                "file": s.file,
                "line": s.line,
                "code": s.code,
            }
            for s in e.stalled
        ]
    rows.by_statement[_SQL_THROUGHPUT].append((run_id, _float_or_none(e.time), _dumps(measured)))


def _decode_throughput(row: StoredRow) -> ThroughputMeasured | None:
    m = row["measured"]
    if not isinstance(m, dict):
        return None
    return ThroughputMeasured(
        time=_time(row),
        window=float(m.get("window", 0.0)),
        rollouts_per_s=float(m.get("rollouts_per_s", 0.0)),
        sampled_tokens_per_s=float(m.get("sampled_tokens_per_s", 0.0)),
        trained_tokens_per_s=float(m.get("trained_tokens_per_s", 0.0)),
        queue_depth=int(m.get("queue_depth", 0)),
        in_flight=int(m.get("in_flight", 0)),
        trainer_busy=float(m.get("trainer_busy", 0.0)),
        sampler_busy=float(m.get("sampler_busy", 0.0)),
        verdict=str(m.get("verdict", "")),
        staleness_in_flight=_histogram(m.get("staleness_in_flight")),
        staleness_queued=_histogram(m.get("staleness_queued")),
        loop_lag_p99=float(m.get("loop_lag_p99") or 0.0),
        stalled=tuple(_stalled(s) for s in m.get("stalled") or () if isinstance(s, dict)),
    )


def _stalled(s: Mapping[str, Any]) -> StalledRollout:
    return StalledRollout(
        group_id=int(s.get("group_id", -1)),
        scenario_id=str(s.get("scenario_id", "")),
        age=float(s.get("age", 0.0)),
        waiting_at=str(s.get("waiting_at", "")),
        file=str(s.get("file", "")),
        line=int(s.get("line") or 0),
        code=str(s.get("code", "")),
    )


def _histogram(data: Any) -> dict[int, int]:
    if not isinstance(data, dict):
        return {}
    out = {}
    for key, value in data.items():
        try:
            out[int(key)] = int(value)
        except (TypeError, ValueError):
            continue
    return out


# ---------------------------------------------------------------------- RunStateChanged

_SQL_STATE = "INSERT INTO run_states (run_id, time, state, reason) VALUES (?, ?, ?, ?)"


def _encode_state(rows: Rows, run_id: str, e: RunStateChanged) -> None:
    rows.by_statement[_SQL_STATE].append(
        (run_id, _float_or_none(e.time), _str(e.state), _str(e.reason))
    )


def _decode_state(row: StoredRow) -> RunStateChanged:
    return RunStateChanged(time=_time(row), state=row["state"], reason=row["reason"] or "")


# ---------------------------------------------------------------------- LogEmitted
# A row of `log`; a line logged before any run has a NULL run id. A TrackerReported is a
# log line with its tracker in `tracker` (NULL for every other line).

_SQL_LOG = "INSERT INTO log (run_id, time, level, message, tracker) VALUES (?, ?, ?, ?, ?)"


def _encode_log(rows: Rows, run_id: str | None, e: LogEmitted) -> None:
    rows.by_statement[_SQL_LOG].append(
        (run_id, _float_or_none(e.time), _str(e.level), _str(e.message), None)
    )


def _encode_tracker(rows: Rows, run_id: str | None, e: TrackerReported) -> None:
    rows.by_statement[_SQL_LOG].append(
        (run_id, _float_or_none(e.time), _str(e.level), _str(e.message), _str(e.tracker))
    )


def decode_log(row: StoredRow) -> LogEmitted:
    time, level, message = _time(row), row["level"], row["message"]
    tracker = _column(row, "tracker")
    if tracker:
        return TrackerReported(time=time, level=level, message=message, tracker=tracker)
    return LogEmitted(time=time, level=level, message=message)


# ---------------------------------------------------------------------- SessionStarted
# A row of `sessions` per process that ran the run (its text is made from the fields).

_SQL_SESSION = "INSERT INTO sessions (run_id, time, backend, base_model) VALUES (?, ?, ?, ?)"


def _encode_session(rows: Rows, run_id: str, e: SessionStarted) -> None:
    rows.by_statement[_SQL_SESSION].append(
        (run_id, _float_or_none(e.time), _str(e.backend), _str(e.base_model))
    )


def _decode_session(row: StoredRow) -> SessionStarted:
    return SessionStarted(
        time=_time(row), backend=row["backend"] or "", base_model=row["base_model"] or ""
    )


# ---------------------------------------------------------------------- RunResumed
# A row of `resumes` per `--resume`: where it went back to, what it redid, the time down.

_SQL_RESUME = (
    "INSERT INTO resumes (run_id, time, step, checkpoint, steps_undone, "
    "groups_requeued, scenarios_pending, down_seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def _encode_resume(rows: Rows, run_id: str, e: RunResumed) -> None:
    rows.by_statement[_SQL_RESUME].append(
        (
            run_id,
            _float_or_none(e.time),
            int(e.step),
            _str(e.checkpoint),
            int(e.steps_undone),
            int(e.groups_requeued),
            int(e.scenarios_pending),
            float(e.down_seconds),
        )
    )


def _decode_resume(row: StoredRow) -> RunResumed:
    return RunResumed(
        time=_time(row),
        run_id=row["run_id"],
        step=int(row["step"]),
        checkpoint=row["checkpoint"] or "",
        steps_undone=int(row["steps_undone"] or 0),
        groups_requeued=int(row["groups_requeued"] or 0),
        scenarios_pending=int(row["scenarios_pending"] or 0),
        down_seconds=float(row["down_seconds"] or 0.0),
    )


# ---------------------------------------------------------------------- StartupProgressed
# A row of `startup` per phase and per warm-up step.

_SQL_STARTUP = (
    "INSERT INTO startup (run_id, time, phase, done, total, loss, detail) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def _encode_startup(rows: Rows, run_id: str, e: StartupProgressed) -> None:
    rows.by_statement[_SQL_STARTUP].append(
        (
            run_id,
            _float_or_none(e.time),
            _str(e.phase),
            int(e.done),
            int(e.total),
            _float_or_none(e.loss),
            _str(e.detail),
        )
    )


def _decode_startup(row: StoredRow) -> StartupProgressed:
    return StartupProgressed(
        time=_time(row),
        phase=row["phase"],
        done=int(row["done"] or 0),
        total=int(row["total"] or 0),
        loss=_float_or_none(row["loss"]),
        detail=row["detail"] or "",
    )


# ---------------------------------------------------------------------- TokensTrained
# A row of `trained_tokens` per trajectory the step trained (each array a zlib-compressed
# run of fixed-width numbers: `TOKEN_ARRAYS`), a row of `token_pieces` per token id first
# seen, and the rows of steps older than the run's `keep_token_steps` deleted.

_SQL_TOKENS = """
INSERT INTO trained_tokens (run_id, step, group_id, idx, length, tokens, sampled, trainer,
                            advantage, mask, version, entropy, time)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id, group_id, idx) DO UPDATE SET
    step = excluded.step, length = excluded.length, tokens = excluded.tokens,
    sampled = excluded.sampled, trainer = excluded.trainer, advantage = excluded.advantage,
    mask = excluded.mask, version = excluded.version, entropy = excluded.entropy,
    time = excluded.time
"""
_SQL_TOKENS_FORGET = "DELETE FROM trained_tokens WHERE run_id = ? AND step <= ?"
_SQL_PIECE = "INSERT OR IGNORE INTO token_pieces (run_id, token, piece) VALUES (?, ?, ?)"
#: The arrays of a `TrajectoryTokens` and how each is kept (numpy dtype, little-endian).
TOKEN_ARRAYS = (
    ("tokens", "<i4"),
    ("sampled", "<f4"),
    ("trainer", "<f4"),
    ("advantage", "<f4"),
    ("mask", "u1"),
    ("version", "<i4"),
    ("entropy", "<f4"),
)


def _pack(values: Any, dtype: str) -> bytes:
    import zlib

    import numpy as np

    return zlib.compress(np.ascontiguousarray(values, dtype=dtype).tobytes(), 1)


def _unpack(blob: bytes | None, dtype: str) -> Any:
    import zlib

    import numpy as np

    if blob is None:
        return None
    return np.frombuffer(zlib.decompress(blob), dtype=dtype)


def _encode_tokens(rows: Rows, run_id: str, e: TokensTrained) -> None:
    t, step = _float_or_none(e.time), int(e.step)
    trained = []
    for traj in e.trajectories:
        packed = [
            None
            if getattr(traj, name) is None or not len(getattr(traj, name))
            else _pack(getattr(traj, name), dtype)
            for name, dtype in TOKEN_ARRAYS
        ]
        trained.append(
            (run_id, step, int(traj.group_id), int(traj.index), len(traj.tokens), *packed, t)
        )
    pieces = [(run_id, int(token), _str(piece)) for token, piece in dict(e.pieces).items()]
    if e.keep_steps > 0 and step - e.keep_steps > 0:
        rows.by_statement[_SQL_TOKENS_FORGET].append((run_id, step - e.keep_steps))
    rows.by_statement[_SQL_TOKENS].extend(trained)
    rows.by_statement[_SQL_PIECE].extend(pieces)


def decode_tokens(row: StoredRow) -> TrajectoryTokens:
    """A row of `trained_tokens` as the trajectory's tokens (numpy arrays, read-only)."""
    arrays = {name: _unpack(row[name], dtype) for name, dtype in TOKEN_ARRAYS}
    return TrajectoryTokens(group_id=group_of(row), index=int(row["idx"]), **arrays)


# ---------------------------------------------------------------------- encoding a batch

#: Statements a batch runs with one executemany each, in this order. Rows of different
#: tables are independent; a checkpoint's unconfirmed row goes before it is replaced, and
#: the group life cycle comes last, in its own order (a group's events arrive in that order).
STATEMENT_ORDER = (
    _SQL_STEP,
    _SQL_TOKENS,
    _SQL_PIECE,
    # after the inserts: a batch may hold several steps' tokens, and the older ones go too
    _SQL_TOKENS_FORGET,
    _SQL_CHECKPOINT_STARTED,
    _SQL_CHECKPOINT_UNCONFIRMED,
    _SQL_CHECKPOINT_AGAIN,
    _SQL_CHECKPOINT,
    _SQL_CHECKPOINT_DELETED,
    _SQL_BACKEND_SESSION,
    _SQL_DISCARDED,
    _SQL_LOG,
    _SQL_SESSION,
    _SQL_RESUME,
    _SQL_STATE,
    _SQL_SAMPLED_GROUP,
    _SQL_TRAJECTORY,
    _SQL_EVAL,
    _SQL_COMMAND,
    _SQL_THROUGHPUT,
    _SQL_STARTUP,
    _SQL_GROUP_STARTED,
    _SQL_GROUP_SAMPLED,
    _SQL_GROUP_DISCARDED,
    _SQL_GROUP_TRAINED,
    _SQL_GROUPS_UNUSED,
)

_Encoder = Callable[["Rows", Any, Any], None]
_ENCODERS: dict[type, _Encoder] = {
    RunStarted: _encode_run_started,
    RunFinished: _encode_run_finished,
    StepTrained: _encode_step,
    TokensTrained: _encode_tokens,
    GroupStarted: _encode_group_started,
    GroupSampled: _encode_group_sampled,
    GroupDiscarded: _encode_group_discarded,
    CheckpointStarted: _encode_checkpoint_started,
    CheckpointSaved: _encode_checkpoint_saved,
    CheckpointDeleted: _encode_checkpoint_deleted,
    BackendSessionOpened: _encode_backend_session,
    EvalCompleted: _encode_eval,
    CommandReceived: _encode_command,
    ThroughputMeasured: _encode_throughput,
    RunStateChanged: _encode_state,
    LogEmitted: _encode_log,
    TrackerReported: _encode_tracker,
    SessionStarted: _encode_session,
    RunResumed: _encode_resume,
    StartupProgressed: _encode_startup,
}


class Rows:
    """The rows a batch of events becomes, grouped for few round trips to SQLite."""

    __slots__ = ("run_ops", "by_statement", "group_counts", "events", "confirms")

    def __init__(self) -> None:
        #: (statement, row) on the `runs` table, run one by one in this order, first.
        self.run_ops: list[tuple[str, Row]] = []
        #: statement -> its rows, for every statement of STATEMENT_ORDER.
        self.by_statement: dict[str, list[Row]] = {sql: [] for sql in STATEMENT_ORDER}
        #: run_id -> [groups, tokens] sampled in this batch (SQL_GROUP_COUNTS).
        self.group_counts: dict[str, list[int]] = {}
        #: Events encoded into this batch.
        self.events = 0
        #: Steps of the checkpoints this batch confirms.
        self.confirms: list[int] = []


def _encoder_for(kind: type) -> _Encoder | None:
    for cls in kind.__mro__:
        encoder = _ENCODERS.get(cls)
        if encoder is not None:
            return encoder
    return None


def encode(rows: Rows, run_id: str | None, event: object) -> bool:
    """Add the rows `event` becomes, as an event of run `run_id`, to `rows`. False if the
    event is not stored (not an error): an event before any run (other than a log line or
    RunStarted), or an event type the store does not keep. TypeError for a non-event; any
    error from a malformed event propagates, and then none of its rows were added (each
    encoder computes every row before adding any)."""
    encoder = _ENCODERS.get(type(event))
    if encoder is not None and run_id is not None:  # the common case, first
        encoder(rows, run_id, event)
        return True
    encoder = encoder or _encoder_for(type(event))
    if not isinstance(event, (LogEmitted, RunStarted)):
        if not isinstance(event, Event):
            raise TypeError(f"not an engine event: {type(event).__name__}")
        if run_id is None:
            logger.warning("run store: %s before any RunStarted; dropped", type(event).__name__)
            return False
        if encoder is None:
            logger.debug("run store: ignoring %s", type(event).__name__)
            return False
    assert encoder is not None
    encoder(rows, run_id, event)
    return True


# ---------------------------------------------------------------------- decoding rows


@dataclass(frozen=True, slots=True)
class Replayed:
    """A table whose rows read back as events of one type."""

    table: str
    event: type[Event]
    #: row -> event (None for a row this code cannot read); with `with_trajectories`,
    #: (row, the rows of `trajectories` of its group) -> event.
    decode: Callable[..., Event | None]
    with_trajectories: bool = False


#: The tables a run's events are read back from, in the order of events with equal times
#: (a command before the state change it caused, a group before the step that trained
#: it, ...). GroupStarted, CheckpointStarted and the run's own events are not replayed: the
#: first two only feed the group life cycle and unconfirmed checkpoints, and RunStarted /
#: RunFinished come from the run's row (`StoredRun`).
REPLAYED = (
    Replayed("startup", StartupProgressed, _decode_startup),
    Replayed("commands", CommandReceived, _decode_command),
    Replayed("run_states", RunStateChanged, _decode_state),
    Replayed("log", LogEmitted, decode_log),
    Replayed("sessions", SessionStarted, _decode_session),
    Replayed("resumes", RunResumed, _decode_resume),
    Replayed("sampled_groups", GroupSampled, _decode_group_sampled, with_trajectories=True),
    Replayed("discarded_groups", GroupDiscarded, _decode_group_discarded),
    Replayed("steps", StepTrained, _decode_step),
    Replayed("evals", EvalCompleted, _decode_eval),
    Replayed("checkpoints", CheckpointSaved, decode_checkpoint),
    Replayed("checkpoint_deletions", CheckpointDeleted, _decode_checkpoint_deleted),
    Replayed("throughput", ThroughputMeasured, _decode_throughput),
)
#: The rollouts of sampled groups: read with their group, into its GroupSampled.
TRAJECTORIES = "trajectories"
#: Tables whose rows `StoreReader.rows_after` reads (each has a run_id column).
READABLE_TABLES = (*(r.table for r in REPLAYED), TRAJECTORIES, "group_lifecycle")

#: Columns that hold JSON.
_JSON_COLUMNS = (
    "metrics",
    "messages",
    "args",
    "measured",
    "config",
    "histograms",
    "rollouts",
    "protocol",
)


def decode_row(row: sqlite3.Row | Mapping[str, Any]) -> dict[str, Any]:
    """A row as a dict, its JSON columns decoded (a column that is not valid JSON is left
    as its text)."""
    d = dict(row)
    for column in _JSON_COLUMNS:
        if isinstance(d.get(column), str):
            try:
                d[column] = json.loads(d[column])
            except ValueError:
                pass
    return d


def decode_resume_state(row: StoredRow) -> dict[str, Any] | None:
    """The resume state saved with a checkpoint row; None if it has none or it is unreadable."""
    try:
        state = json.loads(row["resume_state"])
    except (TypeError, ValueError):
        return None
    return state if isinstance(state, dict) else None
