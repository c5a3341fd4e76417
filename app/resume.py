"""`tinker-tui run TASK --resume [RUN]`: the checks and settings of a run that continues a
stored one.

A resumed run keeps its id, its settings (those recorded when it started) and its backend;
flags given on the command line (and a `--config` file) override the settings, except the
seed, which fixes the scenario stream the run is built on. `--steps` is the total for the
whole run, so raising it continues a completed run.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from tinker_tui.engine.errors import UsageError

if TYPE_CHECKING:
    from tinker_tui.engine.config import RunConfig
    from tinker_tui.engine.task import Task


def resume_plan(args: argparse.Namespace, task: Task, db_path: Path
                ) -> tuple[RunConfig, str, str]:
    """(settings, backend, run id) of the run `args.resume` names (see the module
    docstring); `args.run_id`, when set, names it instead (the run a dashboard resolved
    before starting the engine). UsageError for a run that cannot be resumed. Nothing
    heavy is imported."""
    from tinker_tui.app.commands.run import config_overrides
    from tinker_tui.engine.backend import choose_backend
    from tinker_tui.engine.config import SETTINGS, RunConfig

    if not db_path.is_file():
        raise UsageError(f"no run store at {db_path}: nothing to resume "
                         "(start the run without --resume)")
    from tinker_tui.engine.resume import run_is_live
    from tinker_tui.engine.store import find_run

    wanted = getattr(args, "run_id", None) or args.resume
    run = asyncio.run(find_run(db_path, wanted, task=task.name))
    if run_is_live(db_path, run.run_id):  # refuse before anything else starts for it
        raise UsageError(f"run {run.run_id} is running in another process; stop it "
                         "first (or `tinker-tui attach` to it)")
    stored = run.config
    overrides = config_overrides(args)
    config_path = getattr(args, "config", None)
    if config_path:  # a settings file, as for a new run; flags still win
        from tinker_tui.app.task_loader import load_config_file

        overrides = {**load_config_file(config_path), **overrides}
    config = RunConfig().with_overrides({k: v for k, v in stored.items() if k in SETTINGS})
    if "seed" in overrides and overrides["seed"] != config.seed:
        raise UsageError(f"--seed cannot change when resuming: run {run.run_id} draws "
                         f"its scenarios from seed {config.seed}")
    config = config.with_overrides(overrides)
    backend = run.backend or "local"
    if args.backend and args.backend != backend:
        raise UsageError(f"run {run.run_id} trains on the {backend} backend; its "
                         f"checkpoints cannot be resumed with --backend {args.backend}")
    backend = choose_backend(backend)
    return config, backend, run.run_id
