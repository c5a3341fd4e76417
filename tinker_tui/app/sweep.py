"""A sweep: every combination of a grid of settings trained as a normal run (its own id,
store rows and engine process, resumable with `run --resume`), grouped under a sweep id in
the store (`engine.store.records`). No Textual here.

`plan_sweep` checks the grid and every combination's settings as `run` checks a run's,
before anything starts. `SweepScheduler` keeps at most `parallel` engine processes going
(`app.engine_process.EngineProcess`, as a dashboard starts one) until every run has ended;
a run that fails does not stop the others. Resuming a sweep runs again what did not
complete: a run with a stored row continues with `run --resume`, one never started starts;
a run another process is still running (a detached sweep) is waited for, not started twice.
The scheduler holds the sweep's lock (`engine.training.resume.RunLock`, by the sweep's id) so two
schedulers never run one sweep.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.engine.errors import UsageError
from tinker_tui.engine.store.records import (
    SWEEP_PENDING,
    SWEEP_RUNNING,
    StoredSweep,
    SweepRun,
    record_sweep,
    set_sweep_run_status,
)

if TYPE_CHECKING:
    from tinker_tui.app.engine_process import Engine

#: Where a sweep's scheduler writes its output when a dashboard started it.
SWEEP_LOG_SUFFIX = ".sweep.log"
#: The most runs one sweep may hold (a grid this large is a typo more often than a plan).
MOST_RUNS = 256
#: Statuses a run has ended with.
ENDED = ("completed", "stopped", "failed", "interrupted")


def sweep_log_path(db_path: str | Path, sweep_id: str) -> Path:
    return Path(db_path).expanduser().parent / f"{sweep_id}{SWEEP_LOG_SUFFIX}"


# ---------------------------------------------------------------------- the grid


def parse_grid(specs: Sequence[str]) -> dict[str, list[str]]:
    """`NAME=V1,V2,...` per spec, as {setting: [values as typed]}; UsageError (one line)
    for an unknown setting (with the closest one), a setting given twice, no values, or a
    value given twice."""
    from tinker_tui.app.cli import did_you_mean
    from tinker_tui.engine.config import SETTINGS

    grid: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, values_text = spec.partition("=")
        setting = name.strip().lstrip("-").replace("-", "_")
        if not sep or not setting:
            raise UsageError(
                f"--grid {spec!r}: write NAME=V1,V2,... (e.g. --grid learning_rate=1e-3,3e-3)"
            )
        if setting == "steps":
            setting = "max_steps"
        if setting not in SETTINGS:
            raise UsageError(
                f"--grid: no setting {setting!r}{did_you_mean(setting, SETTINGS)}"
                " (tinker-tui run --help lists them)"
            )
        if setting in grid:
            raise UsageError(
                f"--grid: {setting} is given twice; list all its values in one "
                f"--grid {setting}=V1,V2,..."
            )
        values = [v.strip() for v in values_text.split(",")]
        if not values or any(v == "" for v in values):
            raise UsageError(f"--grid {spec!r}: every value must be given (V1,V2,...)")
        if len(set(values)) != len(values):
            raise UsageError(f"--grid {spec!r}: a value is given twice")
        for value in values:  # checked here: a run's flag error would name `run`'s flag
            _check_value(setting, value)
        grid[setting] = values
    if not grid:
        raise UsageError("a sweep needs at least one --grid NAME=V1,V2,...")
    return grid


def _check_value(setting: str, value: str) -> None:
    """A grid value as the setting takes it; UsageError naming the grid otherwise."""
    from tinker_tui.engine.config import SETTINGS, ConfigError

    spec = SETTINGS[setting]
    try:
        if spec.numeric:
            spec.parse(value)
        elif spec.choices:
            spec.check(value)
    except ConfigError as exc:
        raise UsageError(f"--grid {setting}: {exc}") from None


def combinations(grid: Mapping[str, Sequence[str]]) -> list[dict[str, str]]:
    """Every combination of the grid's values, the last setting varying fastest."""
    names = list(grid)
    return [
        dict(zip(names, values, strict=True))
        for values in itertools.product(*(grid[n] for n in names))
    ]


