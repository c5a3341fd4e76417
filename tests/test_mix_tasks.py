"""Several tasks in one run: `mix_tasks` draws each scenario from a part by weight, rolls it
out with that part's own rollout (or group_rollout) and advantages hook, and the step and
evaluation metrics report every part under its name."""

import random
import re
from collections import Counter
from itertools import islice

import pytest

from bench.simulated import SimulatedClient, SimulatedPolicy
from tinker_tui import mix_tasks
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.events import EvalCompleted, EventBus, StepTrained
from tinker_tui.engine.rollouts.task import (
    PartScenario,
    Scenario,
    Task,
    TaskError,
    check_task,
    part_of,
)
from tinker_tui.engine.rollouts.trajectory import Trajectory
from tinker_tui.engine.training.pipeline import Pipeline


def counting(prefix):
    def scenarios(rng):
        i = 0
        while True:
            yield Scenario(id=f"{prefix}{i}", data=rng.random())
            i += 1

    return scenarios


async def rollout_a(client, model, scenario):
    choice = await client.chat.completions.create(model=model, messages=[])
    return Trajectory.from_choices([choice], reward=1.0, which_a=1)


async def group_b(client, model, scenario, n):
    """A ranking group rollout: members get 0, 1, ..., n-1."""
    choices = [await client.chat.completions.create(model=model, messages=[]) for _ in range(n)]
    return [Trajectory.from_choices([c], reward=float(i), rank=i) for i, c in enumerate(choices)]


A = Task(
    name="a",
    scenarios=counting("a"),
    rollout=rollout_a,
    eval_scenarios=lambda: [Scenario(id="ea", data=0)],
)
B = Task(
    name="b",
    scenarios=counting("b"),
    group_rollout=group_b,
    eval_scenarios=lambda: [Scenario(id="eb1", data=0), Scenario(id="eb2", data=0)],
    advantages=lambda rewards: [-r for r in rewards],
)


def test_scenarios_are_drawn_by_weight_and_each_parts_stream_is_its_own():
    mix = mix_tasks("ab", [(A, 1.0), (B, 3.0)])
    drawn = list(islice(mix.scenarios(random.Random(5)), 4000))
    assert all(isinstance(s, PartScenario) for s in drawn)
    share = Counter(s.part for s in drawn)["b"] / len(drawn)
    assert 0.72 < share < 0.78
    # ids say the part; each part's own scenarios come in its own order, none skipped
    for part in ("a", "b"):
        inner = [s.data.id for s in drawn if s.part == part]
        assert inner == [f"{part}{i}" for i in range(len(inner))]
        assert all(s.id == f"{part}/{s.data.id}" for s in drawn if s.part == part)
    # a part's scenarios do not depend on the weights (its generator is seeded apart)
    other = list(islice(mix_tasks("ab", [(A, 5.0), (B, 1.0)]).scenarios(random.Random(5)), 500))
    first_b = [s.data.data for s in drawn if s.part == "b"][:20]
    assert [s.data.data for s in other if s.part == "b"][:20] == first_b
    # the same rng gives the same stream (a resume replays it)
    again = list(islice(mix.scenarios(random.Random(5)), 4000))
    assert [s.id for s in again] == [s.id for s in drawn]


def test_a_part_whose_scenarios_end_drops_out():
    short = Task(
        name="short",
        scenarios=lambda rng: iter([Scenario("x", 1), Scenario("y", 2)]),
        rollout=rollout_a,
    )
    drawn = list(islice(mix_tasks("m", [(short, 10.0), (A, 1.0)]).scenarios(random.Random(0)), 50))
    assert [s.id for s in drawn if s.part == "short"] == ["short/x", "short/y"]
    assert len(drawn) == 50


