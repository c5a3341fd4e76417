"""Every loss against hand-computed numbers on tiny tensors, their gradients, and the
validation messages; then the losses through a training client."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tinker
import torch

from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient, losses

E = math.e


def test_cross_entropy_is_weighted_sum_of_negative_logprobs():
    lp = torch.tensor([math.log(0.5), math.log(0.25), math.log(0.1)])
    w = torch.tensor([0.0, 1.0, 2.0])
    el = losses.cross_entropy(lp, w)
    # -(0*ln .5) = 0, -(1*ln .25) = 1.386294, -(2*ln .1) = 4.605170
    assert el.tolist() == pytest.approx([0.0, 1.3862944, 4.6051702], abs=1e-6)
    assert float(el.sum()) == pytest.approx(5.9914646, abs=1e-6)


def test_importance_sampling_values():
    lp = torch.tensor([-1.0, -2.0, -0.5])
    sampling = torch.tensor([-1.0, -1.5, -1.0])
    adv = torch.tensor([2.0, -1.0, 0.5])
    el = losses.importance_sampling(lp, sampling, adv)
    # ratios 1, e^-0.5 = 0.6065307, e^0.5 = 1.6487213
    expected = [-2.0, 0.6065307, -0.8243606]
    assert el.tolist() == pytest.approx(expected, abs=1e-6)
    assert float(el.sum()) == pytest.approx(sum(expected), abs=1e-6)


def test_importance_sampling_gradient_matches_formula():
    lp = torch.tensor([-1.0, -2.0, -0.5, -3.0], requires_grad=True)
    sampling = torch.tensor([-1.2, -1.5, -1.0, -3.0])
    adv = torch.tensor([2.0, -1.0, 0.5, 0.0])
    losses.importance_sampling(lp, sampling, adv).sum().backward()
    # d/dlp of -exp(lp - q) * A is -exp(lp - q) * A
    expected = [-math.exp(0.2) * 2.0, math.exp(-0.5), -math.exp(0.5) * 0.5, 0.0]
    assert lp.grad.tolist() == pytest.approx(expected, abs=1e-6)


def test_ppo_values_and_clipped_gradient():
    lp = torch.tensor([0.0, 0.0, 0.0], requires_grad=True)
    sampling = torch.tensor([-1.0, 1.0, -1.0])  # ratios e, 1/e, e
    adv = torch.tensor([1.0, 1.0, -1.0])
    el = losses.ppo(lp, sampling, adv)
    # min(e*1, 1.2*1) = 1.2; min(e^-1, 0.8) = e^-1; min(-e, -1.2) = -e
    assert el.tolist() == pytest.approx([-1.2, -1 / E, E], abs=1e-6)
    el.sum().backward()
    # clipped term: no gradient; unclipped: -ratio * A
    assert lp.grad.tolist() == pytest.approx([0.0, -1 / E, E], abs=1e-6)
    wide = losses.ppo(lp.detach(), sampling, adv, clip_low_threshold=0.1, clip_high_threshold=5)
    assert wide.tolist() == pytest.approx([-E, -1 / E, E], abs=1e-6)


def test_cispo_values_and_gradient():
    lp = torch.tensor([-0.5, 0.0], requires_grad=True)
    sampling = torch.tensor([-0.5, -3.0])  # ratios 1, e^3 = 20.09 (clipped to 4)
    adv = torch.tensor([3.0, 1.0])
    el = losses.cispo(lp, sampling, adv)
    # -(sg(clip(ratio)) * lp * A): -(1 * -0.5 * 3) = 1.5; -(4 * 0 * 1) = 0
    assert el.tolist() == pytest.approx([1.5, 0.0], abs=1e-6)
    el.sum().backward()
    assert lp.grad.tolist() == pytest.approx([-3.0, -4.0], abs=1e-6)  # ratio not differentiated


def test_dro_values_and_gradient():
    lp = torch.tensor([-1.0, -2.0], requires_grad=True)
    sampling = torch.tensor([-1.5, -2.0])
    adv = torch.tensor([2.0, -1.0])
    el = losses.dro(lp, sampling, adv)  # beta 0.05
    # -(lp*A - beta/2 (lp - q)^2): -(-2 - 0.025*0.25) = 2.00625; -(2 - 0) = -2
    assert el.tolist() == pytest.approx([2.00625, -2.0], abs=1e-6)
    el.sum().backward()
    # d/dlp = -(A - beta (lp - q)): -(2 - 0.05*0.5) = -1.975; -(-1 - 0) = 1
    assert lp.grad.tolist() == pytest.approx([-1.975, 1.0], abs=1e-6)
    assert losses.dro(lp.detach(), sampling, adv, beta=1.0).tolist() == pytest.approx(
        [2.125, -2.0], abs=1e-6
    )


def test_default_configs_are_tinkers():
    assert losses.resolve_config("ppo", None) == {
        "clip_low_threshold": 0.8,
        "clip_high_threshold": 1.2,
    }
    assert losses.resolve_config("cispo", None) == {
        "clip_low_threshold": 0.0,
        "clip_high_threshold": 4.0,
    }
    assert losses.resolve_config("dro", None) == {"beta": 0.05}
    assert losses.resolve_config("dro", {"beta": "0.2"}) == {"beta": 0.2}


def _message(exc: pytest.ExceptionInfo) -> str:
    return str(exc.value)


def test_unknown_loss_name_is_a_bad_request():
    with pytest.raises(tinker.BadRequestError) as exc:
        losses.check_loss_name("cross_entropyy")
    assert "Unknown loss_fn 'cross_entropyy'" in _message(exc)
    assert "importance_sampling" in _message(exc) and "dro" in _message(exc)
    assert losses.check_loss_name("gspo").inputs == ("target_tokens", "logprobs", "advantages")
    assert losses.check_loss_name("stable_reinforce").provenance
    with pytest.raises(tinker.BadRequestError, match="forward_backward_custom"):
        losses.check_loss_name("custom")


def test_missing_extra_and_length_are_named():
    keys = {"target_tokens", "weights"}
    with pytest.raises(tinker.BadRequestError) as exc:
        losses.check_datum_inputs("importance_sampling", 3, keys, {}, 5)
    msg = _message(exc)
    assert msg.startswith("Datum 3:")
    assert "missing 'logprobs', 'advantages'" in msg
    assert "unexpected key(s) 'weights'" in msg

    with pytest.raises(tinker.BadRequestError) as exc:
        losses.check_datum_inputs("cross_entropy", 0, keys, {"target_tokens": 5, "weights": 4}, 5)
    assert "loss_fn_inputs['weights'] has length 4 but model_input has 5 tokens" in _message(exc)


def test_loss_config_keys_are_checked():
    with pytest.raises(tinker.BadRequestError, match="not accepted by 'cross_entropy'"):
        losses.resolve_config("cross_entropy", {"clip_low_threshold": 0.5})
    with pytest.raises(tinker.BadRequestError, match="accepted: beta"):
        losses.resolve_config("dro", {"clip_low_threshold": 0.5})
    with pytest.raises(tinker.BadRequestError, match="must be a number"):
        losses.resolve_config("ppo", {"clip_low_threshold": "low"})


# -- through a training client ------------------------------------------------------------
def _rl_datum(ids: list[int], n_prompt: int, sampling: list[float], adv: float) -> tinker.Datum:
    n = len(ids) - 1
    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={
            "target_tokens": ids[1:],
            "logprobs": [0.0] * (n_prompt - 1) + sampling,
            "advantages": [0.0] * (n_prompt - 1) + [adv] * (n - n_prompt + 1),
        },
    )


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo", "dro"])
async def test_client_elementwise_loss_is_the_formula(service, tokenizer, prompt, loss_fn):
    tc = await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=4, seed=1)
    ids = prompt.to_ints() + tokenizer.encode(" maybe\n\nUser:")
    n_prompt = len(prompt.to_ints())
    datum = _rl_datum(ids, n_prompt, [-0.3, -2.0, -0.1, -1.0], 0.7)
    out = await tc.forward([datum], loss_fn)
    lp = torch.tensor(out.loss_fn_outputs[0]["logprobs"].to_numpy())
    q = torch.tensor(datum.loss_fn_inputs["logprobs"].to_numpy())
    adv = torch.tensor(datum.loss_fn_inputs["advantages"].to_numpy())
    expected = {
        "importance_sampling": lambda: losses.importance_sampling(lp, q, adv),
        "ppo": lambda: losses.ppo(lp, q, adv),
        "cispo": lambda: losses.cispo(lp, q, adv, 0.0, 4.0),
        "dro": lambda: losses.dro(lp, q, adv),
    }[loss_fn]()
    got = out.loss_fn_outputs[0]["elementwise_loss"].to_numpy()
    assert np.allclose(got, expected.numpy(), atol=1e-5)
    assert out.metrics["loss:sum"] == pytest.approx(float(expected.sum()), rel=1e-5, abs=1e-5)


async def test_importance_sampling_gradient_through_the_model(service, tokenizer, prompt):
    """The built-in loss and a custom loss written as the formula give the same update."""
    ids = prompt.to_ints() + tokenizer.encode(" no\n\nUser:")
    n_prompt = len(prompt.to_ints())
    datum = _rl_datum(ids, n_prompt, [-1.2, -0.4, -0.2, -0.9], -0.8)
    q = torch.tensor(datum.loss_fn_inputs["logprobs"].to_numpy())
    adv = torch.tensor(datum.loss_fn_inputs["advantages"].to_numpy())

    def formula(data, logprobs):
        loss = -(torch.exp(logprobs[0] - q) * adv).sum()
        return loss, {"custom": 1.0}

    a = await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=4, seed=3)
    b = await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=4, seed=3)
    adam = tinker.AdamParams(learning_rate=1e-2)
    fa = a.forward_backward([datum], "importance_sampling")
    sa = a.optim_step(adam)
    fb = b.forward_backward_custom([datum], formula)
    sb = b.optim_step(adam)
    out_a, out_b = await fa, await fb
    assert out_b.metrics["custom"] == 1.0
    assert out_a.metrics["loss:sum"] == pytest.approx(out_b.metrics["loss:sum"], rel=1e-5)
    assert (await sa).metrics["grad_norm:mean"] == pytest.approx(
        (await sb).metrics["grad_norm:mean"], rel=1e-4
    )
    la = (await a.forward([datum], "importance_sampling")).loss_fn_outputs[0]["logprobs"]
    lb = (await b.forward([datum], "importance_sampling")).loss_fn_outputs[0]["logprobs"]
    assert np.allclose(la.to_numpy(), lb.to_numpy(), atol=1e-5)


# -- gspo and stable_reinforce ----------------------------------------------------------------
def test_gspo_values_and_gradient():
    lp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    q = torch.tensor([-1.0, -1.5, -1.0])
    adv = torch.tensor([1.0, 1.0, -1.0])
    seq = torch.full((3,), 0.1)  # the sequence ratio e^0.1 = 1.1051709 on every token
    el = losses.gspo(lp, q, adv, seq, 0.9, 1.2)
    # unclipped (1.1051709 within [0.9, 1.2]): -(1.1051709 * A)
    assert el.tolist() == pytest.approx([-1.1051709, -1.1051709, 1.1051709], abs=1e-6)
    el.sum().backward()
    # d/dlp_t of -(s * e^(lp_t - sg lp_t) * A_t) = -s * A_t
    assert lp.grad.tolist() == pytest.approx([-1.1051709, -1.1051709, 1.1051709], abs=1e-6)
    lp2 = torch.tensor([-1.0], requires_grad=True)
    clipped = losses.gspo(lp2, q[:1], torch.tensor([1.0]), torch.tensor([0.5]), 0.9, 1.2)
    clipped.sum().backward()
    # e^0.5 = 1.6487 above 1.2 with A > 0: the clipped term (1.2, no gradient) is the min
    assert clipped.item() == pytest.approx(-1.2) and lp2.grad.item() == 0.0


def test_stable_reinforce_masks_tokens_outside_the_band():
    lp = torch.tensor([-1.0, -1.0, -1.0], requires_grad=True)
    recorded = torch.tensor([-1.0, -2.5, -0.8])  # ratios 1, e^1.5 = 4.48 (out), e^-0.2 = 0.82
    adv = torch.tensor([2.0, 2.0, 2.0])
    el = losses.stable_reinforce(lp, recorded, adv)
    el.sum().backward()
    r = math.exp(-0.2)
    assert el.tolist() == pytest.approx([2.0, 0.0, 2.0 * r], abs=1e-6)
    assert lp.grad.tolist() == pytest.approx([-2.0, 0.0, -2.0 * r], abs=1e-6)


async def test_client_gspo_is_the_sequence_ratio_formula(service, tokenizer, prompt):
    tc = await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=4, seed=1)
    ids = prompt.to_ints() + tokenizer.encode(" maybe\n\nUser:")
    n_prompt = len(prompt.to_ints())
    datum = _rl_datum(ids, n_prompt, [-0.3, -2.0, -0.1, -1.0], 0.7)
    out = await tc.forward([datum], "gspo", {"clip_low_threshold": 0.0, "clip_high_threshold": 9})
    lp = torch.tensor(out.loss_fn_outputs[0]["logprobs"].to_numpy())
    q = torch.tensor(datum.loss_fn_inputs["logprobs"].to_numpy())
    adv = torch.tensor(datum.loss_fn_inputs["advantages"].to_numpy())
    sampled = adv != 0
    seq = float((lp - q)[sampled].mean())
    expected = -(math.exp(seq) * adv)
    got = out.loss_fn_outputs[0]["elementwise_loss"].to_numpy()
    assert np.allclose(got, expected.numpy(), atol=1e-5)


async def _recorded_datum(service, tokenizer, prompt, advantage: float):
    """A training client, and a Datum of one sequence its recording sampler produced, with
    provenance naming it."""
    tc = await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=4, seed=2)
    sampler = await tc.save_weights_and_get_sampling_client(record_stability_info=True)
    params = tinker.SamplingParams(max_tokens=6, temperature=1.0, seed=5)
    seq = (await sampler.sample(prompt, 1, params)).sequences[0]
    ids = prompt.to_ints() + list(seq.tokens)
    n_prompt, n = len(prompt.to_ints()), len(seq.tokens)
    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={
            "target_tokens": ids[1:],
            "advantages": [0.0] * (n_prompt - 1) + [advantage] * n,
        },
    ).with_provenance(
        model_input=[
            tinker.PromptProvenanceSpan(sequence_id=seq.sequence_id, length=n_prompt),
            tinker.SampledProvenanceSpan(sequence_id=seq.sequence_id, length=n - 1),
        ],
        loss_fn_inputs=[
            tinker.PromptProvenanceSpan(sequence_id=seq.sequence_id, length=n_prompt - 1),
            tinker.SampledProvenanceSpan(sequence_id=seq.sequence_id, length=n),
        ],
    )
    return tc, datum, seq


async def test_client_stable_reinforce_reads_the_recorded_logprobs(service, tokenizer, prompt):
    tc, datum, seq = await _recorded_datum(service, tokenizer, prompt, 0.5)
    out = await tc.forward_backward([datum], "stable_reinforce")
    await tc.optim_step(tinker.AdamParams(learning_rate=1e-3))
    lp = torch.tensor(out.loss_fn_outputs[0]["logprobs"].to_numpy())
    adv = torch.tensor(datum.loss_fn_inputs["advantages"].to_numpy())
    recorded = torch.zeros_like(lp)
    recorded[-len(seq.tokens) :] = torch.tensor(seq.logprobs)
    expected = losses.stable_reinforce(lp, recorded, adv)
    got = out.loss_fn_outputs[0]["elementwise_loss"].to_numpy()
    assert np.allclose(got, expected.numpy(), atol=1e-5)
    assert math.isfinite(out.metrics["loss:sum"]) and out.metrics["loss:sum"] != 0.0


async def test_stable_reinforce_refuses_missing_unknown_and_expired_ids(service, tokenizer, prompt):
    _, datum, _ = await _recorded_datum(service, tokenizer, prompt, 0.5)

    async def fresh():  # a refused request poisons its client, as on the service
        return await service.create_lora_training_client(DEFAULT_BASE_MODEL, rank=4, seed=2)

    bare = tinker.Datum(model_input=datum.model_input, loss_fn_inputs=datum.loss_fn_inputs)
    with pytest.raises(tinker.BadRequestError, match="no loss_fn_input_spans"):
        await (await fresh()).forward([bare], "stable_reinforce")
    await (await fresh()).forward([datum], "stable_reinforce")  # same session: trainable
    other = LocalServiceClient(checkpoint_dir=service.checkpoint_dir)  # another session
    stranger = await other.create_lora_training_client(DEFAULT_BASE_MODEL, rank=4, seed=2)
    with pytest.raises(tinker.BadRequestError, match="was not recorded in this session"):
        await stranger.forward([datum], "stable_reinforce")
    service.stability.expire_all()
    with pytest.raises(tinker.BadRequestError, match="has expired"):
        await (await fresh()).forward([datum], "stable_reinforce")
