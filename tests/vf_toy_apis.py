"""A verifiers environment whose harness speaks Anthropic's Messages API (as Claude Code does),
for tests/test_verifiers_envs.py; `vf_toy_responses` is a harness for it that speaks OpenAI's
Responses API (as Codex does). Offline: the harnesses play in-process. Each asks a yes/no/maybe
question, sends the reply back as history (the format's own blocks or items) and asks again,
streamed; the reward is the second answer's (as the example's). `SEEN` keeps the token ids
each reply carried, for the test to find in the trajectories the run trained."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import verifiers.v1 as vf

from tinker_tui.examples.yes_no_maybe import TRAIN_QUESTIONS, prompt_for, reward_for

__all__ = ["AskTask", "AskTaskset", "MessagesHarness"]

ENV_ID = "vf_toy_apis"
AGAIN = "Are you sure? Say yes, no or maybe."
#: (first reply's token ids, second reply's), one per episode played.
SEEN: list[tuple[tuple[int, ...], tuple[int, ...]]] = []


class AskTask(vf.Task[vf.TaskData]):
    @vf.reward(weight=1.0)
    async def answer(self, trace: vf.Trace) -> float:
        return reward_for(trace.last_reply)


class AskTaskset(vf.Taskset[AskTask, vf.TasksetConfig]):
    def load(self) -> Iterator[AskTask]:
        for number, question in enumerate(TRAIN_QUESTIONS[:4]):
            yield AskTask(vf.TaskData(id=f"q{number}", prompt=prompt_for(question)))


def tokens(reply: Any) -> tuple[int, ...]:
    """The sampled token ids the policy server put on a reply (a Message or a Response)."""
    return tuple(reply.model_extra["token_ids"])


class MessagesHarness(vf.Harness[vf.HarnessConfig]):
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
        history: list[Any] = [{"role": "user", "content": str(prompt)}]
        # As Claude Code is pointed at a proxy: ANTHROPIC_BASE_URL is the endpoint less /v1.
        async with anthropic.AsyncAnthropic(
            base_url=endpoint.removesuffix("/v1"), api_key=secret, max_retries=0
        ) as client:
            first = await client.messages.create(model=ctx.model, max_tokens=8, messages=history)
            history.append(
                {"role": "assistant", "content": [b.model_dump() for b in first.content]}
            )
            history.append({"role": "user", "content": AGAIN})
            async with client.messages.stream(
                model=ctx.model, max_tokens=6, messages=history
            ) as stream:
                # a streamed reply's token ids ride on its `message_delta` event
                last = [tokens(e) async for e in stream if e.type == "message_delta"]
                second = await stream.get_final_message()
        SEEN.append((tokens(first), last[0]))
        answer = "".join(b.text for b in second.content if b.type == "text")
        return vf.ProgramResult(0, answer, "")


def environment(harness: str = ENV_ID) -> vf.Env:
    """The env, its agent played by `harness` (a harness module's id)."""
    config = {
        "taskset": {"id": ENV_ID},
        "agent": {"harness": {"id": harness}, "runtime": {"type": "subprocess"}},
    }
    return vf.load_environment(vf.resolve_env_config(config))
