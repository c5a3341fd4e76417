"""Qwen3's real format through the policy server, on both backends, with the official
`openai` client: the local backend on the fixture folder, and the Tinker path (the real
tinker SDK against the service double, which serves the same folder).

Each backend gets one policy (the fixture's 151,936-row model is the costly part) and one
test that walks the rows of issue 23's table: tools in Qwen3's own `<tools>` block and
`<tool_response>` turns (the prompt is `apply_chat_template(tools=...)` token for token),
forced calls after a single assistant header (closing within max_tokens where the sampler
runs here), `<think>` split into `reasoning_content` and echoed back, every end token
stopping a sample and never shown, and replies echoed verbatim extending the sampled tokens
exactly (a real edit does not). What the tiny random model cannot be made to write (a
`<think>` block, a stray `<|endoftext|>`) is scripted at the sampling client, the rest is
sampled for real.
"""

from __future__ import annotations

import json

import pytest
import tinker
from real_format import ENDOFTEXT, IM_END, WEATHER, openai_tools
from scripted_sampler import Scripted

from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.local import LocalServiceClient
from tinker_tui.engine.rollouts.trajectory import SampledTurn, trajectory_to_datum_arrays
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.server import PolicyServer
from tinker_tui.engine.training.rollout_loop import RolloutThread

CLOCK = {
    "name": "get_time",
    "description": "The time in a timezone.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
}
TOOLS = openai_tools(WEATHER, CLOCK)
QUESTION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
]


@pytest.fixture(params=["local", "tinker"])
async def served(request, qwen3_folder, tmp_path):
    if request.param == "local":
        service = LocalServiceClient(checkpoint_dir=tmp_path / "local")
        double = None
    else:
        from tinker_double import API_KEY, TinkerDouble

        double = TinkerDouble(tmp_path / "service").start()
        service = tinker.ServiceClient(base_url=double.base_url, api_key=API_KEY)
    session = BackendSession(service, base_model=str(qwen3_folder))
    await session.start()
    server = PolicyServer(session, model_name="policy", defaults=SamplingDefaults(max_tokens=8))
    await server.start()
    try:
        yield request.param, session, server.client()
    finally:
        await server.stop()
        await session.close("success")
        if double is not None:
            double.stop()


def _template(tokenizer, messages, tools=None):
    return list(
        tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
        )
    )


def _echo(message) -> dict:
    """The assistant message as an agent sends it back (the openai object, dumped)."""
    return message.model_dump(exclude_none=True)


def _turn(choice) -> SampledTurn:
    return SampledTurn.from_choice(choice)


