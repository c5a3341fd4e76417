"""Tool calls through the server, parsed back into `tool_calls`, with scripted replies.

The renderer, tokenizer and policy are the real local ones; only the sampling client is
replaced by one that answers with scripted text, because a small random model does not write
valid tool calls on demand. A native-tool renderer (Qwen3's, on a character tokenizer) covers
the other path.
"""

import re
from concurrent.futures import Future

import numpy as np
import pytest
import tinker
from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture

from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.config import DEFAULT_BASE_MODEL
from tinker_tui.engine.local import LocalServiceClient
from tinker_tui.engine.rollouts.trajectory import Trajectory, TrajectoryGroup
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.server import PolicyServer, parse_text_tool_calls

QUESTION = [{"role": "user", "content": "What is 2 plus 3?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} two numbers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            },
        },
    }
    for name in ("add", "mul")
]


class ScriptedSampler:
    """Answers each sample() with the next scripted text, encoded with the policy's tokenizer."""

    def __init__(self, tokenizer, replies):
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.prompts = []

    def sample(self, prompt, num_samples, sampling_params, **_):
        self.prompts.append(prompt.to_ints())
        text = self.replies.pop(0)
        tokens = np.asarray(self.tokenizer.encode(text), dtype=np.int32)
        response = tinker.SampleResponse(
            sequences=[
                tinker.SampledSequence(
                    stop_reason="stop",
                    sequence_id=f"s{i}",
                    tokens_np=tokens,
                    logprobs_np=np.full(len(tokens), -0.25, dtype=np.float32),
                )
                for i in range(num_samples)
            ]
        )
        future = Future()
        future.set_result(response)
        return AwaitableConcurrentFuture(future)


@pytest.fixture
async def scripted(tmp_path):
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path), base_model=DEFAULT_BASE_MODEL
    )
    await session.start()
    server = PolicyServer(session, model_name="policy", defaults=SamplingDefaults(max_tokens=32))
    await server.start()

    def script(*replies):
        sampler = ScriptedSampler(session.tokenizer, replies)
        session.sampling_client = sampler
        return sampler

    yield server.client(), session, script
    await server.stop()


async def test_auto_parses_a_json_tool_call_out_of_the_reply(scripted):
    client, session, script = scripted
    script('Let me add.\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n\nUser:')
    completion = await client.chat.completions.create(
        model="policy", messages=QUESTION, tools=TOOLS
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me add."
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "add"
    assert call.function.arguments == '{"a": 2, "b": 3}'


async def test_tool_choice_none_returns_the_text(scripted):
    client, _, script = scripted
    reply = '{"name": "add", "arguments": {"a": 2, "b": 3}}'
    script(reply + "\n\nUser:")
    completion = await client.chat.completions.create(
        model="policy", messages=QUESTION, tools=TOOLS, tool_choice="none"
    )
    choice = completion.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    assert choice.message.content == reply


async def test_tool_choice_required_prefills_the_call(scripted):
    client, session, script = scripted
    sampler = script('mul", "arguments": {"a": 2, "b": 3}}\n\nUser:')
    completion = await client.chat.completions.create(
        model="policy", messages=QUESTION, tools=TOOLS, tool_choice="required"
    )
    choice = completion.choices[0]
    [call] = choice.message.tool_calls
    assert (call.function.name, call.function.arguments) == ("mul", '{"a": 2, "b": 3}')
    # the prefill is part of the prompt the sampler saw, and of prompt_token_ids
    assert session.tokenizer.decode(sampler.prompts[0]).endswith('Assistant: {"name": "')
    assert choice.model_extra["prompt_token_ids"] == sampler.prompts[0]


async def test_a_named_tool_choice_prefills_its_name_up_to_a_token_boundary(scripted):
    client, session, script = scripted
    tokenizer = session.tokenizer
    # the embedded tokenizer writes " {" as one token: a prefill ending in the space would
    # leave the model a continuation ("{" after a lone " ") it never writes
    assert [tokenizer.decode([t]) for t in tokenizer.encode(' {"a"')][0] == " {"
    sampler = script(' {"a": 1, "b": 1}}\n\nUser:')
    completion = await client.chat.completions.create(
        model="policy",
        messages=QUESTION,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "add"}},
    )
    [call] = completion.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == ("add", '{"a": 1, "b": 1}')
    prompt = sampler.prompts[0]
    assert tokenizer.decode(prompt).endswith('Assistant: {"name": "add", "arguments":')
    # the prompt ends with the first tokens of the whole call, as the model writes it
    whole = tokenizer.encode(' {"name": "add", "arguments": {"a": 1, "b": 1}}')
    header = tokenizer.encode("Assistant:")
    start = len(prompt) - next(
        i for i in range(len(prompt), 0, -1) if prompt[i - len(header) : i] == header
    )
    assert prompt[len(prompt) - start :] == whole[:start]


