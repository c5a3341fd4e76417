"""A forced tool call kept within its shape where the backend samples here: the scanner's
verdicts by hand, and the embedded model's constrained samples through the policy server."""

import json
import random

import pytest

from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.config import DEFAULT_BASE_MODEL
from tinker_tui.engine.local import LocalServiceClient
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.server import PolicyServer
from tinker_tui.engine.server.tool_call_constraint import ArgumentRules, ToolCallConstraint
from tinker_tui.engine.server.tools import parse_text_tool_calls

CALL = ToolCallConstraint(("add", "mul"))
WEATHER_RULES = {
    "get_weather": ArgumentRules.from_schema(
        {
            "type": "object",
            "required": ["city", "unit"],
            "properties": {
                "city": {"type": "string"},
                "unit": {"enum": ["C", "F"]},
                "days": {"type": "integer"},
            },
        }
    )
}


@pytest.mark.parametrize(
    "text",
    [
        "",
        '{"name": "',
        '{"name": "get_w',
        '{"name": "get_weather", "arguments":',
        '{"name": "get_weather", "arguments": {',
        '{"name": "get_weather", "arguments": {"ci',
        '{"name": "get_weather", "arguments": {"city": "Par',
        '{"name": "get_weather", "arguments": {"city": "a\\',
        '{"name": "get_weather", "arguments": {"city": "a\\u00',
        '{"name": "get_weather", "arguments": {"days": -',
        '{"name": "get_weather", "arguments": {"days": 1, "unit": "',
        '{"name": "get_weather", "arguments": {"city": "x", "unit": "F", "days": 12',
        '{"name": "get_weather", "arguments": {"city": "x", "unit": "C"}}',
    ],
)
def test_the_shortest_completion_makes_any_partial_call_whole(text) -> None:
    """What the sampler writes when the budget runs out: from any point of a call, a text
    the scanner itself takes as the whole call (required keys added, enums kept)."""
    from tinker_tui.engine.server.call_completion import completion
    from tinker_tui.engine.server.native_calls import FramedCallConstraint

    call = ToolCallConstraint(("get_weather",), WEATHER_RULES)
    scan = call.start(text)
    assert scan.verdict != "reject"
    rest = completion(scan)
    assert rest is not None and call.check(text + rest) == "done", rest
    framed = FramedCallConstraint("<tool_call>\n", call, "\n</tool_call>")
    whole = "<tool_call>\n" + text
    rest = completion(framed.start(whole))
    assert rest is not None and rest.endswith("\n</tool_call>")
    assert framed.check(whole + rest) == "end"
    assert framed.check(whole + rest + " ") == "reject"  # then only the end of the turn


@pytest.mark.parametrize(
    "text, verdict",
    [
        ("", "continue"),
        (' {"name": "', "continue"),
        ('{"name": "mu', "continue"),
        ('{"name": "add", "arguments":', "continue"),
        ('{"name": "add", "arguments": {"a": 1, "b": [true, null, "x\\n"]', "continue"),
        ('{"name": "add", "arguments": {}}', "done"),
        ('{"name": "mul", "arguments": {"a": -1.5e3, "b": {"c": "d"}}}', "done"),
        # not a call of these tools, or not that shape
        ('{"name": "sub', "reject"),
        ('{"name": "add"}', "reject"),
        ('{"arguments": {}, "name": "add"}', "reject"),
        ('{"name": "add", "arguments": 3', "reject"),
        ('{"name": "add", "arguments": "x"', "reject"),
        ('{"name": "add", "arguments": {}, "more": 1}', "reject"),
        ('{"name": "add", "arguments": {}} and', "reject"),
        ('{"name": "add",  "arguments"', "reject"),  # one space at a time
        ('{"name": "add",\n"arguments"', "reject"),
        ('{"name": "add", "arguments": {"a": 01}', "reject"),
        ('{"name": "add", "arguments": {"a": tru}', "reject"),
        ('{"name": "add", "arguments": {"a" 1}', "reject"),
        ('{"name": "add", "arguments": {"a": "\\q"}', "reject"),
        ("hello", "reject"),
    ],
)
def test_verdicts(text, verdict):
    assert CALL.check(text) == verdict


