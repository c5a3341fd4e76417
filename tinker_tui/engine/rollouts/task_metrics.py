"""What tasks report, aggregated: a step's (or an evaluation's) trajectory metrics and, for a
mixed task, each part's reward, under the keys `engine.metrics.metric_keys` names.

A trajectory's metrics are numbers and booleans (`Trajectory.metrics`). Over the
trajectories of a step's batch each gets its mean (`task/<name>`) and, for numbers, its
min and max; a boolean's mean is a rate, and its min and max say little. A metric only
some trajectories report is averaged over those that do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.rollouts.trajectory import Trajectory, TrajectoryGroup


def trajectory_metrics(
    trajectories: Iterable[Trajectory], *, part: str = "", stats: bool = True
) -> dict[str, float]:
    """`task/<name>` (mean) for every metric the trajectories report, and with `stats`
    `task/<name>/min` and `/max` for those that are numbers."""
    values: dict[str, list[float]] = {}
    booleans: set[str] = set()
    for trajectory in trajectories:
        for name, value in trajectory.metrics.items():
            values.setdefault(name, []).append(float(value))
            if isinstance(value, bool):
                booleans.add(name)
    out: dict[str, float] = {}
    for name, seen in values.items():
        out[keys.task_metric(name, part=part)] = sum(seen) / len(seen)
        if stats and name not in booleans:
            out[keys.task_metric(name, "min", part)] = min(seen)
            out[keys.task_metric(name, "max", part)] = max(seen)
    return out


def step_task_metrics(groups: Sequence[TrajectoryGroup]) -> dict[str, float]:
    """The task's metrics over a step's batch, and per part of a mixed task its mean reward
    and metrics."""
    out = trajectory_metrics(t for g in groups for t in g.trajectories)
    parts: dict[str, list[Trajectory]] = {}
    for group in groups:
        if group.part:
            parts.setdefault(group.part, []).extend(group.trajectories)
    for part, trajectories in parts.items():
        out[keys.part_reward_mean(part)] = sum(t.reward for t in trajectories) / len(trajectories)
        out.update(trajectory_metrics(trajectories, part=part))
    return out


def eval_task_metrics(
    results: Sequence[tuple[str, Trajectory | BaseException]],
) -> dict[str, float]:
    """An evaluation's metrics beyond its reward mean: each metric's mean
    (`eval/task/<name>`) and, for a mixed task, per part its reward mean and metrics.
    `results`: (part, the rollout's trajectory or its error) per eval scenario."""
    done = [(part, r) for part, r in results if isinstance(r, Trajectory)]
    out = {
        _as_eval(key): value
        for key, value in trajectory_metrics((t for _, t in done), stats=False).items()
    }
    parts: dict[str, list[Trajectory]] = {}
    for part, trajectory in done:
        if part:
            parts.setdefault(part, []).append(trajectory)
    for part in {part for part, _ in results if part}:
        trajectories = parts.get(part, [])
        out[keys.eval_part_reward_mean(part)] = (
            sum(t.reward for t in trajectories) / len(trajectories)
            if trajectories
            else float("nan")
        )
        for key, value in trajectory_metrics(trajectories, stats=False).items():
            out[keys.eval_task_metric(key[len(keys.TASK_PREFIX) :], part)] = value
    return out


def _as_eval(task_key: str) -> str:
    return keys.eval_task_metric(task_key[len(keys.TASK_PREFIX) :])
