"""Several runs side by side (`tinker-tui compare`, the run list of a dashboard, a sweep):
which runs a command line names, each run's model folded from the store, the settings
that differ between them and how each went. No Textual here: the comparison view
(`screens.compare`) draws it, and a headless `compare` prints `format_comparison`.

Each run is read as `show` reads it (`StoreSession`), only the events its charts draw;
a run still running elsewhere is followed, so its lines grow as it trains.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.eval_results import (
    ShownEval,
    eval_cell,
    from_command_evals,
    from_run_eval,
    protocol_differences,
    protocol_note,
    protocol_tags,
)
from tinker_tui.app.store_session import ReadOnlyControl, StoreSession
from tinker_tui.app.view_maths import ended_text
from tinker_tui.engine.errors import UsageError
from tinker_tui.engine.events import (
    CheckpointDeleted,
    CheckpointSaved,
    CommandReceived,
    EvalCompleted,
    Event,
    RunStarted,
    RunStateChanged,
    StepTrained,
)
from tinker_tui.engine.store import StoredRun, StoreReader

if TYPE_CHECKING:
    from tinker_tui.app.foreign_session import ForeignSession
    from tinker_tui.engine.foreign.folder_reader import FolderFormat

#: The events a comparison reads: what the charts, their markers and the table need.
COMPARED_EVENTS: tuple[type[Event], ...] = (
    RunStarted,
    StepTrained,
    EvalCompleted,
    CheckpointSaved,
    CheckpointDeleted,
    CommandReceived,
    RunStateChanged,
)
#: Settings that differ between runs by construction, not by choice.
NOT_COMPARED = frozenset({"wandb_run_id"})
#: The most runs one comparison draws (beyond, the lines cannot be told apart).
MOST_RUNS = 8


@dataclass
class ComparedRun:
    """One run of a comparison: where it is stored, its row, its model and its session.
    A run another program trains (`compare --cookbook DIR`, `--art DIR`): its folder, and a row made
    from what the folder says (`foreign_compared`)."""

    db_path: Path
    run: StoredRun
    state: DashboardState
    session: StoreSession | ForeignSession
    #: Its latest `tinker-tui eval` result, read once (`run_eval`); None when it has none.
    command_eval: ShownEval | None = None
    command_eval_read: bool = False

    @property
    def label(self) -> str:
        """The run's name (as edited last), else its id."""
        return self.state.run_name or self.run.run_name or self.run.run_id


async def resolve_runs(
    db_paths: Sequence[Path], wanted: Sequence[str], *, others: int = 0
) -> list[tuple[Path, StoredRun]]:
    """The runs `wanted` names in the stores: each a run id or a unique prefix of one (in
    all the stores together), or a sweep's id (all its runs). UsageError (one line) for a
    name that matches nothing or several runs, or for fewer than two runs (`others`:
    the runs compared besides, read from other programs' folders)."""
    stored: list[tuple[Path, StoredRun]] = []
    sweeps: dict[str, list[str]] = {}
    for path in db_paths:
        async with await StoreReader.open_readonly(path) as store:
            stored += [(path, run) for run in await store.runs()]
            for stored_sweep in await store.sweeps():
                sweeps[stored_sweep.sweep_id] = [r.run_id for r in stored_sweep.runs]
    where = " and ".join(str(p) for p in db_paths)
    chosen: list[tuple[Path, StoredRun]] = []
    for name in wanted:
        exact = [(p, r) for p, r in stored if r.run_id == name]
        sweep = [s for s in sweeps if s == name] or [s for s in sweeps if s.startswith(name)]
        whole_sweep = not exact and len(sweep) == 1
        if whole_sweep:
            found = [(p, r) for p, r in stored if r.run_id in sweeps[sweep[0]]]
        else:
            found = exact or [(p, r) for p, r in stored if r.run_id.startswith(name)]
        if not found:
            raise UsageError(f"no run {name!r} in {where} (tinker-tui runs lists them)")
        if len(found) > 1 and not whole_sweep:
            ids = ", ".join(r.run_id for _, r in found[:6])
            raise UsageError(f"{name!r} matches several runs: {ids}; give more of the id")
        chosen += [f for f in found if f not in chosen]
    if len(chosen) + others < 2:
        raise UsageError("compare needs at least two runs (ids, prefixes or a sweep id)")
    if len(chosen) + others > MOST_RUNS:
        raise UsageError(
            f"compare draws at most {MOST_RUNS} runs at once; {len(chosen) + others} were named"
        )
    return chosen


def compared_session(db_path: Path, run: StoredRun) -> StoreSession:
    """A run of a comparison as `show` reads it: followed while another process runs it."""
    from tinker_tui.app.engine_process import RunningEngine
    from tinker_tui.engine.training.resume import run_is_live

    if run.finished() is None and run_is_live(db_path, run.run_id):
        return StoreSession(
            db_path,
            run,
            control=ReadOnlyControl("compared"),
            follow=True,
            engine=RunningEngine(db_path, run.run_id, pid=None),
            kinds=COMPARED_EVENTS,
            poll_interval=0.5,
        )
    return StoreSession(db_path, run, kinds=COMPARED_EVENTS)


