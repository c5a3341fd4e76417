"""LocalSamplingClient: seeds, stop forms, lengths, top-k logprobs, frozen snapshots, batching,
pickling, and snapshots that do not outlive their users."""

from __future__ import annotations

import asyncio
import gc
import pickle
import weakref

import numpy as np
import pytest
import tinker

from tinker_tui.engine.local import DEFAULT_BASE_MODEL


@pytest.fixture(scope="module")
def trained(service, tokenizer, prompt):
    """A client trained (cross-entropy) to answer ' maybe\\n\\nUser:<eos>' after the prompt."""
    tc = service.create_lora_training_client(base_model=DEFAULT_BASE_MODEL, seed=0).result()
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
    for _ in range(40):
        tc.forward_backward([datum], "cross_entropy")
        tc.optim_step(tinker.AdamParams(learning_rate=5e-3))
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


async def test_topk_sample_logprobs(trained, prompt):
    _, sc, completion = trained
    resp = await sc.sample(prompt, 2, greedy(stop=None), topk_sample_logprobs=3)
    for seq in resp.sequences:
        topk = seq.topk_logprobs_np
        assert topk is not None
        assert topk.token_ids.shape == topk.logprobs.shape == (len(seq.tokens), 3)
        assert topk.token_ids.dtype == np.int32 and topk.logprobs.dtype == np.float32
        # greedy: the chosen token is the most likely one, with the same logprob
        assert topk.token_ids[:, 0].tolist() == seq.tokens
        assert np.allclose(topk.logprobs[:, 0], seq.logprobs, atol=1e-6)
        assert np.all(np.diff(topk.logprobs, axis=1) <= 0)
        assert [len(pos) for pos in seq.topk_logprobs] == [3] * len(seq.tokens)
    # sampled at temperature 1: the logprobs come from the same distribution
    resp = await sc.sample(
        prompt, 4, tinker.SamplingParams(max_tokens=3, stop=[]), topk_sample_logprobs=5
    )
    for seq in resp.sequences:
        for tok, lp, pos in zip(seq.tokens, seq.logprobs, seq.topk_logprobs, strict=True):
            ranked = dict(pos)
            if tok in ranked:
                assert ranked[tok] == pytest.approx(lp, abs=1e-6)
            else:
                assert lp <= min(ranked.values()) + 1e-6
    plain = await sc.sample(prompt, 1, greedy())
    assert plain.sequences[0].topk_logprobs is None


async def test_prompt_logprobs_and_topk_prompt_logprobs(trained, prompt):
    _, sc, _ = trained
    expected = await sc.compute_logprobs(prompt)
    resp = await sc.sample(
        prompt, 1, greedy(max_tokens=1), include_prompt_logprobs=True, topk_prompt_logprobs=2
    )
    assert resp.prompt_logprobs[0] is None
    assert np.allclose(resp.prompt_logprobs[1:], expected[1:], atol=1e-6)
    topk = resp.topk_prompt_logprobs
    assert topk[0] is None and all(len(pos) == 2 for pos in topk[1:])
    ids = prompt.to_ints()
    for i in range(1, len(ids)):
        best_id, best_lp = topk[i][0]
        assert best_lp >= expected[i] - 1e-6
        if best_id == ids[i]:
            assert best_lp == pytest.approx(expected[i], abs=1e-6)
    with pytest.raises(tinker.BadRequestError, match="topk_sample_logprobs must be"):
        await sc.sample(prompt, 1, greedy(), topk_sample_logprobs=-1)
    with pytest.raises(tinker.BadRequestError, match="not supported by the local backend"):
        await sc.sample(prompt, 1, greedy(), prompt_alt_tokens_k=2)


async def test_samples_of_one_request_share_the_prompt(trained, prompt):
    _, sc, completion = trained
    many = await sc.sample(prompt, 5, greedy(stop=None))
    one = await sc.sample(prompt, 1, greedy(stop=None))
    assert all(s.tokens == completion for s in many.sequences)
    for s in many.sequences:
        assert np.allclose(s.logprobs, one.sequences[0].logprobs, atol=1e-5)


async def test_old_snapshots_are_freed(service, prompt):
    """Sampling clients the caller drops are garbage: no growth across training steps."""
    tc = await service.create_lora_training_client(base_model=DEFAULT_BASE_MODEL, rank=4, seed=0)
    ids = prompt.to_ints()
    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
    )
    refs = []
    for _ in range(4):
        sc = await tc.save_weights_and_get_sampling_client()
        await sc.sample(prompt, 2, tinker.SamplingParams(max_tokens=2))
        refs.append(weakref.ref(sc))
        tc.forward_backward([datum], "cross_entropy")
        await tc.optim_step(tinker.AdamParams(learning_rate=1e-3))
    del sc
    gc.collect()
    assert [r() for r in refs] == [None] * 4


async def test_merged_and_on_the_fly_adapters_agree(trained, prompt, monkeypatch):
    """Small bases sample from merged weights, big ones apply the adapter on the fly."""
    from tinker_tui.engine.local import sampling_client

    tc, merged, completion = trained
    monkeypatch.setattr(sampling_client, "MERGE_MAX_BYTES", 0)
    on_the_fly = await tc.save_weights_and_get_sampling_client()
    probe = tinker.ModelInput.from_ints(prompt.to_ints() + completion)
    a, b = await merged.compute_logprobs(probe), await on_the_fly.compute_logprobs(probe)
    assert np.allclose(a[1:], b[1:], atol=1e-5)
    assert on_the_fly._merged is None
    resp = await on_the_fly.sample(prompt, 2, greedy(stop=None))
    assert [s.tokens for s in resp.sequences] == [completion, completion]
