"""Capture keys a task's rollouts reuse (`engine.rollouts.capture_keys`; a verifiers
environment's do, as verifiers keeps an HTTP client per address): a rollout that returned
puts its key back for the next one, so there are only as many keys as rollouts ran at once;
one that raised, timed out or was cancelled retires its key, so a request it left behind is
refused (404), never filed under another rollout; and a reply that outlives the opening of
its key is dropped even when the key has been opened again."""

from __future__ import annotations

import asyncio

import openai
import pytest
from embedded_server import embedded_policy_server

from tinker_tui import Scenario, Task
from tinker_tui.engine.rollouts.capture_keys import CaptureKeys
from tinker_tui.engine.rollouts.task import TrajectoryError, captured_rollout
from tinker_tui.engine.server.capture import Captures

ASK = [{"role": "user", "content": "Is the sky blue?"}]


@pytest.fixture
async def served(tmp_path):
    async with embedded_policy_server(tmp_path) as server:
        yield server


def key_of(client) -> str:
    return str(client.base_url).rstrip("/").split("/")[-2]


class Rollout:
    """A rollout that reuses its keys; its scenario says how it ends: "ok" returns after one
    turn, "fail" raises after one, "hang" never ends (its timeout cancels it), "late" first
    sends a request through the client the last failed rollout left behind."""

    def __init__(self) -> None:
        self.capture_keys = CaptureKeys()
        self.keys: list[str] = []
        self.left: list[openai.AsyncOpenAI] = []
        self.refused: list[Exception] = []

    async def __call__(self, client, model, scenario):
        self.keys.append(key_of(client))
        if scenario.data == "late":
            try:
                await self.left[-1].chat.completions.create(model=model, messages=ASK, max_tokens=2)
            except openai.NotFoundError as exc:
                self.refused.append(exc)
        await client.chat.completions.create(model=model, messages=ASK, max_tokens=2)
        if scenario.data in ("fail", "hang"):
            self.left.append(client)
        if scenario.data == "fail":
            raise TrajectoryError("the episode failed")
        if scenario.data == "hang":
            await asyncio.Event().wait()
        return 1.0


def task_of(rollout: Rollout) -> Task:
    return Task(name="reuse", scenarios=lambda rng: iter(()), rollout=rollout)


async def roll(server, task, kind, timeout=None):
    return await asyncio.wait_for(
        captured_rollout(
            task, server.client(), "policy", Scenario(id=kind, data=kind), server.captures
        ),
        timeout,
    )


async def test_rollouts_that_return_reuse_as_many_keys_as_ran_at_once(served):
    rollout = Rollout()
    task = task_of(rollout)
    gate = asyncio.Semaphore(3)

    async def one():
        async with gate:
            return await roll(served, task, "ok")

    made = await asyncio.gather(*(one() for _ in range(12)))
    assert len(set(rollout.keys)) <= 3 < len(rollout.keys) == 12
    assert rollout.capture_keys.made == len(set(rollout.keys))
    assert all(len(t.turns) == 1 for t in made)  # each trained on its own turn only
    assert len(served.captures) == 0


async def test_a_failed_or_timed_out_rollouts_key_is_retired_and_its_straggler_refused(served):
    rollout = Rollout()
    task = task_of(rollout)
    await roll(served, task, "ok")
    with pytest.raises(TrajectoryError):
        await roll(served, task, "fail")
    failed = rollout.keys[-1]
    assert failed == rollout.keys[0]  # it had reused the first rollout's key
    # the next rollout gets another key; the failed one's straggler, sent while it is
    # open, is refused rather than filed under it
    late = await roll(served, task, "late")
    assert rollout.keys[-1] != failed
    assert len(rollout.refused) == 1 and "no trajectory is open" in str(rollout.refused[0])
    assert len(late.turns) == 1

    with pytest.raises(TimeoutError):
        await roll(served, task, "hang", timeout=2)
    hung = rollout.keys[-1]
    late = await roll(served, task, "late")
    assert rollout.keys[-1] not in (failed, hung)
    assert len(rollout.refused) == 2 and len(late.turns) == 1
    assert (rollout.capture_keys.made, rollout.capture_keys.retired) == (3, 2)
    assert len(served.captures) == 0


def test_a_reply_that_outlived_its_keys_opening_is_not_filed_under_the_next():
    captures = Captures()
    key = captures.open("k")
    straggler = captures.opening(key)  # a request came in under the first opening
    assert captures.close(key) == []
    assert captures.opening(key) is None  # a request now would be refused
    captures.open(key)  # the key reused for the next rollout
    captures.record(key, [{"index": 0}], opening=straggler)
    captures.record(key, [{"index": 1}], opening=captures.opening(key))
    assert captures.close(key) == [{"index": 1}]