def setting_flags(settings: Mapping[str, Any]) -> list[str]:
    """The `run` flags that set these settings (`--learning-rate 1e-3`, `--no-eval-at-start`)."""
    from tinker_tui.engine.config import SETTINGS

    flags: list[str] = []
    for name, value in settings.items():
        flag = "--" + name.replace("_", "-")
        if SETTINGS[name].value_type is bool:
            on = (
                value
                if isinstance(value, bool)
                else str(value).lower() in ("1", "true", "on", "yes")
            )
            flags.append(flag if on else "--no-" + flag[2:])
        else:
            flags += [flag, str(value)]
    return flags


def combination_name(settings: Mapping[str, str], prefix: str = "") -> str:
    """A run's name from its combination: `lr-test learning_rate=1e-3 group_size=4`."""
    from tinker_tui.app.commands.common import NAME_LENGTH

    text = " ".join([prefix] * bool(prefix) + [f"{k}={v}" for k, v in settings.items()])
    return text if len(text) <= NAME_LENGTH else text[: NAME_LENGTH - 1] + "…"


def default_parallel(backend: str, cpus: int | None = None) -> int:
    """Engines at once when `--parallel` is not given: on Tinker the service trains them
    (4); locally each engine wants about two cores (one on a 2-core machine)."""
    if backend == "tinker":
        return 4
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(1, min(4, cpus // 2))


@dataclass(frozen=True)
class SweepPlan:
    """A sweep that passed every check: what `start_sweep` records and runs."""

    sweep: StoredSweep
    db_path: Path
    backend: str


def plan_sweep(
    task_arg: str,
    grid_specs: Sequence[str],
    base_args: Sequence[str],
    db_path: Path,
    *,
    parallel: int | None,
    run_name: str = "",
    clock: Callable[[], float] = time.time,
) -> SweepPlan:
    """Check the grid and each combination as `run` would check it (task, settings,
    backend, store; UsageError at once, naming the combination); the sweep to record."""
    from tinker_tui.app.cli import parse
    from tinker_tui.app.commands.run import plan_run
    from tinker_tui.app.task_loader import spec_to_store
    from tinker_tui.engine.clock import FakeClock
    from tinker_tui.engine.run_id import new_run_id

    grid = parse_grid(grid_specs)
    combos = combinations(grid)
    if len(combos) > MOST_RUNS:
        raise UsageError(f"the grid makes {len(combos)} runs; a sweep holds at most {MOST_RUNS}")
    runs: list[SweepRun] = []
    backend = "local"
    now = clock()
    ids: set[str] = set()
    sweep_id = new_run_id("sweep", FakeClock(now))
    for idx, combo in enumerate(combos):
        args = parse(["run", task_arg, *base_args, *setting_flags(combo), "--db", str(db_path)])
        try:
            plan = plan_run(args)
        except UsageError as exc:
            where = " ".join(f"{k}={v}" for k, v in combo.items())
            raise UsageError(f"sweep run {idx + 1} ({where}): {exc}") from None
        backend = plan.backend
        run_id = new_run_id(plan.task.name, FakeClock(now))
        while run_id in ids:
            run_id = new_run_id(plan.task.name, FakeClock(now))
        ids.add(run_id)
        values = {k: getattr(plan.config, k) for k in combo}
        runs.append(SweepRun(sweep_id=sweep_id, idx=idx, run_id=run_id, settings=values))
        task_name = plan.task.name
    if parallel is not None and parallel < 1:
        raise UsageError(f"--parallel must be at least 1, not {parallel}")
    sweep = StoredSweep(
        sweep_id=sweep_id,
        task=task_name,
        task_spec=spec_to_store(task_arg),
        grid=grid,
        run_args=[*base_args, *(["--name", run_name] if run_name else [])],
        parallel=parallel or default_parallel(backend),
        created_at=now,
        runs=tuple(runs),
    )
    return SweepPlan(sweep=sweep, db_path=db_path, backend=backend)


async def record_plan(plan: SweepPlan) -> None:
    """Create (or migrate) the store, then record the sweep and its runs, all pending."""
    from tinker_tui.engine.store import RunStore

    store = await RunStore.open(plan.db_path, start=False)
    await store.close()
    await asyncio.to_thread(record_sweep, plan.db_path, plan.sweep)


def run_command(sweep: StoredSweep, run: SweepRun, db_path: Path, *, resume: bool) -> list[str]:
    """The `run` arguments of one combination (`EngineProcess` adds --no-ui and --run-id)."""
    task = sweep.task_spec or sweep.task
    if resume:
        return ["run", task, "--resume", run.run_id, "--db", str(db_path)]
    base = list(sweep.run_args)
    prefix = ""
    if "--name" in base:  # the sweep's own name starts each run's
        at = base.index("--name")
        prefix = base[at + 1] if at + 1 < len(base) else ""
        del base[at : at + 2]
    settings = {k: _typed_text(v) for k, v in run.settings.items()}
    return [
        "run",
        task,
        *base,
        *setting_flags(run.settings),
        "--db",
        str(db_path),
        "--name",
        combination_name(settings, prefix),
    ]


def _typed_text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def settings_text(run: SweepRun) -> str:
    return " ".join(f"{k}={_typed_text(v)}" for k, v in run.settings.items())


# ---------------------------------------------------------------------- running it


@dataclass
class SweepProgress:
    """What the scheduler knows of each run: its status (pending, running, then its end),
    the exit code of its engine, and when it started and ended here."""

    runs: dict[int, SweepRun] = field(default_factory=dict)
    started_at: dict[int, float] = field(default_factory=dict)
    ended_at: dict[int, float] = field(default_factory=dict)


class SweepScheduler:
    """Runs a recorded sweep's runs that have not completed, `parallel` at a time.

    Args:
        db_path: The store the sweep is recorded in.
        sweep: The sweep, as stored.
        parallel: Engine processes at once.
        on_end: Called with each run as it ends (its status and exit code set).
        poll_interval: Seconds between looks at the engines.
        start_engine: Makes (not starts) the engine of a run from its `run` arguments:
            an `EngineProcess` by default, a fake in tests.
    """

    def __init__(
        self,
        db_path: Path,
        sweep: StoredSweep,
        parallel: int,
        *,
        on_end: Callable[[SweepRun], None] | None = None,
        poll_interval: float = 0.5,
        start_engine: Callable[[list[str], str], Engine] | None = None,
    ) -> None:
        self.db_path = db_path
        self.sweep = sweep
        self.parallel = max(1, parallel)
        self.on_end = on_end
        self.poll_interval = poll_interval
        self.make_engine = start_engine or self._engine_process
        self.progress = SweepProgress(runs={r.idx: r for r in sweep.runs})
        self.stopping = False
        self._running: dict[int, Engine] = {}

    def _engine_process(self, argv: list[str], run_id: str) -> Engine:
        from tinker_tui.app.engine_process import EngineProcess

        return EngineProcess(argv, run_id=run_id, db_path=self.db_path, watched=False)

    def stop(self) -> None:
        """Start no more runs and stop those running (gracefully: SIGTERM, as a headless
        run stops on it); `run` returns once they have ended."""
        self.stopping = True
        for engine in self._running.values():
            engine.send_signal(signal.SIGTERM)

    async def _stored(self) -> dict[str, Any]:
        from tinker_tui.engine.store import StoreReader

        async with await StoreReader.open_readonly(self.db_path) as store:
            return {r.run_id: r for r in await store.runs()}

    async def run(self) -> dict[int, SweepRun]:
        """Run what is left; every run of the sweep with its status at the end."""
        from tinker_tui.app.engine_process import RunningEngine
        from tinker_tui.engine.training.resume import run_is_live

        stored = await self._stored()
        todo: list[tuple[SweepRun, bool]] = []  # (run, resume)
        for run in self.sweep.runs:
            row = stored.get(run.run_id)
            if row is not None and row.status == "completed":
                self._set(run, "completed", run.exit_code)
                continue
            if row is not None and run_is_live(self.db_path, run.run_id):  # still going
                self._running[run.idx] = RunningEngine(self.db_path, run.run_id, pid=None)
                self._set(run, SWEEP_RUNNING, None)
                self.progress.started_at[run.idx] = time.time()
                continue
            todo.append((run, row is not None))
        while (todo and not self.stopping) or self._running:
            while todo and not self.stopping and len(self._running) < self.parallel:
                run, resume = todo.pop(0)
                engine = self.make_engine(
                    run_command(self.sweep, run, self.db_path, resume=resume), run.run_id
                )
                await engine.start()
                self._running[run.idx] = engine
                self.progress.started_at[run.idx] = time.time()
                self._set(run, SWEEP_RUNNING, None)
            await asyncio.sleep(self.poll_interval)
            for idx, engine in list(self._running.items()):
                code = engine.exit_code()
                if code is not None:
                    del self._running[idx]
                    await self._ended(self.progress.runs[idx], code)
        return dict(self.progress.runs)

    async def _ended(self, run: SweepRun, code: int) -> None:
        """The run's engine is gone: its stored end, else failed (or interrupted, for an
        engine stopped at once by a signal)."""
        from tinker_tui.app.engine_process import exit_interrupts

        row = (await self._stored()).get(run.run_id)
        status = (
            row.status
            if row is not None and row.status in ENDED
            else ("interrupted" if exit_interrupts(code) else "failed")
        )
        self.progress.ended_at[run.idx] = time.time()
        ended = self._set(run, status, code)
        if self.on_end is not None:
            self.on_end(ended)

    def _set(self, run: SweepRun, status: str, code: int | None) -> SweepRun:
        changed = replace(run, status=status, exit_code=code)
        self.progress.runs[run.idx] = changed
        set_sweep_run_status(self.db_path, run.sweep_id, run.idx, status, code)
        return changed


def sweep_is_pending(sweep: StoredSweep) -> bool:
    return any(r.status in (SWEEP_PENDING, SWEEP_RUNNING) for r in sweep.runs)


def failure_line(db_path: Path, run_id: str) -> str:
    """The last line of a run's engine output that says what went wrong ("" if none)."""
    from tinker_tui.app.engine_process import engine_log_path, log_tail

    for line in reversed(log_tail(engine_log_path(db_path, run_id))):
        if "error" in line.lower() or "failed" in line.lower():
            return line.removeprefix("tinker-tui: ").strip()
    return ""


async def summary_lines(db_path: Path, sweep_id: str) -> list[str]:
    """The sweep's table (as `compare` prints it) and a line naming each run that did not
    complete, with where its engine's output is."""
    from tinker_tui.app.compare import format_comparison, load_comparison
    from tinker_tui.app.engine_process import engine_log_path
    from tinker_tui.engine.store import StoreReader

    async with await StoreReader.open_readonly(db_path) as store:
        sweep = await store.find_sweep(sweep_id)
        stored = {r.run_id: r for r in await store.runs()}
    pairs = [(db_path, stored[r.run_id]) for r in sweep.runs if r.run_id in stored]
    lines = [""]
    if pairs:
        lines.append(format_comparison(await load_comparison(pairs)))
    counts: dict[str, int] = {}
    for run in sweep.runs:
        counts[run.status] = counts.get(run.status, 0) + 1
    lines.append(f"sweep {sweep.sweep_id}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    for run in sweep.runs:
        if run.status != "completed":
            log = engine_log_path(db_path, run.run_id)
            lines.append(
                f"  {run.status}: {run.run_id} ({settings_text(run)})"
                + (f"; its output: {log}" if log.is_file() else "")
            )
    return lines
