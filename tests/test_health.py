"""The health window (engine.metrics.health): one rule for the engine's pauses and the dashboard's
words. Collapse from scripted reward curves, told apart from converged and no signal yet."""

from __future__ import annotations

from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.metrics.health import HealthWindow, flat_share, rewards_equal

#: The issue's tool task: it climbs from 0.20 to 0.54 by step 11, then falls to 0.081 and
#: to 0.000 from step 13 on, every group equal (all 0).
CLIMB = [0.20, 0.22, 0.25, 0.28, 0.31, 0.35, 0.38, 0.42, 0.45, 0.50, 0.54]
FALL = [0.081, 0.0, 0.0, 0.0, 0.0]
#: The scripted curves below are one group a step and short: they judge a collapse over 3
#: groups (3 steps), not the run's default `collapse_groups`.
SHORT = 3


def feed(window: HealthWindow, curve, flat_after: int, start: int = 1):
    """Steps with these mean rewards; groups equal (flat) from step `flat_after` on."""
    seen = []
    for step, reward in enumerate(curve, start=start):
        if step < flat_after:
            window.sampled([0.0, reward * 2])
        else:
            window.sampled([reward] * 4)
        seen.append(window.stepped(step, reward, 0.0 if step < flat_after else 1.0))
    return seen


def test_the_issues_curve_is_a_collapse_named_by_its_step_and_best_checkpoint():
    window = HealthWindow(8, collapse_groups=SHORT)
    window.checkpointed(10, "step-000010")
    told = feed(window, CLIMB + FALL, flat_after=12)
    # Seen once the last three steps are down (step 14), named by the fall's first step.
    first = next(i for i, c in enumerate(told, start=1) if c is not None)
    assert first == 14 and sum(c is not None for c in told) == 1
    assert window.collapse is not None
    assert window.collapse.words() == (
        "collapsed at step 12 (best 0.540 at step 11); best checkpoint step-000010"
    )
    assert window.verdict() == ("collapsed", window.collapse.words())
    assert window.rollback_point() == (10, "step-000010")
    window.checkpointed(15, "step-000015")  # after the best: not a rollback point
    assert window.rollback_point() == (10, "step-000010")


def test_a_collapse_ends_when_the_reward_comes_back():
    window = HealthWindow(8, collapse_groups=SHORT)
    feed(window, CLIMB + FALL, flat_after=12)
    assert window.collapse is not None
    feed(window, [0.5, 0.5, 0.5], flat_after=10_000, start=len(CLIMB + FALL) + 1)
    assert window.collapse is None
    assert window.verdict()[0] == "learning"


def test_converged_and_no_signal_yet_are_not_collapses():
    converged = HealthWindow(4, collapse_groups=SHORT)
    feed(converged, [0.5, 0.8, 1.0, 1.0, 1.0, 1.0], flat_after=3)
    assert converged.collapse is None and converged.verdict()[0] == "converged"
    always_zero = HealthWindow(4, collapse_groups=SHORT)
    feed(always_zero, [0.0] * 8, flat_after=1)
    assert always_zero.collapse is None
    assert always_zero.verdict() == (
        "no_signal",
        "no learning signal yet: every reward so far is 0 (check the reward if this lasts)",
    )


def test_a_dip_with_gradient_is_not_a_collapse():
    """Rewards low for a few steps while groups still differ: the run is still learning."""
    window = HealthWindow(8, collapse_groups=SHORT)
    feed(window, CLIMB + [0.1, 0.1, 0.1], flat_after=10_000)
    assert window.collapse is None


def test_equal_rewards_below_the_best_pause_for_no_signal_and_failures_for_errors():
    window = HealthWindow(4, no_signal_rate=0.75, error_rate=0.5)
    window.sampled([0.0, 2.0])
    for _ in range(2):
        window.sampled([0.5, 0.5])
    assert window.group_alarm() is None  # the window is not full yet
    window.sampled([0.5, 0.5])
    assert window.group_alarm() == (
        "no_signal",
        "no learning signal: 75% of the last 4 groups had equal rewards below the best seen (1)",
    )
    window.clear_groups()
    for _ in range(4):
        window.failed()
    assert window.group_alarm() == (
        "error",
        "rollout errors: 100% of the last 4 rollouts (4 groups) failed",
    )


