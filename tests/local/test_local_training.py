"""LocalTrainingClient and LocalServiceClient: LoRA, outputs, errors, checkpoints, responsiveness."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tinker
import torch

from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient, checkpoints


def rl_datum(prompt_ids: list[int], completion: list[int], logprobs, advantage: float):
    """An importance-sampling Datum in Tinker's shifted layout (prompt positions weigh 0)."""
    full = prompt_ids + completion
    n_prompt = len(prompt_ids) - 1
    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(full[:-1]),
        loss_fn_inputs={
            "target_tokens": full[1:],
            "logprobs": [0.0] * n_prompt + list(logprobs),
            "advantages": [0.0] * n_prompt + [advantage] * len(completion),
        },
    )


def ce_datum(ids: list[int]) -> tinker.Datum:
    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
    )


async def test_forward_backward_output_shape_and_loss(training_client, tokenizer, prompt):
    ids = prompt.to_ints()
    data = [
        rl_datum(ids, tokenizer.encode(" maybe"), [-7.0], 1.0),
        rl_datum(ids, tokenizer.encode(" no thanks"), [-8.0, -7.5], -0.5),
    ]
    fb = training_client.forward_backward(data, "importance_sampling")
    opt = training_client.optim_step(tinker.AdamParams(learning_rate=1e-3))
    out = await fb
    step = await opt
    assert isinstance(out, tinker.ForwardBackwardOutput)
    assert len(out.loss_fn_outputs) == 2
    for datum, o in zip(data, out.loss_fn_outputs, strict=True):
        assert o["logprobs"].to_numpy().shape == (datum.model_input.length,)
        assert o["elementwise_loss"].to_numpy().shape == (datum.model_input.length,)
    # loss:sum is the sum of -exp(lp - sampling_lp) * adv over completion tokens.
    expected = 0.0
    for datum, o in zip(data, out.loss_fn_outputs, strict=True):
        lp = o["logprobs"].to_numpy()
        slp = datum.loss_fn_inputs["logprobs"].to_numpy()
        adv = datum.loss_fn_inputs["advantages"].to_numpy()
        expected += float(np.sum(-np.exp(lp - slp) * adv))
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    assert step.metrics["grad_norm:mean"] > 0


async def test_gradients_accumulate_until_optim_step(service, tokenizer):
    a = tokenizer.encode("User: yes no maybe")
    b = tokenizer.encode("Assistant: maybe yes")
    tc1 = await service.create_lora_training_client(base_model=DEFAULT_BASE_MODEL, seed=5)
    tc2 = await service.create_lora_training_client(base_model=DEFAULT_BASE_MODEL, seed=5)
    tc1.forward_backward([ce_datum(a)], "cross_entropy")
    tc1.forward_backward([ce_datum(b)], "cross_entropy")
    await tc1.optim_step(tinker.AdamParams(learning_rate=1e-2))
    tc2.forward_backward([ce_datum(a), ce_datum(b)], "cross_entropy")
    await tc2.optim_step(tinker.AdamParams(learning_rate=1e-2))
    o1 = await tc1.forward([ce_datum(a)], "cross_entropy")
    o2 = await tc2.forward([ce_datum(a)], "cross_entropy")
    assert np.allclose(
        o1.loss_fn_outputs[0]["logprobs"].to_numpy(),
        o2.loss_fn_outputs[0]["logprobs"].to_numpy(),
        atol=1e-5,
    )


@pytest.mark.parametrize(
    ("loss_fn", "inputs", "message"),
    [
        (
            "cross_entropyy",
            {"target_tokens": [1, 2], "weights": [1.0, 1.0]},
            "Unknown loss_fn 'cross_entropyy'",
        ),
        (
            "importance_sampling",
            {"target_tokens": [1, 2], "advantages": [1.0, 1.0]},
            "Datum 0: loss_fn_inputs is missing 'logprobs'",
        ),
        (
            "cross_entropy",
            {"target_tokens": [1, 2], "weights": [1.0, 1.0], "advantages": [0, 0]},
            "unexpected key(s) 'advantages'",
        ),
        (
            "cross_entropy",
            {"target_tokens": [1, 2], "weights": [1.0]},
            "loss_fn_inputs['weights'] has length 1 but model_input has 2 tokens",
        ),
    ],
)
async def test_bad_loss_inputs_raise_clearly_and_poison(training_client, loss_fn, inputs, message):
    datum = tinker.Datum(model_input=tinker.ModelInput.from_ints([5, 6]), loss_fn_inputs=inputs)
    with pytest.raises(tinker.BadRequestError) as exc:
        await training_client.forward_backward([datum], loss_fn)
    assert message in str(exc.value)
    assert isinstance(exc.value, ValueError)
    # As with Tinker, a failed request poisons the client.
    with pytest.raises(RuntimeError, match="poisoned"):
        await training_client.optim_step(tinker.AdamParams())


def test_empty_data_and_wrong_params_fail_at_call(training_client):
    with pytest.raises(ValueError, match="No data provided"):
        training_client.forward_backward([], "cross_entropy")
    with pytest.raises(TypeError):
        training_client.optim_step({"learning_rate": 1e-3})


