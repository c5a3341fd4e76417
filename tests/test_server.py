"""The in-process policy server, called through the official openai client, on the real
local backend."""

import openai
import pytest

from engine.backend import Policy
from engine.config import DEFAULT_BASE_MODEL
from engine.local import LocalServiceClient
from engine.server import PolicyServer, SamplingDefaults
from engine.trajectory import SampledTurn


@pytest.fixture
async def server(tmp_path):
    policy = Policy(LocalServiceClient(checkpoint_dir=tmp_path), base_model=DEFAULT_BASE_MODEL)
    await policy.start()
    server = PolicyServer(policy, model_name="policy",
                          defaults=SamplingDefaults(max_tokens=8))
    await server.start()
    yield server, policy
    await server.stop()


async def test_chat_completion_with_logprobs_and_sampled_tokens(server):
    srv, policy = server
    client = srv.client()
    completion = await client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "Is the sky blue?"}],
        n=3, logprobs=True, max_tokens=5, seed=7)
    assert completion.object == "chat.completion"
    assert len(completion.choices) == 3
    for choice in completion.choices:
        assert choice.finish_reason in ("stop", "length")
        assert isinstance(choice.message.content, str)
        turn = SampledTurn.from_choice(choice)
        assert 1 <= len(turn.tokens) <= 5
        assert turn.policy_version == policy.version == 0
        assert [c.logprob for c in choice.logprobs.content] == pytest.approx(list(turn.logprobs))
        assert all(lp <= 0 for lp in turn.logprobs)
        # the prompt tokens are exactly what the renderer builds for these messages
        expected = policy.renderer.build_generation_prompt(
            [{"role": "user", "content": "Is the sky blue?"}]).to_ints()
        assert list(turn.prompt_tokens) == expected
    assert completion.usage.completion_tokens == sum(
        len(SampledTurn.from_choice(c).tokens) for c in completion.choices)


async def test_same_seed_same_completion(server):
    srv, _ = server
    client = srv.client()
    kwargs = dict(model="policy", messages=[{"role": "user", "content": "Are you ready?"}],
                  max_tokens=6, seed=123)
    a = await client.chat.completions.create(**kwargs)
    b = await client.chat.completions.create(**kwargs)
    assert a.choices[0].model_extra["token_ids"] == b.choices[0].model_extra["token_ids"]


async def test_errors_are_openai_shaped_and_the_server_keeps_serving(server):
    srv, _ = server
    client = srv.client()
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.NotFoundError, match="unknown model"):
        await client.chat.completions.create(model="other", messages=messages)
    with pytest.raises(openai.BadRequestError, match="unsupported parameter: frequency_penalty"):
        await client.chat.completions.create(model="policy", messages=messages,
                                             frequency_penalty=0.5)
    with pytest.raises(openai.BadRequestError, match="exceeds this server's limit"):
        await client.chat.completions.create(model="policy", messages=messages,
                                             max_tokens=10**6)
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="policy", messages=messages, n=0)
    wrong_token = openai.AsyncOpenAI(base_url=srv.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await wrong_token.chat.completions.create(model="policy", messages=messages)
    ok = await client.chat.completions.create(model="policy", messages=messages, max_tokens=2)
    assert ok.choices


async def test_binds_loopback_only(server):
    srv, _ = server
    assert srv.base_url.startswith("http://127.0.0.1:")
    assert srv.token not in srv.token_hint
