"""The adapters' AdamW against torch.optim.AdamW: the same parameters step for step (bit for
bit on CPU), and state dicts that load into each other."""

from __future__ import annotations

import copy

import pytest
import torch

from tinker_tui.engine.local.adamw import AdamW


def _params(seed: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=g)) for shape in ((8, 4), (3,), (5, 8))]


def _grads(params, step: int) -> None:
    g = torch.Generator().manual_seed(1000 + step)
    for i, p in enumerate(params):
        # the second parameter has no gradient on even steps (it must keep its state)
        p.grad = None if i == 1 and step % 2 == 0 else torch.randn(p.shape, generator=g)


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_same_steps_as_torch(weight_decay):
    ours_p, ref_p = _params(0), _params(0)
    settings = {"lr": 3e-3, "betas": (0.9, 0.95), "eps": 1e-12, "weight_decay": weight_decay}
    ours = AdamW(ours_p, **settings)
    ref = torch.optim.AdamW(ref_p, **settings)
    for step in range(1, 8):
        if step == 4:  # hyperparameters change between steps, as optim_step does
            for opt in (ours, ref):
                opt.param_groups[0]["lr"] = 1e-2
                opt.param_groups[0]["betas"] = (0.8, 0.9)
        _grads(ours_p, step)
        _grads(ref_p, step)
        ours.step()
        ref.step()
        ours.zero_grad()
        ref.zero_grad()
        for a, b in zip(ours_p, ref_p, strict=True):
            assert torch.equal(a, b), f"step {step}"


def test_state_dicts_load_into_each_other():
    ours_p, ref_p = _params(1), _params(1)
    ours, ref = AdamW(ours_p, lr=1e-3), torch.optim.AdamW(ref_p, lr=1e-3)
    for step in range(1, 4):
        _grads(ours_p, step)
        _grads(ref_p, step)
        ours.step()
        ref.step()
    # torch's saved state into ours, ours into torch: both continue identically (copies, as
    # from a file: state_dict() returns the live tensors)
    ours2_p = [torch.nn.Parameter(p.detach().clone()) for p in ref_p]
    ours2 = AdamW(ours2_p)
    ours2.load_state_dict(copy.deepcopy(ref.state_dict()))
    ref2_p = [torch.nn.Parameter(p.detach().clone()) for p in ours_p]
    ref2 = torch.optim.AdamW(ref2_p)
    ref2.load_state_dict(copy.deepcopy(ours.state_dict()))
    for params in (ours_p, ref_p, ours2_p, ref2_p):
        _grads(params, 5)
    for opt in (ours, ref, ours2, ref2):
        opt.step()
    for a, b, c, d in zip(ours_p, ref_p, ours2_p, ref2_p, strict=True):
        assert torch.equal(a, b) and torch.equal(a, c) and torch.equal(a, d)


def test_state_that_does_not_fit_is_refused_unchanged():
    params = _params(2)
    opt = AdamW(params)
    _grads(params, 1)
    opt.step()
    before = opt.state_dict()
    other = AdamW([torch.nn.Parameter(torch.zeros(8, 4)), torch.nn.Parameter(torch.zeros(3))])
    other.state[other.params[0]] = {
        "step": torch.tensor(1.0),
        "exp_avg": torch.zeros(8, 4),
        "exp_avg_sq": torch.zeros(8, 4),
    }
    with pytest.raises(ValueError, match="parameters"):
        opt.load_state_dict(other.state_dict())
    wrong_shape = opt.state_dict()
    wrong_shape["state"][0]["exp_avg"] = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="shape"):
        opt.load_state_dict(wrong_shape)
    after = opt.state_dict()
    assert all(
        torch.equal(before["state"][k]["exp_avg"], after["state"][k]["exp_avg"])
        for k in before["state"]
    )
