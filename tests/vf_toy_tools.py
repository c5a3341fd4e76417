"""A multi-turn verifiers environment with a tool, for tests/test_verifiers_envs.py (runs
offline: its harness plays in-process). The model must call `note(word)` first (the call is
forced), the harness runs the tool and hands its result back, then the model answers (a
streamed request); two
rewards: `called` (the call named a word) and `answer` (yes/no/maybe, as the example)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import verifiers.v1 as vf

from tinker_tui.examples.yes_no_maybe import TRAIN_QUESTIONS, prompt_for, reward_for

__all__ = ["NoteHarness", "NoteTask", "NoteTaskset"]

ENV_ID = "vf_toy_tools"

NOTE_TOOL = {
    "type": "function",
    "function": {
        "name": "note",
        "description": "Write down a word before answering.",
        "parameters": {
            "type": "object",
            "properties": {"word": {"type": "string"}},
            "required": ["word"],
        },
    },
}


class NoteTask(vf.Task[vf.TaskData]):
    @vf.reward(weight=0.5)
    async def called(self, trace: vf.Trace) -> float:
        return 1.0 if trace.info.get("noted") else 0.0

    @vf.reward(weight=0.5)
    async def answer(self, trace: vf.Trace) -> float:
        return reward_for(trace.last_reply)


class NoteTaskset(vf.Taskset[NoteTask, vf.TasksetConfig]):
    def load(self) -> Iterator[NoteTask]:
        for number, question in enumerate(TRAIN_QUESTIONS[:4]):
            yield NoteTask(vf.TaskData(id=f"n{number}", prompt=prompt_for(question)))


class NoteHarness(vf.Harness[vf.HarnessConfig]):
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
        _, prompt = self.resolve_prompt(data)
        messages: list[Any] = [{"role": "user", "content": str(prompt)}]
        async with openai.AsyncOpenAI(base_url=endpoint, api_key=secret) as client:
            first = await client.chat.completions.create(
                model=ctx.model,
                messages=messages,
                tools=[NOTE_TOOL],
                tool_choice={"type": "function", "function": {"name": "note"}},
                max_tokens=24,
            )
            message = first.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls or []:
                word = json.loads(call.function.arguments or "{}").get("word")
                trace.info["noted"] = word
                messages.append({"role": "tool", "tool_call_id": call.id, "content": "noted"})
            # The answer streamed, as agent programs (verifiers' bash harness) ask for it.
            stream = await client.chat.completions.create(
                model=ctx.model,
                messages=messages,
                max_tokens=6,
                stream=True,
                stream_options={"include_usage": True},
            )
            answer = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        return vf.ProgramResult(0, answer, "")


def environment() -> vf.Env:
    config = {"taskset": {"id": ENV_ID}, "agent": {"runtime": {"type": "subprocess"}}}
    return vf.load_environment(vf.resolve_env_config(config))
