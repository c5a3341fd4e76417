"""The task API: what a user writes to train their own agent.

A task is one Python file that builds a module-level ``TASK = Task(...)``:

* ``scenarios(rng)`` yields training `Scenario`s (it may be endless); ``rng`` is the run's
  seeded `random.Random`, so a run replays the same scenarios from the same seed;
* ``rollout(client, model, scenario)``: an ``async def`` that talks to the policy through
  ``client`` (an ``openai.AsyncOpenAI`` pointed at the run's own server; pass
  ``model=model``) and returns a scored `Trajectory`, or only its reward (a number or a
  `Reward`): the server captured every reply made through ``client`` (or its ``base_url``,
  handed to a subprocess); the engine runs it ``group_size`` times
  per scenario and trains on the group-relative advantages;
* or, instead of ``rollout``, ``group_rollout(client, model, scenario, n)``: an ``async def``
  that returns ``n`` trajectories for one scenario at once (for rewards that compare the
  members of a group, or to sample all ``n`` answers in one request with ``n=n``), or ``n``
  rewards, member i trained on what was sampled through ``member_clients(client)[i]``;
* optionally ``eval_scenarios()`` (a finite held-out set, each rolled out once per
  evaluation), ``warmup`` (supervised format conversations, trained before RL when
  ``warmup_steps`` > 0), ``settings`` (defaults for run settings, e.g. ``max_steps``),
  ``backend_settings`` (defaults for one backend, over ``settings``) and
  ``advantages(rewards)`` (a group's advantages, instead of the run's `advantage` rule).

An environment written for another framework is a task in one line:
`Task.from_cookbook(dataset_builder)` (a tinker-cookbook RL environment, rolled out on tokens
sampled straight from the backend: `samples_tokens`) and `Task.from_verifiers(env)` (a
verifiers environment, its episodes played against the policy server).

`mix_tasks(name, [(task, weight), ...])` makes one task of several: each scenario comes from
one of them, drawn by weight, and is rolled out (and reported) as that task's.

Everything a task file needs is importable from here::

    from tinker_tui import Scenario, Task, Trajectory
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
import random
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.engine.did_you_mean import did_you_mean
from tinker_tui.engine.errors import UsageError
from tinker_tui.engine.rollouts.capture_keys import CaptureKeys
from tinker_tui.engine.rollouts.trajectory import (
    METRIC_NAME,
    Reward,
    Trajectory,
    TrajectoryError,
)

if TYPE_CHECKING:
    from tinker_tui.engine.sampling_defaults import SamplingDefaults

__all__ = [
    "GroupRollout",
    "Message",
    "PartScenario",
    "Rollout",
    "Scenario",
    "Task",
    "TaskError",
    "TaskPart",
    "Trajectory",
    "TrajectoryError",
    "captured_rollout",
    "check_task",
    "group_rollout_of",
    "member_clients",
    "mix_tasks",
    "part_of",
    "reward_components_of",
]

Message = dict[str, Any]
#: The backends `Task.backend_settings` may name.
BACKENDS = ("local", "tinker")


class TaskError(UsageError, ValueError):
    """A task is missing a piece or has one of the wrong shape; the message says what."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """One thing to roll out: an id (for the log and the store) and the task's own data."""

    id: str
    data: Any


@dataclass(frozen=True, slots=True)
class PartScenario(Scenario):
    """A scenario of a mixed task (`mix_tasks`): `data` is the part's own `Scenario`, `part`
    the name of the task it belongs to; its id is "<part>/<the part's id>"."""

    part: str = ""


