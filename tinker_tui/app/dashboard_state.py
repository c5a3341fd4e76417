"""What the dashboard shows, folded from engine events; no Textual here.

`DashboardState.apply` is subscribed to the engine's event bus and only updates plain Python
state, so it is cheap enough to call for every event. The panes read the model on a
timer (a few times a second) and never per event.

Time-dependent numbers (rates, elapsed time, ETA) are computed from event times and the
injected clock, so a `FakeClock` and a fixed list of events always give the same picture.
The maths the panes show (debiased EMA, windowed rates, ETA, histograms, the rollouts
filter, knob parsing) are plain functions here, tested alone.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

from tinker_tui.app.checkpoint_book import CheckpointBook
from tinker_tui.app.dashboard_rows import (
    CommandRow,
    EvalPoint,
    GroupRecord,
    ThroughputSample,
)
from tinker_tui.app.group_book import GroupBook
from tinker_tui.app.log_tail import LogTail
from tinker_tui.app.view_maths import (
    debiased_ema,
    eta_seconds,
    format_elapsed,
    next_smoothing,
    rate_history,
    windowed_rate,
)
from tinker_tui.engine.clock import Clock
from tinker_tui.engine.config import LIVE_KNOBS
from tinker_tui.engine.events import (
    DISCARD_REASONS,
    CheckpointDeleted,
    CheckpointSaved,
    CommandReceived,
    EvalCompleted,
    Event,
    GroupDiscarded,
    GroupSampled,
    LogEmitted,
    RunFinished,
    RunLabelled,
    RunResumed,
    RunStarted,
    RunState,
    RunStateChanged,
    RunStatus,
    SessionStarted,
    StartupProgressed,
    StepTrained,
    ThroughputMeasured,
)
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.metrics.collapse_memory import fold
from tinker_tui.engine.metrics.health import HealthWindow, Kind

# --------------------------------------------------------------------------- the model


class DashboardState:
    """Dashboard state folded from engine events.

    Args:
        clock: The clock the engine stamps events with; rates are computed "as of" its now.
        log_lines: How many log lines to keep.
        rate_window: Seconds over which rollouts/s and tokens/s are averaged when the engine
            publishes no `ThroughputMeasured` (older runs, scripted sessions).
        rate_step: Seconds between samples of that fallback rate history (the sparkline).
        rate_history: How many samples of rate history the sparklines show.
        ema_beta: The initial smoothing of the reward chart (and the metrics charts).
        max_groups: How many groups of rollouts the rollouts view keeps (oldest dropped).
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
        max_groups: int = 20_000,
    ) -> None:
        self.clock = clock
        #: When this model began waiting for the run: the dashboard counts the wait for
        #: the engine's first event, so a slow start-up does not read as a frozen screen.
        self.created_at = clock.now()
        #: What that wait is, in words: a run this process starts waits for its engine; a
        #: stored or attached run (`show`, `attach`) for the store to be read.
        self.waiting_for = "starting the engine"
        self.rate_window = rate_window
        self.rate_step = rate_step
        self.rate_history_len = rate_history
        self.ema_beta = ema_beta

        # run info
        self.run_id = ""
        self.name = ""
        #: The run's own name and note (`--name`, `--note`, edited from a dashboard).
        self.run_name = ""
        self.note = ""
        self.backend = ""
        self.base_model = ""
        self.config: dict[str, Any] = {}
        self.max_steps = 0
        self.start_step = 0
        self.started_at: float | None = None
        self.finished_at: float | None = None
        #: (from, to) of each time a resumed run was down between its processes (from a
        #: RunResumed's `down_seconds`, to its process's SessionStarted): left out of
        #: elapsed times, as the headless step lines leave it out.
        self.down: list[tuple[float, float]] = []
        self._session_at: float | None = None
        self.last_event_at: float | None = None

        # state
        self.state: RunState = "starting"
        self.reason = ""
        self.status: RunStatus | None = None
        #: Why it ended (`RunFinished.cause`): `ended_text` says it beside the status.
        self.cause: str = ""
        self.step = 0
        self.policy_version = 0
        #: The step that made the current policy version (its weights unchanged since).
        self.version_changed_at = 0
        # start-up: the latest phase, and the steps trained since the run (re)started
        self.startup: StartupProgressed | None = None
        self.rollouts_since_startup = 0
        self.steps_this_session = 0
        # pauses: time spent paused so far, so the ETA counts working time only
        self.paused_since: float | None = None
        self.paused_total = 0.0

        # rewards: (step, mean reward); the EMA is computed for the current smoothing
        self.rewards: list[tuple[int, float]] = []
        self._ema_cache: tuple[int, float, list[float]] = (0, ema_beta, [])
        #: When recent steps finished, on the working clock (paused time left out).
        self.step_times: deque[float] = deque(maxlen=256)
        self.last_metrics: Mapping[str, float] = {}
        self.evals: list[EvalPoint] = []
        #: Every numeric metric per step (step metrics, eval metrics, and the sampled
        #: tokens/s computed here), by key, in step order.
        self.series: dict[str, list[tuple[int, float]]] = {}
        self.series_revision = 0
        #: Each step's reward and advantage histograms (`StepTrained.histograms`).
        self.histograms: dict[int, dict[str, Mapping[str, Any]]] = {}
        #: Per step, the other x axes of the charts: seconds since the run started (its
        #: first start: a resumed run's gap shows), and tokens trained up to the step.
        self.step_elapsed: dict[int, float] = {}
        self.step_tokens: dict[int, float] = {}
        self._tokens_trained = 0.0
        self._tokens_step = -1
        self._tokens_since_step = 0
        self._last_step_time: float | None = None

        # throughput: (time, trajectories, tokens) of sampled groups, trimmed to the horizon
        self._samples: deque[tuple[float, int, int]] = deque()
        self.groups_sampled = 0
        self.rollouts_sampled = 0
        self.tokens_sampled = 0
        # what the engine measured (ThroughputMeasured), newest last
        self.throughput: ThroughputMeasured | None = None
        self.throughput_history: deque[ThroughputSample] = deque(maxlen=rate_history)

        # discards, and the health of recent groups
        self.discarded: dict[str, int] = {reason: 0 for reason in DISCARD_REASONS}
        self.discarded_tokens = 0
        #: Zero-variance groups split: at the best reward seen (converged) or below it.
        self.converged_groups = 0
        self.no_signal_groups = 0
        #: Rollouts that failed, and all that ended, over the steps trained
        #: (`rollouts/failed`, `rollouts/ended`: the engine's one count of them).
        self.rollouts_failed = 0
        self.rollouts_ended = 0
        #: The run's health, read as the engine reads it (engine.metrics.health).
        self.health_window = HealthWindow()

        # rollouts, by group id; the steps that took them; those still queued
        self.groups = GroupBook(max_groups)

        # control: commands received and the knobs' values
        self.commands: list[CommandRow] = []
        self.knobs: dict[str, float | int] = {}
        self.initial_knobs: dict[str, float | int] = {}

        # checkpoints and log
        self.checkpoints = CheckpointBook()
        self.log = LogTail(log_lines)

        # bumped on every applied event, so panes can skip redrawing unchanged data
        self.revision = 0

    # ---------------------------------------------------------------- folding events

    def apply(self, event: Event) -> None:
        """Fold one engine event into the model (an `EventBus` handler)."""
        match event:
            case RunStarted():
                self._run_started(event)
            case RunLabelled():
                self.run_name, self.note = event.run_name, event.note
            case StartupProgressed():
                if (
                    self.startup is not None
                    and self.startup.phase == "first_rollouts"
                    and event.phase != "first_rollouts"
                    and self.last_event_at is not None
                    and self.paused_since is None
                ):
                    # The engine starts again: a resumed run. The time it was down counts as
                    # paused, so the pace (and ETA) after it is the working pace.
                    self.paused_total += max(0.0, event.time - self.last_event_at)
                self.startup = event
                if event.phase == "loading_model":  # the engine (re)starts
                    self.log.engine_started()
                if event.phase == "first_rollouts":
                    self.rollouts_since_startup = 0
            case GroupSampled():
                self._group_sampled(event)
            case GroupDiscarded():
                self._group_discarded(event)
            case StepTrained():
                self._step_trained(event)
            case EvalCompleted():
                metrics = {k: float(v) for k, v in event.metrics.items() if _number(v)}
                for key, value in metrics.items():
                    self._add_point(key, event.step, value)
                reward = metrics.get(keys.EVAL_REWARD_MEAN)
                if reward is not None:
                    self.evals.append(
                        EvalPoint(
                            event.step,
                            event.policy_version,
                            reward,
                            event.time,
                            metrics,
                            dict(event.protocol),
                        )
                    )
            case ThroughputMeasured():
                self.throughput = event
                self.throughput_history.append(
                    ThroughputSample(event.time, event.rollouts_per_s, event.sampled_tokens_per_s)
                )
            case CommandReceived():
                self._command(event)
            case CheckpointSaved():
                self.checkpoints.saved(event)
                fold(self.health_window, event)
            case CheckpointDeleted():
                fold(self.health_window, event)
                self.checkpoints.removed(event)
            case RunStateChanged():
                self._state_changed(event.time, event.state)
                self.state = event.state
                self.reason = event.reason
            case LogEmitted():
                self.log.add(event)
                if isinstance(event, SessionStarted):
                    self._session_at = event.time
                if isinstance(event, RunResumed):  # read while following: as at a rollback
                    back_at = self._session_at if self._session_at is not None else event.time
                    if event.down_seconds > 0:
                        self.down.append((back_at - event.down_seconds, back_at))
                    self._rewind(event.step)
            case RunFinished():
                self._state_changed(event.time, "finished")
                self.state = "finished"
                self.status = event.status
                self.cause = event.cause
                self.reason = event.reason
                self.step = max(self.step, event.final_step)
                self.finished_at = event.time
            case _:
                return
        self.last_event_at = event.time
        self.revision += 1

    def _run_started(self, event: RunStarted) -> None:
        self.run_id = event.run_id
        self.name = event.name
        if event.run_name or event.note:  # a resume without --name keeps the stored one
            self.run_name, self.note = event.run_name, event.note
        self.backend = event.backend
        self.base_model = event.base_model
        self.config = dict(event.config)
        self.max_steps = event.max_steps
        self.start_step = event.start_step
        self.step = event.start_step
        self.policy_version = event.start_step
        self.started_at = event.time
        self.steps_this_session = 0
        self.health_window.configure(self.config)
        for name in LIVE_KNOBS:
            value = self.config.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                self.knobs.setdefault(name, value)
                self.initial_knobs.setdefault(name, value)
        if self.state == "starting":
            self.state = "running"

    def _group_sampled(self, event: GroupSampled) -> None:
        self._samples.append((event.time, event.num_trajectories, event.num_tokens))
        self._trim_samples(event.time)
        self.groups_sampled += 1
        self.rollouts_sampled += event.num_trajectories
        self.rollouts_since_startup += event.num_trajectories
        self.tokens_sampled += event.num_tokens
        self._tokens_since_step += event.num_tokens
        # the engine's health rule (engine.metrics.health): equal rewards have converged, or carry
        # no learning signal
        # at the best reward seen (before this group): a zero-variance discard of it has
        # converged
        at_best = self.health_window.classify(event.reward_mean) == "converged"
        self.health_window.sampled(
            [t.reward for t in event.trajectories], event.reward_mean, failed=event.failed
        )
        record = self.groups.get(event.group_id)
        if record is None:
            record = GroupRecord(
                group_id=event.group_id,
                scenario_id=event.scenario_id,
                step=None,
                policy_version=event.policy_version,
                time=event.time,
            )
            self.groups.add(record)
        record.reward_mean = event.reward_mean
        record.num_tokens = event.num_tokens
        record.trajectories = tuple(event.trajectories)
        record.failed, record.failure = event.failed, event.detail
        record.at_best = at_best
        self.groups.sampled(record)

    def _group_discarded(self, event: GroupDiscarded) -> None:
        self.discarded[event.reason] = self.discarded.get(event.reason, 0) + 1
        self.discarded_tokens += event.num_tokens
        record = self.groups.get(event.group_id)
        if record is None:  # failed before it was sampled
            record = GroupRecord(
                group_id=event.group_id,
                scenario_id=event.scenario_id,
                step=None,
                policy_version=event.policy_version,
                time=event.time,
                num_tokens=event.num_tokens,
            )
            self.groups.add(record)
            if event.reason == "error":
                self.health_window.failed()
        if event.reason == "zero_variance":
            if record.at_best:
                self.converged_groups += 1
            else:
                self.no_signal_groups += 1
        record.discarded = event.reason
        record.detail = event.detail
        record.trainer_version = event.trainer_version
        # the step that was being collected (older records lack it: the next step)
        self.groups.assign(record, event.step if event.step > 0 else self.step + 1)
        self.groups.revision += 1

    def _step_trained(self, event: StepTrained) -> None:
        self.step = event.step
        if event.policy_version != self.policy_version or not self.version_changed_at:
            self.version_changed_at = event.step
        self.policy_version = event.policy_version
        self.steps_this_session += 1
        self.step_times.append(self.working_time(event.time))
        self.last_metrics = event.metrics
        metrics = {k: float(v) for k, v in event.metrics.items() if _number(v)}
        self.rollouts_failed += int(metrics.get(keys.ROLLOUTS_FAILED, 0))
        self.rollouts_ended += int(metrics.get(keys.ROLLOUTS_ENDED, 0))
        for key, value in metrics.items():
            self._add_point(key, event.step, value)
        if event.histograms:
            self.histograms[event.step] = dict(event.histograms)
        if self._last_step_time is not None and event.time > self._last_step_time:
            self._add_point(
                SAMPLED_TOKENS_KEY,
                event.step,
                self._tokens_since_step / (event.time - self._last_step_time),
            )
        self._last_step_time = event.time
        self._tokens_since_step = 0
        reward = metrics.get(keys.REWARD_MEAN)
        if reward is not None:
            self.rewards.append((event.step, reward))
            fold(
                self.health_window,
                event,
                groups_per_step=int(self.config.get("groups_per_step") or 1),
            )
        if self.started_at is not None:
            self.step_elapsed[event.step] = self.worked(event.time)
        total = trained_tokens_total(metrics)
        if total is None:  # a running sum of the steps' own counts
            before = self._tokens_trained
            if event.step <= self._tokens_step:  # a resumed run redoes steps
                before = max(
                    (t for s, t in self.step_tokens.items() if s < event.step), default=0.0
                )
            total = before + metrics.get(keys.TRAIN_TOKENS, 0.0)
        self._tokens_trained, self._tokens_step = total, event.step
        self.step_tokens[event.step] = total
        # the groups its batch took; without the list (older records), the waiting groups
        # sampled by then
        self.groups.trained(event.step, event.group_ids or (), event.time)

    def _add_point(self, key: str, step: int, value: float) -> None:
        points = self.series.setdefault(key, [])
        if points and points[-1][0] == step:
            points[-1] = (step, value)  # a step recorded again (a resumed run)
        else:
            points.append((step, value))
        self.series_revision += 1

    def _command(self, event: CommandReceived) -> None:
        if event.command == "rolled_back" and isinstance(event.args.get("to_step"), int):
            fold(self.health_window, event)
            self._rewind(int(event.args["to_step"]))
        self.commands.append(
            CommandRow(event.time, self.step, event.command, dict(event.args), event.source)
        )
        if event.command in KNOB_COMMANDS:
            name, value = event.args.get("name"), event.args.get("value")
            if isinstance(name, str) and isinstance(value, int | float):
                if name not in self.initial_knobs and "old" in event.args:
                    old = event.args["old"]
                    if isinstance(old, int | float):
                        self.initial_knobs[name] = old
                self.knobs[name] = value

    def _rewind(self, step: int) -> None:
        """The run went back to its checkpoint at `step` (a rollback): what came after it is
        gone from the store, and from here."""
        self.step = min(self.step, step)
        self.rewards = [(s, r) for s, r in self.rewards if s <= step]
        undone = {
            key: int(sum(v for s, v in self.series.get(key, []) if s > step))
            for key in (keys.ROLLOUTS_FAILED, keys.ROLLOUTS_ENDED)
        }
        self.rollouts_failed = max(0, self.rollouts_failed - undone[keys.ROLLOUTS_FAILED])
        self.rollouts_ended = max(0, self.rollouts_ended - undone[keys.ROLLOUTS_ENDED])
        for key, points in self.series.items():
            self.series[key] = [(s, v) for s, v in points if s <= step]
        self.series_revision += 1
        self.evals = [e for e in self.evals if e.step <= step]
        self.histograms = {s: h for s, h in self.histograms.items() if s <= step}
        self.checkpoints.rewind(step)
        for record in self.groups.rewind(step):
            self._forget(record)

    def _forget(self, record: GroupRecord) -> None:
        """A group the rollback deleted from the store leaves the run's counts too, as
        `show` (reading the store) never counts it."""
        if record.reward_mean is not None:
            self.groups_sampled = max(0, self.groups_sampled - 1)
        if record.discarded is None:
            return
        self.discarded[record.discarded] = max(0, self.discarded.get(record.discarded, 0) - 1)
        self.discarded_tokens = max(0, self.discarded_tokens - record.num_tokens)
        if record.discarded == "zero_variance":
            if record.at_best:
                self.converged_groups = max(0, self.converged_groups - 1)
            else:
                self.no_signal_groups = max(0, self.no_signal_groups - 1)

    def _state_changed(self, time: float, state: str) -> None:
        """Keep the paused time, so the pace (and ETA) after a resume is the working pace."""
        if state == "paused":
            if self.paused_since is None:
                self.paused_since = time
        elif self.paused_since is not None:
            self.paused_total += max(0.0, time - self.paused_since)
            self.paused_since = None

    def _trim_samples(self, now: float) -> None:
        horizon = self.rate_window + self.rate_step * self.rate_history_len
        while self._samples and self._samples[0][0] <= now - horizon:
            self._samples.popleft()

    # ---------------------------------------------------------------- derived values

    def now(self) -> float:
        return self.clock.now()

    def working_time(self, time: float) -> float:
        """`time` less the time the run had been paused by then."""
        paused = self.paused_total
        if self.paused_since is not None and time > self.paused_since:
            paused += time - self.paused_since
        return time - paused

    @property
    def measured(self) -> bool:
        """True once the engine published a `ThroughputMeasured`."""
        return self.throughput is not None

    @property
    def training(self) -> bool:
        """True once the run trained a step (since it started or resumed)."""
        return self.steps_this_session > 0

    def phase_text(self) -> str | None:
        """What the run is doing before its first training step, in words; None once it
        trains (or has finished)."""
        if self.state == "finished" or self.training:
            return None
        if not self.run_id:
            return f"{self.waiting_for}… {self.now() - self.created_at:.0f}s"
        phase = self.startup
        if phase is None:
            return "starting…"
        if phase.phase == "loading_model":
            return f"loading the model: {phase.detail}" if phase.detail else "loading the model"
        if phase.phase == "warmup":
            text = f"format warm-up {phase.done}/{phase.total}"
            if phase.loss is not None and math.isfinite(phase.loss):
                text += f" · loss {phase.loss:.3f}"
            return text
        needed = self.first_batch_rollouts()
        sampled = self.rollouts_since_startup
        if needed:
            return f"first rollouts: {min(sampled, needed)}/{needed} sampled for step 1"
        return f"first rollouts: {sampled} sampled"

    def first_batch_rollouts(self) -> int:
        """Rollouts the first step waits for (group_size × the fewest groups per step)."""
        size = self.config.get("group_size")
        most = self.config.get("groups_per_step")
        least = self.config.get("min_groups_per_step") or most
        if isinstance(size, int) and isinstance(least, int):
            return size * least
        return 0

    def health(self) -> tuple[Kind, str]:
        """(kind, words): learning, converged, no signal, collapsed or failing
        (`HealthWindow.verdict`)."""
        return self.health_window.verdict()

    def rollouts_per_s(self, now: float | None = None) -> float:
        if self.throughput is not None:
            return self.throughput.rollouts_per_s
        now = self.now() if now is None else now
        points = ((t, float(n)) for t, n, _ in self._samples)
        return windowed_rate(points, now, self.rate_window, since=self.started_at)

    def average_rates(self) -> tuple[float, float]:
        """Rollouts/s and sampled tokens/s over the whole run, paused and down time left
        out: what a finished run shows (its last window's rates are no longer true)."""
        if self.started_at is None:
            return 0.0, 0.0
        end = self.finished_at if self.finished_at is not None else self.last_event_at
        working = self.working_time(end or self.started_at) - self.started_at
        if working <= 0:
            return 0.0, 0.0
        return self.rollouts_sampled / working, self.tokens_sampled / working

    def tokens_per_s(self, now: float | None = None) -> float:
        if self.throughput is not None:
            return self.throughput.sampled_tokens_per_s
        now = self.now() if now is None else now
        points = ((t, float(k)) for t, _, k in self._samples)
        return windowed_rate(points, now, self.rate_window, since=self.started_at)

    def _fallback_history(self, now: float | None, index: int) -> list[float]:
        if self.started_at is None or not self._samples:
            return []
        now = self.now() if now is None else now
        points = [(t, float(sample[index])) for t, *sample in self._samples]
        return rate_history(
            points,
            now,
            self.rate_window,
            self.rate_step,
            self.rate_history_len,
            since=self.started_at,
        )

    def rollout_rate_history(self, now: float | None = None) -> list[float]:
        """Rollouts/s over time, oldest first, for a sparkline."""
        if self.throughput_history:
            return [s.rollouts_per_s for s in self.throughput_history]
        return self._fallback_history(now, 0)

    def token_rate_history(self, now: float | None = None) -> list[float]:
        """Sampled tokens/s over time, oldest first, for a sparkline."""
        if self.throughput_history:
            return [s.tokens_per_s for s in self.throughput_history]
        return self._fallback_history(now, 1)

    @property
    def reward_ema(self) -> list[float]:
        """The debiased EMA of the mean reward at the current smoothing (cached)."""
        count, beta, values = self._ema_cache
        if count != len(self.rewards) or beta != self.ema_beta:
            values = debiased_ema((r for _, r in self.rewards), self.ema_beta)
            self._ema_cache = (len(self.rewards), self.ema_beta, values)
        return values

    def cycle_smoothing(self) -> float:
        self.ema_beta = next_smoothing(self.ema_beta)
        return self.ema_beta

    @property
    def discarded_total(self) -> int:
        return sum(self.discarded.values())

    @property
    def discard_rate(self) -> float:
        """Share of groups dropped for a reason worth attention (stale, failed, equal
        rewards below the best), of all groups that reached the trainer's filters.

        Converged groups (equal rewards at the best seen) are not counted: they are the
        run succeeding. A group that failed before it was sampled still counts, hence the
        `max`.
        """
        dropped = self.discarded_total - self.converged_groups
        total = max(self.groups_sampled, self.discarded_total)
        return dropped / total if total else 0.0

    @property
    def last_reward(self) -> float | None:
        return self.rewards[-1][1] if self.rewards else None

    @property
    def last_reward_ema(self) -> float | None:
        ema = self.reward_ema
        return ema[-1] if ema else None

    @property
    def last_eval(self) -> EvalPoint | None:
        return self.evals[-1] if self.evals else None

    def knob_markers(self) -> list[CommandRow]:
        """Knob changes (a rollback's learning rate too), for markers on the charts."""
        return [c for c in self.commands if c.command in KNOB_COMMANDS]

    def eta(self) -> float | None:
        """Seconds to `max_steps` at the recent working pace (paused time left out); None
        while paused, finished or unknown."""
        if self.state in ("paused", "finished", "stopping"):
            return None
        return eta_seconds(self.step_times, self.step, self.max_steps, min_span=ETA_SPAN)

    def elapsed(self, now: float | None = None) -> float:
        if self.started_at is None:
            return 0.0
        if self.finished_at is not None:
            end = self.finished_at
        else:
            end = self.now() if now is None else now
        return self.worked(end)

    def worked(self, time: float) -> float:
        """Seconds from the run's start to `time`, less the time it was down (`down`)."""
        if self.started_at is None:
            return 0.0
        start = self.started_at
        down = sum(max(0.0, min(to, time) - max(since, start)) for since, to in self.down)
        return max(0.0, time - start - down)

    def since_start(self, time: float) -> str:
        """An event time as elapsed time since the run started (`MM:SS`), down time left
        out."""
        if self.started_at is None:
            return format_elapsed(0.0)
        return format_elapsed(self.worked(time))

    def metric_keys(self) -> list[str]:
        """Every metric the run recorded, in a stable order: reward first, then by name."""
        return sorted(self.series, key=metric_order)


