"""What a rollout cut off by the length limit is worth: `truncation_policy = cap` grades it
as usual, then clamps its reward to at most `truncated_reward_cap` (tinker-cookbook's
termination reward policy: grade, then clamp).

Why: a task that rewards partial answers can pay a rollout that ran into `max_tokens` as
much as one that finished, and the policy learns to ramble until the limit. The clamp
keeps the grader's signal below the cap (a bad cut-off answer stays worse than a poor
finished one, and the group's comparison holds) while a cut-off rollout never earns more
than the cap. Applied to training groups only: evaluation reports the task's own reward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tinker_tui.engine.rollouts.distributions import truncated
from tinker_tui.engine.rollouts.trajectory import Trajectory


def cap_truncated(
    trajectories: Sequence[Trajectory], cap: float
) -> tuple[tuple[Trajectory, ...], int]:
    """The trajectories with each cut-off one's reward at most `cap`, and how many the cap
    lowered (a cut-off trajectory already at or under it is unchanged and not counted)."""
    capped: list[Trajectory] = []
    lowered = 0
    for trajectory in trajectories:
        if trajectory.reward > cap and truncated(trajectory):
            trajectory = dataclasses.replace(trajectory, reward=float(cap))
            lowered += 1
        capped.append(trajectory)
    return tuple(capped), lowered