#: rollout(client, model, scenario) -> Trajectory (or a reward: a number or a `Reward`, the
#: turns captured by the server); `client` is an `openai.AsyncOpenAI`.
Rollout = Callable[[Any, str, Scenario], Awaitable["Trajectory | Reward | float"]]
#: group_rollout(client, model, scenario, n) -> n Trajectories (or n rewards) for one scenario.
GroupRollout = Callable[
    [Any, str, Scenario, int], Awaitable[Sequence["Trajectory | Reward | float"]]
]


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    #: Given the run's seeded random generator, yields training scenarios (may be endless; a finite stream ends the run once trained).
    scenarios: Callable[[random.Random], Iterator[Scenario]]
    #: async rollout(client, model, scenario) -> Trajectory. Give this or `group_rollout`.
    rollout: Rollout | None = None
    #: Optional held-out scenarios for the evaluator (a finite collection, run once each).
    eval_scenarios: Callable[[], Iterable[Scenario]] | None = None
    #: Optional supervised format examples (whole conversations, last assistant turn
    #: trained) run before RL when `warmup_steps` > 0.
    warmup: Sequence[Sequence[Message]] = ()
    #: Defaults for `RunConfig` fields that suit this task.
    settings: Mapping[str, Any] = field(default_factory=dict)
    #: async group_rollout(client, model, scenario, n) -> n Trajectories, instead of `rollout`.
    group_rollout: GroupRollout | None = None
    #: Defaults for one backend only, over `settings`: {"local": {...}, "tinker": {...}}
    #: (a learning rate or warm-up that suits the tiny embedded model rarely suits Qwen3).
    backend_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: Optional advantages(rewards) -> one finite number per member: a group's advantages,
    #: instead of the run's `advantage` rule.
    advantages: Callable[[list[float]], Sequence[float]] | None = None
    #: The tasks a mixed task draws from, with their weights (set by `mix_tasks`).
    parts: tuple[TaskPart, ...] = ()
    #: Names of `Trajectory.metrics` keys that are parts of the reward (format, correctness,
    #: a length penalty): each is charted per step as `reward/component/<name>`, and the
    #: signals view flags one whose spread drives the advantages alone.
    reward_components: tuple[str, ...] = ()
    #: The rollout speaks tokens, not chat: its `client` is a `TokenSampler` (prompt tokens
    #: in, sampled tokens out, straight from the backend) instead of the openai client. Set
    #: by `Task.from_cookbook`; a hand-written token-level rollout may set it too.
    samples_tokens: bool = False

    @classmethod
    def from_cookbook(
        cls, dataset: Any, *, name: str | None = None, settings: Mapping[str, Any] | None = None
    ) -> Task:
        """A task that drives a tinker-cookbook RL environment unchanged: `dataset` is an
        `RLDatasetBuilder` (or an `RLDataset`); each group builder is a scenario, rolled out
        by the cookbook's own loop on tokens sampled straight from the backend. `settings`
        go over the builder's own `group_size`. See `engine.rollouts.cookbook_envs`."""
        from tinker_tui.engine.rollouts import cookbook_envs

        try:
            parts = cookbook_envs.cookbook_parts(dataset, Scenario)
        except cookbook_envs.CookbookError as exc:
            raise TaskError(str(exc)) from None
        return cls(
            name=name or parts.name,
            scenarios=parts.scenarios,
            group_rollout=parts.group_rollout,
            eval_scenarios=parts.eval_scenarios,
            settings={**parts.settings, **dict(settings or {})},
            samples_tokens=True,
        )

    @classmethod
    def from_verifiers(
        cls,
        env: Any,
        *,
        name: str | None = None,
        eval_tasks: Iterable[Any] | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> Task:
        """A task that runs a `verifiers` environment unchanged: `env` is a
        `verifiers.v1.Env`, or the id of an installed one. Each task of its taskset is a
        scenario, played by the env's own harness with its model calls answered by the
        policy; the reward is its rubric's (`@vf.reward` methods), each one a named reward
        component. `eval_tasks`: held-out verifiers tasks (a taskset view or a list). See
        `engine.rollouts.verifiers_envs`; needs ``pip install "tinker-tui[verifiers]"``."""
        from tinker_tui.engine.rollouts import verifiers_envs

        try:
            parts = verifiers_envs.verifiers_parts(env, Scenario, eval_tasks=eval_tasks)
        except verifiers_envs.VerifiersError as exc:
            raise TaskError(str(exc)) from None
        return cls(
            name=name or parts.name,
            scenarios=parts.scenarios,
            rollout=parts.rollout,
            eval_scenarios=parts.eval_scenarios,
            settings=dict(settings or {}),
            reward_components=parts.reward_components,
        )

    def __post_init__(self) -> None:
        if self.group_rollout is not None and not isinstance(self.rollout, _GroupJoin):
            if self.rollout is not None:
                raise TaskError(
                    f"task {self.name!r} gives both rollout and group_rollout; give one of them"
                )
            # The engine calls `rollout` once per group member; the members of one group
            # share one group_rollout call.
            object.__setattr__(self, "rollout", _GroupJoin(self.group_rollout))


@dataclass(frozen=True, slots=True)
class TaskPart:
    """One task of a mixed task, and the share of its scenarios (weight / total weight)."""

    task: Task
    weight: float


class _GroupJoin:
    """Adapts a group rollout to per-member calls.

    The engine starts the `group_size` rollouts of a group together (tasks started at once,
    all on the same `Scenario` object). The first call for a scenario object yields to the
    event loop once, so every member started with it has joined, then runs
    ``group_rollout(client, model, scenario, n)`` with n = the members that joined, and each
    member returns its own result. Each member comes with its own client (its own capture
    key), handed to the group rollout by `member_clients`. An evaluation rollout is a group
    of one.
    """

    def __init__(self, group_rollout: GroupRollout) -> None:
        self.group_rollout = group_rollout
        self._joining: dict[int, _Members] = {}

    async def __call__(
        self, client: Any, model: str, scenario: Scenario
    ) -> Trajectory | Reward | float:
        key = id(scenario)
        members = self._joining.get(key)
        if members is not None:
            index = len(members.clients)
            members.clients.append(client)
            return (await asyncio.shield(members.result))[index]
        members = _Members(asyncio.get_running_loop().create_future(), [client])
        self._joining[key] = members
        try:
            try:
                await asyncio.sleep(0)  # the rest of the group joins here
            finally:
                del self._joining[key]
            n = len(members.clients)
            joined = _MEMBER_CLIENTS.set(tuple(members.clients))
            try:
                results = list(await self.group_rollout(client, model, scenario, n))
            finally:
                _MEMBER_CLIENTS.reset(joined)
            where = _defined_at(self.group_rollout)
            if len(results) != n:
                raise TrajectoryError(
                    f"group_rollout{where} returned {len(results)} results for n={n}; return "
                    "exactly n (trajectories or rewards), one per member"
                )
            for r in results:
                if not isinstance(r, Trajectory) and Reward.of(r) is None:
                    raise TrajectoryError(
                        f"group_rollout{where} returned a {type(r).__name__} in its list, "
                        "expected Trajectory objects or rewards (numbers or Reward)"
                    )
        except BaseException as exc:
            if not members.result.done():
                if isinstance(exc, asyncio.CancelledError):
                    # The call was cancelled (its timeout, or a stop): the members waiting
                    # on it fail with an error, not a cancellation of their own.
                    exc = TrajectoryError(
                        "the group_rollout call was cancelled (timed out, or the run is stopping)"
                    )
                members.result.set_exception(exc)
                members.result.exception()  # marked as read: members may be gone
            raise
        members.result.set_result(results)
        return results[0]


@dataclass
class _Members:
    result: asyncio.Future[list[Trajectory | Reward | float]]
    #: Each member's client, in the order they joined (the first calls group_rollout).
    clients: list[Any]


#: The clients of the members of the group rollout running in this context.
_MEMBER_CLIENTS: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar(
    "member_clients", default=()
)


def member_clients(client: Any) -> list[Any]:
    """Inside ``group_rollout(client, model, scenario, n)``: the n members' clients, in order,
    the first being `client`. What is sampled through the i-th (or its `base_url` and
    `api_key`, handed to a subprocess) is filed under member i, so the group rollout may
    return n rewards and each member is trained on its own turns."""
    clients = _MEMBER_CLIENTS.get()
    if not clients or clients[0] is not client:
        raise TaskError(
            "member_clients(client) takes the client a group_rollout was given, called "
            "while that group_rollout runs"
        )
    return list(clients)


async def captured_rollout(
    task: Task,
    client: Any,
    model: str,
    scenario: Scenario,
    captures: Any,
    defaults: SamplingDefaults | None = None,
) -> Trajectory:
    """One rollout of `task` as a Trajectory. With `captures` (the policy server's
    `Captures`), it gets a client under a capture key of its own, so it may return only a
    reward, trained on what was sampled under that key; the key carries `defaults` (an
    evaluation's sampling defaults) to every request made under it. A rollout function that
    carries `capture_keys` (a verifiers environment's) reuses its keys (`capture_keys`)."""
    assert task.rollout is not None  # check_task: a rollout, or a group_rollout
    if captures is None:
        result = await task.rollout(client, model, scenario)
        captured: list[Any] = []
    else:
        keys = getattr(part_of(task, scenario)[1].rollout, "capture_keys", None)
        reused = keys if isinstance(keys, CaptureKeys) else None
        key = captures.open(reused.take() if reused else None, defaults=defaults)
        returned = False
        try:
            result = await task.rollout(captures.client_for(client, key), model, scenario)
            returned = True
        finally:
            captured = captures.close(key)
            if reused is not None:
                # a rollout that did not return may have requests still on their way
                (reused.put_back if returned else reused.retire)(key)
    if isinstance(result, Trajectory):
        return result
    reward = Reward.of(result)
    if reward is None or captures is None:
        raise TrajectoryError(
            f"the rollout of task {task.name!r} returned {type(result).__name__}, expected a "
            "Trajectory" + (" or a reward (a number or a Reward)" if captures is not None else "")
        )
    if not captured and group_rollout_of(part_of(task, scenario)[1]) is not None:
        raise TrajectoryError(
            "the group_rollout returned a reward for a member whose client sampled nothing: "
            "sample member i's turns through member_clients(client)[i]"
        )
    return reward.trajectory(captured)


# ---------------------------------------------------------------------- mixing tasks
def mix_tasks(
    name: str,
    parts: Iterable[tuple[Task, float]],
    *,
    settings: Mapping[str, Any] | None = None,
    backend_settings: Mapping[str, Mapping[str, Any]] | None = None,
) -> Task:
    """One task made of several, for one run: each scenario is drawn from one of `parts`
    ((task, weight) pairs; a task's share of the scenarios is its weight over the total), rolled
    out by that task's own rollout (or group_rollout) and advantages hook, and reported
    under its name (`reward/<name>/mean`, `task/<name>/<metric>`, `eval/<name>/reward_mean`).

    The mix's evaluation is every part's eval scenarios; its warm-up, every part's warm-up
    conversations. Run settings come from `settings` / `backend_settings` here: the parts'
    own settings do not apply (one run has one learning rate)."""
    if isinstance(parts, Mapping | str | bytes) or not isinstance(parts, Iterable):
        raise TaskError(
            f"mix_tasks({name!r}) takes a list of (task, weight) pairs, got {_kind(parts)}"
        )
    task_parts = []
    for item in parts:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise TaskError(
                f"mix_tasks({name!r}) takes a list of (task, weight) pairs; got {_kind(item)} in it"
            )
        part_task, weight = item
        task_parts.append(TaskPart(part_task, weight))
    parts_tuple = tuple(task_parts)
    _check_parts(name, parts_tuple)
    has_evals = any(p.task.eval_scenarios is not None for p in parts_tuple)
    return Task(
        name=name,
        scenarios=_MixedScenarios(parts_tuple),
        rollout=_MixedRollout(parts_tuple),
        eval_scenarios=_MixedEvals(parts_tuple) if has_evals else None,
        warmup=tuple(c for p in parts_tuple for c in p.task.warmup),
        settings=dict(settings or {}),
        backend_settings=dict(backend_settings or {}),
        parts=parts_tuple,
    )


def _check_parts(name: str, parts: tuple[TaskPart, ...]) -> None:
    if not parts:
        raise TaskError(f"mix_tasks({name!r}) needs at least one task")
    seen: set[str] = set()
    for part in parts:
        if not isinstance(part.task, Task):
            raise TaskError(f"mix_tasks({name!r}): expected Task objects, got {_kind(part.task)}")
        if part.task.parts:
            raise TaskError(
                f"mix_tasks({name!r}): {part.task.name!r} is itself a mix; list its tasks instead"
            )
        part_name = part.task.name
        if (
            not isinstance(part_name, str)
            or not part_name
            or "/" in part_name
            or part_name != part_name.strip()
        ):
            raise TaskError(
                f"mix_tasks({name!r}): task name {part_name!r} cannot name a "
                "part (it is used in metric keys: no '/', no surrounding spaces)"
            )
        if part_name in seen:
            raise TaskError(
                f"mix_tasks({name!r}): two tasks are named {part_name!r}; each "
                "part is reported under its name, so names must differ"
            )
        seen.add(part_name)
        weight = part.weight
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight <= 0
        ):
            raise TaskError(
                f"mix_tasks({name!r}): the weight of {part_name!r} must be a "
                f"positive number, got {weight!r}"
            )


