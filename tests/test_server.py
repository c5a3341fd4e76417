"""The in-process policy server, called through the official openai client (async and sync),
on the real local backend."""

import asyncio
import json
import logging
import threading
import time

import httpx
import openai
import pytest

from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.config import DEFAULT_BASE_MODEL
from tinker_tui.engine.local import LocalServiceClient
from tinker_tui.engine.rollouts.trajectory import SampledTurn, Trajectory, TrajectoryGroup
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.server import TOOLS_HEADER, PolicyServer
from tinker_tui.engine.server.schema import ChatCompletionRequest

QUESTION = [{"role": "user", "content": "Is the sky blue?"}]
ADD_TOOL = {
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
async def server(tmp_path):
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path), base_model=DEFAULT_BASE_MODEL
    )
    await session.start()
    server = PolicyServer(session, model_name="policy", defaults=SamplingDefaults(max_tokens=8))
    await server.start()
    yield server, session
    await server.stop()


async def test_chat_completion_with_logprobs_and_sampled_tokens(server):
    srv, session = server
    client = srv.client()
    completion = await client.chat.completions.create(
        model="policy", messages=QUESTION, n=3, logprobs=True, max_tokens=5, seed=7
    )
    assert completion.object == "chat.completion"
    assert len(completion.choices) == 3
    for choice in completion.choices:
        assert choice.finish_reason in ("stop", "length")
        assert isinstance(choice.message.content, str)
        turn = SampledTurn.from_choice(choice)
        assert 1 <= len(turn.tokens) <= 5
        assert turn.policy_version == session.version == 0
        assert [c.logprob for c in choice.logprobs.content] == pytest.approx(list(turn.logprobs))
        assert all(lp <= 0 for lp in turn.logprobs)
        # the prompt tokens are exactly what the renderer builds for these messages
        expected = session.renderer.build_generation_prompt(QUESTION).to_ints()
        assert list(turn.prompt_tokens) == expected
    assert completion.usage.completion_tokens == sum(
        len(SampledTurn.from_choice(c).tokens) for c in completion.choices
    )


async def test_same_seed_same_completion(server):
    srv, _ = server
    client = srv.client()
    kwargs = dict(
        model="policy",
        messages=[{"role": "user", "content": "Are you ready?"}],
        max_tokens=6,
        seed=123,
    )
    a = await client.chat.completions.create(**kwargs)
    b = await client.chat.completions.create(**kwargs)
    assert a.choices[0].model_extra["token_ids"] == b.choices[0].model_extra["token_ids"]


async def test_stop_ends_the_reply_before_the_stop_string(server):
    srv, session = server
    client = srv.client()
    for seed in range(10):  # a seed whose reply is long enough to cut
        kwargs = dict(
            model="policy",
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=12,
            seed=seed,
        )
        free = await client.chat.completions.create(**kwargs)
        text = free.choices[0].message.content
        tokens = free.choices[0].model_extra["token_ids"]
        if len(text.strip()) >= 3:
            break
    else:
        pytest.skip("no reply long enough to cut")
    # stop at a piece of what the same seed produces without a stop
    stop = text.strip()[1:3]
    stopped = await client.chat.completions.create(**kwargs, stop=[stop])
    choice = stopped.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.content == text[: text.find(stop)]
    # sampling stopped at the token that completed the stop string: the same tokens so far
    sampled = choice.model_extra["token_ids"]
    assert sampled == tokens[: len(sampled)]
    assert stop in session.tokenizer.decode(sampled)
    assert stop not in session.tokenizer.decode(sampled[:-1])


async def test_top_logprobs(server):
    srv, _ = server
    client = srv.client()
    completion = await client.chat.completions.create(
        model="policy", messages=QUESTION, max_tokens=4, logprobs=True, top_logprobs=3
    )
    choice = completion.choices[0]
    for entry in choice.logprobs.content:
        assert len(entry.top_logprobs) == 3
        best = [t.logprob for t in entry.top_logprobs]
        assert best == sorted(best, reverse=True) and entry.logprob <= best[0] + 1e-5


