"""A harness for `vf_toy_apis` that speaks OpenAI's Responses API (as Codex does): the same two
questions, the first reply's output items sent back as input, the second streamed."""

from __future__ import annotations

from typing import Any

import openai
import verifiers.v1 as vf
from vf_toy_apis import AGAIN, SEEN, tokens

__all__ = ["ResponsesHarness"]


class ResponsesHarness(vf.Harness[vf.HarnessConfig]):
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
        async with openai.AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            first = await client.responses.create(
                model=ctx.model, input=history, max_output_tokens=8
            )
            history += [item.model_dump(exclude_none=True) for item in first.output]
            history.append({"role": "user", "content": AGAIN})
            async with client.responses.stream(
                model=ctx.model, input=history, max_output_tokens=6
            ) as stream:
                second = await stream.get_final_response()
        SEEN.append((tokens(first), tokens(second)))
        return vf.ProgramResult(0, second.output_text, "")
