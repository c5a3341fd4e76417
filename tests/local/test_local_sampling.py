"""LocalSamplingClient: seeds, stop forms, lengths, frozen snapshots, batching, pickling."""

from __future__ import annotations

import asyncio
import pickle

import numpy as np
import pytest
import tinker

from engine.local import DEFAULT_BASE_MODEL


@pytest.fixture(scope="module")
def trained(service, tokenizer, prompt):
    """A client trained (cross-entropy) to answer ' maybe\\n\\nUser:<eos>' after the prompt."""
    tc = service.create_lora_training_client(base_model=DEFAULT_BASE_MODEL).result()
    completion = tokenizer.encode(" maybe\n\nUser:") + [tokenizer.eos_token_id]
    ids = prompt.to_ints()
    full = ids + completion
    n_prompt = len(ids) - 1
    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints(full[:-1]),
        loss_fn_inputs={
            "target_tokens": full[1:],
            "weights": [0.0] * n_prompt + [1.0] * len(completion),
        },
    )
    for _ in range(60):
        tc.forward_backward([datum], "cross_entropy")
        tc.optim_step(tinker.AdamParams(learning_rate=1e-2))
    sampler = tc.save_weights_and_get_sampling_client().result()
    learned = sampler.sample(prompt, 1, greedy(stop=None)).result().sequences[0].tokens
    assert learned == completion, "supervised fixture did not learn its completion"
    return tc, sampler, completion


def greedy(max_tokens: int | None = 8, stop=None) -> tinker.SamplingParams:
    return tinker.SamplingParams(max_tokens=max_tokens, temperature=0.0, stop=stop)


async def test_stop_forms_and_lengths(trained, prompt, tokenizer):
    _, sc, completion = trained
    eos = tokenizer.eos_token_id
    newline2 = tokenizer.encode("\n\n")[0]
    cases = [
        (greedy(stop=None), completion, "stop"),  # implicit EOS, included
        (greedy(stop="\n\nUser:"), completion[:4], "stop"),  # through the completing token
        (greedy(stop=["\n\nUser:"]), completion[:4], "stop"),
        (greedy(stop=["nothing like it", "User"]), completion[:3], "stop"),
        (greedy(stop=[newline2]), completion[:2], "stop"),  # token ids, included
        (greedy(max_tokens=7, stop=[]), None, "length"),  # [] disables even EOS
        (greedy(max_tokens=2, stop=None), completion[:2], "length"),
    ]
    for params, expected, reason in cases:
        resp = await sc.sample(prompt, 1, params)
        seq = resp.sequences[0]
        assert seq.stop_reason == reason, params
        if expected is None:
            assert len(seq.tokens) == 7 and seq.tokens[:5] == completion
            assert eos in seq.tokens
        else:
            assert seq.tokens == expected, (params, tokenizer.decode(seq.tokens))
        assert len(seq.logprobs) == len(seq.tokens)
        assert seq.tokens_np.dtype == np.int32 and seq.logprobs_np.dtype == np.float32


async def test_same_seed_same_samples(service, prompt):
    sc = await service.create_sampling_client(base_model=DEFAULT_BASE_MODEL)
    params = tinker.SamplingParams(max_tokens=8, temperature=1.0, seed=1234, stop=[])
    a, b = await asyncio.gather(sc.sample(prompt, 4, params), sc.sample(prompt, 4, params))
    c = await sc.sample(prompt, 4, params.model_copy(update={"seed": 99}))
    assert [s.tokens for s in a.sequences] == [s.tokens for s in b.sequences]
    assert [s.logprobs for s in a.sequences] == [s.logprobs for s in b.sequences]
    assert [s.tokens for s in a.sequences] != [s.tokens for s in c.sequences]
    ids = {s.sequence_id for r in (a, b, c) for s in r.sequences}
    assert len(ids) == 12  # distinct per sequence


