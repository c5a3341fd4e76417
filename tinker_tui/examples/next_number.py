"""next_number: "What comes after 41?" -- an exact-match reward, a held-out eval split, and a
group rollout that samples the whole group in one request.

What it shows that the other examples do not:

* ``group_rollout``: the ``n`` answers of a group come from one request (``n=n``) and return
  together, instead of ``n`` separate rollouts;
* an exact-match reward: 1 for the right number, 0 for anything else;
* a *held-out* eval split: every fifth number never appears in training; the evaluator asks
  each of them four times, so ``eval/reward_mean`` is how often the policy is right on
  numbers it never trained on -- what carries over, not what was memorised;
* RL that sharpens a skill the base already half has. The embedded model's pre-training
  corpus includes "What comes after N?" (engine/local/pretrain.py); sampled, it answers right
  about a third of the time. No format warm-up is needed.

Why 16 groups a step on the local backend (the engine's default is 4): the numbers are not
equally hard (the base knows some and never gets others), so the mean of 4 groups swung from
0.06 to 0.8 from one step to the next and every Adam step (about the learning rate per
weight, whatever the gradient's size) followed that noise: in 100 steps the reward stayed
near 0.3, and three unlucky steps in a row read as a collapse. With 16 groups it climbs
steadily (about 0.5 by step 100, 0.75 by step 200) at the same learning rate. A higher rate
is no cure: at 2e-3 or 3e-3 one or two steps took the numbers out of the answers altogether
(reward 0 from step 4 on).

On Tinker a real model answers these at once: there it is a smoke test of the loop.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

from tinker_tui import Scenario, Task, Trajectory

#: Problems are "What comes after n?" for 0 <= n <= LARGEST.
LARGEST = 99
#: Every HELD_OUT_EVERY-th number (in a fixed shuffled order) is held out for evaluation.
HELD_OUT_EVERY = 5


def prompt_for(n: int) -> str:
    return f"What comes after {n}?"


def reward_for(reply: str, answer: int) -> float:
    """1.0 when the reply is exactly the number (spaces and a final period aside), else 0."""
    text = reply.strip().rstrip(".").strip()
    return 1.0 if re.fullmatch(r"-?\d+", text) and int(text) == answer else 0.0


def _split() -> tuple[list[int], list[int]]:
    numbers = list(range(LARGEST + 1))
    random.Random(7).shuffle(numbers)
    held_out = sorted(numbers[::HELD_OUT_EVERY])
    return sorted(set(numbers) - set(held_out)), held_out


TRAIN_NUMBERS, EVAL_NUMBERS = _split()


def scenarios(rng: random.Random) -> Iterator[Scenario]:
    index = 0
    while True:
        n = rng.choice(TRAIN_NUMBERS)
        yield Scenario(id=f"after-{n}-{index}", data={"n": n})
        index += 1


def eval_scenarios() -> list[Scenario]:
    return [
        Scenario(id=f"eval-after-{n}-{k}", data={"n": n}) for n in EVAL_NUMBERS for k in range(4)
    ]


async def group_rollout(client: Any, model: str, scenario: Scenario, n: int) -> list[Trajectory]:
    """All n answers to one problem from one request (an evaluation is a group of one)."""
    number = scenario.data["n"]
    messages = [{"role": "user", "content": prompt_for(number)}]
    completion = await client.chat.completions.create(
        model=model, messages=messages, n=n, max_tokens=8
    )
    return [
        Trajectory.from_choices(
            [choice],
            reward=reward_for(choice.message.content or "", number + 1),
            messages=[*messages, {"role": "assistant", "content": choice.message.content}],
        )
        for choice in completion.choices
    ]


TASK = Task(
    name="next_number",
    scenarios=scenarios,
    group_rollout=group_rollout,
    eval_scenarios=eval_scenarios,
    settings={"max_steps": 150, "eval_every": 25, "eval_at_start": True, "checkpoint_every": 25},
    backend_settings={
        "local": {"learning_rate": 1e-3, "groups_per_step": 16},
        "tinker": {"learning_rate": 4e-5, "max_steps": 40, "eval_every": 10},
    },
)