async def test_streaming_carries_the_same_completion_and_its_tokens(server):
    srv, _ = server
    client = srv.client()
    kwargs = dict(model="policy", messages=QUESTION, max_tokens=6, seed=11, n=2)
    plain = await client.chat.completions.create(**kwargs)
    stream = await client.chat.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True}
    )
    content = {0: "", 1: ""}
    finals = {}
    usage = None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            content[c.index] += c.delta.content or ""
            if c.finish_reason is not None:
                finals[c.index] = c
    for i in (0, 1):
        assert content[i] == plain.choices[i].message.content
        assert finals[i].finish_reason == plain.choices[i].finish_reason
        # the extension fields ride on each choice's final chunk
        assert SampledTurn.from_choice(finals[i]) == SampledTurn.from_choice(plain.choices[i])
    assert usage is not None and usage.completion_tokens == plain.usage.completion_tokens


async def test_the_sync_openai_client_works_too(server):
    srv, _ = server
    sync = openai.OpenAI(base_url=srv.base_url, api_key=srv.token, max_retries=0)
    try:
        completion = await asyncio.to_thread(
            sync.chat.completions.create, model="policy", messages=QUESTION, n=2, max_tokens=4
        )
        models = await asyncio.to_thread(sync.models.list)
    finally:
        sync.close()
    assert len(completion.choices) == 2
    assert all(SampledTurn.from_choice(c).tokens for c in completion.choices)
    assert "policy" in [m.id for m in models.data]


async def test_tools_with_each_tool_choice_on_the_local_model(server):
    """The embedded model's renderer has no tool format: tools go into the system message
    and 'required' / a named function prefill the start of the JSON call."""
    srv, session = server
    client = srv.client()
    decode = session.tokenizer.decode
    for tool_choice in (
        "auto",
        "none",
        "required",
        {"type": "function", "function": {"name": "add"}},
    ):
        completion = await client.chat.completions.create(
            model="policy",
            messages=QUESTION,
            tools=[ADD_TOOL],
            tool_choice=tool_choice,
            max_tokens=10,
            seed=3,
        )
        choice = completion.choices[0]
        prompt = decode(choice.model_extra["prompt_token_ids"])
        assert TOOLS_HEADER in prompt and '"name": "add"' in prompt
        if tool_choice == "none":
            assert choice.message.tool_calls is None
        if isinstance(tool_choice, dict) or tool_choice == "required":
            # "required" with one tool is that tool named;
            # on the token boundary: this tokenizer writes ' {' as one token
            assert prompt.endswith('Assistant: {"name": "add", "arguments":')
        if choice.message.tool_calls:  # a random small model rarely writes a whole call
            assert choice.finish_reason == "tool_calls"
            assert choice.message.tool_calls[0].function.name == "add"
        else:
            assert isinstance(choice.message.content, str)


async def test_multi_turn_conversation_trains_every_turn_on_its_sampled_tokens(server):
    srv, session = server
    client = srv.client()
    messages = list(QUESTION)
    choices = []
    for follow_up in ("Why?", "Are you sure?"):
        completion = await client.chat.completions.create(
            model="policy", messages=messages, max_tokens=8
        )
        choice = completion.choices[0]
        choices.append(choice)
        messages += [choice.message, {"role": "user", "content": follow_up}]
    trajectories = (
        Trajectory.from_choices(choices, reward=1.0),
        Trajectory.from_choices(choices[:1], reward=0.0),
    )
    group = TrajectoryGroup(
        group_id=0, scenario_id="s", trajectories=trajectories, started_at=0.0, finished_at=1.0
    )
    datums = session.build_datums([group])
    assert datums.metrics["train/turns"] == 3
    # every sampled token is trained once, with the logprob it was sampled with
    sampled = [
        (t, lp)
        for c in choices
        for t, lp in zip(c.model_extra["token_ids"], c.model_extra["token_logprobs"], strict=True)
    ]
    trained = [
        (tok, lp)
        for d in datums[: len(datums) - 1]
        for tok, lp, adv in zip(
            d.loss_fn_inputs["target_tokens"].tolist(),
            d.loss_fn_inputs["logprobs"].tolist(),
            d.loss_fn_inputs["advantages"].tolist(),
            strict=True,
        )
        if adv != 0
    ]
    assert [t for t, _ in trained] == [t for t, _ in sampled]
    assert [lp for _, lp in trained] == pytest.approx([lp for _, lp in sampled])
    # turns that end at the stop sequence re-render to the same tokens and share a Datum
    assert len(datums) - 1 == 1 + datums.metrics["train/prefix_mismatch"]
    result = await session.train(datums, learning_rate=1e-3)
    assert result.policy_version == 1
    assert result.metrics["train/turns"] == 3


