"""The policy backend: one code path for the local and the real Tinker client, retries and
visible waits, checkpoint naming and retention, sampler eviction, renderer choice."""

import asyncio
import inspect
import shutil

import httpx
import pytest
import tinker
from waiting import wait_until

from tinker_tui.engine.backend import retry
from tinker_tui.engine.backend.checkpoint_retention import checkpoints_to_delete
from tinker_tui.engine.backend.choice import (
    BackendError,
    choose_backend,
    context_length_of,
    make_renderer,
    make_service_client,
    renderer_name_for,
)
from tinker_tui.engine.backend.retry import BackendTimeoutError, RetryPolicy, call_with_retry
from tinker_tui.engine.backend.session import BackendSession, UnknownVersionError
from tinker_tui.engine.config import DEFAULT_BASE_MODEL, RunConfig
from tinker_tui.engine.events import BackendWaited, CheckpointDeleted, LogEmitted
from tinker_tui.engine.local import LocalServiceClient
from tinker_tui.engine.rollouts.trajectory import SampledTurn, Trajectory, TrajectoryGroup


def _status_error(cls, status):
    request = httpx.Request("POST", "http://tinker.invalid/x")
    return cls(f"HTTP {status}", response=httpx.Response(status, request=request), body=None)


# ------------------------------------------------------------------ one code path
class Recorder:
    """Passes every call through to `target` and notes it as a call on the SDK class
    `sdk`; clients returned by the calls in `returns` are recorded the same way."""

    def __init__(self, target, sdk, log, returns=None):
        self._target, self._sdk, self._log, self._returns = target, sdk, log, returns or {}

    def __getattr__(self, name):
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            self._log.append((self._sdk, name, args, kwargs))
            result = attr(*args, **kwargs)
            wrap = self._returns.get(name)
            if wrap is None:
                return result

            async def wrapped():
                return wrap(await result)

            return wrapped()

        return call


class RecordingRest:
    def __init__(self, local_dir, log):
        from tinker_tui.engine.backend.checkpoint_retention import LocalCheckpointRemover

        self._remover = LocalCheckpointRemover(local_dir)
        self._log = log

    def delete_checkpoint_from_tinker_path(self, path):
        self._log.append((tinker.RestClient, "delete_checkpoint_from_tinker_path", (path,), {}))
        return self._remover.delete_checkpoint_from_tinker_path(path)


def recorded_service(tmp_path, log):
    local = LocalServiceClient(checkpoint_dir=tmp_path)

    def sampler(client):
        return Recorder(client, tinker.SamplingClient, log)

    def trainer(client):
        return Recorder(
            client, tinker.TrainingClient, log, {"save_weights_and_get_sampling_client": sampler}
        )

    service = Recorder(
        local,
        tinker.ServiceClient,
        log,
        {
            "create_lora_training_client": trainer,
            "create_training_client_from_state_with_optimizer": trainer,
            "create_sampling_client": sampler,
        },
    )
    return service


def _group(session, rewards=(1.0, 0.0)):
    prompt = tuple(
        session.renderer.build_generation_prompt(
            [{"role": "user", "content": "Is the sky blue?"}]
        ).to_ints()
    )
    tokens = tuple(session.tokenizer.encode(" maybe"))
    turn = SampledTurn(
        prompt_tokens=prompt,
        tokens=tokens,
        logprobs=tuple(-1.0 for _ in tokens),
        policy_version=session.version,
    )
    return TrajectoryGroup(
        group_id=0,
        scenario_id="s",
        started_at=0.0,
        finished_at=1.0,
        trajectories=tuple(Trajectory(turns=(turn,), reward=r) for r in rewards),
    )


