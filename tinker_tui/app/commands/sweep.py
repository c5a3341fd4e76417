"""`tinker-tui sweep TASK --grid NAME=V1,V2,... [--grid ...] [--parallel N] [run flags]`:
train every combination of the grid as a run of its own (`app.sweep`), at most N at once.

Every combination is checked first, as `run` checks a run, so a bad value stops the sweep
before anything starts. Headless (`--no-ui`, no terminal) the scheduler runs here: a line
per run as it ends, then the table of all the runs (as `compare` prints it); exit 0 when
every run completed, 1 otherwise (the summary names the runs that did not), 130/143 when
stopped by a signal (the runs stop gracefully; `sweep --resume SWEEP` continues). With a
terminal the scheduler is a process of its own (its output in SWEEP.sweep.log beside the
store) and the sweep's dashboard watches the store: leaving it (detach) leaves the sweep
going. `sweep --resume SWEEP` runs what is left of a sweep: a run that did not complete
continues from its checkpoint, one never started starts.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from tinker_tui.app.argparse_private import HelpFormatter
from tinker_tui.app.commands.common import (
    BACKENDS,
    EXIT_OK,
    add_db_option,
    add_label_options,
    config_overrides,
    one_of,
    store_path,
)
from tinker_tui.app.commands.run import add_config_flags
from tinker_tui.app.interrupts import (
    StopSignals,
    quiet_after_the_stop,
    release_signals,
    take_signals,
)
from tinker_tui.app.json_output import add_json_option
from tinker_tui.app.sweep import failure_line, summary_lines
from tinker_tui.engine.errors import EXIT_FAILED, UsageError

EXAMPLES = """\
examples:
  tinker-tui sweep example --grid learning_rate=1e-3,3e-3 --grid group_size=4,8 --steps 20
      four runs of the built-in example, with the sweep's dashboard
  tinker-tui sweep example --grid seed=0,1,2 --parallel 3 --no-ui
      three seeds at once, headless
  tinker-tui sweep --resume sweep-20261201-120000-ab12
      finish what is left of a sweep