async def test_earlier_policy_versions_are_served_by_name_at_step(server):
    srv, session = server
    client = srv.client()
    first = await client.chat.completions.create(model="policy", messages=QUESTION)
    group = TrajectoryGroup(
        group_id=0,
        scenario_id="s",
        finished_at=1.0,
        started_at=0.0,
        trajectories=(
            Trajectory.from_choices(first.choices, reward=1.0),
            Trajectory.from_choices(first.choices, reward=0.0),
        ),
    )
    await session.train(session.build_datums([group]), learning_rate=1e-3)
    now = await client.chat.completions.create(model="policy", messages=QUESTION)
    before = await client.chat.completions.create(model="policy@0", messages=QUESTION)
    assert now.choices[0].model_extra["policy_version"] == 1
    assert before.choices[0].model_extra["policy_version"] == 0
    ids = [m.id for m in (await client.models.list()).data]
    assert {"policy", "policy@0", "policy@1"} <= set(ids)
    with pytest.raises(openai.NotFoundError, match="not available"):
        await client.chat.completions.create(model="policy@7", messages=QUESTION)


async def test_errors_are_openai_shaped_and_the_server_keeps_serving(server):
    srv, _ = server
    client = srv.client()
    messages = QUESTION
    with pytest.raises(openai.NotFoundError, match="unknown model"):
        await client.chat.completions.create(model="other", messages=messages)
    with pytest.raises(openai.BadRequestError, match="unsupported parameter: frequency_penalty"):
        await client.chat.completions.create(
            model="policy", messages=messages, frequency_penalty=0.5
        )
    with pytest.raises(openai.BadRequestError, match="unsupported parameter: logit_bias"):
        await client.chat.completions.create(model="policy", messages=messages, logit_bias={"1": 5})
    with pytest.raises(openai.BadRequestError, match="exceeds this server's limit"):
        await client.chat.completions.create(model="policy", messages=messages, max_tokens=10**6)
    with pytest.raises(openai.BadRequestError, match="exceeds this server's limit"):
        await client.chat.completions.create(
            model="policy", messages=messages, max_completion_tokens=10**9
        )
    with pytest.raises(openai.BadRequestError, match="n"):
        await client.chat.completions.create(model="policy", messages=messages, n=0)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        await client.chat.completions.create(model="policy", messages=messages, temperature=5)
    with pytest.raises(openai.BadRequestError, match="top_logprobs needs logprobs"):
        await client.chat.completions.create(model="policy", messages=messages, top_logprobs=2)
    with pytest.raises(openai.BadRequestError, match="tool_choice needs tools"):
        await client.chat.completions.create(
            model="policy", messages=messages, tool_choice="required"
        )
    with pytest.raises(openai.BadRequestError, match="not among the tools"):
        await client.chat.completions.create(
            model="policy",
            messages=messages,
            tools=[ADD_TOOL],
            tool_choice={"type": "function", "function": {"name": "mul"}},
        )
    with pytest.raises(openai.BadRequestError, match="only text parts"):
        await client.chat.completions.create(
            model="policy",
            messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}
            ],
        )
    with pytest.raises(openai.BadRequestError, match="tool_call_id"):
        await client.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": "hi"}, {"role": "tool", "content": "5"}],
        )
    with pytest.raises(openai.BadRequestError, match="response_format"):
        await client.chat.completions.create(
            model="policy", messages=messages, response_format={"type": "json_object"}
        )
    async with openai.AsyncOpenAI(
        base_url=srv.base_url, api_key="wrong", max_retries=0
    ) as wrong_token:
        with pytest.raises(openai.AuthenticationError):
            await wrong_token.chat.completions.create(model="policy", messages=messages)
    ok = await client.chat.completions.create(model="policy", messages=messages, max_tokens=2)
    assert ok.choices


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (json.dumps({"model": "policy", "messages": QUESTION, "n": "2"}).encode(), 400, "n"),
        (json.dumps({"model": "policy", "messages": []}).encode(), 400, "messages"),
        (json.dumps({"model": "policy"}).encode(), 400, "missing required parameter: messages"),
        (json.dumps({"model": 3, "messages": QUESTION}).encode(), 400, "model"),
        (
            json.dumps(
                {"model": "policy", "messages": [{"role": "wizard", "content": "x"}]}
            ).encode(),
            400,
            "messages.0.role",
        ),
        (
            json.dumps({"model": "policy", "messages": QUESTION, "stop": ["a"] * 17}).encode(),
            400,
            "stop",
        ),
        (json.dumps({"model": "policy", "messages": QUESTION, "n": 10**6}).encode(), 400, "n"),
    ],
)
async def test_malformed_requests_get_4xx_never_500(server, body, status, message):
    srv, _ = server
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{srv.base_url}/chat/completions",
            content=body,
            headers={"Authorization": f"Bearer {srv.token}"},
        )
        assert response.status_code == status
        error = response.json()["error"]
        assert message in error["message"] and error["type"] == "invalid_request_error"
        health = await http.get(
            f"{srv.base_url.removesuffix('/v1')}/health",
            headers={"Authorization": f"Bearer {srv.token}"},
        )
        assert health.status_code == 200


