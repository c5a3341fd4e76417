"""What a rollout produces: the exact sampled tokens of every assistant turn, and a reward.

The trainer never re-tokenizes text. Each completion the in-process server returns carries
its prompt token ids, sampled token ids, their logprobs and the policy version that made
them (extension fields on each choice, see `engine.server`); a rollout hands those back by
passing the choices it got to `Trajectory.from_choices`; or it returns only its score (a
number, or a `Reward` with metrics), and the turns are those the server filed under the
rollout's own address (`engine.server.capture`): its client's `base_url` ends in the
trajectory's key, so a subprocess or an agent library given that address is trained on the
exact tokens sampled for it.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tinker_tui.engine.errors import TinkerTuiError
from tinker_tui.engine.metrics.health import rewards_equal

#: What a trajectory metric may be called: it becomes part of a step metric key
#: (`task/<name>`), so no slashes or spaces.
METRIC_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class TrajectoryError(TinkerTuiError, ValueError):
    """A rollout returned something the trainer cannot use; the message says what."""


@dataclass(frozen=True, slots=True)
class ProvenanceRun:
    """Consecutive tokens of a training sequence and where they came from: positions
    [offset, offset + length) of a sampled sequence's tokens ("sampled") or of the prompt of
    the request that sampled it ("prompt"), as Tinker's provenance spans name them."""

    kind: str
    sequence_id: str
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class SampledTurn:
    """One assistant completion exactly as sampled."""

    prompt_tokens: tuple[int, ...]
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    policy_version: int
    #: Why the sampler ended it: "stop", "tool_calls", or "length" (the `max_tokens` limit
    #: cut it off); "" when not known.
    finish_reason: str = ""
    #: The sampler's id of the sequence `tokens` starts (Tinker's `sequence_id`; session-
    #: scoped, so not stored, and not part of what the turn is: two samplings of the same
    #: tokens are equal turns); "" when not known.
    sequence_id: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.logprobs):
            raise TrajectoryError(
                f"a sampled turn has {len(self.tokens)} tokens but {len(self.logprobs)} logprobs"
            )

    @classmethod
    def from_choice(cls, choice: Any) -> SampledTurn:
        """Read the extension fields the in-process server adds to every choice."""
        if isinstance(choice, dict):
            data, finish = choice, choice.get("finish_reason")
        else:  # a standard field of the choice, not an extension
            data, finish = _extra_fields(choice), getattr(choice, "finish_reason", None)
        try:  # positional: built once per turn of every rollout
            return cls(
                tuple(map(int, data["prompt_token_ids"])),
                tuple(map(int, data["token_ids"])),
                tuple(map(float, data["token_logprobs"])),
                int(data["policy_version"]),
                finish if isinstance(finish, str) else "",
                str(data.get("sequence_id") or ""),
            )
        except (KeyError, TypeError) as exc:
            raise TrajectoryError(
                "a choice without sampled tokens: pass the choices returned by this run's "
                f"server (missing {exc})"
            ) from None


def _extra_fields(choice: Any) -> dict[str, Any]:
    extra = getattr(choice, "model_extra", None)
    if extra:
        return dict(extra)
    return {
        name: getattr(choice, name, None)
        for name in ("prompt_token_ids", "token_ids", "token_logprobs", "policy_version")
    }


def check_metrics(metrics: Mapping[str, Any]) -> dict[str, float | bool]:
    """A trajectory's metrics, checked: names like `correct` or `tool_calls` (letters,
    digits, `_`, `-`, `.`), values finite numbers or booleans. A boolean stays a boolean: the
    step reports its mean (a rate) only, a number its mean, min and max."""
    if not isinstance(metrics, Mapping):
        raise TrajectoryError(
            f"metrics must be a dict of name -> number, got {type(metrics).__name__}"
        )
    checked: dict[str, float | bool] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not METRIC_NAME.fullmatch(name):
            raise TrajectoryError(
                f"metric name {name!r} must be letters, digits, '_', '-' or "
                "'.' (it becomes part of the step metric task/<name>)"
            )
        if isinstance(value, bool):
            checked[name] = value
            continue
        if not isinstance(value, numbers.Real):
            raise TrajectoryError(
                f"metric {name!r} must be a number or a bool, got {type(value).__name__}"
            )
        number = float(value)
        if not math.isfinite(number):
            raise TrajectoryError(f"metric {name!r} must be a finite number, got {value!r}")
        checked[name] = number
    return checked