def test_a_state_tries_candidates_without_changing():
    state = CALL.start('{"name": "add", "arguments": {"a": ')
    assert state.copy().feed("1}}") == "done"
    assert state.copy().feed("}") == "reject"
    assert state.verdict == "continue"  # the copies left it as it was
    assert state.feed("2") == "continue" and state.feed("}}") == "done"
    assert state.feed(" ") == "reject"  # nothing after the call


SCHEMAS = {
    "add": {
        "type": "object",
        "properties": {"a": {"type": "number"}, "n": {"type": "integer"}},
        "required": ["a"],
    },
    "find": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "enum": ["Paris", "Rome"]},
            "limit": {"type": ["integer", "null"]},
            "exact": {"type": "boolean"},
            "tags": {"type": "array"},
            "near": {},
        },
        "required": ["city"],
    },
}
TYPED = ToolCallConstraint(
    ("add", "find"), {name: ArgumentRules.from_schema(schema) for name, schema in SCHEMAS.items()}
)


@pytest.mark.parametrize(
    "text, verdict",
    [
        ('{"name": "add", "arguments": {"a": 1.5}}', "done"),
        ('{"name": "add", "arguments": {"a": -2, "n": 3}}', "done"),
        ('{"name": "add", "arguments": {"n": 3, "a": 2e3}}', "done"),
        ('{"name": "find", "arguments": {"city": "Ro', "continue"),
        ('{"name": "find", "arguments": {"city": "Rome", "limit": null, "exact": true}}', "done"),
        (
            '{"name": "find", "arguments": {"city": "Paris", "tags": ["a", 1], "near": {"x": 2}}}',
            "done",
        ),
        ('{"name": "find", "arguments": {"li', "continue"),
        # only declared keys, each once; a required one before the end
        ('{"name": "add", "arguments": {"b', "reject"),
        ('{"name": "add", "arguments": {"a": 1, "a', "reject"),
        ('{"name": "add", "arguments": {"n": 1}', "reject"),
        ('{"name": "add", "arguments": {}', "reject"),
        ('{"name": "add", "arguments": {"a": 1, "n": 2,', "reject"),  # no key is left
        # values of the property's type, and in its enum
        ('{"name": "add", "arguments": {"a": "1', "reject"),
        ('{"name": "add", "arguments": {"a": true', "reject"),
        ('{"name": "add", "arguments": {"a": 1, "n": 2.', "reject"),
        ('{"name": "add", "arguments": {"a": 1, "n": 2e', "reject"),
        ('{"name": "find", "arguments": {"city": "Lo', "reject"),
        ('{"name": "find", "arguments": {"city": "Paris2', "reject"),
        ('{"name": "find", "arguments": {"city": 3', "reject"),
        ('{"name": "find", "arguments": {"city": "Rome", "exact": null', "reject"),
        ('{"name": "find", "arguments": {"city": "Rome", "limit": 1.5', "reject"),
        ('{"name": "find", "arguments": {"city": "Rome", "tags": {', "reject"),
        # numbers a float64 holds, and no longer than it writes them
        ('{"name": "add", "arguments": {"a": 1e308}}', "done"),
        ('{"name": "add", "arguments": {"a": 1e309', "reject"),
        ('{"name": "add", "arguments": {"a": 1234567890123456789012345', "reject"),
        # a digit follows the point; an unfinished number of the longest length ends nowhere
        ('{"name": "add", "arguments": {"a": 3.', "continue"),
        ('{"name": "add", "arguments": {"a": 3.e', "reject"),
        ('{"name": "add", "arguments": {"a": 3.0e', "continue"),
        ('{"name": "add", "arguments": {"a": ' + "3." + "0" * 21 + "e", "reject"),  # 24 long
        ('{"name": "add", "arguments": {"a": ' + "3." + "0" * 20 + "e", "continue"),
    ],
)
def test_arguments_follow_the_tools_schema(text, verdict):
    assert TYPED.check(text) == verdict


