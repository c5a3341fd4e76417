"""`verifiers` environments as tasks: `Task.from_verifiers(env)` and `tinker-tui run vf:ID`.

verifiers 0.4 (its `verifiers.v1` stack) splits an environment into a taskset (the data: typed
tasks whose `@vf.reward` methods score a finished trace), a harness (the agent program that
plays a task: its model calls go to verifiers' own interception server) and an `Env` that
ties them and runs one episode (`Env.run_episode(task, ModelContext)`). The interception
server forwards each model call, in the API the harness speaks (chat completions,
Responses, Messages), to the same path under the endpoint the `ModelContext` names.

Here each task of the env's taskset is a `Scenario`; a rollout runs one episode through the
env's own machinery, its endpoint the rollout's capture address on the policy server
(`/r/<key>/v1`, `engine.server.capture`), so the server files every model call of the
episode under the rollout. verifiers keeps one HTTP client per distinct endpoint until the env
stops serving, so the rollouts reuse their capture keys (`engine.rollouts.capture_keys`):
there are as many addresses, and clients, as episodes ever ran at once, plus one for each
episode that failed, timed out or was cancelled (its key is retired). The rollout returns the episode's `Reward` (the trace's weighted
rewards, each reward and each `@vf.metric` a named metric; the reward names are the task's
reward components), trained on those captured choices: the exact sampled tokens, every
turn. An env without a test split evaluates nothing; `eval_tasks` (a taskset view, or a
list of tasks) names held-out tasks.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import re
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tinker_tui.engine.errors import UsageError
from tinker_tui.engine.rollouts.capture_keys import CaptureKeys
from tinker_tui.engine.rollouts.trajectory import METRIC_NAME, Reward, TrajectoryError

__all__ = ["VerifiersError", "VerifiersParts", "load_env", "verifiers_parts"]

#: The path of a rollout's capture address, as the policy server serves it (`/r/<key>/v1`).
CAPTURE_ADDRESS = re.compile(r"/r/[A-Za-z0-9_-]{1,64}/v1$")
#: What the extra installs; said when verifiers is missing.
INSTALL = 'pip install "tinker-tui[verifiers]"'


class VerifiersError(UsageError, ValueError):
    """verifiers is not installed, or what was given is not a verifiers environment."""


def _vf() -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError:
        raise VerifiersError(
            f"verifiers environments need the verifiers package: {INSTALL}"
        ) from None
    return vf


def load_env(env_id: str) -> Any:
    """The installed environment `env_id` (a taskset id, as `vf-eval` takes it: the
    module or Hub package name), built with its default config."""
    vf = _vf()
    try:
        config = vf.resolve_env_config({"taskset": {"id": env_id}})
        return vf.load_environment(config)
    except ModuleNotFoundError as exc:
        raise VerifiersError(
            f"no verifiers environment {env_id!r} is installed ({exc}); install it first "
            f"(for a Hub environment: prime env install OWNER/{env_id})"
        ) from None


@dataclass(frozen=True)
class VerifiersParts:
    """The pieces of a verifiers task (`Task.from_verifiers` puts them together)."""

    name: str
    scenarios: Callable[[Any], Iterator[Any]]
    rollout: Callable[..., Any]
    eval_scenarios: Callable[[], list[Any]] | None
    reward_components: tuple[str, ...]


def verifiers_parts(
    env: Any, scenario: Callable[[str, Any], Any], *, eval_tasks: Iterable[Any] | None = None
) -> VerifiersParts:
    """The parts of the task of a `verifiers.v1.Env` (or the id of an installed one)."""
    vf = _vf()
    if isinstance(env, str):
        env = load_env(env)
    if not isinstance(env, vf.Env):
        raise VerifiersError(
            f"Task.from_verifiers takes a verifiers.v1.Env (or an environment id), got "
            f"{type(env).__name__}"
        )
    _check_runtimes(env)
    held_out = None if eval_tasks is None else list(eval_tasks)
    return VerifiersParts(
        name=str(env.config.taskset.id or type(env).__name__).replace("/", "-"),
        scenarios=_Scenarios(env, scenario),
        rollout=_Rollout(env),
        eval_scenarios=None
        if held_out is None
        else (lambda: [scenario(f"eval-{_task_id(t, i)}", t) for i, t in enumerate(held_out)]),
        reward_components=_reward_names(type(env.taskset).task_type()),
    )


def _check_runtimes(env: Any) -> None:
    """An agent that runs in a Prime sandbox (verifiers' default runtime) needs Prime
    credentials; without them verifiers exits from inside an episode. Said here, at once."""
    from verifiers.v1.configs.agent import agent_config_fields
    from verifiers.v1.runtimes import PrimeConfig
    from verifiers.v1.utils.prime import ensure_prime_auth

    specs = agent_config_fields(env.config)
    if not any(isinstance(getattr(s, "runtime", None), PrimeConfig) for s in specs.values()):
        return
    try:
        ensure_prime_auth()
    except SystemExit:
        raise VerifiersError(
            f"{env.config.taskset.id or type(env).__name__} runs its agent in a Prime sandbox "
            "(verifiers' default runtime), which needs `prime login` or $PRIME_API_KEY; to run "
            "it on this machine, build it in a task file with the agent's runtime set to "
            'subprocess: vf.resolve_env_config({"taskset": {"id": ...}, "agent": {"runtime": '
            '{"type": "subprocess"}}}) and Task.from_verifiers(vf.load_environment(config))'
        ) from None


def _task_id(task: Any, position: int) -> str:
    data = task.data
    for value in (data.id, data.name, data.idx):
        if value is not None:
            return str(value)
    return str(position)


def _reward_names(task_cls: type) -> tuple[str, ...]:
    """The names of a task class's `@vf.reward` methods: its reward components (a reward
    that returns keyed scores reports those keys too, as metrics)."""
    names = {
        name
        for klass in task_cls.__mro__
        for name, fn in vars(klass).items()
        if callable(fn) and hasattr(fn, "reward")
    }
    return tuple(sorted(n for n in names if METRIC_NAME.fullmatch(n)))


class _Scenarios:
    """scenarios(rng): the env's taskset in its own order (it shuffles itself, if asked)."""

    def __init__(self, env: Any, scenario: Callable[[str, Any], Any]) -> None:
        self.env, self.scenario = env, scenario

    def __call__(self, rng: Any) -> Iterator[Any]:
        for position, task in enumerate(self.env.taskset):
            yield self.scenario(_task_id(task, position), task)


