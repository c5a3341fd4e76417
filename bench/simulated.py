"""A backend whose sampling and training take a set time: for timing the pipeline alone.

`SimulatedPolicy` trains by sleeping and moves the policy version exactly as the real
`engine.backend.session.BackendSession` does; `SimulatedClient` stands in for
`openai.AsyncOpenAI` and answers after a delay, stamped with the version that sampled it. No torch, no HTTP.
"""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace
from typing import Any

from tinker_tui.engine.backend.session import TrainResult
from tinker_tui.engine.metrics.cost import TokenUsage
from tinker_tui.engine.rollouts.task import Scenario, Task
from tinker_tui.engine.rollouts.trajectory import Trajectory


class SimulatedPolicy:
    def __init__(self, train_seconds: float = 0.005) -> None:
        self.version = 0
        self.train_seconds = train_seconds
        self.tokenizer = None  # rollouts give their messages
        self.trained_batches: list[list[int]] = []
        self.saved: list[str] = []
        self.train_time = 0.0
        self.usage = TokenUsage()  # tokens processed, as BackendSession counts them
        #: What the checkpointer tells the retention policy (nothing is deleted here).
        self.retention = SimpleNamespace(keep_state_step=None, requested_state_steps=set())

    def build_datums(self, groups: Any) -> list[Any]:
        self.trained_batches.append([g.policy_version for g in groups])
        return [object()] * sum(len(g.trajectories) for g in groups)

    async def train(
        self, datums: Any, *, loss_fn: str, learning_rate: float, num_substeps: int = 1
    ) -> TrainResult:
        if self.train_seconds:
            await asyncio.sleep(self.train_seconds)
        self.train_time += self.train_seconds
        self.version += 1
        return TrainResult(self.version, {"train/loss_sum": 0.0}, len(datums), len(datums))

    async def save_state(self, name: str, *, step: int | None = None) -> str:
        self.saved.append(name)
        return f"tinker://simulated/weights/{name}"

    def interrupt(self) -> None:
        """The run is stopping (nothing here ever waits on a backend)."""


class SimulatedClient:
    def __init__(self, session: SimulatedPolicy, sample_seconds: float = 0.002) -> None:
        self.session = session
        self.sample_seconds = sample_seconds
        self.started = 0
        self.chat = self
        self.completions = self

    async def create(self, **_: Any) -> dict[str, Any]:
        self.started += 1
        version = self.session.version
        if self.sample_seconds:
            await asyncio.sleep(self.sample_seconds)
        return {
            "prompt_token_ids": [1],
            "token_ids": [2],
            "token_logprobs": [-0.1],
            "policy_version": version,
        }


def simulated_task(*, fail_every: int = 0, reward: Any = None, eval_size: int = 0) -> Task:
    """A task whose rollout makes one call; rewards random unless `reward` (callable) given."""
    calls = {"n": 0}
    rng = random.Random(0)

    def scenarios(_rng: random.Random) -> Any:
        i = 0
        while True:
            yield Scenario(id=f"s{i}", data=i)
            i += 1

    async def rollout(client: Any, model: str, scenario: Scenario) -> Trajectory:
        calls["n"] += 1
        if fail_every and calls["n"] % fail_every == 0:
            raise RuntimeError("tool crashed")
        choice = await client.chat.completions.create(model=model, messages=[])
        value = reward(scenario) if reward is not None else rng.random()
        return Trajectory.from_choices([choice], reward=value)

    evals = (
        (lambda: [Scenario(id=f"e{i}", data=i) for i in range(eval_size)]) if eval_size else None
    )
    return Task(name="simulated", scenarios=scenarios, rollout=rollout, eval_scenarios=evals)