class _MixedScenarios:
    """scenarios(rng) of a mixed task: each part draws from a generator of its own, seeded
    from `rng` (so a part's scenarios do not depend on the weights), and `rng` picks the
    part of each scenario by weight. A part whose scenarios end drops out of the draw."""

    def __init__(self, parts: tuple[TaskPart, ...]) -> None:
        self.parts = parts

    def __call__(self, rng: random.Random) -> Iterator[Scenario]:
        streams = {
            p.task.name: iter(p.task.scenarios(random.Random(rng.getrandbits(64))))
            for p in self.parts
        }
        weights = {p.task.name: float(p.weight) for p in self.parts}
        while weights:
            names = list(weights)
            part = rng.choices(names, [weights[n] for n in names])[0]
            try:
                inner = next(streams[part])
            except StopIteration:
                del weights[part]
                continue
            yield PartScenario(id=f"{part}/{inner.id}", data=inner, part=part)


class _MixedEvals:
    """eval_scenarios() of a mixed task: every part's, in the parts' order."""

    def __init__(self, parts: tuple[TaskPart, ...]) -> None:
        self.parts = parts

    def __call__(self) -> list[Scenario]:
        return [
            PartScenario(id=f"{p.task.name}/{inner.id}", data=inner, part=p.task.name)
            for p in self.parts
            if p.task.eval_scenarios is not None
            for inner in p.task.eval_scenarios()
        ]


