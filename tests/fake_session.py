"""A scripted stand-in for an engine session, for app tests and snapshots.

`FakeSession.run()` publishes a fixed list of events (times from a `FakeClock`), then waits
until `control.stop()` is called, publishes `RunFinished` and returns "stopped". Its control
records every call and answers like the engine would (a `CommandReceived`, state changes, a
checkpoint on request, knob changes checked by the engine's own `check_knob`), so the UI can
be driven end to end without torch or a network.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.config import LIVE_KNOBS, check_knob
from tinker_tui.engine.control.interface import Session
from tinker_tui.engine.events import (
    CheckpointSaved,
    CommandReceived,
    EvalCompleted,
    Event,
    EventBus,
    GroupDiscarded,
    GroupSampled,
    GroupStarted,
    LogEmitted,
    RunFinished,
    RunStarted,
    RunStateChanged,
    RunStatus,
    StartupProgressed,
    StepTrained,
    ThroughputMeasured,
    TrajectorySummary,
)
from tinker_tui.engine.metrics import metric_keys as keys

if TYPE_CHECKING:
    from textual.pilot import Pilot

NUM_STEPS = 20
MAX_STEPS = 50
GROUP_SIZE = 4
GROUPS_PER_STEP = 2
QUESTIONS = ("Is the sky blue?", "Can a cat swim?", "Will it rain tomorrow?", "Are you ready?")
ANSWER_REWARDS = {"maybe": 1.0, "no": 0.75, "yes": 0.5, "blue": 0.0}
#: The run's live knobs (`engine.config.LIVE_KNOBS`) at the start of the script.
KNOBS = dict(zip(LIVE_KNOBS, (2e-3, 1.0, 1, 4), strict=True))


def reward_at(step: int) -> float:
    """Rising mean reward with a little deterministic wobble."""
    return round(0.2 + 0.65 * (1.0 - math.exp(-step / 7.0)) + 0.04 * math.sin(step * 1.7), 4)


def answers_for(group_id: int) -> list[str]:
    """Four answers that get better as the run goes on (deterministic)."""
    words = ["blue", "yes", "no", "maybe"]
    start = min(3, group_id // 8)
    return [words[min(3, start + (group_id + k) % 3)] for k in range(GROUP_SIZE)]


def trajectories_for(group_id: int, version: int) -> tuple[TrajectorySummary, ...]:
    question = QUESTIONS[group_id % len(QUESTIONS)]
    out = []
    for k, answer in enumerate(answers_for(group_id)):
        messages: list[dict] = [
            {"role": "user", "content": f"Answer with one word: yes, no or maybe. {question}"}
        ]
        if group_id % 5 == 0 and k == 0:  # a rollout that used a tool
            messages += [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": '{"q": "sky"}'},
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "call_1",
                    "name": "lookup",
                    "content": "The sky is blue on clear days.",
                },
            ]
        messages.append({"role": "assistant", "content": answer})
        out.append(
            TrajectorySummary(
                reward=ANSWER_REWARDS[answer],
                policy_version=version,
                num_tokens=3 + k + (2 if len(messages) > 2 else 0),
                messages=tuple(messages),
            )
        )
    return tuple(out)


WARMUP_STEPS = 10


def run_started(clock: FakeClock) -> RunStarted:
    return RunStarted(
        time=clock.now(),
        run_id="run-0001",
        name="yes-no-maybe",
        backend="local",
        base_model="tiny-llama-2x64",
        max_steps=MAX_STEPS,
        start_step=0,
        config={"group_size": GROUP_SIZE, "groups_per_step": GROUPS_PER_STEP, **KNOBS},
    )


def startup_events(clock: FakeClock, warmup_until: int = WARMUP_STEPS) -> list[Event]:
    """The start-up as the engine tells it: the model loads, then the format warm-up
    (up to step `warmup_until`), then the first rollouts once the warm-up is done."""
    events: list[Event] = [
        StartupProgressed(
            time=clock.now(), phase="loading_model", detail="tiny-llama-2x64 on the local backend"
        ),
        LogEmitted(
            time=clock.now(),
            level="info",
            message=f"format warm-up: {WARMUP_STEPS} supervised steps on 12 examples before RL",
        ),
    ]
    clock.advance(1.5)
    events.append(StartupProgressed(time=clock.now(), phase="warmup", done=0, total=WARMUP_STEPS))
    for done in range(1, warmup_until + 1):
        clock.advance(0.2)
        events.append(
            StartupProgressed(
                time=clock.now(),
                phase="warmup",
                done=done,
                total=WARMUP_STEPS,
                loss=round(2.0 / done, 4),
            )
        )
    if warmup_until >= WARMUP_STEPS:
        events.append(StartupProgressed(time=clock.now(), phase="first_rollouts"))
    return events


def started(clock: FakeClock, group_id: int, version: int) -> GroupStarted:
    """A rollout worker starts the group (its scenario's position: its id, here)."""
    return GroupStarted(
        time=clock.now(),
        group_id=group_id,
        scenario_index=group_id,
        scenario_id=f"q{group_id % len(QUESTIONS):02d}-{group_id}",
        policy_version=version,
    )


def scripted_events(clock: FakeClock) -> list[Event]:
    """The fixed event list; advances `clock` as it goes (starting from its current time)."""
    events: list[Event] = []
    add = events.append
    add(run_started(clock))
    add(RunStateChanged(time=clock.now(), state="running"))
    events += startup_events(clock)
    add(
        LogEmitted(
            time=clock.now(), level="info", message="run yes-no-maybe started on local backend"
        )
    )
    discard_at = {4: "stale", 7: "zero_variance", 11: "error", 15: "stale", 18: "zero_variance"}
    for step in range(1, NUM_STEPS + 1):
        # uneven spacing so the throughput sparklines have some shape
        clock.advance(0.3 + 0.1 * ((step * 7) % 5))
        if discard_at.get(step) == "error":
            add(started(clock, 1000 + step, step - 1))
        for k in range(GROUPS_PER_STEP):
            group_id = GROUPS_PER_STEP * step + k
            trajectories = trajectories_for(group_id, step - 1)
            add(started(clock, group_id, step - 1))
            add(
                GroupSampled(
                    time=clock.now(),
                    group_id=group_id,
                    scenario_id=f"q{group_id % len(QUESTIONS):02d}-{group_id}",
                    policy_version=step - 1,
                    num_trajectories=GROUP_SIZE,
                    num_tokens=sum(t.num_tokens for t in trajectories),
                    reward_mean=sum(t.reward for t in trajectories) / GROUP_SIZE,
                    trajectories=trajectories,
                )
            )
        if step in discard_at:
            reason = discard_at[step]
            failed = reason == "error"
            group_id = 1000 + step if failed else GROUPS_PER_STEP * step
            add(
                GroupDiscarded(
                    time=clock.now(),
                    group_id=group_id,
                    scenario_id=f"q{group_id % len(QUESTIONS):02d}-{group_id}",
                    reason=reason,  # type: ignore[arg-type]
                    policy_version=step - 1,
                    trainer_version=step + 1 if reason == "stale" else step - 1,
                    num_tokens=0 if failed else GROUP_SIZE * 4,
                    detail={
                        "stale": "2 steps off policy (limit 1)",
                        "zero_variance": "all rewards 1",
                        "error": "RuntimeError: sampler crashed",
                    }[reason],
                    step=step,
                )
            )
        clock.advance(0.1)
        add(
            StepTrained(
                time=clock.now(),
                step=step,
                policy_version=step,
                group_ids=tuple(
                    GROUPS_PER_STEP * step + k
                    for k in range(GROUPS_PER_STEP)
                    if not (k == 0 and discard_at.get(step) == "stale")
                ),
                metrics={
                    keys.REWARD_MEAN: reward_at(step),
                    "loss": round(0.9 / step, 4),
                    keys.LEARNING_RATE: 2e-3 if step <= 12 else 1e-3,
                    keys.TRAIN_TIME: round(0.05 + 0.01 * (step % 4), 3),
                    keys.WAIT_BATCH_TIME: round(0.04 + 0.02 * ((step * 3) % 5), 3),
                    "task/correct": round(min(1.0, 0.1 + step / 22), 4),
                    keys.STEP_TIME: 0.1,
                    keys.STALENESS_MEAN: 0.5,
                    keys.STALENESS_MAX: 1.0,
                },
            )
        )
        add(
            ThroughputMeasured(
                time=clock.now(),
                window=5.0,
                rollouts_per_s=round(40 + 8 * math.sin(step / 2.0) + step, 1),
                sampled_tokens_per_s=round(1800 + 300 * math.cos(step / 3.0) + 20 * step, 1),
                trained_tokens_per_s=round(1500 + 10 * step, 1),
                queue_depth=step % 3,
                in_flight=4,
                trainer_busy=0.35,
                sampler_busy=0.9,
                verdict="sampler-bound: add rollout workers",
                staleness_in_flight={0: 14, 1: 5},
                staleness_queued={0: 9, 1: 7, 2: 1},
            )
        )
        if step % 5 == 0:
            add(
                EvalCompleted(
                    time=clock.now(),
                    step=step,
                    policy_version=step,
                    metrics={
                        keys.EVAL_REWARD_MEAN: round(reward_at(step) + 0.05, 4),
                        keys.EVAL_NUM_SCENARIOS: 20.0,
                        keys.EVAL_ERRORS: 0.0,
                    },
                )
            )
            add(
                LogEmitted(
                    time=clock.now(),
                    level="info",
                    message=f"step {step}: reward/mean {reward_at(step):.3f}",
                )
            )
        if step == 11:
            add(
                LogEmitted(
                    time=clock.now(),
                    level="warning",
                    message="group 1011 failed: RuntimeError: sampler crashed",
                )
            )
        if step == 12:
            add(
                CommandReceived(
                    time=clock.now(),
                    command="set",
                    args={"name": "learning_rate", "value": 1e-3, "old": 2e-3},
                )
            )
            add(
                LogEmitted(
                    time=clock.now(),
                    level="info",
                    message="learning_rate changed from 0.002 to 0.001",
                )
            )
        if step in (10, 20):
            add(
                CheckpointSaved(
                    time=clock.now(),
                    step=step,
                    kind="state" if step == 10 else "sampler",
                    name=f"step-{step:06d}",
                    path=f"/tmp/runs/run-0001/{'weights' if step == 10 else 'sampler_weights'}"
                    f"/step-{step:06d}",
                )
            )
    return events


class FakeControl:
    """Records calls; answers with the events the engine would publish."""

    def __init__(self, session: FakeSession) -> None:
        self._session = session
        self._paused = False
        self._knobs: dict[str, float | int] = dict(KNOBS)
        self.calls: list[tuple[str, str]] = []
        self.stop_requested = asyncio.Event()

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def stopping(self) -> bool:
        return self.stop_requested.is_set()

    @property
    def health_stop_reason(self) -> str:
        return ""  # the fake has no health check

    def _command(self, command: str, **args: object) -> None:
        self._session.publish(
            CommandReceived(time=self._session.clock.now(), command=command, args=args)
        )

    def pause(self, reason: str = "paused by user") -> None:
        self.calls.append(("pause", reason))
        self._command("pause", reason=reason)
        self._paused = True
        self._session.publish(
            RunStateChanged(time=self._session.clock.now(), state="paused", reason=reason)
        )

    def resume(self) -> None:
        self.calls.append(("resume", ""))
        self._command("resume")
        self._paused = False
        self._session.publish(RunStateChanged(time=self._session.clock.now(), state="running"))

    def request_checkpoint(self) -> None:
        self.calls.append(("request_checkpoint", ""))
        self._command("checkpoint")
        session = self._session
        name = f"manual-{session.step:06d}"
        session.publish(
            CheckpointSaved(
                time=session.clock.now(),
                step=session.step,
                kind="state",
                name=name,
                path=f"/tmp/runs/run-0001/weights/{name}",
                requested=True,
            )
        )

    def request_eval(self) -> None:
        self.calls.append(("request_eval", ""))
        self._command("eval")
        session = self._session
        session.publish(
            EvalCompleted(
                time=session.clock.now(),
                step=session.step,
                policy_version=session.step,
                metrics={keys.EVAL_REWARD_MEAN: 0.9, keys.EVAL_NUM_SCENARIOS: 20.0},
            )
        )

    def request_rollback(
        self, reason: str = "rolled back by user", lr_scale: float | None = None
    ) -> None:
        self.calls.append(("request_rollback", f"{reason} x{lr_scale}"))

    def knobs(self) -> dict[str, float | int]:
        return dict(self._knobs)

    def set_knob(self, name: str, value: float | int) -> None:
        value = check_knob(name, value)  # the engine's own check
        self.calls.append(("set_knob", f"{name}={value}"))
        old = self._knobs[name]
        self._command("set", name=name, value=value, old=old)
        self._knobs[name] = value

    def stop(self, reason: str = "stopped by user") -> None:
        self.calls.append(("stop", reason))
        if not self.stop_requested.is_set():
            self._command("stop", reason=reason)
            self._session.stop_reason = reason
            self._session.publish(
                RunStateChanged(time=self._session.clock.now(), state="stopping", reason=reason)
            )
            self.stop_requested.set()

    def call_names(self) -> list[str]:
        return [name for name, _ in self.calls]


class FakeSession:
    """Implements `engine.control.interface.Session` with a scripted run (driven here, no store).

    Args:
        clock: The clock the events are stamped with (a fresh `FakeClock(0)` by default).
        fail_with: When set, `run()` raises it after publishing the script (to test errors).
        wait_for_stop: When False, `run()` returns "completed" right after the script.
        finish_on_stop: When False, `run()` keeps waiting after `stop()` (a run that is slow
            to wind down), so a second quit can be tested.
        script: Makes the event list from the clock (`scripted_events` by default).
        end: With `wait_for_stop=False`, how the run ends: its status and reason.
    """

    def __init__(
        self,
        clock: FakeClock | None = None,
        *,
        fail_with: BaseException | None = None,
        wait_for_stop: bool = True,
        finish_on_stop: bool = True,
        script: Callable[[FakeClock], list[Event]] | None = None,
        end: tuple[RunStatus, str] = ("completed", "reached max_steps"),
    ) -> None:
        self.clock = clock if clock is not None else FakeClock(0.0)
        self.script = script or scripted_events
        self.run_id = "run-0001"
        self.db_path: Path | None = None
        self.read_only = False
        self.attached = False
        self.events = EventBus()
        self.control = FakeControl(self)
        self.fail_with = fail_with
        self.wait_for_stop = wait_for_stop
        self.finish_on_stop = finish_on_stop
        self.end = end
        self.step = 0
        self.stop_reason = ""
        self.published: list[Event] = []
        self.script_done = asyncio.Event()

    def publish(self, event: Event) -> None:
        if isinstance(event, StepTrained):
            self.step = event.step
        if isinstance(event, CommandReceived) and event.command == "set":
            self.control._knobs[str(event.args["name"])] = event.args["value"]
        self.published.append(event)
        self.events.publish(event)

    async def run(self) -> RunStatus:
        for event in self.script(self.clock):
            self.publish(event)
        self.script_done.set()
        if self.fail_with is not None:
            raise self.fail_with
        if not self.wait_for_stop:
            status, reason = self.end
            if status == "failed":
                self.publish(
                    LogEmitted(
                        time=self.clock.now(), level="error", message=f"run failed: {reason}"
                    )
                )
            self.publish(
                RunFinished(
                    time=self.clock.now(), status=status, final_step=self.step, reason=reason
                )
            )
            return status
        await self.control.stop_requested.wait()
        if not self.finish_on_stop:
            await asyncio.Event().wait()  # until cancelled
        self.publish(
            RunFinished(
                time=self.clock.now(),
                status="stopped",
                final_step=self.step,
                reason=self.stop_reason,
            )
        )
        return "stopped"


class LiveFakeSession(FakeSession):
    """A scripted run that goes on like a real one, for `attach` tests in another process.

    It records its events in a real run store at `db_path` (wall-clock times), trains one
    fake step every `step_seconds` while not paused, and stops when told to. `run_id` and
    `db_path` are what the headless path needs to open the control endpoint.
    """

    def __init__(
        self,
        db_path: str,
        *,
        step_seconds: float = 0.05,
        max_steps: int = 100_000,
        run_id: str = "live-0001",
    ) -> None:
        from tinker_tui.engine.clock import SystemClock

        super().__init__()
        self.clock = SystemClock()  # type: ignore[assignment]
        self.db_path = Path(db_path)
        self.run_id = run_id
        self.step_seconds = step_seconds
        self.max_steps = max_steps

    async def run(self) -> RunStatus:
        from tinker_tui.engine.store import RunStore

        assert self.db_path is not None
        store = await RunStore.open(self.db_path)
        self.events.subscribe(store.handle)
        try:
            self.publish(
                RunStarted(
                    time=self.clock.now(),
                    run_id=self.run_id,
                    name="live",
                    backend="fake",
                    base_model="none",
                    max_steps=self.max_steps,
                    start_step=0,
                    config=dict(KNOBS),
                )
            )
            self.publish(RunStateChanged(time=self.clock.now(), state="running"))
            step = 0
            while not self.control.stop_requested.is_set() and step < self.max_steps:
                await asyncio.sleep(self.step_seconds)
                if self.control.paused:
                    continue
                step += 1
                self.publish(
                    GroupSampled(
                        time=self.clock.now(),
                        group_id=step,
                        scenario_id=f"s{step}",
                        policy_version=step - 1,
                        num_trajectories=GROUP_SIZE,
                        num_tokens=20,
                        reward_mean=reward_at(step),
                        trajectories=trajectories_for(step, step - 1),
                    )
                )
                self.publish(
                    StepTrained(
                        time=self.clock.now(),
                        step=step,
                        policy_version=step,
                        metrics={
                            keys.REWARD_MEAN: reward_at(step),
                            keys.STEP_TIME: self.step_seconds,
                        },
                    )
                )
            status: RunStatus = "stopped" if step < self.max_steps else "completed"
            self.publish(
                RunFinished(
                    time=self.clock.now(), status=status, final_step=step, reason=self.stop_reason
                )
            )
            return status
        finally:
            await store.close()


def step_events(
    clock: FakeClock,
    step: int,
    *,
    rewards: tuple[float, ...] | None = None,
    first_group: int | None = None,
) -> list[Event]:
    """One more training step of the scripted run: its groups, then `StepTrained`.

    `rewards`: every rollout's reward (equal rewards make zero-variance groups, counted as
    the engine counts them); by default the script's answers.
    """
    events: list[Event] = []
    clock.advance(0.5)
    first = GROUPS_PER_STEP * step if first_group is None else first_group
    ids = list(range(first, first + GROUPS_PER_STEP))
    for group_id in ids:
        events.append(started(clock, group_id, step - 1))
        trajectories = trajectories_for(group_id, step - 1)
        if rewards is not None:
            trajectories = tuple(
                TrajectorySummary(
                    reward=r, policy_version=step - 1, num_tokens=t.num_tokens, messages=t.messages
                )
                for r, t in zip(rewards, trajectories, strict=False)
            )
        mean = sum(t.reward for t in trajectories) / len(trajectories)
        events.append(
            GroupSampled(
                time=clock.now(),
                group_id=group_id,
                scenario_id=f"q{group_id % 4:02d}-{group_id}",
                policy_version=step - 1,
                num_trajectories=len(trajectories),
                num_tokens=sum(t.num_tokens for t in trajectories),
                reward_mean=mean,
                trajectories=trajectories,
            )
        )
        if len({t.reward for t in trajectories}) == 1:
            events.append(
                GroupDiscarded(
                    time=clock.now(),
                    group_id=group_id,
                    scenario_id=f"q{group_id % 4:02d}",
                    reason="zero_variance",
                    policy_version=step - 1,
                    trainer_version=step - 1,
                    num_tokens=0,
                    detail=f"all rewards {trajectories[0].reward:g}",
                    step=step,
                )
            )
    clock.advance(0.1)
    mean = sum(e.reward_mean for e in events if isinstance(e, GroupSampled)) / len(ids)
    events.append(
        StepTrained(
            time=clock.now(),
            step=step,
            policy_version=step,
            group_ids=tuple(ids),
            metrics={keys.REWARD_MEAN: mean, keys.STEP_TIME: 0.6},
        )
    )
    return events


def converged_events(clock: FakeClock) -> list[Event]:
    """A run that learned everything: rewards rise for 6 steps, then every rollout earns
    the best reward (equal rewards at the best: converged, no gradient)."""
    events: list[Event] = [run_started(clock), RunStateChanged(time=clock.now(), state="running")]
    events.append(StartupProgressed(time=clock.now(), phase="first_rollouts"))
    for step in range(1, 31):
        rewards = (1.0,) * GROUP_SIZE if step > 6 else None
        events += step_events(clock, step, rewards=rewards)
        if step > 6 and step % 3 == 0:
            events.append(
                LogEmitted(
                    time=clock.now(),
                    level="info",
                    message=f"step {step}: every group had equal rewards; "
                    "no gradient until one differs",
                )
            )
    return events


def finished_events(clock: FakeClock) -> list[Event]:
    """The scripted run, then its end (completed at step 20)."""
    events = scripted_events(clock)
    clock.advance(0.5)
    events.append(
        RunFinished(
            time=clock.now(), status="completed", final_step=NUM_STEPS, reason="reached max_steps"
        )
    )
    return events


async def wait_for_charts(pilot: Pilot[None], timeout: float = 10.0) -> None:
    """Let the app run until every chart pane (loaded after the first frame) has its chart."""
    from tinker_tui.app.widgets.chart_pane import ChartPane

    app = pilot.app
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not all(pane.loaded for screen in app.screen_stack for pane in screen.query(ChartPane)):
        if loop.time() > deadline:
            raise AssertionError("the charts did not load")
        await pilot.pause(0.02)


if TYPE_CHECKING:  # mypy (a CI step, .ci/run) checks the fake is a session the app can drive

    def _fake_is_a_session(session: FakeSession, live: LiveFakeSession) -> list[Session]:
        return [session, live]