async def test_every_endpoint_needs_the_token(server):
    srv, _ = server
    root = srv.base_url.removesuffix("/v1")
    async with httpx.AsyncClient() as http:
        for method, path in (
            ("GET", "/health"),
            ("GET", "/v1/models"),
            ("POST", "/v1/chat/completions"),
            ("GET", "/nowhere"),
        ):
            response = await http.request(method, root + path)
            assert response.status_code == 401
            assert response.json()["error"]["type"] == "authentication_error"
        missing = await http.get(
            root + "/nowhere", headers={"Authorization": f"Bearer {srv.token}"}
        )
        assert missing.status_code == 404 and "error" in missing.json()


async def test_binds_loopback_only_and_never_shows_the_token(server):
    srv, _ = server
    assert srv.base_url.startswith("http://127.0.0.1:")
    assert srv.token not in srv.token_hint
    assert srv.token not in repr(srv)


async def test_the_token_never_reaches_the_logs(server, caplog):
    srv, _ = server
    caplog.set_level("DEBUG")
    client = srv.client()
    await client.chat.completions.create(model="policy", messages=QUESTION, max_tokens=2)
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="policy", messages=QUESTION, n=0)
    async with openai.AsyncOpenAI(
        base_url=srv.base_url, api_key=srv.token[:-1], max_retries=0
    ) as wrong:
        with pytest.raises(openai.AuthenticationError):
            await wrong.models.list()
    assert caplog.records and srv.token not in caplog.text


# ------------------------------------------------------------------ nothing blocks the loop


@pytest.fixture
async def make_server(tmp_path):
    """A server on the real local backend, with the limits a test chooses."""
    servers = []
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path), base_model=DEFAULT_BASE_MODEL
    )
    await session.start()

    async def make(**limits):
        server = PolicyServer(
            session, model_name="policy", defaults=SamplingDefaults(max_tokens=4), **limits
        )
        await server.start()
        servers.append(server)
        return server

    yield make, session
    for server in servers:
        await server.stop()


def errors_logged(caplog) -> list[str]:
    """Warnings and errors from the server or uvicorn (not from other tests' leftovers)."""
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith(("tinker_tui", "uvicorn"))
    ]


async def test_a_body_over_the_limit_is_refused_before_it_is_parsed(make_server, monkeypatch):
    make, _ = make_server
    srv = await make(max_body_bytes=64 * 1024)
    parsed = []
    real_validate = ChatCompletionRequest.model_validate_json
    monkeypatch.setattr(
        ChatCompletionRequest,
        "model_validate_json",
        lambda raw: parsed.append(len(raw)) or real_validate(raw),
    )
    client = srv.client()
    with pytest.raises(openai.APIStatusError) as refused:
        await client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "a" * 100_000}]
        )
    assert refused.value.status_code == 413
    error = refused.value.body
    assert error["code"] == "request_too_large" and error["type"] == "invalid_request_error"
    assert "at most 65536 bytes" in error["message"]

    async def chunks():  # no Content-Length: counted as it arrives
        for _ in range(100):
            yield b" " * 1024

    async with httpx.AsyncClient() as http:
        chunked = await http.post(
            f"{srv.base_url}/chat/completions",
            content=chunks(),
            headers={"Authorization": f"Bearer {srv.token}"},
        )
    assert chunked.status_code == 413 and chunked.json()["error"]["code"] == "request_too_large"
    assert parsed == []  # neither body reached the JSON parser
    ok = await client.chat.completions.create(model="policy", messages=QUESTION)
    assert ok.choices and parsed


