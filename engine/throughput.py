"""Throughput accounting: where the pipeline's time goes, and which stage is the bottleneck.

Pure bookkeeping on the engine's clock, fed by the pipeline and read about once a second.
Every history is a bounded deque, so a long run does not grow memory.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

SAMPLER_BOUND = "sampler-bound: add workers or raise max_steps_off_policy"
TRAINER_BOUND = "trainer-bound: sampling keeps up; training is the limit"
BALANCED = "balanced"
IDLE = "idle"


def busy_fraction(intervals: deque[tuple[float, float]], open_since: float | None,
                  start: float, end: float) -> float:
    """Fraction of [start, end] covered by the (non-overlapping) busy intervals."""
    if end <= start:
        return 0.0
    covered = 0.0
    for a, b in intervals:
        covered += max(0.0, min(b, end) - max(a, start))
    if open_since is not None:
        covered += max(0.0, end - max(open_since, start))
    return min(1.0, covered / (end - start))


def verdict(trainer_busy: float, sampler_busy: float, trainer_waiting: float) -> str:
    """Name the bottleneck from one window of busy fractions.

    The trainer waiting for a batch while the sampler is busy means sampling is the limit;
    the trainer busy nearly all the time means training is.
    """
    if trainer_busy < 0.05 and sampler_busy < 0.05:
        return IDLE
    if trainer_busy >= 0.85:
        return TRAINER_BOUND
    if trainer_waiting >= 0.25 and sampler_busy >= 0.85:
        return SAMPLER_BOUND
    return BALANCED


@dataclass(frozen=True, slots=True)
class ThroughputSnapshot:
    window: float
    rollouts_per_s: float
    sampled_tokens_per_s: float
    trained_tokens_per_s: float
    trainer_busy: float
    sampler_busy: float
    verdict: str
    staleness_in_flight: dict[int, int]
    staleness_queued: dict[int, int]


class ThroughputMeter:
    def __init__(self, window: float = 10.0, max_records: int = 4096) -> None:
        self.window = window
        self._rollouts: deque[tuple[float, int, int]] = deque(maxlen=max_records)
        self._trained: deque[tuple[float, int]] = deque(maxlen=max_records)
        self._trainer_busy: deque[tuple[float, float]] = deque(maxlen=max_records)
        self._trainer_since: float | None = None
        self._trainer_waiting: deque[tuple[float, float]] = deque(maxlen=max_records)
        self._waiting_since: float | None = None
        self._sampler_busy: deque[tuple[float, float]] = deque(maxlen=max_records)
        self._sampler_since: float | None = None
        self._staleness: deque[tuple[float, int, int]] = deque(maxlen=max_records)

    # ---------------------------------------------------------------- recording
    def rollouts_finished(self, now: float, trajectories: int, tokens: int) -> None:
        self._rollouts.append((now, trajectories, tokens))

    def trained(self, now: float, tokens: int, staleness: list[tuple[int, int]]) -> None:
        """A step trained `tokens`; `staleness` holds (in-flight, queued) versions per group."""
        self._trained.append((now, tokens))
        for in_flight, queued in staleness:
            self._staleness.append((now, in_flight, queued))

    def trainer_started(self, now: float) -> None:
        self._trainer_since = now

    def trainer_finished(self, now: float) -> None:
        if self._trainer_since is not None:
            self._trainer_busy.append((self._trainer_since, now))
        self._trainer_since = None

    def waiting_started(self, now: float) -> None:
        self._waiting_since = now

    def waiting_finished(self, now: float) -> None:
        if self._waiting_since is not None:
            self._trainer_waiting.append((self._waiting_since, now))
        self._waiting_since = None

    def in_flight_changed(self, now: float, in_flight: int) -> None:
        """The sampler is busy while at least one group is in flight."""
        if in_flight > 0 and self._sampler_since is None:
            self._sampler_since = now
        elif in_flight == 0 and self._sampler_since is not None:
            self._sampler_busy.append((self._sampler_since, now))
            self._sampler_since = None

    # ---------------------------------------------------------------- reading
    def snapshot(self, now: float, elapsed: float | None = None) -> ThroughputSnapshot:
        """Rates and busy fractions over the last `window` seconds (less early in a run)."""
        window = self.window if elapsed is None else max(min(self.window, elapsed), 1e-9)
        start = now - window
        rollouts = sum(n for t, n, _ in self._rollouts if t > start)
        sampled = sum(k for t, _, k in self._rollouts if t > start)
        trained = sum(k for t, k in self._trained if t > start)
        trainer = busy_fraction(self._trainer_busy, self._trainer_since, start, now)
        sampler = busy_fraction(self._sampler_busy, self._sampler_since, start, now)
        waiting = busy_fraction(self._trainer_waiting, self._waiting_since, start, now)
        in_flight = Counter(f for t, f, _ in self._staleness if t > start)
        queued = Counter(q for t, _, q in self._staleness if t > start)
        return ThroughputSnapshot(
            window=window, rollouts_per_s=rollouts / window, sampled_tokens_per_s=sampled / window,
            trained_tokens_per_s=trained / window, trainer_busy=trainer, sampler_busy=sampler,
            verdict=verdict(trainer, sampler, waiting),
            staleness_in_flight=dict(sorted(in_flight.items())),
            staleness_queued=dict(sorted(queued.items())))
