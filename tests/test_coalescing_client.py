"""The rollouts' coalescing openai client (engine.server.coalescing_client): equal chat
requests leave as one HTTP request with their `n` summed, and each caller gets its own
choices back; seeded and streamed requests pass through; a cancelled member leaves the
others theirs; an error answer is everyone's. Unit tests through the official openai client
on a recording transport, then through the real server on the local backend."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
from waiting import wait_until

from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.config import DEFAULT_BASE_MODEL
from tinker_tui.engine.local import LocalServiceClient
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.server import PolicyServer
from tinker_tui.engine.server.coalescing_client import CoalescingTransport, httpx_module

httpx = httpx_module()
QUESTION = [{"role": "user", "content": "Is the sky blue?"}]


class RecordingTransport:
    """Answers chat requests with `n` choices numbered by request ([request, i] as token
    ids), after `delay` seconds, or with `status` and an error body; records each body."""

    def __init__(self, delay: float = 0.0, status: int = 200) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.delay = delay
        self.status = status
        self.cancelled = 0

    async def handle_async_request(self, request: Any) -> Any:
        body = json.loads(request.content)
        call = len(self.bodies)
        self.bodies.append(body)
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.status != 200:
            return httpx.Response(
                self.status,
                json={
                    "error": {
                        "message": "the backend is unavailable",
                        "type": "server_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": f"{call}.{i}"},
                "finish_reason": "stop",
                "logprobs": None,
                "prompt_token_ids": [1, 2],
                "token_ids": [call, i, *range(i)],
                "token_logprobs": [-1.0] * (i + 2),
                "policy_version": 0,
            }
            for i in range(body.get("n", 1))
        ]
        return httpx.Response(
            200,
            json={
                "id": "chatcmpl-x",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": choices,
                "usage": {"prompt_tokens": 2, "completion_tokens": 0, "total_tokens": 2},
            },
        )

    async def aclose(self) -> None:
        return None


def client_over(inner: RecordingTransport, window: float = 0.05) -> tuple[Any, Any]:
    transport = CoalescingTransport(inner, window=window)
    client = openai.AsyncOpenAI(
        base_url="http://127.0.0.1:9/v1",
        api_key="k",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=transport),
    )
    return client, transport


def ask(client: Any, **kw: Any) -> Any:
    return client.chat.completions.create(model="policy", messages=QUESTION, **kw)


def contents(completion: Any) -> list[str]:
    return [c.message.content for c in completion.choices]


def assert_split(shares: list[list[Any]], whole: list[Any]) -> None:
    """The callers' shares, in some order, are `whole` cut in runs: each caller got a run
    of it (callers join in the order they reach the transport, which need not be the order
    they were started in), and together all of it, none twice."""

    def fits(at: int, left: list[list[Any]]) -> bool:
        if not left:
            return at == len(whole)
        return any(
            whole[at : at + len(share)] == share and fits(at + len(share), left[:i] + left[i + 1 :])
            for i, share in enumerate(left)
        )

    assert fits(0, shares), f"{shares} do not cut {whole} in runs"


async def test_equal_requests_leave_as_one_and_each_gets_its_own_choices_in_order():
    inner = RecordingTransport()
    client, transport = client_over(inner)
    one, two, other, three = await asyncio.gather(
        ask(client), ask(client, n=2), ask(client, max_tokens=3), ask(client, n=3)
    )
    shared = next(i for i, b in enumerate(inner.bodies) if b.get("n") == 6)
    assert sorted(b.get("n", 1) for b in inner.bodies) == [1, 6]
    assert_split(
        [contents(one), contents(two), contents(three)], [f"{shared}.{i}" for i in range(6)]
    )
    assert contents(other) == [f"{1 - shared}.0"]
    # renumbered from 0 per caller; the exact sampled tokens kept; usage its own
    assert [c.index for c in three.choices] == [0, 1, 2]
    for completion in (one, two, three):
        for choice in completion.choices:
            i = int(choice.message.content.split(".")[1])
            assert choice.model_extra["token_ids"] == [shared, i, *range(i)]
        assert completion.usage.completion_tokens == sum(
            len(c.model_extra["token_ids"]) for c in completion.choices
        )
        assert completion.usage.prompt_tokens == 2
    assert len({one.id, two.id, three.id}) == 3
    assert transport.stats.requests == 4 and transport.stats.sent == 2


async def test_seeded_streamed_and_lone_requests_go_as_they_came():
    inner = RecordingTransport()
    client, transport = client_over(inner, window=0.01)
    loop = asyncio.get_running_loop()
    started = loop.time()
    lone = await ask(client, n=2)
    assert loop.time() - started < 0.5  # held for the window only
    await asyncio.gather(ask(client, seed=3), ask(client, seed=3))
    stream = await ask(client, stream=True)
    await stream.close()  # the recorder answers JSON, not events: only its body matters
    assert [b.get("n", 1) for b in inner.bodies] == [2, 1, 1, 1]
    assert [b.get("seed") for b in inner.bodies[1:3]] == [3, 3]
    assert contents(lone) == ["0.0", "0.1"]
    assert transport.stats.sent == 4


async def test_a_full_batch_is_sent_and_the_next_request_opens_another():
    inner = RecordingTransport()
    transport = CoalescingTransport(inner, window=0.05, max_n=4)
    client = openai.AsyncOpenAI(
        base_url="http://127.0.0.1:9/v1",
        api_key="k",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=transport),
    )
    await asyncio.gather(*(ask(client) for _ in range(6)))
    assert sorted(b["n"] for b in inner.bodies) == [2, 4]


async def test_a_whole_group_goes_at_once_without_waiting_out_the_window():
    inner = RecordingTransport()
    transport = CoalescingTransport(inner, window=30.0, full_at=3)
    client = openai.AsyncOpenAI(
        base_url="http://127.0.0.1:9/v1",
        api_key="k",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=transport),
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(asyncio.gather(*(ask(client) for _ in range(3))), 10)
    await asyncio.wait_for(ask(client, n=3, max_tokens=2), 10)
    assert loop.time() - started < 10
    assert [b["n"] for b in inner.bodies] == [3, 3]


async def test_cancelling_one_member_before_the_request_leaves_the_others_theirs():
    inner = RecordingTransport()
    client, _ = client_over(inner, window=0.2)
    tasks = [asyncio.create_task(ask(client)) for _ in range(4)]
    await asyncio.sleep(0.05)  # all four joined the open batch
    tasks[1].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[1], asyncio.CancelledError)
    assert [b["n"] for b in inner.bodies] == [3]  # the cancelled one is not asked for
    assert_split([contents(d) for i, d in enumerate(done) if i != 1], ["0.0", "0.1", "0.2"])


async def test_cancelling_one_member_during_the_request_leaves_the_others_theirs():
    inner = RecordingTransport(delay=0.2)
    client, _ = client_over(inner, window=0.01)
    tasks = [asyncio.create_task(ask(client)) for _ in range(3)]
    await wait_until(lambda: inner.bodies, "the request to be sent")
    assert len(inner.bodies) == 1
    tasks[0].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[0], asyncio.CancelledError)
    # the two still waiting got two of the three choices asked for, one each
    got = contents(done[1]) + contents(done[2])
    assert len(set(got)) == 2 and set(got) <= {"0.0", "0.1", "0.2"}
    assert inner.cancelled == 0


async def test_the_request_is_cancelled_once_nobody_waits_for_it():
    inner = RecordingTransport(delay=5.0)
    client, _ = client_over(inner, window=0.01)
    tasks = [asyncio.create_task(ask(client)) for _ in range(2)]
    await wait_until(lambda: inner.bodies, "the request to be sent")
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await wait_until(lambda: inner.cancelled, "the request to be cancelled")
    assert inner.cancelled == 1


async def test_an_error_answer_is_every_members_error():
    inner = RecordingTransport(status=503)
    client, _ = client_over(inner, window=0.02)
    done = await asyncio.gather(*(ask(client) for _ in range(3)), return_exceptions=True)
    assert all(isinstance(e, openai.InternalServerError) for e in done), done
    assert all("the backend is unavailable" in str(e) for e in done)
    assert len(inner.bodies) == 1


# ---------------------------------------------------------------------- through the server
class RecordingSession(BackendSession):
    """The real local BackendSession, recording each sampling call's sequences."""

    calls: list[list[list[int]]]

    async def sample(self, prompt: Any, num_samples: int, sampling_params: Any, **kw: Any) -> Any:
        response, version = await super().sample(prompt, num_samples, sampling_params, **kw)
        self.calls.append([list(s.tokens) for s in response.sequences])
        return response, version


