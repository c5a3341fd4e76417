"""Throughput accounting: where the pipeline's time goes, and which stage is the bottleneck.

Pure bookkeeping on the engine's clock, fed by the pipeline and read about once a second.
Every history is a bounded deque, so a long run does not grow memory. Records close together
(within `bucket` seconds, a hundredth of the window) are added into one: thousands of groups
a second then still fit the window, and recording one costs an addition, not a new entry.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SAMPLER_BOUND = "sampler-bound: add workers or raise max_steps_off_policy"
TRAINER_BOUND = "trainer-bound: sampling keeps up; training is the limit"
BALANCED = "balanced"
IDLE = "idle"


def busy_fraction(
    intervals: Iterable[Sequence[float]], open_since: float | None, start: float, end: float
) -> float:
    """Fraction of [start, end] covered by the (non-overlapping) busy intervals.

    An interval is (a, b), busy throughout, or (a, b, busy): several merged, busy for `busy`
    seconds of [a, b]; cut by the window, it keeps its share of that."""
    if end <= start:
        return 0.0
    covered = 0.0
    for a, b, *busy in intervals:
        overlap = max(0.0, min(b, end) - max(a, start))
        if busy and b > a:
            overlap *= busy[0] / (b - a)
        covered += overlap
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
    def __init__(
        self, window: float = 10.0, max_records: int = 4096, bucket: float | None = None
    ) -> None:
        self.window = window
        #: Records less than this many seconds after a record's first are added into it.
        self.bucket = window / 100 if bucket is None else bucket
        # [first time, last time, trajectories, tokens]
        self._rollouts: deque[list[float]] = deque(maxlen=max_records)
        # [first time, last time, tokens]
        self._trained: deque[list[float]] = deque(maxlen=max_records)
        # [start, end, busy seconds] (see busy_fraction)
        self._trainer_busy: deque[list[float]] = deque(maxlen=max_records)
        self._trainer_since: float | None = None
        self._trainer_waiting: deque[list[float]] = deque(maxlen=max_records)
        self._waiting_since: float | None = None
        self._sampler_busy: deque[list[float]] = deque(maxlen=max_records)
        self._sampler_since: float | None = None
        # (first time, [last time], in-flight versions -> groups, queued versions -> groups)
        self._staleness: deque[tuple[float, list[float], Counter[int], Counter[int]]] = deque(
            maxlen=max_records
        )

    # ---------------------------------------------------------------- recording
    def rollouts_finished(self, now: float, trajectories: int, tokens: int) -> None:
        records = self._rollouts
        if records and now - records[-1][0] < self.bucket:
            last = records[-1]
            last[1] = now
            last[2] += trajectories
            last[3] += tokens
        else:
            records.append([now, now, trajectories, tokens])

    def trained(self, now: float, tokens: int, staleness: list[tuple[int, int]]) -> None:
        """A step trained `tokens`; `staleness` holds (in-flight, queued) versions per group."""
        trained = self._trained
        if trained and now - trained[-1][0] < self.bucket:
            trained[-1][1] = now
            trained[-1][2] += tokens
        else:
            trained.append([now, now, tokens])
        records = self._staleness
        if not records or now - records[-1][0] >= self.bucket:
            records.append((now, [now], Counter(), Counter()))
        _, last, in_flight_counts, queued_counts = records[-1]
        last[0] = now
        for in_flight, queued in staleness:
            in_flight_counts[in_flight] += 1
            queued_counts[queued] += 1

    def _busy(self, intervals: deque[list[float]], start: float, end: float) -> None:
        if intervals and start - intervals[-1][0] < self.bucket:
            last = intervals[-1]
            last[1] = end
            last[2] += end - start
        else:
            intervals.append([start, end, end - start])

    def trainer_started(self, now: float) -> None:
        self._trainer_since = now

    def trainer_finished(self, now: float) -> None:
        if self._trainer_since is not None:
            self._busy(self._trainer_busy, self._trainer_since, now)
        self._trainer_since = None

    def waiting_started(self, now: float) -> None:
        self._waiting_since = now

    def waiting_finished(self, now: float) -> None:
        if self._waiting_since is not None:
            self._busy(self._trainer_waiting, self._waiting_since, now)
        self._waiting_since = None

    def in_flight_changed(self, now: float, in_flight: int) -> None:
        """The sampler is busy while at least one group is in flight."""
        if in_flight > 0 and self._sampler_since is None:
            self._sampler_since = now
        elif in_flight == 0 and self._sampler_since is not None:
            self._busy(self._sampler_busy, self._sampler_since, now)
            self._sampler_since = None

    # ---------------------------------------------------------------- reading
    def rollouts_per_s(self, now: float, elapsed: float | None = None) -> float:
        """Rollouts finished per second over the last `window` seconds, as `snapshot` counts
        them, without the rest of a snapshot (a step reads it)."""
        window = self.window if elapsed is None else max(min(self.window, elapsed), 1e-9)
        start = now - window
        rollouts = 0.0
        for record in reversed(self._rollouts):
            if record[1] <= start:
                break
            rollouts += record[2]
        return rollouts / window

    def snapshot(self, now: float, elapsed: float | None = None) -> ThroughputSnapshot:
        """Rates and busy fractions over the last `window` seconds (less early in a run).
        A merged record counts whole if its last part is in the window (an error of at most
        one `bucket` in `window`)."""
        window = self.window if elapsed is None else max(min(self.window, elapsed), 1e-9)
        start = now - window
        recent = [r for r in self._rollouts if r[1] > start]
        rollouts = sum(r[2] for r in recent)
        sampled = sum(r[3] for r in recent)
        trained = sum(r[2] for r in self._trained if r[1] > start)
        trainer = busy_fraction(self._trainer_busy, self._trainer_since, start, now)
        sampler = busy_fraction(self._sampler_busy, self._sampler_since, start, now)
        waiting = busy_fraction(self._trainer_waiting, self._waiting_since, start, now)
        in_flight: Counter[int] = Counter()
        queued: Counter[int] = Counter()
        for _, last, in_flight_counts, queued_counts in self._staleness:
            if last[0] > start:
                in_flight.update(in_flight_counts)
                queued.update(queued_counts)
        return ThroughputSnapshot(
            window=window,
            rollouts_per_s=rollouts / window,
            sampled_tokens_per_s=sampled / window,
            trained_tokens_per_s=trained / window,
            trainer_busy=trainer,
            sampler_busy=sampler,
            verdict=verdict(trainer, sampler, waiting),
            staleness_in_flight=dict(sorted(in_flight.items())),
            staleness_queued=dict(sorted(queued.items())),
        )