# ---------------------------------------------------------------------- rollouts
class _Rollout:
    """rollout(client, model, scenario): one episode of the env on the scenario's task. Its
    endpoint is the rollout's own capture address on the policy server, so every model call
    the harness makes, in whichever API, is filed under the rollout; it returns the reward.
    Its capture keys are reused (`capture_keys`): an address is a client verifiers keeps."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.capture_keys = CaptureKeys()
        # One serving context per event loop (the rollout loop; a test's own).
        self._serving: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Serving] = (
            weakref.WeakKeyDictionary()
        )

    async def __call__(self, client: Any, model: str, scenario: Any) -> Reward:
        vf = _vf()
        base_url, key_var = _endpoint(client)
        loop = asyncio.get_running_loop()
        serving = self._serving.get(loop)
        if serving is None:
            serving = self._serving[loop] = _Serving(self.env)
        await serving.ready()
        # verifiers keeps one HTTP client per endpoint until the env stops serving: a retired
        # key's client is never used again, and a connection it kept alive would hold its
        # socket for the rest of the run.
        ctx = vf.ModelContext(
            model=model,
            client=vf.EvalClientConfig(
                base_url=base_url, api_key_var=key_var, headers={"Connection": "close"}
            ),
        )
        try:
            episode = await self.env.run_episode(scenario.data, ctx)
        except SystemExit as exc:  # as below: not the run's to end
            raise TrajectoryError(f"the verifiers episode exited: {exc}") from None
        return _reward(episode)


def _endpoint(client: Any) -> tuple[str, str]:
    """The rollout's capture address (`.../r/<key>/v1`) and the name of the environment
    variable its token is in: verifiers reads an endpoint's API key from the environment."""
    base_url = str(getattr(client, "base_url", "")).rstrip("/")
    if CAPTURE_ADDRESS.search(urlsplit(base_url).path) is None:
        raise TrajectoryError(
            "a verifiers rollout needs the client the run hands it: its address "
            f"(.../r/<key>/v1) files the episode's model calls, got {base_url or client!r}"
        )
    token = str(client.api_key)
    key_var = "TINKER_TUI_TOKEN_" + hashlib.sha256(token.encode()).hexdigest()[:12].upper()
    os.environ[key_var] = token
    return base_url, key_var


