"""Tinker's built-in losses as pure torch functions, plus the request validation around them.

Conventions (Tinker's): a Datum's ``model_input`` has L tokens and every per-token
``loss_fn_input`` has length L; ``logprobs[i] = log p(target_tokens[i] | model_input[:i+1])``.
Losses are SUMS over tokens (and over datums), never means: the caller scales advantages or
weights if it wants a mean. Each function returns the per-token (elementwise) loss; the
training client sums it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from tinker_tui.engine.local.errors import bad_request


def cross_entropy(target_logprobs: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Supervised loss: ``-weights * logp(target)`` per token."""
    return -(weights * target_logprobs)


def importance_sampling(
    target_logprobs: torch.Tensor,
    sampling_logprobs: torch.Tensor,
    advantages: torch.Tensor,
) -> torch.Tensor:
    """REINFORCE with an importance ratio: ``-exp(logp - sampling_logp) * advantages``.

    Its gradient w.r.t. ``logp`` is ``-ratio * advantages``: on-policy (ratio 1) that is plain
    policy gradient.
    """
    ratio = torch.exp(target_logprobs - sampling_logprobs)
    return -(ratio * advantages)


def ppo(
    target_logprobs: torch.Tensor,
    sampling_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip_low_threshold: float = 0.8,
    clip_high_threshold: float = 1.2,
) -> torch.Tensor:
    """Clipped surrogate: ``-min(ratio * A, clip(ratio, low, high) * A)`` per token."""
    ratio = torch.exp(target_logprobs - sampling_logprobs)
    clipped = torch.clamp(ratio, clip_low_threshold, clip_high_threshold)
    return -torch.minimum(ratio * advantages, clipped * advantages)


def cispo(
    target_logprobs: torch.Tensor,
    sampling_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip_low_threshold: float = 0.0,
    clip_high_threshold: float = 4.0,
) -> torch.Tensor:
    """``-sg(clip(ratio, low, high)) * logp * A`` per token (the ratio is not differentiated)."""
    ratio = torch.exp(target_logprobs - sampling_logprobs)
    clipped = torch.clamp(ratio, clip_low_threshold, clip_high_threshold).detach()
    return -(clipped * target_logprobs * advantages)


def dro(
    target_logprobs: torch.Tensor,
    sampling_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    beta: float = 0.05,
) -> torch.Tensor:
    """DRO: ``-(logp * A - beta/2 * (logp - sampling_logp)^2)`` per token (Tinker's formula).

    The quadratic penalty keeps the policy near the sampler; it applies at every position,
    so positions that should not count need ``logprobs`` equal to the current ones there.
    Tinker's documentation gives the formula and a custom ``beta`` of 0.05, not the server's
    default; 0.05 is used here when no ``loss_fn_config`` is given.
    """
    quadratic = (target_logprobs - sampling_logprobs) ** 2
    return -(target_logprobs * advantages - 0.5 * beta * quadratic)


def gspo(
    target_logprobs: torch.Tensor,
    sampling_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    sequence_log_ratio: torch.Tensor,
    clip_low_threshold: float = 1.0 - 3e-4,
    clip_high_threshold: float = 1.0 + 4e-4,
) -> torch.Tensor:
    """GSPO-token (Zheng et al. 2025, as Tinker's docs give it): every token's ratio has the
    sequence ratio's value ``exp(sequence_log_ratio)`` (the mean token log-ratio over the
    sequence, computed without gradient by the caller) and its own logprob's gradient; then
    PPO's clipped surrogate. ``sampling_logprobs`` is unused here (the caller folded it into
    ``sequence_log_ratio``) but kept so every RL loss reads the same inputs. Default bounds
    are the paper's (eps_low 3e-4, eps_high 4e-4); Tinker's docs do not state theirs."""
    del sampling_logprobs
    ratio = torch.exp(sequence_log_ratio + target_logprobs - target_logprobs.detach())
    clipped = torch.clamp(ratio, clip_low_threshold, clip_high_threshold)
    return -torch.minimum(ratio * advantages, clipped * advantages)


#: The trust band of the local stable_reinforce: a token whose trainer/sampler ratio leaves it
#: gets no gradient (Tinker does not publish its formula; see docs "Where the local backend
#: chose").
STABLE_REINFORCE_BAND = (0.5, 2.0)


def stable_reinforce(
    target_logprobs: torch.Tensor, recorded_logprobs: torch.Tensor, advantages: torch.Tensor
) -> torch.Tensor:
    """The local StableReinforce: REINFORCE weighted by the importance ratio against the
    sampler's *recorded* logprobs (not the client's copy), the ratio not differentiated, and
    tokens outside `STABLE_REINFORCE_BAND` masked: ``-m * sg(r) * logp * A``. Inside the band
    the gradient equals importance sampling's; a token the trainer and sampler disagree on
    (stale weights, different numerics) drops out instead of blowing up the step."""
    ratio = torch.exp(target_logprobs - recorded_logprobs).detach()
    low, high = STABLE_REINFORCE_BAND
    weight = torch.where((ratio >= low) & (ratio <= high), ratio, torch.zeros_like(ratio))
    return -(weight * target_logprobs * advantages)


@dataclass(frozen=True)
class LossSpec:
    """Which per-token inputs a loss takes, its config keys with defaults, and the input
    whose zero entries make a position contribute no gradient (None: every position may).
    `optional`: inputs it also accepts; `provenance`: it reads recorded sequences named by
    the datum's provenance spans."""

    inputs: tuple[str, ...]
    config_defaults: Mapping[str, float]
    coefficient: str | None = "advantages"
    optional: tuple[str, ...] = ()
    provenance: bool = False


