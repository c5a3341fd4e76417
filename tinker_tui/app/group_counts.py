"""Zero-variance groups told apart the one way every front end counts them: converged (their
rewards all equal the best group reward seen; the run got there) or without a learning
signal (below it). Only the second is a discard worth attention. The dashboard and the
headless step line both fold the engine's events through `ZeroVarianceSplit`, with the
engine's own rule (`engine.metrics.health.HealthWindow`), so "0.0% of 12,000 groups discarded" on
the screen and the headless line's counts agree (headless counted converged groups as
discarded: `0/11966/0`)."""

from __future__ import annotations

from tinker_tui.engine.events import GroupDiscarded, GroupSampled
from tinker_tui.engine.metrics.health import HealthWindow


def sampled_at_best(window: HealthWindow, event: GroupSampled) -> bool:
    """Whether a group whose rewards are all equal would be converged, by the rewards seen
    before it; then count it among those seen (the engine's order: classify, then count)."""
    at_best = window.classify(event.reward_mean) == "converged"
    window.sampled([t.reward for t in event.trajectories], event.reward_mean,
                   failed=event.failed)
    return at_best


class ZeroVarianceSplit:
    """Counts of converged and no-signal groups, from GroupSampled and GroupDiscarded."""

    def __init__(self) -> None:
        self.rewards = HealthWindow()
        self.converged = 0
        self.no_signal = 0
        self._at_best: dict[int, bool] = {}  # sampled groups not yet discarded or trained

    def sampled(self, event: GroupSampled) -> bool:
        at_best = sampled_at_best(self.rewards, event)
        self._at_best[event.group_id] = at_best
        return at_best

    def discarded(self, event: GroupDiscarded) -> None:
        at_best = self._at_best.pop(event.group_id, False)
        if event.reason == "zero_variance":
            if at_best:
                self.converged += 1
            else:
                self.no_signal += 1

    def trained(self, group_ids: tuple[int, ...] | list[int]) -> None:
        """The step took these groups: nothing more comes of them."""
        for group_id in group_ids:
            self._at_best.pop(group_id, None)
