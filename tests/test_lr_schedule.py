"""The learning-rate schedule's shapes (engine.training.lr_schedule): a pure function of the
step, so a resumed or rolled-back run continues the curve at its step."""

import math

import pytest

from tinker_tui.engine.config import ConfigError, RunConfig
from tinker_tui.engine.training.lr_schedule import lr_factor


def test_constant_is_one_at_every_step():
    assert [lr_factor("constant", s, 10) for s in range(10)] == [1.0] * 10


def test_linear_decays_from_one_towards_zero_at_max_steps():
    factors = [lr_factor("linear", s, 4) for s in range(4)]
    assert factors == [1.0, 0.75, 0.5, 0.25]
    assert lr_factor("linear", 4, 4) == 0.0  # max_steps itself is never trained


def test_cosine_starts_at_one_halves_midway_and_ends_near_zero():
    n = 100
    factors = [lr_factor("cosine", s, n) for s in range(n)]
    assert factors[0] == 1.0
    assert factors[50] == pytest.approx(0.5)
    assert 0 < factors[-1] < 1e-3
    assert all(a > b for a, b in zip(factors, factors[1:], strict=False))  # strictly falls
    # above the straight line in the first half, below it in the second
    assert factors[25] > 1 - 25 / n and factors[75] < 1 - 75 / n
    assert factors[25] == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
def test_warm_up_rises_linearly_then_the_schedule_starts_at_full_rate(schedule):
    factors = [lr_factor(schedule, s, 10, warmup_steps=4) for s in range(10)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert factors[4] == 1.0  # the decay starts at the top
    if schedule == "linear":  # then falls over the 6 steps left
        assert factors[4:] == pytest.approx([1, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])
    elif schedule == "cosine":
        assert factors[7] == pytest.approx(0.5)
    else:
        assert factors[4:] == [1.0] * 6


def test_a_resumed_run_gets_the_same_factor_at_its_step():
    whole = [lr_factor("cosine", s, 20, 5) for s in range(20)]
    resumed = [lr_factor("cosine", s, 20, 5) for s in range(8, 20)]
    assert resumed == whole[8:]


def test_bad_schedule_settings_are_refused_with_one_line():
    with pytest.raises(ConfigError, match=r"^lr_schedule must be constant, linear or cosine"):
        RunConfig(lr_schedule="exponential")
    with pytest.raises(ConfigError, match=r"^lr_warmup_steps must be less than max_steps \(10\)"):
        RunConfig(max_steps=10, lr_warmup_steps=10)
    with pytest.raises(ConfigError, match=r"^num_substeps must be between 1 and 64, got 0"):
        RunConfig(num_substeps=0)
    with pytest.raises(ConfigError, match=r"^truncation_policy must be keep or cap"):
        RunConfig(truncation_policy="drop")
    assert RunConfig(max_steps=10, lr_warmup_steps=9).lr_warmup_steps == 9