@dataclass
class _Serving:
    """The env's serving resources (its interception server, shared tools), entered once on
    a loop and left when that loop's tasks are cancelled (the run's end)."""

    env: Any
    _started: asyncio.Future[None] | None = None
    _keeper: asyncio.Task[None] | None = field(default=None, repr=False)

    async def ready(self) -> None:
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            self._keeper = asyncio.get_running_loop().create_task(self._keep())
        await asyncio.shield(self._started)

    async def _keep(self) -> None:
        assert self._started is not None
        try:
            async with self.env.serving():
                self._started.set_result(None)
                await asyncio.Event().wait()  # until cancelled
        except SystemExit as exc:  # verifiers exits where a remote runtime is not set up
            self._fail(TrajectoryError(f"the verifiers environment could not start: {exc}"))
        except BaseException as exc:
            self._fail(exc if isinstance(exc, Exception) else RuntimeError("stopped"))
            raise

    def _fail(self, error: Exception) -> None:
        assert self._started is not None
        if not self._started.done():
            self._started.set_exception(error)
            self._started.exception()  # read: every rollout waiting on it gets it


def _reward(episode: Any) -> Reward:
    """The episode's reward (its trainable traces' weighted rewards), each reward and
    `@vf.metric` a metric, and its conversation to show; the turns are those captured."""
    traces = [t for t in episode.traces if getattr(t.agent, "trainable", True)]
    if not episode.ok or not traces:
        errors = [*episode.errors, *(e for t in episode.traces for e in t.errors)]
        why = "; ".join(f"{e.type}: {e.message}" for e in errors[:3]) or "no trace"
        raise TrajectoryError(f"the verifiers episode failed: {why}")
    if not any(t.calls for t in traces):
        raise TrajectoryError("the verifiers episode made no model call; nothing to train on")
    value = 0.0
    metrics: dict[str, float] = {}
    for trace in traces:
        for name, reward in trace.rewards.items():
            if reward is None:
                continue
            value += float(reward.value)
            metrics[_name(name)] = float(reward.score)
        for name, number in trace.metrics.items():
            if number is not None and math.isfinite(float(number)):
                metrics[_name(name)] = float(number)
    result = Reward(value, messages=[_display(m) for t in traces for m in t.messages])
    # Set, not passed as keywords: a reward may be named `value` or `messages`.
    result.metrics = metrics
    return result


def _display(message: Any) -> dict[str, Any]:
    """A verifiers message as the rollouts view shows one (OpenAI chat shape)."""
    shown: dict[str, Any] = {"role": message.role, "content": _text(message.content)}
    for call in getattr(message, "tool_calls", None) or ():
        shown.setdefault("tool_calls", []).append(
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
        )
    if message.role == "tool":
        shown["tool_call_id"] = message.tool_call_id
    return shown


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(getattr(p, "text", "")) for p in content)
    return str(content or "")


def _name(name: str) -> str:
    return "".join(c if METRIC_NAME.fullmatch(c) else "." for c in str(name)) or "reward"
