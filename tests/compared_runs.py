"""Stores of several runs with fixed, different curves and settings, for the comparison
and the sweep view (deterministic: a fake clock, no randomness)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.events import (
    CheckpointSaved,
    CommandReceived,
    Event,
    RunFinished,
    RunStarted,
    StepTrained,
)
from tinker_tui.engine.store import RunStore

#: (run id, name, learning rate, group size, status, steps done of 12)
RUNS = [
    ("run-lr1e-3", "lr 1e-3", 1e-3, 8, "completed", 12),
    ("run-lr3e-3", "lr 3e-3", 3e-3, 8, "completed", 12),
    ("run-lr1e-2", "", 1e-2, 8, "failed", 7),
    ("run-g4", "group 4", 3e-3, 4, "stopped", 9),
    ("run-g16", "group 16", 3e-3, 16, "", 5),  # no end stored: its process is gone
]
MAX_STEPS = 12


def run_events(index: int, start: float = 1000.0) -> list[Event]:
    run_id, name, lr, group, status, steps = RUNS[index]
    clock = FakeClock(start + 100 * index)
    events: list[Event] = [
        RunStarted(
            time=clock.now(),
            run_id=run_id,
            name="yes-no-maybe",
            backend="local",
            base_model="tinker-tui/tiny-chat",
            max_steps=MAX_STEPS,
            start_step=0,
            config={
                "learning_rate": lr,
                "group_size": group,
                "groups_per_step": 4,
                "max_steps": MAX_STEPS,
                "seed": 0,
                "wandb_run_id": f"w-{run_id}",
            },
            run_name=name,
        )
    ]
    rate = {1e-3: 0.05, 3e-3: 0.12, 1e-2: 0.3}[lr] * (group / 8) ** 0.5
    for step in range(1, steps + 1):
        clock.advance(1.0 + 0.25 * group / 8 + 0.1 * (step % 3))
        reward = 0.95 - 0.6 * math.exp(-rate * step) + 0.02 * math.sin(step + index)
        if lr == 1e-2 and step > 4:
            reward -= 0.15 * (step - 4)
        events.append(
            StepTrained(
                time=clock.now(),
                step=step,
                policy_version=step,
                metrics={
                    "reward/mean": reward,
                    "train/loss_sum": 40 * math.exp(-rate * step),
                    "optim/lr": lr,
                    "train/tokens": 600.0 * group / 8,
                },
            )
        )
        if step % 5 == 0:
            events.append(
                CheckpointSaved(
                    time=clock.now(),
                    step=step,
                    kind="state",
                    name=f"step-{step:06d}",
                    path=f"ck/{run_id}/{step}",
                )
            )
        if index == 1 and step == 6:
            events.append(
                CommandReceived(
                    time=clock.now(),
                    command="set",
                    args={"name": "temperature", "value": 0.8},
                    source="dashboard",
                )
            )
    if status:
        clock.advance(0.5)
        events.append(
            RunFinished(
                time=clock.now(),
                status=status,  # type: ignore[arg-type]
                final_step=steps,
                reason="reached max_steps" if status == "completed" else "a test failure",
            )
        )
    return events


def store_runs(path: Path, indexes: list[int]) -> list[str]:
    """Store these runs of RUNS at `path`; their ids."""

    async def store_all() -> None:
        store = await RunStore.open(path)
        for index in indexes:
            for event in run_events(index):
                store.handle(event)
            await store.flush()
        await store.close()

    asyncio.run(store_all())
    return [RUNS[i][0] for i in indexes]
