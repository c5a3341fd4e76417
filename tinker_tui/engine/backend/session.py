"""The policy: drives any object with the Tinker client interface.

`BackendSession` is the code above the seam. It is identical for the embedded local backend
(`tinker_tui.engine.local.LocalServiceClient`) and for the real `tinker.ServiceClient`; only the
service client object handed to it differs. It owns the training client, the sampling
clients of recent policy versions (`engine.backend.sampler_cache`), the renderer, and the
checkpoints (`engine.backend.checkpoint_retention`); it trains on Datums
(`engine.backend.datums`) and publishes the next sampling client.

Every call to the backend goes through `tinker_tui.engine.backend.retry.call_with_retry`: it
has a timeout, transient errors are retried with backoff (idempotent calls only), and waits are published
as `BackendWaited` events and log lines that name the backend and the cause, never a silent
hang. With the tinker SDK, calls that may block (creating clients, which builds the SDK's
session on first use; the checkpoint REST client; the tokenizer; closing) run on daemon
threads (`engine.backend.blocking`), the SDK's own retries are read from its log records and shown
as they happen (`engine.backend.sdk_watch`), a service that answers nothing fails the call after
`backend_unreachable_after` seconds, and the session is closed at the end (`close`).
`interrupt()` (the run is stopping) abandons calls that wait on a degraded backend.

Checkpoints carry the step in their name (`step-000012`): sampler weights every
`sampler_checkpoint_every` steps, full state (weights + optimizer) whenever the pipeline
asks (`save_state`); `CheckpointRetention` deletes those the `keep_last_checkpoints` and
`keep_every_checkpoints` settings do not keep. Sampling clients of the last
`sampler_clients_to_keep` versions stay loaded (`SamplerCache`); older versions are loaded
again from their sampler weights if still kept.

With `sampling = "inflight"` every publish is an in-flight save
(`save_weights_and_get_sampling_client(kind="inflight")`): the training model has one mutable
weights target that each publish moves, so requests already running go on with the newer
weights. The newest client serves new requests (Tinker guarantees it at least the weights of
its save); the clients of older versions are dropped from the cache, since they no longer hold
those versions (a `model@step` request of one is served from its saved sampler weights). The
version `sample` returns is then a lower bound: the service does not say which weights made
which token. The local backend does say (`InflightSequence.weights_publish`): there it is the
exact version of every token of the response.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import tinker

from tinker_tui.engine.backend import tinker_private
from tinker_tui.engine.backend.blocking import on_daemon_thread, sdk_call
from tinker_tui.engine.backend.capabilities import (
    ClosesSession,
    KeepsCheckpointsHere,
    RemovesCheckpoints,
    SamplesConstrained,
    SamplingClient,
    ServiceClient,
    TrainingClient,
)
from tinker_tui.engine.backend.checkpoint_retention import (
    CheckpointRecord,
    CheckpointRetention,
    LocalCheckpointRemover,
    checkpoint_name,
)
from tinker_tui.engine.backend.choice import (
    backend_label,
    is_tinker_sdk,
    make_renderer,
    renderer_name_for,
    rest_client,
    service_address,
)
from tinker_tui.engine.backend.datums import (
    DatumBatch,
    build_datums,
    carry_provenance,
    kl_penalized_advantages,
    rl_datum,
    supervised_datums,
    trainer_outputs,
)
from tinker_tui.engine.backend.retry import RetryPolicy, Wait, WaitContext, call_with_retry
from tinker_tui.engine.backend.sampler_cache import SamplerCache
from tinker_tui.engine.backend.sdk_watch import Notice, SdkWatch
from tinker_tui.engine.errors import DiskFull, TinkerTuiError
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.metrics.cost import TokenUsage
from tinker_tui.engine.rendering.folder_renderer import declared_end_tokens
from tinker_tui.engine.rollouts.trajectory import TrajectoryGroup

if TYPE_CHECKING:
    from tinker_tui.engine.clock import Clock
    from tinker_tui.engine.config import RunConfig
    from tinker_tui.engine.events import Event


T = TypeVar("T")


class UnknownVersionError(TinkerTuiError, LookupError):
    """A policy version that this run does not serve (never existed, or evicted)."""


class SequencesRefused(TinkerTuiError):
    """The backend refused a stable_reinforce step's recorded sequences (missing, from
    another session, or expired): those groups cannot be trained, only sampled again."""


def _refusal(exc: Exception) -> str:
    """The service's own words of a 400 (its JSON `detail`), else the message."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return str(body["detail"])
    return str(getattr(exc, "message", None) or exc)


@dataclass(frozen=True, slots=True)
class TrainResult:
    policy_version: int
    metrics: dict[str, float]
    num_datums: int
    num_tokens: int
    #: Per Datum, the trainer's logprob of every target (before the step), as
    #: `forward_backward` answered it; and its entropy there where the backend gave one.
    trainer_logprobs: tuple[np.ndarray, ...] = ()
    entropy: tuple[np.ndarray, ...] | None = None