async def test_a_prompt_over_the_context_is_refused_without_tokenizing_it(make_server, monkeypatch):
    make, session = make_server
    srv = await make()
    client = srv.client()
    tokenizer = session.renderer.tokenizer
    encoded: list[tuple[int, bool]] = []  # (characters, on the event loop's thread)
    real_encode = tokenizer.encode
    loop_thread = threading.current_thread()

    def encode(text, *args, **kwargs):
        encoded.append((len(text), threading.current_thread() is loop_thread))
        return real_encode(text, *args, **kwargs)

    monkeypatch.setattr(tokenizer, "encode", encode)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "a" * 1_000_000}]
        )
    assert refused.value.code == "context_length_exceeded"
    assert "maximum context length is 2048 tokens" in refused.value.message
    assert sum(chars for chars, _ in encoded) < 1000  # the prompt itself was never tokenized

    # Short enough in characters to need tokenizing, too long in tokens: an exact refusal,
    # tokenized on a worker thread.
    encoded.clear()
    with pytest.raises(openai.BadRequestError, match=r"these messages are \d+ tokens") as exact:
        await client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "yes " * 3000}]
        )
    assert exact.value.code == "context_length_exceeded"
    assert encoded and not any(on_loop for chars, on_loop in encoded if chars >= 12_000)

    # A large prompt that fits is served, also rendered off the loop.
    encoded.clear()
    fits = await client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "yes " * 1500}]
    )
    assert len(fits.choices[0].model_extra["prompt_token_ids"]) > 1500
    assert not any(on_loop for chars, on_loop in encoded if chars >= 6000)


class RecordingSampler:
    """The policy's real sampling client; keeps the future of every sample call."""

    def __init__(self, real):
        self.real = real
        self.futures = []

    def sample(self, **kwargs):
        future = self.real.sample(**kwargs)
        self.futures.append(future.future())
        return future


async def test_a_client_that_goes_away_cancels_its_sampling(make_server, caplog):
    from tinker_tui.engine.local import runtime

    caplog.set_level("DEBUG")
    make, session = make_server
    srv = await make()
    sampler = RecordingSampler(session.sampling_client)
    session.sampling_client = sampler
    # Hold the sampler's thread so the request waits in its queue, as behind a long batch.
    release = threading.Event()
    runtime.torch_executor().submit(release.wait, 30)
    client = srv.client()
    request = asyncio.create_task(
        client.chat.completions.create(model="policy", messages=QUESTION, n=128)
    )
    try:
        deadline = time.monotonic() + 10
        while not sampler.futures:  # the request waits in the sampler's queue
            assert time.monotonic() < deadline and not request.done(), "never sampled"
            await asyncio.sleep(0.02)
        request.cancel()  # the client gives up: its connection closes
        with pytest.raises(asyncio.CancelledError):
            await request
        while not sampler.futures[0].cancelled():
            assert time.monotonic() < deadline, "the sampler never saw the cancel"
            await asyncio.sleep(0.02)
    finally:
        release.set()
    assert len(sampler.futures) == 1
    after = await client.chat.completions.create(model="policy", messages=QUESTION)
    assert after.choices and not sampler.futures[1].cancelled()
    assert any(
        "sampling cancelled" in r.getMessage() and r.levelno == logging.DEBUG
        for r in caplog.records
    )
    assert errors_logged(caplog) == []


async def test_a_half_sent_request_is_closed_after_the_timeout(make_server):
    make, _ = make_server
    srv = await make(request_timeout=0.3)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {srv.token}\r\n"
    ).encode()
    for request in (
        head,  # the head never ends
        head + b'Content-Length: 100\r\n\r\n{"model":',
    ):  # nor does the body
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(request)
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        assert 0.25 <= time.monotonic() - started < 3
        writer.close()
    # a connection that sends nothing at all is closed too
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    # whole requests on kept-alive connections are not affected
    client = srv.client()
    for _ in range(2):
        assert (await client.chat.completions.create(model="policy", messages=QUESTION)).choices
        await asyncio.sleep(0.4)


