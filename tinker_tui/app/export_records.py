"""A stored run's metrics and samples as the records `tinker-tui export` writes: read once
here for every format (jsonl and csv in `app.commands.export`, W&B and TensorBoard in
`app.tracker_export`), so the formats cannot disagree on what a record holds."""

from __future__ import annotations

from pathlib import Path

#: The fields of a metrics record besides its metrics (the csv table's first columns).
METRIC_FIELDS = ("kind", "run_id", "step", "policy_version", "time")
#: The fields of a sample record, in the order the csv table lists them (`kind`: "train" for
#: a training group's rollout, "eval" for an evaluation's, whose `step` is the evaluated
#: step and which has no group).
SAMPLE_FIELDS = (
    "kind",
    "run_id",
    "group_id",
    "scenario_index",
    "scenario_id",
    "sample",
    "reward",
    "policy_version",
    "num_tokens",
    "status",
    "step",
    "reason",
    "time",
    "messages",
    "metrics",
)


async def read_export(db_path: Path, wanted: str | None) -> tuple[str, list[dict], list[dict]]:
    """(run id, metric records, sample records) of the run `wanted` names."""
    from tinker_tui.engine.events import EvalCompleted, GroupSampled, StepTrained
    from tinker_tui.engine.store import StoreReader

    async with await StoreReader.open_readonly(db_path) as store:
        run = await store.find_run(wanted)
        events = await store.events(run, kinds={StepTrained, EvalCompleted, GroupSampled})
        fates = {fate.group_id: fate for fate in await store.groups(run.run_id)}
    run_id = run.run_id
    metrics = []
    samples = []
    for event in events:
        if isinstance(event, StepTrained | EvalCompleted):
            metrics.append(
                {
                    "kind": "step" if isinstance(event, StepTrained) else "eval",
                    "run_id": run_id,
                    "step": event.step,
                    "policy_version": event.policy_version,
                    "time": event.time,
                    **event.metrics,
                }
            )
        elif isinstance(event, GroupSampled):
            fate = fates.get(event.group_id)
            for index, rollout in enumerate(event.trajectories):
                samples.append(
                    {
                        "kind": "train",
                        "run_id": run_id,
                        "group_id": event.group_id,
                        "scenario_index": fate.scenario_index if fate else None,
                        "scenario_id": (fate.scenario_id if fate else "") or event.scenario_id,
                        "sample": index,
                        "reward": rollout.reward,
                        "policy_version": rollout.policy_version,
                        "num_tokens": rollout.num_tokens,
                        "status": fate.status if fate else None,
                        "step": fate.step if fate else None,
                        "reason": (fate.reason if fate else "") or None,
                        "time": event.time,
                        "messages": [dict(m) for m in rollout.messages],
                        "metrics": dict(rollout.metrics),
                    }
                )
        if isinstance(event, EvalCompleted):
            for index, (scenario_id, rollout) in enumerate(
                zip(event.scenario_ids, event.trajectories, strict=True)
            ):
                samples.append(
                    {
                        "kind": "eval",
                        "run_id": run_id,
                        "group_id": None,
                        "scenario_index": None,
                        "scenario_id": scenario_id,
                        "sample": index,
                        "reward": rollout.reward,
                        "policy_version": rollout.policy_version,
                        "num_tokens": rollout.num_tokens,
                        "status": None,
                        "step": event.step,
                        "reason": None,
                        "time": event.time,
                        "messages": [dict(m) for m in rollout.messages],
                        "metrics": dict(rollout.metrics),
                    }
                )
    metrics.sort(key=lambda r: (r["step"], r["kind"] != "step", r["time"]))
    # Training's rollouts by group, then each evaluation's in the order it ran them.
    samples.sort(
        key=lambda r: (
            r["kind"] == "eval",
            r["group_id"] if r["kind"] == "train" else r["step"],
            r["time"] if r["kind"] == "eval" else 0,
            r["sample"],
        )
    )
    return run_id, metrics, samples


def partial_note(db_path: Path, run_id: str, metrics: list[dict]) -> str | None:
    """The line that says an export is partial: its run's process is still running it (it
    holds the run's lock), so steps after the last exported one are still to come."""
    from tinker_tui.engine.training.resume import run_is_live

    if not run_is_live(db_path, run_id):
        return None
    steps = [r["step"] for r in metrics if r["kind"] == "step"]
    through = f"through step {max(steps)}" if steps else "before its first step"
    return (
        f"run {run_id} is still running: this export is partial ({through}); "
        f"export again when it ends for the rest"
    )
