"""Run settings with their documented defaults."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from tinker_tui.engine.errors import UsageError
from tinker_tui.engine.local import DEFAULT_BASE_MODEL


class ConfigError(UsageError, ValueError):
    """A setting has a value the engine cannot run with; the message names it."""


@dataclass(frozen=True, slots=True)
class RunConfig:
    max_steps: int = 40               # optimizer steps in the whole run
    group_size: int = 8               # rollouts per scenario; advantages are relative to the group
    groups_per_step: int = 4          # most groups in one training batch
    min_groups_per_step: int = 0      # fewest groups to train on; 0 = groups_per_step. Between
                                      # the two, a step takes what is already queued.
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
    # Backend: renderer, loss, optimizer, checkpoints, remote calls.
    renderer: str = ""                # tinker-cookbook renderer; "" = chosen from base_model
    loss_fn_config: str = ""          # loss settings "key=value,...", e.g. "clip_high_threshold=1.3"
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0       # 0 = no gradient clipping
    sampler_checkpoint_every: int = 1  # named sampler weights every N steps; 0 = never
    keep_last_checkpoints: int = 5    # of each kind (full state, sampler weights); 0 = keep all
    keep_every_checkpoints: int = 0   # also keep those whose step is a multiple of M; 0 = none
    sampler_clients_to_keep: int = 4  # recent policy versions servable as model "NAME@STEP"
    backend_timeout: float = 600.0    # seconds one backend call may take
    backend_retries: int = 3          # retries of a transient backend error (idempotent calls)
    # Outside trackers (optional extras tinker-tui[wandb], tinker-tui[tensorboard]); "" = off.
    wandb_project: str = ""           # log to this W&B project (--wandb PROJECT)
    wandb_entity: str = ""            # W&B team or user; "" = your default one
    wandb_run_name: str = ""          # W&B display name; "" = the run id
    wandb_run_id: str = ""            # W&B run id; "" = the run id (kept, so --resume continues it)
    wandb_samples_every: int = 10     # a W&B table of the step's rollouts every N steps; 0 = never
    tensorboard_dir: str = ""         # TensorBoard event files in DIR/<run id> (--tensorboard [DIR])

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
        if not 0 <= self.min_groups_per_step <= self.groups_per_step:
            raise ConfigError(f"min_groups_per_step must be between 0 and groups_per_step "
                              f"({self.groups_per_step}), got {self.min_groups_per_step}")
        if not self.learning_rate > 0:
            raise ConfigError(f"learning_rate must be positive, got {self.learning_rate}")
        if self.loss_fn not in ("importance_sampling", "ppo", "cispo", "dro"):
            raise ConfigError(f"loss_fn must be importance_sampling, ppo, cispo or dro, "
                              f"got {self.loss_fn!r}")
        self._check_backend_settings()
        self._check_trackers()

    def _check_backend_settings(self) -> None:
        parse_loss_fn_config(self.loss_fn_config)
        for name in ("adam_beta1", "adam_beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ConfigError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if not self.adam_eps > 0:
            raise ConfigError(f"adam_eps must be positive, got {self.adam_eps}")
        for name in ("weight_decay", "grad_clip_norm", "sampler_checkpoint_every",
                     "keep_last_checkpoints", "keep_every_checkpoints", "backend_retries"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be 0 or more, got {getattr(self, name)}")
        if self.sampler_clients_to_keep < 1:
            raise ConfigError(f"sampler_clients_to_keep must be at least 1, "
                              f"got {self.sampler_clients_to_keep}")
        if not self.backend_timeout > 0:
            raise ConfigError(f"backend_timeout must be positive, got {self.backend_timeout}")

    def _check_trackers(self) -> None:
        """A tracker whose package is missing stops the run before anything starts."""
        if self.wandb_samples_every < 0:
            raise ConfigError(f"wandb_samples_every must be 0 or more, "
                              f"got {self.wandb_samples_every}")
        if self.wandb_project or self.tensorboard_dir:
            from tinker_tui.engine import trackers

            for tracker in trackers.wanted(self):
                problem = trackers.missing_package(tracker)
                if problem:
                    raise ConfigError(problem)

    @property
    def min_batch(self) -> int:
        return self.min_groups_per_step or self.groups_per_step

    def with_overrides(self, overrides: dict[str, Any]) -> RunConfig:
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(unknown)}")
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_loss_fn_config(text: str) -> dict[str, float]:
    """`"clip_low_threshold=0.8, clip_high_threshold=1.2"` -> a dict of numbers ("" -> {}).

    Which keys a loss accepts is the backend's to say (it refuses unknown ones)."""
    config: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        try:
            if not sep or not key:
                raise ValueError
            config[key] = float(value)
        except ValueError:
            raise ConfigError(f"loss_fn_config must be key=number pairs separated by commas, "
                              f"got {item.strip()!r}") from None
    return config