async def test_save_state_and_resume_with_optimizer_is_exact(service, training_client, tokenizer):
    ids = tokenizer.encode("User: Is the sky blue?\n\nAssistant: maybe")
    data = [ce_datum(ids)]
    adam = tinker.AdamParams(learning_rate=5e-3)
    for _ in range(2):
        training_client.forward_backward(data, "cross_entropy")
        training_client.optim_step(adam)
    saved = await training_client.save_state("step-000002")
    assert saved.path == f"tinker://{training_client.model_id}/weights/step-000002"
    resumed = await service.create_training_client_from_state_with_optimizer(saved.path)
    assert resumed.model_id != training_client.model_id

    async def lp(tc):
        out = await tc.forward(data, "cross_entropy")
        return out.loss_fn_outputs[0]["logprobs"].to_numpy()

    assert np.array_equal(await lp(training_client), await lp(resumed))
    # Same optimizer moments: one more identical step keeps them identical.
    for tc in (training_client, resumed):
        tc.forward_backward(data, "cross_entropy")
        await tc.optim_step(adam)
    assert np.array_equal(await lp(training_client), await lp(resumed))
    # Weights-only resume has fresh Adam moments, so the next step differs.
    fresh = await service.create_training_client_from_state(saved.path)
    fresh.forward_backward(data, "cross_entropy")
    await fresh.optim_step(adam)
    assert not np.array_equal(await lp(fresh), await lp(resumed))


async def test_sampler_weights_round_trip(service, training_client, prompt):
    saved = await training_client.save_weights_for_sampler("final")
    assert saved.path.endswith("/sampler_weights/final")
    from_disk = await service.create_sampling_client(model_path=saved.path)
    live = await training_client.save_weights_and_get_sampling_client()
    assert await from_disk.compute_logprobs(prompt) == await live.compute_logprobs(prompt)
    with pytest.raises(tinker.BadRequestError, match="no optimizer state"):
        await service.create_training_client_from_state_with_optimizer(saved.path)


async def test_new_process_loads_checkpoint(service, training_client, prompt):
    """A new interpreter (imports torch, transformers, tinker: 6-10 s here) loads a state saved
    by this one and computes bit-identical logprobs."""
    saved = await training_client.save_state("for-subprocess")
    expected = (
        await (await training_client.save_weights_and_get_sampling_client()).compute_logprobs(
            prompt
        )
    )[1:]
    script = (
        "import sys, tinker\n"
        "from tinker_tui.engine.local import LocalServiceClient\n"
        "s = LocalServiceClient(checkpoint_dir=sys.argv[1])\n"
        "tc = s.create_training_client_from_state_with_optimizer(sys.argv[2]).result()\n"
        "sc = tc.save_weights_and_get_sampling_client().result()\n"
        "ids = [int(x) for x in sys.argv[3].split(',')]\n"
        "print(repr(sc.compute_logprobs(tinker.ModelInput.from_ints(ids)).result()[1:]))\n"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            str(service.checkpoint_dir),
            saved.path,
            ",".join(map(str, prompt.to_ints())),
        ],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert eval(proc.stdout.strip().splitlines()[-1]) == expected


async def test_errors_for_unknown_model_and_bad_checkpoints(service, tmp_path: Path):
    with pytest.raises(tinker.BadRequestError, match="Unknown base model 'Qwen/Qwen3-8B'"):
        await service.create_lora_training_client(base_model="Qwen/Qwen3-8B")
    with pytest.raises(tinker.NotFoundError, match="not found"):
        await service.create_training_client_from_state("tinker://nope/weights/missing")
    with pytest.raises(tinker.BadRequestError, match="Invalid checkpoint path"):
        await service.create_sampling_client(model_path="tinker://only-two/parts")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "meta.json").write_text("{not json")
    with pytest.raises(tinker.NotFoundError, match="unreadable"):
        await service.create_training_client_from_state(str(broken))
    old = tmp_path / "old"
    old.mkdir()
    (old / "meta.json").write_text('{"format": 1, "base_model": "tinker-tui/tiny-chat"}')
    with pytest.raises(tinker.NotFoundError, match="full fine-tuning checkpoint of an older"):
        await service.create_sampling_client(model_path=str(old))
    saved = await (
        await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=2, seed=0)
    ).save_weights_for_sampler("fingerprinted")
    folder = checkpoints.resolve(service.checkpoint_dir, saved.path)
    meta = json.loads((folder / "meta.json").read_text())
    meta["base_fingerprint"] = "0" * 16
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(tinker.BadRequestError, match="trained on other weights"):
        await service.create_sampling_client(model_path=saved.path)
    with pytest.raises(tinker.BadRequestError, match="not a Hugging Face model folder"):
        await service.create_lora_training_client(base_model=str(tmp_path))


