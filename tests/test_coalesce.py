"""Coalesced sampling (engine.server.coalesce): a group's equal requests become one sampling
call, split back to the right requests; seeds keep their meaning; a cancelled member leaves
the others their answers. Unit tests on a recording sampler, then through the real server on
the local backend."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import tinker
from waiting import wait_until

from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.config import DEFAULT_BASE_MODEL
from tinker_tui.engine.local import LocalServiceClient
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.server import PolicyServer
from tinker_tui.engine.server.coalesce import SampleCoalescer

PROMPT = tinker.ModelInput.from_ints([1, 2, 3])
OTHER = tinker.ModelInput.from_ints([1, 2, 4])


def params(**kw: Any) -> tinker.SamplingParams:
    return tinker.SamplingParams(max_tokens=4, temperature=1.0, **kw)


class RecordingPolicy:
    """Answers each call with sequences numbered from a counter (token [call, i]), after
    `delay` seconds; records (prompt, num_samples, seed, version) per call."""

    renderer = None
    version = 3
    end_tokens = ()

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[tuple[tuple[int, ...], int, int | None, int | None]] = []
        self.delay = delay
        self.cancelled = 0
        self.fail: Exception | None = None

    async def sample(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        *,
        version: int | None = None,
        top_logprobs: int = 0,
        constraint: Any = None,
        constraint_prefix: str = "",
    ) -> tuple[Any, int]:
        call = len(self.calls)
        self.calls.append((tuple(prompt.to_ints()), num_samples, sampling_params.seed, version))
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.fail is not None:
            raise self.fail
        return tinker.SampleResponse(
            sequences=[
                tinker.SampledSequence(
                    stop_reason="length",
                    sequence_id=f"{call}:{i}",
                    tokens_np=np.array([call, i]),
                    logprobs_np=np.array([-1.0, -1.0]),
                )
                for i in range(num_samples)
            ],
            prompt_cache_hit_tokens=2,
        ), self.version


def tokens(result: tuple[Any, int]) -> list[list[int]]:
    return [list(s.tokens) for s in result[0].sequences]


async def test_equal_requests_share_one_call_split_back_in_order():
    session = RecordingPolicy()
    coalescer = SampleCoalescer(session, window=0.05)
    results = await asyncio.gather(
        coalescer.sample(PROMPT, 1, params()),
        coalescer.sample(PROMPT, 2, params()),
        coalescer.sample(PROMPT, 1, params()),
        coalescer.sample(OTHER, 1, params()),
        coalescer.sample(PROMPT, 3, params()),
    )
    assert sorted(c[:2] for c in session.calls) == [((1, 2, 3), 7), ((1, 2, 4), 1)]
    shared = next(i for i, c in enumerate(session.calls) if c[1] == 7)
    # Each request gets its own n sequences, in arrival order, none twice.
    assert [tokens(r) for r in (results[0], results[1], results[2], results[4])] == [
        [[shared, 0]],
        [[shared, 1], [shared, 2]],
        [[shared, 3]],
        [[shared, 4], [shared, 5], [shared, 6]],
    ]
    assert tokens(results[3]) == [[1 - shared, 0]]
    assert all(r[1] == 3 for r in results)  # the version that sampled them
    assert results[0][0].prompt_cache_hit_tokens == 2
    assert coalescer.stats.requests == 5 and coalescer.stats.calls == 2


async def test_different_settings_or_versions_are_not_mixed():
    session = RecordingPolicy()
    coalescer = SampleCoalescer(session, window=0.05)
    await asyncio.gather(
        coalescer.sample(PROMPT, 1, params()),
        coalescer.sample(PROMPT, 1, params(top_p=0.5)),
        coalescer.sample(PROMPT, 1, params(), version=2),
        coalescer.sample(PROMPT, 1, params(), top_logprobs=2),
        coalescer.sample(PROMPT, 1, tinker.SamplingParams(max_tokens=5)),
    )
    assert len(session.calls) == 5
    assert sorted(c[3] or 0 for c in session.calls) == [0, 0, 0, 0, 2]


async def test_seeded_requests_share_only_with_the_same_seed_and_n():
    session = RecordingPolicy()
    coalescer = SampleCoalescer(session, window=0.05)
    a, b, c, d = await asyncio.gather(
        coalescer.sample(PROMPT, 2, params(seed=7)),
        coalescer.sample(PROMPT, 2, params(seed=7)),
        coalescer.sample(PROMPT, 1, params(seed=7)),
        coalescer.sample(PROMPT, 2, params(seed=8)),
    )
    # seed 7 n=2 twice: one call of 2, both get the same sequences (what the seed fixes)
    assert sorted((c[1], c[2]) for c in session.calls) == [(1, 7), (2, 7), (2, 8)]
    assert tokens(a) == tokens(b) and len(tokens(a)) == 2
    assert len(tokens(c)) == 1 and len(tokens(d)) == 2
    assert tokens(d) != tokens(a)


async def test_a_lone_request_waits_no_longer_than_the_window():
    session = RecordingPolicy()
    coalescer = SampleCoalescer(session, window=0.02)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await coalescer.sample(PROMPT, 1, params())
    assert loop.time() - started < 0.5  # 20 ms window, with room for a busy machine
    # window 0: no waiting, each request its own call
    plain = SampleCoalescer(session, window=0.0)
    await asyncio.gather(plain.sample(PROMPT, 1, params()), plain.sample(PROMPT, 1, params()))
    assert len(session.calls) == 3


async def test_a_full_batch_is_sent_and_the_next_request_opens_another():
    session = RecordingPolicy()
    coalescer = SampleCoalescer(session, window=0.05, max_samples=4)
    await asyncio.gather(*(coalescer.sample(PROMPT, 1, params()) for _ in range(6)))
    assert sorted(c[1] for c in session.calls) == [2, 4]


async def test_a_whole_group_is_sent_at_once_without_waiting_out_the_window():
    session = RecordingPolicy()
    coalescer = SampleCoalescer(session, window=30.0, full_at=4)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(
        asyncio.gather(
            coalescer.sample(PROMPT, 1, params()), coalescer.sample(PROMPT, 3, params())
        ),
        10,
    )
    await asyncio.wait_for(coalescer.sample(OTHER, 4, params()), 10)  # one request, n=4
    assert loop.time() - started < 10
    assert [c[1] for c in session.calls] == [4, 4]


async def test_cancelling_one_member_before_the_call_leaves_the_others_theirs():
    session = RecordingPolicy()
    coalescer = SampleCoalescer(session, window=0.1)
    tasks = [asyncio.create_task(coalescer.sample(PROMPT, 1, params())) for _ in range(4)]
    await asyncio.sleep(0.01)  # all four joined the open batch
    tasks[1].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[1], asyncio.CancelledError)
    assert session.calls == [((1, 2, 3), 3, None, None)]  # the cancelled one is not sampled
    assert [tokens(r) for i, r in enumerate(done) if i != 1] == [[[0, 0]], [[0, 1]], [[0, 2]]]


async def test_cancelling_one_member_during_the_call_leaves_the_others_theirs():
    session = RecordingPolicy(delay=0.1)
    coalescer = SampleCoalescer(session, window=0.01)
    tasks = [asyncio.create_task(coalescer.sample(PROMPT, 1, params())) for _ in range(3)]
    await wait_until(lambda: session.calls, "the call to start")
    assert len(session.calls) == 1
    tasks[0].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[0], asyncio.CancelledError)
    assert tokens(done[1]) == [[0, 1]] and tokens(done[2]) == [[0, 2]]
    assert session.cancelled == 0


async def test_the_call_is_cancelled_once_nobody_waits_for_it():
    session = RecordingPolicy(delay=5.0)
    coalescer = SampleCoalescer(session, window=0.01)
    tasks = [asyncio.create_task(coalescer.sample(PROMPT, 1, params())) for _ in range(2)]
    await wait_until(lambda: session.calls, "the call to start")
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await wait_until(lambda: session.cancelled, "the call to be cancelled")
    assert session.cancelled == 1


async def test_an_error_of_the_call_is_every_members_error():
    session = RecordingPolicy()
    session.fail = tinker.APIConnectionError(request=None)  # type: ignore[arg-type]
    coalescer = SampleCoalescer(session, window=0.02)
    done = await asyncio.gather(
        *(coalescer.sample(PROMPT, 1, params()) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(e, tinker.APIConnectionError) for e in done)
    assert len(session.calls) == 1


# ---------------------------------------------------------------------- through the server
class CountingSession(BackendSession):
    """The real local BackendSession, counting its sampling calls."""

    calls: list[int]

    async def sample(self, prompt: Any, num_samples: int, sampling_params: Any, **kw: Any) -> Any:
        self.calls.append(num_samples)
        return await super().sample(prompt, num_samples, sampling_params, **kw)


@pytest.fixture
async def coalescing_server(tmp_path):
    session = CountingSession(
        LocalServiceClient(checkpoint_dir=tmp_path), base_model=DEFAULT_BASE_MODEL
    )
    session.calls = []
    await session.start()
    server = PolicyServer(
        session, model_name="policy", defaults=SamplingDefaults(max_tokens=8), coalesce_window=0.2
    )
    await server.start()
    yield server, session
    await server.stop()


QUESTION = [{"role": "user", "content": "Is the sky blue?"}]


async def test_a_group_through_the_server_is_one_sampling_call(coalescing_server):
    srv, session = coalescing_server
    client = srv.client()
    plain, streamed, logprobs, three = await asyncio.gather(
        client.chat.completions.create(model="policy", messages=QUESTION),
        client.chat.completions.create(model="policy", messages=QUESTION, stream=True),
        client.chat.completions.create(model="policy", messages=QUESTION, logprobs=True),
        client.chat.completions.create(model="policy", messages=QUESTION, n=3),
    )
    chunks = [chunk async for chunk in streamed]
    assert session.calls == [6]  # 1 + 1 + 1 + 3 in one call
    sampled = [
        plain.choices[0].model_extra["token_ids"],
        next(
            c.choices[0].model_extra["token_ids"]
            for c in chunks
            if c.choices and c.choices[0].finish_reason
        ),
        logprobs.choices[0].model_extra["token_ids"],
        *[c.model_extra["token_ids"] for c in three.choices],
    ]
    assert len(sampled) == 6 and all(sampled)
    assert [c.logprob for c in logprobs.choices[0].logprobs.content] == pytest.approx(
        logprobs.choices[0].model_extra["token_logprobs"]
    )
    assert [c.index for c in three.choices] == [0, 1, 2]


async def test_a_seeded_request_answers_as_it_would_alone(coalescing_server):
    srv, session = coalescing_server
    client = srv.client()
    kwargs = dict(model="policy", messages=QUESTION, max_tokens=6, seed=11, n=2)
    alone = await client.chat.completions.create(**kwargs)
    together = await asyncio.gather(
        *(client.chat.completions.create(**kwargs) for _ in range(3)),
        client.chat.completions.create(model="policy", messages=QUESTION),
    )
    assert sorted(session.calls[1:]) == [1, 2]  # seed 11 n=2 thrice: one call; unseeded: one
    want = [c.model_extra["token_ids"] for c in alone.choices]
    for completion in together[:3]:
        assert [c.model_extra["token_ids"] for c in completion.choices] == want