def test_evals_warmup_and_the_part_of_a_scenario():
    mix = mix_tasks("ab", [(A, 1), (B, 1)])
    assert [s.id for s in mix.eval_scenarios()] == ["a/ea", "b/eb1", "b/eb2"]
    scenario = mix.eval_scenarios()[1]
    assert part_of(mix, scenario) == ("b", B)
    assert part_of(A, Scenario("s", 0)) == ("", A)
    assert (
        mix_tasks(
            "a_only", [(Task(name="x", scenarios=counting("x"), rollout=rollout_a), 1)]
        ).eval_scenarios
        is None
    )
    assert check_task(mix) is mix


@pytest.mark.parametrize(
    "parts, message",
    [
        ({"a": 1}, "list of (task, weight) pairs"),
        ([A], "list of (task, weight) pairs"),
        ([], "at least one task"),
        ([(A, 1), (A, 2)], "two tasks are named 'a'"),
        ([(A, 0)], "weight of 'a' must be a positive number"),
        ([(A, float("nan"))], "weight of 'a' must be a positive number"),
        ([(A, True)], "weight of 'a' must be a positive number"),
        ([("a", 1)], "expected Task objects"),
        ([(mix_tasks("inner", [(A, 1)]), 1)], "is itself a mix"),
        ([(Task(name="x/y", scenarios=counting("x"), rollout=rollout_a), 1)], "cannot name a part"),
    ],
)
def test_mistakes_are_task_errors(parts, message):
    with pytest.raises(TaskError, match=re.escape(message)):
        mix_tasks("m", parts)


def test_a_broken_part_is_named_when_the_mix_is_checked():
    broken = Task(name="broken", scenarios=counting("x"), rollout=lambda c, m, s: None)
    with pytest.raises(TaskError, match="in the mix 'm', task 'broken'"):
        check_task(mix_tasks("m", [(A, 1), (broken, 1)]))


class RecordingPolicy(SimulatedPolicy):
    def __init__(self):
        super().__init__()
        self.trained: list[tuple[str, list[float], list[float]]] = []

    def build_datums(self, groups):
        self.trained += [(g.part, sorted(g.rewards), sorted(g.advantages())) for g in groups]
        return super().build_datums(groups)


async def test_a_mixed_run_rolls_out_and_reports_each_part_under_its_name():
    session = RecordingPolicy()
    config = RunConfig(
        max_steps=6, group_size=3, groups_per_step=2, rollout_workers=2, checkpoint_every=0
    )
    bus = EventBus()
    events = []
    bus.subscribe(events.append)
    pipeline = Pipeline(
        config=config,
        task=mix_tasks("ab", [(A, 1), (B, 1)]),
        session=session,
        client_factory=lambda: SimulatedClient(session),
        model_name="ab",
        bus=bus,
        clock=FakeClock(),
        rng=random.Random(1),
    )
    assert await pipeline.run() == "completed"
    # part a: equal rewards (no signal, not trained); part b: its group_rollout's ranks, and
    # its own advantages hook (minus the reward)
    parts = {part for part, _, _ in session.trained}
    assert parts == {"b"}
    assert all(r == [0.0, 1.0, 2.0] and a == [-2.0, -1.0, 0.0] for _, r, a in session.trained)
    steps = [e for e in events if isinstance(e, StepTrained)]
    reported = {k for s in steps for k in s.metrics}
    assert {
        "reward/b/mean",
        "task/b/rank",
        "task/b/rank/min",
        "task/b/rank/max",
        "task/rank",
    } <= reported
    assert all(s.metrics.get("reward/b/mean", 1.0) == 1.0 for s in steps)
    # the final step is evaluated on every part's eval scenarios, each part reported
    [final] = [e for e in events if isinstance(e, EvalCompleted) and e.step == 6]
    assert final.metrics["eval/num_scenarios"] == 3
    assert final.metrics["eval/a/reward_mean"] == 1.0
    assert final.metrics["eval/b/reward_mean"] == 0.0  # a group of one ranks first: 0
    assert final.metrics["eval/a/task/which_a"] == 1.0
