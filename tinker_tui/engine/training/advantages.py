"""Group advantages: how much better each member of a group did than the others.

The run's `advantage` setting picks the rule; a task's `advantages(rewards)` hook replaces
it for that task:

* ``mean`` (the default): reward minus the group's mean reward (tinker-cookbook's rule);
* ``mean_std``: that, divided by the group's standard deviation plus 1e-6 (ART's default,
  GRPO's normalisation: a group whose rewards barely differ still gets advantages of about
  one, whatever the reward's scale);
* a hook: any function of the group's rewards that returns one finite number per member.

The advantages of a group are computed once, when it has been sampled, so a hook that
raises or returns something unusable fails that group (counted as an error, named in the
log) instead of the training step.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

from tinker_tui.engine.config import ADVANTAGE_RULES
from tinker_tui.engine.rollouts.trajectory import TrajectoryError

__all__ = ["ADVANTAGE_RULES", "STD_EPSILON", "AdvantageHook", "group_advantages"]

#: Added to the standard deviation by `mean_std` (as ART does), so equal rewards divide by
#: no zero.
STD_EPSILON = 1e-6

#: advantages(rewards) -> one advantage per member, in the members' order.
AdvantageHook = Callable[[list[float]], Sequence[float]]


def group_advantages(
    rewards: Sequence[float], rule: str = "mean", hook: AdvantageHook | None = None
) -> list[float]:
    """The advantages of one group's members, by `hook` if given, else by `rule`."""
    rewards = [float(r) for r in rewards]
    if hook is not None:
        return _checked(hook(list(rewards)), len(rewards))
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    centered = [r - mean for r in rewards]
    if rule == "mean":
        return centered
    if rule == "mean_std":
        std = math.sqrt(sum(c * c for c in centered) / len(centered))
        return [c / (std + STD_EPSILON) for c in centered]
    raise ValueError(
        f"unknown advantage rule {rule!r}; expected one of {', '.join(ADVANTAGE_RULES)}"
    )


def _checked(values: Any, count: int) -> list[float]:
    where = "the task's advantages(rewards) hook"
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise TrajectoryError(
            f"{where} returned {type(values).__name__}; expected a list of {count} numbers"
        )
    if len(values) != count:
        raise TrajectoryError(
            f"{where} returned {len(values)} values for {count} rewards; return one per reward"
        )
    out = []
    for value in values:
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Real)
            or not math.isfinite(value)
        ):
            raise TrajectoryError(
                f"{where} returned {value!r}; every advantage must be a finite number"
            )
        out.append(float(value))
    return out