async def test_sampled_logprobs_match_training_logprobs(trained, prompt):
    tc, sc, _ = trained
    params = tinker.SamplingParams(max_tokens=6, temperature=1.0, stop=[])
    resp = await sc.sample(prompt, 3, params)
    ids = prompt.to_ints()
    for seq in resp.sequences:
        full = ids + seq.tokens
        lp = await sc.compute_logprobs(tinker.ModelInput.from_ints(full))
        assert lp[0] is None and len(lp) == len(full)
        assert np.allclose(lp[len(ids) :], seq.logprobs, atol=1e-4)


async def test_sampler_is_frozen_after_later_training(service, prompt, tokenizer):
    tc = await service.create_lora_training_client(base_model=DEFAULT_BASE_MODEL)
    sc = await tc.save_weights_and_get_sampling_client()
    probe = tinker.ModelInput.from_ints(prompt.to_ints() + tokenizer.encode(" maybe"))
    before = await sc.compute_logprobs(probe)
    ids = probe.to_ints()
    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
    )
    for _ in range(3):
        tc.forward_backward([datum], "cross_entropy")
        tc.optim_step(tinker.AdamParams(learning_rate=1e-2))
    newer = await tc.save_weights_and_get_sampling_client()
    assert await sc.compute_logprobs(probe) == before
    assert (await newer.compute_logprobs(probe))[-1] > before[-1]


async def test_concurrent_requests_are_batched_and_independent(trained, prompt, tokenizer):
    _, sc, completion = trained
    other = tinker.ModelInput.from_ints(tokenizer.encode("User: Hello there\n\nAssistant:"))
    futures = [
        sc.sample(prompt, 2, greedy(stop=None)),
        sc.sample(other, 3, tinker.SamplingParams(max_tokens=5, temperature=1.0, stop=[])),
        sc.sample(prompt, 4, tinker.SamplingParams(max_tokens=3, temperature=0.7, top_k=5)),
        sc.sample(prompt, 1, tinker.SamplingParams(max_tokens=4, top_p=0.5, stop=[])),
    ]
    futures.append(sc.sample(other, 2, greedy(max_tokens=6, stop=[])))
    r0, r1, r2, r3, r4 = await asyncio.gather(*futures)
    assert [s.tokens for s in r0.sequences] == [completion, completion]
    # Rows that outlive the others (after finished rows were dropped from the batch and its
    # cache) decode exactly as they do alone.
    alone = await sc.sample(other, 1, greedy(max_tokens=6, stop=[]))
    assert r4.sequences[0].tokens == r4.sequences[1].tokens == alone.sequences[0].tokens
    assert np.allclose(r4.sequences[0].logprobs, alone.sequences[0].logprobs, atol=1e-4)
    assert [len(s.tokens) for s in r1.sequences] == [5, 5, 5]
    assert all(len(s.tokens) <= 3 for s in r2.sequences) and len(r2.sequences) == 4
    assert len(r3.sequences[0].tokens) == 4


async def test_sampling_client_pickles(trained, prompt):
    _, sc, completion = trained
    clone = pickle.loads(pickle.dumps(sc))
    resp = await clone.sample(prompt, 1, greedy(stop=None))
    assert resp.sequences[0].tokens == completion
    assert clone.get_base_model() == DEFAULT_BASE_MODEL


async def test_sample_rejects_bad_requests_clearly(service, prompt):
    sc = await service.create_sampling_client(base_model=DEFAULT_BASE_MODEL)
    with pytest.raises(tinker.BadRequestError, match="prompt is empty"):
        await sc.sample(tinker.ModelInput.from_ints([]), 1, tinker.SamplingParams(max_tokens=2))
    with pytest.raises(tinker.BadRequestError, match="max_tokens must be >= 1"):
        await sc.sample(prompt, 1, tinker.SamplingParams(max_tokens=0))
    with pytest.raises(tinker.BadRequestError, match="outside the vocabulary"):
        await sc.sample(tinker.ModelInput.from_ints([10**6]), 1, tinker.SamplingParams())
    # The sync form works too.
    resp = sc.sample(prompt, 2, tinker.SamplingParams(max_tokens=3, stop=[])).result()
    assert [len(s.tokens) for s in resp.sequences] == [3, 3]
    assert resp.sequences[0].stop_reason == "length"