def open_comparison(pairs: Sequence[tuple[Path, StoredRun]]) -> list[ComparedRun]:
    """A model per run, subscribed to its session (whose `run()` the caller drives)."""
    compared = []
    for path, run in pairs:
        session = compared_session(path, run)
        state = DashboardState(session.clock)
        session.events.subscribe(state.apply)
        compared.append(ComparedRun(path, run, state, session))
    return compared


def foreign_compared(kind: FolderFormat, folder: Path) -> ComparedRun:
    """Another program's run folder (a cookbook run, an ART model) as a run of a comparison: its session (`ForeignSession`, which
    reads what the folder holds now), its model, and a row made from its start and end.
    UsageError for a folder that is not one, or has no step yet."""
    from tinker_tui.app.foreign_session import ForeignSession
    from tinker_tui.engine.clock import SystemClock
    from tinker_tui.engine.foreign.folder_reader import open_folder

    session = ForeignSession(open_folder(kind, folder, SystemClock()), poll_interval=0.5)
    started, ended = session.reader.started, session.reader.finished
    if started is None:
        raise UsageError(f"{folder}: no step recorded yet, nothing to compare")
    row = StoredRun(
        run_id=started.run_id,
        name=started.name,
        backend=started.backend,
        base_model=started.base_model,
        config=dict(started.config),
        status=ended.status if ended else "running",
        reason=ended.reason if ended else "",
        started_at=started.time,
        ended_at=ended.time if ended else None,
        max_steps=started.max_steps or None,
        start_step=0,
        final_step=ended.final_step if ended else None,
        groups_sampled=0,
        tokens_sampled=0,
        task_spec=started.task_spec,
        cause=ended.cause if ended else "",
    )
    state = DashboardState(session.clock)
    session.events.subscribe(state.apply)
    return ComparedRun(folder, row, state, session)


async def drive(run: ComparedRun) -> None:
    """Feed a run's model for a view: a followed run until it ends, a stored one read once
    (its store is not held open meanwhile)."""
    session = run.session
    if not isinstance(session, StoreSession):  # another program's run folder
        if session.follow and not session.ended_before:
            await session.run()
        else:
            await session.publish_new()
            session.loaded.set()
        return
    if session.follow:
        await session.run()
        return
    from tinker_tui.engine.store import find_run

    for event in await session.read_all():
        session.events.publish(event)
    run.run = await find_run(run.db_path, run.run.run_id)  # it may have ended meanwhile
    finished = run.run.finished()
    if finished is not None:
        session.events.publish(finished)
    session.loaded.set()


async def load_comparison(
    pairs: Sequence[tuple[Path, StoredRun]], foreign: Sequence[ComparedRun] = ()
) -> list[ComparedRun]:
    """The runs as stored now, read once (a headless comparison); `foreign`: runs of other
    programs' folders (`foreign_compared`) besides."""
    compared = [*open_comparison(pairs), *foreign]
    for c in compared:
        if c.session.follow:  # read what is stored so far, not until it ends
            c.session.follow = False
        await drive(c)
    return compared


# ---------------------------------------------------------------------- the table


def setting_values(run: ComparedRun) -> dict[str, Any]:
    """What a run was started with: its task, backend, parent (a fork's checkpoint) and
    model, and every setting."""
    state = run.state
    values: dict[str, Any] = {
        "task": state.name or run.run.name,
        "backend": state.backend or run.run.backend,
        # lineage: the checkpoint a fork started from (`run --init-from`)
        "parent": run.run.parent or "-",
    }
    config = state.config or run.run.config
    values.update({k: v for k, v in config.items() if k not in NOT_COMPARED})
    return values


def differing_settings(runs: Sequence[ComparedRun]) -> list[str]:
    """The settings whose values are not the same in every run, in the settings' order."""
    values = [setting_values(r) for r in runs]
    keys: list[str] = []
    for v in values:
        keys += [k for k in v if k not in keys]
    return [k for k in keys if len({repr(v.get(k)) for v in values}) > 1]


def status_of(run: ComparedRun) -> str:
    """How the run stands: its end, else running/paused, else interrupted (its process is
    gone without recording an end, as `tinker-tui runs` says)."""
    from tinker_tui.engine.training.resume import run_is_live

    state = run.state
    if state.status is not None:
        return ended_text(state.status, state.cause)
    if not isinstance(run.session, StoreSession):  # its folder records no end yet
        return "running"
    if run.session.follow and run.session.finished is None:
        return state.state if state.state != "starting" else "starting"
    if run.run.finished() is None and not run_is_live(run.db_path, run.run.run_id):
        return "interrupted"
    return state.state


