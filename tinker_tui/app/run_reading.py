"""What a program reads of the runs in a store, as plain JSON-ready dicts: the runs, a run's
metrics over a window of steps, its health words, the worst or best rollouts of a step, its
log's tail, the scenario board and a step's signals (built by `signal_maths`, as the views
build them). `tinker-tui mcp` serves these to agents.

A run is read through the store reader (`StoreSession.read_all`) and folded into the
dashboard's own model (`DashboardState`), so the numbers and words are the ones the
dashboard shows: a rollback or resume rewinds them as it rewinds the charts, and the health
verdict is the engine's `HealthWindow`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.engine.clock import SystemClock
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.store import StoredRun

#: The metrics a window holds when none are asked for: what says whether a run learns.
DEFAULT_METRICS = (
    keys.REWARD_MEAN,
    keys.REWARD_STD,
    keys.TRAIN_SKIPPED,
    keys.LEARNING_RATE,
    keys.GRAD_NORM,
    keys.KL_POLICY_BASE,
    keys.STALENESS_MEAN,
    keys.ROLLOUTS_FAILED,
    keys.EVAL_REWARD_MEAN,
    keys.STEP_TIME,
)
#: The most steps, rollouts and log lines one read returns (an agent's context is small).
MOST_STEPS = 500
MOST_ROLLOUTS = 16
MOST_LOG_LINES = 500
#: A message longer than this is cut (its end kept: that is where an answer is).
MESSAGE_CHARS = 2000


@dataclass
class ReadRun:
    """A stored run and the dashboard's model of it, as of the read."""

    run: StoredRun
    state: DashboardState
    live: bool


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


async def list_runs(db_path: Path) -> list[dict[str, Any]]:
    """Every run in the store, newest first: id, names, task, status as `runs` shows it,
    step, last mean reward, last confirmed checkpoint, whether it can be steered now."""
    from tinker_tui.app.commands.runs import shown_status
    from tinker_tui.engine.control.client import control_file_orphaned, control_file_path
    from tinker_tui.engine.store import StoreReader
    from tinker_tui.engine.training.resume import run_is_live

    async with await StoreReader.open_readonly(db_path) as store:
        runs = await store.runs()
        progress = await store.progress()
        last = await store.last_metrics()
        states = await store.last_states()
    rows = []
    for run in runs:
        done = progress.get(run.run_id, {})
        live = run.status == "running" and run_is_live(db_path, run.run_id)
        control_file = control_file_path(db_path, run.run_id)
        step = run.final_step
        if step is None:
            step = done.get("step") or run.start_step
        rows.append(
            {
                "run_id": run.run_id,
                "run_name": run.run_name,
                "task": run.name,
                "backend": run.backend,
                "base_model": run.base_model,
                "status": shown_status(run.status, live, states.get(run.run_id)),
                "step": step,
                "max_steps": run.max_steps,
                "reward_mean": _finite(last.get(run.run_id, {}).get(keys.REWARD_MEAN)),
                "checkpoint_step": done.get("checkpoint"),
                "started_at": run.started_at,
                "ended_at": run.ended_at,
                "controllable": live
                and control_file.is_file()
                and control_file_orphaned(control_file) is None,
            }
        )
    return rows


async def read_run(db_path: Path, wanted: str | None) -> ReadRun:
    """The run `wanted` names (an id, a unique prefix, None: the newest), folded."""
    return await RunReader(db_path).read(wanted)