@dataclass
class _Publish:
    """A submitted publish: the snapshot (the next sampling client) and the named save."""

    version: int
    name: str
    snapshot: Awaitable[SamplingClient]
    saved: Awaitable[tinker.types.SaveWeightsForSamplerResponse] | None
    started: float


class BackendSession:
    """The policy being trained: training client, versioned sampling clients, renderer."""

    def __init__(
        self,
        service_client: ServiceClient,
        *,
        base_model: str,
        lora_rank: int = 32,
        seed: int = 0,
        renderer_name: str | None = None,
        loss_fn_config: Mapping[str, float] | None = None,
        adam_beta1: float = 0.9,
        adam_beta2: float = 0.95,
        adam_eps: float = 1e-12,
        weight_decay: float = 0.0,
        grad_clip_norm: float = 0.0,
        sampler_checkpoint_every: int = 1,
        keep_last_checkpoints: int = 5,
        keep_every_checkpoints: int = 0,
        sampler_clients_to_keep: int = 4,
        kl_penalty_coef: float = 0.0,
        sampling: str = "snapshot",
        record_stability_info: bool = False,
        retry: RetryPolicy | None = None,
        on_event: Callable[[Event], None] | None = None,
        clock: Clock | None = None,
        backend: str | None = None,
        rest_client: RemovesCheckpoints | None = None,
    ) -> None:
        self.service_client = service_client
        self.base_model = base_model
        self.lora_rank = lora_rank
        self.seed = seed
        self.requested_renderer = renderer_name or None
        self.renderer_name = renderer_name or renderer_name_for(base_model)
        self.loss_fn_config = dict(loss_fn_config or {})
        self.adam = {
            "beta1": adam_beta1,
            "beta2": adam_beta2,
            "eps": adam_eps,
            "weight_decay": weight_decay,
            "grad_clip_norm": grad_clip_norm,
        }
        self.sampler_checkpoint_every = sampler_checkpoint_every
        self.kl_penalty_coef = kl_penalty_coef
        #: "snapshot" (a fixed sampler per version) or "inflight" (one that publishes move).
        self.sampling = sampling
        #: The policy version of each in-flight save submitted, in order: publish n of the
        #: local backend's `InflightWeights` is `_inflight_saves[n - 1]`.
        self._inflight_saves: list[int] = []
        #: Samplers record every sequence and datums name them (StableReinforce).
        self.record_stability_info = record_stability_info
        #: The base model's sampling client, the KL penalty's reference (when it is on).
        self.reference: SamplingClient | None = None
        self.retry = retry or RetryPolicy()
        self.on_event = on_event
        self.clock = clock
        self.version = 0
        self.training_client: TrainingClient | None = None
        self.sampling_client: SamplingClient | None = None
        self.renderer: Any = None
        #: Every end token the model declares
        #: (`engine.rendering.folder_renderer.declared_end_tokens`).
        self.end_tokens: list[int] = []
        self.tokenizer: Any = None
        self.rewinds = 0  # rollbacks so far (names their sampler weights apart)
        #: Sampling clients of recent versions, for `model@step` requests.
        self.samplers = SamplerCache(sampler_clients_to_keep)
        #: What deletes old checkpoints: a tinker.RestClient (made on first use), or by path.
        self._rest: RemovesCheckpoints | None = rest_client
        #: The checkpoints this session saved and still keeps, and the policy deleting others.
        self.retention = CheckpointRetention(
            keep_last=keep_last_checkpoints,
            keep_every=keep_every_checkpoints,
            call=lambda operation, call: self._call(operation, call),
            remover=self._remover,
            log=self._log,
            now=self._now,
            on_event=on_event,
            on_sampler_deleted=lambda old: self.samplers.forget_loaded_from(old.step, old.path),
        )
        self.tinker_sdk = is_tinker_sdk(service_client)
        #: How waits name the backend ("Tinker", "local backend").
        self.backend_label = backend or backend_label(service_client)
        self.watch = SdkWatch(service_address(service_client)) if self.tinker_sdk else None
        watch = self.watch
        self.wait_context = WaitContext(
            backend=self.backend_label,
            where=watch.base_url if watch else "",
            cause=(lambda since: watch.cause(since)) if watch else (lambda since: ""),
            troubled=(lambda since: watch.troubled(since)) if watch else (lambda since: False),
            unreachable=(
                (lambda: (watch.unreachable_for(), watch.unreachable_cause()))
                if watch
                else (lambda: (0.0, ""))
            ),
        )
        self._shown: dict[tuple[str, ...], float] = {}  # throttles the SDK's notices
        #: The Tinker session id (the service bills by it); "" on the local backend.
        self.session_id = ""
        #: The run this session trains, tagged on its checkpoints (`checkpoint_metadata`).
        self.run_id = ""
        #: Tokens the backend processed so far (engine.metrics.cost), as the service bills them.
        self.usage = TokenUsage()
        #: The last publish whose named sampler save is not awaited yet.
        self._pending_save: _Publish | None = None

    @classmethod
    def from_config(
        cls,
        service_client: ServiceClient,
        config: RunConfig,
        *,
        on_event: Callable[[Event], None] | None = None,
        clock: Clock | None = None,
        rest_client: RemovesCheckpoints | None = None,
    ) -> BackendSession:
        """A policy with every backend setting of a `RunConfig`."""
        from tinker_tui.engine.config import parse_loss_fn_config

        return cls(
            service_client,
            base_model=config.base_model,
            lora_rank=config.lora_rank,
            seed=config.seed,
            renderer_name=config.renderer or None,
            loss_fn_config=parse_loss_fn_config(config.loss_fn_config),
            adam_beta1=config.adam_beta1,
            adam_beta2=config.adam_beta2,
            adam_eps=config.adam_eps,
            weight_decay=config.weight_decay,
            grad_clip_norm=config.grad_clip_norm,
            sampler_checkpoint_every=config.sampler_checkpoint_every,
            keep_last_checkpoints=config.keep_last_checkpoints,
            keep_every_checkpoints=config.keep_every_checkpoints,
            sampler_clients_to_keep=config.sampler_clients_to_keep,
            kl_penalty_coef=config.kl_penalty_coef,
            sampling=config.sampling,
            record_stability_info=config.loss_fn == "stable_reinforce",
            retry=RetryPolicy(
                timeout=config.backend_timeout,
                attempts=config.backend_retries + 1,
                slow_after=config.backend_wait_report,
                unreachable_after=config.backend_unreachable_after,
            ),
            on_event=on_event,
            clock=clock,
            rest_client=rest_client,
        )

    # ------------------------------------------------------------------ events
    def _now(self) -> float:
        return self.clock.now() if self.clock is not None else time.time()

    def _log(self, level: str, message: str) -> None:
        if self.on_event is None:
            return
        from tinker_tui.engine.events import LogEmitted

        self.on_event(LogEmitted(time=self._now(), level=level, message=message))

    def _report_wait(self, wait: Wait) -> None:
        if self.on_event is None:
            return
        from tinker_tui.engine.events import BackendWaited

        self.on_event(
            BackendWaited(
                time=self._now(),
                operation=wait.operation,
                reason=wait.reason,
                attempt=wait.attempt,
                delay=wait.delay,
            )
        )
        # Concurrent calls of one kind (32 samples) that wait on the same trouble report at
        # about the same time: one log line per kind and report interval says it; each
        # still has its event.
        if wait.retrying or self._once_per(self.retry.slow_after * 0.9, "slow", wait.operation):
            self._log("warning", wait.describe())

    async def _call(
        self,
        operation: str,
        call: Callable[[int], Awaitable[T]],
        *,
        retry: bool = True,
        abandon_on_stop: bool = False,
    ) -> T:
        return await call_with_retry(
            call,
            operation=operation,
            policy=self.retry,
            on_wait=self._report_wait,
            retry=retry,
            context=self.wait_context,
            abandon_on_stop=abandon_on_stop,
        )

    def interrupt(self) -> None:
        """The run is stopping: calls waiting on a degraded backend (reported, or sleeping
        before a retry) and start-up calls give up with `BackendInterrupted`."""
        self.wait_context.stopping.set()

    def _once_per(self, seconds: float, *key: str) -> bool:
        now = time.monotonic()
        if now - self._shown.get(key, float("-inf")) < seconds:
            return False
        self._shown[key] = now
        return True

    def _on_notice(self, notice: Notice) -> None:
        """What the SDK did on its own (on the loop's thread: see `_watch_sdk`)."""
        if notice.kind == "retry" and self._once_per(5.0, notice.endpoint, notice.cause):
            self._report_wait(
                Wait(
                    self.backend_label,
                    notice.endpoint,
                    notice.cause,
                    notice.attempt + 1,
                    notice.delay,
                    True,
                )
            )
        elif notice.kind == "error" and self._once_per(5.0, notice.endpoint, notice.cause):
            self._report_failure(notice.endpoint, notice.cause)
        elif notice.kind == "log" and self._once_per(60.0, notice.cause):
            self._log(notice.level, f"Tinker SDK: {notice.cause}")

    def _report_failure(self, endpoint: str, cause: str) -> None:
        """A request the SDK's HTTP client gave up on (its session code may try again)."""
        if self.on_event is None:
            return
        from tinker_tui.engine.events import BackendWaited

        self.on_event(
            BackendWaited(
                time=self._now(),
                operation=endpoint,
                reason=f"{self.backend_label}: {cause}",
                attempt=0,
                delay=0.0,
            )
        )
        self._log("warning", f"{self.backend_label}: {endpoint} {cause}")

    def _watch_sdk(self) -> None:
        watch = self.watch
        if watch is None or watch.on_notice is not None:
            return
        loop = asyncio.get_running_loop()

        def notify(notice: Notice) -> None:  # from the SDK's threads: handled on this loop
            loop.call_soon_threadsafe(self._on_notice, notice)

        watch.on_notice = notify
        watch.install()

    async def close(self, status: str, detail: str | None = None, timeout: float = 5.0) -> None:
        """Finish the backend session ("success", "errored" or "interrupted"): the SDK's
        `ServiceClient.close`, bounded by `timeout` (a service that does not answer ends
        the session itself when its heartbeats stop)."""
        service = self.service_client
        close = service.close if isinstance(service, ClosesSession) else None
        try:
            if self._pending_save is not None:  # the last step's sampler save, recorded
                await asyncio.wait_for(self.settle_sampler_save(), timeout)
            # No training client, no session to finish: the SDK makes its session on the
            # first call, and a session still being made cannot be closed (its close waits
            # for it); the service ends it when its heartbeats stop.
            if close is not None and self.training_client is not None:
                await asyncio.wait_for(sdk_call(close, status, detail), timeout)
        except Exception as exc:
            text = str(exc) or f"no answer within {timeout:g} s"
            self._log(
                "warning",
                f"{self.backend_label}: could not close the session ({type(exc).__name__}: {text})",
            )
        finally:
            if self.watch is not None:
                self.watch.uninstall()
                self.watch.on_notice = None

    def _training(self) -> TrainingClient:
        """The training client; `start` makes it."""
        if self.training_client is None:
            raise RuntimeError("the backend session is not started (call start first)")
        return self.training_client

    def _adam(self, learning_rate: float) -> tinker.AdamParams:
        return tinker.AdamParams(learning_rate=learning_rate, **self.adam)

    # ------------------------------------------------------------------ life cycle
    async def start(
        self, *, from_state: str | None = None, version: int = 0, with_optimizer: bool = True
    ) -> None:
        """Create the training client (fresh, or from a saved state: its weights, and its
        optimizer state unless `with_optimizer` is False) and sampler `version`.

        The first call builds the SDK's session (blocking, retried by the SDK): on a daemon
        thread, abandoned if the run stops meanwhile."""
        self._watch_sdk()
        service = self.service_client
        if from_state is None:
            self.training_client = await self._call(
                "create training client",
                lambda _: sdk_call(
                    service.create_lora_training_client,
                    base_model=self.base_model,
                    rank=self.lora_rank,
                    seed=self.seed,
                ),
                abandon_on_stop=True,
            )
        else:
            from_path = (
                service.create_training_client_from_state_with_optimizer
                if with_optimizer
                else service.create_training_client_from_state
            )
            self.training_client = await self._call(
                "create training client from state",
                lambda _: sdk_call(from_path, from_state),
                abandon_on_stop=True,
            )
        training = self._training()
        self.session_id = _sdk_session_id(service, training) if self.tinker_sdk else ""
        if self.session_id and self.on_event is not None:
            from tinker_tui.engine.events import BackendSessionOpened

            self.on_event(
                BackendSessionOpened(
                    time=self._now(), session_id=self.session_id, base_model=self.base_model
                )
            )
        load = _sdk_tokenizer if self.tinker_sdk else _own_tokenizer
        self.tokenizer = await self._call(
            "get tokenizer",
            lambda _: on_daemon_thread(load, training, name="get-tokenizer"),
            retry=False,
            abandon_on_stop=True,
        )
        warnings: list[str] = []  # make_renderer runs on a thread: log its words after
        self.renderer, self.renderer_name = await on_daemon_thread(
            make_renderer,
            self.base_model,
            self.tokenizer,
            self.requested_renderer,
            warn=warnings.append,
            name="make-renderer",
        )
        for message in warnings:
            self._log("warning", message)
        self.end_tokens = await on_daemon_thread(
            declared_end_tokens, self.tokenizer, self.base_model, name="end-tokens"
        )
        if self.kl_penalty_coef > 0 and self.reference is None:
            # The untrained base model, as tinker-cookbook's KL reference defaults to.
            self.reference = await self._call(
                "create KL reference sampler",
                lambda _: service.create_sampling_client(base_model=self.base_model),
            )
        self.version = version
        await self._publish(version)

    def _submit_publish(self, version: int, suffix: str = "") -> _Publish:
        """Submit the snapshot of the weights as sampler `version` (and their save, if due)
        without awaiting either: submitted after a step's optim_step they hold its weights
        (the service runs a model's requests in order) and share its clock cycle."""
        training = self._training()
        name = checkpoint_name(version, suffix)
        every = self.sampler_checkpoint_every
        started = time.perf_counter()
        snapshot = self._new_sampler(version)
        saved = (
            training.save_weights_for_sampler(
                name, user_metadata=self.checkpoint_metadata(version, version)
            )
            if every and version % every == 0
            else None
        )
        return _Publish(version, name, snapshot, saved, started)

    @property
    def inflight(self) -> bool:
        """Whether rollouts sample from the in-flight sampler (`sampling = "inflight"`)."""
        return self.sampling == "inflight"

    def _new_sampler(self, version: int) -> Awaitable[SamplingClient]:
        """Submit the save that makes the sampling client of `version`: a snapshot, or an
        in-flight save (whose order the local backend's responses are told apart by)."""
        training = self._training()
        record = self.record_stability_info
        if not self.inflight:
            return training.save_weights_and_get_sampling_client(record_stability_info=record)
        self._inflight_saves.append(version)
        return training.save_weights_and_get_sampling_client(
            kind="inflight", record_stability_info=record
        )

    async def _publish(self, version: int, suffix: str = "") -> float:
        """Snapshot the weights as sampler `version` (and save them, if due); returns the
        seconds it took."""
        publish = self._submit_publish(version, suffix)
        await self._finish_publish(publish)
        await self.settle_sampler_save()
        return time.perf_counter() - publish.started

    async def _finish_publish(self, publish: _Publish) -> None:
        """Await the snapshot and make it the current sampler. The named save's outcome is
        kept pending (`settle_sampler_save`): nothing waits for it but its record."""
        client = await self._call(
            "publish weights",
            lambda attempt: (
                publish.snapshot if attempt == 1 else self._new_sampler(publish.version)
            ),
        )
        # Version and client change together: a request never sees one without the other.
        self.version = publish.version
        self.sampling_client = client
        if self.inflight:  # earlier in-flight clients have moved on: they are not their versions
            self.samplers.drop_published()
        self.samplers.put(publish.version, client, current=self.version)
        await self.settle_sampler_save()  # an earlier one, if still pending
        if publish.saved is not None:
            self._pending_save = publish

    async def settle_sampler_save(self) -> None:
        """Await the last sampler-weights save and record its checkpoint. The trainer
        submits the next step before this (`train`), so the save's round trip overlaps the
        next forward_backward; a checkpoint, a publish and the end of the run settle it."""
        publish, self._pending_save = self._pending_save, None
        if publish is None or publish.saved is None:
            return
        training = self._training()
        name, saved = publish.name, publish.saved
        try:
            response = await self._call(
                "save sampler weights",
                lambda attempt: (
                    saved
                    if attempt == 1
                    else training.save_weights_for_sampler(
                        f"{name}-retry{attempt}",
                        user_metadata=self.checkpoint_metadata(publish.version, publish.version),
                    )
                ),
            )
        except DiskFull:
            raise  # every later write fails too: stop now, saying why
        except Exception as exc:  # a missing copy on disk must not stop training
            self._log(
                "warning", f"could not save sampler weights {name}: {type(exc).__name__}: {exc}"
            )
            return
        await self.retention.record(
            CheckpointRecord("sampler", publish.version, name, response.path)
        )

    # ------------------------------------------------------------------ sampling
    async def sample_from(self, model_path: str | None) -> None:
        """Sample from saved sampler weights (`model_path`), or from the base model as it is
        (None), instead of the trained policy: what an evaluation of a checkpoint samples.
        Call after `start` (the tokenizer and renderer are the base model's)."""
        service = self.service_client
        if model_path is None:
            client = await self._call(
                "create base model sampler",
                lambda _: service.create_sampling_client(base_model=self.base_model),
            )
        else:
            client = await self._call(
                "load sampler weights",
                lambda _: service.create_sampling_client(model_path=model_path),
            )
        self.sampling_client = client
        self.samplers.put(self.version, client, current=self.version, loaded_from=model_path)

    def available_versions(self) -> list[int]:
        """Policy versions that can be sampled: loaded, or saved as sampler weights."""
        return sorted(self.samplers.versions() | self.retention.sampler_steps())

    async def sampling_client_for(self, version: int) -> SamplingClient:
        """The sampling client of an earlier (or the current) policy version."""
        client = self.samplers.get(version)
        if client is not None:
            return client
        record = self.retention.sampler_record(version)
        if record is None:
            available = ", ".join(str(v) for v in self.available_versions()) or "none"
            raise UnknownVersionError(
                f"policy version {version} is not available (available: {available})"
            )
        service = self.service_client
        client = await self._call(
            "load sampler weights", lambda _: service.create_sampling_client(model_path=record.path)
        )
        loaded = self.samplers.get(version)
        if loaded is not None:  # loaded concurrently by another request
            return loaded
        self.samplers.put(version, client, current=self.version, loaded_from=record.path)
        return client

    async def sample(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        *,
        version: int | None = None,
        top_logprobs: int = 0,
        constraint: Any = None,
        constraint_prefix: str = "",
    ) -> tuple[tinker.SampleResponse, int]:
        """Sample from the current policy (or `version`); returns the response and the
        version that produced it. `constraint` (with the text it starts from) keeps the
        samples' text within a shape where the backend samples in this process (the local
        backend's `sample_constrained`); elsewhere it is not applied."""
        client: SamplingClient | None
        if version is None or version == self.version:
            client, version = self.sampling_client, self.version
        else:
            client = await self.sampling_client_for(version)
        if client is None:
            raise RuntimeError("the backend session is not started (call start first)")
        extra = {"topk_sample_logprobs": top_logprobs} if top_logprobs else {}
        constrained = (
            client.sample_constrained
            if constraint is not None and isinstance(client, SamplesConstrained)
            else None
        )
        if constrained is not None:
            response = await self._call(
                "sample",
                lambda _: constrained(
                    prompt, num_samples, sampling_params, constraint, constraint_prefix, **extra
                ),
            )
        else:
            response = await self._call(
                "sample",
                lambda _: client.sample(
                    prompt=prompt, num_samples=num_samples, sampling_params=sampling_params, **extra
                ),
            )
        self.usage.add_sample(
            prompt.length,
            num_samples,
            response.prompt_cache_hit_tokens or 0,
            sum(len(s.tokens) for s in response.sequences),
        )
        return response, self._made_by(response, version)

    def _made_by(self, response: tinker.SampleResponse, version: int) -> int:
        """The version a response was sampled with: `version` (the client's; with the
        in-flight sampler, the oldest its tokens can come from), or, where the local
        backend names the in-flight publish that made its tokens, that publish's version."""
        publishes = [getattr(s, "weights_publish", 0) for s in response.sequences]
        if not self.inflight or not publishes or not all(publishes):
            return version
        saves = self._inflight_saves
        made = [saves[n - 1] for n in publishes if n <= len(saves)]
        return min(made) if len(made) == len(publishes) else version

    def can_constrain(self) -> bool:
        """Whether `sample` applies a constraint: the backend samples in this process."""
        return isinstance(self.sampling_client, SamplesConstrained)

    # ------------------------------------------------------------------ training
    def build_datums(self, groups: Sequence[TrajectoryGroup]) -> DatumBatch:
        """Datums for every sampled assistant turn (`engine.backend.datums.build_datums`)."""
        return build_datums(groups, provenance=self.record_stability_info)

    async def apply_kl_penalty(self, datums: DatumBatch) -> tuple[DatumBatch, dict[str, float]]:
        """The batch with the KL penalty against the base model added to its advantages
        (`kl_penalized_advantages`), and the step's `kl/...` metrics. The base model scores
        every Datum's sequence from its first sampled token on."""
        started = time.perf_counter()
        reference = self.reference
        if reference is None:
            raise RuntimeError("no KL reference: the session was started without the penalty")
        inputs = [d.model_input.to_ints() for d in datums]
        targets = [d.loss_fn_inputs["target_tokens"].tolist() for d in datums]
        sampled = [d.loss_fn_inputs["logprobs"].tolist() for d in datums]
        advantages = [d.loss_fn_inputs["advantages"].tolist() for d in datums]
        masks = datums.masks or [[1.0 if a else 0.0 for a in adv] for adv in advantages]

        async def base_logprobs(index: int) -> list[float]:
            full = inputs[index] + targets[index][-1:]
            first = next((j for j, m in enumerate(masks[index]) if m), None)
            if first is None:
                return [0.0] * len(targets[index])
            last_n = len(full) - (first + 1)  # from the first sampled target to the end
            scored = await self._call(
                "KL reference logprobs",
                lambda _: reference.compute_logprobs(
                    tinker.ModelInput.from_ints(full), prompt_logprobs_last_n=last_n
                ),
            )
            self.usage.add_prefill(len(full))
            # scored[i + 1] is log p_base(full[i + 1] | full[:i + 1]), i.e. of target i
            return [0.0 if v is None else float(v) for v in list(scored)[1:]]

        base = await asyncio.gather(*(base_logprobs(i) for i in range(len(datums))))
        new_advantages, mean_kl = await asyncio.to_thread(
            kl_penalized_advantages, advantages, sampled, base, masks, self.kl_penalty_coef
        )
        batch = DatumBatch(
            [
                carry_provenance(rl_datum(i, t, s, a), old)
                for i, t, s, a, old in zip(
                    inputs, targets, sampled, new_advantages, datums, strict=True
                )
            ],
            datums.metrics,
            masks,
            datums.sources,
            datums.versions,
        )
        return batch, {
            keys.KL_POLICY_BASE: mean_kl,
            keys.KL_REFERENCE_TIME: time.perf_counter() - started,
        }

    async def train(
        self,
        datums: list[tinker.Datum],
        *,
        loss_fn: str = "importance_sampling",
        learning_rate: float,
        num_substeps: int = 1,
    ) -> TrainResult:
        """One optimizer step (with the KL penalty, when it is on), then publish the next
        sampling client (version + 1). With `num_substeps` > 1 the datums are split into
        that many minibatches (in order, sizes differing by one at most; fewer when there
        are fewer datums), each its own forward_backward and optim_step at the same
        learning rate, as tinker-cookbook's substeps: a minibatch after the first is scored
        by the weights its predecessors moved, so its logprobs are the trainer's then."""
        kl_metrics: dict[str, float] = {}
        if self.kl_penalty_coef > 0 and self.reference is not None and datums:
            batch = datums if isinstance(datums, DatumBatch) else DatumBatch(datums)
            datums, kl_metrics = await self.apply_kl_penalty(batch)
        training = self._training()
        config = self.loss_fn_config or None
        # The whole step is submitted before any of it is awaited: forward_backward,
        # optim_step and the next sampler's snapshot (and save) run in one of the service's
        # clock cycles. Neither fb nor optim is retried: a step must not be applied twice
        # (and a failed one poisons the client).
        started = time.perf_counter()
        # RunConfig allows only LOSS_FNS, each a loss the SDK names (config.py does not
        # import the SDK, so its setting is a plain str).
        loss = cast("tinker.types.LossFnType", loss_fn)
        submitted = [
            (
                training.forward_backward(minibatch, loss, config),
                training.optim_step(self._adam(learning_rate)),
            )
            for minibatch in minibatches(datums, num_substeps)
        ]
        publish = self._submit_publish(self.version + 1)
        num_tokens = sum(d.model_input.length for d in datums)
        self.usage.add_trained(num_tokens)
        loss_sum, outputs, norms = 0.0, list[Any](), list[float]()
        fb_time = optim_time = 0.0
        mark = started
        for fb_future, optim_future in submitted:
            try:
                fb = await self._call("forward_backward", _submitted(fb_future), retry=False)
            except tinker.BadRequestError as exc:
                if not self.record_stability_info:
                    raise
                raise SequencesRefused(
                    f"the backend refused the recorded sequences of this step: "
                    f"{_refusal(exc)}; their groups must be sampled again (--resume "
                    "re-samples every group that was not trained)"
                ) from None
            fb_done = time.perf_counter()
            optim = await self._call("optim_step", _submitted(optim_future), retry=False)
            optim_done = time.perf_counter()
            fb_time, optim_time = fb_time + fb_done - mark, optim_time + optim_done - fb_done
            mark = optim_done
            loss_sum += float(fb.metrics.get("loss:sum", 0.0))
            outputs.extend(getattr(fb, "loss_fn_outputs", None) or ())
            grad_norm = (optim.metrics or {}).get("grad_norm:mean")
            if grad_norm is not None:  # where the backend reports it
                norms.append(float(grad_norm))
        await self._finish_publish(publish)
        metrics = {
            keys.TRAIN_LOSS_SUM: loss_sum,
            keys.FORWARD_BACKWARD_TIME: fb_time,
            keys.OPTIM_STEP_TIME: optim_time,
            keys.PUBLISH_WEIGHTS_TIME: time.perf_counter() - mark,
        }
        if norms:  # the mean over the substeps
            metrics[keys.GRAD_NORM] = sum(norms) / len(norms)
        if num_substeps > 1:
            metrics[keys.OPTIM_STEPS] = float(len(submitted))
        answered = SimpleNamespace(loss_fn_outputs=outputs)  # every minibatch's, in order
        if isinstance(datums, DatumBatch):  # how they were built
            metrics.update(datums.metrics)
        metrics.update(kl_metrics)
        trainer, entropy, mismatch = await asyncio.to_thread(trainer_outputs, datums, answered)
        metrics.update(mismatch)
        return TrainResult(self.version, metrics, len(datums), num_tokens, trainer, entropy)

    def supervised_datums(
        self, conversations: Sequence[Sequence[Mapping[str, Any]]]
    ) -> list[tinker.Datum]:
        """One cross-entropy Datum per conversation, rendered by this session's renderer."""
        return supervised_datums(self.renderer, conversations)

    async def train_supervised(
        self, conversations: Sequence[Sequence[Mapping[str, Any]]], *, learning_rate: float
    ) -> float:
        """One cross-entropy step on whole conversations (last assistant turn trained)."""
        return await self.train_cross_entropy(
            self.supervised_datums(conversations), learning_rate=learning_rate
        )

    async def train_cross_entropy(
        self, datums: Sequence[tinker.Datum], *, learning_rate: float
    ) -> float:
        """One cross-entropy step on `supervised_datums`; returns the summed loss. No new
        policy version (call `publish` when done)."""
        training = self._training()
        fb_future = training.forward_backward(list(datums), "cross_entropy")
        optim_future = training.optim_step(self._adam(learning_rate))
        self.usage.add_trained(sum(d.model_input.length for d in datums))
        fb = await self._call("forward_backward", lambda _: fb_future, retry=False)
        await self._call("optim_step", lambda _: optim_future, retry=False)
        return float(fb.metrics.get("loss:sum", 0.0))

    async def save_training_state(
        self, name: str, metadata: Mapping[str, str] | None = None
    ) -> str:
        """Save weights and optimizer state without recording a run checkpoint (no
        retention, not a resume point); returns its path."""
        training = self._training()
        response = await self._call(
            "save state",
            lambda attempt: training.save_state(
                name, overwrite=attempt > 1, user_metadata=dict(metadata or {})
            ),
        )
        return str(response.path)

    async def load_training_state(self, path: str) -> None:
        """Replace the training client's weights and optimizer state with a saved state of
        the same model (no new policy version: call `publish`)."""
        training = self._training()
        await self._call(
            "load state", lambda _: training.load_state_with_optimizer(path), retry=False
        )

    async def publish(self) -> None:
        """Publish the current weights as the sampling client (after supervised steps)."""
        await self._publish(self.version, suffix="-warmup")

    # ------------------------------------------------------------------ checkpoints
    async def save_state(self, name: str, *, step: int | None = None) -> str:
        """Full checkpoint with optimizer state; returns its tinker:// path.

        `step` (default: the current policy version) orders it for the retention policy."""
        await self.settle_sampler_save()  # recorded in the order they were saved
        training = self._training()
        response = await self._call(
            "save state",
            lambda attempt: training.save_state(
                name,
                overwrite=attempt > 1,
                user_metadata=self.checkpoint_metadata(
                    self.version, self.version if step is None else step
                ),
            ),
        )
        await self.retention.record(
            CheckpointRecord("state", self.version if step is None else step, name, response.path)
        )
        return str(response.path)

    def checkpoint_metadata(self, version: int, step: int) -> dict[str, str]:
        """What a checkpoint is tagged with (the SDK's `user_metadata`, strings only), so
        it can be found by run and step on the service: run id, step, policy version."""
        return {"run_id": self.run_id, "step": str(step), "policy_version": str(version)}

    async def rewind(self, path: str, version: int, step: int) -> None:
        """Go back to a full checkpoint of this run (a rollback), taken at `step`: its weights
        and optimizer state become policy `version`; full checkpoints of later steps and
        sampler weights of later versions are deleted (their names are used again as the
        run goes on)."""
        await self.load_training_state(path)
        await self.retention.rewind(step, version)
        self.samplers.drop_after(version)
        self.rewinds += 1
        await self._publish(version, suffix=f"-rewind{self.rewinds}")

    @property
    def checkpoints(self) -> list[CheckpointRecord]:
        """Every checkpoint this session saved and still keeps, oldest first."""
        return self.retention.checkpoints

    def adopt_checkpoints(self, records: Sequence[CheckpointRecord]) -> None:
        """Checkpoints an earlier process of this run saved (`CheckpointRetention.adopt`)."""
        self.retention.adopt(records)

    async def _remover(self) -> RemovesCheckpoints | None:
        """What deletes checkpoints: the local backend's folders by path, or a
        `tinker.RestClient` (its constructor fetches the service's config: off the loop)."""
        if self._rest is None:
            if isinstance(self.service_client, KeepsCheckpointsHere):
                self._rest = LocalCheckpointRemover(self.service_client.checkpoint_dir)
            elif self.tinker_sdk:
                self._rest = await self._call(
                    "connect to the checkpoint API", lambda _: sdk_call(rest_client)
                )
        return self._rest


