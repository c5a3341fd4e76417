"""`verifiers` environments as tasks: `Task.from_verifiers(env)` and `tinker-tui run vf:ID`.

verifiers 0.4 (its `verifiers.v1` stack) splits an environment into a taskset (the data: typed
tasks whose `@vf.reward` methods score a finished trace), a harness (the agent program that
plays a task: its model calls go to verifiers' own interception server) and an `Env` that
ties them and runs one episode (`Env.run_episode(task, ModelContext)`). The interception
server forwards each model call to the endpoint the `ModelContext` names, as chat
completions.

Here each task of the env's taskset is a `Scenario`; a rollout runs one episode through the
env's own machinery, its endpoint a relay (`_Relay`, on the rollout loop) that passes every
request on to the run's policy server through the rollout's openai client and keeps the
choices that came back, filed under the episode's key. The trajectory is those choices (the
exact sampled tokens, every turn), its reward the trace's weighted rewards, each reward
(and each `@vf.metric`) a named metric; the reward names are the task's reward components.
An env without a test split evaluates nothing; `eval_tasks` (a taskset view, or a list of
tasks) names held-out tasks.
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tinker_tui.engine.errors import UsageError
from tinker_tui.engine.rollouts.trajectory import (
    METRIC_NAME,
    SampledTurn,
    Trajectory,
    TrajectoryError,
)

__all__ = ["VerifiersError", "VerifiersParts", "load_env", "verifiers_parts"]

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
    """rollout(client, model, scenario): one episode of the env on the scenario's task,
    its model calls through the relay to the run's policy server."""

    def __init__(self, env: Any) -> None:
        self.env = env
        # One serving context and relay per event loop (the rollout loop; a test's own).
        self._serving: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Serving] = (
            weakref.WeakKeyDictionary()
        )

    async def _serving_here(self, client: Any) -> _Serving:
        loop = asyncio.get_running_loop()
        serving = self._serving.get(loop)
        if serving is None:
            serving = self._serving[loop] = _Serving(self.env)
        await serving.ready(client)
        return serving

    async def __call__(self, client: Any, model: str, scenario: Any) -> Trajectory:
        vf = _vf()
        serving = await self._serving_here(client)
        relay = serving.relay
        assert relay is not None
        key = relay.open(client)
        try:
            ctx = vf.ModelContext(
                model=model,
                client=vf.EvalClientConfig(base_url=f"{relay.url}/{key}", api_key_var="UNUSED"),
            )
            try:
                episode = await self.env.run_episode(scenario.data, ctx)
            except SystemExit as exc:  # as above: not the run's to end
                raise TrajectoryError(f"the verifiers episode exited: {exc}") from None
        finally:
            calls = relay.close(key)
        return _trajectory(episode, calls)


@dataclass
class _Call:
    request: dict[str, Any]
    choice: Any


@dataclass
class _Serving:
    """The env's serving resources (its interception server, shared tools), entered once on
    a loop and left when that loop's tasks are cancelled (the run's end), and the relay."""

    env: Any
    relay: _Relay | None = None
    _started: asyncio.Future[None] | None = None
    _keeper: asyncio.Task[None] | None = field(default=None, repr=False)

    async def ready(self, client: Any) -> None:
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            self._keeper = asyncio.get_running_loop().create_task(self._keep())
        await asyncio.shield(self._started)

    async def _keep(self) -> None:
        assert self._started is not None
        try:
            relay = _Relay()
            await relay.start()
            try:
                async with self.env.serving():
                    self.relay = relay
                    self._started.set_result(None)
                    await asyncio.Event().wait()  # until cancelled
            finally:
                await relay.stop()
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


