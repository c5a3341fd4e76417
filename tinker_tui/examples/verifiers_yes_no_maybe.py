"""yes / no / maybe as a `verifiers` environment, run unchanged by tinker-tui.

The built-in example's preference written the way a verifiers 0.4 environment is written
(the layout `vf init` scaffolds): a `TaskData` row, a `Task` whose `@vf.reward` methods score
the finished trace (two of them: `answered`, one of the three words at all, and
`preference`, how much that word is preferred; each is charted as a reward component), a
`Taskset` that loads the tasks, and a harness that plays a task. `Task.from_verifiers(env)`
makes the tinker-tui task: each episode runs through the env's own `run_episode`, its model
calls answered by the policy being trained. Needs ``pip install "tinker-tui[verifiers]"``;
run it with ``tinker-tui run tinker_tui.examples.verifiers_yes_no_maybe``.

verifiers' own harnesses launch an agent program with `uv` (network on first use); this
one runs its chat loop in-process, which verifiers allows as long as every model call goes
through the interception endpoint it is given, so the example runs offline.

verifiers loads a taskset and its harness by id, as a top-level module name; this module
registers itself under `ENV_ID` so that id finds it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

import openai
import verifiers.v1 as vf

from tinker_tui import Task
from tinker_tui.examples.yes_no_maybe import (
    EVAL_QUESTIONS,
    TRAIN_QUESTIONS,
    WARMUP,
    prompt_for,
    reward_for,
)

__all__ = ["AnswerHarness", "AnswerTask", "AnswerTaskset"]

ENV_ID = "tinker_tui_vf_yes_no_maybe"
sys.modules.setdefault(ENV_ID, sys.modules[__name__])


class AnswerTask(vf.Task[vf.TaskData]):
    """One question; the reply is scored by two rewards, half the weight each."""

    @vf.reward(weight=0.5)
    async def answered(self, trace: vf.Trace) -> float:
        return 1.0 if reward_for(trace.last_reply) > 0 else 0.0

    @vf.reward(weight=0.5)
    async def preference(self, trace: vf.Trace) -> float:
        return reward_for(trace.last_reply)


class AnswerConfig(vf.TasksetConfig):
    split: str = "train"
    """`train`: the training questions, round and round; `eval`: the held-out ones, once."""


class AnswerTaskset(vf.Taskset[AnswerTask, AnswerConfig]):
    INFINITE = True

    def load(self) -> Iterator[AnswerTask]:
        questions = TRAIN_QUESTIONS if self.config.split == "train" else EVAL_QUESTIONS
        rounds = 0
        while True:
            for number, question in enumerate(questions):
                data = vf.TaskData(id=f"q{number}-{rounds}", prompt=prompt_for(question))
                yield AnswerTask(data, self.config.task)
            rounds += 1
            if self.config.split != "train":
                return


class AnswerHarness(vf.Harness[vf.HarnessConfig]):
    """A one-turn chat, in-process: the task's prompt to the model, its reply the answer."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
    ) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages: list[Any] = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": str(prompt)})
        async with openai.AsyncOpenAI(base_url=endpoint, api_key=secret) as client:
            reply = await client.chat.completions.create(
                model=ctx.model, messages=messages, max_tokens=6
            )
        return vf.ProgramResult(0, reply.choices[0].message.content or "", "")


def environment() -> vf.Env:
    # On this machine (verifiers runs agents in a Prime sandbox by default).
    config = {"taskset": {"id": ENV_ID}, "agent": {"runtime": {"type": "subprocess"}}}
    return vf.load_environment(vf.resolve_env_config(config))


def eval_tasks() -> list[AnswerTask]:
    return list(AnswerTaskset(AnswerConfig(id=ENV_ID, split="eval")))


TASK = dataclasses.replace(
    Task.from_verifiers(
        environment(),
        name="verifiers_yes_no_maybe",
        eval_tasks=eval_tasks(),
        settings={"max_steps": 60, "warmup_steps": 60, "eval_every": 20},
    ),
    # The built-in example's format warm-up (the three answers equally often) and rate.
    warmup=WARMUP,
    backend_settings={"local": {"learning_rate": 3e-3}},
)