_RL_INPUTS = ("target_tokens", "logprobs", "advantages")

LOSSES: dict[str, LossSpec] = {
    "cross_entropy": LossSpec(("target_tokens", "weights"), {}, "weights"),
    "importance_sampling": LossSpec(_RL_INPUTS, {}),
    "ppo": LossSpec(_RL_INPUTS, {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}),
    "cispo": LossSpec(_RL_INPUTS, {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}),
    "dro": LossSpec(_RL_INPUTS, {"beta": 0.05}, None),
    "gspo": LossSpec(
        _RL_INPUTS,
        {"clip_low_threshold": 1.0 - 3e-4, "clip_high_threshold": 1.0 + 4e-4},
        optional=("sequence_ratio_mask",),
    ),
    # The sampler's logprobs come from the records; a client's copy is accepted and unused.
    "stable_reinforce": LossSpec(
        ("target_tokens", "advantages"), {}, optional=("logprobs",), provenance=True
    ),
}

# Known to Tinker but not implemented here: named separately so the error says so.
UNSUPPORTED_LOSSES = ("custom",)


def check_loss_name(loss_fn: str) -> LossSpec:
    spec = LOSSES.get(loss_fn)
    if spec is not None:
        return spec
    supported = ", ".join(LOSSES)
    if loss_fn == "custom":
        raise bad_request(
            "loss_fn 'custom' is not a built-in loss: call forward_backward_custom(data, fn) "
            f"with a Python loss function; built-in losses here: {supported}"
        )
    if loss_fn in UNSUPPORTED_LOSSES:
        raise bad_request(
            f"loss_fn {loss_fn!r} is a Tinker loss the local backend does not implement; "
            f"supported here: {supported}"
        )
    raise bad_request(f"Unknown loss_fn {loss_fn!r}; supported: {supported}")


def loss_input_keys(loss_fn: str) -> tuple[str, ...]:
    """The per-token tensors `elementwise_loss` reads for `loss_fn` (after the training client
    filled in what it computes: stable_reinforce's recorded ``logprobs``, gspo's
    ``sequence_log_ratio``)."""
    spec = check_loss_name(loss_fn)
    if loss_fn == "stable_reinforce":
        return ("target_tokens", "logprobs", "advantages")
    if loss_fn == "gspo":
        return (*spec.inputs, "sequence_log_ratio")
    return spec.inputs


def resolve_config(
    loss_fn: str, loss_fn_config: Mapping[str, float | str] | None
) -> dict[str, float]:
    spec = check_loss_name(loss_fn)
    config = dict(spec.config_defaults)
    for key, value in (loss_fn_config or {}).items():
        if key not in spec.config_defaults:
            allowed = ", ".join(spec.config_defaults) or "none"
            raise bad_request(
                f"loss_fn_config key {key!r} is not accepted by {loss_fn!r} (accepted: {allowed})"
            )
        try:
            config[key] = float(value)
        except (TypeError, ValueError):
            raise bad_request(f"loss_fn_config[{key!r}] must be a number, got {value!r}") from None
    return config


def check_datum_inputs(
    loss_fn: str, index: int, keys: set[str], lengths: Mapping[str, int], model_len: int
) -> None:
    """Raise a BadRequest naming exactly what is wrong with datum `index`'s loss inputs."""
    spec = check_loss_name(loss_fn)
    needed = set(spec.inputs) | set(spec.optional)
    missing = [k for k in spec.inputs if k not in keys]
    extra = sorted(keys - needed)
    if missing or extra:
        problems = []
        if missing:
            problems.append("is missing " + ", ".join(repr(k) for k in missing))
        if extra:
            problems.append("has unexpected key(s) " + ", ".join(repr(k) for k in extra))
        raise bad_request(
            f"Datum {index}: loss_fn_inputs {' and '.join(problems)}; "
            f"{loss_fn!r} takes: {', '.join(spec.inputs)}"
            + (f" (optional: {', '.join(spec.optional)})" if spec.optional else "")
        )
    for key in [k for k in (*spec.inputs, *spec.optional) if k in keys]:
        if lengths[key] != model_len:
            raise bad_request(
                f"Datum {index}: loss_fn_inputs[{key!r}] has length {lengths[key]} but "
                f"model_input has {model_len} tokens; every per-token input must have "
                "length len(model_input) (position i predicts target_tokens[i])"
            )


def elementwise_loss(
    loss_fn: str,
    target_logprobs: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    config: Mapping[str, float],
) -> torch.Tensor:
    """Dispatch to the loss named `loss_fn` (inputs already validated)."""
    if loss_fn == "cross_entropy":
        return cross_entropy(target_logprobs, inputs["weights"])
    if loss_fn == "importance_sampling":
        return importance_sampling(target_logprobs, inputs["logprobs"], inputs["advantages"])
    if loss_fn == "ppo":
        return ppo(target_logprobs, inputs["logprobs"], inputs["advantages"], **config)
    if loss_fn == "cispo":
        return cispo(target_logprobs, inputs["logprobs"], inputs["advantages"], **config)
    if loss_fn == "dro":
        return dro(target_logprobs, inputs["logprobs"], inputs["advantages"], **config)
    if loss_fn == "gspo":
        return gspo(
            target_logprobs,
            inputs["logprobs"],
            inputs["advantages"],
            inputs["sequence_log_ratio"],
            **config,
        )
    if loss_fn == "stable_reinforce":
        return stable_reinforce(target_logprobs, inputs["logprobs"], inputs["advantages"])
    check_loss_name(loss_fn)  # raises for unknown names
    raise AssertionError(f"loss {loss_fn!r} is registered but not dispatched")