class _Relay:
    """A loopback chat-completions endpoint for verifiers' interception server: a request to
    `<url>/<key>/chat/completions` goes on to the policy server through the openai client
    registered under `key`, and its choice is kept under `key` (one per request)."""

    def __init__(self) -> None:
        self.url = ""
        self._runner: Any = None
        self._open: dict[str, tuple[Any, list[_Call]]] = {}

    async def start(self) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/{key}/chat/completions", self._chat)
        app.router.add_post("/{key}/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def open(self, client: Any) -> str:
        key = secrets.token_urlsafe(12)
        self._open[key] = (client, [])
        return key

    def close(self, key: str) -> list[_Call]:
        return self._open.pop(key, (None, []))[1]

    async def _chat(self, request: Any) -> Any:
        import openai
        from aiohttp import web

        entry = self._open.get(request.match_info["key"])
        if entry is None:
            return web.json_response(
                {"error": {"message": "unknown or finished rollout", "type": "invalid_request"}},
                status=404,
            )
        client, calls = entry
        body = json.loads(await request.read())
        stream = bool(body.pop("stream", False))
        stream_options = body.pop("stream_options", None) or {}
        known = {"model", "messages"}
        extra = {k: v for k, v in body.items() if k not in known}
        try:
            completion = await client.chat.completions.create(
                model=body.get("model"), messages=body.get("messages", []), extra_body=extra
            )
        except openai.APIStatusError as exc:
            return web.Response(
                body=exc.response.content,
                status=exc.status_code,
                content_type="application/json",
            )
        for choice in completion.choices:
            calls.append(_Call(body, choice))
        if stream:
            return await _as_stream(request, completion, bool(stream_options.get("include_usage")))
        return web.json_response(completion.model_dump(mode="json"))


async def _as_stream(request: Any, completion: Any, include_usage: bool) -> Any:
    """The completion as the server-sent events of a streamed one: one chunk with each
    choice's whole message, one with its finish reason (and the usage, when asked), then
    `[DONE]`. The policy is sampled unstreamed (the trainer needs the whole sample anyway);
    a harness that streams reads the same answer."""
    from aiohttp import web

    head = {
        "id": completion.id,
        "object": "chat.completion.chunk",
        "created": completion.created,
        "model": completion.model,
    }
    chunks = []
    for choice in completion.choices:
        message = choice.message
        delta: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
        if message.tool_calls:
            delta["tool_calls"] = [
                {"index": i, **call.model_dump(mode="json")}
                for i, call in enumerate(message.tool_calls)
            ]
        chunks.append({**head, "choices": [{"index": choice.index, "delta": delta}]})
        chunks.append(
            {
                **head,
                "choices": [
                    {"index": choice.index, "delta": {}, "finish_reason": choice.finish_reason}
                ],
            }
        )
    if include_usage and completion.usage is not None:
        chunks.append({**head, "choices": [], "usage": completion.usage.model_dump(mode="json")})
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for chunk in chunks:
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def _trajectory(episode: Any, calls: list[_Call]) -> Trajectory:
    traces = [t for t in episode.traces if getattr(t.agent, "trainable", True)]
    if not episode.ok or not traces:
        errors = [*episode.errors, *(e for t in episode.traces for e in t.errors)]
        why = "; ".join(f"{e.type}: {e.message}" for e in errors[:3]) or "no trace"
        raise TrajectoryError(f"the verifiers episode failed: {why}")
    if not calls:
        raise TrajectoryError("the verifiers episode made no model call; nothing to train on")
    reward = 0.0
    metrics: dict[str, float] = {}
    for trace in traces:
        for name, value in trace.rewards.items():
            if value is None:
                continue
            reward += float(value.value)
            metrics[_name(name)] = float(value.score)
        for name, number in trace.metrics.items():
            if number is not None and math.isfinite(float(number)):
                metrics[_name(name)] = float(number)
    last = calls[-1]
    message = last.choice.message
    shown = [
        *last.request.get("messages", []),
        {"role": "assistant", "content": message.content or ""},
    ]
    # Built directly, not by from_choices(**metrics): a reward may be named `reward` (as
    # `vf init` scaffolds it) or `messages`.
    return Trajectory(
        tuple(SampledTurn.from_choice(c.choice) for c in calls),
        reward,
        metrics,
        tuple(_display(m) for m in shown),
    )


def _display(message: Any) -> dict[str, Any]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    role = message.get("role", "?") if isinstance(message, dict) else "?"
    shown: dict[str, Any] = {"role": str(role), "content": str(content or "")}
    if isinstance(message, dict) and message.get("tool_calls"):
        shown["tool_calls"] = message["tool_calls"]
    return shown


def _name(name: str) -> str:
    return "".join(c if METRIC_NAME.fullmatch(c) else "." for c in str(name)) or "reward"
