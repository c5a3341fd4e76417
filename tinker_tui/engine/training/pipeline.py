"""The async pipeline: rollout workers feed a queue, the trainer drains it, both overlap.

Workers sample while the trainer trains, so neither waits for the other. Every group is
stamped with the policy version that sampled it. Staleness is paced first (a worker does
not start a group while enough work is already queued or in flight to fill the batches the
trainer can still use) and enforced at dequeue: a group more than `max_steps_off_policy`
versions behind the trainer is discarded and counted. With `sampling = inflight` the stamp
is a lower bound (the sampler moved to newer weights while the group ran), so nothing is
discarded for staleness: pacing alone bounds how far sampling runs ahead, as
tinker-cookbook's async loop does. The pipeline is also the run's
`Control`: pause, resume, checkpoint now and stop act on it directly.

A rollout that raises, returns no `Trajectory` or runs past `rollout_timeout` fails as one
member of its group: the group trains with the others if at least `min_group_size` are
left, else it is discarded as an error. Advantages are computed when a group is sampled
(`engine.training.advantages`), and the step's metrics include what the task reported
(`engine.rollouts.task_metrics`). When the run reaches `max_steps` the task's eval scenarios are
evaluated once more, at that final step. The evaluation itself is `engine.training.evaluator`'s, and
writing checkpoints and picking a rollback's target `engine.training.checkpointer`'s: the pipeline
decides when, and orchestrates.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import linecache
import random
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from tinker_tui.engine import faults
from tinker_tui.engine.backend.direct_sampler import DirectSampler
from tinker_tui.engine.backend.retry import BackendInterrupted
from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.clock import Clock
from tinker_tui.engine.config import RunConfig, check_knob
from tinker_tui.engine.events import (
    SOURCE_ENGINE,
    CommandReceived,
    DiscardReason,
    Event,
    EventBus,
    GroupDiscarded,
    GroupSampled,
    GroupStarted,
    LogEmitted,
    RunStateChanged,
    RunStatus,
    StalledRollout,
    StepTrained,
    StopCause,
    ThroughputMeasured,
    TrajectorySummary,
    TrajectoryTokens,
)
from tinker_tui.engine.metrics import collapse_memory
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.metrics.cost import BUDGET_STOP, CostMeter, Prices
from tinker_tui.engine.metrics.health import Collapse, HealthWindow, flat_share
from tinker_tui.engine.metrics.loop_lag import LoopLagMonitor
from tinker_tui.engine.metrics.throughput import ThroughputMeter
from tinker_tui.engine.rollouts.distributions import step_distributions, truncated
from tinker_tui.engine.rollouts.task import (
    Scenario,
    Task,
    captured_rollout,
    group_rollout_of,
    part_of,
    reward_components_of,
)
from tinker_tui.engine.rollouts.trajectory import (
    Trajectory,
    TrajectoryError,
    TrajectoryGroup,
)
from tinker_tui.engine.rollouts.truncation import cap_truncated
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.training.advantages import group_advantages
from tinker_tui.engine.training.checkpointer import Checkpointer
from tinker_tui.engine.training.eval_protocol import EvalProtocol, RunEvalSettings
from tinker_tui.engine.training.evaluator import Evaluator
from tinker_tui.engine.training.lr_schedule import lr_factor
from tinker_tui.engine.training.resume import (
    RAN_OUT,
    ResumeState,
    ScenarioError,
    ScenariosExhausted,
)
from tinker_tui.engine.training.rollback_words import (
    best_words,
    no_rollback_point,
    rollback_basis,
    target_words,
)
from tinker_tui.engine.training.rollout_loop import (
    DeadlinePassed,
    RolloutLoop,
    RolloutLoopClosed,
    SameLoop,
    run_together,
)
from tinker_tui.engine.training.scenario_ledger import ScenarioLedger
from tinker_tui.engine.training.step_metrics import StepMetrics
from tinker_tui.engine.training.trained_tokens import PieceBook, tokens_event, trained_tokens


class RolloutTimeout(TrajectoryError, TimeoutError):
    """A rollout ran past `rollout_timeout` and was cancelled (counted as an error)."""


#: Seconds a group's rollouts may run before the throughput events carry them as stalled
#: (`StalledRollout`: their age and the line they wait at), long before `rollout_timeout`.
STALL_AFTER = 30.0


class Pipeline:
    def __init__(
        self,
        *,
        config: RunConfig,
        task: Task,
        session: BackendSession,
        client_factory: Callable[[], object],
        model_name: str,
        bus: EventBus,
        clock: Clock,
        rng: random.Random,
        start_step: int = 0,
        sampling_defaults: SamplingDefaults | None = None,
        rollouts: RolloutLoop | None = None,
        health_pause_default: str = "wait",
        stall_after: float = STALL_AFTER,
        warmup_done: bool = True,
        rewind_store: Callable[[int], Awaitable[Mapping[str, int]]] | None = None,
        commit_events: Callable[[], Awaitable[None]] | None = None,
        captures: Callable[[], Any] | None = None,
    ) -> None:
        self.config = config
        #: The policy server's open trajectories (`engine.server.capture.Captures`), once it
        #: runs: each rollout gets a client under its own key, so one that returns only a
        #: reward is trained on what the server sampled for it.
        self._captures = captures
        #: Seconds before a group's rollouts in flight count as stalled (`STALL_AFTER`).
        self.stall_after = stall_after
        #: Groups whose rollouts run now: group id -> (started, scenario, their coroutines,
        #: whose awaits say where each waits).
        self._rolling: dict[int, tuple[float, Scenario, list[Any]]] = {}
        self.task = task
        self._reward_components = reward_components_of(task)
        self.session = session
        self.model_name = model_name
        self.bus = bus
        self.clock = clock
        self.step = start_step
        # What each rollout is handed (the run's OpenAI client): opaque to the engine.
        self._client_factory = client_factory
        # What a token-level task's rollouts are handed instead (`_token_sampler`).
        self._direct_sampler: DirectSampler | None = None
        # Where the rollouts run (engine.training.rollout_loop); this object's own state, its events
        # and the trainer stay on the loop that runs `run()`.
        self.rollouts: RolloutLoop = rollouts or SameLoop()
        #: Scenarios by position, and which a checkpoint consumed (exactly-once resume).
        self.scenarios = ScenarioLedger(task, rng)
        #: Whether the policy's weights are worth a checkpoint: the run (engine.run) starts
        #: it False until the model is built and the supervised warm-up is done (or there is
        #: none).
        self.warmup_done = warmup_done
        self._queue: asyncio.Queue[TrajectoryGroup | None] = asyncio.Queue()
        self._in_flight = 0
        self._held = 0  # groups the trainer holds: its partial batch, or the batch it trains
        self._paused = False
        self._pause_reason = ""
        self._stopping = False
        # The trainer waits for groups (no step in progress): a checkpoint asked for while
        # paused is written at once, by `_paused_checkpoint`, which the trainer then awaits.
        self._trainer_idle = False
        self._paused_checkpoint: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stop_event = asyncio.Event()  # set once by stop(); see stop_requested()
        self._ran_out_at: int | None = None  # scenarios drawn when they ran out
        self._training_since: float | None = None  # the step's training call began
        self.sampling_defaults = sampling_defaults or SamplingDefaults(
            temperature=config.temperature, max_tokens=config.max_tokens
        )
        # Live knobs: start from the config, change through set_knob.
        self._learning_rate = config.learning_rate
        self._max_off = config.max_steps_off_policy
        #: The in-flight sampler: versions are lower bounds; pacing replaces the discard.
        self._inflight = config.sampling == "inflight"
        self._workers_wanted = config.rollout_workers
        self._workers: dict[int, asyncio.Task[None]] = {}
        #: The task's eval scenarios on the current policy, beside training
        #: (engine.training.evaluator).
        self.evaluator = Evaluator(
            task=task,
            client_factory=client_factory,
            rollouts=self.rollouts,
            roll_out=lambda client, scenarios, defaults: self._roll_out(
                client, scenarios, defaults=defaults
            ),
            bus=bus,
            clock=clock,
            now_at=lambda: (self.step, self.session.version),
            stopping=lambda: self._stopping,
            protocol=self._eval_protocol,
        )
        # Accounting and health.
        self.meter = ThroughputMeter()
        #: Tokens and dollars per step and in total, and the budget (engine.metrics.cost).
        self.cost = CostMeter(Prices.from_config(config), config.max_cost_usd)
        #: The counts between two steps and the run's group totals; a step's metrics.
        self.step_metrics = StepMetrics()
        self.loop_lag = LoopLagMonitor()
        self.report_interval = 1.0
        #: The run's health (engine.metrics.health): what pauses it, what tells a collapse.
        self.health = HealthWindow.from_settings(config.as_dict())
        self._last_failure = ""  # why the last failed group failed, for a health pause
        self._pieces: PieceBook | None = None  # token pieces given to the store so far
        self._started_at = 0.0
        self._skipping = False  # the last step had no gradient (all groups zero-variance)
        # What a health pause does: the setting, or the front end's choice for "auto"
        # (stop without a dashboard, wait with one).
        self.on_health_pause = (
            config.on_health_pause if config.on_health_pause != "auto" else health_pause_default
        )
        #: What a collapse does: the setting, or the front end's choice for "auto".
        self.on_collapse = (
            config.on_collapse if config.on_collapse != "auto" else health_pause_default
        )
        self.rollbacks = 0  # automatic rollbacks so far
        #: The run's full checkpoints, and the one a rollback uses (engine.training.checkpointer).
        self.checkpointer = Checkpointer(
            config=config,
            session=session,
            health=self.health,
            bus=bus,
            clock=clock,
            commit_events=commit_events,
        )
        #: Flush the store and reconcile it to a step (a rollback), returns what
        #: `RunStore.reconcile` returns; the run hands it over.
        self.rewind_store = rewind_store
        #: (reason, lr scale, who asked: "user" or "on_collapse")
        self._rollback_requested: tuple[str, float, str] | None = None
        #: Why the run was stopped (`stop`'s reason and typed cause), once it was.
        self.stop_reason = ""
        self.stop_cause: StopCause = "user"
        #: The health check's reason when it stopped the run (on_health_pause = stop).
        self.health_stop_reason = ""
        #: Why a run that ended by itself before max_steps did ("scenarios ran out ...").
        self.end_reason = ""
        #: The task's scenarios failed: the run checkpoints what it trained, then fails
        #: with this (exit 1; `--resume` continues it once the task is fixed).
        self.scenario_failure: ScenarioError | None = None

    # ------------------------------------------------------------------ control
    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def stopping(self) -> bool:
        return self._stopping

    def _command(self, command: str, *, source: str = "user", **args: Any) -> None:
        """Record a command; `source` as `CommandReceived` lists them."""
        self._emit(
            CommandReceived(time=self.clock.now(), command=command, args=args, source=source)
        )

    def pause(self, reason: str = "paused by user", *, source: str = "user") -> None:
        self._command("pause", reason=reason, source=source)
        if self._paused or self._stopping:
            return
        self._paused = True
        self._pause_reason = reason
        self._emit(RunStateChanged(time=self.clock.now(), state="paused", reason=reason))
        self.log("info", f"paused: {reason}; in-flight rollouts will finish")

    def resume(self, *, source: str = "user") -> None:
        self._command("resume", source=source)
        if not self._paused or self._stopping:
            return
        self._paused = False
        self._emit(RunStateChanged(time=self.clock.now(), state="running", reason="resumed"))
        self.log("info", "resumed")
        self._wake.set()

    def request_checkpoint(self) -> None:
        """After the current step; at once while paused with no step in progress (the pause
        may last: the checkpoint must not wait for the resume)."""
        self._command("checkpoint")
        self.checkpointer.requested = True
        if self._paused and self._trainer_idle and not self._stopping:
            if self._paused_checkpoint is None:
                self.log("info", "checkpoint requested; the run is paused: writing it now")
                self._paused_checkpoint = asyncio.ensure_future(self._checkpoint("requested"))
        else:
            self.log("info", "checkpoint requested; it is written after the current step")
        self._wake.set()

    def stop(
        self, reason: str = "stopped by user", *, source: str = "user", cause: StopCause = "user"
    ) -> None:
        """Stop gracefully; `cause` is why, typed (`RunFinished.cause`), the first stop's."""
        self._command("stop", reason=reason, source=source)
        if self._stopping:
            return
        self._stopping = True
        self._stop_event.set()
        self.stop_reason = reason
        self.stop_cause = cause
        self._emit(RunStateChanged(time=self.clock.now(), state="stopping", reason=reason))
        self.log("info", f"stopping ({reason}): no new rollouts; {self.waiting_for()}")
        self.session.interrupt()  # backend calls waiting on trouble give up
        self._queue.put_nowait(None)
        self._wake.set()

    def waiting_for(self) -> str:
        """What a graceful stop waits for, in words: the step in flight (its training call
        is never abandoned for a stop: a slow call is waited for, so no completed step is
        lost), then the final checkpoint."""
        if self._training_since is not None:
            running = self.clock.now() - self._training_since
            return (
                f"waiting for step {self.step + 1}'s training call (running "
                f"{running:.0f} s) to finish, then a checkpoint"
            )
        if self.checkpointer.writing == self.step:
            return f"waiting for step {self.step}'s checkpoint, being written"
        if self.checkpointer.last_step == self.step:
            return f"step {self.step} is checkpointed already"
        return f"writing a checkpoint of step {self.step}"

    def request_rollback(
        self,
        reason: str = "rolled back by user",
        lr_scale: float | None = None,
        *,
        automatic: bool = False,
    ) -> None:
        """Go back to the checkpoint holding the weights that sampled the best step (not the
        best step's own: it holds that step's update, `HealthWindow.rollback_point`), with the
        learning rate scaled by `lr_scale` (default `rollback_lr_scale`): after the current
        step, or at once while no step is in progress. A paused run resumes from there.
        `automatic`: asked for by `on_collapse = rollback` (the commands' source: `max_rollbacks` counts
        those)."""
        scale = self.config.rollback_lr_scale if lr_scale is None else float(lr_scale)
        if not 0 < scale <= 1:
            raise ValueError(f"a rollback's learning-rate scale must be in (0, 1], got {scale}")
        target = self.health.rollback_point()
        source = collapse_memory.AUTOMATIC if automatic else "user"
        self._command(
            "rollback",
            reason=reason,
            lr_scale=scale,
            to_step=target[0] if target else None,
            source=source,
            **rollback_basis(self.health, target),
        )
        if self._stopping:
            return
        if target is None or target[0] not in self.checkpointer.table:
            self.log("warning", f"nothing to roll back to: {no_rollback_point(self.health)}")
            return
        self._rollback_requested = (reason, scale, source)
        self.log(
            "info",
            f"rolling back to {target[1]} ({target_words(self.health, target)}) at "
            f"learning rate x{scale:g}: {reason}",
        )
        self._queue.put_nowait(None)  # wakes a trainer waiting for groups
        self._wake.set()

    async def stop_requested(self) -> None:
        """Returns once `stop` has been called (at once if it was): the run's start-up
        (model build, warm-up) waits on it, so a stop never waits for the start-up."""
        await self._stop_event.wait()

    def request_eval(self) -> None:
        self._command("eval")
        if self.task.eval_scenarios is None:
            self.log("warning", f"task {self.task.name!r} has no eval scenarios; nothing to do")
            return
        self.evaluator.requested = True
        self.evaluator.start_if_due()

    def knobs(self) -> Mapping[str, float | int]:
        return {
            "learning_rate": self._learning_rate,
            "temperature": self.sampling_defaults.temperature,
            "max_steps_off_policy": self._max_off,
            "rollout_workers": self._workers_wanted,
        }

    def set_knob(self, name: str, value: float | int) -> None:
        new = check_knob(name, value)
        old = self.knobs()[name]
        self._command("set", name=name, value=new, old=old)
        if name == "learning_rate":
            self._learning_rate = float(new)
        elif name == "temperature":
            self.sampling_defaults.temperature = float(new)
        elif name == "max_steps_off_policy":
            self._max_off = int(new)
        elif name == "rollout_workers":
            self._workers_wanted = int(new)
            self._ensure_workers()
        self.log("info", f"{name} changed from {old:g} to {new:g}")
        self._wake.set()

    # ------------------------------------------------------------------ events
    def _emit(self, event: Event) -> None:
        self.bus.publish(event)

    def log(self, level: str, message: str) -> None:
        self._emit(LogEmitted(time=self.clock.now(), level=level, message=message))

    # ------------------------------------------------------------------ run
    async def run(self) -> RunStatus:
        """Run workers and trainer until max_steps or a stop; returns how it ended.

        Stopped before it began (during the run's start-up), it samples and trains nothing:
        it writes the final checkpoint, if the weights are worth one (`_checkpoint`)."""
        if self._stopping:
            await self._checkpoint("final")
            return self._status()
        # Paused during the start-up, it starts paused: "running" here made every front end
        # count the pause as working time (the run-average rollouts/s read a fraction).
        self._emit(
            RunStateChanged(
                time=self.clock.now(),
                state="paused" if self._paused else "running",
                reason=self._pause_reason if self._paused else "",
            )
        )
        self._started_at = self.clock.now()
        self.step_metrics.started(self._started_at)
        over_budget = self.cost.budget_passed_by_next_step()  # a resumed run's budget
        if over_budget and self.step < self.config.max_steps:
            self.stop(
                f"{BUDGET_STOP}{over_budget}; raise max_cost_usd to go on",
                source=SOURCE_ENGINE,
                cause="budget",
            )
            await self._checkpoint("final")
            return self._status()
        self._ensure_workers()
        reporters = [
            asyncio.create_task(self.loop_lag.run(), name="loop-lag"),
            asyncio.create_task(self._report_throughput(), name="throughput"),
        ]
        if self.config.eval_at_start:
            self.evaluator.ask()
            self.evaluator.start_if_due()
        try:
            await self._train_loop()
            if (self.step >= self.config.max_steps or self.end_reason) and not self._stopping:
                await self._final_eval()
        except BackendInterrupted as exc:
            if not self._stopping:
                raise
            # The step's outcome on the backend is unknown: no checkpoint of it. A resume
            # continues from the last confirmed checkpoint.
            self.log(
                "warning", f"stopped during step {self.step + 1}, which is not recorded: {exc}"
            )
            return "stopped"
        finally:
            self._stopping = True
            self._wake.set()
            background = list(self._workers.values()) + reporters
            if self.evaluator.task_running is not None:
                background.append(self.evaluator.task_running)
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
        try:
            await self._checkpoint("final")
        except BackendInterrupted as exc:
            self.log("warning", f"the final checkpoint was not written: {exc}")
            return "stopped"
        if self.scenario_failure is not None:
            raise self.scenario_failure
        return self._status()

    def _status(self) -> RunStatus:
        """How a run that ended without failing ended: completed at max_steps, or when the
        task's scenarios ran out (and all drawn were trained); else stopped."""
        if self.step >= self.config.max_steps or (self.end_reason and not self.stop_reason):
            return "completed"
        return "stopped"

    # ------------------------------------------------------------------ workers
    def _may_start_group(self) -> bool:
        """Pacing: start a group only if it will be trained within the staleness bound.

        Groups are trained in arrival order, at least `min_batch` at a time. A group started
        now, with W groups ahead of it (held by the trainer, queued or in flight), is
        trained at most floor(W / min_batch) versions after the current one, so W must stay
        below (max_steps_off_policy + 1) * min_batch.
        """
        ahead = self._held + self._queue.qsize() + self._in_flight
        limit = (self._max_off + 1) * self.config.min_batch
        return (
            not self._paused
            and not self._stopping
            and self._rollback_requested is None
            and ahead < limit
        )

    def _ensure_workers(self) -> None:
        """Start workers up to the wanted count; surplus workers retire by themselves."""
        for index in range(self._workers_wanted):
            if index not in self._workers or self._workers[index].done():
                self._workers[index] = asyncio.create_task(
                    self._worker(index), name=f"rollout-worker-{index}"
                )

    async def _worker(self, index: int) -> None:
        client = self._client_factory()
        while not self._stopping and index < self._workers_wanted:
            while not self._may_start_group():
                if self._stopping or index >= self._workers_wanted:
                    return
                self._wake.clear()
                await self._wake.wait()
            try:
                group_id, position, scenario = self.scenarios.draw()
            except ScenariosExhausted as exc:
                self._scenarios_ran_out(exc.drawn)
                return
            except ScenarioError as exc:
                self._scenarios_failed(exc)
                return
            self._emit(
                GroupStarted(
                    time=self.clock.now(),
                    group_id=group_id,
                    scenario_index=position,
                    scenario_id=scenario.id,
                    policy_version=self.session.version,
                )
            )
            self._in_flight += 1
            self.meter.in_flight_changed(self.clock.now(), self._in_flight)
            try:
                group = await self._sample_group(client, group_id, scenario)
            finally:
                self._in_flight -= 1
                self.meter.in_flight_changed(self.clock.now(), self._in_flight)
                self._wake.set()
            if group is not None:
                self._queue.put_nowait(group)
            if self.scenarios.exhausted and not self._in_flight:
                self._queue.put_nowait(None)  # the trainer trains what is left, then ends

    def _scenarios_ran_out(self, drawn: int) -> None:
        """No scenario is left: once the groups drawn are sampled, the trainer trains them
        (a last batch may be smaller than min_batch) and the run ends, completed."""
        if self._ran_out_at is not None:
            return
        self._ran_out_at = drawn
        self.log(
            "info",
            f"the task's scenarios ran out after {drawn}: training what was "
            "drawn, then the run ends",
        )
        if not self._in_flight:
            self._queue.put_nowait(None)  # wake the trainer

    def _scenarios_failed(self, error: ScenarioError) -> None:
        """The task's scenarios raised: stop (the step in progress finishes and is
        checkpointed), then fail the run with this error (`run`)."""
        if self.scenario_failure is not None:
            return
        self.scenario_failure = error
        self.log("error", str(error))
        self.stop("the task's scenarios failed", source=SOURCE_ENGINE, cause="error")

    async def _sample_group(
        self, client: object, group_id: int, scenario: Scenario
    ) -> TrajectoryGroup | None:
        faults.hit("rollout", self.step + 1)
        started = self.clock.now()
        coros: list[Any] = []
        self._rolling[group_id] = (started, scenario, coros)
        try:
            results, summaries = await self.rollouts.run(
                self._roll_out(client, [scenario] * self.config.group_size, watch=coros)
            )
        except RolloutLoopClosed as exc:
            if not self._stopping:  # the rollout loop ended under a running pipeline
                self.log("error", f"rollouts cannot run any more: {exc}")
                self.stop(f"the rollout loop ended ({exc})", source=SOURCE_ENGINE, cause="error")
            return None
        finally:
            self._rolling.pop(group_id, None)
        errors = [r for r in results if isinstance(r, BaseException)]
        if any(isinstance(e, asyncio.CancelledError) for e in errors):
            raise asyncio.CancelledError
        trajectories: tuple[Trajectory, ...] = tuple(
            [r for r in results if isinstance(r, Trajectory)]
        )
        capped = 0
        if self.config.truncation_policy == "cap":
            trajectories, capped = cap_truncated(trajectories, self.config.truncated_reward_cap)
        self.step_metrics.rollouts_ended(len(results), failed=len(errors))
        if errors:
            self._last_failure = _describe(errors[0]).splitlines()[0]
        part, part_task = part_of(self.task, scenario)
        advantages: tuple[float, ...] | None = None
        if len(trajectories) >= self.config.min_members:
            try:
                advantages = tuple(
                    group_advantages(
                        [t.reward for t in trajectories],
                        self.config.advantage,
                        part_task.advantages,
                    )
                )
            except Exception as exc:  # the task's advantages hook: its error first
                errors.insert(0, exc)
        if advantages is None:
            self._fail_group(
                group_id, scenario, errors, len(results), raised=len(results) - len(trajectories)
            )
            return None
        if errors:
            self._log_failures(
                "warning",
                scenario,
                errors,
                len(results),
                f"dropped; the group trains with the other {len(trajectories)}",
            )
        group = TrajectoryGroup(
            group_id=group_id,
            scenario_id=scenario.id,
            trajectories=trajectories,
            started_at=started,
            finished_at=self.clock.now(),
            advantage_values=advantages,
            part=part,
            failed=len(errors),
            capped=capped,
        )
        self.step_metrics.group_sampled(group_id, self.session.version)
        self.meter.rollouts_finished(group.finished_at, len(trajectories), group.num_tokens)
        self.health.sampled(group.rewards, failed=len(errors))
        self._check_health()
        self._emit(
            GroupSampled(
                time=group.finished_at,
                group_id=group_id,
                scenario_id=scenario.id,
                policy_version=group.policy_version,
                num_trajectories=len(trajectories),
                num_tokens=group.num_tokens,
                reward_mean=group.reward_mean,
                trajectories=tuple(
                    dataclasses.replace(s, reward=t.reward, advantage=a, truncated=truncated(t))
                    for s, a, t in zip(summaries, advantages, trajectories, strict=False)
                ),
                scenario_index=self.scenarios.position(group_id),
                failed=len(errors),
                detail=_describe(errors[0]) if errors else "",
            )
        )
        return group

    def _fail_group(
        self,
        group_id: int,
        scenario: Scenario,
        errors: list[BaseException],
        members: int,
        raised: int,
    ) -> None:
        """Too few members left (or the advantages hook failed): the group is discarded as
        an error."""
        error = errors[0]
        detail = _describe(error)
        if len(errors) > 1:
            detail = f"{len(errors)} of {members} rollouts failed, first: {detail}"
        self._discard_counts("error")
        self._emit(
            GroupDiscarded(
                time=self.clock.now(),
                group_id=group_id,
                scenario_id=scenario.id,
                reason="error",
                policy_version=self.session.version,
                trainer_version=self.session.version,
                num_tokens=0,
                detail=detail,
                scenario_index=self._consumed(group_id),
                step=self.step + 1,
            )
        )
        self._log_failures("error", scenario, errors, members, "the group is discarded")
        self._last_failure = _describe(error).splitlines()[0]
        self.health.failed(raised, members)
        self._check_health()

    def _log_failures(
        self,
        level: str,
        scenario: Scenario,
        errors: list[BaseException],
        members: int,
        outcome: str,
    ) -> None:
        error = errors[0]
        if isinstance(error, RolloutTimeout):
            where = str(error)  # where the rollout was waiting says more than a traceback
        else:
            tb = "".join(traceback.format_exception(error)).rstrip()
            where = f"{_describe(error)}\n{tb}"
        self.log(
            level,
            f"rollout of scenario {scenario.id} failed ({len(errors)}/{members}, "
            f"{outcome}): {where}",
        )

    async def _roll_out(
        self,
        client: object,
        scenarios: list[Scenario],
        *,
        watch: list[Any] | None = None,
        defaults: SamplingDefaults | None = None,
    ) -> tuple[list[Trajectory | BaseException], tuple[TrajectorySummary, ...]]:
        """Runs on the rollout loop: the rollouts of `scenarios` (one each, together) and the
        summaries of those that succeeded, in order, for `GroupSampled` (decoding text is
        rollout-side work). Touches no pipeline state and publishes nothing: that is the
        engine loop's. `watch` gets the rollouts' coroutines (`stalled` reads where they
        wait); `defaults`: their own sampling defaults (an evaluation's protocol), else the
        run's."""
        limit = self.config.rollout_timeout or None
        coros = [self._rollout(client, s, defaults) for s in scenarios]
        if watch is not None:
            watch.extend(coros)
        results: list[Trajectory | BaseException] = await run_together(iter(coros), timeout=limit)
        for i, result in enumerate(results):
            if isinstance(result, DeadlinePassed):
                results[i] = RolloutTimeout(
                    f"timed out after {limit:g} s (rollout_timeout) and was cancelled; "
                    f"{self._waiting_at(scenarios[i], result)}"
                )
        return results, tuple(self._summary(t) for t in results if isinstance(t, Trajectory))

    def _summary(self, trajectory: Trajectory) -> TrajectorySummary:
        messages: tuple[Any, ...] = trajectory.messages
        tokenizer = self.session.tokenizer
        if not messages and tokenizer is not None:
            last = trajectory.turns[-1]
            text = tokenizer.decode(list(last.prompt_tokens) + list(last.tokens))
            messages = ({"role": "transcript", "content": text},)
        return TrajectorySummary(
            reward=trajectory.reward,
            policy_version=trajectory.policy_version,
            num_tokens=trajectory.num_tokens,
            messages=messages,
            metrics=dict(trajectory.metrics),
        )

    async def _rollout(
        self, client: object, scenario: Scenario, defaults: SamplingDefaults | None = None
    ) -> Trajectory:
        """One rollout, checked; `_roll_out` bounds it by `rollout_timeout`. `defaults` go
        with its requests (its capture key carries them to the policy server)."""
        if part_of(self.task, scenario)[1].samples_tokens:
            # a token-level task samples without the policy server
            return await captured_rollout(
                self.task, self._token_sampler(defaults), self.model_name, scenario, None
            )
        captures = self._captures() if self._captures is not None else None
        return await captured_rollout(
            self.task, client, self.model_name, scenario, captures, defaults
        )

    def _token_sampler(self, defaults: SamplingDefaults | None = None) -> DirectSampler:
        """What a token-level task's rollouts sample with (`Task.samples_tokens`): the
        backend's own sampling, as the policy server reaches it from the rollout loop, with
        the run's live sampling defaults (or `defaults`, an evaluation's). Made on first
        use, once the rollout loop runs."""
        if defaults is not None:
            return DirectSampler(
                self.rollouts.policy_for_server(self.session), defaults, self.session.tokenizer
            )
        if self._direct_sampler is None:
            self._direct_sampler = DirectSampler(
                self.rollouts.policy_for_server(self.session),
                self.sampling_defaults,
                self.session.tokenizer,
            )
        return self._direct_sampler

    def _waiting_at(self, scenario: Scenario, exc: BaseException) -> str:
        """Where a timed-out rollout was waiting: the deepest line of the task's file in the
        cancelled traceback, else the file its rollout is defined in."""
        frames = traceback.extract_tb(exc.__context__.__traceback__) if exc.__context__ else []
        return self._where(scenario, frames, "was")

    def stalled(self, now: float) -> tuple[StalledRollout, ...]:
        """The groups whose rollouts have run `stall_after` seconds or more, oldest first,
        each with where in the task's code its first unfinished rollout waits."""
        out = []
        for group_id, (started, scenario, coros) in sorted(
            self._rolling.items(), key=lambda kv: kv[1][0]
        ):
            if now - started < self.stall_after:
                continue
            frames = next((f for f in map(_awaiting, coros) if f), [])
            frame = self._task_frame(scenario, frames)
            out.append(
                StalledRollout(
                    group_id=group_id,
                    scenario_id=scenario.id,
                    age=now - started,
                    waiting_at=self._where(scenario, frames, "is"),
                    file=frame.filename if frame else "",
                    line=frame.lineno or 0 if frame else 0,
                    code=(frame.line or "").strip() if frame else "",
                )
            )
        return tuple(out)

    def _rollout_source(self, scenario: Scenario) -> tuple[Task, str | None]:
        """The task (part) that rolls `scenario` out, and the file its rollout is in."""
        _, part_task = part_of(self.task, scenario)
        rollout = group_rollout_of(part_task) or part_task.rollout
        try:
            return part_task, inspect.getsourcefile(inspect.unwrap(rollout))  # type: ignore[arg-type]
        except TypeError:
            return part_task, None

    def _task_frame(
        self, scenario: Scenario, frames: list[traceback.FrameSummary]
    ) -> traceback.FrameSummary | None:
        """The deepest of `frames` in the file of the task's rollout, if any is."""
        _, source = self._rollout_source(scenario)
        own = [f for f in frames if source is not None and f.filename == source]
        return own[-1] if own else None

    def _where(self, scenario: Scenario, frames: list[traceback.FrameSummary], verb: str) -> str:
        """ "it was (`verb`) waiting at FILE:LINE (code)": the deepest of `frames` in the file
        of the task's rollout, else that file."""
        part_task, source = self._rollout_source(scenario)
        frame = self._task_frame(scenario, frames)
        if frame is not None:
            return (
                f"it {verb} waiting at {frame.filename}:{frame.lineno} "
                f"({(frame.line or '').strip()})"
            )
        if source is not None:
            return f"its rollout is in {source} (task {part_task.name!r})"
        return f"task {part_task.name!r}"

    # ------------------------------------------------------------------ trainer
    def _discard_counts(self, reason: DiscardReason) -> None:
        self.step_metrics.discarded(reason)

    def _consumed(self, group_id: int) -> int:
        """The group is consumed by the step being collected (trained, or dropped while
        collecting it); returns its scenario position (-1 if it has none)."""
        return self.scenarios.consumed(group_id, self.step + 1)

    async def _next_group(self) -> TrajectoryGroup | None:
        """The next queued group, or None once a stop is requested.

        `stop()` puts a None on the queue to wake this wait. Awaiting the queue directly
        (no helper task) matters for pacing: a group leaves the queue only when this
        coroutine resumes and counts it as held, so workers never see it in neither place.
        """
        if self._stopping or (
            self._ran_out_at is not None and not self._in_flight and self._queue.empty()
        ):
            return None
        group = await self._queue.get()
        self._wake.set()
        return group

    async def _collect_batch(self) -> list[TrajectoryGroup] | None:
        """Wait for `min_batch` usable groups, then also take what is queued, up to the max."""
        batch: list[TrajectoryGroup] = []
        while len(batch) < self.config.groups_per_step:
            if len(batch) >= self.config.min_batch and self._queue.empty():
                break
            group = await self._next_group()
            if group is None:
                if self._stopping or not batch:
                    return None
                return batch  # the scenarios ran out: train what there is
            staleness = self.session.version - group.policy_version
            if staleness > self._max_off and not self._inflight and self.config.discard_stale:
                self._discard_counts("stale")
                self._emit(
                    GroupDiscarded(
                        time=self.clock.now(),
                        group_id=group.group_id,
                        scenario_id=group.scenario_id,
                        reason="stale",
                        policy_version=group.policy_version,
                        trainer_version=self.session.version,
                        num_tokens=group.num_tokens,
                        detail=f"{staleness} steps off policy (limit {self._max_off})",
                        scenario_index=self._consumed(group.group_id),
                        step=self.step + 1,
                    )
                )
                continue
            if not group.has_variance():
                # Counted in the batch (its rewards are real) but carries no gradient.
                self._discard_counts("zero_variance")
                self._emit(
                    GroupDiscarded(
                        time=self.clock.now(),
                        group_id=group.group_id,
                        scenario_id=group.scenario_id,
                        reason="zero_variance",
                        policy_version=group.policy_version,
                        trainer_version=self.session.version,
                        num_tokens=group.num_tokens,
                        detail=f"all rewards {group.rewards[0]:g}",
                        scenario_index=self.scenarios.position(group.group_id),
                        step=self.step + 1,
                    )
                )
            batch.append(group)
            self._held = len(batch)
        return batch

    async def _train_loop(self) -> None:
        while self.step < self.config.max_steps and not self._stopping:
            if self._rollback_requested is not None:
                await self._roll_back()
                continue
            wait_started = self.clock.now()
            self.meter.waiting_started(wait_started)
            self._trainer_idle = True
            try:
                batch = await self._collect_batch()
            finally:
                self._trainer_idle = False
            self.meter.waiting_finished(self.clock.now())
            if self._paused_checkpoint is not None:  # written while paused: before training
                checkpoint, self._paused_checkpoint = self._paused_checkpoint, None
                await checkpoint  # its failure fails the run, as a step's checkpoint's does
            if batch is None:
                if self._rollback_requested is not None and not self._stopping:
                    continue
                if self._ran_out_at is not None and not self._stopping:
                    self.end_reason = (
                        f"{RAN_OUT} after {self._ran_out_at}: "
                        f"{self.step} of {self.config.max_steps} steps trained"
                    )
                    self.log("info", self.end_reason)
                return
            train_started = self.clock.now()
            self.meter.trainer_started(train_started)
            trainable = [g for g in batch if g.has_variance()]
            datums = self.session.build_datums(trainable)
            over_budget = (
                self.cost.budget_passed_by_training(
                    self.session.usage, sum(d.model_input.length for d in datums)
                )
                if self.cost.budgeted
                else ""
            )
            if over_budget:
                self.stop(f"{BUDGET_STOP}{over_budget}", source=SOURCE_ENGINE, cause="budget")
                return
            version_before = self.session.version
            metrics: dict[str, float] = {}
            tokens: tuple[TrajectoryTokens, ...] = ()
            faults.hit("train", self.step + 1)
            learning_rate, schedule_metrics = self._step_learning_rate()
            metrics.update(schedule_metrics)
            if datums:
                self._training_since = train_started
                try:
                    await faults.slow_down("train", self.step + 1)  # test hook
                    result = await self.session.train(
                        datums,
                        loss_fn=self.config.loss_fn,
                        learning_rate=learning_rate,
                        num_substeps=self.config.num_substeps,
                    )
                finally:
                    self._training_since = None
                metrics.update(result.metrics)
                tokens = await asyncio.to_thread(
                    trained_tokens, datums, result.trainer_logprobs, result.entropy
                )
                metrics[keys.TRAIN_NUM_DATUMS] = result.num_datums
                metrics[keys.TRAIN_TOKENS] = result.num_tokens
            else:
                metrics[keys.TRAIN_SKIPPED] = 1.0
                if not self._skipping:  # say it once per run of such steps, not every step
                    self.log(
                        "info",
                        f"step {self.step + 1}: every group had equal rewards; "
                        "no gradient until one differs",
                    )
            self._skipping = not datums
            for group in batch:
                self._consumed(group.group_id)
            self.step += 1
            self._held = 0
            self._wake.set()
            now = self.clock.now()
            self.meter.trainer_finished(now)
            split = [self.step_metrics.staleness_split(g, version_before) for g in batch]
            self.meter.trained(now, int(metrics.get(keys.TRAIN_TOKENS, 0)), split)
            metrics.update(
                self.step_metrics.build(
                    batch,
                    version_before,
                    split,
                    wait_started=wait_started,
                    train_started=train_started,
                    now=now,
                    queue_depth=self._queue.qsize(),
                    # The dashboard's windowed rate: rollouts finished during this step alone
                    # read 0.0 whenever sampling was ahead and the step took a batch already
                    # queued.
                    rollouts_per_s=self.meter.rollouts_per_s(now, elapsed=now - self._started_at),
                    learning_rate=learning_rate,
                    cost=self.cost.step_metrics(self.session.usage),
                )
            )
            shapes, histograms = step_distributions(batch, self._reward_components)
            metrics.update(shapes)
            if self.config.truncation_policy == "cap":
                metrics[keys.TRUNCATED_CAPPED] = float(sum(g.capped for g in batch))
            if self._inflight:
                metrics[keys.STALENESS_BOUND] = 1.0
            self._emit(
                StepTrained(
                    time=now,
                    step=self.step,
                    policy_version=self.session.version,
                    metrics=metrics,
                    group_ids=tuple(g.group_id for g in batch),
                    histograms=histograms,
                )
            )
            if tokens:
                if self._pieces is None:
                    self._pieces = PieceBook(getattr(self.session, "tokenizer", None))
                self._emit(
                    await asyncio.to_thread(
                        tokens_event,
                        now,
                        self.step,
                        tokens,
                        self._pieces,
                        self.config.keep_token_steps,
                    )
                )
            over_budget = self.cost.budget_passed_by_next_step()
            if over_budget and self.step < self.config.max_steps:
                self.stop(f"{BUDGET_STOP}{over_budget}", source=SOURCE_ENGINE, cause="budget")
            best_before = self.health.best_step
            collapse = self.health.stepped(
                self.step,
                metrics[keys.REWARD_MEAN],
                flat_share(metrics, len(batch)),
                groups=len(batch),
                sampled_by=max(g.policy_version for g in batch),
            )
            why = self.checkpointer.due(self.step, best_before)
            if why is not None:
                await self._checkpoint(why)
            self.checkpointer.keep_rollback_point()
            if collapse is not None:
                self._collapsed(collapse)
            if self.config.eval_every and self.step % self.config.eval_every == 0:
                self.evaluator.ask()
            self.evaluator.start_if_due()

    def _step_learning_rate(self) -> tuple[float, dict[str, float]]:
        """The rate the next step trains at: the live knob times the schedule's factor at
        its step (engine.training.lr_schedule), and the factor as a metric where a schedule
        or a warm-up is set (a constant run's metrics stay as they were)."""
        config = self.config
        if config.lr_schedule == "constant" and not config.lr_warmup_steps:
            return self._learning_rate, {}
        factor = lr_factor(config.lr_schedule, self.step, config.max_steps, config.lr_warmup_steps)
        return self._learning_rate * factor, {keys.LR_FACTOR: factor}

    def remember(self, earlier: Iterable[Event], up_to: int) -> None:
        """Continue the collapse tracking of this run's earlier processes (a resumed run),
        from its stored events (`engine.metrics.collapse_memory`): the best step, the steps' means,
        the automatic rollbacks made. A collapse seen before is named again; it is acted on
        again only to roll back (`on_collapse = rollback` with rollbacks left: a run stopped
        by its collapse, resumed so): the process that saw it waited or stopped already."""
        self.rollbacks = collapse_memory.replay(
            self.health, earlier, groups_per_step=self.config.groups_per_step, up_to=up_to
        )
        self.checkpointer.keep_rollback_point()
        collapse = self.health.collapse
        if collapse is None:
            return
        self.log(
            "warning",
            f"resumed after a collapse: {collapse.words()} ({self.rollbacks} "
            f"of {self.config.max_rollbacks} automatic rollbacks made)",
        )
        if (
            self.on_collapse == "rollback"
            and self.rollbacks < self.config.max_rollbacks
            and self.checkpointer.rollback_target() is not None
        ):
            self._collapsed(collapse)

    async def _roll_back(self) -> None:
        """Go back to the rollback point (`request_rollback`): rollouts in flight and queued
        are dropped, the backend loads the checkpoint's weights and optimizer state as its
        policy version, the store forgets what came after it (as a resume does:
        `RunStore.reconcile`), the scenario stream continues from its resume state, and the
        learning rate is scaled."""
        assert self._rollback_requested is not None
        reason, scale, source = self._rollback_requested
        target = self.checkpointer.rollback_target()
        if target is None:
            self._rollback_requested = None
            self.log("warning", "the rollback point is gone; not rolled back")
            return
        name, path, state = self.checkpointer.table[target[0]]
        workers = list(self._workers.values())
        evaluation = self.evaluator.running()
        if evaluation is not None:
            workers.append(evaluation)
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        self._workers.clear()
        self._queue = asyncio.Queue()
        self._in_flight = self._held = 0
        await self.session.rewind(path, state.policy_version, state.step)
        counts: Mapping[str, int] = {}
        if self.rewind_store is not None:
            counts = await self.rewind_store(state.step)
        undone = self.step - state.step
        self.restore(
            dataclasses.replace(
                state,
                next_group_id=max(
                    state.next_group_id,
                    int(counts.get("next_group_id", 0)),
                    self.scenarios.next_group_id,
                ),
            )
        )
        self.checkpointer.rewound(state.step)
        best = self.health.best_step  # kept, and recorded: it may be one of the undone steps
        self.health.rewind(state.step)
        old = self._learning_rate
        self._learning_rate = old * scale
        self.step_metrics.rewound(self.clock.now())
        self._skipping = False
        self._rollback_requested = None
        kept: dict[str, int | float] = (
            {} if best is None else {"best_step": best[0], "best": best[1]}
        )
        if self.health.best_sampled_by is not None:
            kept["best_sampled_by"] = self.health.best_sampled_by
        self._command(
            "rolled_back",
            source=source,
            to_step=state.step,
            checkpoint=name,
            checkpoint_version=state.policy_version,
            reason=reason,
            name="learning_rate",
            value=self._learning_rate,
            old=old,
            steps_undone=undone,
            **kept,
        )
        self.log(
            "warning",
            f"rolled back to {name} (step {state.step}, weights version "
            f"{state.policy_version}{best_words(self.health, best)}; {undone} later step(s) undone), "
            f"learning rate {old:g} -> {self._learning_rate:g}: {reason}",
        )
        if self._paused:
            self.resume(source=source)
        self._ensure_workers()
        self._wake.set()

    # ------------------------------------------------------------------ health
    def _check_health(self) -> None:
        """Pause (never exit) when a full window of recent groups says the run has stopped
        learning: failures, or equal rewards below the best seen (`engine.metrics.health`); a group
        that has converged, or a run that has seen one reward only, goes on."""
        if self._paused or self._stopping or self._rollback_requested:
            return
        alarm = self.health.group_alarm()
        if alarm is None:
            return
        kind, reason = alarm
        if kind == "error":
            reason += f"; the last: {_shorten(self._last_failure)}"
        self._health_pause(reason)
        self.health.clear_groups()

    def _collapsed(self, collapse: Collapse) -> None:
        """A collapse was just seen (`engine.metrics.health`): roll back, wait or stop, as
        `on_collapse` says."""
        words = collapse.words()
        # said once: by the stop, pause or rollback it leads to (their reasons carry the
        # words), or here when it leads to none
        if self._stopping or self._rollback_requested or self._paused:
            self.log("warning", words)
        if self._stopping or self._rollback_requested:
            return
        if self.on_collapse == "rollback":
            if self.rollbacks < self.config.max_rollbacks and collapse.checkpoint_step is not None:
                self.rollbacks += 1
                self.request_rollback(
                    f"{words} (on_collapse = rollback, "
                    f"{self.rollbacks} of {self.config.max_rollbacks})",
                    automatic=True,
                )
                return
            why = (
                "no checkpoint of the weights that sampled the best step"
                if collapse.checkpoint_step is None
                else f"max_rollbacks ({self.config.max_rollbacks}) reached"
            )
            self.log("warning", f"{words}; no rollback: {why}")
            fallback = self.on_health_pause
        else:
            fallback = self.on_collapse
        if self._paused:
            return
        if fallback == "stop":
            self.health_stop_reason = words  # the stop says it (state, log, summary)
            self.stop(f"health check: {words}", source=collapse_memory.AUTOMATIC, cause="health")
        else:
            self.pause(
                f"{words}; roll back to it, or resume"
                if collapse.checkpoint
                else f"{words}; resume, or stop",
                source=collapse_memory.AUTOMATIC,
            )

    def _health_pause(self, reason: str) -> None:
        """Pause for a person to decide (`wait`), or stop gracefully (`stop`: nobody is
        watching, so a CI job ends instead of hanging; the command exits 3)."""
        if self.on_health_pause == "stop":
            self.health_stop_reason = reason  # the stop says it (state, log, summary)
            self.stop(f"health check: {reason}", source="on_health_pause", cause="health")
        else:
            self.pause(reason, source="on_health_pause")

    async def _report_throughput(self) -> None:
        while True:
            await asyncio.sleep(self.report_interval)
            now = self.clock.now()
            snap = self.meter.snapshot(now, elapsed=now - self._started_at)
            self._emit(
                ThroughputMeasured(
                    stalled=self.stalled(now),
                    time=now,
                    window=snap.window,
                    rollouts_per_s=snap.rollouts_per_s,
                    sampled_tokens_per_s=snap.sampled_tokens_per_s,
                    trained_tokens_per_s=snap.trained_tokens_per_s,
                    queue_depth=self._queue.qsize(),
                    in_flight=self._in_flight,
                    trainer_busy=snap.trainer_busy,
                    sampler_busy=snap.sampler_busy,
                    verdict=snap.verdict,
                    staleness_in_flight=snap.staleness_in_flight,
                    staleness_queued=snap.staleness_queued,
                    loop_lag_p99=self.loop_lag.percentile(99),
                )
            )

    # ------------------------------------------------------------------ evaluator
    def _eval_protocol(self) -> EvalProtocol:
        """How an evaluation starting now samples (`eval_*` settings), built as
        `tinker-tui eval` builds the protocol of the run's checkpoints
        (`RunEvalSettings`): `eval_samples` per eval scenario, the pinned
        `eval_temperature` and `eval_max_tokens` where set, else the run's live sampling
        defaults (for requests that leave them out), and its renderer."""
        # a session stand-in (tests, simulations) may have no renderer of its own
        renderer = str(getattr(self.session, "renderer_name", "") or "")
        settings = RunEvalSettings.of(self.config.as_dict())
        return settings.protocol(renderer, self.sampling_defaults)

    async def _final_eval(self) -> None:
        """Evaluate the final policy, once, before the run ends (`Evaluator.final`): no new
        rollouts first, and no other evaluation."""
        if self.task.eval_scenarios is None:
            return
        self._stopping = True
        self._wake.set()
        for worker in self._workers.values():
            worker.cancel()
        await asyncio.gather(*self._workers.values(), return_exceptions=True)
        await self.evaluator.final()

    # ------------------------------------------------------------------ checkpoints, resume
    def resume_state(self) -> ResumeState:
        """What a run resumed from a checkpoint taken now needs besides the weights.

        Taken at a step boundary, before any await: a position counts as consumed only if
        the step that consumed it is at most the current one; the rest (in flight, queued,
        held by the trainer, dropped while collecting the next batch) are run again.
        """
        return ResumeState(
            step=self.step,
            policy_version=self.session.version,
            **self.scenarios.at_checkpoint(self.step),
            warmup_done=self.warmup_done,
            knobs=dict(self.knobs()),
        )

    @property
    def trained_nothing(self) -> bool:
        """No group of the run (a resumed run's earlier processes included) had rewards that
        differed, so no step changed the weights: a run that ends so exits with a code of
        its own (`RunFinished.cause` "no_signal"), not as a success."""
        return self.step_metrics.trained_nothing

    def carry_totals(self, metrics: Mapping[str, float]) -> None:
        """Continue the run's totals (tokens, cost, group counts) from the last step an
        earlier process of this run recorded; after `restore` (the step it resumes at)."""
        self.cost.carry(metrics, steps=self.step)
        self.step_metrics.carry_totals(metrics)

    def restore(self, state: ResumeState) -> None:
        """Continue from a checkpoint's resume state; call before `run`.

        Replays the scenario stream from the seed to the saved position; the positions the
        checkpoint had not consumed are drawn first. The policy is loaded by the caller."""
        if not self.scenarios.restore(state):
            self.log(
                "warning",
                "the task's scenarios are not reproducible from the seed (the "
                "random state after replaying them differs from the saved one); "
                "resumed positions may not be the scenarios first drawn",
            )
        self.step = state.step
        self.checkpointer.restored(state)
        self.warmup_done = state.warmup_done

    async def _checkpoint(self, why: str) -> None:
        """A full checkpoint of the current step (`Checkpointer.write`)."""
        await self.checkpointer.write(
            self.step, why, self.resume_state, warmup_done=self.warmup_done
        )


def _awaiting(coro: Any) -> list[traceback.FrameSummary]:
    """The frames a suspended coroutine waits in, outermost first (each awaits the next); []
    once it ended. Read from the engine's thread while it runs on the rollout loop's: a
    chain read mid-step is merely a step old."""
    frames = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        code = frame.f_code
        frames.append(
            traceback.FrameSummary(
                code.co_filename,
                frame.f_lineno,
                code.co_name,
                line=linecache.getline(code.co_filename, frame.f_lineno).strip(),
            )
        )
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return frames


def _describe(error: BaseException) -> str:
    """An error in one line: `ValueError: message`."""
    return f"{type(error).__name__}: {error}"


def _shorten(text: str, most: int = 160) -> str:
    """At most `most` characters, cut with an ellipsis (a pause reason is one line)."""
    return text if len(text) <= most else text[: most - 1] + "…"