def _sdk_session_id(service_client: ServiceClient, training_client: TrainingClient) -> str:
    """The SDK's session id: its session holder's (no public accessor in 0.38), else the
    prefix of the training model's id, which the SDK derives as `<session>:train:<n>`."""
    session = tinker_private.session_id(service_client)
    if session:
        return session
    model_id = str(training_client.model_id or "")
    return model_id.split(":train:")[0] if ":train:" in model_id else ""


def _own_tokenizer(training_client: TrainingClient) -> Any:
    return training_client.get_tokenizer()


def _sdk_tokenizer(training_client: TrainingClient) -> Any:
    from tinker_tui.engine.backend.hub_tokenizer import load_tokenizer

    return load_tokenizer(training_client)


def minibatches(datums: Sequence[tinker.Datum], count: int) -> list[list[tinker.Datum]]:
    """`datums` in `count` consecutive minibatches whose sizes differ by one at most (the
    first ones larger); fewer, one datum each, when there are fewer datums than `count`."""
    items = list(datums)
    count = max(1, min(count, len(items)))
    size, extra = divmod(len(items), count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def _submitted(future: Awaitable[T]) -> Callable[[int], Awaitable[T]]:
    """A call that is never retried: every attempt awaits the one request submitted."""
    return lambda _: future