async def test_parallel_tool_calls_false_returns_one_call(scripted):
    client, _, script = scripted
    two = '{"name": "add", "arguments": {"a": 1}}\n{"name": "mul", "arguments": {"a": 2}}'
    script(two + "\n\nUser:", two + "\n\nUser:")
    both = await client.chat.completions.create(model="policy", messages=QUESTION, tools=TOOLS)
    one = await client.chat.completions.create(
        model="policy", messages=QUESTION, tools=TOOLS, parallel_tool_calls=False
    )
    assert [c.function.name for c in both.choices[0].message.tool_calls] == ["add", "mul"]
    assert [c.function.name for c in one.choices[0].message.tool_calls] == ["add"]
    assert one.choices[0].message.content == '{"name": "mul", "arguments": {"a": 2}}'


async def test_streamed_tool_calls(scripted):
    client, _, script = scripted
    script('{"name": "add", "arguments": {"a": 2, "b": 3}}\n\nUser:')
    stream = await client.chat.completions.create(
        model="policy", messages=QUESTION, tools=TOOLS, stream=True
    )
    calls, finish = [], None
    async for chunk in stream:
        for c in chunk.choices:
            calls += c.delta.tool_calls or []
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in calls] == [("add", '{"a": 2, "b": 3}')]


async def test_a_tool_conversation_trains_as_one_datum_on_the_sampled_tokens(scripted):
    """Tool call, tool result, answer: both assistant turns are trained, in one Datum, on the
    exact sampled tokens; the tool result is context only."""
    client, session, script = scripted
    # role_colon puts a space between "Assistant:" and the content; the model writes it too
    script(' {"name": "add", "arguments": {"a": 2, "b": 3}}\n\nUser:', " It is 5.\n\nUser:")
    messages = list(QUESTION)
    first = await client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages += [
        first.choices[0].message,
        {"role": "tool", "tool_call_id": call.id, "content": "5"},
    ]
    second = await client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "It is 5."
    trajectory = Trajectory.from_choices([first.choices[0], second.choices[0]], reward=1.0)
    other = Trajectory.from_choices([first.choices[0]], reward=0.0)
    group = TrajectoryGroup(
        group_id=0,
        scenario_id="s",
        trajectories=(trajectory, other),
        started_at=0.0,
        finished_at=1.0,
    )
    datums = session.build_datums([group])
    assert datums.metrics == {"train/turns": 3.0, "train/prefix_mismatch": 0.0}
    merged = datums[0]
    advantages = merged.loss_fn_inputs["advantages"].tolist()
    targets = merged.loss_fn_inputs["target_tokens"].tolist()
    trained = [t for t, a in zip(targets, advantages, strict=True) if a]
    sampled = first.choices[0].model_extra["token_ids"] + second.choices[0].model_extra["token_ids"]
    assert trained == sampled
    text = session.tokenizer.decode(merged.model_input.to_ints() + targets[-1:])
    assert "User: Tool add returned: 5" in text


async def test_an_edited_tool_call_is_counted_as_a_prefix_mismatch(scripted):
    client, session, script = scripted
    script(' {"name":"add","arguments":{"a":2}}\n\nUser:', " 5\n\nUser:")
    first = await client.chat.completions.create(model="policy", messages=QUESTION, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    # the agent sends back its own version of the call (same id, other arguments)
    edited = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 3}'},
            }
        ],
    }
    second = await client.chat.completions.create(
        model="policy",
        tools=TOOLS,
        messages=[*QUESTION, edited, {"role": "tool", "tool_call_id": call.id, "content": "5"}],
    )
    trajectory = Trajectory.from_choices([first.choices[0], second.choices[0]], reward=1.0)
    group = TrajectoryGroup(
        group_id=0,
        scenario_id="s",
        started_at=0.0,
        finished_at=1.0,
        trajectories=(trajectory, Trajectory(turns=trajectory.turns[:1], reward=0.0)),
    )
    datums = session.build_datums([group])
    assert datums.metrics["train/prefix_mismatch"] == 1.0
    assert len(datums) == 3  # the first trajectory split in two, the second one Datum
    result = await session.train(datums, learning_rate=1e-3)
    assert result.metrics["train/prefix_mismatch"] == 1.0


