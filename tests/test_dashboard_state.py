"""The dashboard's state and its pure maths, without Textual."""

from __future__ import annotations

import math

import pytest
from fake_session import FakeSession, reward_at, scripted_events

from tinker_tui.app.dashboard_rows import GroupRecord
from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.rollout_filter import RolloutFilter
from tinker_tui.app.view_maths import (
    SMOOTHING_STEPS,
    bar,
    debiased_ema,
    eta_seconds,
    format_elapsed,
    format_rate,
    idle_percent,
    level_at_least,
    next_log_level,
    next_smoothing,
    parse_knob_value,
    rate_history,
    split_rate,
    staleness_rows,
    windowed_rate,
)
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.events import (
    CheckpointDeleted,
    CheckpointSaved,
    CommandReceived,
    EvalCompleted,
    GroupDiscarded,
    GroupSampled,
    LogEmitted,
    RunFinished,
    RunStarted,
    RunStateChanged,
    SessionStarted,
    StartupProgressed,
    StepTrained,
    ThroughputMeasured,
    TrajectorySummary,
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


# ------------------------------------------------------------------ the state


def started(clock: FakeClock, state: DashboardState) -> None:
    state.apply(
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
    state = DashboardState(FakeClock())
    assert state.state == "starting"
    assert state.rollouts_per_s() == 0.0
    assert state.rollout_rate_history() == []
    assert state.discard_rate == 0.0
    assert state.last_reward is None
    assert state.checkpoints.rows == [] and len(state.log) == 0


def test_model_run_info_and_state():
    clock = FakeClock(100.0)
    state = DashboardState(clock)
    started(clock, state)
    assert (state.name, state.backend, state.base_model, state.max_steps) == (
        "demo",
        "local",
        "tiny",
        10,
    )
    assert state.state == "running"
    state.apply(RunStateChanged(time=101.0, state="paused", reason="eval"))
    assert (state.state, state.reason) == ("paused", "eval")
    state.apply(RunStateChanged(time=102.0, state="running"))
    assert (state.state, state.reason) == ("running", "")
    clock.advance(5.0)
    assert state.elapsed() == pytest.approx(5.0)
    state.apply(RunFinished(time=103.0, status="stopped", final_step=7, reason="user"))
    assert (state.state, state.status, state.step, state.reason) == (
        "finished",
        "stopped",
        7,
        "user",
    )
    clock.advance(100.0)
    assert state.elapsed() == pytest.approx(3.0)  # frozen at the finish


def test_model_steps_rewards_and_ema():
    clock = FakeClock()
    state = DashboardState(clock, ema_beta=0.5)
    for step, reward in enumerate([0.1, 0.3, 0.5], start=1):
        state.apply(
            StepTrained(
                time=float(step), step=step, policy_version=step, metrics={"reward/mean": reward}
            )
        )
    # a step without the reward metric moves the step but adds no point
    state.apply(StepTrained(time=4.0, step=4, policy_version=4, metrics={"loss": 1.0}))
    assert (state.step, state.policy_version) == (4, 4)
    assert state.rewards == [(1, 0.1), (2, 0.3), (3, 0.5)]
    assert state.reward_ema == pytest.approx(debiased_ema([0.1, 0.3, 0.5], 0.5))
    assert state.last_reward == 0.5


def test_model_throughput_uses_event_times_and_the_clock():
    clock = FakeClock()
    state = DashboardState(clock, rate_window=10.0)
    started(clock, state)
    for i in range(1, 5):
        clock.advance(1.0)
        state.apply(
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
    assert state.rollouts_per_s() == pytest.approx(8.0)
    assert state.tokens_per_s() == pytest.approx(100.0)
    assert state.rollouts_sampled == 32 and state.groups_sampled == 4
    # paused: nothing new for 20 s, the rate falls to zero
    clock.advance(20.0)
    assert state.rollouts_per_s() == 0.0
    history = state.rollout_rate_history()
    # one sample per rate_step since the start (24 s / 0.5 s), capped at rate_history_len
    assert len(history) == min(state.rate_history_len, int(24.0 / state.rate_step))
    assert history[-1] == 0.0


def test_model_discards_by_reason_and_rate():
    clock = FakeClock()
    state = DashboardState(clock)
    for i in range(4):
        state.apply(
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
        state.apply(
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
    assert state.discarded == {"stale": 2, "zero_variance": 0, "error": 1}
    assert state.discarded_total == 3
    assert state.discarded_tokens == 30
    assert state.discard_rate == pytest.approx(3 / 4)


def test_model_checkpoints_and_bounded_log():
    clock = FakeClock(50.0)
    state = DashboardState(clock, log_lines=3)
    started(clock, state)
    state.apply(CheckpointSaved(time=65.0, step=5, kind="state", name="step-5", path="/x/step-5"))
    assert [(c.step, c.kind, c.name, c.path) for c in state.checkpoints] == [
        (5, "state", "step-5", "/x/step-5")
    ]
    assert state.since_start(state.checkpoints.rows[0].time) == "00:15"
    state.apply(CheckpointSaved(time=75.0, step=7, kind="state", name="step-7", path="/x/step-7"))
    # retention deleted the older one: its row goes, counted; an unknown path changes nothing
    state.apply(CheckpointDeleted(time=75.1, step=5, kind="state", name="step-5", path="/x/step-5"))
    state.apply(
        CheckpointDeleted(time=75.2, step=1, kind="sampler", name="step-1", path="/x/never-shown")
    )
    assert [c.step for c in state.checkpoints] == [7] and state.checkpoints.deleted == 1
    for i, word in enumerate(("zero", "one", "two", "three", "four")):
        state.apply(LogEmitted(time=50.0 + i, level="INFO", message=f"line {word}"))
    assert [line.message for line in state.log] == ["line two", "line three", "line four"]
    assert state.log.total == 5


def test_model_revision_counts_applied_events():
    state = DashboardState(FakeClock())
    state.apply(LogEmitted(time=0.0, level="INFO", message="x"))
    assert state.revision == 1


def test_model_folds_the_fake_session_script():
    session = FakeSession()
    state = DashboardState(session.clock)
    for event in scripted_events(session.clock):
        state.apply(event)
    assert state.name == "yes-no-maybe"
    assert state.step == 20 and state.policy_version == 20
    assert len(state.rewards) == 20
    assert state.last_reward == pytest.approx(reward_at(20))
    assert state.rewards[-1][1] > state.rewards[0][1]  # rewards rise
    assert set(state.discarded) == {"stale", "zero_variance", "error"}
    assert all(count > 0 for count in state.discarded.values())
    assert [c.step for c in state.checkpoints] == [10, 20]
    assert state.rollouts_per_s() > 0 and math.isfinite(state.tokens_per_s())
    assert [e.step for e in state.evals] == [5, 10, 15, 20]
    assert state.knobs["learning_rate"] == 1e-3 and state.initial_knobs["learning_rate"] == 2e-3
    assert [c.step for c in state.knob_markers()] == [12]
    assert state.throughput is not None and len(state.throughput_history) == 20


# ------------------------------------------------------------------ more pure maths


def test_next_smoothing_cycles_through_every_level_and_back():
    beta, seen = SMOOTHING_STEPS[0], []
    for _ in SMOOTHING_STEPS:
        seen.append(beta)
        beta = next_smoothing(beta)
    assert seen == list(SMOOTHING_STEPS) and beta == SMOOTHING_STEPS[0]
    assert 0.0 in SMOOTHING_STEPS  # one level shows the raw series
    assert next_smoothing(0.123) == SMOOTHING_STEPS[0]


def test_eta_from_the_recent_pace():
    times = [0.0, 2.0, 4.0, 6.0]  # 2 s per step
    assert eta_seconds(times, step=3, max_steps=10) == pytest.approx(14.0)
    assert eta_seconds(times, step=10, max_steps=10) == 0.0
    assert eta_seconds([5.0], step=1, max_steps=10) is None
    assert eta_seconds(times, step=3, max_steps=0) is None
    # only the last `window` steps count: a slow start does not linger
    slow_then_fast = [0.0, 100.0] + [100.0 + i for i in range(1, 12)]
    assert eta_seconds(slow_then_fast, step=12, max_steps=22, window=10) == pytest.approx(10.0)


def test_rate_formatting_and_splitting():
    assert [format_rate(v) for v in (3.14, 456.0, 7800.0, 12_345.0, 2_500_000.0)] == [
        "3.1",
        "456",
        "7.8k",
        "12k",
        "2.5M",
    ]
    assert split_rate(2500.0) == ("2.5", "k") and split_rate(45.3) == ("45.3", "")
    assert format_rate(float("nan")) == "-"


def test_idle_percent_clamps():
    assert idle_percent(0.35) == 65 and idle_percent(1.4) == 0 and idle_percent(-1) == 100


def test_staleness_rows_join_both_histograms():
    assert staleness_rows({0: 4, 1: 2}, {1: 3, 3: 1}) == [(0, 4, 0), (1, 2, 3), (3, 0, 1)]
    assert staleness_rows({}, {}) == []


def test_bar_scales_and_never_hides_a_positive_count():
    assert bar(10, 10, 8) == "█" * 8
    assert bar(1, 1000, 8) == "█"
    assert bar(0, 10, 8) == "" and bar(5, 10, 0) == ""


def test_log_levels():
    assert level_at_least("WARNING", "warning") and level_at_least("error", "warning")
    assert not level_at_least("info", "warning")
    assert level_at_least("CRITICAL", "error") and level_at_least("warn", "warning")
    assert [next_log_level(x) for x in ("debug", "info", "warning", "error")] == [
        "info",
        "warning",
        "error",
        "debug",
    ]


def test_parse_knob_value():
    assert parse_knob_value("learning_rate", " 1e-3 ") == pytest.approx(1e-3)
    assert parse_knob_value("rollout_workers", "8") == 8
    assert isinstance(parse_knob_value("max_steps_off_policy", "2.0"), int)
    for name, text in (
        ("rollout_workers", "2.5"),
        ("temperature", "hot"),
        ("temperature", ""),
        ("temperature", "nan"),
        ("bogus", "1"),
    ):
        with pytest.raises(ValueError):
            parse_knob_value(name, text)


# ------------------------------------------------------------------ the rollouts filter


def group(reason=None, rewards=(0.0, 1.0), text="maybe", scenario="q03-7", version=2):
    trajectories = tuple(
        TrajectorySummary(
            reward=r,
            policy_version=version,
            num_tokens=5,
            messages=(
                {"role": "user", "content": "yes or no?"},
                {"role": "assistant", "content": text},
            ),
        )
        for r in rewards
    )
    return GroupRecord(
        group_id=7,
        scenario_id=scenario,
        step=3,
        policy_version=version,
        time=0.0,
        reward_mean=sum(rewards) / len(rewards),
        num_tokens=10,
        trajectories=trajectories,
        discarded=reason,
    )


def test_filter_empty_matches_everything():
    assert RolloutFilter("").matches_group(group()) and not RolloutFilter("").active


def test_filter_reward_terms_check_trajectories():
    g = group(rewards=(0.0, 0.5))
    assert RolloutFilter("reward<0.25").matches_group(g)
    assert not RolloutFilter("reward>0.75").matches_group(g)
    f = RolloutFilter("r>=0.5")
    assert [f.matches_trajectory(g, t) for t in g.trajectories] == [False, True]
    assert RolloutFilter("v=2").matches_group(g) and not RolloutFilter("version!=2").matches_group(
        g
    )


def test_filter_reasons_and_kept():
    stale, kept = group(reason="stale"), group()
    assert RolloutFilter("stale").matches_group(stale)
    assert not RolloutFilter("stale").matches_group(kept)
    assert RolloutFilter("discarded").matches_group(stale)
    assert RolloutFilter("kept").matches_group(kept) and not RolloutFilter("kept").matches_group(
        stale
    )
    assert not RolloutFilter("zero-variance").matches_group(stale)


def test_filter_words_search_the_conversation_and_scenario():
    g = group(text="Maybe tomorrow")
    assert RolloutFilter("MAYBE").matches_group(g)
    assert RolloutFilter("scenario:q03").matches_group(g)
    assert not RolloutFilter("scenario:q04").matches_group(g)
    assert RolloutFilter("maybe tomorrow").matches_group(g)
    assert not RolloutFilter("maybe never").matches_group(g)


def test_filter_on_a_failed_group_without_rollouts():
    failed = GroupRecord(
        group_id=9,
        scenario_id="q01-9",
        step=2,
        policy_version=1,
        time=0.0,
        discarded="error",
        detail="RuntimeError: sampler crashed",
    )
    assert RolloutFilter("error").matches_group(failed)
    assert RolloutFilter("crashed").matches_group(failed)
    assert not RolloutFilter("reward>0").matches_group(failed)


# ------------------------------------------------------------------ the state, new events


def test_model_uses_the_engines_throughput_measurements():
    clock = FakeClock()
    state = DashboardState(clock)
    started(clock, state)
    measured = ThroughputMeasured(
        time=1.0,
        window=10.0,
        rollouts_per_s=42.0,
        sampled_tokens_per_s=900.0,
        trained_tokens_per_s=800.0,
        queue_depth=2,
        in_flight=3,
        trainer_busy=0.4,
        sampler_busy=0.9,
        verdict="sampler-bound",
        staleness_in_flight={0: 3},
        staleness_queued={1: 2},
    )
    state.apply(measured)
    state.apply(
        ThroughputMeasured(
            **{
                **{
                    f: getattr(measured, f)
                    for f in (
                        "window",
                        "sampled_tokens_per_s",
                        "trained_tokens_per_s",
                        "queue_depth",
                        "in_flight",
                        "trainer_busy",
                        "sampler_busy",
                        "verdict",
                    )
                },
                "time": 2.0,
                "rollouts_per_s": 50.0,
            }
        )
    )
    assert state.rollouts_per_s() == 50.0 and state.tokens_per_s() == 900.0
    assert state.rollout_rate_history() == [42.0, 50.0]
    assert state.token_rate_history() == [900.0, 900.0]


def test_model_smoothing_recomputes_the_ema():
    state = DashboardState(FakeClock(), ema_beta=0.9)
    for step, reward in enumerate([0.0, 1.0, 1.0], start=1):
        state.apply(
            StepTrained(time=step, step=step, policy_version=step, metrics={"reward/mean": reward})
        )
    assert state.reward_ema == pytest.approx(debiased_ema([0.0, 1.0, 1.0], 0.9))
    while state.ema_beta != 0.0:
        state.cycle_smoothing()
    assert state.reward_ema == pytest.approx([0.0, 1.0, 1.0])


def test_model_evals_commands_and_knobs():
    clock = FakeClock()
    state = DashboardState(clock)
    state.apply(
        RunStarted(
            time=0.0,
            run_id="r",
            name="n",
            backend="local",
            base_model="m",
            max_steps=10,
            start_step=0,
            config={"learning_rate": 3e-3, "temperature": 1.0, "seed": 3},
        )
    )
    assert state.knobs == {"learning_rate": 3e-3, "temperature": 1.0}
    state.apply(StepTrained(time=1.0, step=1, policy_version=1, metrics={}))
    state.apply(
        CommandReceived(
            time=1.5, command="set", args={"name": "learning_rate", "value": 1e-3, "old": 3e-3}
        )
    )
    state.apply(CommandReceived(time=1.6, command="pause", args={"reason": "look"}))
    state.apply(
        EvalCompleted(time=2.0, step=1, policy_version=1, metrics={"eval/reward_mean": 0.7})
    )
    state.apply(
        EvalCompleted(
            time=2.5, step=1, policy_version=1, metrics={"eval/reward_mean": float("nan")}
        )
    )
    assert state.knobs["learning_rate"] == 1e-3 and state.initial_knobs["learning_rate"] == 3e-3
    assert [c.describe() for c in state.commands] == [
        "set learning_rate 0.003 → 0.001",
        "pause (look)",
    ]
    assert [(c.step, c.command) for c in state.knob_markers()] == [(1, "set")]
    assert [(e.step, e.reward) for e in state.evals] == [(1, 0.7)]


def sampled(group_id: int, time: float, rewards=(1.0,), version: int = 0) -> GroupSampled:
    trajectories = tuple(
        TrajectorySummary(reward=r, policy_version=version, num_tokens=2) for r in rewards
    )
    return GroupSampled(
        time=time,
        group_id=group_id,
        scenario_id=f"s{group_id}",
        policy_version=version,
        num_trajectories=len(rewards),
        num_tokens=2 * len(rewards),
        reward_mean=sum(rewards) / len(rewards),
        trajectories=trajectories,
    )


def test_model_files_each_group_under_the_step_that_took_it_and_keeps_a_bound():
    state = DashboardState(FakeClock(), max_groups=4)
    for gid in range(3):
        state.apply(sampled(gid, 0.0))
    assert [g.group_id for g in state.groups.waiting()] == [0, 1, 2]
    state.apply(
        GroupDiscarded(
            time=0.5,
            group_id=1,
            scenario_id="s",
            reason="stale",
            policy_version=0,
            trainer_version=2,
            num_tokens=2,
            detail="old",
            step=1,
        )
    )
    state.apply(StepTrained(time=1.0, step=1, policy_version=1, metrics={}, group_ids=(0,)))
    state.apply(
        GroupDiscarded(
            time=1.2,
            group_id=99,
            scenario_id="s",
            reason="error",
            policy_version=1,
            trainer_version=1,
            num_tokens=0,
            step=2,
        )
    )
    assert [g.group_id for g in state.groups.of(1)] == [1, 0]
    assert state.groups[1].discarded == "stale" and state.groups[1].detail == "old"
    assert state.groups[99].step == 2 and state.groups[99].trajectories == ()
    assert [g.group_id for g in state.groups.waiting()] == [2]  # queued, not yet trained
    assert state.groups.all_steps() == [1, 2]
    state.apply(sampled(5, 2.0, version=1))
    state.apply(sampled(6, 2.0, version=1))
    assert (
        state.groups.steps_with_groups() == [2] and state.groups.trimmed_before == 2
    )  # step 1 dropped
    assert state.groups.all_steps() == [1, 2]  # still listed: its absence is explained


def test_model_without_group_ids_files_the_groups_sampled_by_then():
    state = DashboardState(FakeClock())
    state.apply(sampled(0, 0.0))
    state.apply(StepTrained(time=1.0, step=1, policy_version=1, metrics={}))
    state.apply(sampled(1, 1.5))
    state.apply(
        GroupDiscarded(
            time=1.6,
            group_id=1,
            scenario_id="s",
            reason="stale",
            policy_version=0,
            trainer_version=2,
            num_tokens=2,
        )
    )
    assert [g.group_id for g in state.groups.of(1)] == [0]
    assert state.groups[1].step == 2  # dropped while step 2 was being collected


def test_model_tells_converged_groups_from_a_lost_learning_signal():
    state = DashboardState(FakeClock())
    state.apply(
        RunStarted(
            time=0.0,
            run_id="r",
            name="t",
            backend="local",
            base_model="m",
            max_steps=10,
            start_step=0,
            config={"health_window": 4, "zero_variance_pause_rate": 0.75},
        )
    )
    assert state.health() == ("none", "no group has finished sampling yet")
    state.apply(sampled(0, 0.1, rewards=(0.0, 1.0)))
    assert state.health()[0] == "learning"
    for gid in range(1, 5):  # every group earns the best reward: converged
        state.apply(sampled(gid, 0.2, rewards=(1.0, 1.0)))
        state.apply(
            GroupDiscarded(
                time=0.2,
                group_id=gid,
                scenario_id="s",
                reason="zero_variance",
                policy_version=0,
                trainer_version=0,
                num_tokens=4,
                step=1,
            )
        )
    kind, words = state.health()
    assert kind == "converged" and words.startswith("converged: every group earns the best")
    assert state.converged_groups == 4 and state.no_signal_groups == 0
    assert state.discard_rate == 0.0  # converging is not discarding
    for gid in range(5, 9):  # equal rewards below the best: no learning signal
        state.apply(sampled(gid, 0.3, rewards=(0.5, 0.5)))
        state.apply(
            GroupDiscarded(
                time=0.3,
                group_id=gid,
                scenario_id="s",
                reason="zero_variance",
                policy_version=0,
                trainer_version=0,
                num_tokens=4,
                step=2,
            )
        )
    kind, words = state.health()
    assert kind == "no_signal" and "below the best seen (1)" in words
    assert state.no_signal_groups == 4 and state.discard_rate == pytest.approx(4 / 9)
    for gid in range(100, 104):
        state.apply(
            GroupDiscarded(
                time=0.4,
                group_id=gid,
                scenario_id="s",
                reason="error",
                policy_version=0,
                trainer_version=0,
                num_tokens=0,
                step=3,
            )
        )
    assert state.health() == ("error", "errors: 100% of the last 4 groups' rollouts failed")


def test_a_run_that_has_seen_one_reward_only_has_not_converged():
    """A reward that is always 0 (or always 1) from the start gives no learning signal: the
    words say so (never "converged"); the engine does not pause for it (engine.metrics.health)."""
    state = DashboardState(FakeClock())
    state.apply(
        RunStarted(
            time=0.0,
            run_id="r",
            name="t",
            backend="local",
            base_model="m",
            max_steps=10,
            start_step=0,
            config={"health_window": 4, "zero_variance_pause_rate": 0.75},
        )
    )
    for gid in range(4):
        state.apply(sampled(gid, 0.1, rewards=(0.0, 0.0)))
        state.apply(
            GroupDiscarded(
                time=0.2,
                group_id=gid,
                scenario_id="s",
                reason="zero_variance",
                policy_version=0,
                trainer_version=0,
                num_tokens=4,
                step=1,
            )
        )
    kind, words = state.health()
    assert (kind, words) == (
        "no_signal",
        "no learning signal yet: every reward so far is 0 (check the reward if this lasts)",
    )
    assert state.converged_groups == 0 and state.no_signal_groups == 4
    assert not any(g.at_best for g in state.groups.values())
    state.apply(sampled(4, 0.3, rewards=(0.0, 1.0)))  # a first higher reward...
    for gid in range(5, 9):  # ...then every group earns it: now that is converged
        state.apply(sampled(gid, 0.4, rewards=(1.0, 1.0)))
    assert state.health()[0] == "converged"


def test_repeated_lines_collapse_into_one_with_a_count():
    state = DashboardState(FakeClock())
    state.apply(
        LogEmitted(
            time=1.0, level="info", message="step 3: every group had equal rewards; no gradient"
        )
    )
    state.apply(LogEmitted(time=2.0, level="info", message="checkpoint saved"))
    state.apply(
        LogEmitted(
            time=3.0, level="info", message="step 9: every group had equal rewards; no gradient"
        )
    )
    state.apply(LogEmitted(time=4.0, level="warning", message="slow"))
    state.apply(LogEmitted(time=5.0, level="info", message="slow"))  # another level
    state.apply(LogEmitted(time=6.0, level="warning", message="slow"))
    assert [(line.level, line.message[:7], line.count) for line in state.log] == [
        ("info", "step 3:", 1),
        ("info", "checkpo", 1),
        ("info", "step 9:", 1),
        ("info", "slow", 1),
        ("warning", "slow", 2),
    ]
    assert state.log.total == 6 and state.log.rewrites == 1


def test_results_a_user_watches_are_never_merged():
    """Five evaluations read "×5 eval at step 75: mean reward 3.250": four results hidden.
    Info lines (results, checkpoints) each keep their line; only warnings and errors that
    repeat are counted, as the headless run counts them."""
    state = DashboardState(FakeClock())
    for k in range(5):
        state.apply(
            LogEmitted(
                time=float(k),
                level="info",
                message=f"eval at step {15 * (k + 1)}: mean reward {k}.250",
            )
        )
        state.apply(
            LogEmitted(
                time=k + 0.5,
                level="info",
                message=f"checkpoint step-{15 * (k + 1):06d} saved (periodic)",
            )
        )
    assert [line.count for line in state.log] == [1] * 10
    assert [line.message for line in state.log][-2:] == [
        "eval at step 75: mean reward 4.250",
        "checkpoint step-000075 saved (periodic)",
    ]


def test_failed_rollouts_alike_are_one_line_with_their_count_as_headless_counts_them():
    """35 rollouts failing alike were 35 lines; their tracebacks differ in numbers only."""
    state = DashboardState(FakeClock())
    for group in range(35):
        state.apply(
            LogEmitted(
                time=float(group),
                level="warning",
                message=f"rollout of group {group} failed: KeyError: 'answer'\n"
                f'Traceback (most recent call last):\n  File "task.py", line '
                f"{40 + group % 2}, in reward",
            )
        )
    state.apply(
        LogEmitted(time=40.0, level="error", message="rollout of group 36 failed: ValueError: bad")
    )
    assert [(line.level, line.count) for line in state.log] == [("warning", 35), ("error", 1)]
    assert "group 34" in state.log.lines[0].message and "line 40" in state.log.lines[0].message


def test_a_resumed_run_starting_again_is_not_counted_as_a_repeat_of_its_first_start():
    state = DashboardState(FakeClock())
    for start in (0.0, 100.0):  # the run, then its resume
        state.apply(SessionStarted(time=start, backend="local", base_model="tiny"))
        state.apply(StartupProgressed(time=start + 0.1, phase="loading_model", detail="tiny"))
        state.apply(LogEmitted(time=start + 1, level="warning", message="sample waited 15 s"))
        state.apply(LogEmitted(time=start + 2, level="warning", message="sample waited 30 s"))
    assert [(line.message[:8], line.count) for line in state.log] == [
        ("starting", 1),
        ("sample w", 2),
        ("starting", 1),
        ("sample w", 2),
    ]


def test_the_start_up_is_told_in_words_until_the_first_step():
    clock = FakeClock(100.0)
    state = DashboardState(clock)
    assert state.phase_text() == "starting the engine… 0s"
    clock.advance(4.2)  # the wait is counted, so a slow start-up does not look frozen
    assert state.phase_text() == "starting the engine… 4s"
    state.apply(
        RunStarted(
            time=0.0,
            run_id="r",
            name="t",
            backend="local",
            base_model="m",
            max_steps=10,
            start_step=0,
            config={"group_size": 8, "groups_per_step": 4, "min_groups_per_step": 0},
        )
    )
    state.apply(StartupProgressed(time=0.1, phase="loading_model", detail="m on local"))
    assert state.phase_text() == "loading the model: m on local"
    state.apply(StartupProgressed(time=0.2, phase="warmup", done=7, total=60, loss=0.4321))
    assert state.phase_text() == "format warm-up 7/60 · loss 0.432"
    state.apply(StartupProgressed(time=0.3, phase="first_rollouts"))
    state.apply(sampled(0, 0.4, rewards=(1.0,) * 8))
    assert state.phase_text() == "first rollouts: 8/32 sampled for step 1"
    state.apply(StepTrained(time=1.0, step=1, policy_version=1, metrics={}))
    assert state.phase_text() is None


def test_the_eta_leaves_paused_time_out():
    state = DashboardState(FakeClock())
    started(FakeClock(), state)
    for step in (1, 2):
        state.apply(StepTrained(time=2.0 * step, step=step, policy_version=step, metrics={}))
    state.apply(RunStateChanged(time=5.0, state="paused", reason="user"))
    assert state.eta() is None
    state.apply(RunStateChanged(time=605.0, state="running", reason="resumed"))
    state.apply(StepTrained(time=606.0, step=3, policy_version=3, metrics={}))
    assert state.eta() == pytest.approx(2.0 * (state.max_steps - 3))  # 2 s a step, not 300


def test_every_metric_becomes_a_series_by_step():
    state = DashboardState(FakeClock())
    state.apply(sampled(0, 0.5))
    state.apply(
        StepTrained(
            time=1.0,
            step=1,
            policy_version=1,
            metrics={"reward/mean": 0.5, "task/bits": 3, "bad": float("nan")},
        )
    )
    state.apply(sampled(1, 1.5))
    state.apply(
        StepTrained(
            time=3.0, step=2, policy_version=2, metrics={"reward/mean": 0.7, "task/bits": 4}
        )
    )
    state.apply(
        EvalCompleted(time=3.0, step=2, policy_version=2, metrics={"eval/reward_mean": 0.9})
    )
    assert state.series["task/bits"] == [(1, 3.0), (2, 4.0)]
    assert "bad" not in state.series
    assert state.series["throughput/sampled_tokens_per_s"] == [(2, 1.0)]  # 2 tokens in 2 s
    assert state.metric_keys()[:3] == ["reward/mean", "eval/reward_mean", "task/bits"]


def test_model_eta_only_while_running():
    clock = FakeClock()
    state = DashboardState(clock)
    started(clock, state)
    for step in range(1, 4):
        state.apply(StepTrained(time=2.0 * step, step=step, policy_version=step, metrics={}))
    assert state.eta() == pytest.approx(14.0)
    state.apply(RunStateChanged(time=7.0, state="paused", reason="x"))
    assert state.eta() is None


def test_recent_log_filters_by_level():
    state = DashboardState(FakeClock())
    for level in ("info", "WARNING", "error", "debug"):
        state.apply(LogEmitted(time=0.0, level=level, message=level))
    assert [line.message for line in state.log.recent(10, "warning")] == ["WARNING", "error"]
    assert len(state.log.recent(10)) == 4


def test_a_transcript_loses_the_empty_turn_it_ends_with():
    from tinker_tui.app.widgets.rollout_detail import without_empty_turn

    text = "User: yes, no or maybe?\n\nAssistant: maybe\n\nUser:"
    assert without_empty_turn(text) == "User: yes, no or maybe?\n\nAssistant: maybe"
    assert (
        without_empty_turn("User: hi\n\nAssistant: User: is a word")
        == "User: hi\n\nAssistant: User: is a word"
    )


def test_shorten_middle_keeps_both_ends():
    from tinker_tui.app.view_maths import shorten_middle

    path = "tinker://local-610271b47ebc4098/weights/step-000012"
    assert shorten_middle(path, 80) == path
    short = shorten_middle(path, 20)
    assert len(short) == 20 and short.startswith("tink") and short.endswith("step-000012")


def test_the_time_a_resumed_run_was_down_is_not_its_pace():
    """A run resumed after 100 s: its ETA came from step times that included the gap."""
    clock = FakeClock(0.0)
    state = DashboardState(clock)
    started(clock, state)
    state.apply(StartupProgressed(time=0.5, phase="first_rollouts"))
    for step in range(1, 5):
        state.apply(StepTrained(time=float(step), step=step, policy_version=step, metrics={}))
    # the process ends; 100 s later `--resume` starts the engine again
    state.apply(StartupProgressed(time=104.0, phase="loading_model"))
    state.apply(StartupProgressed(time=104.5, phase="first_rollouts"))
    for step in range(5, 7):
        state.apply(StepTrained(time=100.0 + step, step=step, policy_version=step, metrics={}))
    assert state.eta() == pytest.approx(4.0)  # 4 steps left at 1 s a step
    assert state.working_time(106.0) == pytest.approx(6.0)


def test_a_finished_run_shows_its_average_rates_without_the_paused_time():
    clock = FakeClock(0.0)
    state = DashboardState(clock)
    started(clock, state)
    for t in range(1, 11):
        state.apply(
            GroupSampled(
                time=float(t),
                group_id=t,
                scenario_id=f"s{t}",
                policy_version=0,
                num_trajectories=8,
                num_tokens=100,
                reward_mean=0.5,
            )
        )
    state.apply(RunStateChanged(time=12.0, state="paused", reason="user"))
    state.apply(RunStateChanged(time=17.0, state="running"))
    state.apply(RunFinished(time=20.0, status="completed", final_step=10, reason="done"))
    rollouts, tokens = state.average_rates()
    assert rollouts == pytest.approx(80 / 15) and tokens == pytest.approx(1000 / 15)


def test_model_names_a_collapse_and_a_rollback_undoes_the_later_steps():
    """The issue's curve: the health words say collapsed, with the best checkpoint; a
    rollback removes the later steps from the charts and is drawn as a knob change."""
    state = DashboardState(FakeClock())
    state.apply(
        RunStarted(
            time=0.0,
            run_id="r",
            name="t",
            backend="local",
            base_model="m",
            max_steps=40,
            start_step=0,
            config={"learning_rate": 1e-3, "rollback_lr_scale": 0.5, "collapse_groups": 12},
        )
    )  # 3 steps: the run is short
    curve = [0.20, 0.22, 0.25, 0.28, 0.31, 0.35, 0.38, 0.42, 0.45, 0.50, 0.54, 0.081, 0.0, 0.0, 0.0]
    gid = 0
    for step, reward in enumerate(curve, start=1):
        flat = step >= 12
        for _ in range(4):
            state.apply(
                sampled(gid, float(step), rewards=(reward,) * 2 if flat else (0.0, 2 * reward))
            )
            if flat:
                state.apply(
                    GroupDiscarded(
                        time=float(step),
                        group_id=gid,
                        scenario_id="s",
                        reason="zero_variance",
                        policy_version=0,
                        trainer_version=0,
                        num_tokens=4,
                        step=step,
                    )
                )
            gid += 1
        metrics = {"reward/mean": reward, "discarded/zero_variance": 4.0 if flat else 0.0}
        state.apply(
            StepTrained(
                time=float(step),
                step=step,
                policy_version=step,
                metrics=metrics,
                group_ids=tuple(range(gid - 4, gid)),
            )
        )
        if step == 10:
            state.apply(
                CheckpointSaved(
                    time=10.0,
                    step=10,
                    kind="state",
                    name="step-000010",
                    path="tinker://x/weights/step-000010",
                )
            )
    assert state.health() == (
        "collapsed",
        "collapsed at step 12 (best 0.540 at step 11); best checkpoint step-000010",
    )
    # The health pane at 80 columns (36 × 7 inside) names the best checkpoint whole: the
    # line a rollback goes back to matters more than the staleness line it displaces.
    from tinker_tui.app.widgets.discarded import discarded_content

    pane = discarded_content(state, 36, 7).plain.splitlines()
    assert len(pane) == 7 and " ".join(pane[:3]).split() == state.health()[1].split(), pane
    state.apply(
        CommandReceived(
            time=16.0,
            command="rolled_back",
            args={
                "to_step": 10,
                "checkpoint": "step-000010",
                "reason": "collapsed",
                "name": "learning_rate",
                "value": 5e-4,
                "old": 1e-3,
                "steps_undone": 5,
            },
        )
    )
    assert state.step == 10 and [s for s, _ in state.rewards] == list(range(1, 11))
    assert max(s for s, _ in state.series["reward/mean"]) == 10
    assert state.health()[0] != "collapsed" and state.knobs["learning_rate"] == 5e-4
    assert [c.describe() for c in state.knob_markers()] == [
        "rolled back to step-000010 (step 10), learning_rate 0.001 → 0.0005: collapsed"
    ]


def test_a_checkpoint_asked_for_once_written_is_the_same_row_marked():
    from tinker_tui.app.widgets.checkpoints import marks_legend, step_text
    from tinker_tui.engine.events import CheckpointSaved

    state = DashboardState(FakeClock())
    saved = dict(step=3, kind="state", name="step-000003", path="/w/step-000003")
    state.apply(CheckpointSaved(time=1.0, **saved))
    state.apply(CheckpointSaved(time=2.0, **saved, requested=True))
    [row] = state.checkpoints
    assert row.requested and row.time == 1.0  # when it was written, not when marked
    assert step_text(row) == "3✓" and step_text(row, best_step=3) == "3✓★"
    assert marks_legend(state.checkpoints.rows, 3) == " · ✓ asked for ★ best"
    assert marks_legend(state.checkpoints.rows, None) == " · ✓ asked for"


def test_the_status_bar_says_a_run_that_ended_on_no_signal_trained_nothing():
    from tinker_tui.app.widgets.status_bar import state_badge_text

    state = DashboardState(FakeClock())
    state.apply(RunFinished(time=1.0, status="completed", final_step=4, cause="no_signal"))
    assert state_badge_text(state) == "FINISHED (completed · trained nothing)"
    state.apply(RunFinished(time=2.0, status="completed", final_step=4, cause="max_steps"))
    assert state_badge_text(state) == "FINISHED (completed)"
