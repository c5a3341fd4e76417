"""`reasoning_effort` through the policy server, with the official `openai` client, on the
real-format fixture (Qwen3's tokenizer): a renderer with a thinking switch (Qwen3's hybrid
`qwen3`) renders "none"/"minimal" as thinking off (the template's empty `<think>` block
ahead of the reply) and any other effort as thinking on; a renderer without one (the
instruct model's `qwen3_instruct`) refuses the parameter with a 400 that says why."""

from __future__ import annotations

import openai
import pytest

from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.local import LocalServiceClient
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.server import PolicyServer

QUESTION = [{"role": "user", "content": "Is 7 prime?"}]


async def _serve(folder, tmp_path, renderer: str | None):
    service = LocalServiceClient(checkpoint_dir=tmp_path / "local")
    session = BackendSession(service, base_model=str(folder), renderer_name=renderer)
    await session.start()
    server = PolicyServer(session, model_name="policy", defaults=SamplingDefaults(max_tokens=4))
    await server.start()
    return session, server


def _template(tokenizer, thinking: bool) -> list[int]:
    return list(
        tokenizer.apply_chat_template(
            QUESTION,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            enable_thinking=thinking,
        )
    )


async def test_reasoning_effort_switches_thinking_where_the_renderer_has_a_switch(
    qwen3_folder, tmp_path
):
    session, server = await _serve(qwen3_folder, tmp_path, "qwen3")
    try:
        client = server.client()
        tokenizer = session.tokenizer
        prompts = {}
        for effort in ("none", "minimal", "low", "high", None):
            extra = {} if effort is None else {"reasoning_effort": effort}
            reply = await client.chat.completions.create(
                model="policy", messages=QUESTION, max_tokens=2, seed=1, **extra
            )
            prompts[effort] = reply.choices[0].model_extra["prompt_token_ids"]
        off = tokenizer.decode(prompts["none"])
        assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), off[-60:]
        assert prompts["minimal"] == prompts["none"]
        assert prompts["low"] == prompts["high"] == prompts[None]
        assert tokenizer.decode(prompts["high"]).endswith("<|im_start|>assistant\n")
        assert prompts["none"] != prompts["high"]
        # the policy's own renderer is untouched by a request that switched it
        assert session.renderer_name == "qwen3"
    finally:
        await server.stop()
        await session.close("success")


async def test_reasoning_effort_is_refused_where_the_renderer_has_no_switch(qwen3_folder, tmp_path):
    session, server = await _serve(qwen3_folder, tmp_path, None)
    try:
        assert session.renderer_name == "qwen3_instruct"
        client = server.client()
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(
                model="policy", messages=QUESTION, max_tokens=2, reasoning_effort="low"
            )
        error = refused.value.body
        assert error["param"] == "reasoning_effort"
        assert "qwen3_instruct, which has none" in error["message"]
        assert "thinking switch" in error["message"]
        # without the parameter the same request is served
        reply = await client.chat.completions.create(
            model="policy", messages=QUESTION, max_tokens=2
        )
        assert reply.choices[0].message.role == "assistant"
    finally:
        await server.stop()
        await session.close("success")