async def test_the_policy_calls_only_the_tinker_sdk_interface(tmp_path):
    """Run the policy on the local backend with every call recorded: each one is a method of
    the tinker SDK's client classes, with arguments its signature accepts. So the real
    `tinker.ServiceClient` gets the same calls: only the client object differs."""
    log = []
    config = RunConfig(
        loss_fn="ppo",
        loss_fn_config="clip_low_threshold=0.9",
        adam_beta1=0.8,
        adam_beta2=0.99,
        adam_eps=1e-8,
        weight_decay=0.01,
        grad_clip_norm=1.0,
        keep_last_checkpoints=1,
        kl_penalty_coef=0.1,
    )
    # the SDK deletes checkpoints through a tinker.RestClient: give it one that records
    session = BackendSession.from_config(
        recorded_service(tmp_path, log), config, rest_client=RecordingRest(tmp_path, log)
    )
    await session.start()
    for _ in range(2):
        await session.train(
            session.build_datums([_group(session)]), loss_fn=config.loss_fn, learning_rate=1e-3
        )
    await session.train_supervised(
        [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "maybe"}]],
        learning_rate=1e-3,
    )
    await session.publish()
    await session.save_state("step-000002")
    prompt = session.renderer.build_generation_prompt([{"role": "user", "content": "hi"}])
    await session.sample(prompt, 2, tinker.SamplingParams(max_tokens=3, seed=1))

    called = {(cls.__name__, name) for cls, name, _, _ in log}
    assert {
        ("ServiceClient", "create_lora_training_client"),
        ("TrainingClient", "forward_backward"),
        ("TrainingClient", "optim_step"),
        ("TrainingClient", "save_weights_and_get_sampling_client"),
        ("TrainingClient", "save_weights_for_sampler"),
        ("TrainingClient", "save_state"),
        ("SamplingClient", "sample"),
        ("RestClient", "delete_checkpoint_from_tinker_path"),
        # the KL penalty's reference: the base model, scored as the SDK does it
        ("ServiceClient", "create_sampling_client"),
        ("SamplingClient", "compute_logprobs"),
    } <= called
    assert any(
        n == "create_sampling_client" and k == {"base_model": DEFAULT_BASE_MODEL}
        for _, n, _, k in log
    )
    for cls, name, args, kwargs in log:
        method = getattr(cls, name, None)
        assert method is not None, f"{cls.__name__}.{name} is not part of the tinker SDK"
        inspect.signature(method).bind(None, *args, **kwargs)  # raises if the SDK refuses
    # the loss, its config and the Adam settings reach the backend as given
    fb = next(a for c, n, a, _ in log if n == "forward_backward" and a[1] == "ppo")
    assert fb[2] == {"clip_low_threshold": 0.9}
    adam = next(a[0] for c, n, a, _ in log if n == "optim_step")
    assert (adam.beta1, adam.beta2, adam.eps, adam.weight_decay, adam.grad_clip_norm) == (
        0.8,
        0.99,
        1e-8,
        0.01,
        1.0,
    )