def test_capabilities_info_and_context_manager(tmp_path: Path):
    with LocalServiceClient(checkpoint_dir=tmp_path) as service:
        caps = service.get_server_capabilities()
        assert caps.supported_models[0].model_name == DEFAULT_BASE_MODEL
        assert caps.supported_models[0].max_context_length == 2048
        tc = service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=16).result()
        info = tc.get_info()
        assert info.model_data.model_name == DEFAULT_BASE_MODEL
        assert info.is_lora and info.lora_rank == 16 and info.model_id == tc.model_id
        # the deprecated SDK style: the returned future also stands in for the client
        future = service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=2)
        with pytest.warns(FutureWarning, match="deprecated"):
            assert future.get_info().lora_rank == 2
    with pytest.raises(RuntimeError, match="closed"):
        service.create_lora_training_client(DEFAULT_BASE_MODEL)


LINEARS_PER_LAYER = {"attn": 4 * (64 + 64), "mlp": 2 * (64 + 256) + (256 + 64)}


@pytest.mark.parametrize(
    ("rank", "flags", "kinds"),
    [
        (1, {}, ("attn", "mlp", "unembed")),
        (8, {}, ("attn", "mlp", "unembed")),
        (32, {"train_unembed": False}, ("attn", "mlp")),
        (4, {"train_mlp": False, "train_unembed": False}, ("attn",)),
        (2, {"train_attn": False, "train_mlp": False}, ("unembed",)),
    ],
)
async def test_lora_rank_and_layers_are_honoured(service, rank, flags, kinds):
    tc = await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=rank, seed=0, **flags)
    adapter = tc.adapter
    per_rank = 2 * sum(LINEARS_PER_LAYER[k] for k in kinds if k != "unembed")
    if "unembed" in kinds:
        per_rank += 64 + len(tc.get_tokenizer())  # lm_head: 64 in, vocab out
    assert adapter.num_parameters() == rank * per_rank
    assert {name.split(".")[-1] for name in adapter.weights} <= {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "lm_head",
    }
    assert ("lm_head" in adapter.weights) == ("unembed" in kinds)
    for a, b in adapter.weights.values():
        assert a.shape[0] == rank and b.shape[1] == rank and not b.any()  # B starts at zero


async def test_base_weights_stay_frozen_and_new_adapter_is_the_base(service, tokenizer, prompt):
    tc = await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=8, seed=0)
    base_sampler = await service.create_sampling_client(base_model=DEFAULT_BASE_MODEL)
    fresh = await tc.save_weights_and_get_sampling_client()
    assert await fresh.compute_logprobs(prompt) == await base_sampler.compute_logprobs(prompt)
    before = {k: v.clone() for k, v in tc.base.module.state_dict().items()}
    assert not any(p.requires_grad for p in tc.base.module.parameters())
    for _ in range(2):
        tc.forward_backward([ce_datum(tokenizer.encode("yes no maybe"))], "cross_entropy")
        await tc.optim_step(tinker.AdamParams(learning_rate=1e-2))
    after = tc.base.module.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    trained = await tc.save_weights_and_get_sampling_client()
    assert await trained.compute_logprobs(prompt) != await base_sampler.compute_logprobs(prompt)
    assert await base_sampler.compute_logprobs(prompt) == await fresh.compute_logprobs(prompt)


async def test_same_seed_same_adapter(service):
    a = await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=4, seed=11)
    b = await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=4, seed=11)
    c = await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=4, seed=12)
    sa, sb, sc = (x.adapter.state_dict() for x in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


async def test_grad_clipping_and_load_state_checks(service, tokenizer):
    tc = await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=4, seed=0)
    data = [ce_datum(tokenizer.encode("User: Is the sky blue?\n\nAssistant: maybe"))]
    tc.forward_backward(data, "cross_entropy")
    first = await tc.optim_step(tinker.AdamParams(learning_rate=1e-3, grad_clip_norm=1e-3))
    assert first.metrics["grad_norm:mean"] > 1e-3  # reported before clipping
    saved = await tc.save_state("clip")
    other = await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=8, seed=0)
    with pytest.raises(tinker.BadRequestError, match="rank-4 adapter"):
        await other.load_state(saved.path)
    same = await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=4, seed=1)
    loaded = await same.load_state_with_optimizer(saved.path)
    assert loaded.path == saved.path
    sa, sb = tc.adapter.state_dict(), same.adapter.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


async def test_event_loop_keeps_ticking_during_large_forward_backward(training_client, tokenizer):
    # ~9k tokens, about a second here; distinct from the first token on (shared prefixes
    # would be computed once, and the batch would be small)
    rng = random.Random(0)
    data = [ce_datum([rng.randrange(3, len(tokenizer)) for _ in range(96)]) for _ in range(96)]
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    start = time.perf_counter()
    await training_client.forward_backward(data, "cross_entropy")
    elapsed = time.perf_counter() - start
    done.set()
    await task
    assert elapsed > 0.2, "the batch should be large enough to notice a blocked loop"
    assert len(gaps) > 10
    # A loop blocked by the forward pass would stall for about the whole call; a busy shared
    # machine can delay a free loop too, so the bound is relative to the call's length.
    limit = max(0.05, 0.3 * elapsed)
    assert max(gaps) < limit, f"event loop stalled for {max(gaps) * 1000:.0f} ms of {elapsed:.2f} s"
