"""`tinker-tui`: the command line.

Exit codes: 0 the run completed (or was stopped from the dashboard with `q`); 1 the run
failed; 2 bad usage (unknown task, bad setting, missing Tinker key, unusable store);
130 stopped by SIGINT (Ctrl+C) and 143 by SIGTERM, both after a graceful shutdown
(current step finished, checkpoint written, store flushed). A second signal exits at once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
SIGNAL_EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
DEFAULT_DB = Path("runs") / "tinker-tui.db"


class UsageError(Exception):
    """A mistake on the command line or in the environment; printed without a traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tinker-tui",
        description="Run and watch RL post-training of language models, locally or on Tinker.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("run", help="train a task and watch it live",
                              description="Train a task with RL and watch it live.")
    run.add_argument("task", help="the task to train: 'example' (yes/no/maybe)")
    run.add_argument("--no-ui", action="store_true",
                     help="no dashboard: one plain line per step (also when not on a terminal)")
    run.add_argument("--steps", type=int, metavar="N", help="optimizer steps for the whole run")
    run.add_argument("--db", type=Path, default=DEFAULT_DB, metavar="PATH",
                     help=f"SQLite run store (default: {DEFAULT_DB})")
    run.add_argument("--backend", choices=("local", "tinker"),
                     help="'local' (embedded, CPU) or 'tinker' (needs TINKER_API_KEY); "
                          "default: tinker when a key is configured, else local")
    run.add_argument("--seed", type=int, help="random seed (default 0)")
    return parser


def load_task(name: str) -> Any:
    if name in ("example", "yes_no_maybe"):
        from examples.yes_no_maybe import TASK

        return TASK
    raise UsageError(f"unknown task {name!r}: the built-in task is 'example'")


def make_session(args: argparse.Namespace) -> Any:
    from engine.backend import BackendError, choose_backend
    from engine.config import ConfigError, RunConfig
    from engine.runner import Run

    task = load_task(args.task)
    try:
        backend = choose_backend(args.backend)
        config = RunConfig().with_overrides(dict(task.settings)).with_overrides(
            {"max_steps": args.steps, "seed": args.seed})
    except (BackendError, ConfigError) as exc:
        raise UsageError(str(exc)) from None
    if backend == "tinker" and config.base_model.startswith("tinker-tui/"):
        raise UsageError("the embedded base model runs only on the local backend; "
                         "choose a Tinker base model for --backend tinker")
    return Run(task=task, config=config, backend=backend, db_path=args.db)


def wants_ui(args: argparse.Namespace) -> bool:
    if args.no_ui or os.environ.get("CI"):
        return False
    return sys.stdout.isatty() and sys.stderr.isatty()


async def run_headless(session: Any) -> int:
    """Run without a dashboard; first SIGINT/SIGTERM stops gracefully, a second at once."""
    from app.headless import HeadlessReporter

    session.events.subscribe(HeadlessReporter().handle)
    loop = asyncio.get_running_loop()
    received: list[int] = []

    def on_signal(signum: int) -> None:
        code = SIGNAL_EXIT_CODES[signum]
        if received:
            os._exit(code)
        received.append(code)
        session.control.stop(f"received {signal.Signals(signum).name}")

    for signum in SIGNAL_EXIT_CODES:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        await session.run()
    finally:
        for signum in SIGNAL_EXIT_CODES:
            loop.remove_signal_handler(signum)
    return received[0] if received else EXIT_OK


def run_with_ui(session: Any) -> int:
    from app.tui import TinkerTuiApp

    app = TinkerTuiApp(session)
    app.run()
    error = getattr(app, "run_error", None)
    if error:
        print(f"tinker-tui: run failed: {error}", file=sys.stderr)
    return app.return_code if app.return_code is not None else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from engine.store import StoreError

    try:
        session = make_session(args)
        if wants_ui(args):
            return run_with_ui(session)
        return asyncio.run(run_headless(session))
    except (UsageError, StoreError) as exc:
        print(f"tinker-tui: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return SIGNAL_EXIT_CODES[signal.SIGINT]
    except Exception as exc:  # a bug or a failing backend: say what, keep the traceback short
        print(f"tinker-tui: run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
