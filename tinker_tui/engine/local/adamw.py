"""AdamW for the LoRA adapters, with `torch.optim.AdamW`'s arithmetic and state format.

Why not `torch.optim.AdamW` itself: its constructor (`add_param_group`), `zero_grad`,
`state_dict` and `load_state_dict` are wrapped to disable torch.compile, and the first call of
any of them imports `torch._dynamo`: about 2 s and 70 MB before the first training step, for a
compiler the backend never uses. This class does the same update with the same operations in
the same order (bit-identical results on CPU; a test compares them step by step), and reads
and writes the same ``state_dict`` layout, so optimizer states saved by either load into the
other.

The update, per parameter with gradient ``g`` at step ``t`` (Loshchilov & Hutter, decoupled
weight decay)::

    p *= 1 - lr * weight_decay                      (if weight_decay != 0)
    m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
    p -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

import tinker_tui.engine.local.torch_private as foreach


class AdamW:
    """AdamW over one group of parameters (the adapter's). Hyperparameters are read from
    ``param_groups[0]`` at each `step`, so callers may change them between steps."""

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        *,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        self.params = list(params)
        self.param_groups: list[dict[str, Any]] = [
            {
                "params": self.params,
                "lr": lr,
                "betas": betas,
                "eps": eps,
                "weight_decay": weight_decay,
            }
        ]
        #: Per parameter: ``step`` (a float32 CPU scalar tensor), ``exp_avg``, ``exp_avg_sq``.
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        lr, (beta1, beta2) = group["lr"], group["betas"]
        eps, weight_decay = group["eps"], group["weight_decay"]
        params, grads, avgs, avg_sqs, steps = [], [], [], [], []
        for p in self.params:
            if p.grad is None:
                continue
            state = self.state.get(p)
            if state is None:
                state = self.state[p] = {
                    "step": torch.tensor(0.0, dtype=torch.float32),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }
            state["step"] += 1
            params.append(p)
            grads.append(p.grad)
            avgs.append(state["exp_avg"])
            avg_sqs.append(state["exp_avg_sq"])
            steps.append(float(state["step"]))
        if not params:
            return
        # Elementwise, as torch's single-tensor AdamW: the foreach ops only save Python calls.
        if weight_decay != 0:
            foreach.mul_(params, 1 - lr * weight_decay)
        foreach.lerp_(avgs, grads, 1 - beta1)
        foreach.mul_(avg_sqs, beta2)
        foreach.addcmul_(avg_sqs, grads, grads, 1 - beta2)
        step_sizes = [-(lr / (1 - beta1**t)) for t in steps]
        denoms = foreach.sqrt(avg_sqs)
        foreach.div_(denoms, [(1 - beta2**t) ** 0.5 for t in steps])
        foreach.add_(denoms, eps)
        foreach.addcdiv_(params, avgs, denoms, step_sizes)

    # -- torch.optim's state_dict layout ----------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        group = self.param_groups[0]
        return {
            "state": {i: dict(self.state[p]) for i, p in enumerate(self.params) if p in self.state},
            "param_groups": [
                {
                    "lr": group["lr"],
                    "betas": tuple(group["betas"]),
                    "eps": group["eps"],
                    "weight_decay": group["weight_decay"],
                    "amsgrad": False,
                    "foreach": None,
                    "maximize": False,
                    "capturable": False,
                    "differentiable": False,
                    "fused": None,
                    "decoupled_weight_decay": True,
                    "params": list(range(len(self.params))),
                }
            ],
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Load a state saved by `state_dict` (or by `torch.optim.AdamW` on the same
        parameters); ValueError, with this optimizer unchanged, when it does not fit."""
        try:
            groups = state_dict["param_groups"]
            saved_state = state_dict["state"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not an optimizer state dict ({exc!r} missing)") from None
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            sizes = [len(g["params"]) for g in groups]
            raise ValueError(
                f"saved parameter groups have {sizes} parameters, this optimizer "
                f"has [{len(self.params)}]"
            )
        if groups[0].get("amsgrad") or groups[0].get("maximize"):
            raise ValueError("saved optimizer used amsgrad or maximize, which AdamW here does not")
        index = {saved_id: p for saved_id, p in zip(groups[0]["params"], self.params, strict=True)}
        state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}
        for key, values in saved_state.items():
            p = index.get(key)
            if p is None:
                raise ValueError(f"saved state for unknown parameter {key!r}")
            for name in ("exp_avg", "exp_avg_sq"):
                if tuple(values[name].shape) != tuple(p.shape):
                    raise ValueError(
                        f"saved {name} of parameter {key} has shape "
                        f"{list(values[name].shape)}, expected {list(p.shape)}"
                    )
            state[p] = {
                "step": torch.as_tensor(values["step"], dtype=torch.float32).detach().clone().cpu(),
                "exp_avg": values["exp_avg"].detach().to(p.device, p.dtype, copy=True),
                "exp_avg_sq": values["exp_avg_sq"].detach().to(p.device, p.dtype, copy=True),
            }
        for name in ("lr", "betas", "eps", "weight_decay"):
            if name in groups[0]:
                self.param_groups[0][name] = groups[0][name]
        self.state = state
