"""The collapse tracking read back from a run's stored events (engine.metrics.collapse_memory) is
the one the live run had: the same collapse, best step and rollback point, although the
store no longer holds the steps a rollback undid (the best among them included)."""

from __future__ import annotations

from tinker_tui.engine.events import CheckpointSaved, CommandReceived, Event, StepTrained
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.metrics.collapse_memory import AUTOMATIC, fold, replay
from tinker_tui.engine.metrics.health import HealthWindow

#: The issue's tool task: climbs to 0.54 by step 11, then falls to 0 with equal groups.
CLIMB = [0.20, 0.22, 0.25, 0.28, 0.31, 0.35, 0.38, 0.42, 0.45, 0.50, 0.54]
FALL = [0.081, 0.0, 0.0, 0.0, 0.0]
#: The scripted steps are 2 groups each and the run short: a collapse is judged over 6
#: groups (3 steps), not the default `collapse_groups`.
SETTINGS = {"collapse_groups": 6}


def step(n: int, reward: float, time: float) -> StepTrained:
    flat = reward < 0.1
    return StepTrained(
        time=time,
        step=n,
        policy_version=n,
        group_ids=(2 * n, 2 * n + 1),
        metrics={
            keys.REWARD_MEAN: reward,
            keys.REWARD_MIN: 0.0,
            keys.discarded("zero_variance"): 2.0 if flat else 0.0,
        },
    )


def checkpoint(n: int, time: float) -> CheckpointSaved:
    return CheckpointSaved(
        time=time,
        step=n,
        kind="state",
        name=f"step-{n:06d}",
        path=f"tinker://x/weights/step-{n:06d}",
    )


def test_a_run_read_back_has_the_live_runs_collapse_after_a_rollback_undid_its_best():
    live = HealthWindow.from_settings(SETTINGS)
    events: list[Event] = []  # as the live run published them
    t = 0.0
    for n, reward in enumerate(CLIMB + FALL, start=1):
        t += 1
        events.append(step(n, reward, t))
        if n == 10:
            events.append(checkpoint(10, t))
    for event in events:
        fold(live, event)
    assert live.collapse is not None and live.best_step == (11, 0.54)
    # on_collapse = rollback: back to step 10; the best step, 11, is one it undoes.
    events.append(
        CommandReceived(time=t + 0.5, command="rollback", source=AUTOMATIC, args={"to_step": 10})
    )
    rolled = CommandReceived(
        time=t + 1,
        command="rolled_back",
        source=AUTOMATIC,
        args={
            "to_step": 10,
            "checkpoint": "step-000010",
            "steps_undone": 6,
            "best_step": 11,
            "best": 0.54,
        },
    )
    events.append(rolled)
    fold(live, rolled)
    again = [step(n, r, t + 1 + n) for n, r in enumerate([0.3, 0.0, 0.0, 0.0], start=11)]
    for event in again:
        fold(live, event)
    events += again
    assert live.collapse is not None

    # The store: the undone steps (11..16 of the first attempt) are gone, the rest kept.
    stored = [e for e in events if not (isinstance(e, StepTrained) and e.step > 10 and e.time <= t)]
    read_back = HealthWindow.from_settings(SETTINGS)
    assert replay(read_back, stored) == 1  # the automatic rollback made
    assert read_back.best_step == live.best_step == (11, 0.54)
    assert read_back.collapse == live.collapse
    assert read_back.collapse.words() == (
        "collapsed at step 12 (best 0.540 at step 11); best checkpoint step-000010"
    )
    assert read_back.rollback_point() == live.rollback_point() == (10, "step-000010")
    # A resume from step 12 leaves the later steps out.
    up_to_12 = HealthWindow.from_settings(SETTINGS)
    replay(up_to_12, stored, up_to=12)
    assert up_to_12.collapse is None and up_to_12.best_step == (11, 0.54)


def test_a_manual_rollback_does_not_count_toward_max_rollbacks():
    events = [
        CommandReceived(time=1.0, command="rollback", args={"reason": "by hand"}),
        CommandReceived(time=2.0, command="rollback", source=AUTOMATIC),
    ]
    assert replay(HealthWindow.from_settings(SETTINGS), events) == 1


def test_the_rollback_point_read_back_is_the_checkpoint_that_sampled_the_best_step():
    """Steps and checkpoints carry their policy versions: step n (on policy, with a
    gradient) was sampled by version n - 1, so the checkpoint of the best step itself,
    which holds that step's update, is not where a rollback goes."""
    window = HealthWindow.from_settings(SETTINGS)
    for n, reward in enumerate([0.2, 0.4, 0.9, 0.1], start=1):
        event = step(n, reward, float(n))
        fold(
            window,
            StepTrained(
                time=event.time,
                step=n,
                policy_version=n,
                group_ids=event.group_ids,
                metrics={**event.metrics, keys.STALENESS_MIN: 0.0},
            ),
        )
        fold(
            window,
            CheckpointSaved(
                time=n + 0.5,
                step=n,
                kind="state",
                name=f"step-{n:06d}",
                path="p",
                resume_state={"step": n, "policy_version": n},
            ),
        )
    assert window.best_sampled_by == 2
    assert window.rollback_point() == (2, "step-000002")
    # A rollback records the version that sampled the best step: a window read back after
    # it (the best step undone, gone from the store) still knows it.
    back = HealthWindow.from_settings(SETTINGS)
    for n in (1, 2):
        fold(back, step(n, 0.2 * n, float(n)))
        fold(
            back,
            CheckpointSaved(
                time=n + 0.5,
                step=n,
                kind="state",
                name=f"step-{n:06d}",
                path="p",
                resume_state={"step": n, "policy_version": n},
            ),
        )
    fold(
        back,
        CommandReceived(
            time=9.0,
            command="rolled_back",
            source="user",
            args={
                "to_step": 2,
                "checkpoint": "step-000002",
                "best_step": 3,
                "best": 0.9,
                "best_sampled_by": 2,
            },
        ),
    )
    assert back.best_sampled_by == 2 and back.rollback_point() == (2, "step-000002")