"""


def add_parser(commands: Any) -> None:
    sweep = commands.add_parser(
        "sweep",
        help="train every combination of a grid of settings",
        description="Train every combination of a grid of settings, each a run of its own "
        "(resumable, in the store), grouped under a sweep id; at most "
        "--parallel engines at once.",
        usage="tinker-tui sweep TASK --grid NAME=V1,V2,... [--grid ...] [options]",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    group = sweep.add_argument_group("sweep")
    group.add_argument(
        "task", nargs="?", metavar="TASK", help="the task, as for run (not with --resume)"
    )
    group.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="a setting and its values (named as the run flags, with _ or "
        "-); several --grid make every combination",
    )
    group.add_argument(
        "--parallel",
        type=int,
        metavar="N",
        help="engines at once (default 1 on a 2-core machine, half the "
        "cores up to 4 locally, 4 on Tinker)",
    )
    group.add_argument(
        "--resume",
        metavar="SWEEP",
        help="run what is left of a sweep (its id, a prefix, or latest)",
    )
    group.add_argument(
        "--status",
        nargs="?",
        const="latest",
        metavar="SWEEP",
        help="print how a sweep stands (its id, a prefix; default the newest) and run nothing",
    )
    add_json_option(group, "sweep")
    group.add_argument(
        "--no-ui",
        action="store_true",
        help="no dashboard: a line per run as it ends, then the table",
    )
    group.add_argument(
        "--steps", type=int, metavar="N", dest="max_steps", help="optimizer steps of each run"
    )
    group.add_argument(
        "--config", type=Path, metavar="TOML", help="settings from a TOML file, for every run"
    )
    add_label_options(group)
    pipeline = sweep.add_argument_group("pipeline")
    backend = sweep.add_argument_group("backend")
    backend.add_argument(
        "--backend",
        choices=BACKENDS,
        type=one_of(BACKENDS),
        help="local or tinker (default tinker when a key is configured)",
    )
    store = sweep.add_argument_group("store")
    add_db_option(store)
    trackers = sweep.add_argument_group("trackers")
    add_config_flags({"run": group, "pipeline": pipeline, "backend": backend, "trackers": trackers})


def base_run_args(args: argparse.Namespace, grid_names: set[str]) -> list[str]:
    """The `run` flags every run of the sweep shares (the grid's settings left out)."""
    from tinker_tui.app.sweep import setting_flags

    base: list[str] = []
    if args.config is not None:
        base += ["--config", str(args.config)]
    if args.backend:
        base += ["--backend", args.backend]
    if args.note:
        base += ["--note", args.note]
    overrides = {k: v for k, v in config_overrides(args).items() if k not in grid_names}
    return base + setting_flags(overrides)


def main(args: argparse.Namespace) -> int:
    from tinker_tui.app.commands.common import run_label, wants_ui
    from tinker_tui.app.commands.run import check_store
    from tinker_tui.app.sweep import parse_grid, plan_sweep, record_plan

    db_path = store_path(args)
    if args.status is not None:
        if args.task or args.grid or args.resume:
            raise UsageError("sweep --status SWEEP takes no TASK, --grid or --resume")
        return asyncio.run(print_status(db_path, args.status, as_json=args.json))
    if args.json:
        raise UsageError(
            "sweep --json goes with --status SWEEP (a running sweep's runs: "
            "run --no-ui --json prints each run's lines)"
        )
    if args.resume is not None:
        if args.task or args.grid:
            raise UsageError(
                "sweep --resume SWEEP takes no TASK or --grid: the sweep has "
                "them (only --parallel may change)"
            )
        sweep = asyncio.run(_find_sweep(db_path, args.resume))
        if args.parallel is not None:
            if args.parallel < 1:
                raise UsageError(f"--parallel must be at least 1, not {args.parallel}")
            from tinker_tui.engine.store.records import set_sweep_parallel

            set_sweep_parallel(db_path, sweep.sweep_id, args.parallel)
        parallel = args.parallel or sweep.parallel
    else:
        if not args.task:
            raise UsageError(
                "sweep needs a TASK and at least one --grid NAME=V1,V2,... (or --resume SWEEP)"
            )
        run_name, _ = run_label(args)
        check_store(db_path, explicit=args.db is not None)
        names = set(parse_grid(args.grid))
        plan = plan_sweep(
            args.task,
            args.grid,
            base_run_args(args, names),
            db_path,
            parallel=args.parallel,
            run_name=run_name,
        )
        asyncio.run(record_plan(plan))
        sweep, parallel = plan.sweep, plan.sweep.parallel
    if wants_ui(args):
        from tinker_tui.app.screens.sweep import watch_sweep

        return watch_sweep(db_path, sweep.sweep_id, parallel)
    return asyncio.run(run_headless(db_path, sweep.sweep_id, parallel))


async def sweep_document(db_path: Path, wanted: str) -> dict[str, Any]:
    """`sweep --status --json` (`app.json_output`): the sweep, its grid, and each of its
    runs as the sweep recorded it with the run as `runs --json` lists it (null before it
    starts)."""
    from tinker_tui.app.commands.runs import read_records
    from tinker_tui.app.json_output import document

    sweep = await _find_sweep(db_path, wanted)
    records = {r["run_id"]: r for r in await read_records(db_path)}
    counts: dict[str, int] = {}
    for run in sweep.runs:
        counts[run.status] = counts.get(run.status, 0) + 1
    return document(
        "sweep",
        sweep_id=sweep.sweep_id,
        task=sweep.task,
        task_spec=sweep.task_spec or None,
        grid=dict(sweep.grid),
        parallel=sweep.parallel,
        created_at=sweep.created_at,
        counts=counts,
        runs=[
            {
                "idx": r.idx,
                "run_id": r.run_id,
                "settings": dict(r.settings),
                "status": r.status,
                "exit_code": r.exit_code,
                "run": records.get(r.run_id),
            }
            for r in sweep.runs
        ],
    )


async def print_status(db_path: Path, wanted: str, *, as_json: bool) -> int:
    """`sweep --status`: the sweep's table (as its end prints it), or its document."""
    if as_json:
        from tinker_tui.app.json_output import print_json

        print_json(await sweep_document(db_path, wanted))
        return EXIT_OK
    sweep = await _find_sweep(db_path, wanted)
    print("\n".join(await summary_lines(db_path, sweep.sweep_id)).lstrip("\n"))
    return EXIT_OK


async def _find_sweep(db_path: Path, wanted: str) -> Any:
    from tinker_tui.engine.store import StoreReader

    async with await StoreReader.open_readonly(db_path) as store:
        return await store.find_sweep(wanted)


async def run_headless(db_path: Path, sweep_id: str, parallel: int) -> int:
    """Run the sweep here (see the module docstring); its exit code."""
    from tinker_tui.app.interrupts import EXIT_CODES, EXIT_INTERRUPTED
    from tinker_tui.app.run_summary import db_flag
    from tinker_tui.app.sweep import SweepScheduler, settings_text
    from tinker_tui.engine.training.resume import RunLock, RunLocked

    sweep = await _find_sweep(db_path, sweep_id)
    lock = RunLock(db_path, sweep.sweep_id)
    try:
        lock.acquire()
    except RunLocked:
        raise UsageError(
            f"sweep {sweep.sweep_id} is being run by another process; wait for it, or stop it first"
        ) from None
    total = len(sweep.runs)
    left = sum(1 for r in sweep.runs if r.status != "completed")
    print(
        f"sweep {sweep.sweep_id}: {total} runs of {sweep.task}, {left} to run, "
        f"{parallel} at a time",
        flush=True,
    )
    ended: list[int] = []

    def on_end(run: Any) -> None:
        ended.append(run.idx)
        why = ""
        if run.status != "completed":
            why = f" (exit {run.exit_code})" + (
                f": {said}" if (said := failure_line(db_path, run.run_id)) else ""
            )
        print(
            f"[{len(ended)}/{left}] {run.run_id} {settings_text(run)}: {run.status}{why}",
            flush=True,
        )

    scheduler = SweepScheduler(db_path, sweep, parallel, on_end=on_end)
    loop = asyncio.get_running_loop()
    received: list[int] = []
    stops = StopSignals()

    def on_signal(signum: int) -> None:
        action = stops.take()
        if action == "same":  # one stop sent twice (`timeout` signals the group too)
            return
        if not received:
            print(
                f"tinker-tui: {signal.Signals(signum).name}: stopping the sweep's runs "
                "(gracefully; again to stop them at once)",
                file=sys.stderr,
                flush=True,
            )
        received.append(signum)
        scheduler.stop()  # a second one: a second SIGTERM, which stops a run at once

    taken = take_signals(loop, on_signal)
    try:
        runs = await scheduler.run()
    finally:
        release_signals(loop, taken)
        quiet_after_the_stop(taken)
        lock.release()
    print("\n".join(await summary_lines(db_path, sweep.sweep_id)), flush=True)
    not_completed = [r for r in runs.values() if r.status != "completed"]
    if received:
        return EXIT_CODES.get(signal.Signals(received[0]), EXIT_INTERRUPTED)
    if not_completed:
        print(
            f"  run what is left: tinker-tui sweep --resume {sweep.sweep_id}{db_flag(db_path)}",
            flush=True,
        )
        return EXIT_FAILED
    return EXIT_OK