def test_the_tinker_backend_is_the_sdk_service_client(tmp_path, monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-not-a-real-key")
    client = make_service_client("tinker", tmp_path)  # builds no connection
    assert type(client) is tinker.ServiceClient
    session = BackendSession(client, base_model="Qwen/Qwen3-8B")
    assert session.renderer_name == "qwen3"
    assert isinstance(make_service_client("local", tmp_path), LocalServiceClient)


async def test_the_context_length_is_the_backends(monkeypatch):
    """Local: the model's own (what its sampler enforces). Tinker: its server capabilities,
    read through a RestClient (the SDK's session-less client) over connections of its own,
    for the exact model name, made for the service and key the environment names (a bare
    one would stay aimed at the process's first service)."""
    from tinker.lib.internal_client_holder import InternalClientHolder

    from tinker_tui.engine.backend import tinker_private

    assert await context_length_of("local", DEFAULT_BASE_MODEL) == 2048
    asked, made = [], []
    where = {"base_url": "http://127.0.0.1:9", "api_key": "tml-test-not-a-real-key"}
    monkeypatch.setenv("TINKER_BASE_URL", where["base_url"])
    monkeypatch.setenv("TINKER_API_KEY", where["api_key"])

    class Capabilities:  # the service's answer, without the network
        def __init__(self, base_url, api_key):
            made.append({"base_url": base_url, "api_key": api_key})

        def get_server_capabilities(self):
            asked.append("get_server_capabilities")

            async def answer():
                return tinker.types.GetServerCapabilitiesResponse(
                    supported_models=[
                        tinker.types.SupportedModel(
                            model_name="Qwen/Qwen3-8B", max_context_length=32768
                        ),
                        tinker.types.SupportedModel(model_name="Qwen/Qwen3-4B"),
                    ]
                )

            return answer()

    assert inspect.signature(tinker.RestClient.get_server_capabilities).parameters.keys() == {
        "self"
    }
    # raises if the SDK refuses what the client of its own is made with
    inspect.signature(InternalClientHolder).bind(**where, _skip_session=True)
    inspect.signature(tinker.RestClient).bind(_holder=None)
    monkeypatch.setattr(tinker_private, "rest_client_of_its_own", Capabilities)
    assert await context_length_of("tinker", "Qwen/Qwen3-8B") == 32768
    assert await context_length_of("tinker", "Qwen/Qwen3-4B") is None  # listed, no length
    assert await context_length_of("tinker", "Qwen/Qwen3") is None  # not listed
    assert asked == ["get_server_capabilities"] * 3
    assert made == [where] * 3


def test_backend_is_chosen_from_credentials_up_front(monkeypatch):
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.delenv("TINKER_CREDENTIAL_CMD", raising=False)
    monkeypatch.setattr("tinker.auth.tinker_has_credentials", lambda: False)
    assert choose_backend(None) == "local"
    with pytest.raises(BackendError, match="TINKER_API_KEY"):
        choose_backend("tinker")
    monkeypatch.setenv("TINKER_CREDENTIAL_CMD", "echo key")
    assert choose_backend(None) == "tinker"


def test_a_malformed_api_key_is_refused_up_front(monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "dummy")
    for requested in ("tinker", None):
        with pytest.raises(BackendError, match="TINKER_API_KEY .* start with 'tml-'"):
            choose_backend(requested)
    assert choose_backend("local") == "local"
    monkeypatch.setenv("TINKER_API_KEY", "tml-abc")
    assert choose_backend("tinker") == "tinker"


# ------------------------------------------------------------------ retries
class Sleeps:
    def __init__(self):
        self.delays = []

    async def __call__(self, delay):
        self.delays.append(delay)


async def test_transient_errors_are_retried_with_backoff_and_reported():
    calls, waits, sleep = [], [], Sleeps()

    async def flaky(attempt):
        calls.append(attempt)
        if attempt < 3:
            raise _status_error(tinker.RateLimitError, 429)
        return "ok"

    result = await call_with_retry(
        flaky,
        operation="sample",
        on_wait=waits.append,
        policy=RetryPolicy(base_delay=1.0),
        sleep=sleep,
        context=retry.WaitContext(backend="Tinker"),
    )
    assert result == "ok" and calls == [1, 2, 3]
    assert [w.attempt for w in waits] == [2, 3]
    assert all(w.retrying for w in waits)
    assert (
        waits[0]
        .describe()
        .startswith(
            "Tinker: sample 429 Too Many Requests: rate limited, waiting for capacity, retry 1 in"
        )
    )
    assert 0.75 <= sleep.delays[0] <= 1.25 and 1.5 <= sleep.delays[1] <= 2.5


async def test_retries_are_bounded_and_only_for_transient_errors():
    for error, expected_calls in (
        (_status_error(tinker.InternalServerError, 503), 3),
        (_status_error(tinker.BadRequestError, 400), 1),
        (_status_error(tinker.ConflictError, 409), 1),
    ):
        calls = []

        def failing(attempt, error=error, calls=calls):
            calls.append(attempt)
            raise error

        with pytest.raises(type(error)):
            await call_with_retry(
                failing, operation="x", policy=RetryPolicy(attempts=3), sleep=Sleeps()
            )
        assert len(calls) == expected_calls
    calls = []

    def once(attempt):
        calls.append(attempt)
        raise _status_error(tinker.RateLimitError, 429)

    with pytest.raises(tinker.RateLimitError):
        await call_with_retry(
            once, operation="optim_step", policy=RetryPolicy(), retry=False, sleep=Sleeps()
        )
    assert calls == [1]


async def test_each_attempt_has_a_timeout_and_slow_attempts_are_reported():
    waits = []
    with pytest.raises(BackendTimeoutError, match="forward_backward"):
        await call_with_retry(
            lambda _: asyncio.sleep(10),
            operation="forward_backward",
            policy=RetryPolicy(timeout=0.05, attempts=2),
            sleep=Sleeps(),
            on_wait=waits.append,
        )
    assert [w.retrying for w in waits] == [True]  # the timeout was retried once

    async def slow(_):
        await asyncio.sleep(0.15)
        return 1

    waits.clear()
    context = retry.WaitContext(backend="local backend")
    assert (
        await call_with_retry(
            slow,
            operation="get tokenizer",
            on_wait=waits.append,
            policy=RetryPolicy(slow_after=0.05, report_every=10),
            context=context,
        )
        == 1
    )
    wait = waits[0]  # then again at 0.1 s: twice the wait so far
    assert not wait.retrying and wait.delay >= 0.05
    assert wait.describe().startswith("local backend: get tokenizer has waited")
    assert "Tinker" not in wait.describe()


async def test_an_unreachable_service_fails_the_call_after_the_configured_time():
    silent = [0.0]
    context = retry.WaitContext(
        backend="Tinker",
        where="http://127.0.0.1:9",
        unreachable=lambda: (silent[0], "ConnectError: refused"),
    )

    async def never(_):
        await asyncio.sleep(3600)

    task = asyncio.ensure_future(
        call_with_retry(
            never,
            operation="create training client",
            context=context,
            policy=RetryPolicy(unreachable_after=30),
        )
    )
    await asyncio.sleep(0.1)
    assert not task.done()
    silent[0] = 31.0  # the service has answered nothing for 31 s
    with pytest.raises(retry.BackendUnreachableError) as caught:
        await asyncio.wait_for(task, 2)
    message = str(caught.value)
    assert "http://127.0.0.1:9 unreachable: no answer for 31 s" in message
    assert "TINKER_BASE_URL" in message and "backend_unreachable_after" in message


async def test_a_stop_abandons_calls_waiting_on_trouble_and_start_up_calls():
    context = retry.WaitContext(
        backend="Tinker", cause=lambda since: "503 Service Unavailable", troubled=lambda since: True
    )
    gate = asyncio.Event()

    async def slow(_):
        await gate.wait()
        return "done"

    policy = RetryPolicy(slow_after=0.05, report_every=10)
    healthy = asyncio.ensure_future(
        call_with_retry(slow, operation="save state", policy=RetryPolicy(), context=context)
    )
    reports: list[retry.Wait] = []
    troubled = asyncio.ensure_future(
        call_with_retry(
            slow, operation="optim_step", policy=policy, context=context, on_wait=reports.append
        )
    )
    start_up = asyncio.ensure_future(
        call_with_retry(
            slow,
            operation="create training client",
            policy=RetryPolicy(),
            context=context,
            abandon_on_stop=True,
        )
    )
    await wait_until(lambda: reports, "the troubled call's report")
    context.stopping.set()
    with pytest.raises(retry.BackendInterrupted, match="optim_step abandoned .*503"):
        await asyncio.wait_for(troubled, 2)
    with pytest.raises(retry.BackendInterrupted, match="create training client"):
        await asyncio.wait_for(start_up, 2)
    assert not healthy.done()  # a call that is not waiting on trouble finishes its work
    gate.set()
    assert await asyncio.wait_for(healthy, 2) == "done"
    # sleeping before a retry counts as trouble too
    with pytest.raises(retry.BackendInterrupted):
        await call_with_retry(
            lambda _: (_ for _ in ()).throw(_status_error(tinker.InternalServerError, 503)),
            operation="sample",
            policy=RetryPolicy(base_delay=30),
            context=context,
        )


async def test_a_stop_waits_for_a_call_that_is_only_slow():
    """A long forward_backward, reported as slow, with no failure from the service: a
    graceful stop lets it finish (it was abandoned after 20 s, losing the step)."""
    context = retry.WaitContext(
        backend="Tinker", cause=lambda since: "the service is working on it"
    )
    gate = asyncio.Event()

    async def slow(_):
        await gate.wait()
        return "trained"

    reports: list[retry.Wait] = []
    call = asyncio.ensure_future(
        call_with_retry(
            slow,
            operation="forward_backward",
            policy=RetryPolicy(slow_after=0.05),
            context=context,
            retry=False,
            on_wait=reports.append,
        )
    )
    await wait_until(lambda: reports, "the report of a slow call")
    context.stopping.set()
    await asyncio.sleep(0.7)  # past the check interval: it would have been abandoned
    assert not call.done()
    gate.set()
    assert await asyncio.wait_for(call, 2) == "trained"


async def test_backend_waits_become_events_and_log_lines(tmp_path):
    events = []
    local = LocalServiceClient(checkpoint_dir=tmp_path)
    failures = [_status_error(tinker.RateLimitError, 429)]

    class Flaky:
        def __getattr__(self, name):
            return getattr(local, name)

        def create_lora_training_client(self, **kwargs):
            if failures:
                raise failures.pop()
            return local.create_lora_training_client(**kwargs)

    session = BackendSession(
        Flaky(),
        base_model=DEFAULT_BASE_MODEL,
        on_event=events.append,
        retry=RetryPolicy(base_delay=0.01),
    )
    await session.start()
    [waited] = [e for e in events if isinstance(e, BackendWaited)]
    assert waited.operation == "create training client" and waited.attempt == 2
    assert waited.reason.startswith("local backend: 429")
    lines = [e.message for e in events if isinstance(e, LogEmitted) and e.level == "warning"]
    assert any(m.startswith("local backend: create training client 429") for m in lines)
    assert not any("Tinker capacity" in m for m in lines)


# ------------------------------------------------------------------ checkpoints
def test_retention_keeps_the_last_n_and_every_mth():
    steps = [0, 1, 2, 3, 4, 5, 6]
    assert [steps[i] for i in checkpoints_to_delete(steps, 2, 0)] == [0, 1, 2, 3, 4]
    assert [steps[i] for i in checkpoints_to_delete(steps, 2, 3)] == [1, 2, 4]
    assert checkpoints_to_delete(steps, 0, 0) == []  # 0 keeps everything


async def test_checkpoints_carry_the_step_and_old_ones_are_deleted(tmp_path):
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path),
        base_model=DEFAULT_BASE_MODEL,
        keep_last_checkpoints=2,
        keep_every_checkpoints=2,
        sampler_clients_to_keep=2,
    )
    await session.start()
    states = []
    for _ in range(5):
        await session.train(session.build_datums([_group(session)]), learning_rate=1e-3)
        states.append(await session.save_state(f"step-{session.version:06d}"))
    sampler = [c for c in session.checkpoints if c.kind == "sampler"]
    assert [c.step for c in sampler] == [0, 2, 4, 5]
    assert [c.name for c in sampler] == ["step-000000", "step-000002", "step-000004", "step-000005"]
    assert [c.step for c in session.checkpoints if c.kind == "state"] == [2, 4, 5]
    folders = {p.name for p in tmp_path.glob("*/sampler_weights/*")}
    assert folders == {"step-000000", "step-000002", "step-000004", "step-000005"}
    assert {p.name for p in tmp_path.glob("*/weights/*")} == {
        "step-000002",
        "step-000004",
        "step-000005",
    }
    assert states[-1].endswith("/weights/step-000005")
    # sampling clients: the last two stay loaded; kept weights load again on demand
    assert sorted(session.samplers.versions()) == [4, 5]
    assert session.available_versions() == [0, 2, 4, 5]
    prompt = session.renderer.build_generation_prompt([{"role": "user", "content": "hi"}])
    params = tinker.SamplingParams(max_tokens=2)
    _, version = await session.sample(prompt, 1, params, version=2)
    assert version == 2 and len(session.samplers) == 2 and session.version in session.samplers
    with pytest.raises(UnknownVersionError, match="available: 0, 2, 4, 5"):
        await session.sample(prompt, 1, params, version=3)