@dataclass(frozen=True, slots=True)
class Trajectory:
    """A scored episode: every assistant turn sampled during it, its reward, and any metrics
    the rollout reported (`Trajectory.from_choices(..., correct=True, tool_calls=2)`): stored
    with it, shown with it, and averaged per step as `task/<name>`."""

    turns: tuple[SampledTurn, ...]
    reward: float
    metrics: dict[str, float | bool] = field(default_factory=dict)
    #: Optional: the conversation as the rollout saw it (role/content dicts), for display.
    messages: tuple[dict[str, Any], ...] = ()
    #: The oldest policy that contributed a token: what staleness is measured from.
    policy_version: int = field(init=False, repr=False, compare=False)
    #: Sampled tokens, every turn together.
    num_tokens: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        reward, turns, metrics = self.reward, self.turns, self.metrics
        if type(reward) is not float and (
            isinstance(reward, bool) or not isinstance(reward, (int, float))
        ):
            raise TrajectoryError(f"reward must be a number, got {type(reward).__name__}")
        if not math.isfinite(reward):
            raise TrajectoryError(f"reward must be a finite number, got {reward!r}")
        if not turns:
            raise TrajectoryError("a trajectory needs at least one sampled assistant turn")
        # Read many times per group (staleness, accounting, events, the store); a
        # trajectory never changes, so they are computed once here. Built once per rollout,
        # tens of thousands of times a minute: the one-turn case goes without generators.
        if len(turns) == 1:
            version, tokens = turns[0].policy_version, len(turns[0].tokens)
        else:
            version = min(t.policy_version for t in turns)
            tokens = sum(len(t.tokens) for t in turns)
        object.__setattr__(self, "policy_version", version)
        object.__setattr__(self, "num_tokens", tokens)
        object.__setattr__(
            self, "metrics", {} if type(metrics) is dict and not metrics else check_metrics(metrics)
        )

    @classmethod
    def from_choices(
        cls,
        choices: Iterable[Any],
        reward: float,
        *,
        messages: Iterable[dict[str, Any]] = (),
        **metrics: float | bool,
    ) -> Trajectory:
        # `metrics` is this call's own dict; __post_init__ keeps a checked copy of it.
        from_choice = SampledTurn.from_choice
        return cls(
            tuple([from_choice(c) for c in choices]),
            reward,
            metrics,
            messages if type(messages) is tuple else tuple(messages),
        )


class Reward:
    """What a rollout may return instead of a `Trajectory` when the server captured its
    turns: `Reward(1.0, correct=True)` (a plain number is `Reward(number)`). The trajectory
    is every reply sampled under the rollout's client address, in the order they were made,
    with this reward and these metrics."""

    __slots__ = ("messages", "metrics", "value")

    def __init__(
        self, value: float, *, messages: Iterable[dict[str, Any]] = (), **metrics: float | bool
    ) -> None:
        self.value = value
        self.messages = tuple(messages)
        self.metrics = metrics

    def __repr__(self) -> str:
        return f"Reward({self.value!r}, {self.metrics!r})"

    def trajectory(self, choices: Sequence[Any]) -> Trajectory:
        """The trajectory of the replies captured for a rollout that returned this."""
        if not choices:
            raise TrajectoryError(
                "the rollout returned a reward, but nothing was sampled under its client's "
                "address: use the client it is given (or its base_url and api_key), or "
                "return Trajectory.from_choices(...)"
            )
        return Trajectory.from_choices(choices, self.value, messages=self.messages, **self.metrics)

    @classmethod
    def of(cls, result: Any) -> Reward | None:
        """`result` as a Reward if it is one (or a plain number), else None."""
        if isinstance(result, Reward):
            return result
        if isinstance(result, numbers.Real) and not isinstance(result, bool):
            return cls(float(result))
        return None


@dataclass(frozen=True, slots=True)
class TrajectoryGroup:
    """Several rollouts of one scenario; advantages are relative to the group."""

    group_id: int
    scenario_id: str
    trajectories: tuple[Trajectory, ...]
    started_at: float
    finished_at: float
    #: The oldest policy any member was sampled with (the group's staleness is measured
    #: from it); computed once, as the trajectories' own.
    policy_version: int = field(init=False, repr=False, compare=False)
    num_tokens: int = field(init=False, repr=False, compare=False)
    #: The members' rewards, in order; their mean; whether they differ (a gradient). Read
    #: several times per group (pacing, health, events, the batch): computed once.
    rewards: tuple[float, ...] = field(init=False, repr=False, compare=False)
    reward_mean: float = field(init=False, repr=False, compare=False)
    _variance: bool = field(init=False, repr=False, compare=False)
    #: The members' advantages by the run's rule (`engine.training.advantages`), computed when the
    #: group was sampled; None: reward minus the group's mean.
    advantage_values: tuple[float, ...] | None = None
    #: The part of a mixed task the group's scenario came from ("" for a single task).
    part: str = ""
    #: Members whose rollout failed and were dropped (the group trains with the rest).
    failed: int = 0
    #: Members cut off by the length limit whose reward `truncation_policy = cap` lowered.
    capped: int = 0

    def __post_init__(self) -> None:
        trajectories = self.trajectories
        if not trajectories:
            raise TrajectoryError("a group needs at least one trajectory")
        rewards = tuple([t.reward for t in trajectories])
        object.__setattr__(self, "policy_version", min([t.policy_version for t in trajectories]))
        object.__setattr__(self, "num_tokens", sum([t.num_tokens for t in trajectories]))
        object.__setattr__(self, "rewards", rewards)
        object.__setattr__(self, "reward_mean", sum(rewards) / len(rewards))
        object.__setattr__(self, "_variance", not rewards_equal(rewards))
        if self.advantage_values is not None and len(self.advantage_values) != len(
            self.trajectories
        ):
            raise TrajectoryError(
                f"{len(self.advantage_values)} advantages for {len(self.trajectories)} trajectories"
            )

    def advantages(self) -> list[float]:
        """Each member's advantage: as computed by the run's rule when the group was
        sampled, else reward minus the group's mean reward."""
        if self.advantage_values is not None:
            return list(self.advantage_values)
        mean = self.reward_mean
        return [r - mean for r in self.rewards]

    def has_variance(self) -> bool:
        return self._variance


