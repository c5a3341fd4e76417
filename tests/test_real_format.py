"""The real-format fixture is faithful: Qwen3's tokenizer gives Qwen3's ids, and the chat
template renders token for token as tinker-cookbook's `qwen3_instruct` renderer does on
conversations with a system message, tools, tool calls, tool results and several turns."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from real_format import (
    ADDED_TOKENS,
    ENDOFTEXT,
    FIRST_ADDED_ID,
    IM_END,
    SPECIAL_COUNT,
    VOCAB_SIZE,
    WEATHER,
    openai_tools,
)

CLOCK = {
    "name": "get_time",
    "description": "The time in a timezone.",
    "parameters": {
        "type": "object",
        "properties": {"tz": {"type": "string"}, "hour24": {"type": "boolean"}},
    },
}

#: A handler asked only to render (`prepare`): no policy samples; it declares no end tokens.
NO_POLICY: Any = SimpleNamespace(end_tokens=())


@pytest.fixture(scope="module")
def tokenizer(qwen3_tokenizer_folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen3_tokenizer_folder)


def test_known_ids(tokenizer) -> None:
    assert tokenizer.encode("Hello world") == [9707, 1879]
    assert tokenizer.encode("Hello, world!") == [9707, 11, 1879, 0]
    assert tokenizer.encode("\n") == [198]
    assert tokenizer.encode("\n\n") == [271]
    assert len(tokenizer) == FIRST_ADDED_ID + len(ADDED_TOKENS) == 151669


def test_added_tokens_sit_at_their_ids_and_only_the_first_fourteen_are_special(tokenizer):
    for offset, text in enumerate(ADDED_TOKENS):
        assert tokenizer.convert_tokens_to_ids(text) == FIRST_ADDED_ID + offset
        assert tokenizer.encode(text) == [FIRST_ADDED_ID + offset]
    special = set(tokenizer.all_special_tokens)
    assert set(ADDED_TOKENS[:SPECIAL_COUNT]) <= special
    assert not set(ADDED_TOKENS[SPECIAL_COUNT:]) & special
    # a special token is dropped by skip_special_tokens; the tool and think tokens are text
    ids = tokenizer.encode("<think>a</think><tool_call>b<|im_end|>")
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<think>a</think><tool_call>b"
    assert tokenizer.eos_token_id == IM_END and tokenizer.pad_token_id == ENDOFTEXT


def _call(name: str, arguments: dict[str, object], call_id: str):
    from tinker_cookbook.renderers import ToolCall

    return ToolCall(
        function=ToolCall.FunctionBody(name=name, arguments=json.dumps(arguments)), id=call_id
    )


def _conversations():
    weather = _call("get_weather", {"city": "Paris"}, "c1")
    return [
        [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
        [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [weather]},
            {"role": "tool", "content": "sunny, 21C", "tool_call_id": "c1"},
            {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "And Rome?\n\n  thanks  "},
        ],
        [
            {"role": "system", "content": "Be helpful."},
            {"role": "user", "content": "Paris, then the time in Tokyo"},
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    weather,
                    _call("get_time", {"tz": "Asia/Tokyo", "hour24": True}, "c2"),
                ],
            },
            {"role": "tool", "content": "rain", "tool_call_id": "c1"},
            {"role": "assistant", "content": "Rain in Paris."},
            {"role": "user", "content": "ok, café?"},
        ],
    ]


def _as_openai(conversation):
    out = []
    for message in conversation:
        message = dict(message)
        if "tool_calls" in message:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.function.name,
                        "arguments": json.loads(c.function.arguments),
                    },
                }
                for c in message["tool_calls"]
            ]
        out.append(message)
    return out


@pytest.mark.parametrize("with_tools", [False, True], ids=["plain", "tools"])
@pytest.mark.parametrize("index", range(3))
def test_the_template_agrees_with_the_cookbook_renderer(tokenizer, with_tools, index) -> None:
    from tinker_cookbook import renderers

    renderer = renderers.get_renderer("qwen3_instruct", tokenizer)
    conversation = _conversations()[index]
    messages = conversation
    if with_tools:
        system = conversation[0]["content"] if conversation[0]["role"] == "system" else ""
        rest = conversation[1:] if system else conversation
        messages = renderer.create_conversation_prefix_with_tools([WEATHER, CLOCK], system) + rest
    expected = renderer.build_generation_prompt(messages).to_ints()
    rendered = tokenizer.apply_chat_template(
        _as_openai(conversation),
        tools=openai_tools(WEATHER, CLOCK) if with_tools else None,
        add_generation_prompt=True,
        tokenize=False,
    )
    assert tokenizer.encode(rendered) == expected, rendered


def test_the_tiny_model_folder(qwen3_folder) -> None:
    config = json.loads((qwen3_folder / "config.json").read_text())
    assert config["vocab_size"] == VOCAB_SIZE and config["tie_word_embeddings"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["head_dim"]) == (2, 64, 16)
    generation = json.loads((qwen3_folder / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [IM_END, ENDOFTEXT]


@pytest.mark.parametrize(
    ("model_type", "template_edit", "expected"),
    [
        ("qwen3", None, "qwen3_instruct"),
        ("mistral", None, "chat_template"),  # a family the cookbook has no renderer for
        ("qwen3", "a fine-tune's own template", "chat_template"),
    ],
)
def test_a_folder_renders_through_its_familys_renderer_only_where_it_agrees_with_its_template(
    tokenizer, tmp_path, model_type, template_edit, expected
) -> None:
    import copy

    from tinker_tui.engine.backend.choice import make_renderer

    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    if template_edit:  # a default system turn the cookbook's renderer does not write
        tokenizer = copy.copy(tokenizer)
        tokenizer.chat_template = (
            "{%- if messages[0].role != 'system' %}<|im_start|>system\n"
            "You are helpful.<|im_end|>\n{%- endif %}" + tokenizer.chat_template
        )
    renderer, name = make_renderer(str(tmp_path), tokenizer)
    assert name == expected


def test_a_forced_call_on_a_folders_own_template_opens_after_one_assistant_header(tokenizer):
    """A template renderer (a family the cookbook does not know) keeps the text tool
    protocol; its forced call's prefill follows the generation prompt's header, once."""
    from tinker_tui.engine.rendering.chat_template_renderer import ChatTemplateRenderer
    from tinker_tui.engine.sampling_defaults import SamplingDefaults
    from tinker_tui.engine.server.handler import ChatHandler
    from tinker_tui.engine.server.schema import ChatCompletionRequest

    renderer = ChatTemplateRenderer(tokenizer)
    handler = ChatHandler(
        NO_POLICY, model_name="m", defaults=SamplingDefaults(), max_tokens_limit=64
    )
    body = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": openai_tools(WEATHER),
            "tool_choice": "required",
        }
    )
    prepared = handler.prepare(body, renderer)
    text = tokenizer.decode(prepared.prompt_tokens)
    assert text.count("<|im_start|>assistant") == 1
    # `required` with one tool is that tool named: the prefill carries its name
    assert text.endswith('<|im_start|>assistant\n{"name": "get_weather", "arguments":'), text[-80:]


@pytest.mark.parametrize("index", range(3))
def test_the_splicing_prompt_builder_renders_as_the_renderer_does(tokenizer, index) -> None:
    """With no sampled reply to put back, `sampled_turns.build_prompt` (the cookbook's
    message-by-message loop, made to know the tokens before each message) is the renderer's
    own generation prompt; with one, that reply's tokens take its place exactly."""
    from tinker_cookbook import renderers

    from tinker_tui.engine.server.sampled_turns import (
        SampledTurns,
        build_prompt,
        message_key,
        splices,
    )

    renderer = renderers.get_renderer("qwen3_instruct", tokenizer)
    assert splices(renderer)
    messages = (
        renderer.create_conversation_prefix_with_tools([WEATHER], "") + _conversations()[index]
    )
    keys = [
        message_key(m["content"], [])
        if m["role"] == "assistant" and not m.get("tool_calls")
        else None
        for m in messages
    ]
    turns = SampledTurns()
    expected = renderer.build_generation_prompt(messages).to_ints()
    assert (
        build_prompt(renderer, messages, keys, [None] * len(messages), turns, [IM_END]).to_ints()
        == expected
    )
    plain = [i for i, k in enumerate(keys) if k is not None]
    if not plain:
        return
    i = plain[0]
    before = renderer.build_generation_prompt(messages[:i]).to_ints()
    odd = [tokenizer.convert_tokens_to_ids(c) for c in "It"] + [IM_END]  # not canonical
    turns.put(before, keys[i], odd)
    spliced = build_prompt(
        renderer, messages, keys, [None] * len(messages), turns, [IM_END]
    ).to_ints()
    assert spliced[: len(before) + len(odd)] == before + odd
    assert spliced != expected


