"""The dashboard's model and its pure maths, without Textual."""

from __future__ import annotations

import math

import pytest
from fake_session import FakeSession, reward_at, scripted_events

from app.run_model import (
    RunModel,
    debiased_ema,
    format_elapsed,
    rate_history,
    windowed_rate,
)
from engine.clock import FakeClock
from engine.events import (
    CheckpointSaved,
    GroupDiscarded,
    GroupSampled,
    LogEmitted,
    RunFinished,
    RunStarted,
    RunStateChanged,
    StepTrained,
)

# ------------------------------------------------------------------ windowed_rate


def test_windowed_rate_counts_points_inside_the_window():
    points = [(1.0, 10.0), (5.0, 10.0), (9.0, 10.0), (10.0, 10.0)]
    # window (0, 10] holds all four
    assert windowed_rate(points, now=10.0, window=10.0) == pytest.approx(4.0)
    # window (5, 10] excludes t=5 (half-open on the left)
    assert windowed_rate(points, now=10.0, window=5.0) == pytest.approx(20.0 / 5.0)


def test_windowed_rate_ignores_future_points():
    points = [(1.0, 3.0), (11.0, 100.0)]
    assert windowed_rate(points, now=10.0, window=10.0) == pytest.approx(0.3)


def test_windowed_rate_uses_elapsed_time_early_in_a_run():
    points = [(1.0, 8.0), (2.0, 8.0)]
    # only 2 s since the start: 16 per 2 s, not 16 per 10 s
    assert windowed_rate(points, now=2.0, window=10.0, since=0.0) == pytest.approx(8.0)
    assert windowed_rate(points, now=2.0, window=10.0) == pytest.approx(1.6)


def test_windowed_rate_is_zero_without_elapsed_time_or_points():
    assert windowed_rate([], now=5.0, window=10.0) == 0.0
    assert windowed_rate([(0.0, 5.0)], now=0.0, window=10.0, since=0.0) == 0.0


def test_windowed_rate_rejects_a_bad_window():
    with pytest.raises(ValueError):
        windowed_rate([], now=1.0, window=0.0)


# ------------------------------------------------------------------ rate_history


def test_rate_history_samples_the_windowed_rate_oldest_first():
    points = [(float(t), 1.0) for t in range(1, 11)]  # one per second
    history = rate_history(points, now=10.0, window=2.0, step=1.0, count=3)
    assert history == [pytest.approx(windowed_rate(points, now, 2.0)) for now in (8.0, 9.0, 10.0)]
    assert history == pytest.approx([1.0, 1.0, 1.0])


def test_rate_history_starts_at_the_run_start():
    points = [(0.5, 4.0), (1.5, 4.0)]
    history = rate_history(points, now=2.0, window=10.0, step=0.5, count=10, since=0.0)
    # samples at 0.5, 1.0, 1.5, 2.0 only (nothing at or before the start)
    assert history == pytest.approx([8.0, 4.0, 8.0 / 1.5, 4.0])


def test_rate_history_shows_a_pause_as_a_falling_rate():
    points = [(float(t), 1.0) for t in range(1, 6)]  # stopped sampling after t=5
    history = rate_history(points, now=12.0, window=2.0, step=1.0, count=8)
    assert history[0] > 0
    assert history[-1] == 0.0


# ------------------------------------------------------------------ EMA and formatting


def test_debiased_ema_starts_at_the_first_value_and_tracks_a_constant():
    assert debiased_ema([]) == []
    assert debiased_ema([0.5]) == [pytest.approx(0.5)]
    assert debiased_ema([2.0] * 5, beta=0.9) == pytest.approx([2.0] * 5)


def test_debiased_ema_matches_the_definition():
    values = [1.0, 0.0, 1.0]
    beta = 0.5
    acc, expected = 0.0, []
    for i, v in enumerate(values, start=1):
        acc = beta * acc + (1 - beta) * v
        expected.append(acc / (1 - beta**i))
    assert debiased_ema(values, beta) == pytest.approx(expected)
    # with beta 0 it is the raw series
    assert debiased_ema(values, 0.0) == pytest.approx(values)


def test_debiased_ema_rejects_a_bad_beta():
    with pytest.raises(ValueError):
        debiased_ema([1.0], beta=1.0)


def test_format_elapsed():
    assert format_elapsed(0) == "00:00"
    assert format_elapsed(65.9) == "01:05"
    assert format_elapsed(3600 + 61) == "1:01:01"
    assert format_elapsed(-3) == "00:00"


# ------------------------------------------------------------------ the model


def started(clock: FakeClock, model: RunModel) -> None:
    model.apply(
        RunStarted(
            time=clock.now(),
            run_id="r",
            name="demo",
            backend="local",
            base_model="tiny",
            max_steps=10,
            start_step=0,
        )
    )


def test_model_starts_empty():
    model = RunModel(FakeClock())
    assert model.state == "starting"
    assert model.rollouts_per_s() == 0.0
    assert model.rollout_rate_history() == []
    assert model.discard_rate == 0.0
    assert model.last_reward is None
    assert model.checkpoints == [] and len(model.log) == 0