class RunReader:
    """Reads runs of one store, keeping each run's fold: a second read of a run applies only
    the events stored since the first (as a dashboard following it does), so a server that
    an agent polls does not replay a long run on every call."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._folds: dict[str, tuple[Any, DashboardState]] = {}

    async def read(self, wanted: str | None) -> ReadRun:
        from tinker_tui.app.store_session import StoreSession
        from tinker_tui.engine.store import find_run
        from tinker_tui.engine.training.resume import run_is_live

        run = await find_run(self.db_path, wanted)
        if run.run_id not in self._folds:
            self._folds[run.run_id] = (
                StoreSession(self.db_path, run),
                DashboardState(SystemClock()),
            )
        session, state = self._folds[run.run_id]
        for event in await session.read_all():  # those since the last read
            state.apply(event)
        finished = run.finished()
        if finished is not None and state.state != "finished":
            state.apply(finished)
        live = finished is None and run_is_live(self.db_path, run.run_id)
        return ReadRun(run, state, live)


def _clamp(n: int, most: int) -> int:
    return max(1, min(int(n), most))


def metrics_window(
    read: ReadRun, names: list[str] | None = None, last: int = 20, since_step: int | None = None
) -> dict[str, Any]:
    """The run's metrics per step: the last `last` steps (or those from `since_step` on, at
    most MOST_STEPS), one row per step with the metrics asked for (default DEFAULT_METRICS,
    those the run has; "all" for every one); `available` lists every metric it has."""
    series = read.state.series
    wanted = (
        sorted(series)
        if names == ["all"]
        else [n for n in (names or DEFAULT_METRICS) if names or n in series]
    )
    unknown = [n for n in wanted if n not in series]
    steps = sorted({s for n in wanted for s, _ in series.get(n, ())})
    if since_step is not None:
        steps = [s for s in steps if s >= since_step][:MOST_STEPS]
    else:
        steps = steps[-_clamp(last, MOST_STEPS) :]
    chosen = set(steps)
    rows: dict[int, dict[str, Any]] = {s: {"step": s} for s in steps}
    for name in wanted:
        for step, value in series.get(name, ()):
            if step in chosen:
                rows[step][name] = _finite(value)
    return {
        "run_id": read.run.run_id,
        "metrics": wanted,
        "steps": [rows[s] for s in steps],
        "unknown": unknown,
        "available": sorted(series),
    }


def health(read: ReadRun) -> dict[str, Any]:
    """The run's state and health words, as the dashboard's health pane reads them."""
    state = read.state
    window = state.health_window
    kind, words = window.verdict()
    best = window.best_step
    rollback = window.rollback_point()
    rewards = state.rewards[-5:]
    return {
        "run_id": read.run.run_id,
        "state": state.state,
        "reason": state.reason,
        "status": state.status,
        "live": read.live,
        "step": state.step,
        "max_steps": state.max_steps,
        "health": kind,
        "words": words,
        "collapse": window.collapse.words() if window.collapse is not None else None,
        "best_step": {"step": best[0], "reward_mean": best[1]} if best else None,
        "rollback_to": (
            {
                "step": rollback[0],
                "checkpoint": rollback[1],
                "policy_version": window.checkpoint_version(rollback[0]),
                "best_sampled_by": window.best_sampled_by,
            }
            if rollback
            else None
        ),
        "recent_rewards": [{"step": s, "reward_mean": _finite(r)} for s, r in rewards],
        "rollouts_failed": state.rollouts_failed,
        "rollouts_ended": state.rollouts_ended,
        "groups_discarded": dict(state.discarded),
        "knobs": dict(state.knobs),
        "checkpoints": [
            {"step": c.step, "kind": c.kind, "name": c.name} for c in state.checkpoints.rows[-5:]
        ],
    }


def _cut(text: Any) -> str:
    text = str(text)
    if len(text) <= MESSAGE_CHARS:
        return text
    return f"[{len(text) - MESSAGE_CHARS} characters cut] " + text[-MESSAGE_CHARS:]


def rollouts(
    read: ReadRun, step: int | None = None, which: str = "worst", count: int = 3
) -> dict[str, Any]:
    """The `count` worst (lowest reward) or best rollouts the step `step` took (None: the
    last step trained), each with its conversation (long messages cut)."""
    if which not in ("worst", "best"):
        raise ValueError(f"which is 'worst' or 'best', not {which!r}")
    state = read.state
    by_step = state.groups.by_step
    if step is None:  # the last step trained, else the last that took (or dropped) groups
        trained = [s for s in state.groups.trained_steps if by_step.get(s)]
        step = (
            trained[-1] if trained else max((s for s, ids in by_step.items() if ids), default=None)
        )
    if step is None or step not in by_step:
        have = sorted(by_step)
        span = f"steps {have[0]}..{have[-1]}" if have else "no step yet"
        raise ValueError(f"run {read.run.run_id} has no rollouts of step {step} ({span})")
    found: list[tuple[float, dict[str, Any]]] = []
    for group_id in by_step[step]:
        group = state.groups.get(group_id)
        if group is None:
            continue
        for index, t in enumerate(group.trajectories):
            reward = _finite(t.reward)
            found.append(
                (
                    -math.inf if reward is None else reward,
                    {
                        "group_id": group_id,
                        "index": index,
                        "scenario_id": group.scenario_id,
                        "reward": reward,
                        "policy_version": t.policy_version,
                        "num_tokens": t.num_tokens,
                        "metrics": dict(t.metrics),
                        "messages": [
                            {"role": str(m.get("role", "")), "content": _cut(m.get("content"))}
                            for m in t.messages
                        ],
                    },
                )
            )
    found.sort(key=lambda pair: pair[0], reverse=which == "best")
    return {
        "run_id": read.run.run_id,
        "step": step,
        "which": which,
        "rollouts_in_step": len(found),
        "rollouts": [r for _, r in found[: _clamp(count, MOST_ROLLOUTS)]],
    }


def log_tail(read: ReadRun, lines: int = 50, level: str | None = None) -> dict[str, Any]:
    """The last `lines` log lines (repeats folded, as the log view folds them); `level`
    keeps that level and above (info, warning, error)."""
    from tinker_tui.app.view_maths import level_at_least

    kept = [line for line in read.state.log if level is None or level_at_least(line.level, level)]
    kept = kept[-_clamp(lines, MOST_LOG_LINES) :]
    return {
        "run_id": read.run.run_id,
        "lines": [
            {
                "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(line.time)),
                "level": line.level,
                "message": _cut(line.message),
                "repeats": line.count,
            }
            for line in kept
        ],
    }


#: The most scenarios one board read returns.
MOST_SCENARIOS = 200


def scenarios(
    read: ReadRun, order: str = "drawn", count: int = 50, kind: str | None = None
) -> dict[str, Any]:
    """The scenario board (the dashboard's view 6): per scenario id the groups drawn of it,
    its rollouts' mean reward, pass rate and class, sorted by `order` (one of
    `signal_maths.SORTS`), the first `count`; `kind` keeps one class. The classes and the
    pass line are `signal_maths`' (the view's own rule)."""
    from tinker_tui.app.signal_maths import SORTS, pass_line, scenario_board, sorted_board

    if order not in SORTS:
        raise ValueError(f"order is one of {', '.join(SORTS)}, not {order!r}")
    groups = list(read.state.groups.values())
    rows = sorted_board(scenario_board(groups), order)
    classes: dict[str, int] = {}
    for row in rows:
        classes[row.kind] = classes.get(row.kind, 0) + 1
    kept = [row for row in rows if kind is None or row.kind == kind]
    return {
        "run_id": read.run.run_id,
        "order": order,
        "pass_reward": pass_line(groups),
        "scenarios_total": len(rows),
        "classes": classes,
        "matching": len(kept),
        "scenarios": [
            {
                "scenario_id": row.scenario_id,
                "drawn": row.drawn,
                "rollouts": row.rollouts,
                "mean_reward": _finite(row.mean),
                "pass_rate": _finite(row.pass_rate),
                "no_signal_groups": row.no_signal,
                "failed_groups": row.failed,
                "class": row.kind,
                "trend": [_finite(v) for v in row.trend[-10:]],
            }
            for row in kept[: _clamp(count, MOST_SCENARIOS)]
        ],
    }


def step_signals(read: ReadRun, step: int | None = None) -> dict[str, Any]:
    """What the signals view (5) shows of a step: its funnel (groups sampled, dropped by
    reason, trained), its reward and advantage histograms, the share of groups without
    signal, truncation, response lengths, reward components, and the window's means."""
    from dataclasses import asdict

    from tinker_tui.app.signal_maths import (
        WINDOW,
        dominance_note,
        series_at,
        step_funnel,
        window_mean,
    )
    from tinker_tui.engine.rollouts.distributions import components_of

    state = read.state
    steps = state.groups.trained_steps
    if step is None:
        step = steps[-1] if steps else None
    if step is None or step not in steps:
        span = f"steps {steps[0]}..{steps[-1]}" if steps else "no step yet"
        raise ValueError(f"run {read.run.run_id} has not trained step {step} ({span})")
    series = state.series
    metrics = {key: v for key in series if (v := series_at(series, key, step)) is not None}
    shown = (
        keys.ZERO_VARIANCE_FRAC,
        keys.TRUNCATED_FRAC,
        keys.RESPONSE_LEN_MEAN,
        keys.RESPONSE_LEN_P50,
        keys.RESPONSE_LEN_P90,
        keys.RESPONSE_LEN_MAX,
    )
    hists = state.histograms.get(step, {})
    return {
        "run_id": read.run.run_id,
        "step": step,
        "funnel": asdict(step_funnel(state.groups.of(step), step)),
        "histograms": {
            name: {
                "lo": _finite(h.get("lo")),
                "hi": _finite(h.get("hi")),
                "counts": [int(c) for c in h.get("counts", ())],
            }
            for name, h in hists.items()
            if h
        },
        "metrics": {key: _finite(metrics.get(key)) for key in shown},
        "reward_components": {
            name: {"mean": _finite(m), "std": _finite(s)}
            for name, (m, s) in components_of(metrics).items()
        },
        "dominance": dominance_note(metrics) or None,
        "window": {
            "steps": WINDOW,
            keys.ZERO_VARIANCE_FRAC: window_mean(series, keys.ZERO_VARIANCE_FRAC, step),
            keys.TRUNCATED_FRAC: window_mean(series, keys.TRUNCATED_FRAC, step),
        },
    }
