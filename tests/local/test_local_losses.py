"""The loss functions against hand-computed numbers, and their validation messages."""

from __future__ import annotations

import math

import pytest
import tinker
import torch

from engine.local import losses


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
    expected = -torch.exp(lp.detach() - sampling) * adv
    assert torch.allclose(lp.grad, expected, atol=1e-6)


def test_ppo_clips_and_cispo_stops_ratio_gradient():
    lp = torch.tensor([0.0, 0.0], requires_grad=True)
    sampling = torch.tensor([-1.0, 1.0])  # ratios e (clipped to 1.2), 1/e (clipped to 0.8)
    adv = torch.tensor([1.0, 1.0])
    el = losses.ppo(lp, sampling, adv)
    assert el.tolist() == pytest.approx([-1.2, -math.exp(-1.0)], abs=1e-6)
    lp2 = torch.tensor([-0.5], requires_grad=True)
    losses.cispo(lp2, torch.tensor([-0.5]), torch.tensor([3.0])).sum().backward()
    assert lp2.grad.tolist() == pytest.approx([-3.0])  # -(ratio 1) * A, ratio not differentiated


def _message(exc: pytest.ExceptionInfo) -> str:
    return str(exc.value)


def test_unknown_loss_name_is_a_bad_request():
    with pytest.raises(tinker.BadRequestError) as exc:
        losses.check_loss_name("cross_entropyy")
    assert "Unknown loss_fn 'cross_entropyy'" in _message(exc)
    assert "importance_sampling" in _message(exc)
    with pytest.raises(ValueError, match="does not implement"):
        losses.check_loss_name("dro")


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
    assert losses.resolve_config("ppo", {"clip_high_threshold": 1.5}) == {
        "clip_low_threshold": 0.8,
        "clip_high_threshold": 1.5,
    }
    with pytest.raises(tinker.BadRequestError, match="not accepted by 'cross_entropy'"):
        losses.resolve_config("cross_entropy", {"clip_low_threshold": 0.5})
