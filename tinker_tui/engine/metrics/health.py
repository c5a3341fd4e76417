"""The run's health, in one place: the engine's health pauses and collapse handling and the
dashboard's health words all read one `HealthWindow`, fed the same events.

A group whose rewards are all equal (`rewards_equal`) carries no gradient. What it means
depends on the rewards seen before it:

* "converged": it earns the best group reward seen so far, and some lower reward has been
  seen: the run got there. Not a reason to pause.
* "no_signal": its reward is below the best seen: the learning signal is gone. When most of
  the recent groups are like this (`zero_variance_pause_rate` of the last `health_window`)
  the run pauses.
* "uniform": no two different rewards have been seen yet. Nothing tells a reward that is
  always 0 (a broken reward, or a task too hard for the base model) from one that is always
  1 (a task the base model already solves): the run goes on, and the words say there is no
  learning signal *yet*, not "converged".

Failed rollouts count toward `error_pause_rate`: the error rate is the share of the recent
groups' rollouts that failed, a whole failed group ("error") counting all its members. A
reward that raises on most answers fails most rollouts while every group still trains on its
few survivors, so counting failed groups alone would read such a run as perfect.

Collapse is read from the steps, not the groups: the policy got somewhere and fell back. It is
judged over the trailing steps that hold at least `collapse_groups` groups (and at least
`COLLAPSE_STEPS` steps), each step weighted by its groups: a run has collapsed when the mean
reward of that stretch (and the last step's) is below `COLLAPSE_LEVEL` (a third) of the way
from the lowest reward seen to the best mean of such a stretch before it, while at least half
of its groups were equal (no gradient) or failed: the policy is stuck low and cannot climb back by itself.
Enough groups, not a few steps, because a task whose prompts are unequally hard draws
unlucky steps: at 4 groups a step, three steps of hard prompts (12 groups) read as a fall on
a tool task that held, and a lucky stretch set a mark the next dips "fell" from
(next_number's rewards swing between 0.1 and 0.45 from step to step). It is named by the
first step of that fall and the best step before it ("collapsed at step 12 (best 0.540 at
step 11)"), with the checkpoint a rollback resumes from (`HealthWindow.rollback_point`). A run whose reward comes back above that level is no longer collapsed. While a fall
below that level gathers its groups, the no-signal pause waits (`judging_a_fall`): the groups
it counts are sampled ahead of the steps, and would otherwise call the fall "no learning
signal" first.

A rollback goes back to the weights that sampled the best step, not to the checkpoint written
at it: that one holds the best step's own optimizer update, which may be the one that broke
the run (rolled back there, a run at a high learning rate fell again at once). Step n's groups
were sampled by versions up to the one before its update (`sampled_by`: the newest version
among them; older ones too, off policy), and a step with a gradient makes one new version.
So the rollback point is the newest full checkpoint whose version is at most the best step's
`sampled_by`: on policy, the checkpoint of the step before; the best step's own when it had
no gradient (no new version). A step or checkpoint whose version is unknown (recorded before
they were) counts by step: checkpoints before the best step.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tinker_tui.engine.collapse_level import COLLAPSE_LEVEL
from tinker_tui.engine.metrics import metric_keys as keys

#: Rewards this close count as equal.
TOLERANCE = 1e-9
#: The fewest trailing steps a collapse is judged over (however many groups they hold).
COLLAPSE_STEPS = 3
#: ... while at least this share of those steps' groups were equal or failed.
COLLAPSE_FLAT_SHARE = 0.5

Outcome = Literal["ok", "converged", "uniform", "no_signal", "error"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "converged", "uniform", "no_signal", "error")
#: What the health words say: nothing yet, learning, converged, no learning signal (yet),
#: collapsed, failing.
Kind = Literal["none", "learning", "converged", "no_signal", "collapsed", "error"]


def _setting_default(name: str) -> int:
    from tinker_tui.engine.config import SETTINGS  # config's one home for the default

    return int(SETTINGS[name].default)


def rewards_equal(rewards: Iterable[float]) -> bool:
    """Whether a group's rewards are all equal (within `TOLERANCE`): no gradient."""
    values = list(rewards)
    return not values or max(values) - min(values) <= TOLERANCE