def test_parse_text_tool_calls():
    names = ["add"]
    assert parse_text_tool_calls('{"name": "add", "arguments": {"a": 1}}', names) == (
        "",
        [("add", '{"a": 1}')],
    )
    # arguments given as a JSON string, or left out
    assert parse_text_tool_calls('x {"name": "add", "arguments": "{\\"a\\": 1}"} y', names) == (
        "x\ny",
        [("add", '{"a": 1}')],
    )
    assert parse_text_tool_calls('{"name": "add"}', names) == ("", [("add", "{}")])
    # unknown tools, extra keys, broken JSON and plain braces stay content
    for text in (
        '{"name": "sub", "arguments": {}}',
        '{"name": "add", "arguments": {}, "x": 1}',
        '{"name": "add", "arguments": {',
        "a {b} c",
    ):
        assert parse_text_tool_calls(text, names) == (text.strip(), [])


# ---------------------------------------------------------------- native tool support
SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


class CharTokenizer:
    """Bytes plus Qwen's special tokens: enough for the cookbook's Qwen3 renderer."""

    name_or_path = "test/char"
    eos_token, bos_token, pad_token = "<|im_end|>", None, "<|endoftext|>"
    eos_token_id, bos_token_id = 1, None
    _split = re.compile("(" + "|".join(map(re.escape, SPECIALS)) + ")")

    def encode(self, text, add_special_tokens=False, **_):
        out = []
        for i, part in enumerate(self._split.split(text)):
            out += [SPECIALS.index(part)] if i % 2 else [len(SPECIALS) + b for b in part.encode()]
        return out

    def decode(self, ids, skip_special_tokens=False, **_):
        ids = [ids] if isinstance(ids, int) else list(ids)
        text, buf = [], bytearray()
        for t in ids:
            if t >= len(SPECIALS):
                buf.append(t - len(SPECIALS))
                continue
            text.append(buf.decode(errors="replace"))
            buf = bytearray()
            if not skip_special_tokens:
                text.append(SPECIALS[t])
        return "".join(text) + buf.decode(errors="replace")


class NativePolicy:
    """The server's view of a policy, with a Qwen3 renderer and a scripted sampler."""

    def __init__(self, replies):
        from tinker_cookbook.renderers import get_renderer

        self.tokenizer = CharTokenizer()
        self.renderer = get_renderer("qwen3_instruct", self.tokenizer)
        self.version = 0
        self.end_tokens = ()
        self.sampler = ScriptedSampler(self.tokenizer, replies)

    async def sample(
        self, prompt, num_samples, sampling_params, *, version=None, top_logprobs=0, **_
    ):
        return await self.sampler.sample(prompt, num_samples, sampling_params), self.version


async def test_a_renderer_with_native_tool_support_uses_its_own_format():
    session = NativePolicy(
        [
            '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>',
            "5, so 5.<|im_end|>",
            'mul", "arguments": {"a": 1, "b": 2}}\n</tool_call><|im_end|>',
        ]
    )
    server = PolicyServer(session, model_name="qwen")
    await server.start()
    try:
        client = server.client()
        first = await client.chat.completions.create(model="qwen", messages=QUESTION, tools=TOOLS)
        prompt = session.tokenizer.decode(session.sampler.prompts[0])
        assert "<tools>" in prompt and '"name": "add"' in prompt
        [call] = first.choices[0].message.tool_calls
        assert (call.function.name, call.function.arguments) == ("add", '{"a": 2, "b": 3}')
        assert first.choices[0].finish_reason == "tool_calls"
        # the echoed call renders in Qwen's format: the next prompt extends what was sampled
        second = await client.chat.completions.create(
            model="qwen",
            tools=TOOLS,
            stop=[", "],
            messages=[
                *QUESTION,
                first.choices[0].message,
                {"role": "tool", "tool_call_id": call.id, "content": "5"},
            ],
        )
        sampled = (
            first.choices[0].model_extra["prompt_token_ids"]
            + first.choices[0].model_extra["token_ids"]
        )
        assert second.choices[0].model_extra["prompt_token_ids"][: len(sampled)] == sampled
        # a user stop string with a renderer whose own stops are token ids: cut after sampling
        assert second.choices[0].message.content == "5"
        assert session.tokenizer.decode(second.choices[0].model_extra["token_ids"]) == "5, "
        # tool_choice "required": Qwen3's own call opening after the one assistant header
        forced = await client.chat.completions.create(
            model="qwen", messages=QUESTION, tools=TOOLS, tool_choice="required"
        )
        prompt = session.tokenizer.decode(session.sampler.prompts[2])
        assert prompt.endswith('<|im_start|>assistant\n<tool_call>\n{"name": "')
        [call] = forced.choices[0].message.tool_calls
        assert (call.function.name, call.function.arguments) == ("mul", '{"a": 1, "b": 2}')
        assert forced.choices[0].message.content is None
    finally:
        await server.stop()
