"""Group advantages: the `advantage` rule (mean, mean_std) and a task's advantages() hook,
checked against values computed by hand, and what the pipeline trains on."""

import asyncio
import random

import pytest

from bench.simulated import SimulatedClient, SimulatedPolicy
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.config import ConfigError, RunConfig
from tinker_tui.engine.events import EventBus, GroupDiscarded
from tinker_tui.engine.rollouts.task import Scenario, Task, TaskError, check_task
from tinker_tui.engine.rollouts.trajectory import Trajectory, TrajectoryError
from tinker_tui.engine.training.advantages import group_advantages
from tinker_tui.engine.training.pipeline import Pipeline


def test_mean_is_reward_minus_the_group_mean():
    # mean of (1, 0, 0, 3) is 1
    assert group_advantages([1.0, 0.0, 0.0, 3.0], "mean") == [0.0, -1.0, -1.0, 2.0]


def test_mean_std_divides_by_the_population_std_plus_epsilon():
    # rewards 1, 0, 0, 3: mean 1, deviations 0, -1, -1, 2, variance (0+1+1+4)/4 = 1.5
    std = 1.5**0.5
    got = group_advantages([1.0, 0.0, 0.0, 3.0], "mean_std")
    assert got == pytest.approx([0.0, -1 / (std + 1e-6), -1 / (std + 1e-6), 2 / (std + 1e-6)])
    # rewards 0.5 and 0.25: deviations +-0.125, std 0.125 -> about +-1
    assert group_advantages([0.5, 0.25], "mean_std") == pytest.approx([1.0, -1.0], abs=1e-5)
    # equal rewards: no advantage, no division by zero
    assert group_advantages([2.0, 2.0, 2.0], "mean_std") == [0.0, 0.0, 0.0]


def test_a_hook_replaces_the_rule_and_is_checked():
    def rank(rewards):  # best +1, worst -1
        order = sorted(range(len(rewards)), key=rewards.__getitem__)
        out = [0.0] * len(rewards)
        out[order[0]], out[order[-1]] = -1.0, 1.0
        return out

    assert group_advantages([0.2, 0.9, 0.5], "mean_std", rank) == [-1.0, 1.0, 0.0]
    with pytest.raises(TrajectoryError, match="2 values for 3 rewards"):
        group_advantages([1, 2, 3], "mean", lambda r: [0.0, 1.0])
    with pytest.raises(TrajectoryError, match="finite number"):
        group_advantages([1, 2], "mean", lambda r: [0.0, float("nan")])
    with pytest.raises(TrajectoryError, match="list of 2 numbers"):
        group_advantages([1, 2], "mean", lambda r: 0.5)


def test_the_setting_and_the_hook_are_checked_before_anything_runs():
    with pytest.raises(ConfigError, match="advantage must be mean or mean_std"):
        RunConfig(advantage="median")
    task = Task(
        name="t", scenarios=lambda rng: iter(()), rollout=_rollout, advantages=lambda: [1.0]
    )
    with pytest.raises(TaskError, match="advantages"):
        check_task(task)


class RecordingPolicy(SimulatedPolicy):
    """Records the advantages of every group it is asked to train."""

    def __init__(self):
        super().__init__()
        self.advantages: list[list[float]] = []

    def build_datums(self, groups):
        self.advantages += [g.advantages() for g in groups]
        return super().build_datums(groups)


REWARDS = [1.0, 0.0, 0.0, 3.0]


async def _rollout(client, model, scenario):
    choice = await client.chat.completions.create(model=model, messages=[])
    return Trajectory.from_choices([choice], reward=REWARDS[scenario.data.pop()])


def _scenarios(rng):
    while True:
        yield Scenario(id="s", data=[3, 2, 1, 0])  # members pop their reward's index


def run_pipeline(task, **overrides):
    session = RecordingPolicy()
    config = RunConfig(
        max_steps=2, group_size=4, groups_per_step=1, rollout_workers=1, checkpoint_every=0
    ).with_overrides(overrides)
    bus = EventBus()
    events = []
    bus.subscribe(events.append)
    pipeline = Pipeline(
        config=config,
        task=task,
        session=session,
        client_factory=lambda: SimulatedClient(session),
        model_name="m",
        bus=bus,
        clock=FakeClock(),
        rng=random.Random(0),
    )
    return pipeline, session, events


@pytest.mark.parametrize("rule", ["mean", "mean_std"])
async def test_the_pipeline_trains_on_the_rule_it_is_given(rule):
    task = Task(name="t", scenarios=_scenarios, rollout=_rollout)
    pipeline, session, _ = run_pipeline(task, advantage=rule)
    assert await pipeline.run() == "completed"
    # the members finish in any order: compare as multisets, by reward
    expected = sorted(group_advantages(REWARDS, rule))
    assert session.advantages and all(
        sorted(a) == pytest.approx(expected) for a in session.advantages
    )


async def test_the_pipeline_trains_on_the_tasks_hook_and_a_bad_hook_fails_its_group():
    task = Task(
        name="t",
        scenarios=_scenarios,
        rollout=_rollout,
        advantages=lambda rewards: [10.0 * r for r in rewards],
    )
    pipeline, session, _ = run_pipeline(task)
    assert await pipeline.run() == "completed"
    assert all(sorted(a) == [0.0, 0.0, 10.0, 30.0] for a in session.advantages)

    broken = Task(
        name="t", scenarios=_scenarios, rollout=_rollout, advantages=lambda rewards: [1.0]
    )
    pipeline, session, events = run_pipeline(broken, max_steps=10_000)
    run = asyncio.create_task(pipeline.run())
    while not any(isinstance(e, GroupDiscarded) for e in events):
        await asyncio.sleep(0.001)
    pipeline.stop("test")
    await run
    [first, *_] = [e for e in events if isinstance(e, GroupDiscarded)]
    assert first.reason == "error" and "advantages(rewards) hook returned 1 values" in first.detail
    assert session.advantages == []