def flat_share(metrics: Mapping[str, Any], groups: int) -> float:
    """The share of a step's groups that carried no gradient or failed, from its
    `StepTrained` metrics and the number of groups it trained on."""
    equal = float(metrics.get(keys.discarded("zero_variance"), 0.0) or 0.0)
    failed = float(metrics.get(keys.discarded("error"), 0.0) or 0.0)
    if metrics.get(keys.TRAIN_SKIPPED):
        equal = float(groups)
    total = groups + failed
    return (min(equal, groups) + failed) / total if total > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Collapse:
    """Where a run collapsed: the first step of the fall, and the best step before it."""

    step: int
    best: float
    best_step: int
    #: The checkpoint holding the weights that sampled the best step (what a rollback
    #: resumes from: `HealthWindow.rollback_point`).
    checkpoint: str = ""
    checkpoint_step: int | None = None

    def words(self) -> str:
        # Three decimals, as every reward a summary or a step line prints.
        text = f"collapsed at step {self.step} (best {self.best:.3f} at step {self.best_step})"
        if self.checkpoint:
            text += f"; best checkpoint {self.checkpoint}"
        return text


@dataclass(frozen=True, slots=True)
class _Step:
    step: int
    reward: float
    flat: float
    groups: int = 1
    #: Where the stretch that ends here starts (an index into the steps), and its mean
    #: reward (weighted by groups); -1 and -inf while the steps so far hold too few groups.
    start: int = -1
    mean: float = -math.inf
    #: The best such mean of a stretch ending here or before.
    top: float = -math.inf
    #: The newest policy version that sampled the step's groups (None: not recorded).
    sampled_by: int | None = None
    #: A rollback undid this (best) step: the last step before it, and its checkpoints,
    #: hold the weights that sampled it; later ones are a new line of weights.
    undone_after: int | None = None


def _stretch(steps: Sequence[_Step], end: int, groups: int) -> int:
    """Where the stretch of `steps` that ends at index `end` starts: the fewest steps, at
    least `COLLAPSE_STEPS`, that hold at least `groups` groups; -1 while there are too few."""
    held = 0
    for i in range(end, -1, -1):
        held += steps[i].groups
        if held >= groups and end - i + 1 >= COLLAPSE_STEPS:
            return i
    return -1


def _weighted(steps: Sequence[_Step], field: str) -> float:
    total = sum(s.groups for s in steps)
    return sum(getattr(s, field) * s.groups for s in steps) / total if total else math.nan


