from collections import deque

import pytest

from tinker_tui.engine.metrics.throughput import (
    BALANCED,
    SAMPLER_BOUND,
    TRAINER_BOUND,
    ThroughputMeter,
    busy_fraction,
    verdict,
)


def test_busy_fraction_clips_intervals_to_the_window_and_counts_an_open_one():
    intervals = deque([(0.0, 2.0), (4.0, 6.0)])
    assert busy_fraction(intervals, None, 1.0, 5.0) == pytest.approx(0.5)
    assert busy_fraction(intervals, 9.0, 5.0, 10.0) == pytest.approx((1.0 + 1.0) / 5.0)
    assert busy_fraction(deque(), None, 3.0, 3.0) == 0.0


@pytest.mark.parametrize(
    "trainer,sampler,waiting,expected",
    [
        (0.95, 0.5, 0.0, TRAINER_BOUND),
        (0.3, 1.0, 0.7, SAMPLER_BOUND),
        (0.6, 0.7, 0.2, BALANCED),
    ],
)
def test_verdict(trainer, sampler, waiting, expected):
    assert verdict(trainer, sampler, waiting) == expected


def test_meter_rates_busy_and_staleness_histograms():
    meter = ThroughputMeter(window=10.0)
    meter.in_flight_changed(0.0, 1)
    for t in range(1, 11):
        meter.rollouts_finished(float(t), trajectories=8, tokens=40)
    meter.waiting_started(0.0)
    meter.waiting_finished(6.0)
    meter.trainer_started(6.0)
    meter.trainer_finished(8.0)
    meter.trained(8.0, tokens=100, staleness=[(0, 1), (1, 0), (0, 1)])
    snap = meter.snapshot(10.0)
    assert snap.rollouts_per_s == pytest.approx(8.0)
    assert snap.sampled_tokens_per_s == pytest.approx(40.0)
    assert snap.trained_tokens_per_s == pytest.approx(10.0)
    assert snap.trainer_busy == pytest.approx(0.2)
    assert snap.sampler_busy == pytest.approx(1.0)
    assert snap.verdict == SAMPLER_BOUND
    assert snap.staleness_in_flight == {0: 2, 1: 1}
    assert snap.staleness_queued == {0: 1, 1: 2}


def test_meter_memory_is_bounded():
    meter = ThroughputMeter(max_records=100)
    for t in range(10_000):
        meter.rollouts_finished(float(t), 1, 1)
    assert len(meter._rollouts) == 100


def test_meter_reads_true_rates_far_above_its_record_count():
    """2,000 groups/s of 8 rollouts, 500 steps/s busy half the time each: more records than
    `max_records` in one window; merged per bucket, the whole window is still counted."""
    meter = ThroughputMeter(window=10.0, max_records=4096)
    for i in range(40_000):  # 20 s
        now = i / 2000
        meter.rollouts_finished(now, trajectories=8, tokens=16)
        if i % 4 == 0:  # a step every 2 ms: trains for 1 ms of it
            meter.trainer_started(now)
            meter.trainer_finished(now + 0.001)
            meter.trained(now + 0.001, tokens=64, staleness=[(0, 1)] * 4)
    snap = meter.snapshot(20.0)
    assert snap.rollouts_per_s == pytest.approx(16_000, rel=0.02)
    assert snap.sampled_tokens_per_s == pytest.approx(32_000, rel=0.02)
    assert snap.trained_tokens_per_s == pytest.approx(64 * 500, rel=0.02)
    assert snap.trainer_busy == pytest.approx(0.5, rel=0.02)
    assert snap.staleness_in_flight[0] == pytest.approx(20_000, rel=0.02)
    assert len(meter._rollouts) <= 2 * 100 + 1


def test_the_rollout_rate_alone_is_the_snapshots():
    """A step reads the rate without a whole snapshot; both count the same records."""
    import random

    rng = random.Random(3)
    meter = ThroughputMeter(window=10.0)
    now = 100.0
    for _ in range(2000):
        now += rng.expovariate(40.0)
        meter.rollouts_finished(now, rng.randint(1, 8), 100)
        if rng.random() < 0.05:
            for elapsed in (None, 3.0, 0.5):
                later = now + rng.random()
                assert meter.rollouts_per_s(later, elapsed) == pytest.approx(
                    meter.snapshot(later, elapsed).rollouts_per_s
                )
    assert meter.rollouts_per_s(now + 11.0) == 0.0  # nothing finished in the last window