async def test_qwen3_format_end_to_end(served) -> None:
    backend, session, client = served
    tokenizer = session.tokenizer
    assert session.renderer_name == "qwen3_instruct"
    assert set(session.end_tokens) == {IM_END, ENDOFTEXT}
    assert (await client.models.retrieve("policy")).model_extra["tool_calls"] == "native"

    # tools: Qwen3's own <tools> block, the prompt is the template's, token for token
    first = await client.chat.completions.create(
        model="policy", messages=QUESTION, tools=TOOLS, max_tokens=4, seed=1
    )
    prompt = first.choices[0].model_extra["prompt_token_ids"]
    assert prompt == _template(tokenizer, QUESTION, TOOLS)
    assert "<tools>" in tokenizer.decode(prompt)

    # a named forced call: one assistant header, then Qwen3's own call opening
    forced = await client.chat.completions.create(
        model="policy",
        messages=QUESTION,
        tools=TOOLS,
        max_tokens=24,
        seed=2,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    choice = forced.choices[0]
    prompt = choice.model_extra["prompt_token_ids"]
    text = tokenizer.decode(prompt)
    assert text.endswith(
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments":'
    ), text[-120:]
    assert text.count("<|im_start|>assistant") == 1
    assert prompt[: len(_template(tokenizer, QUESTION, TOOLS))] == _template(
        tokenizer, QUESTION, TOOLS
    )
    if backend == "local":  # sampled here: one whole call, within the schema and the budget
        assert choice.finish_reason == "tool_calls"
        [call] = choice.message.tool_calls
        assert call.function.name == "get_weather"
        assert set(json.loads(call.function.arguments)) == {"city"}
        assert choice.model_extra["token_ids"][-1] == IM_END
        assert len(choice.model_extra["token_ids"]) <= 24
    required = await client.chat.completions.create(
        model="policy",
        messages=QUESTION,
        tools=TOOLS,
        max_tokens=24,
        seed=3,
        tool_choice="required",
    )
    text = tokenizer.decode(required.choices[0].model_extra["prompt_token_ids"])
    assert text.endswith('<|im_start|>assistant\n<tool_call>\n{"name": "')
    if backend == "local":
        assert required.choices[0].message.tool_calls[0].function.name in {
            "get_weather",
            "get_time",
        }

    # multi-turn: the sampled call echoed with its tool result, then a plain reply echoed
    # verbatim: each prompt extends the tokens sampled so far
    if backend != "local":  # the service's sampler made no call: script one (parsed here)
        real, session.sampling_client = (
            session.sampling_client,
            Scripted(tokenizer, ' {"city":  "Paris"}}\n</tool_call><|im_end|>'),
        )
        forced = await client.chat.completions.create(
            model="policy",
            messages=QUESTION,
            tools=TOOLS,
            max_tokens=24,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
        )
        choice = forced.choices[0]
        session.sampling_client = real
    [call] = choice.message.tool_calls
    history = [
        *QUESTION,
        _echo(choice.message),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"},
    ]
    turns = [_turn(choice)]
    second = await client.chat.completions.create(
        model="policy", messages=history, tools=TOOLS, max_tokens=6, seed=4
    )
    turns.append(_turn(second.choices[0]))
    history.append(_echo(second.choices[0].message))
    history.append({"role": "user", "content": "And Rome?"})
    third = await client.chat.completions.create(
        model="policy", messages=history, tools=TOOLS, max_tokens=4, seed=5
    )
    turns.append(_turn(third.choices[0]))
    arrays = trajectory_to_datum_arrays(turns, 1.0)
    assert (arrays.turns, arrays.prefix_mismatches) == (3, 0)
    # ... and a real edit of a reply does count
    edited = [*history[:-2], {"role": "assistant", "content": "edited"}, history[-1]]
    fourth = await client.chat.completions.create(
        model="policy", messages=edited, tools=TOOLS, max_tokens=2, seed=6
    )
    assert (
        trajectory_to_datum_arrays([*turns[:2], _turn(fourth.choices[0])], 1.0).prefix_mismatches
        == 1
    )

    # reasoning and end tokens, scripted: <think> becomes reasoning_content, <|endoftext|>
    # ends the sample (and is asked of the sampler as a stop), neither shows in content
    scripted = Scripted(
        tokenizer,
        "<think>\nhmm, Paris\n</think>\n\nIt is sunny.<|im_end|>",
        "ok<|endoftext|>and more",
        "fine<|im_end|>",
    )
    session.sampling_client = scripted
    thought = await client.chat.completions.create(model="policy", messages=QUESTION)
    message = thought.choices[0].message
    assert message.content == "It is sunny."
    assert message.model_extra["reasoning_content"] == "hmm, Paris"
    assert set(scripted.params[0].stop) == {IM_END, ENDOFTEXT}
    ended = await client.chat.completions.create(model="policy", messages=QUESTION)
    assert ended.choices[0].message.content == "ok"
    assert ended.choices[0].finish_reason == "stop"
    assert ended.choices[0].model_extra["token_ids"][-1] == ENDOFTEXT
    # the reply echoed with its reasoning_content is accepted, rendered as the template
    # renders history (Qwen3-Instruct drops it), and the turn still extends exactly
    echoed = [*QUESTION, _echo(message), {"role": "user", "content": "Thanks"}]
    assert echoed[2]["reasoning_content"] == "hmm, Paris"
    after = await client.chat.completions.create(model="policy", messages=echoed)
    assert (
        trajectory_to_datum_arrays(
            [_turn(thought.choices[0]), _turn(after.choices[0])], 1.0
        ).prefix_mismatches
        == 0
    )
    plain = [
        *QUESTION,
        {"role": "assistant", "content": "It is sunny.", "reasoning_content": "other"},
        {"role": "user", "content": "Thanks"},
    ]
    session.sampling_client = Scripted(tokenizer, "x<|im_end|>")
    rendered = await client.chat.completions.create(model="policy", messages=plain)
    assert rendered.choices[0].model_extra["prompt_token_ids"] == _template(tokenizer, plain)

    # the same end token through a server on the rollout thread, as a run serves it (the
    # engine-loop view of the policy passed on no end tokens: only <|im_end|> ended a sample)
    scripted = Scripted(tokenizer, "ok<|endoftext|>and more")
    session.sampling_client = scripted
    rollouts = RolloutThread()
    await rollouts.start()

    async def ask_on_the_rollout_thread():
        threaded = PolicyServer(
            rollouts.policy_for_server(session),
            model_name="policy",
            defaults=SamplingDefaults(max_tokens=8),
        )
        await threaded.start()
        try:
            return await threaded.client().chat.completions.create(
                model="policy", messages=QUESTION
            )
        finally:
            await threaded.stop()

    try:
        ended = await rollouts.run(ask_on_the_rollout_thread())
    finally:
        await rollouts.close()
    assert set(scripted.params[0].stop) == {IM_END, ENDOFTEXT}
    assert ended.choices[0].message.content == "ok"
    assert ended.choices[0].model_extra["token_ids"][-1] == ENDOFTEXT
