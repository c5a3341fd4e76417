"""Run settings: one spec per setting, read by every part that names, checks or explains one.

Each `RunConfig` field carries its `Setting`: a one-line meaning, the values it takes (a
range or a list of choices), the group `--help` lists it under, and whether a running
pipeline accepts it live (`Control.set_knob`). `SETTINGS` collects them (with the field's
name, type and default); `LIVE_KNOBS` are the live ones, in the order the control view lists
them. The engine checks a value with `Setting.check`, the pipeline a knob with `check_knob`,
the dashboard parses a typed value with `Setting.parse`, the command line builds a flag from
each: one rule, one place.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal, TypeVar

from tinker_tui.engine.collapse_level import level_words
from tinker_tui.engine.did_you_mean import did_you_mean
from tinker_tui.engine.errors import UsageError
from tinker_tui.engine.local import DEFAULT_BASE_MODEL

T = TypeVar("T")
#: Where `--help` lists a setting: what the run does, how the pipeline paces it, how the
#: backend trains and keeps checkpoints, where else the run is logged.
Group = Literal["run", "pipeline", "backend", "trackers"]


class ConfigError(UsageError, ValueError):
    """A setting has a value the engine cannot run with; the message names it."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One run setting (see the module docstring). `low`/`high` bound a number (an open
    bound excludes itself); `choices` list the values a string may take."""

    meaning: str
    group: Group = "run"
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] = ()
    live: bool = False
    # From the RunConfig field (filled in by `SETTINGS`):
    name: str = ""
    value_type: type = object
    default: Any = None

    @property
    def numeric(self) -> bool:
        return self.value_type in (int, float)

    def allowed(self) -> str:
        """The values it takes, as the end of "NAME must be ...": "at least 1",
        "between 0 and 2", "in (0, 1]", "ppo or dro", "" when anything of its type goes."""
        if self.choices:
            return ", ".join(self.choices[:-1]) + f" or {self.choices[-1]}"
        low, high = _show(self.low), _show(self.high)
        if self.low is not None and self.high is not None:
            if self.low_open == self.high_open:
                return f"between {low} and {high}" + (" (exclusive)" if self.low_open else "")
            return (
                f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
            )
        if self.low is not None:
            if self.low == 0:
                return "positive" if self.low_open else "0 or more"
            return f"more than {low}" if self.low_open else f"at least {low}"
        if self.high is not None:
            return f"less than {high}" if self.high_open else f"at most {high}"
        return ""

    def check(self, value: Any) -> Any:
        """`value` if this setting takes it (a whole float becomes an int for an int
        setting); ConfigError saying what is allowed otherwise."""
        if self.numeric:
            original = value
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{self.name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ConfigError(f"{self.name} must be a finite number, got {value}")
            if self.value_type is int:
                if int(value) != value:
                    raise ConfigError(f"{self.name} must be a whole number, got {value}")
                value = int(value)
                if abs(value) > LARGEST_WHOLE:
                    raise ConfigError(
                        f"{self.name} must be at most {LARGEST_WHOLE:,} (the "
                        f"largest whole number the run store holds), got {value}"
                    )
            else:
                value = float(value)
            if not self._in_range(value):  # a whole number as typed for an int setting: 0, not 0.0
                raise ConfigError(
                    f"{self.name} must be {self.allowed()}, "
                    f"got {value if self.value_type is int else original}"
                )
            return value
        if self.choices and value not in self.choices:
            hint = did_you_mean(str(value), self.choices)
            raise ConfigError(f"{self.name} must be {self.allowed()}, got {value!r}{hint}")
        return value

    def _in_range(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def parse(self, text: str) -> Any:
        """The value typed for a numeric setting (`1e-3`, `0.001`, `4`, `1_000`), checked;
        ConfigError with a message a person can act on."""
        cleaned = text.strip().replace("_", "")
        if not cleaned:
            raise ConfigError(f"type a value for {self.name}")
        try:
            number = float(cleaned)
        except ValueError:
            raise ConfigError(f"{self.name} must be a number, got {text.strip()!r}") from None
        return self.check(number)

    def format(self, value: Any) -> str:
        """A value as the dashboard shows it: a whole number for an int setting, else `:g`."""
        if value is None:
            return "-"
        if self.value_type is int:
            return str(int(value))
        return f"{value:g}" if isinstance(value, int | float) else str(value)


def _show(bound: float | None) -> str:
    return f"{bound:g}" if bound is not None else ""


#: The largest whole-number setting: the run store's INTEGER is 64-bit, and a run whose
#: setting it cannot store would train with nothing recorded.
LARGEST_WHOLE = 2**63 - 1


def setting(
    default: T,
    meaning: str,
    group: Group = "run",
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    choices: tuple[str, ...] = (),
    live: bool = False,
) -> T:
    """A RunConfig field with its `Setting` (the default's type is the field's)."""
    spec = Setting(
        meaning=meaning,
        group=group,
        low=low,
        high=high,
        low_open=low_open,
        high_open=high_open,
        choices=choices,
        live=live,
    )
    return dataclasses.field(default=default, metadata={"setting": spec})


#: Defaults that depend on the backend, over RunConfig's own (the Tinker ones): a local
#: rollout minutes long is hung, while Tinker's queues can hold one longer. The task's
#: settings, a config file and flags still win (`app.task_loader.layered_config`).
BACKEND_DEFAULTS: dict[str, dict[str, Any]] = {"local": {"rollout_timeout": 300.0}}

LOSS_FNS = ("importance_sampling", "ppo", "cispo", "dro", "gspo", "stable_reinforce")
#: The async recipes a run can follow (`async_style`): today's default, or the cookbook's.
ASYNC_STYLES = ("default", "cookbook")
#: What `async_style = cookbook` sets, in one place: Tinker's current async recipe
#: (tinker-cookbook's async default) — in-flight sampling, StableReinforce, nothing discarded
#: for staleness, and sampling paced to run at most `max_steps_off_policy` steps ahead of
#: training (the cookbook's `sampling_steps_ahead`). A key that is not a setting of this
#: version is skipped (`sampling` arrives with in-flight sampling), so the preset works
#: before and after that setting exists.
ASYNC_PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "cookbook": {
        "sampling": "inflight",
        "loss_fn": "stable_reinforce",
        "discard_stale": False,
        "max_steps_off_policy": 1,
    },
}
#: The values of `advantage` (see engine.training.advantages; kept here so --help needs no import).
ADVANTAGE_RULES = ("mean", "mean_std")
#: What a health pause does: `auto` is `wait` with a dashboard, `stop` without one.
HEALTH_PAUSE_POLICIES = ("auto", "wait", "stop")
#: What a collapse (engine.metrics.health) does: `auto` is `wait` with a dashboard, `stop`
#: without one.
COLLAPSE_POLICIES = ("auto", "wait", "stop", "rollback")
#: The shapes of the learning rate over the run (engine.training.lr_schedule).
LR_SCHEDULES = ("constant", "linear", "cosine")
#: What a trajectory the length limit cut off gets: its reward as graded, or at most
#: `truncated_reward_cap` (engine.rollouts.truncation).
TRUNCATION_POLICIES = ("keep", "cap")
#: Which weights rollouts sample from: a fixed snapshot per policy version, or Tinker's
#: in-flight sampler that every publish moves forward (engine.backend.session).
SAMPLING_KINDS = ("snapshot", "inflight")


@dataclass(frozen=True, slots=True)
class RunConfig:
    max_steps: int = setting(40, "optimizer steps in the whole run", low=1)
    group_size: int = setting(
        8, "rollouts per scenario; advantages are relative to the group", low=1
    )
    groups_per_step: int = setting(4, "most groups in one training batch", "pipeline", low=1)
    min_groups_per_step: int = setting(
        0,
        "fewest groups to train on (0 = groups_per_step); between the two, a step takes "
        "what is already queued",
        "pipeline",
        low=0,
    )
    loss_fn: str = setting(
        "importance_sampling",
        "the RL loss (stable_reinforce samples with recorded stability info and names each "
        "trained token's sequence; gspo uses a sequence-level importance ratio)",
        choices=LOSS_FNS,
    )
    async_style: str = setting(
        "default",
        "the async recipe: default (snapshot samplers, staleness discard), or cookbook "
        "(in-flight sampling, stable_reinforce, no staleness discard, steps-ahead pacing); "
        "a setting you give that differs from its default wins over the preset",
        choices=ASYNC_STYLES,
    )
    advantage: str = setting(
        "mean",
        "group advantages: reward minus the group's mean, or that divided by the "
        "group's standard deviation (mean_std); a task's advantages() hook overrides it",
        choices=ADVANTAGE_RULES,
    )
    kl_penalty_coef: float = setting(
        0.0,
        "KL penalty against the base model, per sampled token, added to the "
        "advantages (tinker-cookbook's kl_penalty_coef); 0 = off",
        low=0,
    )
    learning_rate: float = setting(
        1e-3,
        "Adam learning rate of the RL steps (the peak: lr_schedule scales it per step)",
        low=0,
        high=1,
        low_open=True,
        high_open=True,
        live=True,
    )
    lr_schedule: str = setting(
        "constant",
        "the learning rate over the run after its warm-up: constant, or decaying to 0 at "
        "max_steps (linear, cosine); the live learning_rate knob scales it",
        choices=LR_SCHEDULES,
    )
    lr_warmup_steps: int = setting(
        0,
        "RL steps over which the learning rate rises linearly to learning_rate before "
        "the schedule starts (not the supervised warmup_steps); less than max_steps",
        low=0,
    )
    num_substeps: int = setting(
        1,
        "optimizer steps per batch: its datums split into this many minibatches, each "
        "a forward_backward and an optim_step",
        low=1,
        high=64,
    )
    truncation_policy: str = setting(
        "keep",
        "a rollout the length limit (max_tokens) cut off keeps its graded reward, or gets "
        "at most truncated_reward_cap (cap)",
        choices=TRUNCATION_POLICIES,
    )
    truncated_reward_cap: float = setting(
        0.0, "the most reward a cut-off rollout gets with truncation_policy = cap"
    )
    temperature: float = setting(
        1.0, "default sampling temperature of the policy server", low=0, high=2, live=True
    )
    max_tokens: int = setting(64, "default completion length of the policy server", low=1)
    sampling: str = setting(
        "snapshot",
        "what rollouts sample from: a fixed snapshot of each policy version, or one "
        "in-flight sampler every step moves to its new weights (running rollouts included; "
        "staleness is then a bound and nothing is discarded for it)",
        "pipeline",
        choices=SAMPLING_KINDS,
    )
    max_steps_off_policy: int = setting(
        1,
        "a group sampled by policy v trains at most at v + this (with sampling = "
        "inflight: how far sampling runs ahead of training)",
        "pipeline",
        low=0,
        high=64,
        live=True,
    )
    discard_stale: bool = setting(
        True,
        "discard a group more than max_steps_off_policy versions behind the trainer; off: "
        "train it anyway (pacing still bounds how far ahead sampling runs)",
        "pipeline",
    )
    rollout_workers: int = setting(
        4, "groups sampled concurrently", "pipeline", low=1, high=256, live=True
    )
    sample_coalesce_ms: float = setting(
        5.0,
        "milliseconds the policy server waits for a group's equal requests (same "
        "prompt, sampling settings and policy) to send them as one sampling call; a lone "
        "request waits this long at most; 0 = every request on its own",
        "pipeline",
        low=0,
        high=1000,
    )
    checkpoint_every: int = setting(
        10, "full checkpoint (with optimizer state) every N steps; 0 = off", low=0
    )
    eval_every: int = setting(
        0, "evaluate every N steps on the task's eval scenarios; 0 = never", low=0
    )
    eval_at_start: bool = setting(False, "also evaluate the starting policy")
    eval_samples: int = setting(
        1, "samples per eval scenario in the run's evaluations (the k of pass@k)", low=1
    )
    eval_temperature: float = setting(
        -1.0,
        "temperature of every request of the run's evaluations, pinned, the task's own "
        "included (as tinker-tui eval --eval-temperature); -1 = the training temperature, "
        "as the default for requests that leave it out",
        low=-1,
        high=2,
    )
    eval_max_tokens: int = setting(
        0,
        "cap on each request's max_tokens in the run's evaluations (as tinker-tui eval "
        "--eval-max-tokens); 0 = the training max_tokens, as the default for requests that "
        "leave it out",
        low=0,
    )
    eval_success_threshold: float = setting(
        1.0, "a sample of the run's evaluations succeeds (pass@k) when its reward is at least this"
    )
    warmup_steps: int = setting(
        0, "supervised format steps before RL, if the task has examples", low=0
    )
    warmup_learning_rate: float = setting(
        3e-3, "learning rate of the warm-up steps", low=0, high=1, low_open=True, high_open=True
    )
    rollout_timeout: float = setting(
        600.0,
        "seconds one rollout (a group_rollout: one group) may take; past it, it is "
        "cancelled and counted as an error (300 on the local backend); 0 = no limit",
        "pipeline",
        low=0,
    )
    min_group_size: int = setting(
        2,
        "a group whose failed rollouts leave fewer members than this (at most "
        "group_size) is discarded; otherwise it trains with the rest",
        "pipeline",
        low=1,
    )
    health_window: int = setting(32, "groups the health checks look back over", "pipeline", low=1)
    on_health_pause: str = setting(
        "auto",
        "when a health check pauses the run: wait for resume, or stop gracefully "
        "(exit code 3); auto = wait with a dashboard, stop without one",
        "pipeline",
        choices=HEALTH_PAUSE_POLICIES,
    )
    zero_variance_pause_rate: float = setting(
        0.9,
        "pause when this share of them had no learning signal",
        "pipeline",
        low=0,
        high=1,
        low_open=True,
    )
    error_pause_rate: float = setting(
        0.5, "pause when this share of them failed", "pipeline", low=0, high=1, low_open=True
    )
    on_collapse: str = setting(
        "auto",
        f"when the reward collapses (falls below {level_words()} to its best while "
        "groups turn equal or fail): wait for a person, stop gracefully (exit code 3), or roll back to "
        "the checkpoint of the weights that sampled the best step with the learning rate scaled by "
        "rollback_lr_scale; auto = wait with a dashboard, stop without one",
        "pipeline",
        choices=COLLAPSE_POLICIES,
    )
    collapse_groups: int = setting(
        32,
        "groups a collapse is judged over: the last steps holding at least this many "
        "(and at least 3 steps), weighted by their groups",
        "pipeline",
        low=1,
    )
    rollback_lr_scale: float = setting(
        0.5,
        "a rollback multiplies the learning rate by this",
        "pipeline",
        low=0,
        high=1,
        low_open=True,
    )
    max_rollbacks: int = setting(
        2,
        "automatic rollbacks in one run, its resumes included (on_collapse = rollback); "
        "after them a collapse waits or stops as auto would",
        "pipeline",
        low=0,
    )
    lora_rank: int = setting(32, "rank of the LoRA adapters", "backend", low=1)
    base_model: str = setting(DEFAULT_BASE_MODEL, "the model to train", "backend")
    seed: int = setting(0, "seeds the scenario stream and sampling")
    renderer: str = setting(
        "", "tinker-cookbook renderer; empty = chosen from base_model", "backend"
    )
    loss_fn_config: str = setting(
        "", 'loss settings "key=value,...", e.g. "clip_high_threshold=1.3"', "backend"
    )
    adam_beta1: float = setting(0.9, "Adam beta1", "backend", low=0, high=1, high_open=True)
    adam_beta2: float = setting(0.95, "Adam beta2", "backend", low=0, high=1, high_open=True)
    adam_eps: float = setting(1e-12, "Adam epsilon", "backend", low=0, low_open=True)
    weight_decay: float = setting(0.0, "Adam weight decay", "backend", low=0)
    grad_clip_norm: float = setting(
        1.0,
        "gradient clipping norm; 0 = no clipping (unclipped, one large step collapsed "
        "tool-calling tasks on the embedded model)",
        "backend",
        low=0,
    )
    sampler_checkpoint_every: int = setting(
        1, "named sampler weights every N new policy versions; 0 = never", "backend", low=0
    )
    keep_last_checkpoints: int = setting(
        5,
        "checkpoints kept of each kind (full state, sampler weights), besides those "
        "asked for and the rollback point; 0 = keep all",
        "backend",
        low=0,
    )
    keep_every_checkpoints: int = setting(
        0, "also keep those whose step is a multiple of N; 0 = none", "backend", low=0
    )
    keep_token_steps: int = setting(
        100,
        "latest steps whose trained tokens the store keeps (the token view); 0 = all",
        "pipeline",
        low=0,
    )
    sampler_clients_to_keep: int = setting(
        4, 'recent policy versions servable as model "NAME@STEP"', "backend", low=1
    )
    backend_timeout: float = setting(
        600.0, "seconds one backend call may take", "backend", low=0, low_open=True
    )
    backend_retries: int = setting(
        3, "retries of a transient backend error (idempotent calls)", "backend", low=0
    )
    backend_unreachable_after: float = setting(
        60.0,
        "seconds without any answer from the service before the run ends with an error",
        "backend",
        low=0,
        low_open=True,
    )
    backend_wait_report: float = setting(
        15.0,
        "seconds a backend call waits before it is shown (again at each doubling)",
        "backend",
        low=0,
        low_open=True,
    )
    # What the run costs (engine.metrics.cost): the user's prices, or on Tinker with none
    # given, the dated list prices shipped with the package (engine.metrics.list_prices).
    price_prefill_per_mtok: float = setting(
        0.0, "USD per million prompt (prefill) tokens sampled, for the cost shown", "backend", low=0
    )
    price_prefill_cached_per_mtok: float = setting(
        -1.0,
        "USD per million cached prefill tokens (a group's shared prompt, the service's "
        "cache hits); -1 = price_prefill_per_mtok's price",
        "backend",
        low=-1,
    )
    price_sample_per_mtok: float = setting(
        0.0, "USD per million sampled tokens, for the cost shown", "backend", low=0
    )
    price_train_per_mtok: float = setting(
        0.0, "USD per million trained tokens, for the cost shown", "backend", low=0
    )
    price_list_date: str = setting(
        "",
        "the date of Tinker's list prices the price_* settings were filled from (set by "
        "the run when no price is given on Tinker); empty = your own prices",
        "backend",
    )
    max_cost_usd: float = setting(
        0.0,
        "stop gracefully before the step that would pass this many USD at the prices "
        "set; 0 = no budget",
        "run",
        low=0,
    )
    # Outside trackers (optional extras tinker-tui[wandb], tinker-tui[tensorboard]); "" = off.
    wandb_project: str = setting("", "log to this W&B project (--wandb PROJECT)", "trackers")
    wandb_entity: str = setting("", 'W&B team or user; "" = your default one', "trackers")
    wandb_run_name: str = setting("", 'W&B display name; "" = the run id', "trackers")
    wandb_run_id: str = setting(
        "", 'W&B run id; "" = the run id (kept, so --resume continues it)', "trackers"
    )
    wandb_samples_every: int = setting(
        10, "a W&B table of the step's rollouts every N steps; 0 = never", "trackers", low=0
    )
    tensorboard_dir: str = setting(
        "", "TensorBoard event files in DIR/<run id> (--tensorboard [DIR])", "trackers"
    )

    def __post_init__(self) -> None:
        self._apply_async_style()
        for name, spec in SETTINGS.items():
            value = spec.check(getattr(self, name))
            if value != getattr(self, name) or type(value) is not type(getattr(self, name)):
                object.__setattr__(self, name, value)
        if self.min_groups_per_step > self.groups_per_step:
            raise ConfigError(
                f"min_groups_per_step must be between 0 and groups_per_step "
                f"({self.groups_per_step}), got {self.min_groups_per_step}"
            )
        if self.lr_warmup_steps and self.lr_warmup_steps >= self.max_steps:
            raise ConfigError(
                f"lr_warmup_steps must be less than max_steps ({self.max_steps}), "
                f"got {self.lr_warmup_steps}"
            )
        if -1 < self.eval_temperature < 0:
            raise ConfigError(
                "eval_temperature must be -1 (the training temperature) or between 0 and 2, "
                f"got {self.eval_temperature:g}"
            )
        parse_loss_fn_config(self.loss_fn_config)
        if self.max_cost_usd and not any(
            max(0.0, price)
            for price in (
                self.price_prefill_per_mtok,
                self.price_prefill_cached_per_mtok,
                self.price_sample_per_mtok,
                self.price_train_per_mtok,
            )
        ):
            raise ConfigError(
                "max_cost_usd needs prices to count against: set "
                "price_prefill_per_mtok, price_prefill_cached_per_mtok, "
                "price_sample_per_mtok and price_train_per_mtok (USD per "
                "million tokens; one left unset counts as free)"
            )
        self._check_trackers()

    def _apply_async_style(self) -> None:
        """Set the preset's values where the setting still has its default (a value you gave
        wins); keys that are not settings of this version are skipped."""
        preset = ASYNC_PRESETS.get(self.async_style, {})
        for name, value in preset.items():
            spec = SETTINGS.get(name)
            if spec is not None and getattr(self, name) == spec.default:
                object.__setattr__(self, name, value)

    def _check_trackers(self) -> None:
        """A tracker whose package is missing stops the run before anything starts."""
        if self.wandb_project or self.tensorboard_dir:
            from tinker_tui.engine import trackers

            for tracker in trackers.wanted(self):
                problem = trackers.missing_package(tracker)
                if problem:
                    raise ConfigError(problem)

    @property
    def min_batch(self) -> int:
        return self.min_groups_per_step or self.groups_per_step

    @property
    def min_members(self) -> int:
        """The fewest rollouts of a group that must succeed for it to train."""
        return min(self.min_group_size, self.group_size)

    def with_overrides(self, overrides: dict[str, Any]) -> RunConfig:
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(unknown)}")
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _settings() -> dict[str, Setting]:
    hints = typing.get_type_hints(RunConfig)
    return {
        f.name: replace(
            f.metadata["setting"], name=f.name, value_type=hints[f.name], default=f.default
        )
        for f in fields(RunConfig)
    }


#: Every run setting by name, in RunConfig's order.
SETTINGS: Mapping[str, Setting] = _settings()
#: The settings a running pipeline accepts through `Control.set_knob`, in the order the
#: control view lists them.
LIVE_KNOBS: tuple[str, ...] = tuple(name for name, spec in SETTINGS.items() if spec.live)


def check_knob(name: str, value: Any) -> float | int:
    """A live knob's new value, checked as the setting is; ConfigError (a ValueError) with a
    message for a name that is not live or a value it does not take."""
    spec = SETTINGS.get(name)
    if spec is None or not spec.live:
        raise ConfigError(
            f"{name!r} cannot be changed live; the live knobs are {', '.join(LIVE_KNOBS)}"
        )
    checked: float | int = spec.check(value)
    return checked


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
            raise ConfigError(
                f"loss_fn_config must be key=number pairs separated by commas, got {item.strip()!r}"
            ) from None
    return config
