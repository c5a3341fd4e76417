"""What the dashboard shows, folded from engine events; no Textual here.

`RunModel.apply` is subscribed to the engine's event bus and only updates plain Python
state, so it is cheap enough to call for every event. The panes read the model on a
timer (a few times a second) and never per event.

Time-dependent numbers (rates, elapsed time) are computed from event times and the
injected clock, so a `FakeClock` and a fixed list of events always give the same picture.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.clock import Clock
from engine.events import (
    CheckpointKind,
    CheckpointSaved,
    DiscardReason,
    Event,
    GroupDiscarded,
    GroupSampled,
    LogEmitted,
    RunFinished,
    RunStarted,
    RunState,
    RunStateChanged,
    RunStatus,
    StepTrained,
)

REWARD_KEY = "reward/mean"
DISCARD_REASONS: tuple[DiscardReason, ...] = ("stale", "zero_variance", "error")


# --------------------------------------------------------------------------- pure maths


def windowed_rate(
    points: Iterable[tuple[float, float]],
    now: float,
    window: float,
    since: float | None = None,
) -> float:
    """Amount per second over the last `window` seconds before `now`.

    `points` are `(time, amount)` pairs. Points in `(now - window, now]` count. When the
    run began less than `window` seconds ago (`since`), the rate is taken over the time
    actually elapsed, so the first seconds of a run are not under-reported.
    """
    if window <= 0:
        raise ValueError("window must be positive")
    start = now - window
    total = sum(amount for t, amount in points if start < t <= now)
    span = window
    if since is not None:
        span = min(window, now - since)
    if span <= 0:
        return 0.0
    return total / span


def rate_history(
    points: Sequence[tuple[float, float]],
    now: float,
    window: float,
    step: float,
    count: int,
    since: float | None = None,
) -> list[float]:
    """`windowed_rate` sampled every `step` seconds up to `now`, oldest first.

    At most `count` samples; when `since` (the run's start) is given, no sample is taken
    at or before it. `points` must be sorted by time (events arrive in time order).
    """
    if step <= 0:
        raise ValueError("step must be positive")
    if window <= 0:
        raise ValueError("window must be positive")
    times = [t for t, _ in points]
    cumulative = [0.0]
    for _, amount in points:
        cumulative.append(cumulative[-1] + amount)

    def total_in(start: float, end: float) -> float:
        return cumulative[bisect_right(times, end)] - cumulative[bisect_right(times, start)]

    samples: list[float] = []
    for k in range(count - 1, -1, -1):
        t = now - k * step
        span = window if since is None else min(window, t - since)
        if span <= 0:
            continue
        samples.append(total_in(t - window, t) / span)
    return samples


def debiased_ema(values: Iterable[float], beta: float = 0.9) -> list[float]:
    """Exponential moving average with the start-up bias removed (as in Adam).

    `beta` is the weight of the past. The first value of the result equals the first input.
    """
    if not 0.0 <= beta < 1.0:
        raise ValueError("beta must be in [0, 1)")
    out: list[float] = []
    acc = 0.0
    for i, value in enumerate(values, start=1):
        acc = beta * acc + (1.0 - beta) * value
        out.append(acc / (1.0 - beta**i))
    return out


def format_elapsed(seconds: float) -> str:
    """`MM:SS`, or `H:MM:SS` from one hour on; negative durations show as 00:00."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes:02d}:{secs:02d}"


# --------------------------------------------------------------------------- model rows


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    step: int
    kind: CheckpointKind
    name: str
    path: str
    time: float


@dataclass(frozen=True, slots=True)
class LogLine:
    time: float
    level: str
    message: str


# --------------------------------------------------------------------------- the model


class RunModel:
    """Dashboard state folded from engine events.

    Args:
        clock: The clock the engine stamps events with; rates are computed "as of" its now.
        log_lines: How many log lines to keep.
        rate_window: Seconds over which rollouts/s and tokens/s are averaged.
        rate_step: Seconds between samples of the rollouts/s history (the sparkline).
        rate_history: How many samples of that history to show.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        log_lines: int = 500,
        rate_window: float = 10.0,
        rate_step: float = 0.5,
        rate_history: int = 60,
        ema_beta: float = 0.9,
    ) -> None:
        self.clock = clock
        self.rate_window = rate_window
        self.rate_step = rate_step
        self.rate_history_len = rate_history
        self.ema_beta = ema_beta

        # run info
        self.run_id = ""
        self.name = ""
        self.backend = ""
        self.base_model = ""
        self.max_steps = 0
        self.start_step = 0
        self.started_at: float | None = None
        self.finished_at: float | None = None

        # state
        self.state: RunState = "starting"
        self.reason = ""
        self.status: RunStatus | None = None
        self.step = 0
        self.policy_version = 0

        # rewards: (step, mean reward) and its debiased EMA
        self.rewards: list[tuple[int, float]] = []
        self.reward_ema: list[float] = []
        self._ema_acc = 0.0

        # throughput: (time, trajectories, tokens) of sampled groups, trimmed to the horizon
        self._samples: deque[tuple[float, int, int]] = deque()
        self.groups_sampled = 0
        self.rollouts_sampled = 0
        self.tokens_sampled = 0

        # discards
        self.discarded: dict[str, int] = {reason: 0 for reason in DISCARD_REASONS}
        self.discarded_tokens = 0

        # checkpoints and log
        self.checkpoints: list[CheckpointRow] = []
        self.log: deque[LogLine] = deque(maxlen=log_lines)
        self.log_total = 0

        # bumped on every applied event, so panes can skip redrawing unchanged data
        self.revision = 0

    # ---------------------------------------------------------------- folding events

    def apply(self, event: Event) -> None:
        """Fold one engine event into the model (an `EventBus` handler)."""
        match event:
            case RunStarted():
                self.run_id = event.run_id
                self.name = event.name
                self.backend = event.backend
                self.base_model = event.base_model
                self.max_steps = event.max_steps
                self.start_step = event.start_step
                self.step = event.start_step
                self.started_at = event.time
                if self.state == "starting":
                    self.state = "running"
            case GroupSampled():
                self._samples.append((event.time, event.num_trajectories, event.num_tokens))
                self._trim_samples(event.time)
                self.groups_sampled += 1
                self.rollouts_sampled += event.num_trajectories
                self.tokens_sampled += event.num_tokens
            case GroupDiscarded():
                self.discarded[event.reason] = self.discarded.get(event.reason, 0) + 1
                self.discarded_tokens += event.num_tokens
            case StepTrained():
                self.step = event.step
                self.policy_version = event.policy_version
                reward = event.metrics.get(REWARD_KEY)
                if reward is not None and math.isfinite(reward):
                    self.rewards.append((event.step, float(reward)))
                    beta = self.ema_beta
                    self._ema_acc = beta * self._ema_acc + (1.0 - beta) * reward
                    self.reward_ema.append(self._ema_acc / (1.0 - beta ** len(self.rewards)))
            case CheckpointSaved():
                self.checkpoints.append(
                    CheckpointRow(event.step, event.kind, event.name, event.path, event.time)
                )
            case RunStateChanged():
                self.state = event.state
                self.reason = event.reason
            case LogEmitted():
                self.log.append(LogLine(event.time, event.level, event.message))
                self.log_total += 1
            case RunFinished():
                self.state = "finished"
                self.status = event.status
                self.reason = event.reason
                self.step = event.final_step
                self.finished_at = event.time
            case _:
                return
        self.revision += 1

    def _trim_samples(self, now: float) -> None:
        horizon = self.rate_window + self.rate_step * self.rate_history_len
        while self._samples and self._samples[0][0] <= now - horizon:
            self._samples.popleft()

    # ---------------------------------------------------------------- derived values

    def now(self) -> float:
        return self.clock.now()

    def rollouts_per_s(self, now: float | None = None) -> float:
        now = self.now() if now is None else now
        points = ((t, float(n)) for t, n, _ in self._samples)
        return windowed_rate(points, now, self.rate_window, since=self.started_at)

    def tokens_per_s(self, now: float | None = None) -> float:
        now = self.now() if now is None else now
        points = ((t, float(k)) for t, _, k in self._samples)
        return windowed_rate(points, now, self.rate_window, since=self.started_at)

    def rollout_rate_history(self, now: float | None = None) -> list[float]:
        """Rollouts/s sampled every `rate_step` seconds, oldest first, for a sparkline."""
        if self.started_at is None:
            return []
        now = self.now() if now is None else now
        points = [(t, float(n)) for t, n, _ in self._samples]
        return rate_history(
            points,
            now,
            self.rate_window,
            self.rate_step,
            self.rate_history_len,
            since=self.started_at,
        )

    @property
    def discarded_total(self) -> int:
        return sum(self.discarded.values())

    @property
    def discard_rate(self) -> float:
        """Share of groups discarded, of all groups that reached the trainer's filters.

        Discarded groups were normally sampled first; a group that failed before it was
        sampled (an error) still counts, hence the `max`.
        """
        total = max(self.groups_sampled, self.discarded_total)
        return self.discarded_total / total if total else 0.0

    @property
    def last_reward(self) -> float | None:
        return self.rewards[-1][1] if self.rewards else None

    @property
    def last_reward_ema(self) -> float | None:
        return self.reward_ema[-1] if self.reward_ema else None

    def elapsed(self, now: float | None = None) -> float:
        if self.started_at is None:
            return 0.0
        if self.finished_at is not None:
            end = self.finished_at
        else:
            end = self.now() if now is None else now
        return max(0.0, end - self.started_at)

    def since_start(self, time: float) -> str:
        """An event time as elapsed time since the run started (`MM:SS`)."""
        base = self.started_at if self.started_at is not None else time
        return format_elapsed(time - base)

    def recent_log(self, count: int) -> Sequence[LogLine]:
        lines = list(self.log)
        return lines[-count:] if count > 0 else []