#: Seconds of working time the ETA's pace spans at least (`view_maths.eta_seconds`).
ETA_SPAN = 60.0
#: Commands that change a knob (`name`, `value`, `old`): a setting, and a rollback's
#: scaled learning rate.
KNOB_COMMANDS = ("set", "rolled_back")


def trained_tokens_total(metrics: Mapping[str, float]) -> float | None:
    """The tokens trained so far, when the step's metrics say so themselves (a running
    total); None: sum `train/tokens`, the step's own."""
    for key in keys.TRAINED_TOKENS_TOTAL:
        value = metrics.get(key)
        if value is not None:
            return value
    return None


#: The dashboard's own per-step series: tokens sampled between two steps per second.
SAMPLED_TOKENS_KEY = "throughput/sampled_tokens_per_s"

#: Metric families in the order the metrics view lists them.
_FAMILY_ORDER = (
    "reward",
    "eval",
    "task",
    "loss",
    "train",
    "optim",
    "time",
    "throughput",
    "rollouts",
    "discarded",
    "async",
)


def metric_order(key: str) -> tuple[int, int, str]:
    family = key.split("/", 1)[0]
    rank = _FAMILY_ORDER.index(family) if family in _FAMILY_ORDER else len(_FAMILY_ORDER)
    return (rank, 0 if key == keys.REWARD_MEAN else 1, key)


def _number(value: object) -> bool:
    """A finite int or float (not a bool): what a chart can draw."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