@pytest.mark.parametrize("keeps", [False, True], ids=["drops", "keeps"])
def test_a_request_messages_reasoning_renders_as_the_template_renders_history(tokenizer, keeps):
    """reasoning_content in a request is accepted, and a folder's template decides: the
    fixture's (Qwen3-Instruct-2507) drops it, a thinking template keeps it."""
    import copy

    from tinker_tui.engine.rendering.chat_template_renderer import ChatTemplateRenderer
    from tinker_tui.engine.sampling_defaults import SamplingDefaults
    from tinker_tui.engine.server.handler import ChatHandler
    from tinker_tui.engine.server.schema import ChatCompletionRequest

    if keeps:
        tokenizer = copy.copy(tokenizer)
        tokenizer.chat_template = (
            "{%- for m in messages %}<|im_start|>{{ m.role }}\n{%- if m.reasoning_content %}"
            "<think>{{ m.reasoning_content }}</think>{%- endif %}{{ m.content }}<|im_end|>\n"
            "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
        )
    handler = ChatHandler(
        NO_POLICY, model_name="m", defaults=SamplingDefaults(), max_tokens_limit=64
    )
    body = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello.", "reasoning_content": "be kind"},
                {"role": "user", "content": "Bye"},
            ],
        }
    )
    text = tokenizer.decode(handler.prepare(body, ChatTemplateRenderer(tokenizer)).prompt_tokens)
    assert ("<think>be kind</think>Hello." in text) == keeps, text
    assert "Hello." in text