# ------------------------------------------------------------------ renderers
@pytest.mark.parametrize(
    ("base_model", "renderer"),
    [
        ("Qwen/Qwen3-8B", "qwen3"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3"),
        ("openai/gpt-oss-20b", "gpt_oss_no_sysprompt"),
        (DEFAULT_BASE_MODEL, "role_colon"),
        ("someone/unknown-model", "role_colon"),
    ],
)
def test_renderer_follows_the_base_model(base_model, renderer):
    assert renderer_name_for(base_model) == renderer


def test_renderer_named_explicitly_or_from_a_local_model_folder(tmp_path, monkeypatch):
    from tinker_tui.engine.local import WordTokenizer

    tokenizer = WordTokenizer()
    renderer, name = make_renderer(DEFAULT_BASE_MODEL, tokenizer, "role_colon")
    assert name == "role_colon"
    with pytest.raises(BackendError, match="no_such_renderer"):
        make_renderer(DEFAULT_BASE_MODEL, tokenizer, "no_such_renderer")
    # a Hugging Face folder on disk whose tokenizer has no chat template: role_colon (the
    # renderers a folder with a template gets: tests/test_real_format.py)
    renderer, name = make_renderer(str(tmp_path), tokenizer)
    assert name == "role_colon" and type(renderer).__name__ == "RoleColonRenderer"


async def test_at_least_two_full_checkpoints_survive_retention(tmp_path):
    events = []
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path),
        base_model=DEFAULT_BASE_MODEL,
        keep_last_checkpoints=1,
        sampler_checkpoint_every=0,
        on_event=events.append,
    )
    await session.start()
    paths = []
    for step in range(3):
        session.version = step
        paths.append(await session.save_state(f"step-{step:06d}"))
    assert [c.name for c in session.checkpoints] == ["step-000001", "step-000002"]
    assert {p.name for p in tmp_path.glob("*/weights/*")} == {"step-000001", "step-000002"}
    # the deletion is told, once it happened (the dashboards take the row off)
    deleted = [e for e in events if isinstance(e, CheckpointDeleted)]
    assert [(e.step, e.kind, e.name, e.path) for e in deleted] == [
        (0, "state", "step-000000", paths[0])
    ]


async def test_a_deletion_that_fails_is_logged_and_not_told_as_done(tmp_path):
    events = []
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=tmp_path),
        base_model=DEFAULT_BASE_MODEL,
        keep_last_checkpoints=1,
        sampler_checkpoint_every=0,
        on_event=events.append,
    )
    await session.start()
    for step in range(2):
        session.version = step
        await session.save_state(f"step-{step:06d}")
    for folder in tmp_path.glob("*/weights/step-000000"):
        shutil.rmtree(folder)  # gone already: the deletion fails
    session.version = 2
    await session.save_state("step-000002")
    assert not [e for e in events if isinstance(e, CheckpointDeleted)]
    assert any("could not delete old checkpoint" in getattr(e, "message", "") for e in events)
