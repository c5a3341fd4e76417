"""Zero-variance groups told apart the one way every front end counts them: converged (their
rewards all equal the best group reward seen; the run got there) or without a learning
signal (below it). Only the second is a discard worth attention. The dashboard and the
headless step line both fold the engine's events through `ZeroVarianceSplit`, with the
engine's own rule (`engine.metrics.health.HealthWindow`), so "0.0% of 12,000 groups discarded" on
the screen and the headless line's counts agree (headless counted converged groups as
discarded: `0/11966/0`).

A rollback deletes the groups of the steps it undoes from the store (and those sampled
for steps that will not come): `rolled_back` forgets them here too, so the live counts are
those `show` reads back."""

from __future__ import annotations

import math

from tinker_tui.engine.events import GroupDiscarded, GroupSampled
from tinker_tui.engine.metrics.health import HealthWindow


def sampled_at_best(window: HealthWindow, event: GroupSampled) -> bool:
    """Whether a group whose rewards are all equal would be converged, by the rewards seen
    before it; then count it among those seen (the engine's order: classify, then count)."""
    at_best = window.classify(event.reward_mean) == "converged"
    window.sampled([t.reward for t in event.trajectories], event.reward_mean, failed=event.failed)
    return at_best


class ZeroVarianceSplit:
    """Counts of converged and no-signal groups, from GroupSampled and GroupDiscarded."""

    def __init__(self) -> None:
        self.rewards = HealthWindow()
        self.converged = 0
        self.no_signal = 0
        self._at_best: dict[int, bool] = {}  # sampled groups not yet discarded or trained
        #: Per sampled group: its mean and lowest reward (what `rewards` classifies by),
        #: and the step that took or dropped it (None while it waits).
        self._seen: dict[int, tuple[float, float, int | None]] = {}
        #: Zero-variance discards: group id -> (the step it was dropped at, converged).
        self._split: dict[int, tuple[int, bool]] = {}

    def sampled(self, event: GroupSampled) -> bool:
        at_best = sampled_at_best(self.rewards, event)
        self._at_best[event.group_id] = at_best
        finite = [t.reward for t in event.trajectories if math.isfinite(t.reward)]
        self._seen[event.group_id] = (event.reward_mean, min(finite, default=math.inf), None)
        return at_best

    def discarded(self, event: GroupDiscarded) -> None:
        at_best = self._at_best.pop(event.group_id, False)
        self._consumed(event.group_id, event.step)
        if event.reason == "zero_variance":
            self._split[event.group_id] = (event.step, at_best)
            if at_best:
                self.converged += 1
            else:
                self.no_signal += 1

    def trained(self, group_ids: tuple[int, ...] | list[int], step: int) -> None:
        """Step `step` took these groups: nothing more comes of them."""
        for group_id in group_ids:
            self._at_best.pop(group_id, None)
            self._consumed(group_id, step)

    def _consumed(self, group_id: int, step: int) -> None:
        seen = self._seen.get(group_id)
        if seen is not None:
            self._seen[group_id] = (seen[0], seen[1], step)

    def rolled_back(self, to_step: int) -> None:
        """The run went back to step `to_step`: the groups taken or dropped after it, and
        those still waiting, are gone, as from the store; the rewards seen are those of the
        groups kept."""
        self._at_best.clear()
        self._split = {g: fate for g, fate in self._split.items() if fate[0] <= to_step}
        self._seen = {
            g: seen for g, seen in self._seen.items() if seen[2] is not None and seen[2] <= to_step
        }
        self.converged = sum(at_best for _, at_best in self._split.values())
        self.no_signal = len(self._split) - self.converged
        rewards = HealthWindow()
        for mean, lowest, _ in self._seen.values():
            rewards.sampled([lowest] if math.isfinite(lowest) else [], mean)
        self.rewards = rewards
