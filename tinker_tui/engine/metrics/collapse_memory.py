"""What a run's collapse tracking (`engine.metrics.health`) is fed from its events, in one
place: the engine after a resume, the dashboard, the step lines and the summary all fold a run's steps,
full checkpoints and rollbacks into their `HealthWindow` here, with the policy versions that
tell which checkpoint holds the weights that sampled the best step (the rollback point).

A resumed run starts a new process whose window would otherwise start empty: it would forget
the best step and value, the smoothed mean, the checkpoint a rollback goes back to and the
automatic rollbacks already made, so a run resumed after a collapse would neither name it
nor its best checkpoint, and `max_rollbacks` would count afresh with each resume. The store
holds what is needed: the steps kept (a resume or a rollback deleted the undone ones), the
full checkpoints, and the rollbacks as commands. `replay` reads them back in time order, as
the live run saw them; a rollback's record carries the best step it kept, which may be one
of the steps it undid.

Read back from the store, the window has not seen the groups: the lowest reward seen is the
steps' lowest (`reward/min`), and the recent groups' window starts empty (a pause for no
signal needs a full window of new groups).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TypeGuard

from tinker_tui.engine.events import (
    CheckpointDeleted,
    CheckpointSaved,
    CommandReceived,
    Event,
    StepTrained,
)
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.metrics.health import Collapse, HealthWindow, flat_share

#: The source of the commands of a rollback `on_collapse = rollback` asked for.
AUTOMATIC = "on_collapse"
#: The stored events `replay` reads.
EARLIER_KINDS: tuple[type[Event], ...] = (
    StepTrained,
    CheckpointSaved,
    CheckpointDeleted,
    CommandReceived,
)


def fold(window: HealthWindow, event: Event, *, groups_per_step: int = 1) -> Collapse | None:
    """Feed `window` one event (others are ignored); returns a collapse the first time it is
    seen. `groups_per_step` stands in for a step whose groups are not recorded."""
    if isinstance(event, StepTrained):
        m = event.metrics
        reward = m.get(keys.REWARD_MEAN)
        if not _number(reward):
            return None
        low = m.get(keys.REWARD_MIN)
        groups = len(event.group_ids) or max(1, groups_per_step)
        return window.stepped(
            event.step,
            float(reward),
            flat_share(m, groups),
            groups=groups,
            lowest=float(low) if _number(low) else None,
            sampled_by=sampled_by(event),
        )
    if isinstance(event, CheckpointSaved) and event.kind == "state":
        version = event.resume_state.get("policy_version")
        window.checkpointed(event.step, event.name, version if isinstance(version, int) else None)
    elif isinstance(event, CheckpointDeleted) and event.kind == "state":
        window.checkpoint_deleted(event.name)
    elif isinstance(event, CommandReceived) and event.command == "rolled_back":
        to_step = event.args.get("to_step")
        if isinstance(to_step, int):
            best_step, best = event.args.get("best_step"), event.args.get("best")
            by = event.args.get("best_sampled_by")
            window.rewind(
                to_step,
                (best_step, float(best)) if isinstance(best_step, int) and _number(best) else None,
                by if isinstance(by, int) else None,
            )
    return None


def sampled_by(event: StepTrained) -> int | None:
    """The newest policy version that sampled the step's groups: the version before its
    update (one less than the one it produced, unless it had no gradient) minus the
    freshest group's staleness. None for a step recorded without that staleness."""
    m = event.metrics
    staleness = m.get(keys.STALENESS_MIN)
    if not _number(staleness):
        return None
    before = event.policy_version - (0 if m.get(keys.TRAIN_SKIPPED) else 1)
    return before - int(staleness)


def is_automatic_rollback(event: Event) -> bool:
    """A rollback `on_collapse = rollback` asked for (what `max_rollbacks` counts)."""
    return (
        isinstance(event, CommandReceived)
        and event.command == "rollback"
        and event.source == AUTOMATIC
    )


def replay(
    window: HealthWindow,
    earlier: Iterable[Event],
    *,
    groups_per_step: int = 1,
    up_to: int | None = None,
) -> int:
    """Feed `window` a run's stored events (time order), the steps after `up_to` left out
    (a resume undoes them); returns the automatic rollbacks the run made (each counts
    toward `max_rollbacks`, whether or not the steps after it were kept)."""
    rollbacks = 0
    for event in earlier:
        if (
            isinstance(event, StepTrained | CheckpointSaved)
            and up_to is not None
            and event.step > up_to
        ):
            continue
        rollbacks += is_automatic_rollback(event)
        fold(window, event, groups_per_step=groups_per_step)
    return rollbacks


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
