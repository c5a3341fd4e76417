"""A scripted stand-in for an engine session, for app tests and snapshots.

`FakeSession.run()` publishes a fixed list of events (times from a `FakeClock`), then waits
until `control.stop()` is called, publishes `RunFinished` and returns "stopped". Its control
records every call and answers like the engine would (state changes, a checkpoint on
request), so the UI can be driven end to end without torch or a network.
"""

from __future__ import annotations

import asyncio
import math

from engine.clock import FakeClock
from engine.events import (
    CheckpointSaved,
    Event,
    EventBus,
    GroupDiscarded,
    GroupSampled,
    LogEmitted,
    RunFinished,
    RunStarted,
    RunStateChanged,
    RunStatus,
    StepTrained,
)

NUM_STEPS = 20
MAX_STEPS = 50
GROUP_SIZE = 8


def reward_at(step: int) -> float:
    """Rising mean reward with a little deterministic wobble."""
    return round(0.2 + 0.65 * (1.0 - math.exp(-step / 7.0)) + 0.04 * math.sin(step * 1.7), 4)


def scripted_events(clock: FakeClock) -> list[Event]:
    """The fixed event list; advances `clock` as it goes (starting from its current time)."""
    events: list[Event] = []
    add = events.append
    add(
        RunStarted(
            time=clock.now(),
            run_id="run-0001",
            name="yes-no-maybe",
            backend="local",
            base_model="tiny-llama-2x64",
            max_steps=MAX_STEPS,
            start_step=0,
            config={"group_size": GROUP_SIZE, "learning_rate": 2e-3},
        )
    )
    add(RunStateChanged(time=clock.now(), state="running"))
    add(
        LogEmitted(
            time=clock.now(), level="INFO", message="run yes-no-maybe started on local backend"
        )
    )
    discard_at = {4: "stale", 7: "zero_variance", 11: "error", 15: "stale", 18: "zero_variance"}
    for step in range(1, NUM_STEPS + 1):
        # uneven spacing so the throughput sparkline has some shape
        clock.advance(0.3 + 0.1 * ((step * 7) % 5))
        add(
            GroupSampled(
                time=clock.now(),
                group_id=step,
                scenario_id=f"scenario-{step % 4}",
                policy_version=step - 1,
                num_trajectories=GROUP_SIZE,
                num_tokens=GROUP_SIZE * (24 + (step * 11) % 17),
                reward_mean=reward_at(step),
            )
        )
        if step in discard_at:
            reason = discard_at[step]
            add(
                GroupDiscarded(
                    time=clock.now(),
                    group_id=1000 + step,
                    scenario_id=f"scenario-{(step + 1) % 4}",
                    reason=reason,  # type: ignore[arg-type]
                    policy_version=max(0, step - 4),
                    trainer_version=step - 1,
                    num_tokens=GROUP_SIZE * 30,
                    detail="RuntimeError: sampler crashed" if reason == "error" else "",
                )
            )
        clock.advance(0.1)
        add(
            StepTrained(
                time=clock.now(),
                step=step,
                policy_version=step,
                metrics={
                    "reward/mean": reward_at(step),
                    "loss": round(0.9 / step, 4),
                    "time/step": 0.1,
                },
            )
        )
        if step % 5 == 0:
            add(
                LogEmitted(
                    time=clock.now(),
                    level="INFO",
                    message=f"step {step}: reward/mean {reward_at(step):.3f}",
                )
            )
        if step == 11:
            add(
                LogEmitted(
                    time=clock.now(),
                    level="WARNING",
                    message="group 1011 failed: RuntimeError: sampler crashed",
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
        self.calls: list[tuple[str, str]] = []
        self.stop_requested = asyncio.Event()

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self, reason: str = "paused by user") -> None:
        self.calls.append(("pause", reason))
        self._paused = True
        self._session.publish(
            RunStateChanged(time=self._session.clock.now(), state="paused", reason=reason)
        )

    def resume(self) -> None:
        self.calls.append(("resume", ""))
        self._paused = False
        self._session.publish(RunStateChanged(time=self._session.clock.now(), state="running"))

    def request_checkpoint(self) -> None:
        self.calls.append(("request_checkpoint", ""))
        session = self._session
        name = f"manual-{session.step:06d}"
        session.publish(
            CheckpointSaved(
                time=session.clock.now(),
                step=session.step,
                kind="state",
                name=name,
                path=f"/tmp/runs/run-0001/weights/{name}",
            )
        )

    def stop(self, reason: str = "stopped by user") -> None:
        self.calls.append(("stop", reason))
        if not self.stop_requested.is_set():
            self._session.stop_reason = reason
            self._session.publish(
                RunStateChanged(time=self._session.clock.now(), state="stopping", reason=reason)
            )
            self.stop_requested.set()

    def call_names(self) -> list[str]:
        return [name for name, _ in self.calls]


class FakeSession:
    """Implements `engine.control.Session` with a scripted run.

    Args:
        clock: The clock the events are stamped with (a fresh `FakeClock(0)` by default).
        fail_with: When set, `run()` raises it after publishing the script (to test errors).
        wait_for_stop: When False, `run()` returns "completed" right after the script.
        finish_on_stop: When False, `run()` keeps waiting after `stop()` (a run that is slow
            to wind down), so a second quit can be tested.
    """

    def __init__(
        self,
        clock: FakeClock | None = None,
        *,
        fail_with: BaseException | None = None,
        wait_for_stop: bool = True,
        finish_on_stop: bool = True,
    ) -> None:
        self.clock = clock if clock is not None else FakeClock(0.0)
        self.events = EventBus()
        self.control = FakeControl(self)
        self.fail_with = fail_with
        self.wait_for_stop = wait_for_stop
        self.finish_on_stop = finish_on_stop
        self.step = 0
        self.stop_reason = ""
        self.published: list[Event] = []
        self.script_done = asyncio.Event()

    def publish(self, event: Event) -> None:
        if isinstance(event, StepTrained):
            self.step = event.step
        self.published.append(event)
        self.events.publish(event)

    async def run(self) -> RunStatus:
        for event in scripted_events(self.clock):
            self.publish(event)
        self.script_done.set()
        if self.fail_with is not None:
            raise self.fail_with
        if not self.wait_for_stop:
            self.publish(
                RunFinished(time=self.clock.now(), status="completed", final_step=self.step)
            )
            return "completed"
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