def test_model_run_info_and_state():
    clock = FakeClock(100.0)
    model = RunModel(clock)
    started(clock, model)
    assert (model.name, model.backend, model.base_model, model.max_steps) == (
        "demo",
        "local",
        "tiny",
        10,
    )
    assert model.state == "running"
    model.apply(RunStateChanged(time=101.0, state="paused", reason="eval"))
    assert (model.state, model.reason) == ("paused", "eval")
    model.apply(RunStateChanged(time=102.0, state="running"))
    assert (model.state, model.reason) == ("running", "")
    clock.advance(5.0)
    assert model.elapsed() == pytest.approx(5.0)
    model.apply(RunFinished(time=103.0, status="stopped", final_step=7, reason="user"))
    assert (model.state, model.status, model.step, model.reason) == (
        "finished",
        "stopped",
        7,
        "user",
    )
    clock.advance(100.0)
    assert model.elapsed() == pytest.approx(3.0)  # frozen at the finish


def test_model_steps_rewards_and_ema():
    clock = FakeClock()
    model = RunModel(clock, ema_beta=0.5)
    for step, reward in enumerate([0.1, 0.3, 0.5], start=1):
        model.apply(
            StepTrained(
                time=float(step), step=step, policy_version=step, metrics={"reward/mean": reward}
            )
        )
    # a step without the reward metric moves the step but adds no point
    model.apply(StepTrained(time=4.0, step=4, policy_version=4, metrics={"loss": 1.0}))
    assert (model.step, model.policy_version) == (4, 4)
    assert model.rewards == [(1, 0.1), (2, 0.3), (3, 0.5)]
    assert model.reward_ema == pytest.approx(debiased_ema([0.1, 0.3, 0.5], 0.5))
    assert model.last_reward == 0.5


def test_model_throughput_uses_event_times_and_the_clock():
    clock = FakeClock()
    model = RunModel(clock, rate_window=10.0)
    started(clock, model)
    for i in range(1, 5):
        clock.advance(1.0)
        model.apply(
            GroupSampled(
                time=clock.now(),
                group_id=i,
                scenario_id="s",
                policy_version=0,
                num_trajectories=8,
                num_tokens=100,
                reward_mean=0.0,
            )
        )
    # 32 rollouts and 400 tokens in 4 s
    assert model.rollouts_per_s() == pytest.approx(8.0)
    assert model.tokens_per_s() == pytest.approx(100.0)
    assert model.rollouts_sampled == 32 and model.groups_sampled == 4
    # paused: nothing new for 20 s, the rate falls to zero
    clock.advance(20.0)
    assert model.rollouts_per_s() == 0.0
    history = model.rollout_rate_history()
    # one sample per rate_step since the start (24 s / 0.5 s), capped at rate_history_len
    assert len(history) == min(model.rate_history_len, int(24.0 / model.rate_step))
    assert history[-1] == 0.0


def test_model_discards_by_reason_and_rate():
    clock = FakeClock()
    model = RunModel(clock)
    for i in range(4):
        model.apply(
            GroupSampled(
                time=0.0,
                group_id=i,
                scenario_id="s",
                policy_version=0,
                num_trajectories=8,
                num_tokens=10,
                reward_mean=0.0,
            )
        )
    for reason in ("stale", "stale", "error"):
        model.apply(
            GroupDiscarded(
                time=0.0,
                group_id=9,
                scenario_id="s",
                reason=reason,
                policy_version=0,
                trainer_version=3,
                num_tokens=10,
            )
        )
    assert model.discarded == {"stale": 2, "zero_variance": 0, "error": 1}
    assert model.discarded_total == 3
    assert model.discarded_tokens == 30
    assert model.discard_rate == pytest.approx(3 / 4)


def test_model_checkpoints_and_bounded_log():
    clock = FakeClock(50.0)
    model = RunModel(clock, log_lines=3)
    started(clock, model)
    model.apply(CheckpointSaved(time=65.0, step=5, kind="state", name="step-5", path="/x/step-5"))
    assert [(c.step, c.kind, c.name, c.path) for c in model.checkpoints] == [
        (5, "state", "step-5", "/x/step-5")
    ]
    assert model.since_start(model.checkpoints[0].time) == "00:15"
    for i in range(5):
        model.apply(LogEmitted(time=50.0 + i, level="INFO", message=f"line {i}"))
    assert [line.message for line in model.log] == ["line 2", "line 3", "line 4"]
    assert model.log_total == 5


def test_model_revision_counts_applied_events():
    model = RunModel(FakeClock())
    model.apply(LogEmitted(time=0.0, level="INFO", message="x"))
    assert model.revision == 1


def test_model_folds_the_fake_session_script():
    session = FakeSession()
    model = RunModel(session.clock)
    for event in scripted_events(session.clock):
        model.apply(event)
    assert model.name == "yes-no-maybe"
    assert model.step == 20 and model.policy_version == 20
    assert len(model.rewards) == 20
    assert model.last_reward == pytest.approx(reward_at(20))
    assert model.rewards[-1][1] > model.rewards[0][1]  # rewards rise
    assert set(model.discarded) == {"stale", "zero_variance", "error"}
    assert all(count > 0 for count in model.discarded.values())
    assert [c.step for c in model.checkpoints] == [10, 20]
    assert model.rollouts_per_s() > 0 and math.isfinite(model.tokens_per_s())
