"""Run settings with their documented defaults."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from engine.local import DEFAULT_BASE_MODEL


class ConfigError(ValueError):
    """A setting has a value the engine cannot run with; the message names it."""


@dataclass(frozen=True, slots=True)
class RunConfig:
    max_steps: int = 40               # optimizer steps in the whole run
    group_size: int = 8               # rollouts per scenario; advantages are relative to the group
    groups_per_step: int = 4          # groups in one training batch
    rollout_workers: int = 4          # groups sampled concurrently
    max_steps_off_policy: int = 1     # a group sampled by policy v trains at most at v + this
    loss_fn: str = "importance_sampling"
    learning_rate: float = 3e-3
    temperature: float = 1.0          # default sampling temperature of the policy server
    max_tokens: int = 64              # default completion length of the policy server
    checkpoint_every: int = 10        # full checkpoint (with optimizer state) every N steps; 0 = off
    eval_every: int = 0               # evaluate every E steps on the task's eval scenarios; 0 = never
    eval_at_start: bool = False       # also evaluate the starting policy
    warmup_steps: int = 0             # supervised format steps before RL, if the task has examples
    warmup_learning_rate: float = 3e-3
    health_window: int = 32           # groups the health checks look back over
    zero_variance_pause_rate: float = 0.9  # pause when this share of them had no learning signal
    error_pause_rate: float = 0.5     # pause when this share of them failed
    lora_rank: int = 32
    base_model: str = DEFAULT_BASE_MODEL
    seed: int = 0

    def __post_init__(self) -> None:
        positive = ("max_steps", "group_size", "groups_per_step", "rollout_workers", "max_tokens")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("max_steps_off_policy", "checkpoint_every", "warmup_steps", "eval_every"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be 0 or more, got {getattr(self, name)}")
        if self.health_window < 1:
            raise ConfigError(f"health_window must be at least 1, got {self.health_window}")
        for name in ("zero_variance_pause_rate", "error_pause_rate"):
            if not 0 < getattr(self, name) <= 1:
                raise ConfigError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise ConfigError(f"learning_rate must be positive, got {self.learning_rate}")
        if self.loss_fn not in ("importance_sampling", "ppo", "cispo", "dro"):
            raise ConfigError(f"loss_fn must be importance_sampling, ppo, cispo or dro, "
                              f"got {self.loss_fn!r}")

    def with_overrides(self, overrides: dict[str, Any]) -> RunConfig:
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(unknown)}")
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