class _MixedRollout:
    """rollout(client, model, scenario) of a mixed task: the scenario's part rolls out its
    own scenario (a group rollout part: the group's members still share one call)."""

    def __init__(self, parts: tuple[TaskPart, ...]) -> None:
        self.by_name = {p.task.name: p.task for p in parts}

    async def __call__(
        self, client: Any, model: str, scenario: Scenario
    ) -> Trajectory | Reward | float:
        part = self.by_name.get(scenario.part) if isinstance(scenario, PartScenario) else None
        if part is None or part.rollout is None:
            raise TaskError(f"scenario {scenario.id!r} is not one of this mix's scenarios")
        return await part.rollout(client, model, scenario.data)


def part_of(task: Task, scenario: Scenario) -> tuple[str, Task]:
    """The part of a mixed task that `scenario` belongs to, as (its name, its task);
    ("", task) for a task that is not a mix."""
    if task.parts and isinstance(scenario, PartScenario):
        for part in task.parts:
            if part.task.name == scenario.part:
                return part.task.name, part.task
    return "", task


def group_rollout_of(task: Task) -> GroupRollout | None:
    """The task's rollout form: its `group_rollout` when it rolls out a whole group per call
    (the engine still calls `task.rollout` once per member), None when it gives `rollout`."""
    if isinstance(task.rollout, _GroupJoin):
        return task.rollout.group_rollout
    return None


