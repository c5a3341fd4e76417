"""The rule that tells a converged run from one with no learning signal, in one place: the
engine's health pause and the dashboard's health words both ask it.

A group whose rewards are all equal carries no gradient. What it means depends on the
rewards seen before it (`RewardRange.classify`):

* "converged": it earns the best group reward seen so far, and some lower reward has been
  seen: the run got there. Not a reason to pause.
* "no_signal": its reward is below the best seen: the learning signal is gone (a collapse).
  Most recent groups like this pause the run.
* "uniform": no two different rewards have been seen yet. Nothing tells a reward that is
  always 0 (a broken reward, or a task too hard for the base model) from one that is always
  1 (a task the base model already solves, as a real model does the smoke-test examples):
  the run goes on, and the words say there is no learning signal yet, not "converged".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

#: Rewards this close count as equal.
TOLERANCE = 1e-9

Outcome = Literal["converged", "uniform", "no_signal"]


@dataclass(slots=True)
class RewardRange:
    """The best group mean reward and the lowest single reward seen so far."""

    best: float = -math.inf
    lowest: float = math.inf

    def classify(self, reward: float) -> Outcome:
        """What a group whose rewards all equal `reward` means (module docstring); asked
        before `saw` counts that group."""
        if reward < self.best - TOLERANCE:
            return "no_signal"
        return "converged" if self.lowest < reward - TOLERANCE else "uniform"

    def saw(self, mean: float, lowest: float) -> None:
        """Count a group: its mean reward and its lowest member's."""
        if math.isfinite(mean):
            self.best = max(self.best, mean)
        if math.isfinite(lowest):
            self.lowest = min(self.lowest, lowest)

    def no_signal_words(self, share: float, groups: int) -> str:
        """Why the learning signal is gone, for a pause reason or the health pane."""
        return (f"no learning signal: {share:.0%} of the last {groups} groups had equal "
                f"rewards below the best seen ({self.best:.3g})")

    def uniform_words(self) -> str:
        """No two different rewards yet (see the module docstring)."""
        return (f"no learning signal yet: every reward so far is {self.best:.3g} "
                "(check the reward if this lasts)")
