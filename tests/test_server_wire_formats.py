"""The policy server's other wire formats, with the official clients on Qwen3's real format:
Anthropic's Messages API (`anthropic.AsyncAnthropic(...).messages.create` and `.stream`) and
OpenAI's Responses API (`openai.AsyncOpenAI(...).responses.create` and `.stream`), and the
capture of every reply under a trajectory's address prefix (`/r/<key>/`).

Each is a translation onto the chat-completions path, so the same guarantees are checked
here in each format: tools in Qwen3's own `<tools>` block (the prompt is the template's),
a tool call parsed into the format's own call (`tool_use` / `function_call`), reasoning as
the format's own block, and a reply echoed as the client hands it back extending the tokens
that were sampled (no prefix mismatch). Tool calls and `<think>` are scripted at the
sampling client (the tiny random model does not write them); the rest is sampled for real.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from real_format import IM_END, WEATHER, openai_tools
from scripted_sampler import Scripted as ScriptedSampler

from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.local import LocalServiceClient
from tinker_tui.engine.rollouts.trajectory import (
    Reward,
    SampledTurn,
    TrajectoryError,
    trajectory_to_datum_arrays,
)
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.server import PolicyServer

SYSTEM = "Be brief."
ASK = "Weather in Paris?"
# Spaced unusually on purpose: the echoed `tool_use.input` (a dict) must still find the
# sampled tokens, whatever text the model wrote its arguments as.
CALL = '<think>\nParis, then.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city":  "Paris"}}\n</tool_call><|im_end|>'


def Scripted(tokenizer, *texts):  # noqa: N802  (a class's name: it makes one)
    """The scripted sampler, answering as a model that stopped on its own."""
    return ScriptedSampler(tokenizer, *texts, stop_reason="stop")


@pytest.fixture
async def served(qwen3_folder, tmp_path):
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path), base_model=str(qwen3_folder)
    )
    await session.start()
    server = PolicyServer(session, model_name="policy", defaults=SamplingDefaults(max_tokens=8))
    await server.start()
    clients = [
        anthropic.AsyncAnthropic(
            base_url=f"http://127.0.0.1:{server.port}", api_key=server.token, max_retries=0
        ),
        openai.AsyncOpenAI(base_url=server.base_url, api_key=server.token, max_retries=0),
    ]
    try:
        yield session, server, *clients
    finally:
        for client in clients:
            await client.close()
        await server.stop()
        await session.close("success")


def _template(tokenizer, messages, tools=None):
    return list(
        tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
        )
    )


def _turn(reply) -> SampledTurn:
    """A Message or Response carries the chat choice's token fields at its top."""
    return SampledTurn.from_choice({**reply.model_extra, "finish_reason": ""})


def _mismatches(*replies) -> int:
    arrays = trajectory_to_datum_arrays([_turn(r) for r in replies], 1.0)
    assert arrays.turns == len(replies)
    return arrays.prefix_mismatches


async def test_messages_tool_round_trip_and_exact_turns(served) -> None:
    session, server, claude, _ = served
    tokenizer = session.tokenizer
    session.sampling_client = Scripted(tokenizer, CALL, "It is sunny.<|im_end|>")
    tools = [
        {
            "name": WEATHER["name"],
            "description": WEATHER["description"],
            "input_schema": WEATHER["parameters"],
        }
    ]
    ask = [{"role": "user", "content": ASK}]
    first = await claude.messages.create(
        model="policy", max_tokens=64, system=SYSTEM, messages=ask, tools=tools
    )
    # Qwen3's own tool block: the prompt is the template's, token for token
    assert first.model_extra["prompt_token_ids"] == _template(
        tokenizer, [{"role": "system", "content": SYSTEM}, *ask], openai_tools(WEATHER)
    )
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    assert first.content[0].thinking == "Paris, then."
    call = first.content[1]
    assert (call.name, call.input) == ("get_weather", {"city": "Paris"})
    assert first.stop_reason == "tool_use"
    assert first.model_extra["token_ids"][-1] == IM_END
    history = [
        *ask,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21C"},
            ],
        },
    ]
    second = await claude.messages.create(
        model="policy", max_tokens=64, system=SYSTEM, messages=history, tools=tools
    )
    assert [b.type for b in second.content] == ["text"]
    assert second.content[0].text == "It is sunny."
    assert second.stop_reason == "end_turn"
    assert "<tool_response>\nsunny, 21C\n</tool_response>" in tokenizer.decode(
        second.model_extra["prompt_token_ids"]
    )
    # the echoed call turn is its sampled tokens, whitespace and all
    assert _mismatches(first, second) == 0
    # a real edit of the call (other input) is rendered from its text and does not extend
    session.sampling_client = Scripted(tokenizer, "ok<|im_end|>")
    history[1]["content"][1]["input"] = {"city": "Rome"}
    edited = await claude.messages.create(
        model="policy", max_tokens=64, system=SYSTEM, messages=history, tools=tools
    )
    assert _mismatches(first, edited) == 1

    # refused in Anthropic's own error shape
    with pytest.raises(anthropic.BadRequestError, match="top_k"):
        await claude.messages.create(
            model="policy", max_tokens=4, messages=ask, extra_body={"top_k": 5}
        )
    with pytest.raises(anthropic.NotFoundError):
        await claude.messages.create(model="other", max_tokens=4, messages=ask)