class HealthWindow:
    """The recent groups' outcomes (the last `size`), the rewards seen, the steps' rewards,
    and the checkpoints a rollback could resume from (module docstring)."""

    def __init__(
        self,
        size: int = 32,
        *,
        no_signal_rate: float = 0.9,
        error_rate: float = 0.5,
        collapse_groups: int | None = None,
    ) -> None:
        self.size = size
        self.no_signal_rate = no_signal_rate
        self.error_rate = error_rate
        #: The groups a collapse is judged over (the run's `collapse_groups` setting).
        self.collapse_groups = (
            _setting_default("collapse_groups")
            if collapse_groups is None
            else max(1, int(collapse_groups))
        )
        self.outcomes: deque[Outcome] = deque(maxlen=size)
        #: The step a rollback went back to, once one has (the words say so while no
        #: group has finished since).
        self._rewound_to: int | None = None
        #: (rollouts failed, rollouts) of each of those groups.
        self.rollouts: deque[tuple[int, int]] = deque(maxlen=size)
        #: The best group mean reward and the lowest single reward seen so far.
        self.best_group = -math.inf
        self.lowest = math.inf
        self._steps: list[_Step] = []
        self._best: _Step | None = None
        #: step -> (name, policy version or None), the full checkpoints kept
        self._checkpoints: dict[int, tuple[str, int | None]] = {}
        self.collapse: Collapse | None = None
        self._collapse_told = False

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> HealthWindow:
        """From run settings by name (a `RunConfig.as_dict()`, or the config a run
        recorded); missing ones take their defaults."""
        window = cls()
        window.configure(settings)
        return window

    def configure(self, settings: Mapping[str, Any]) -> None:
        """Take the window's size and rates from run settings by name (missing or odd ones
        keep their defaults); the groups counted so far stay."""
        from tinker_tui.engine.config import SETTINGS

        def get(name: str) -> float:
            value = settings.get(name)
            ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
            return float(value if ok else SETTINGS[name].default)  # type: ignore[arg-type]

        self.size = max(1, int(get("health_window")))
        self.no_signal_rate = get("zero_variance_pause_rate")
        self.error_rate = get("error_pause_rate")
        groups = max(1, int(get("collapse_groups")))
        if groups != self.collapse_groups:
            self.collapse_groups = groups
            self._restretch(0)
        if self.outcomes.maxlen != self.size:
            self.outcomes = deque(self.outcomes, maxlen=self.size)
            self.rollouts = deque(self.rollouts, maxlen=self.size)

    # ------------------------------------------------------------------ groups
    def classify(self, reward: float) -> Outcome:
        """What a group whose rewards all equal `reward` means, given the rewards seen
        before it (module docstring)."""
        if reward < self.best_group - TOLERANCE:
            return "no_signal"
        return "converged" if self.lowest < reward - TOLERANCE else "uniform"

    def sampled(
        self, rewards: Sequence[float], mean: float | None = None, *, failed: int = 0
    ) -> Outcome:
        """Count a sampled group by its members' rewards (and its mean reward, when they
        are not all at hand: a record without them) and the `failed` members dropped from
        it; returns its outcome."""
        finite = [r for r in rewards if math.isfinite(r)]
        if mean is None:
            mean = sum(finite) / len(finite) if finite else math.nan
        outcome: Outcome = "ok"
        if finite and rewards_equal(finite):
            outcome = self.classify(mean)
        if math.isfinite(mean):
            self.best_group = max(self.best_group, mean)
        if finite:
            self.lowest = min(self.lowest, min(finite))
        self.outcomes.append(outcome)
        self.rollouts.append((failed, len(rewards) + failed))
        return outcome

    def failed(self, failed: int = 1, members: int = 1) -> None:
        """Count a group that failed (discarded as an error): `failed` of its `members`
        rollouts raised (a group whose hook failed counts as one failure)."""
        self.outcomes.append("error")
        members = max(1, members)
        self.rollouts.append((min(members, max(1, failed)), members))

    def share(self, outcome: Outcome) -> float:
        return (
            sum(o == outcome for o in self.outcomes) / len(self.outcomes) if self.outcomes else 0.0
        )

    def rollout_errors(self) -> tuple[float, int]:
        """(share of the recent groups' rollouts that failed, how many rollouts)."""
        total = sum(m for _, m in self.rollouts)
        return (sum(f for f, _ in self.rollouts) / total if total else 0.0), total

    def clear_groups(self) -> None:
        """Forget the recent groups (after a pause they caused: the next pause needs a full
        window of its own)."""
        self.outcomes.clear()
        self.rollouts.clear()

    def group_alarm(self) -> tuple[Literal["error", "no_signal"], str] | None:
        """Why a full window of groups says to pause, if it does: failures or no signal."""
        if len(self.outcomes) < self.size:
            return None
        errors, rollouts = self.rollout_errors()
        if errors >= self.error_rate:
            return "error", (
                f"rollout errors: {errors:.0%} of the last {rollouts} rollouts "
                f"({len(self.outcomes)} groups) failed"
            )
        no_signal = self.share("no_signal")
        if no_signal >= self.no_signal_rate and not self.judging_a_fall():
            return "no_signal", self.no_signal_words(no_signal)
        return None

    def judging_a_fall(self) -> bool:
        """Whether the last step fell below the collapse level after the best step, and the
        steps since hold fewer than `collapse_groups` groups: the collapse check has not had
        its evidence yet. The no-signal pause waits for it (groups are counted as sampled,
        ahead of the steps), else a policy that fell to equal rewards at 0 would be paused
        as "no learning signal" before it could be named as collapsed."""
        best = self._best
        if best is None or not self._steps or self._steps[-1].step <= best.step:
            return False
        last = self._steps[-1]
        low = min(self.lowest, min(s.reward for s in self._steps))
        if not last.top - low > TOLERANCE or last.reward >= low + COLLAPSE_LEVEL * (last.top - low):
            return False
        return sum(s.groups for s in self._steps if s.step > best.step) < self.collapse_groups

    # ------------------------------------------------------------------ steps
    @property
    def best_step(self) -> tuple[int, float] | None:
        """(step, mean reward) of the best step so far."""
        return None if self._best is None else (self._best.step, self._best.reward)

    @property
    def best_undone(self) -> bool:
        """Whether a rollback undid the best step (it stays the one to beat)."""
        return self._best is not None and self._best.undone_after is not None

    @property
    def best_sampled_by(self) -> int | None:
        """The newest policy version that sampled the best step's groups, if known."""
        return None if self._best is None else self._best.sampled_by

    def stepped(
        self,
        step: int,
        reward: float,
        flat: float,
        *,
        groups: int = 1,
        lowest: float | None = None,
        sampled_by: int | None = None,
    ) -> Collapse | None:
        """Count a trained step: its mean reward, `flat_share`, the groups it trained on and
        the newest policy version that sampled them (and its lowest reward, for a window not
        fed the groups: a stored run read back).
        Returns the collapse the first time it is seen (once per collapse), else None."""
        if not math.isfinite(reward):
            return None
        if lowest is not None and math.isfinite(lowest):
            self.lowest = min(self.lowest, lowest)
        if self._steps and self._steps[-1].step >= step:
            self._steps = [s for s in self._steps if s.step < step]  # a rewound run goes again
        self._steps.append(_Step(step, reward, flat, max(1, int(groups)), sampled_by=sampled_by))
        self._restretch(len(self._steps) - 1)
        entry = self._steps[-1]
        if self._best is None or reward > self._best.reward + TOLERANCE:
            self._best = entry
        self.collapse = self._collapse()
        if self.collapse is None:
            self._collapse_told = False
            return None
        if self._collapse_told:
            return None
        self._collapse_told = True
        return self.collapse

    def _restretch(self, first: int) -> None:
        """Give the steps from index `first` on their stretches, means and tops."""
        steps = self._steps
        for i in range(first, len(steps)):
            start = _stretch(steps, i, self.collapse_groups)
            mean = _weighted(steps[start : i + 1], "reward") if start >= 0 else -math.inf
            top = max(mean, steps[i - 1].top if i else -math.inf)
            s = steps[i]
            steps[i] = dataclasses.replace(s, start=start, mean=mean, top=top)

    def _collapse(self) -> Collapse | None:
        best = self._best
        if best is None or not self._steps:
            return None
        last = self._steps[-1]
        if last.start < 0:
            return None
        recent = self._steps[last.start :]
        if recent[0].step <= best.step:
            return None
        low = min(self.lowest, min(s.reward for s in self._steps))
        # the best stretch that ended before this one began
        top = self._steps[last.start - 1].top if last.start > 0 else -math.inf
        if not top - low > TOLERANCE:
            return None
        level = low + COLLAPSE_LEVEL * (top - low)
        if (
            last.mean >= level
            or _weighted(recent, "flat") < COLLAPSE_FLAT_SHARE
            or last.reward >= level
        ):
            return None
        first = len(self._steps) - 1  # the first step of the fall: back while below level
        while (
            first > 0
            and self._steps[first - 1].reward < level
            and self._steps[first - 1].step > best.step
        ):
            first -= 1
        fell = self._steps[first].step
        at = self.rollback_point()
        return Collapse(
            step=fell,
            best=best.reward,
            best_step=best.step,
            checkpoint=at[1] if at else "",
            checkpoint_step=at[0] if at else None,
        )

    def checkpointed(self, step: int, name: str, version: int | None = None) -> None:
        """A full checkpoint was saved at `step`, of policy `version` (None: not known)."""
        self._checkpoints[step] = (name, version)
        self._refresh_collapse()

    def checkpoint_deleted(self, name: str) -> None:
        self._checkpoints = {s: c for s, c in self._checkpoints.items() if c[0] != name}
        self._refresh_collapse()

    def _refresh_collapse(self) -> None:
        if self.collapse is not None:
            at = self.rollback_point()
            self.collapse = Collapse(
                self.collapse.step,
                self.collapse.best,
                self.collapse.best_step,
                at[1] if at else "",
                at[0] if at else None,
            )

    def rollback_point(self) -> tuple[int, str] | None:
        """(step, name) of the newest full checkpoint holding the weights that sampled the
        best step: its version at most the best step's `sampled_by` (module docstring)."""
        best = self._best
        if best is None:
            return None
        last = best.step if best.undone_after is None else min(best.step, best.undone_after)
        steps = [
            s
            for s, (_, version) in self._checkpoints.items()
            if s <= last
            and (
                s < best.step
                if version is None or best.sampled_by is None
                else version <= best.sampled_by
            )
        ]
        return (max(steps), self._checkpoints[max(steps)][0]) if steps else None

    def checkpoint_version(self, step: int) -> int | None:
        """The policy version of the full checkpoint at `step`, if known."""
        held = self._checkpoints.get(step)
        return None if held is None else held[1]

    def rewind(
        self, step: int, best: tuple[int, float] | None = None, best_sampled_by: int | None = None
    ) -> None:
        """The run went back to its checkpoint at `step` (a rollback): later steps and
        checkpoints are gone; the best step stays the one to beat, even when it was one of
        them (`best`, the (step, reward) the rollback recorded, and `best_sampled_by`, set
        it for a window that read the run back from the store, where the undone steps are
        gone)."""
        if (
            best is not None
            and math.isfinite(best[1])
            and (self._best is None or best[1] > self._best.reward + TOLERANCE)
        ):
            self._best = _Step(int(best[0]), float(best[1]), 0.0, sampled_by=best_sampled_by)
        if self._best is not None and self._best.step > step:
            end = self._best.undone_after
            self._best = dataclasses.replace(
                self._best, undone_after=step if end is None else min(end, step)
            )
        self._steps = [s for s in self._steps if s.step <= step]
        self._checkpoints = {s: n for s, n in self._checkpoints.items() if s <= step}
        self.collapse = None
        self._collapse_told = False
        self.outcomes.clear()
        self.rollouts.clear()
        self._rewound_to = step

    # ------------------------------------------------------------------ words
    def verdict(self) -> tuple[Kind, str]:
        """(kind, words) for a person: whether the run is learning, has converged, has no
        learning signal (or none yet), has collapsed, or is failing. The thresholds are the
        run's own pause rates, so the words agree with the engine's pauses."""
        n = len(self.outcomes)
        if n == 0 and self.collapse is None:
            # groups in flight (the staleness histogram beside these words) have not
            # finished sampling: "no groups sampled" read as a contradiction of them
            if self._rewound_to is not None:
                return "none", (
                    f"no group has finished sampling since the rollback to step {self._rewound_to}"
                )
            return "none", "no group has finished sampling yet"
        share = {o: self.share(o) for o in OUTCOMES}
        best_text = f" ({self.best_group:.3g})" if math.isfinite(self.best_group) else ""
        errors, rollouts = self.rollout_errors()
        if n and errors >= self.error_rate:
            return "error", f"errors: {errors:.0%} of the last {n} groups' rollouts failed"
        if self.collapse is not None:
            return "collapsed", self.collapse.words()
        if share["no_signal"] >= self.no_signal_rate:
            return "no_signal", self.no_signal_words(share["no_signal"])
        if share["uniform"] + share["no_signal"] >= self.no_signal_rate:
            return "no_signal", self.uniform_words()
        if share["converged"] >= self.no_signal_rate:
            if share["converged"] == 1:
                return "converged", f"converged: every group earns the best reward seen{best_text}"
            return "converged", (
                f"converged: {share['converged']:.0%} of the last {n} groups "
                f"earn the best reward seen{best_text}"
            )
        words = f"learning: {share['ok']:.0%} of the last {n} groups carry a gradient"
        if errors:
            words += f", {errors:.0%} of their rollouts failed"
        return "learning", words

    def no_signal_words(self, share: float) -> str:
        """Why the learning signal is gone, for a pause reason or the health pane."""
        return (
            f"no learning signal: {share:.0%} of the last {len(self.outcomes)} groups had "
            f"equal rewards below the best seen ({self.best_group:.3g})"
        )

    def uniform_words(self) -> str:
        """No two different rewards yet (see the module docstring)."""
        return (
            f"no learning signal yet: every reward so far is {self.best_group:.3g} "
            "(check the reward if this lasts)"
        )
