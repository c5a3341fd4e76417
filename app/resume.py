"""`tinker-tui run TASK --resume [RUN]`: the session that continues a stored run, and the
lookup of a run by id or prefix that `runs` and `export` share.

A resumed run keeps its id, its settings (those recorded when it started) and its backend;
flags given on the command line (and a `--config` file) override the settings, except the
seed, which fixes the scenario stream the run is built on. `--steps` is the total for the
whole run, so raising it continues a completed run.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tinker_tui.engine.errors import UsageError


def resolve_run(runs: Sequence[dict[str, Any]], wanted: str | None, db_path: Path,
                task_name: str | None = None) -> dict[str, Any]:
    """The run `wanted` names among `runs` (newest first): an exact id, a unique prefix,
    or None / "latest" for the newest (of `task_name`, if given). UsageError otherwise."""
    if task_name is not None:
        candidates = [r for r in runs if r.get("name") == task_name]
    else:
        candidates = list(runs)
    if wanted in (None, "", "latest"):
        if not candidates:
            of = f" of task {task_name}" if task_name else ""
            raise UsageError(f"no run{of} in {db_path} to resume or read")
        return candidates[0]
    exact = [r for r in runs if r["run_id"] == wanted]
    matches = exact or [r for r in runs if r["run_id"].startswith(wanted)]
    if len(matches) == 1:
        run = matches[0]
        if task_name is not None and run.get("name") != task_name:
            raise UsageError(f"run {run['run_id']} is a run of task {run.get('name')!r}, "
                             f"not {task_name!r}")
        return run
    if matches:
        raise UsageError(f"{wanted!r} matches several runs: "
                         + ", ".join(r["run_id"] for r in matches[:10]))
    listing = ", ".join(r["run_id"] for r in runs[:10]) or "none"
    raise UsageError(f"no run {wanted!r} in {db_path}; runs: {listing}")


async def read_runs(db_path: Path) -> list[dict[str, Any]]:
    """Every run in the store, newest first (read-only; StoreError if unusable)."""
    from tinker_tui.engine.store import RunStore

    store = await RunStore.open_readonly(db_path)
    try:
        return await store.runs()
    finally:
        await store.close()


def resumed_session(args: argparse.Namespace, task: Any) -> Any:
    """The `Run` that continues the run `args.resume` names (see the module docstring)."""
    from tinker_tui.app.commands.run import config_overrides
    from tinker_tui.engine.backend import choose_backend
    from tinker_tui.engine.config import SETTINGS, RunConfig
    from tinker_tui.engine.run import Run

    db_path = Path(args.db)
    if not db_path.is_file():
        raise UsageError(f"no run store at {db_path}: nothing to resume "
                         "(start the run without --resume)")
    run = resolve_run(asyncio.run(read_runs(db_path)), args.resume, db_path, task.name)
    from tinker_tui.engine.resume import run_is_live

    if run_is_live(db_path, run["run_id"]):  # refuse before anything else starts for it
        raise UsageError(f"run {run['run_id']} is running in another process; stop it "
                         "first (or `tinker-tui attach` to it)")
    stored = run.get("config") if isinstance(run.get("config"), dict) else {}
    overrides = config_overrides(args)
    config_path = getattr(args, "config", None)
    if config_path:  # a settings file, as for a new run; flags still win
        from tinker_tui.app.task_loader import load_config_file

        overrides = {**load_config_file(config_path), **overrides}
    config = RunConfig().with_overrides({k: v for k, v in stored.items() if k in SETTINGS})
    if "seed" in overrides and overrides["seed"] != config.seed:
        raise UsageError(f"--seed cannot change when resuming: run {run['run_id']} draws "
                         f"its scenarios from seed {config.seed}")
    config = config.with_overrides(overrides)
    backend = run.get("backend") or "local"
    if args.backend and args.backend != backend:
        raise UsageError(f"run {run['run_id']} trains on the {backend} backend; its "
                         f"checkpoints cannot be resumed with --backend {args.backend}")
    backend = choose_backend(backend)
    return Run(task=task, config=config, backend=backend, db_path=db_path,
               run_id=run["run_id"], resume=True)