async def test_messages_sampled_turns_and_streaming(served) -> None:
    session, server, claude, _ = served
    ask = [{"role": "user", "content": ASK}]
    # sampled for real: the echoed reply's tokens are the sampled ones
    first = await claude.messages.create(model="policy", max_tokens=6, messages=ask)
    history = [
        *ask,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": "And Rome?"},
    ]
    async with claude.messages.stream(model="policy", max_tokens=6, messages=history) as stream:
        texts = [text async for text in stream.text_stream]
        second = await stream.get_final_message()
    assert "".join(texts) == "".join(b.text for b in second.content if b.type == "text")
    assert second.model_extra == {}  # the token fields ride on the final event, not here
    # a streamed forced call (its opening is prefilled), accumulated by the client
    real, session.sampling_client = (
        session.sampling_client,
        Scripted(session.tokenizer, ' {"city":  "Paris"}}\n</tool_call><|im_end|>'),
    )
    tools = [{"name": "get_weather", "input_schema": WEATHER["parameters"]}]
    async with claude.messages.stream(
        model="policy",
        max_tokens=64,
        messages=ask,
        tools=tools,
        tool_choice={"type": "tool", "name": "get_weather"},
    ) as stream:
        called = await stream.get_final_message()
    assert [b.type for b in called.content] == ["tool_use"]
    assert called.content[0].input == {"city": "Paris"}
    assert called.stop_reason == "tool_use"
    session.sampling_client = real
    # the first reply and a turn after it, by raw HTTP as a subprocess agent would send
    raw = await claude.messages.with_raw_response.create(
        model="policy", max_tokens=6, messages=history
    )
    assert _mismatches(first, await raw.parse()) == 0


async def test_responses_tool_round_trip_and_exact_turns(served) -> None:
    session, server, _, gpt = served
    tokenizer = session.tokenizer
    session.sampling_client = Scripted(tokenizer, CALL, "It is sunny.<|im_end|>")
    tools = [{"type": "function", "strict": False, **WEATHER}]
    first = await gpt.responses.create(
        model="policy", instructions=SYSTEM, input=ASK, tools=tools, max_output_tokens=64
    )
    assert first.model_extra["prompt_token_ids"] == _template(
        tokenizer,
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK}],
        openai_tools(WEATHER),
    )
    assert [item.type for item in first.output] == ["reasoning", "function_call"]
    assert first.output[0].content[0].text == "Paris, then."
    call = first.output[1]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    history = [
        {"role": "user", "content": ASK},
        *first.output,
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21C"},
    ]
    second = await gpt.responses.create(
        model="policy", instructions=SYSTEM, input=history, tools=tools, max_output_tokens=64
    )
    assert second.output_text == "It is sunny."
    assert second.status == "completed"
    assert _mismatches(first, second) == 0

    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        await gpt.responses.create(model="policy", input=ASK, previous_response_id="resp_x")
    with pytest.raises(openai.BadRequestError, match="unsupported input item type 'web_search"):
        await gpt.responses.create(model="policy", input=[{"type": "web_search_call", "id": "w"}])
    # Anthropic's clients send the token as x-api-key; a wrong one is refused
    stranger = anthropic.AsyncAnthropic(
        base_url=f"http://127.0.0.1:{server.port}", api_key="wrong", max_retries=0
    )
    with pytest.raises(anthropic.AuthenticationError):
        await stranger.messages.create(
            model="policy", max_tokens=2, messages=[{"role": "user", "content": ASK}]
        )
    await stranger.close()


async def test_responses_streaming_and_sampled_turns(served) -> None:
    session, server, _, gpt = served
    first = await gpt.responses.create(model="policy", input=ASK, max_output_tokens=6)
    assert first.status in ("completed", "incomplete")
    history = [
        {"role": "user", "content": ASK},
        *first.output,
        {"role": "user", "content": "And Rome?"},
    ]
    session.sampling_client = Scripted(session.tokenizer, "Rome is cloudy.<|im_end|>")
    async with gpt.responses.stream(model="policy", input=history, max_output_tokens=6) as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        second = await stream.get_final_response()
    assert "".join(deltas) == second.output_text == "Rome is cloudy."
    assert _mismatches(first, second) == 0


async def test_capture_files_replies_under_the_trajectory_key(served) -> None:
    session, server, claude, gpt = served
    key = server.captures.open()
    # an Anthropic client on the key's address, as a subprocess would be given it
    agent = anthropic.AsyncAnthropic(
        base_url=server.captures.base_url(key), api_key=server.token, max_retries=0
    )
    ask = [{"role": "user", "content": ASK}]
    try:
        first = await agent.messages.create(model="policy", max_tokens=6, messages=ask)
        history = [
            *ask,
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in first.content],
            },
            {"role": "user", "content": "And Rome?"},
        ]
        await agent.messages.create(model="policy", max_tokens=6, messages=history)
        # an OpenAI client on the same key (`client_for`: shares the connections)
        keyed = server.captures.client_for(gpt, key)
        assert str(keyed.base_url).rstrip("/").endswith(f"/r/{key}/v1")
        await keyed.chat.completions.create(model="policy", messages=ask, max_tokens=3)
        # not filed: the plain address
        await claude.messages.create(model="policy", max_tokens=3, messages=ask)
    finally:
        captured = server.captures.close(key)
    assert len(captured) == 3
    trajectory = Reward(1.0, correct=True).trajectory(captured)
    assert trajectory.turns[0].tokens == tuple(first.model_extra["token_ids"])
    arrays = trajectory_to_datum_arrays(trajectory.turns, 1.0)
    assert (arrays.turns, arrays.prefix_mismatches) == (3, 1)  # the third is a new chat
    assert trajectory.metrics == {"correct": True}
    # a closed key is refused before anything is sampled
    with pytest.raises(anthropic.NotFoundError, match="no trajectory is open"):
        await agent.messages.create(model="policy", max_tokens=3, messages=ask)
    await agent.close()
    with pytest.raises(TrajectoryError, match="nothing was sampled"):
        Reward(0.0).trajectory([])
    assert Reward.of(True) is None and Reward.of(0.5).value == 0.5