# ---------------------------------------------------------------------- checks
def check_task(task: Any, *, known_settings: Iterable[str] | None = None) -> Task:
    """Check a task's pieces before the engine starts; raises `TaskError` saying what is
    expected. `known_settings`: the run settings `task.settings` may name."""
    if not isinstance(task, Task):
        raise TaskError(f"expected a Task (from tinker_tui import Task), got {_kind(task)}")
    if not isinstance(task.name, str) or not task.name.strip():
        raise TaskError(f"Task.name must be a non-empty string, got {task.name!r}")
    _check_callable("scenarios", task.scenarios, ("rng",), asynchronous=False)
    group_rollout = group_rollout_of(task)
    if group_rollout is not None:
        _check_callable(
            "group_rollout", group_rollout, ("client", "model", "scenario", "n"), asynchronous=True
        )
    elif task.rollout is None:
        raise TaskError(
            "the task has no rollout: give rollout=async def rollout(client, "
            "model, scenario) -> Trajectory (or group_rollout=...)"
        )
    else:
        _check_callable("rollout", task.rollout, ("client", "model", "scenario"), asynchronous=True)
    if task.eval_scenarios is not None:
        _check_callable("eval_scenarios", task.eval_scenarios, (), asynchronous=False)
    _check_warmup(task.warmup)
    if task.advantages is not None:
        _check_callable("advantages", task.advantages, ("rewards",), asynchronous=False)
    _check_components(task.reward_components)
    if task.parts:
        _check_parts(task.name, tuple(task.parts))
        for part in task.parts:
            try:
                check_task(part.task)
            except TaskError as exc:
                raise TaskError(
                    f"in the mix {task.name!r}, task {part.task.name!r}: {exc}"
                ) from None
    if not isinstance(task.samples_tokens, bool):
        raise TaskError(f"Task.samples_tokens must be True or False, got {task.samples_tokens!r}")
    if not isinstance(task.settings, Mapping):
        raise TaskError(f"Task.settings must be a dict of run settings, got {_kind(task.settings)}")
    if not isinstance(task.backend_settings, Mapping):
        raise TaskError(
            "Task.backend_settings must be a dict like {'local': {...}, "
            f"'tinker': {{...}}}}, got {_kind(task.backend_settings)}"
        )
    layers = [("Task.settings", task.settings)]
    for backend, settings in task.backend_settings.items():
        if backend not in BACKENDS:
            raise TaskError(
                f"Task.backend_settings has an unknown backend {backend!r}; "
                f"expected {' or '.join(map(repr, BACKENDS))}"
            )
        if not isinstance(settings, Mapping):
            raise TaskError(
                f"Task.backend_settings[{backend!r}] must be a dict of run "
                f"settings, got {_kind(settings)}"
            )
        layers.append((f"Task.backend_settings[{backend!r}]", settings))
    if known_settings is not None:
        known = set(known_settings)
        for where, settings in layers:
            for key in settings:
                if key not in known:
                    raise TaskError(
                        f"{where} has an unknown setting {key!r}"
                        + did_you_mean(key, known, else_list="known settings")
                    )
    return task


