"""Forced tool calls (tool_choice "required" or a named function) on the local backend,
through the policy server and the official `openai` client.

The promise (docs/real-model-formats.md): where the sampler runs here, a forced call closes
whenever a minimal call fits `max_tokens`, for the text protocol (the embedded model) and a
family's own format (the real-format Qwen3 fixture); a complete call is parsed whether or
not the end-of-turn token fitted; and a forced call comes back as exactly one call of an
allowed function, with no content beside it.
"""

from __future__ import annotations

import json

import pytest
from scripted_sampler import Scripted

from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.config import DEFAULT_BASE_MODEL
from tinker_tui.engine.local import LocalServiceClient
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.server import PolicyServer
from tinker_tui.engine.server.tool_call_constraint import ToolCallConstraint

QUESTION = [{"role": "user", "content": "What is 2 plus 3?"}]


def _tool(name: str) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }


ADD, MUL = _tool("add"), _tool("mul")
NAMED = {"type": "function", "function": {"name": "add"}}


async def _served(base_model: str, tmp_path):
    session = BackendSession(LocalServiceClient(checkpoint_dir=tmp_path), base_model=base_model)
    await session.start()
    server = PolicyServer(session, model_name="policy", defaults=SamplingDefaults(max_tokens=8))
    await server.start()
    return session, server


def _one_call(choice, names=("add",)) -> dict:
    """The choice is exactly one call of one of `names`, closed, with no content."""
    assert choice.finish_reason == "tool_calls", (
        choice.message.content,
        choice.model_extra["token_ids"],
    )
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.function.name in names
    arguments = json.loads(call.function.arguments)
    assert set(arguments) == {"a", "b"} and all(type(v) is int for v in arguments.values())
    return arguments


@pytest.fixture
async def embedded(tmp_path):
    session, server = await _served(DEFAULT_BASE_MODEL, tmp_path)
    yield session, server.client()
    await server.stop()
    await session.close("success")


async def test_required_closes_at_tight_budgets_on_the_embedded_model(embedded):
    session, client = embedded
    for max_tokens in (16, 24, 28):
        for choice in ("required", NAMED):
            completion = await client.chat.completions.create(
                model="policy",
                messages=QUESTION,
                tools=[ADD],
                tool_choice=choice,
                n=2,
                max_tokens=max_tokens,
                seed=max_tokens,
            )
            for c in completion.choices:
                _one_call(c)
                assert len(c.model_extra["token_ids"]) <= max_tokens


async def test_required_among_tools_closes_when_a_minimal_call_fits(embedded):
    """With two tools the model picks the name (held to the tools' names): the fewest
    tokens that make a call from the prefill are enough."""
    session, client = embedded
    call = ToolCallConstraint.for_tools(
        [
            {"name": t["function"]["name"], "parameters": t["function"]["parameters"]}
            for t in (ADD, MUL)
        ],
        ("add", "mul"),
    )
    minimal = len(
        session.tokenizer.encode(
            call.completion(call.start(' {"name": "')), add_special_tokens=False
        )
    )
    completion = await client.chat.completions.create(
        model="policy",
        messages=QUESTION,
        tools=[ADD, MUL],
        tool_choice="required",
        n=4,
        max_tokens=minimal,
        seed=7,
    )
    for c in completion.choices:
        _one_call(c, ("add", "mul"))


async def test_a_named_choice_returns_one_call_and_no_content(embedded):
    """Issue 33 item 11: a reply that does not keep the call's shape (a sampler that cannot
    be held to it, as Tinker's) returned the prefilled opening and free text as content
    beside two parsed calls."""
    session, client = embedded
    session.sampling_client = Scripted(
        session.tokenizer,
        ' Let me add. {"name": "add", "arguments": {"a": 1, "b": 2}} '
        '{"name": "mul", "arguments": {"a": 3, "b": 4}}\n\nUser:',
        stop_reason="stop",
    )
    for choice in (NAMED, "required"):
        completion = await client.chat.completions.create(
            model="policy", messages=QUESTION, tools=[ADD, MUL], tool_choice=choice
        )
        assert _one_call(completion.choices[0]) == {"a": 1, "b": 2}


@pytest.fixture
async def qwen3(qwen3_folder, tmp_path):
    session, server = await _served(str(qwen3_folder), tmp_path)
    yield session, server.client()
    await server.stop()
    await session.close("success")


async def test_forced_calls_close_on_the_qwen3_fixture(qwen3):
    from real_format import IM_END

    session, client = qwen3
    for max_tokens, choice in ((16, "required"), (24, "required"), (28, "required"), (16, NAMED)):
        completion = await client.chat.completions.create(
            model="policy",
            messages=QUESTION,
            tools=[ADD],
            tool_choice=choice,
            n=2,
            max_tokens=max_tokens,
            seed=max_tokens,
        )
        for c in completion.choices:
            _one_call(c)
            assert len(c.model_extra["token_ids"]) <= max_tokens
            text = session.tokenizer.decode(c.model_extra["token_ids"])
            assert "</tool_call>" in text
            assert (
                c.model_extra["token_ids"][-1] == IM_END
                or len(c.model_extra["token_ids"]) == max_tokens
            )

    # a complete call whose <|im_end|> did not fit is still a call, forced or not
    session.sampling_client = Scripted(
        session.tokenizer,
        '<tool_call>\n{"name": "add", "arguments": {"a": 0, "b": 0}}\n</tool_call>',
    )
    auto = await client.chat.completions.create(
        model="policy", messages=QUESTION, tools=[ADD, MUL], max_tokens=20
    )
    assert _one_call(auto.choices[0]) == {"a": 0, "b": 0}
    session.sampling_client = Scripted(
        session.tokenizer, 'add", "arguments": {"a": 0, "b": 0}}\n</tool_call>'
    )
    required = await client.chat.completions.create(
        model="policy", messages=QUESTION, tools=[ADD, MUL], tool_choice="required", max_tokens=16
    )
    assert _one_call(required.choices[0]) == {"a": 0, "b": 0}


def test_the_grammar_mask_lets_through_only_what_the_scanner_allows():
    """The mask (engine.local.token_masks) is a subset of the scanner's shape: at each
    point of a call every token it allows keeps the reply a possible call, and it allows
    some; a tool's name is chosen among the tools' names."""
    from tinker_tui.engine.local.token_masks import TokenMasks
    from tinker_tui.engine.local.tokenizer import WordTokenizer

    tokenizer = WordTokenizer()
    masks = TokenMasks(tokenizer, len(tokenizer))
    tools = [
        {"name": t["function"]["name"], "parameters": t["function"]["parameters"]}
        for t in (ADD, MUL)
    ]
    call = ToolCallConstraint.for_tools(tools, ("add", "mul"))
    prefix = ' {"name": "'
    matcher = masks.matcher(call, prefix)
    assert matcher is not None
    for piece in ("m", "ul", '", "arguments": {', '"a": 1', "2", ', "b": ', "-3", "}"):
        allowed = masks.allowed([matcher], len(tokenizer))[0].nonzero().flatten().tolist()
        assert allowed
        for token in allowed:
            text = prefix + tokenizer.decode([token])
            assert call.check(text) != "reject", (prefix, tokenizer.decode([token]))
        if prefix == ' {"name": "':  # the name: a letter of "add" or "mul" only
            assert {tokenizer.decode([t]) for t in allowed} == {"a", "m"}
        for token in tokenizer.encode(piece, add_special_tokens=False):
            assert matcher.consume_token(token), (prefix, piece)
        prefix += piece
    assert call.check(prefix + "}") == "done"
