"""tinker-cookbook RL environments as tasks: `Task.from_cookbook(dataset_builder)`.

A cookbook recipe's environment is token-level: an `Env` gives an initial observation (prompt
tokens) and a stop condition, takes the sampled tokens back in `step`, and says its reward,
whether the episode is done and the next observation. An `EnvGroupBuilder` makes the envs of
one group and may score them together (`compute_group_rewards`); an `RLDataset` hands out
batches of group builders; an `RLDatasetBuilder` builds the train and test datasets.

Here each group builder of the train dataset is one `Scenario` (in the dataset's own order:
its batches, then the builders of each), each of the test dataset's one eval scenario. A
group is rolled out by the cookbook's own rollout loop (`do_single_rollout`, one per env,
together), sampling through the `TokenSampler` the engine hands a token-level task: the
backend's own sampling client, no HTTP, on either backend. A trajectory's reward is the sum of
its steps' rewards plus its group reward, as in the cookbook; the steps' and the group's
metrics become the trajectory's metrics (`/` in a name becomes `.`), and the steps' `logs`
are shown with the rollout (a `log` message after the transcript).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import numbers
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tinker_tui.engine.errors import UsageError
from tinker_tui.engine.rollouts.token_sampler import TokenSampler
from tinker_tui.engine.rollouts.trajectory import (
    METRIC_NAME,
    SampledTurn,
    Trajectory,
    TrajectoryError,
)

__all__ = ["CookbookError", "CookbookParts", "cookbook_parts"]


class CookbookError(UsageError, ValueError):
    """What was given is not a cookbook dataset (builder); the message says what is expected."""


@dataclass(frozen=True)
class CookbookParts:
    """The pieces of a cookbook task (`Task.from_cookbook` puts them together)."""

    name: str
    scenarios: Callable[[Any], Iterator[Any]]
    group_rollout: Callable[..., Awaitable[list[Trajectory]]]
    eval_scenarios: Callable[[], list[Any]] | None
    settings: dict[str, Any]


def cookbook_parts(dataset: Any, scenario: Callable[[str, Any], Any]) -> CookbookParts:
    """The parts of the task of a cookbook `RLDatasetBuilder` (or an `RLDataset`, with no
    test set); `scenario(id, data)` makes a scenario.

    The builder is called once, here (its datasets are what the run draws from). The run's
    `group_size` defaults to the builder's own `group_size` when it has one."""
    from tinker_cookbook.rl.types import RLDataset

    if isinstance(dataset, RLDataset):
        train, test = dataset, None
    elif callable(dataset) and not isinstance(dataset, type):
        built = _run_apart(dataset)
        if not (isinstance(built, tuple) and len(built) == 2):
            raise CookbookError(
                f"{type(dataset).__name__}() returned {type(built).__name__}; an "
                "RLDatasetBuilder returns (train_dataset, test_dataset_or_None)"
            )
        train, test = built
    else:
        raise CookbookError(
            "Task.from_cookbook takes a tinker_cookbook RLDatasetBuilder or RLDataset, "
            f"got {type(dataset).__name__}"
        )
    for role, data in (("train", train), ("test", test)):
        if data is not None and not isinstance(data, RLDataset):
            raise CookbookError(
                f"the cookbook builder's {role} dataset is a {type(data).__name__}, "
                "expected an RLDataset"
            )
    defaults: dict[str, Any] = {}
    group_size = getattr(dataset, "group_size", None)
    if isinstance(group_size, int) and not isinstance(group_size, bool) and group_size > 0:
        defaults["group_size"] = group_size
    return CookbookParts(
        name=_name_of(dataset),
        scenarios=_TrainScenarios(train, scenario),
        group_rollout=_group_rollout,
        eval_scenarios=None if test is None else _EvalScenarios(test, scenario),
        settings=defaults,
    )


def _run_apart(builder: Any) -> Any:
    """`await builder()` on a loop of its own, in a thread: a task file is imported where an
    event loop may already run."""
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cookbook-dataset") as pool:
        return pool.submit(asyncio.run, _call(builder)).result()


async def _call(builder: Any) -> Any:
    return await builder()


