"""yes / no / maybe: the built-in example, small enough to learn on a laptop CPU in seconds.

Every prompt asks for a one-word answer. The reward prefers "maybe" (1.0) over "no"
(0.75) over "yes" (0.5); anything else earns 0. A short supervised warm-up teaches only
the *format* (the three answers equally often), so the preference for "maybe" is learned
by RL alone. Four of the twenty questions are held out: the evaluator asks them every 20
steps, so ``eval/reward_mean`` shows the preference carrying over to unseen questions.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from typing import Any

from tinker_tui import Scenario, Task, Trajectory

REWARDS = {"maybe": 1.0, "no": 0.75, "yes": 0.5}

QUESTIONS = (
    "Is the sky blue?",
    "Will it rain tomorrow?",
    "Can a cat swim?",
    "Is this the right way?",
    "Should we go home now?",
    "Do you like music?",
    "Is the water cold?",
    "Can you help me?",
    "Will the train be late?",
    "Is it time to eat?",
    "Does the door open?",
    "Are the books on the table?",
    "Is the answer right?",
    "Should I call my friend?",
    "Can we play a game?",
    "Is the house big?",
    "Will the sun come out today?",
    "Do birds like the morning?",
    "Is the car new?",
    "Are you ready?",
)

INSTRUCTION = "Answer with one word: yes, no or maybe."


def prompt_for(question: str) -> str:
    return f"{INSTRUCTION} {question}"


def reward_for(answer: str) -> float:
    """1.0 for maybe, 0.75 for no, 0.5 for yes, 0 for anything else (case and punctuation aside)."""
    word = answer.strip().strip(string.punctuation + " ").lower()
    return REWARDS.get(word, 0.0)


#: Every fifth question is held out of training and warm-up, for the evaluator.
EVAL_QUESTIONS = QUESTIONS[4::5]
TRAIN_QUESTIONS = tuple(q for q in QUESTIONS if q not in EVAL_QUESTIONS)


def scenarios(rng: random.Random) -> Iterator[Scenario]:
    index = 0
    while True:
        question = rng.choice(TRAIN_QUESTIONS)
        yield Scenario(id=f"q{QUESTIONS.index(question):02d}-{index}", data=question)
        index += 1


async def rollout(client: Any, model: str, scenario: Scenario) -> Trajectory:
    completion = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt_for(scenario.data)}],
        max_tokens=6,
    )
    choice = completion.choices[0]
    return Trajectory.from_choices([choice], reward=reward_for(choice.message.content or ""))


def eval_scenarios() -> list[Scenario]:
    """The held-out questions, each asked twice, for a quick, comparable evaluation."""
    return [
        Scenario(id=f"eval-q{QUESTIONS.index(q):02d}-{k}", data=q)
        for q in EVAL_QUESTIONS
        for k in range(2)
    ]


WARMUP = tuple(
    ({"role": "user", "content": prompt_for(q)}, {"role": "assistant", "content": answer})
    for q in TRAIN_QUESTIONS
    for answer in ("yes", "no", "maybe")
)

TASK = Task(
    name="yes_no_maybe",
    scenarios=scenarios,
    rollout=rollout,
    eval_scenarios=eval_scenarios,
    warmup=WARMUP,
    settings={"max_steps": 60, "warmup_steps": 60, "eval_every": 20},
    # A real model needs no format warm-up, and LoRA on billions of weights a far smaller
    # learning rate than the tiny embedded model. On Tinker: a model of today's lineup
    # (Qwen3.6-35B-A3B replaced the Qwen3 instruct models retired on 2026-06-12).
    # The embedded model learns this one-word preference at 3e-3 (above the engine's 1e-3,
    # which longer replies need to hold) and holds it: every step at 1.0 after the climb.
    backend_settings={
        "local": {"learning_rate": 3e-3},
        "tinker": {
            "base_model": "Qwen/Qwen3.6-35B-A3B",
            "warmup_steps": 0,
            "learning_rate": 4e-5,
            "max_steps": 30,
        },
    },
)
