"""`tinker-tui run TASK --resume [RUN]`: the checks and settings of a run that continues a
stored one.

A resumed run keeps its id, its settings (those recorded when it started) and its backend;
flags given on the command line (and a `--config` file) override the settings, except the
seed, which fixes the scenario stream the run is built on. `--steps` is the total for the
whole run, so raising it continues a completed run; fewer steps than the run's last
checkpoint is a usage error before anything loads (the stored run is left as it was).

The live knobs (learning rate, temperature, ...) continue as they were at the checkpoint
the run resumes from, not as the run started: a change made through the control endpoint
is not lost. A knob given as a flag on the resume command line still wins; `resume_notes`
says which knobs came from where.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.engine.errors import UsageError

if TYPE_CHECKING:
    from tinker_tui.engine.config import RunConfig
    from tinker_tui.engine.rollouts.task import Task
    from tinker_tui.engine.store import StoredRun


def resume_plan(
    args: argparse.Namespace, task: Task, db_path: Path
) -> tuple[RunConfig, str, str, tuple[str, ...]]:
    """(settings, backend, run id, notes) of the run `args.resume` names (see the module
    docstring); `args.run_id`, when set, names it instead (the run a dashboard resolved
    before starting the engine). UsageError for a run that cannot be resumed. Nothing
    heavy is imported."""
    from tinker_tui.app.commands.common import config_overrides
    from tinker_tui.engine.backend.choice import choose_backend
    from tinker_tui.engine.config import SETTINGS, RunConfig
    from tinker_tui.engine.metrics.list_prices import PRICE_SETTINGS

    if not db_path.is_file():
        raise UsageError(
            f"no run store at {db_path}: nothing to resume (start the run without --resume)"
        )
    from tinker_tui.engine.training.resume import run_is_live

    wanted = getattr(args, "run_id", None) or args.resume
    run, point = asyncio.run(_stored_run(db_path, wanted, task.name))
    resume_step = point["step"] if point is not None else None
    if run_is_live(db_path, run.run_id):  # refuse before anything else starts for it
        raise UsageError(
            f"run {run.run_id} is running in another process; stop it "
            "first (or `tinker-tui attach` to it)"
        )
    stored = run.config
    overrides = config_overrides(args)
    config_path = getattr(args, "config", None)
    if config_path:  # a settings file, as for a new run; flags still win
        from tinker_tui.app.task_loader import load_config_file

        overrides = {**load_config_file(config_path), **overrides}
    config = RunConfig().with_overrides({k: v for k, v in stored.items() if k in SETTINGS})
    if "seed" in overrides and overrides["seed"] != config.seed:
        raise UsageError(
            f"--seed cannot change when resuming: run {run.run_id} draws "
            f"its scenarios from seed {config.seed}"
        )
    knobs, notes = checkpoint_knobs(config, point, overrides)
    config = config.with_overrides({**knobs, **overrides})
    if any(name in overrides for name in PRICE_SETTINGS):  # the user's prices now
        config = config.with_overrides({"price_list_date": ""})
    if resume_step is not None and resume_step > config.max_steps:
        raise UsageError(
            f"run {run.run_id} resumes from step {resume_step}; --steps "
            f"{config.max_steps} must be larger (e.g. --steps {resume_step * 2})"
        )
    backend = run.backend or "local"
    if args.backend and args.backend != backend:
        raise UsageError(
            f"run {run.run_id} trains on the {backend} backend; its "
            f"checkpoints cannot be resumed with --backend {args.backend}"
        )
    backend = choose_backend(backend)
    return config, backend, run.run_id, notes


def checkpoint_knobs(
    config: RunConfig, point: dict[str, Any] | None, overrides: dict[str, Any]
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The live knobs the checkpoint recorded that differ from the run's settings (to
    continue with), and notes that say so; a knob given as a flag wins, and its note says
    that too."""
    from tinker_tui.engine.config import LIVE_KNOBS

    recorded = (point or {}).get("resume_state", {}).get("knobs") or {}
    knobs: dict[str, Any] = {}
    kept: list[str] = []
    notes: list[str] = []
    for name in LIVE_KNOBS:
        value = recorded.get(name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        flag = "--" + name.replace("_", "-")
        if name in overrides:
            if overrides[name] != value:
                notes.append(
                    f"{flag} {overrides[name]:g} on the command line wins over "
                    f"{name} {value:g} at the checkpoint"
                )
        elif value != getattr(config, name):
            knobs[name] = value
            kept.append(f"{name} {value:g} (was {getattr(config, name):g})")
    if kept:
        where = f"checkpoint {point['name']}" if point else "the checkpoint"
        notes.insert(
            0,
            f"knobs as they were at {where}: {', '.join(kept)}; a flag "
            "on the command line overrides one",
        )
    return knobs, tuple(notes)


async def _stored_run(
    db_path: Path, wanted: str | None, task: str
) -> tuple[StoredRun, dict[str, Any] | None]:
    """The stored run `wanted` names, and the checkpoint it would resume from (None: it has
    none and starts over)."""
    from tinker_tui.engine.store import StoreReader

    async with await StoreReader.open_readonly(db_path) as store:
        run = await store.find_run(wanted, task=task)
        points = await store.resume_points(run.run_id)
    return run, (points[0] if points else None)