def _name_of(dataset: Any) -> str:
    name = type(dataset).__name__
    for suffix in ("DatasetBuilder", "Builder", "Dataset"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


class _TrainScenarios:
    """scenarios(rng): every group builder of the train dataset, batch by batch (the dataset
    orders and shuffles itself, as in the cookbook's own loop; `rng` is not used)."""

    def __init__(self, dataset: Any, scenario: Callable[[str, Any], Any]) -> None:
        self.dataset, self.scenario = dataset, scenario

    def __call__(self, rng: Any) -> Iterator[Any]:
        return _builders(self.dataset, "", self.scenario)


class _EvalScenarios:
    def __init__(self, dataset: Any, scenario: Callable[[str, Any], Any]) -> None:
        self.dataset, self.scenario = dataset, scenario

    def __call__(self) -> list[Any]:
        return list(_builders(self.dataset, "eval-", self.scenario))


def _builders(dataset: Any, prefix: str, scenario: Callable[[str, Any], Any]) -> Iterator[Any]:
    for index in range(len(dataset)):
        for position, builder in enumerate(dataset.get_batch(index)):
            yield scenario(f"{prefix}{index}.{position}", builder)


# ---------------------------------------------------------------------- rollouts
@dataclass
class _Completer:
    """The cookbook's `TokenCompleter` over the run's `TokenSampler`: each action it returns
    carries the `SampledTurn` it came from (the cookbook keeps the very object in its
    transition), so the trainer gets the exact tokens and the policy version."""

    sampler: TokenSampler

    async def __call__(
        self, model_input: Any, stop: Sequence[Any], *, max_tokens: int | None = None
    ) -> Any:
        turn = await self.sampler.sample(model_input, stop=list(stop), max_tokens=max_tokens)
        return _action(turn)


def _action(turn: SampledTurn) -> Any:
    from tinker_cookbook.completers import TokensWithLogprobs

    action = TokensWithLogprobs(
        tokens=list(turn.tokens),
        maybe_logprobs=list(turn.logprobs),
        stop_reason="length" if turn.finish_reason == "length" else "stop",
    )
    action.sampled_turn = turn  # type: ignore[attr-defined]
    return action


async def _group_rollout(
    client: TokenSampler, model: str, scenario: Any, n: int
) -> list[Trajectory]:
    """n trajectories of one group builder: its envs (made again while it has fewer than n;
    the first n when it has more), rolled out together by the cookbook's own loop, then
    scored by the builder's group reward, each made group on its own."""
    from tinker_cookbook.rl.rollouts import do_single_rollout

    if not isinstance(client, TokenSampler):
        raise TrajectoryError(
            "a cookbook task samples tokens: run it through tinker-tui, which hands its "
            f"rollout a TokenSampler (got {type(client).__name__})"
        )
    builder = scenario.data
    groups: list[list[Any]] = []
    made = 0
    try:
        while made < n:
            envs = list(await builder.make_envs())
            if not envs:
                raise TrajectoryError(f"{type(builder).__name__}.make_envs() returned no envs")
            envs = envs[: n - made]
            groups.append(envs)
            made += len(envs)
        policy = _Completer(client)
        rolled = await asyncio.gather(
            *(do_single_rollout(policy, env) for group in groups for env in group)  # type: ignore[arg-type]
        )
        trajectories: list[Trajectory] = []
        start = 0
        for envs in groups:
            own = list(rolled[start : start + len(envs)])
            start += len(envs)
            scored = await builder.compute_group_rewards(own, envs)
            for cookbook_trajectory, (group_reward, group_metrics) in zip(own, scored, strict=True):
                trajectories.append(
                    _trajectory(cookbook_trajectory, group_reward, group_metrics, client)
                )
        return trajectories
    finally:
        await builder.cleanup()


def _trajectory(
    cookbook: Any, group_reward: float, group_metrics: Mapping[str, Any], sampler: TokenSampler
) -> Trajectory:
    turns: list[SampledTurn] = []
    metrics: dict[str, float] = {}
    logs: list[str] = []
    reward = float(group_reward)
    for transition in cookbook.transitions:
        reward += float(transition.reward)
        turn = getattr(transition.ac, "sampled_turn", None)
        if turn is not None:
            turns.append(turn)
        metrics.update(_metrics(transition.metrics))
        logs.extend(f"{key}: {value}" for key, value in transition.logs.items())
    metrics.update(_metrics(group_metrics))
    if cookbook.stop_reason:
        metrics[_metric_name(f"stop/{cookbook.stop_reason}")] = 1.0
    if not turns:
        raise TrajectoryError(
            "the cookbook env ended its episode before anything was sampled (its initial "
            "observation was over its token budget?); nothing to train on"
        )
    return Trajectory(tuple(turns), reward, metrics, _messages(turns, logs, sampler))


def _metrics(values: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a cookbook metrics dict, named as a trajectory metric may be."""
    out: dict[str, float] = {}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            continue
        number = float(value)
        if math.isfinite(number):
            out[_metric_name(str(key))] = number
    return out


def _metric_name(key: str) -> str:
    name = "".join(c if METRIC_NAME.fullmatch(c) else "." for c in key)
    return name or "metric"


def _messages(
    turns: Sequence[SampledTurn], logs: Sequence[str], sampler: TokenSampler
) -> tuple[dict[str, Any], ...]:
    """What the rollouts view shows: the last turn's prompt and sample, decoded (every
    earlier turn is in that prompt when the env extends its conversation), then the env's
    logs."""
    tokenizer = sampler.tokenizer
    messages: list[dict[str, Any]] = []
    if tokenizer is not None:
        last = turns[-1]
        text = tokenizer.decode(list(last.prompt_tokens) + list(last.tokens))
        messages.append({"role": "transcript", "content": text})
    if logs:
        messages.append({"role": "log", "content": "\n".join(logs)})
    return tuple(messages)
