"""subprocess_agent: an agent in a process of its own, speaking Anthropic's Messages API,
trained on tokens it never sees.

What it shows that the other examples do not:

* the rollout returns only a reward (`Reward`), no `choices`: the policy server files every
  reply made under the rollout's own address (its client's `base_url` ends in the
  trajectory's key) and the run trains on exactly those sampled tokens, every turn;
* the agent is a separate program (`subprocess_agent_program.py`) using the official
  `anthropic` client, pointed at the run by ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY, as
  Claude-style agents and harnesses are pointed at a proxy. It asks "What comes after N?",
  then "And the one after that?", and prints both replies;
* the reward is read from what the program printed: half for each right number (N+1, then
  N+2), and both turns train as one sequence.

Needs the `anthropic` package (`pip install anthropic`). The embedded model answers the first
question about a third of the time (see `next_number`), which is the signal it learns from.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tinker_tui import Reward, Scenario, Task
from tinker_tui.examples.next_number import TRAIN_NUMBERS, reward_for

PROGRAM = Path(__file__).with_name("subprocess_agent_program.py")


def scenarios(rng: Any) -> Iterator[Scenario]:
    index = 0
    while True:
        n = rng.choice(TRAIN_NUMBERS)
        yield Scenario(id=f"agent-after-{n}-{index}", data={"n": n})
        index += 1


async def rollout(client: Any, model: str, scenario: Scenario) -> Reward:
    """Run the agent program on this trajectory's address; score what it prints."""
    number = scenario.data["n"]
    # The openai client's address is .../r/<key>/v1/; Anthropic clients add /v1 themselves.
    address = str(client.base_url).rstrip("/").removesuffix("/v1")
    env = {**os.environ, "ANTHROPIC_BASE_URL": address, "ANTHROPIC_API_KEY": client.api_key}
    agent = await asyncio.create_subprocess_exec(
        sys.executable,
        str(PROGRAM),
        model,
        str(number),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await agent.communicate()
    if agent.returncode != 0:
        raise RuntimeError(f"the agent program failed: {err.decode(errors='replace')[-500:]}")
    first, _, second = out.decode().strip("\n").partition("\n")
    right = reward_for(first, number + 1), reward_for(second, number + 2)
    return Reward(
        sum(right) / 2,
        first_right=right[0] == 1.0,
        second_right=right[1] == 1.0,
        messages=[
            {"role": "user", "content": f"What comes after {number}?"},
            {"role": "assistant", "content": first},
            {"role": "user", "content": "And the one after that?"},
            {"role": "assistant", "content": second},
        ],
    )


TASK = Task(
    name="subprocess_agent",
    scenarios=scenarios,
    rollout=rollout,
    settings={"max_steps": 60, "checkpoint_every": 20},
    backend_settings={"local": {"learning_rate": 1e-3, "group_size": 4, "groups_per_step": 4}},
)
