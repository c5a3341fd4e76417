"""`tinker-tui run TASK`: train a task and watch it live (or headless)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from tinker_tui.engine.errors import UsageError

EXIT_OK = 0
SIGNAL_EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
DEFAULT_DB = Path("runs") / "tinker-tui.db"
#: Seconds a graceful stop may take after SIGINT/SIGTERM before the run is cancelled.
STOP_TIMEOUT = 60.0
#: `--tensorboard` without a folder: `tensorboard/` beside the store.
TENSORBOARD_BESIDE_STORE = "<beside the store>"


def add_parser(commands: Any) -> None:
    run = commands.add_parser("run", help="train a task and watch it live",
                              description="Train a task with RL and watch it live.")
    run.add_argument("task", help="the task to train: a built-in name ('example', "
                                  "'binary_prefix_tool', 'next_number'), a task file "
                                  "(path/to/task.py[:NAME]) or a module (package.module[:NAME])")
    run.add_argument("--config", type=Path, metavar="TOML",
                     help="run settings from a TOML file (keys as the flags below, with _); "
                          "flags override it, it overrides the task's settings")
    run.add_argument("--no-ui", action="store_true",
                     help="no dashboard: one plain line per step (also when not on a terminal)")
    run.add_argument("--steps", type=int, metavar="N", dest="max_steps",
                     help="optimizer steps for the whole run (same as --max-steps)")
    run.add_argument("--db", type=Path, default=DEFAULT_DB, metavar="PATH",
                     help=f"SQLite run store (default: {DEFAULT_DB})")
    run.add_argument("--backend", choices=("local", "tinker"),
                     help="'local' (embedded, CPU) or 'tinker' (needs TINKER_API_KEY); "
                          "default: tinker when a key is configured, else local")
    run.add_argument("--resume", nargs="?", const="latest", metavar="RUN",
                     help="continue a stored run (id or unique prefix; default: the newest "
                          "run of TASK) from its last confirmed checkpoint")
    run.add_argument("--wandb", metavar="PROJECT", dest="wandb_project",
                     help='log to this W&B project (offline without an API key; needs '
                          'pip install "tinker-tui[wandb]"); same as --wandb-project')
    run.add_argument("--tensorboard", nargs="?", const=TENSORBOARD_BESIDE_STORE, metavar="DIR",
                     dest="tensorboard_dir",
                     help="write TensorBoard event files to DIR/RUN_ID (default DIR: "
                          "tensorboard/ beside the store; needs "
                          'pip install "tinker-tui[tensorboard]")')
    settings = run.add_argument_group("run settings (defaults: the task's, then the engine's)")
    add_config_flags(settings)


def add_config_flags(group: Any) -> None:
    """One flag per run setting (`engine.config.SETTINGS`), so every setting can be
    overridden the same way."""
    from tinker_tui.engine.config import SETTINGS

    for name, spec in SETTINGS.items():
        flag = "--" + name.replace("_", "-")
        help_text = f"{spec.meaning} (default {spec.default!r})"
        if name == "max_steps":
            group.add_argument(flag, type=int, dest="max_steps", metavar="N", help=help_text)
        elif spec.value_type is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None,
                               help=help_text)
        else:
            group.add_argument(flag, type=spec.value_type, default=None, dest=name,
                               metavar=name.upper(), help=help_text)


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    from tinker_tui.engine.config import SETTINGS

    overrides = {name: getattr(args, name) for name in SETTINGS
                 if getattr(args, name, None) is not None}
    if overrides.get("tensorboard_dir") == TENSORBOARD_BESIDE_STORE:
        overrides["tensorboard_dir"] = str(Path(args.db).parent / "tensorboard")
    return overrides


def load_task(name: str) -> Any:
    """The checked task: a built-in name, a task file or a module (see app.task_loader)."""
    from tinker_tui.app.task_loader import load_task as load

    return load(name)


def make_session(args: argparse.Namespace) -> Any:
    from tinker_tui.app.task_loader import layered_config, load_config_file, task_source
    from tinker_tui.engine.backend import choose_backend
    from tinker_tui.engine.run import Run

    task = load_task(args.task)
    if getattr(args, "resume", None) is not None:
        from tinker_tui.app.resume import resumed_session

        return resumed_session(args, task)
    backend = choose_backend(args.backend)
    config_path = getattr(args, "config", None)
    config = layered_config(task, backend,
                            load_config_file(config_path) if config_path else None,
                            config_overrides(args), config_path=config_path,
                            where=task_source(task))
    if backend == "tinker" and config.base_model.startswith("tinker-tui/"):
        raise UsageError("the embedded base model runs only on the local backend; "
                         "choose a Tinker base model for --backend tinker "
                         "(--base-model NAME)")
    return Run(task=task, config=config, backend=backend, db_path=args.db)


def wants_ui(args: argparse.Namespace) -> bool:
    if args.no_ui or os.environ.get("CI"):
        return False
    return sys.stdout.isatty() and sys.stderr.isatty()


async def run_headless(session: Any, *, stop_timeout: float = STOP_TIMEOUT) -> int:
    """Run without a dashboard.

    The first SIGINT/SIGTERM stops gracefully (current step, checkpoint, flush); if that
    takes longer than `stop_timeout` seconds the run is cancelled, which still closes the
    store. A second signal exits at once: SQLite's committed transactions keep the store
    consistent; at most the last fraction of a second of events is lost.
    """
    from tinker_tui.app.headless import HeadlessReporter, MetricsFile, start_control_endpoint

    session.events.subscribe(HeadlessReporter().handle)
    metrics = MetricsFile(Path(session.db_path).parent) if hasattr(session, "db_path") else None
    if metrics is not None:
        session.events.subscribe(metrics.handle)
    endpoint = await start_control_endpoint(session)  # for `tinker-tui attach`
    loop = asyncio.get_running_loop()
    received: list[int] = []
    run_task = asyncio.ensure_future(session.run())

    def on_signal(signum: int) -> None:
        code = SIGNAL_EXIT_CODES[signum]
        if received:
            os._exit(code)
        received.append(code)
        session.control.stop(f"received {signal.Signals(signum).name}")
        loop.call_later(stop_timeout, run_task.cancel)

    for signum in SIGNAL_EXIT_CODES:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        await run_task
    except asyncio.CancelledError:
        if not received:
            raise
        print(f"tinker-tui: graceful stop took over {stop_timeout:g} s; cancelled",
              file=sys.stderr)
    finally:
        for signum in SIGNAL_EXIT_CODES:
            loop.remove_signal_handler(signum)
        if endpoint is not None:
            await endpoint.stop()
        if metrics is not None:
            metrics.close()
    return received[0] if received else EXIT_OK


def run_with_ui(session: Any) -> int:
    from tinker_tui.app.tui import TinkerTuiApp
    from tinker_tui.engine.events import TrackerReported

    app = TinkerTuiApp(session)
    tracker_lines: dict[str, str] = {}  # W&B / TensorBoard: the last word of each, for after
    session.events.subscribe(lambda e: tracker_lines.update({e.tracker: e.message})
                             if isinstance(e, TrackerReported) else None)
    app.run()
    for line in tracker_lines.values():
        print(line, file=sys.stderr)
    if app.run_exception is not None:  # reported by the command line, now the screen is back
        raise app.run_exception
    return app.return_code if app.return_code is not None else EXIT_OK


def main(args: argparse.Namespace) -> int:
    session = make_session(args)
    if wants_ui(args):
        return run_with_ui(session)
    return asyncio.run(run_headless(session))