def duration_of(run: ComparedRun, now: float) -> float:
    state = run.state
    if state.finished_at is None and not run.session.follow:  # stored: until its last event
        end = state.last_event_at or state.started_at or 0.0
        return max(0.0, end - (state.started_at or end))
    return state.elapsed(now)


def best_reward(state: DashboardState) -> tuple[int, float] | None:
    finite = [(s, v) for s, v in state.rewards if math.isfinite(v)]
    return max(finite, key=lambda p: (p[1], -p[0])) if finite else None


def format_setting(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if value is None or value == "":
        return "-"
    return str(value)


def duration_text(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


#: The table's columns before the settings that differ.
SUMMARY_COLUMNS = ("RUN", "STATUS", "STEP", "FINAL", "BEST", "DURATION")
#: After BEST when some run has an evaluation (`run_eval`).
EVAL_COLUMN = "EVAL"


def run_eval(run: ComparedRun) -> ShownEval | None:
    """The evaluation shown for `run` (`app.eval_results`): its `tinker-tui eval` result,
    else its latest evaluation during the run."""
    last = run.state.last_eval
    in_run = None if last is None else from_run_eval(last.step, last.metrics, last.protocol)
    if not run.command_eval_read:
        run.command_eval_read = True
        if isinstance(run.session, StoreSession) and run.db_path.is_file():
            run.command_eval = from_command_evals(run.db_path, run.run.run_id)
    return run.command_eval or in_run


def check_same_protocol(runs: Sequence[ComparedRun]) -> None:
    """UsageError when the runs' evaluations were sampled under different protocols
    (`compare --same-eval-protocol`)."""
    fields = protocol_differences([run_eval(r) for r in runs])
    if fields:
        raise UsageError(
            "the runs' evaluations were sampled under different protocols (they differ in "
            + ", ".join(fields)
            + "); their numbers are not comparable. Evaluate them alike: tinker-tui eval "
            "TASK --model RUN@STEP with the same settings"
        )


def comparison_rows(
    runs: Sequence[ComparedRun], now: float | None = None
) -> tuple[list[str], list[list[str]]]:
    """The comparison's columns and one row of text per run: name, status, steps, final
    and best reward, duration, then each setting that differs."""
    now = time.time() if now is None else now
    settings = differing_settings(runs)
    evals = [run_eval(r) for r in runs]
    tags = protocol_tags(evals)
    with_eval = any(e is not None for e in evals)
    rows = []
    for run, shown in zip(runs, evals, strict=True):
        state = run.state
        final = f"{state.rewards[-1][1]:.3f}" if state.rewards else "-"
        best = best_reward(state)
        values = setting_values(run)
        rows.append(
            [
                run.label,
                status_of(run),
                f"{state.step}/{state.max_steps or '?'}",
                final,
                f"{best[1]:.3f} @{best[0]}" if best else "-",
                *([eval_cell(shown, tags)] if with_eval else []),
                duration_text(duration_of(run, now)),
                *(format_setting(values.get(k)) for k in settings),
            ]
        )
    summary = list(SUMMARY_COLUMNS)
    if with_eval:
        summary.insert(summary.index("BEST") + 1, EVAL_COLUMN)
    return [*summary, *settings], rows


def comparison_document(runs: Sequence[ComparedRun], now: float | None = None) -> dict[str, Any]:
    """`compare --json` (`app.json_output`): the table's values, each run's settings that
    differ by name."""
    from tinker_tui.app.json_output import document

    now = time.time() if now is None else now
    settings = differing_settings(runs)
    evals = [run_eval(r) for r in runs]
    out = []
    for run, shown in zip(runs, evals, strict=True):
        state = run.state
        best = best_reward(state)
        values = setting_values(run)
        out.append(
            {
                "run_id": run.run.run_id,
                "name": run.label if run.label != run.run.run_id else None,
                "store": str(run.db_path),
                "status": status_of(run),
                "step": state.step,
                "max_steps": state.max_steps or None,
                "final_reward": state.rewards[-1][1] if state.rewards else None,
                "best_reward": None if best is None else {"step": best[0], "value": best[1]},
                "duration_seconds": duration_of(run, now),
                "settings": {k: values.get(k) for k in settings},
                "eval": None if shown is None else shown.as_dict(),
            }
        )
    return document(
        "compare",
        differing=settings,
        runs=out,
        # the protocol fields the runs' evaluations differ in: [] when comparable
        eval_protocol_differs=protocol_differences(evals),
    )


def format_comparison(runs: Sequence[ComparedRun], now: float | None = None) -> str:
    """The table as text (headless `compare`, the end of a sweep)."""
    columns, rows = comparison_rows(runs, now)
    notes = protocol_note([run_eval(r) for r in runs])
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if columns[-1] in (*SUMMARY_COLUMNS, EVAL_COLUMN):
        lines.append("(the runs' settings are the same)")
    lines += notes
    return "\n".join(lines)
