"""The health window (engine.metrics.health): one rule for the engine's pauses and the dashboard's
words. Collapse from scripted reward curves, told apart from converged and no signal yet."""

from __future__ import annotations

from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.metrics.health import HealthWindow, flat_share, rewards_equal

#: The issue's tool task: it climbs from 0.20 to 0.54 by step 11, then falls to 0.081 and
#: to 0.000 from step 13 on, every group equal (all 0).
CLIMB = [0.20, 0.22, 0.25, 0.28, 0.31, 0.35, 0.38, 0.42, 0.45, 0.50, 0.54]
FALL = [0.081, 0.0, 0.0, 0.0, 0.0]


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
    window = HealthWindow(8)
    window.checkpointed(10, "step-000010")
    told = feed(window, CLIMB + FALL, flat_after=12)
    # Seen once the last three steps are down (step 14), named by the fall's first step.
    first = next(i for i, c in enumerate(told, start=1) if c is not None)
    assert first == 14 and sum(c is not None for c in told) == 1
    assert window.collapse is not None
    assert window.collapse.words() == ("collapsed at step 12 (best 0.54 at step 11); best "
                                       "checkpoint step-000010")
    assert window.verdict() == ("collapsed", window.collapse.words())
    assert window.rollback_point() == (10, "step-000010")
    window.checkpointed(15, "step-000015")  # after the best: not a rollback point
    assert window.rollback_point() == (10, "step-000010")


def test_a_collapse_ends_when_the_reward_comes_back():
    window = HealthWindow(8)
    feed(window, CLIMB + FALL, flat_after=12)
    assert window.collapse is not None
    feed(window, [0.5, 0.5, 0.5], flat_after=10_000, start=len(CLIMB + FALL) + 1)
    assert window.collapse is None
    assert window.verdict()[0] == "learning"


def test_converged_and_no_signal_yet_are_not_collapses():
    converged = HealthWindow(4)
    feed(converged, [0.5, 0.8, 1.0, 1.0, 1.0, 1.0], flat_after=3)
    assert converged.collapse is None and converged.verdict()[0] == "converged"
    always_zero = HealthWindow(4)
    feed(always_zero, [0.0] * 8, flat_after=1)
    assert always_zero.collapse is None
    assert always_zero.verdict() == ("no_signal", "no learning signal yet: every reward so "
                                                  "far is 0 (check the reward if this lasts)")


def test_a_dip_with_gradient_is_not_a_collapse():
    """Rewards low for a few steps while groups still differ: the run is still learning."""
    window = HealthWindow(8)
    feed(window, CLIMB + [0.1, 0.1, 0.1], flat_after=10_000)
    assert window.collapse is None


def test_equal_rewards_below_the_best_pause_for_no_signal_and_failures_for_errors():
    window = HealthWindow(4, no_signal_rate=0.75, error_rate=0.5)
    window.sampled([0.0, 2.0])
    for _ in range(2):
        window.sampled([0.5, 0.5])
    assert window.group_alarm() is None  # the window is not full yet
    window.sampled([0.5, 0.5])
    assert window.group_alarm() == ("no_signal", "no learning signal: 75% of the last 4 "
                                                 "groups had equal rewards below the best "
                                                 "seen (1)")
    window.clear_groups()
    for _ in range(4):
        window.failed()
    assert window.group_alarm() == ("error", "rollout errors: 100% of the last 4 rollouts "
                                                 "(4 groups) failed")


def test_a_rewind_forgets_later_steps_and_checkpoints_but_not_the_best():
    window = HealthWindow(8)
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
    curve = [0.312, 0.250, 0.281, 0.219, 0.312, 0.375, 0.094, 0.250, 0.281, 0.125, 0.250,
             0.438, 0.156, 0.375, 0.188, 0.219, 0.156, 0.281, 0.250, 0.250]
    window = HealthWindow(8)
    for step, reward in enumerate(curve, start=1):
        window.sampled([0.0, 1.0])
        assert window.stepped(step, reward, 0.75) is None, step


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