@pytest.mark.parametrize("constraint", [CALL, TYPED], ids=["shape", "schema"])
def test_every_text_the_scanner_lets_through_can_still_become_a_call(constraint):
    """The sampler redraws tokens the scanner rejects; a text it let through that no
    character can continue was a dead end, where the sample ended as it was ("3.e8…" then
    a word, no call parsed). Random walks over the characters a call is made of."""
    rng = random.Random(0)
    alphabet = '0123456789.eE+- },":[]{truefalsn'
    for _ in range(300):
        text = '{"name": "add", "arguments": {' + rng.choice(['"a": ', '"n": ', ""])
        state = constraint.start(text)
        for _ in range(60):
            if state.verdict == "done":
                break
            allowed = [c for c in alphabet if state.copy().feed(c) != "reject"]
            assert allowed, f"dead end: {text!r}"
            text += rng.choice(allowed)
            state.feed(text[-1])
        assert constraint.check(text) == state.verdict  # fed piece by piece, or at once


def test_schemas_it_cannot_use_constrain_nothing():
    for schema in (
        None,
        {},
        {"type": "object"},
        {"properties": "x"},
        {"properties": {"a": {"type": "decimal"}}},
    ):
        rules = ToolCallConstraint(("t",), {"t": ArgumentRules.from_schema(schema)})
        assert rules.check('{"name": "t", "arguments": {"a": "x"}}') == "done", schema


def test_parsed_calls_are_json_and_never_infinity():
    names = ("add",)
    content, calls = parse_text_tool_calls('{"name": "add", "arguments": {"a": 1e999}}', names)
    assert calls == []  # Python reads it as inf, which JSON cannot write back
    _, calls = parse_text_tool_calls('{"name": "add", "arguments": {"a": NaN}}', names)
    assert calls == []  # not JSON
    _, calls = parse_text_tool_calls('{"name": "add", "arguments": {"a": 1.5e3}}', names)
    assert calls == [("add", '{"a": 1500.0}')]


ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        },
    },
}


@pytest.fixture
async def local_server(tmp_path):
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path), base_model=DEFAULT_BASE_MODEL
    )
    await session.start()
    server = PolicyServer(session, model_name="policy", defaults=SamplingDefaults(max_tokens=8))
    await server.start()
    yield server, session
    await server.stop()


async def test_the_local_models_forced_calls_keep_the_shape(local_server):
    """The untrained embedded model never wrote a parsable named call with the prefill
    alone; constrained, every sample is a call or, cut by max_tokens, the start of one."""
    srv, session = local_server
    assert session.can_constrain()
    completion = await srv.client().chat.completions.create(
        model="policy",
        messages=[{"role": "user", "content": "What is 2 plus 3?"}],
        tools=[ADD],
        tool_choice={"type": "function", "function": {"name": "add"}},
        n=16,
        max_tokens=24,
        seed=1,
    )
    parsed = 0
    for choice in completion.choices:
        if choice.message.tool_calls:
            [call] = choice.message.tool_calls
            assert call.function.name == "add"
            assert isinstance(json.loads(call.function.arguments), dict)
            assert choice.finish_reason == "tool_calls"
            parsed += 1
        else:
            # cut by max_tokens inside the call: what was sampled still fits its shape
            assert choice.finish_reason == "length"
            text = session.tokenizer.decode(choice.model_extra["token_ids"])
            assert CALL.check('{"name": "add", "arguments":' + text) == "continue"
    # logprobs stay the model's own: finite, one per sampled token
    for choice in completion.choices:
        logprobs = choice.model_extra["token_logprobs"]
        assert len(logprobs) == len(choice.model_extra["token_ids"])
        assert all(lp <= 0.0 for lp in logprobs)
    print(f"named calls parsed: {parsed}/{len(completion.choices)}")


LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look up a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
            "required": ["city"],
        },
    },
}


async def test_the_local_models_forced_calls_follow_the_schema(local_server):
    """Given only the JSON shape, the untrained model never closed this call within 24
    tokens (it wrote keys of its own); held to the schema, it writes the required key and
    one of the enum's values, and closes the call."""
    srv, _ = local_server
    completion = await srv.client().chat.completions.create(
        model="policy",
        messages=[{"role": "user", "content": "Where?"}],
        tools=[ADD, LOOKUP],
        tool_choice={"type": "function", "function": {"name": "lookup"}},
        n=16,
        max_tokens=24,
        seed=3,
    )
    closed = [c for c in completion.choices if c.message.tool_calls]
    assert len(closed) >= 12, [c.message.content for c in completion.choices]
    for choice in closed:
        [call] = choice.message.tool_calls
        arguments = json.loads(call.function.arguments)
        assert set(arguments) == {"city"} and arguments["city"] in ("Paris", "Rome")