async def test_a_groups_rollouts_are_one_http_request_and_one_sampling_call(tmp_path):
    session = RecordingSession(
        LocalServiceClient(checkpoint_dir=tmp_path), base_model=DEFAULT_BASE_MODEL
    )
    session.calls = []
    await session.start()
    server = PolicyServer(
        session, model_name="policy", defaults=SamplingDefaults(max_tokens=6), coalesce_window=0.2
    )
    await server.start()
    try:
        client = server.client()
        group = await asyncio.gather(
            *(ask(client, logprobs=True) for _ in range(8)), ask(client, logprobs=True, n=2)
        )
        (stats,) = server.client_coalescing
        assert stats.requests == 9 and stats.sent == 1
        assert server.coalescer.stats.requests == 1
        (sampled,) = session.calls
        assert len(sampled) == 10
        # each caller's choices are the sampler's sequences, a run each, none twice
        assert_split(
            [[c.model_extra["token_ids"] for c in completion.choices] for completion in group],
            sampled,
        )
        for completion in group:
            for choice in completion.choices:
                assert [t.logprob for t in choice.logprobs.content] == pytest.approx(
                    choice.model_extra["token_logprobs"]
                )
            assert completion.usage.completion_tokens == sum(
                len(c.model_extra["token_ids"]) for c in completion.choices
            )
        assert [c.index for c in group[-1].choices] == [0, 1]
    finally:
        await server.stop()


async def test_with_coalescing_off_the_client_sends_each_request(tmp_path):
    session = RecordingSession(
        LocalServiceClient(checkpoint_dir=tmp_path), base_model=DEFAULT_BASE_MODEL
    )
    session.calls = []
    await session.start()
    server = PolicyServer(
        session, model_name="policy", defaults=SamplingDefaults(max_tokens=4), coalesce_window=0.0
    )
    await server.start()
    try:
        client = server.client()
        await asyncio.gather(*(ask(client) for _ in range(3)))
        assert server.client_coalescing == []
        assert server.coalescer.stats.requests == 3 and len(session.calls) == 3
    finally:
        await server.stop()