async def test_a_client_that_disconnects_mid_body_is_logged_at_debug(make_server, caplog):
    caplog.set_level("DEBUG")
    make, _ = make_server
    srv = await make()
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(
        (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {srv.token}\r\nContent-Length: 1000\r\n\r\n"
            '{"model": "policy"'
        ).encode()
    )
    await writer.drain()
    writer.close()
    deadline = time.monotonic() + 5
    while not any(
        "went away before its request was whole" in r.getMessage() for r in caplog.records
    ):
        assert time.monotonic() < deadline, "no disconnect was logged"
        await asyncio.sleep(0.02)
    record = next(r for r in caplog.records if "went away" in r.getMessage())
    assert record.levelno == logging.DEBUG and record.exc_info is None
    assert errors_logged(caplog) == []
    assert (await srv.client().chat.completions.create(model="policy", messages=QUESTION)).choices


# ------------------------------------------------------------------ model names and messages


async def test_the_model_entry_says_how_tools_reach_the_model(server):
    # the embedded model's role_colon has no tool format: the server's text protocol
    entry = await server[0].client().models.retrieve("policy")
    assert entry.model_extra["tool_calls"] == "text"


@pytest.mark.parametrize("model", ["policy@²", "policy@١", "policy@１", "policy@", "policy@-1"])
async def test_only_ascii_digits_name_an_earlier_step(server, model):
    srv, _ = server
    with pytest.raises(openai.NotFoundError) as refused:
        await srv.client().chat.completions.create(model=model, messages=QUESTION)
    assert refused.value.code == "model_not_found" and "unknown model" in refused.value.message


async def test_an_empty_content_list_is_refused(server):
    srv, _ = server
    for role in ("user", "system"):
        with pytest.raises(openai.BadRequestError) as refused:
            await srv.client().chat.completions.create(
                model="policy", messages=[{"role": role, "content": []}, *QUESTION]
            )
        assert refused.value.code == "empty_array"
        assert refused.value.param == "messages.0.content"


async def test_a_tool_message_must_answer_a_call_of_the_assistant_message_before_it(server):
    srv, _ = server
    client = srv.client()
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
    }
    asked = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [call]}]
    ok = await client.chat.completions.create(
        model="policy",
        tools=[ADD_TOOL],
        messages=[*asked, {"role": "tool", "tool_call_id": "call_1", "content": "3"}],
    )
    assert ok.choices
    for messages in (
        [*asked, {"role": "tool", "tool_call_id": "call_9", "content": "3"}],  # unknown id
        [
            *asked,
            {"role": "user", "content": "and?"},  # not right after the call
            {"role": "tool", "tool_call_id": "call_1", "content": "3"},
        ],
        [*QUESTION, {"role": "tool", "tool_call_id": "call_1", "content": "3"}],
    ):
        with pytest.raises(openai.BadRequestError, match="answers no tool call") as refused:
            await client.chat.completions.create(
                model="policy", tools=[ADD_TOOL], messages=messages
            )
        assert refused.value.param == f"messages.{len(messages) - 1}.tool_call_id"


async def test_content_parts_say_what_is_wrong(server):
    srv, _ = server
    client = srv.client()
    for part, param, says in (
        (
            {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}},
            "messages.0.content.0.cache_control",
            "unsupported key(s) in a text part: 'cache_control'",
        ),
        (
            {"type": "image_url", "image_url": {"url": "data:,"}},
            "messages.0.content.0.type",
            "unsupported content part type 'image_url'",
        ),
        ({"type": "text", "text": 5}, "messages.0.content.0.text", "needs 'text', a string"),
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(
                model="policy", messages=[{"role": "user", "content": [part]}]
            )
        assert says in refused.value.message and refused.value.param == param
    ok = await client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    )
    assert ok.choices


async def test_stopping_the_server_closes_the_clients_it_made(tmp_path):
    """A client left to the garbage collector closed its connections on whatever loop ran
    then, or on none ("Event loop is closed")."""
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path), base_model=DEFAULT_BASE_MODEL
    )
    await session.start()
    srv = PolicyServer(session, model_name="policy", defaults=SamplingDefaults(max_tokens=2))
    await srv.start()
    clients = [srv.client(), srv.client()]
    await clients[0].chat.completions.create(model="policy", messages=QUESTION)
    assert not any(client.is_closed() for client in clients)
    await srv.stop()
    assert all(client.is_closed() for client in clients)
