"""The learning bars of the examples, on the local backend with their shipped settings.

Opt-in, they take minutes: ``python -m pytest -q -m slow tests/test_examples_learning.py``
(a plain ``python -m pytest`` skips them). Wall-clock bars: run them on an otherwise idle
machine; another process busy on the same cores slows every step.
"""

import time

import pytest

from tinker_tui.app.task_loader import layered_config, load_task
from tinker_tui.engine.events import EvalCompleted, StepTrained
from tinker_tui.engine.run import Run

pytestmark = pytest.mark.slow  # opt-in: tests/conftest.py skips it without -m


async def learn(name, tmp_path, *, budget_s, reached, **overrides):
    """Run a built-in example until `reached(rewards)` is true or `budget_s` wall seconds
    (counted from before the backend starts) are spent; returns the step rewards, the seconds
    at which each step ended, and the evaluations."""
    task = load_task(name)
    config = layered_config(task, "local").with_overrides(
        {"max_steps": 100_000, "checkpoint_every": 0, **overrides}
    )
    run = Run(task=task, config=config, backend="local", db_path=tmp_path / "runs.db")
    started = time.monotonic()
    rewards, seconds, evals = [], [], []

    def on_event(event):
        if isinstance(event, StepTrained):
            rewards.append(event.metrics["reward/mean"])
            seconds.append(time.monotonic() - started)
            if reached(rewards) or seconds[-1] > budget_s:
                run.control.stop("learning check done")
        elif isinstance(event, EvalCompleted):
            evals.append((event.step, event.metrics["eval/reward_mean"]))

    run.events.subscribe(on_event)
    await run.run()
    return rewards, seconds, evals


def moving(rewards, k):
    return sum(rewards[-k:]) / len(rewards[-k:])


async def test_yes_no_maybe_reaches_09_within_60_seconds(tmp_path):
    rewards, seconds, _ = await learn(
        "example",
        tmp_path,
        budget_s=60,
        max_steps=60,
        reached=lambda r: len(r) >= 3 and moving(r, 3) >= 0.9,
    )
    assert len(rewards) >= 3 and moving(rewards, 3) >= 0.9 and seconds[-1] <= 60, list(
        zip(seconds, rewards, strict=True)
    )


async def test_binary_prefix_tool_reaches_15x_its_first_step_within_5_minutes(tmp_path):
    def reached(r):
        return len(r) >= 5 and moving(r, 5) >= 1.5 * r[0]

    rewards, seconds, _ = await learn("binary_prefix_tool", tmp_path, budget_s=300, reached=reached)
    assert reached(rewards) and seconds[-1] <= 300, list(zip(seconds, rewards, strict=True))


async def test_next_number_improves_on_training_and_on_held_out_numbers(tmp_path):
    rewards, seconds, evals = await learn(
        "next_number", tmp_path, budget_s=120, reached=lambda r: False, max_steps=150
    )
    assert seconds[-1] <= 120 and len(rewards) == 150
    assert sum(rewards[-30:]) / 30 >= sum(rewards[:30]) / 30 + 0.15, list(
        zip(seconds, rewards, strict=True)
    )
    # Held-out numbers, never trained on: the sharper policy is right more often there too.
    assert evals[0][0] == 0 and max(r for _, r in evals[-2:]) >= evals[0][1] + 0.1, evals
