"""A group rollout that returns only rewards (`member_clients`): each member samples through a
client of its own, filed under its own capture key, and is trained on exactly the turns
sampled through it; mistakes (a count that is not n, a member whose client sampled nothing)
fail the group with one line that says what to do."""

from __future__ import annotations

import asyncio

import pytest
from embedded_server import embedded_policy_server

from tinker_tui import Reward, Scenario, Task, member_clients
from tinker_tui.app.task_loader import layered_config
from tinker_tui.engine.events import GroupSampled, StepTrained
from tinker_tui.engine.rollouts.task import TaskError, TrajectoryError, captured_rollout
from tinker_tui.engine.run import Run
from tinker_tui.engine.training import pipeline


def scenarios(rng):
    for number in range(99):
        yield Scenario(id=f"s{number}", data=number)


async def ask(client, model, turns):
    """`turns` requests through `client`, each extending the last; the token ids it got."""
    messages = [{"role": "user", "content": "Is the sky blue?"}]
    got = []
    for _ in range(turns):
        completion = await client.chat.completions.create(
            model=model, messages=messages, max_tokens=4
        )
        got.append(tuple(completion.choices[0].model_extra["token_ids"]))
        messages += [
            {"role": "assistant", "content": completion.choices[0].message.content or ""},
            {"role": "user", "content": "Sure?"},
        ]
    return got


async def test_a_group_rollout_of_rewards_trains_each_member_on_its_own_turns(
    tmp_path, monkeypatch
):
    sampled: dict[tuple[int, int], list[tuple[int, ...]]] = {}

    async def group_rollout(client, model, scenario, n):
        members = member_clients(client)
        assert len(members) == n and members[0] is client
        # member i takes i + 1 turns: a member trained on another's turns would show
        got = await asyncio.gather(*(ask(c, model, i + 1) for i, c in enumerate(members)))
        for i, tokens in enumerate(got):
            sampled[scenario.data, i] = tokens
        return [Reward(float(i), group=scenario.data, member=i) for i in range(n)]

    made = []

    async def keeping(*args):
        trajectory = await captured_rollout(*args)
        made.append(trajectory)
        return trajectory

    monkeypatch.setattr(pipeline, "captured_rollout", keeping)
    task = Task(name="grouped", scenarios=scenarios, group_rollout=group_rollout)
    config = layered_config(task, "local").with_overrides(
        {"max_steps": 2, "checkpoint_every": 0, "group_size": 3, "groups_per_step": 2}
    )
    run = Run(
        task=task, config=config, backend="local", db_path=tmp_path / "runs.db", headless=True
    )
    events = []
    run.events.subscribe(events.append)
    assert await run.run() == "completed"
    assert len(made) >= 12 and len(sampled) == len(made)
    for trajectory in made:
        key = int(trajectory.metrics["group"]), int(trajectory.metrics["member"])
        assert [t.tokens for t in trajectory.turns] == sampled[key]
    groups = [e for e in events if isinstance(e, GroupSampled)]
    assert all(g.num_trajectories == 3 for g in groups)
    steps = [e for e in events if isinstance(e, StepTrained)]
    assert [s.step for s in steps] == [1, 2]
    for step in steps:  # rewards 0, 1, 2 differ: every group trains, 1 + 2 + 3 turns each
        assert step.metrics["train/turns"] == 2 * 6, step.metrics


@pytest.fixture
async def served(tmp_path):
    async with embedded_policy_server(tmp_path) as server:
        yield server


async def roll_group(server, group_rollout, n=3):
    """The n members of one group, as the pipeline starts them; their outcomes."""
    task = Task(name="g", scenarios=scenarios, group_rollout=group_rollout)
    scenario = Scenario(id="s", data=0)
    client = server.client()
    return await asyncio.gather(
        *(captured_rollout(task, client, "policy", scenario, server.captures) for _ in range(n)),
        return_exceptions=True,
    )


async def test_group_rollout_reward_mistakes_say_what_to_do_in_one_line(served):
    async def short(client, model, scenario, n):
        await asyncio.gather(*(ask(c, model, 1) for c in member_clients(client)))
        return [1.0] * (n - 1)

    results = await roll_group(served, short)
    assert all(isinstance(r, TrajectoryError) for r in results), results
    message = str(results[0])
    assert "returned 2 results for n=3; return exactly n" in message and "\n" not in message

    async def one_client(client, model, scenario, n):  # every turn through the first client
        await asyncio.gather(*(ask(client, model, 1) for _ in range(n)))
        return [1.0] * n

    results = await roll_group(served, one_client)
    assert len(results[0].turns) == 3  # the first member: all three turns went through it
    for error in results[1:]:
        assert isinstance(error, TrajectoryError), error
        assert "sample member i's turns through member_clients(client)[i]" in str(error)
    assert len(served.captures) == 0  # every key closed

    with pytest.raises(TaskError, match=r"takes the client a group_rollout was given"):
        member_clients(served.client())
