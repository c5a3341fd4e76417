"""A training step's metrics: rewards, staleness, timings, discards, failed rollouts and the
run's group totals. The counters between two steps live here, not in the pipeline that
bumps them; `build` reads them into the step's metrics and starts the next step's count."""

from __future__ import annotations

import math
from collections.abc import Mapping

from tinker_tui.engine.events import DISCARD_REASONS, DiscardReason
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.rollouts.task_metrics import step_task_metrics
from tinker_tui.engine.rollouts.trajectory import TrajectoryGroup


class StepMetrics:
    """The counts between two training steps, and the run's group totals."""

    def __init__(self) -> None:
        #: Groups sampled, trained and discarded since the run began.
        self.group_counts = {
            keys.GROUPS_SAMPLED_TOTAL: 0,
            keys.GROUPS_TRAINED_TOTAL: 0,
            keys.GROUPS_DISCARDED_TOTAL: 0,
        }
        self._discards: dict[DiscardReason, int] = dict.fromkeys(DISCARD_REASONS, 0)
        self._error_rollouts = 0  # rollouts that failed since the last step
        self._rollouts_ended = 0  # rollouts that ended (succeeded or failed) since then
        self._finish_version: dict[int, int] = {}  # group id -> policy version it ended at
        self.last_step_end: float | None = None

    def started(self, now: float) -> None:
        """The run (or a rollback) starts counting step time from `now`."""
        self.last_step_end = now

    def rollouts_ended(self, ended: int, failed: int) -> None:
        self._error_rollouts += failed
        self._rollouts_ended += ended

    def group_sampled(self, group_id: int, version: int) -> None:
        """A group finished sampling while the policy was at `version`."""
        self._finish_version[group_id] = version
        self.group_counts[keys.GROUPS_SAMPLED_TOTAL] += 1

    def discarded(self, reason: DiscardReason) -> None:
        self._discards[reason] += 1

    def staleness_split(self, group: TrajectoryGroup, trained_at: int) -> tuple[int, int]:
        """(versions that passed while the group was sampled, versions while it was queued)."""
        finished_at = self._finish_version.get(group.group_id, group.policy_version)
        # An in-flight sampler on the local backend may already sample with weights the
        # trainer has published but not yet returned from: never a negative count.
        finished_at = max(finished_at, group.policy_version)
        return finished_at - group.policy_version, trained_at - finished_at

    def rewound(self, now: float) -> None:
        """A rollback: the counts of the step in progress are void."""
        self._discards = dict.fromkeys(self._discards, 0)
        self._error_rollouts = 0
        self._finish_version.clear()
        self.last_step_end = now

    @property
    def trained_nothing(self) -> bool:
        return self.group_counts[keys.GROUPS_TRAINED_TOTAL] == 0

    def carry_totals(self, metrics: Mapping[str, float]) -> None:
        """Continue the group totals from an earlier process's last step."""
        for key in self.group_counts:
            self.group_counts[key] = int(metrics.get(key, 0))

    def build(
        self,
        batch: list[TrajectoryGroup],
        version_before: int,
        split: list[tuple[int, int]],
        *,
        wait_started: float,
        train_started: float,
        now: float,
        queue_depth: int,
        rollouts_per_s: float,
        learning_rate: float,
        cost: Mapping[str, float],
    ) -> dict[str, float]:
        """The metrics of the step that trained `batch` (sampled up to `version_before`),
        ending at `now`; then the next step's counts start from zero."""
        rewards = [r for g in batch for r in g.rewards]
        staleness = [version_before - g.policy_version for g in batch]
        for g in batch:
            self._finish_version.pop(g.group_id, None)
        elapsed = max(now - (self.last_step_end or now), 1e-9)
        mean = sum(rewards) / len(rewards)
        metrics = {
            keys.REWARD_MEAN: mean,
            keys.REWARD_STD: math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)),
            keys.REWARD_MIN: min(rewards),
            keys.REWARD_MAX: max(rewards),
            keys.STALENESS_MEAN: sum(staleness) / len(staleness),
            keys.STALENESS_MAX: float(max(staleness)),
            keys.STALENESS_MIN: float(min(staleness)),
            keys.STALENESS_IN_FLIGHT_MEAN: sum(f for f, _ in split) / len(split),
            keys.STALENESS_QUEUED_MEAN: sum(q for _, q in split) / len(split),
            keys.QUEUE_DEPTH: float(queue_depth),
            keys.STEP_TIME: elapsed,
            keys.WAIT_BATCH_TIME: train_started - wait_started,
            keys.TRAIN_TIME: now - train_started,
            keys.ROLLOUTS_PER_S: rollouts_per_s,
            keys.LEARNING_RATE: learning_rate,
        }
        for reason, count in self._discards.items():
            metrics[keys.discarded(reason)] = float(count)
        self.group_counts[keys.GROUPS_DISCARDED_TOTAL] += sum(self._discards.values())
        self.group_counts[keys.GROUPS_TRAINED_TOTAL] += sum(g.has_variance() for g in batch)
        metrics.update({k: float(v) for k, v in self.group_counts.items()})
        metrics.update(cost)
        metrics[keys.ROLLOUTS_FAILED] = float(self._error_rollouts)
        metrics[keys.ROLLOUTS_ENDED] = float(self._rollouts_ended)
        metrics.update(step_task_metrics(batch))
        self._discards = dict.fromkeys(self._discards, 0)
        self._error_rollouts = 0
        self._rollouts_ended = 0
        self.last_step_end = now
        return metrics
