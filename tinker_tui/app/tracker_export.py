"""`tinker-tui export RUN --format wandb|tensorboard`: a stored run, written after the fact
by the same trackers a live run feeds (for runs made without `--wandb` / `--tensorboard`).

Both write where the flags would have: TensorBoard to `tensorboard/` beside the store, W&B's
files beside the store (offline without an API key, as live); `--output` names another
folder. An export is a new W&B run each time (named after the run); TensorBoard's folder
for the run is rewritten (TensorBoard shows the export, not an earlier copy).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.app.interrupts import EXIT_OK
from tinker_tui.engine.errors import UsageError

if TYPE_CHECKING:
    from tinker_tui.engine.events import CheckpointSaved
    from tinker_tui.engine.store import StoredRun

#: W&B project of an export when neither --project nor the run's settings name one.
DEFAULT_WANDB_PROJECT = "tinker-tui"


async def _run_and_checkpoints(
    db_path: Path, run_id: str
) -> tuple[StoredRun, list[CheckpointSaved]]:
    from tinker_tui.engine.store import StoreReader

    async with await StoreReader.open_readonly(db_path) as store:
        return await store.find_run(run_id), await store.checkpoints(run_id)


def export_to_tracker(args: argparse.Namespace) -> int:
    from tinker_tui.app.export_records import METRIC_FIELDS, partial_note, read_export
    from tinker_tui.engine.trackers import missing_package
    from tinker_tui.engine.trackers.tracker import RunInfo, conversation_text

    problem = missing_package(args.format, asked_by=f"--format {args.format}")
    if problem:
        raise UsageError(problem)
    run_id, metrics, samples = asyncio.run(read_export(args.db, args.run))
    run, checkpoints = asyncio.run(_run_and_checkpoints(args.db, run_id))
    config = run.config
    tracker = _tracker(args, config)
    info = RunInfo(
        run_id=run_id, name=run.name, backend=run.backend, base_model=run.base_model, config=config
    )
    started = tracker.start(info)
    steps = evals = 0
    for record in metrics:
        values = {k: v for k, v in record.items() if k not in METRIC_FIELDS}
        log = tracker.log_step if record["kind"] == "step" else tracker.log_eval
        log(record["step"], record["policy_version"], values, record["time"] or 0.0)
        steps, evals = (steps + 1, evals) if record["kind"] == "step" else (steps, evals + 1)
    for checkpoint in checkpoints:
        tracker.log_checkpoint(checkpoint.step, checkpoint.kind, checkpoint.name, checkpoint.path)
    every = int(config.get("wandb_samples_every", 10) or 0) if args.format == "wandb" else 0
    by_step: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for s in samples:
        if every and s["status"] == "trained" and s["step"] and s["step"] % every == 0:
            by_step[s["step"]].append(
                (
                    s["step"],
                    s["group_id"],
                    s["scenario_id"],
                    s["sample"],
                    s["reward"],
                    s["policy_version"],
                    s["num_tokens"],
                    conversation_text(s["messages"] or []),
                )
            )
    for step in sorted(by_step):
        tracker.log_samples(step, by_step[step])
    finished = tracker.finish(run.status or "completed")
    print(
        f"exported run {run_id} to {tracker.name}: {steps} steps, {evals} evaluations, "
        f"{len(checkpoints)} checkpoints",
        file=sys.stderr,
    )
    for line in finished or started:  # the last word on where the records are
        print(line, file=sys.stderr)
    note = partial_note(args.db, run_id, metrics)
    if note:
        print(note, file=sys.stderr)
    return EXIT_OK


def _tracker(args: argparse.Namespace, config: dict[str, Any]) -> Any:
    store_folder = Path(args.db).expanduser().parent
    if args.format == "tensorboard":
        from tinker_tui.engine.trackers.tensorboard_tracker import TensorBoardTracker

        return TensorBoardTracker(
            folder=Path(args.output) if args.output else store_folder / "tensorboard"
        )
    from tinker_tui.engine.trackers.wandb_tracker import WandbTracker

    return WandbTracker(
        project=args.project or config.get("wandb_project") or DEFAULT_WANDB_PROJECT,
        entity=config.get("wandb_entity") or None,
        run_name=None,
        run_id=None,
        folder=Path(args.output) if args.output else store_folder,
    )