def _check_components(names: Any) -> None:
    if isinstance(names, str) or not isinstance(names, Sequence | Set):
        raise TaskError(
            "Task.reward_components must be a tuple of metric names, like "
            f"('format', 'correct'), got {_kind(names)}"
        )
    for name in names:
        if not isinstance(name, str) or not METRIC_NAME.fullmatch(name):
            raise TaskError(
                f"Task.reward_components: {name!r} is not a metric name "
                "(letters, digits, '_', '-' or '.')"
            )


def reward_components_of(task: Task) -> tuple[str, ...]:
    """The reward components of a task and, for a mix, of its parts, each once."""
    names = list(task.reward_components)
    for part in task.parts:
        names.extend(reward_components_of(part.task))
    return tuple(dict.fromkeys(names))


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    if inspect.isfunction(value) or inspect.ismethod(value):
        return f"the function {value.__qualname__}"
    return f"a {type(value).__name__}"


def _is_async(fn: Any) -> bool:
    while hasattr(fn, "func") and hasattr(fn, "args"):  # functools.partial
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    if inspect.isfunction(fn) or inspect.ismethod(fn) or not callable(fn):
        return False
    return inspect.iscoroutinefunction(fn.__call__)  # an object with async __call__


def _check_callable(name: str, fn: Any, params: tuple[str, ...], *, asynchronous: bool) -> None:
    shape = f"{'async def ' if asynchronous else 'def '}{name}({', '.join(params)})"
    if not callable(fn):
        raise TaskError(f"Task.{name} must be a function `{shape}`, got {_kind(fn)}")
    if asynchronous and not _is_async(fn):
        raise TaskError(
            f"Task.{name} must be a coroutine function `{shape}`; "
            f"{getattr(fn, '__name__', name)} is not async"
        )
    if not asynchronous and (_is_async(fn) or inspect.isasyncgenfunction(fn)):
        raise TaskError(
            f"Task.{name} must be a plain function `{shape}` (a generator is fine), not async"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin or C callable: nothing to check
    try:
        signature.bind(*params)
    except TypeError:
        raise TaskError(
            f"Task.{name} must take {len(params)} positional argument"
            f"{'' if len(params) == 1 else 's'} `{shape}`; "
            f"{getattr(fn, '__name__', name)}{signature} does not"
        ) from None


def _check_warmup(warmup: Any) -> None:
    if isinstance(warmup, str | bytes | Mapping) or not isinstance(warmup, Sequence | tuple):
        raise TaskError(
            "Task.warmup must be a list of conversations (each a list of "
            f"{{'role': ..., 'content': ...}} messages), got {_kind(warmup)}"
        )
    for i, conversation in enumerate(warmup):
        if isinstance(conversation, str | Mapping) or not isinstance(conversation, Sequence):
            raise TaskError(
                f"Task.warmup[{i}] must be a list of messages, got {_kind(conversation)}"
            )
        for message in conversation:
            if (
                not isinstance(message, Mapping)
                or not isinstance(message.get("role"), str)
                or not isinstance(message.get("content"), str)
            ):
                raise TaskError(
                    f"Task.warmup[{i}] has a message that is not "
                    f"{{'role': str, 'content': str}}: {message!r}"
                )
        if not conversation or conversation[-1]["role"] != "assistant":
            raise TaskError(
                f"Task.warmup[{i}] must end with an assistant message (the turn that is trained)"
            )


def _defined_at(function: Any) -> str:
    """ " (file.py:LINE)" where a task's function is defined, for an error about what it
    returned (no line of it is in the traceback: it returned); "" if unknown."""
    code = getattr(function, "__code__", None)
    if code is None:
        return ""
    return f" ({Path(code.co_filename).name}:{code.co_firstlineno})"
