"""Every loss against hand-computed numbers on tiny tensors, their gradients, and the
validation messages; then the losses through a training client."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tinker
import torch

from tinker_tui.engine.local import DEFAULT_BASE_MODEL, losses

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
    with pytest.raises(ValueError, match="does not implement"):
        losses.check_loss_name("gspo")
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