def test_a_rewind_forgets_later_steps_and_checkpoints_but_not_the_best():
    window = HealthWindow(8, collapse_groups=SHORT)
    window.checkpointed(10, "step-000010")
    feed(window, CLIMB + FALL, flat_after=12)
    window.checkpointed(15, "step-000015")
    window.rewind(10)
    assert window.collapse is None and window.best_step == (11, 0.54)
    assert window.rollback_point() == (10, "step-000010")
    # The same fall again after the rollback is told again.
    told = feed(window, [0.3, 0.0, 0.0, 0.0], flat_after=12, start=11)
    assert [c is not None for c in told] == [False, False, False, True]


def test_one_equal_rewards_rule_and_the_steps_flat_share():
    assert rewards_equal([0.5, 0.5 + 1e-12]) and not rewards_equal([0.5, 0.5001])
    metrics = {keys.discarded("zero_variance"): 3.0, keys.discarded("error"): 1.0}
    assert flat_share(metrics, 4) == 4 / 5
    assert flat_share({keys.TRAIN_SKIPPED: 1.0}, 4) == 1.0


def test_a_noisy_low_reward_is_not_a_collapse():
    """next_number on the embedded model: step rewards swing between 0.1 and 0.45, many
    groups all wrong; a lucky step must not set a mark that the next dips "collapse" from."""
    curve = [
        0.312,
        0.250,
        0.281,
        0.219,
        0.312,
        0.375,
        0.094,
        0.250,
        0.281,
        0.125,
        0.250,
        0.438,
        0.156,
        0.375,
        0.188,
        0.219,
        0.156,
        0.281,
        0.250,
        0.250,
    ]
    window = HealthWindow(8, collapse_groups=SHORT)
    for step, reward in enumerate(curve, start=1):
        window.sampled([0.0, 1.0])
        assert window.stepped(step, reward, 0.75) is None, step


#: The fresh tool task at 4 groups a step: it climbs to 0.9, then holds near 0.6, with
#: runs of three unlucky steps (12 groups of hard prompts, most of them all wrong).
NOISY_CLIMB = [0.25, 0.25, 0.375, 0.5, 0.5, 0.625, 0.75, 0.75, 0.875, 0.875, 0.75, 0.875]
NOISY_HOLD = [0.625, 0.5, 0.75, 0.625, 0.5, 0.0625, 0.0, 0.125, 0.625, 0.75, 0.5, 0.625]
DIP = (0.0625, 0.0, 0.125)


def feed_steps(window: HealthWindow, curve, groups: int, start: int = 1):
    """Steps of `groups` groups with these mean rewards: the low ones (< 0.2) mostly equal
    groups (3 in 4), the others one in 4; what `stepped` told at each."""
    return [
        window.stepped(step, reward, 0.75 if reward < 0.2 else 0.25, groups=groups, lowest=0.0)
        for step, reward in enumerate(curve, start=start)
    ]


def test_a_noisy_tasks_unlucky_steps_are_not_a_collapse():
    """Three unlucky steps of 4 groups are 12 groups: over the run's `collapse_groups` (32 by
    default, 8 such steps) they are a dip in a task that holds, not a fall."""
    curve = NOISY_CLIMB + NOISY_HOLD * 6
    window = HealthWindow.from_settings({})
    assert window.collapse_groups == 32
    assert all(told is None for told in feed_steps(window, curve, groups=4))
    assert window.collapse is None
    # Judged over 12 groups (3 such steps, the rule before `collapse_groups`), the first
    # dip reads as a fall: the scripted curve is one that fooled it.
    few = HealthWindow(collapse_groups=12)
    told = [c for c in feed_steps(few, curve, groups=4) if c is not None]
    assert told and told[0].words() == "collapsed at step 18 (best 0.875 at step 9)"