@dataclass(frozen=True, slots=True)
class SequenceArrays:
    """The training examples of one trajectory, and how its turns were joined."""

    #: One dict of per-token arrays (model_input, target_tokens, logprobs, advantages, mask,
    #: versions)
    #: per training example (Tinker's convention: model_input is the sequence minus its last
    #: token, every per-token array has its length, context positions get advantage 0 and
    #: logprob 0, so only sampled tokens are trained).
    examples: list[dict[str, Sequence[Any]]]
    #: Turns (with at least one sampled token) that went into the examples.
    turns: int
    #: Turns whose prompt did not extend the sequence sampled so far (so they start a new
    #: example): a re-rendered conversation that differs from the sampled tokens, or a rollout
    #: that starts a separate conversation.
    prefix_mismatches: int


def trajectory_to_datum_arrays(turns: Sequence[SampledTurn], advantage: float) -> SequenceArrays:
    """Every assistant turn of a trajectory, trained on its exact sampled tokens.

    A turn whose prompt starts with everything sampled so far (the previous prompts and
    completions, token for token) extends the same training example: the tokens between
    (tool results, the next user message, role headers) become untrained context and the new
    completion is trained. That is one forward pass per conversation instead of one per turn,
    with the prompt computed once. A turn whose prompt does not extend it (the conversation
    was re-rendered into different tokens, or edited) starts a new example and is counted in
    `prefix_mismatches`; nothing sampled is ever re-tokenized or dropped.
    """
    examples: list[dict[str, Sequence[Any]]] = []
    mismatches = 0
    used = 0
    full: list[int] = []
    logprobs: list[float] = []  # logprobs[i]: sampled logprob of full[i] (0 for context)
    trained: list[bool] = []  # trained[i]: full[i] was sampled
    versions: list[int] = []  # versions[i]: the policy that sampled full[i] (-1: context)
    runs: list[ProvenanceRun] = []  # runs tiling full, naming the sequence behind each token
    for turn in turns:
        if not turn.tokens:
            continue
        used += 1
        prompt = turn.prompt_tokens
        extends = bool(full) and len(prompt) >= len(full) and list(prompt[: len(full)]) == full
        if full and not extends:
            mismatches += 1
            examples.extend(_example(full, logprobs, trained, versions, advantage, runs))
            full, logprobs, trained, versions, runs = [], [], [], [], []
        context = prompt[len(full) :]
        if context:
            runs.append(ProvenanceRun("prompt", turn.sequence_id, len(full), len(context)))
        runs.append(ProvenanceRun("sampled", turn.sequence_id, 0, len(turn.tokens)))
        full.extend(context)
        logprobs.extend([0.0] * len(context))
        trained.extend([False] * len(context))
        versions.extend([-1] * len(context))
        full.extend(turn.tokens)
        logprobs.extend(turn.logprobs)
        trained.extend([True] * len(turn.tokens))
        versions.extend([turn.policy_version] * len(turn.tokens))
    examples.extend(_example(full, logprobs, trained, versions, advantage, runs))
    return SequenceArrays(examples=examples, turns=used, prefix_mismatches=mismatches)


def _example(
    full: list[int],
    logprobs: list[float],
    trained: list[bool],
    versions: list[int],
    advantage: float,
    runs: Sequence[ProvenanceRun] = (),
) -> list[dict[str, Sequence[Any]]]:
    if len(full) < 2:
        return []  # nothing to predict from: a completion needs at least one token before it
    return [
        {
            "model_input": full[:-1],
            "target_tokens": full[1:],
            "logprobs": logprobs[1:],
            "advantages": [advantage if t else 0.0 for t in trained[1:]],
            # 1.0 where the target was sampled (trained), 0.0 for context: not sent to the
            # backend (a loss takes no extra keys), used for the KL penalty.
            "mask": [1.0 if t else 0.0 for t in trained[1:]],
            # The policy version that sampled each target (-1 for context): for the token view.
            "versions": versions[1:],
            # Runs tiling `full` (model_input is it minus the last token, target_tokens minus
            # the first); empty when a turn's sequence id is not known.
            "provenance": list(runs) if all(r.sequence_id for r in runs) else [],
        }
    ]