def test_a_real_fall_over_collapse_groups_groups_is_a_collapse_named_at_its_first_step():
    """The issue's fall at 4 groups a step: told once the steps after the best hold 32
    groups (8 steps: steps 12..19), named by the fall's first step and the best step."""
    window = HealthWindow.from_settings({"collapse_groups": 32})
    window.checkpointed(10, "step-000010")
    curve = CLIMB + [0.081] + [0.0] * 10
    told = [
        window.stepped(step, reward, 0.0 if step < 12 else 1.0, groups=4, lowest=0.0)
        for step, reward in enumerate(curve, start=1)
    ]
    assert [i for i, c in enumerate(told, start=1) if c is not None] == [19]
    assert window.collapse is not None
    assert window.collapse.words() == (
        "collapsed at step 12 (best 0.540 at step 11); best checkpoint step-000010"
    )
    # At 16 groups a step 32 groups are 2 steps: the stretch is still at least 3 steps.
    wide = HealthWindow.from_settings({"collapse_groups": 32})
    told = [
        wide.stepped(step, reward, 0.0 if step < 12 else 1.0, groups=16, lowest=0.0)
        for step, reward in enumerate(curve, start=1)
    ]
    assert [i for i, c in enumerate(told, start=1) if c is not None] == [14]


def test_the_no_signal_pause_waits_while_the_collapse_check_judges_a_fall():
    """Groups are counted as sampled, ahead of the steps: a fall to equal rewards at 0 fills
    the no-signal window before the steps after the best hold `collapse_groups` groups. The
    pause waits for the collapse check, which then names the fall."""
    window = HealthWindow(16, collapse_groups=32)
    told = []
    for step, reward in enumerate(CLIMB + [0.0] * 8, start=1):
        for _ in range(4):
            window.sampled([reward] * 4 if step > 11 else [0.0, 2 * reward])
        told.append(window.stepped(step, reward, 1.0 if step > 11 else 0.0, groups=4))
        if 12 <= step < 19:  # the window is all equal groups below the best from step 15
            assert window.judging_a_fall() and window.group_alarm() is None, step
    assert [i for i, c in enumerate(told, start=1) if c is not None] == [19]
    assert window.collapse is not None and window.collapse.step == 12
    # A drop that stays above the collapse level does not hold the pause back: 0.15 is
    # above a third of the way from 0 to the best 8-step mean before it (0.40).
    calm = HealthWindow(16, collapse_groups=32)
    for step, reward in enumerate(CLIMB + [0.15] * 8, start=1):
        for _ in range(4):
            calm.sampled([reward] * 4 if step > 11 else [0.0, 2 * reward])
        calm.stepped(step, reward, 1.0 if step > 11 else 0.0, groups=4)
    assert not calm.judging_a_fall() and calm.collapse is None
    assert calm.group_alarm() is not None and calm.group_alarm()[0] == "no_signal"


def test_steps_are_weighted_by_their_groups_and_the_setting_can_change():
    """A step of many groups outweighs one of few; a run's config read later (a resumed
    run's, a stored one's) sets `collapse_groups` on steps already counted."""
    window = HealthWindow(collapse_groups=SHORT)
    # Step 4 is one lucky group at 0.9 between steps of 8 groups all at 0: steps 4..6 mean
    # 0.9 / 17 (weighted), not 0.3, the level a third of the way up to the 0.9 before.
    for step, (reward, groups) in enumerate(
        [(0.9, 8), (0.9, 8), (0.9, 8), (0.9, 1), (0.0, 8), (0.0, 8)], start=1
    ):
        window.stepped(step, reward, 1.0 if reward == 0.0 else 0.0, groups=groups, lowest=0.0)
    assert window.collapse is not None
    assert window.collapse.words() == "collapsed at step 5 (best 0.900 at step 1)"
    window.configure({"collapse_groups": 1000})
    assert window.collapse_groups == 1000
    window.stepped(7, 0.0, 1.0, groups=8)
    assert window.collapse is None  # 1000 groups not seen yet


def test_the_control_endpoint_takes_a_rollback_with_its_scale():
    import pytest

    from tinker_tui.engine.control.endpoint import apply_command

    class Control:
        calls: list = []

        def request_rollback(self, reason="rolled back by user", lr_scale=None):
            self.calls.append((reason, lr_scale))

    control = Control()
    apply_command(control, "rollback", {"lr_scale": 0.25})  # type: ignore[arg-type]
    apply_command(control, "rollback", {"reason": "by hand"})  # type: ignore[arg-type]
    assert control.calls == [("rolled back by user", 0.25), ("by hand", None)]
    with pytest.raises(ValueError, match="lr_scale must be a number"):
        apply_command(control, "rollback", {"lr_scale": "half"})  # type: ignore[arg-type]


def test_a_rollback_goes_to_the_weights_that_sampled_the_best_step_not_its_update():
    """The checkpoint written at the best step holds that step's own update (perhaps the
    one that broke the run); the weights that sampled its groups are an earlier version."""
    window = HealthWindow(8, collapse_groups=SHORT)
    # On policy: step n is sampled by version n - 1 and produces version n.
    for step, reward in enumerate([0.2, 0.3, 0.4, 0.5, 0.9, 0.0], start=1):
        window.stepped(step, reward, 0.0, sampled_by=step - 1)
        window.checkpointed(step, f"step-{step:06d}", version=step)
    assert window.best_step == (5, 0.9)
    assert window.best_sampled_by == 4
    assert window.rollback_point() == (4, "step-000004")


def test_a_best_step_sampled_off_policy_goes_back_to_the_version_that_sampled_it():
    window = HealthWindow(8, collapse_groups=SHORT)
    for step, reward in enumerate([0.2, 0.3, 0.4, 0.5], start=1):
        window.stepped(step, reward, 0.0, sampled_by=step - 1)
        window.checkpointed(step, f"step-{step:06d}", version=step)
    window.stepped(5, 0.9, 0.0, sampled_by=2)  # its newest group: 2 versions behind
    assert window.rollback_point() == (2, "step-000002")


def test_a_best_step_without_gradient_is_its_own_rollback_point():
    """A step whose groups all had equal rewards made no new version: its checkpoint holds
    the very weights that sampled it."""
    window = HealthWindow(8, collapse_groups=SHORT)
    window.stepped(1, 0.5, 0.0, sampled_by=0)
    window.checkpointed(1, "step-000001", version=1)
    window.stepped(2, 1.0, 1.0, sampled_by=1)
    window.checkpointed(2, "step-000002", version=1)
    assert window.rollback_point() == (2, "step-000002")


def test_with_no_checkpoint_of_the_sampling_weights_there_is_nothing_to_roll_back_to():
    window = HealthWindow(8, collapse_groups=SHORT)
    window.stepped(1, 0.9, 0.0, sampled_by=0)
    window.checkpointed(1, "step-000001", version=1)
    assert window.rollback_point() is None
    # Versions unknown (recorded before they were): checkpoints before the best step count.
    old = HealthWindow(8, collapse_groups=SHORT)
    old.stepped(1, 0.5, 0.0)
    old.checkpointed(1, "step-000001")
    old.stepped(2, 0.9, 0.0)
    old.checkpointed(2, "step-000002")
    assert old.rollback_point() == (1, "step-000001")


def test_no_finished_group_is_said_without_contradicting_groups_in_flight():
    """ "no groups sampled yet" stood beside a staleness histogram of 38 groups in flight."""
    window = HealthWindow()
    assert window.verdict() == ("none", "no group has finished sampling yet")
    window.rewind(12)
    assert window.verdict() == (
        "none",
        "no group has finished sampling since the rollback to step 12",
    )
