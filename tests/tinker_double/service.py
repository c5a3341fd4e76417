"""What the double serves, behind the HTTP layer: sessions, training models, samplers,
futures and checkpoints, all backed by the embedded local backend (so it really trains).

Ids follow the service's scheme as the SDK sees it: a session `sess-…`; a training model
`<session>:train:<model_seq_id>` (the SDK derives the same id itself for load_weights); a
sampler `<session>:sample:<sampling_session_seq_id>`; checkpoint paths
`tinker://<model id>/weights/<name>` and `.../sampler_weights/<name>`. The local backend keeps
its own paths; the double maps between the two. As the service documents them, sampler
weights are what a sampler loads; a full state (`weights/`) only resumes training.

A hub name can be served from a local folder (`served_models`, `--serve-model NAME=FOLDER`):
requests name the hub name, the local backend loads the folder, and everything the service
reports — get_info (whose tokenizer is the folder's), samplers, training runs, checkpoints'
weights info, capabilities — names the hub name, so a client picks that family's renderer.
With `only_served` (`--only-served`) the served hub names are the whole lineup, as on the
real service: capabilities list only them, and a training client for any other model is
refused with a 400 (a retired model, say).

In-flight sampling (`save_weights_and_get_sampling_client(kind="inflight")`, the request's
`kind`): every in-flight sampler of a training model follows that model's one mutable
weights target, which each in-flight save moves (the local backend's `InflightWeights`), so
a request on an older sampler runs on the newest weights published before it starts; the
response, as the service's, does not say which (the wire drops the local backend's
`weights_publish`). `inflight_saves` records every in-flight save and `inflight_samples`
every request on an in-flight sampler, with the publish its sampler was made by and the
publish its tokens came from: a request whose two differ spans a weight update.

Requests on one training model run in `seq_id` order, as the service guarantees (the SDK
numbers them; chunks of one forward_backward may arrive out of order). Everything here runs
on the double's event loop; torch work runs on the local backend's thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import secrets
import shutil
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tinker import types

from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient, checkpoints, peft_format
from tinker_tui.engine.local.hf_tokenizer import TOKENIZER_DIR
from tinker_tui.engine.local.model import max_context_of

from .faults import Faults


class ServiceError(Exception):
    """Answered with an HTTP status and a JSON detail."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def _pipe(source: Any, target: Future, convert: Callable[[Any], Any] = lambda v: v) -> None:
    """Settle `target` with `convert(result of source)`, or with its error, when `source`
    (a concurrent or an SDK future) is done."""
    inner = source.future() if hasattr(source, "future") else source

    def done(f: Future) -> None:
        try:
            target.set_result(convert(f.result()))
        except BaseException as exc:  # the error is the future's answer
            target.set_exception(exc)

    inner.add_done_callback(done)


def _chain(source: Any, convert: Callable[[Any], Any]) -> Future:
    outer: Future = Future()
    _pipe(source, outer, convert)
    return outer


def _begin(begin: Callable[[], Future], target: Future) -> None:
    try:
        _pipe(begin(), target)
    except Exception as exc:  # refused at once (bad arguments)
        target.set_exception(exc)


class CycleClock:
    """Tinker's lock-step clock cycles for training calls ("Under the Hood"): a clock ticks
    every `period` seconds; the requests submitted since the last tick start at the next
    one, in order, so one that misses a cycle waits for the next. `period` 0: no clock,
    every request starts as soon as it is in order.

    Ticks are scheduled on the double's loop only while work waits (no idle ticking);
    `cycles` records (cycle number, model id, request kind) of every request a tick started,
    where cycle n is the tick at `epoch + n * period`."""

    def __init__(self, period: float = 0.0) -> None:
        self.period = period
        self.epoch = time.monotonic()
        self.cycles: list[tuple[int, str, str]] = []
        self._due: list[tuple[str, str, Callable[[], Future], Future]] = []
        self._tick: asyncio.TimerHandle | None = None

    def start(self, model_id: str, kind: str, begin: Callable[[], Future], target: Future) -> None:
        if self.period <= 0:
            _begin(begin, target)
            return
        self._due.append((model_id, kind, begin, target))
        if self._tick is None:
            loop = asyncio.get_running_loop()
            now = time.monotonic()
            number = int((now - self.epoch) // self.period) + 1
            at = loop.time() + (self.epoch + number * self.period - now)
            self._tick = loop.call_at(at, self._run, number)

    def _run(self, number: int) -> None:
        self._tick = None
        due, self._due = self._due, []
        for model_id, kind, begin, target in due:
            self.cycles.append((number, model_id, kind))
            _begin(begin, target)


class Sequencer:
    """Starts a model's requests in `seq_id` order, whatever order they arrive in (at the
    clock's next cycle, when the double models them)."""

    def __init__(self, model_id: str = "", clock: CycleClock | None = None) -> None:
        self.next = 1
        self.model_id = model_id
        self.clock = clock or CycleClock()
        self._waiting: dict[int, tuple[str, Callable[[], Future], Future]] = {}

    def submit(self, seq_id: int | None, start: Callable[[], Future], kind: str = "") -> Future:
        outer: Future = Future()
        if seq_id is None or seq_id < self.next:
            raise ServiceError(400, f"seq_id {seq_id} is not after {self.next - 1}")
        self._waiting[seq_id] = (kind, start, outer)
        while self.next in self._waiting:
            what, begin, target = self._waiting.pop(self.next)
            self.next += 1
            self.clock.start(self.model_id, what, begin, target)
        return outer


@dataclass
class Session:
    session_id: str
    sdk_version: str
    created: float
    heartbeats: int = 0
    finished: dict[str, Any] | None = None  # {"reason": ..., "detail": ...}


@dataclass
class Model:
    model_id: str
    session_id: str
    client: Any  # LocalTrainingClient
    sequencer: Sequencer = field(default_factory=Sequencer)

    def __post_init__(self) -> None:
        self.sequencer.model_id = self.model_id


@dataclass
class Sampler:
    sampler_id: str
    base_model: str
    model_path: str | None
    client: Future  # of a LocalSamplingClient
    #: The model's in-flight publish that made it (0: a snapshot or saved weights).
    inflight_publish: int = 0


@dataclass(frozen=True)
class InflightSave:
    """An in-flight save: the sampler it made, and its number among the model's publishes."""

    model_id: str
    sampler_id: str
    publish: int


@dataclass(frozen=True)
class InflightSample:
    """A sampling request on an in-flight sampler: the publish that made its sampler (the
    oldest weights it may use) and the publish whose weights made its tokens."""

    sampler_id: str
    sampler_publish: int
    used_publish: int


@dataclass
class RecordedSequence:
    """A sequence sampled with `record_stability_info`: whose session it is, the local
    backend's id of it (once sampled), and when a request last used it (its day restarts)."""

    session_id: str
    local_id: str | None
    last_used: float


@dataclass
class PendingFuture:
    request_id: str
    kind: str  # the request that made it: create_model, forward_backward, sample, ...
    future: Future  # of an SDK type: a pydantic model, SampleResponse, ForwardBackwardOutput
    created: float


#: The double's own rate card, USD per million tokens (what `estimated_cost_usd` uses).
RATES = {
    "training": 3.0,
    "sampling_prefill": 1.0,
    "sampling_prefill_cached": 0.1,
    "sampling_sample": 2.0,
}


@dataclass
class UsageRecord:
    """Billable usage as the service meters it: one request's tokens of one kind."""

    time: float
    session_id: str
    base_model: str
    kind: str  # training, sampling_prefill, sampling_sample
    tokens: int
    cached: bool = False


@dataclass
class CheckpointEntry:
    path: str  # tinker://<model id>/<kind>/<name>, as the SDK sees it
    local_path: str  # the local backend's own path
    kind: str  # "weights" or "sampler_weights"
    created: datetime


class ServedModels:
    """Hub names served from local folders: the one home of the mapping both ways."""

    def __init__(self, served: Mapping[str, str | Path] | None = None) -> None:
        self.folders: dict[str, str] = {}
        for name, folder in (served or {}).items():
            path = Path(folder).expanduser().resolve()
            if not (path / "config.json").is_file():
                raise ValueError(
                    f"--serve-model {name}={folder}: {path} holds no config.json "
                    "(a Hugging Face model folder is needed)"
                )
            self.folders[name] = str(path)
        self._names = {folder: name for name, folder in self.folders.items()}

    def local(self, name: str) -> str:
        """What the local backend loads for a requested base model."""
        return self.folders.get(name, name)

    def hub(self, local_name: str) -> str:
        """What the service reports for a model the local backend knows by `local_name`."""
        return self._names.get(local_name, local_name)


class DoubleService:
    def __init__(
        self,
        checkpoint_dir: Path,
        faults: Faults | None = None,
        served_models: Mapping[str, str | Path] | None = None,
        *,
        clock_cycle: float = 0.0,
        only_served: bool = False,
    ) -> None:
        self.served = ServedModels(served_models)
        #: Serve the served hub names only (the local backend's models are not listed).
        self.only_served = only_served
        #: Training calls run in lock-step clock cycles of this many seconds (0: at once).
        self.clock = CycleClock(clock_cycle)
        self.local = LocalServiceClient(checkpoint_dir=checkpoint_dir)
        self.checkpoint_dir = Path(checkpoint_dir)
        self.faults = faults or Faults()
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, Model] = {}
        self.samplers: dict[str, Sampler] = {}
        self.futures: dict[str, PendingFuture] = {}
        self.checkpoints: dict[str, CheckpointEntry] = {}
        #: Every call, in order: (method, path under /api/v1/, status).
        self.calls: list[tuple[str, str, int]] = []
        #: Checkpoints deleted through `DELETE training_runs/.../checkpoints/...`.
        self.deleted: list[str] = []
        #: Billable usage, as `billing/usage/events` reports it (hourly buckets).
        self.usage: list[UsageRecord] = []
        #: Every in-flight save, and every request on an in-flight sampler, in order.
        self.inflight_saves: list[InflightSave] = []
        self.inflight_samples: list[InflightSample] = []
        #: Sequences sampled with `record_stability_info`, by the id the SDK sees.
        self.recorded: dict[str, RecordedSequence] = {}
        #: Every recorded sequence a stable_reinforce request trained on.
        self.trained_sequences: set[str] = set()
        self._ids = itertools.count(1)

    # ------------------------------------------------------------------ sessions
    def create_session(self, request: types.CreateSessionRequest) -> types.CreateSessionResponse:
        session_id = f"sess-{secrets.token_hex(6)}"
        self.sessions[session_id] = Session(session_id, request.sdk_version, time.time())
        return types.CreateSessionResponse(session_id=session_id)

    def session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise ServiceError(404, f"no session {session_id}")
        if session.finished is not None:
            raise ServiceError(410, f"session {session_id} is finished")
        return session

    def heartbeat(self, session_id: str) -> None:
        self.session(session_id).heartbeats += 1

    def finish(self, session_id: str, body: dict[str, Any]) -> None:
        session = self.sessions.get(session_id)
        if session is None:
            raise ServiceError(404, f"no session {session_id}")
        if session.finished is None:  # first reason wins
            session.finished = {
                "reason": (body.get("reason") or {}).get("type"),
                "detail": body.get("detail"),
            }

    # ------------------------------------------------------------------ futures
    def _future(self, kind: str, future: Future, **extra: Any) -> dict[str, Any]:
        request_id = f"req-{next(self._ids)}"
        self.futures[request_id] = PendingFuture(request_id, kind, future, time.time())
        return {"request_id": request_id, **extra}

    def pending(self, request_id: str) -> PendingFuture:
        pending = self.futures.get(request_id)
        if pending is None:
            raise ServiceError(404, f"no future {request_id}")
        return pending

    # ------------------------------------------------------------------ models
    def model(self, model_id: str) -> Model:
        model = self.models.get(model_id)
        if model is None:
            raise ServiceError(404, f"no model {model_id}")
        self.session(model.session_id)
        return model

    def _register(self, session_id: str, model_id: str) -> Callable[[Any], Any]:
        def register(client: Any) -> Any:
            self.models[model_id] = Model(
                model_id, session_id, client, Sequencer(model_id, self.clock)
            )
            return client

        return register

    def create_model(self, request: types.CreateModelRequest) -> dict[str, Any]:
        self.session(request.session_id)
        if self.only_served and request.base_model not in self.served.folders:
            raise ServiceError(400, f"base model {request.base_model} is not supported")
        lora = request.lora_config or types.LoraConfig(rank=32)
        model_id = f"{request.session_id}:train:{request.model_seq_id}"
        register = self._register(request.session_id, model_id)
        created = self.local.create_lora_training_client(
            self.served.local(request.base_model),
            rank=lora.rank,
            seed=lora.seed,
            train_mlp=lora.train_mlp,
            train_attn=lora.train_attn,
            train_unembed=lora.train_unembed,
            optimizer=request.optimizer_config,
        )
        future = _chain(
            created,
            lambda client: (register(client), types.CreateModelResponse(model_id=model_id))[1],
        )
        return self._future("create_model", future, model_id=model_id)

    def get_info(self, model_id: str) -> types.GetInfoResponse:
        model = self.model(model_id)
        info = model.client.get_info()
        local_name = info.model_data.model_name
        tokenizer_id = self.faults.tokenizer_id or info.model_data.tokenizer_id
        if self.faults.tokenizer_id is None and local_name == DEFAULT_BASE_MODEL:
            # The embedded model's tokenizer, as a folder AutoTokenizer can load.
            tokenizer_id = str(TOKENIZER_DIR)
        elif self.faults.tokenizer_id is None and local_name in self.served.folders.values():
            tokenizer_id = local_name  # the served folder's own tokenizer
        name = self.served.hub(local_name or "")
        data = info.model_data.model_copy(update={"tokenizer_id": tokenizer_id, "model_name": name})
        return info.model_copy(
            update={"model_id": model_id, "model_data": data, "model_name": name}
        )

    def load_weights(self, request: types.LoadWeightsRequest) -> dict[str, Any]:
        local_path = self.local_path(request.path)
        if request.session_id is not None:  # a new training model from a checkpoint
            self.session(request.session_id)
            model_id = f"{request.session_id}:train:{request.model_seq_id}"
            make = (
                self.local.create_training_client_from_state_with_optimizer
                if request.optimizer
                else self.local.create_training_client_from_state
            )
            register = self._register(request.session_id, model_id)
            base_model = (
                self.served.local(request.base_model) if request.base_model is not None else None
            )
            future = _chain(
                make(local_path, base_model=base_model),
                lambda client: (
                    register(client),
                    types.LoadWeightsResponse(path=request.path, model_id=model_id),
                )[1],
            )
            return self._future("load_weights", future, model_id=model_id)
        model = self.model(request.model_id or "")
        load = (
            model.client.load_state_with_optimizer if request.optimizer else model.client.load_state
        )
        future = model.sequencer.submit(
            request.seq_id,
            lambda: _chain(
                load(local_path),
                lambda _: types.LoadWeightsResponse(path=request.path, model_id=model.model_id),
            ),
            "load_weights",
        )
        return self._future("load_weights", future, model_id=model.model_id)

    def forward_backward(
        self, request: types.ForwardBackwardRequest, forward_only: bool
    ) -> dict[str, Any]:
        model = self.model(request.model_id)
        fb = request.forward_backward_input
        data = list(fb.data)
        if fb.loss_fn == "stable_reinforce":
            data = self._provenance(model.session_id, data)
        call = model.client.forward if forward_only else model.client.forward_backward
        self.usage.append(
            UsageRecord(
                time.time(),
                model.session_id,
                model.client.get_info().model_data.model_name,
                "training",
                sum(d.model_input.length for d in fb.data),
            )
        )
        future = model.sequencer.submit(
            request.seq_id,
            lambda: call(data, fb.loss_fn, fb.loss_fn_config),
            "forward" if forward_only else "forward_backward",
        )
        return self._future(
            "forward" if forward_only else "forward_backward", future, model_id=model.model_id
        )

    def _provenance(self, session_id: str, data: list[types.Datum]) -> list[types.Datum]:
        """Check a stable_reinforce request's provenance as the service does (every datum
        names its sequences; each was recorded in this session and has not expired; the
        runs tile the fields), restart the named sequences' day, and name them by the local
        backend's ids for the training client underneath."""
        now, ttl = time.time(), self.faults.sequence_ttl
        used: set[str] = set()

        def local(index: int, spans: Any, field_name: str, length: int) -> list[Any]:
            if not spans:
                raise ServiceError(
                    400,
                    f"stable_reinforce: datum {index} has no {field_name}; every trained token "
                    "must name the sampled sequence behind it (Datum.with_provenance)",
                )
            if sum(s.length for s in spans) != length:
                raise ServiceError(
                    400,
                    f"stable_reinforce: datum {index}'s {field_name} cover "
                    f"{sum(s.length for s in spans)} positions, not its {length}",
                )
            out = []
            for span in spans:
                rec = self.recorded.get(span.sequence_id)
                if rec is None or rec.session_id != session_id or rec.local_id is None:
                    raise ServiceError(
                        400,
                        f"stable_reinforce: sequence_id {span.sequence_id!r} (datum {index}) "
                        "was not sampled with record_stability_info in this session",
                    )
                if now - rec.last_used > ttl:
                    raise ServiceError(
                        400,
                        f"stable_reinforce: sequence_id {span.sequence_id!r} (datum {index}) "
                        "has expired: recorded sequences are trainable for one day after "
                        "their last use",
                    )
                used.add(span.sequence_id)
                out.append(dataclasses.replace(span, sequence_id=rec.local_id))
            return out

        checked = []
        for index, datum in enumerate(data):
            targets = datum.loss_fn_inputs.get("target_tokens")
            n_targets = targets.shape[0] if targets is not None and targets.shape else 0
            trained = local(index, datum.loss_fn_input_spans, "loss_fn_input_spans", n_targets)
            read = local(
                index, datum.model_input_spans, "model_input_spans", datum.model_input.length
            )
            checked.append(
                dataclasses.replace(datum, model_input_spans=read, loss_fn_input_spans=trained)
            )
        for sequence_id in used:
            self.recorded[sequence_id].last_used = now
        self.trained_sequences |= used
        return checked

    def optim_step(self, request: types.OptimStepRequest) -> dict[str, Any]:
        model = self.model(request.model_id)
        future = model.sequencer.submit(
            request.seq_id, lambda: model.client.optim_step(request.optim_params), "optim_step"
        )
        return self._future("optim_step", future, model_id=model.model_id)

    # ------------------------------------------------------------------ checkpoints
    def _record_checkpoint(self, model: Model, local_path: str) -> str:
        _, kind, name = local_path.removeprefix("tinker://").split("/")
        path = f"tinker://{model.model_id}/{kind}/{name}"
        self.checkpoints[path] = CheckpointEntry(path, local_path, kind, datetime.now(UTC))
        return path

    def local_path(self, path: str) -> str:
        entry = self.checkpoints.get(path)
        if entry is None:
            raise ServiceError(404, f"no checkpoint {path}")
        return entry.local_path

    def save_weights(self, request: types.SaveWeightsRequest) -> dict[str, Any]:
        model = self.model(request.model_id)
        name = request.path or f"ckpt-{next(self._ids)}"
        future = model.sequencer.submit(
            request.seq_id,
            lambda: _chain(
                model.client.save_state(
                    name, overwrite=request.overwrite, user_metadata=request.user_metadata
                ),
                lambda saved: types.SaveWeightsResponse(
                    path=self._record_checkpoint(model, saved.path)
                ),
            ),
            "save_weights",
        )
        return self._future("save_weights", future, model_id=model.model_id)

    def save_weights_external(self, request: types.SaveWeightsExternalRequest) -> dict[str, Any]:
        """External (Hugging Face) weights: the local backend's sampler weights, whose
        adapter is in peft's layout, listed as ``tinker://<model>/external_weights/<name>``."""
        model = self.model(request.model_id)
        name = request.path

        def record(saved: Any) -> types.SaveWeightsExternalResponseInternal:
            path = f"tinker://{model.model_id}/external_weights/{name}"
            entry = CheckpointEntry(path, saved.path, "external_weights", datetime.now(UTC))
            self.checkpoints[path] = entry
            files = self.external_files(path)
            return types.SaveWeightsExternalResponseInternal(
                path=path, size_bytes=sum(f.stat().st_size for f in files.values())
            )

        future = model.sequencer.submit(
            request.seq_id,
            lambda: _chain(model.client.save_weights_for_sampler(f"external-{name}"), record),
            "save_weights_external",
        )
        return self._future("save_weights_external", future, model_id=model.model_id)

    def external_files(self, path: str) -> dict[str, Path]:
        """The files of external weights `path`, by name (what a download gets)."""
        entry = self.checkpoints.get(path)
        if entry is None or entry.kind != "external_weights":
            raise ServiceError(404, f"no external weights checkpoint {path}")
        folder = checkpoints.resolve(self.checkpoint_dir, entry.local_path)
        names = (peft_format.WEIGHTS_FILE, peft_format.CONFIG_FILE)
        return {name: folder / name for name in names}

    def save_weights_for_sampler(
        self, request: types.SaveWeightsForSamplerRequest
    ) -> dict[str, Any]:
        model = self.model(request.model_id)
        if request.path is not None:  # named sampler weights
            name = request.path
            future = model.sequencer.submit(
                request.seq_id,
                lambda: _chain(
                    model.client.save_weights_for_sampler(
                        name, user_metadata=request.user_metadata
                    ),
                    lambda saved: types.SaveWeightsForSamplerResponseInternal(
                        path=self._record_checkpoint(model, saved.path)
                    ),
                ),
                "save_weights_for_sampler",
            )
        else:  # an ephemeral snapshot with its own sampling session
            sampler_id = f"{model.session_id}:sample:{request.sampling_session_seq_id}"
            base_model = self.served.hub(model.client.get_info().model_data.model_name)
            kind = request.kind
            snapshot = model.sequencer.submit(
                request.seq_id,
                lambda: model.client.save_weights_and_get_sampling_client(kind=kind),
                "sampler_snapshot" if kind == "snapshot" else "sampler_inflight",
            )
            sampler = Sampler(sampler_id, base_model, None, snapshot)
            self.samplers[sampler_id] = sampler
            if kind == "inflight":
                snapshot.add_done_callback(lambda done: self._inflight_saved(model, sampler, done))
            future = _chain(
                snapshot,
                lambda _: types.SaveWeightsForSamplerResponseInternal(
                    sampling_session_id=sampler_id
                ),
            )
        return self._future("save_weights_for_sampler", future, model_id=model.model_id)

    def _inflight_saved(self, model: Model, sampler: Sampler, done: Future) -> None:
        if done.exception() is None:
            sampler.inflight_publish = done.result().weights_publish
            self.inflight_saves.append(
                InflightSave(model.model_id, sampler.sampler_id, sampler.inflight_publish)
            )

    def list_checkpoints(self, training_run_id: str) -> types.CheckpointsListResponse:
        kinds = {
            "weights": "training",
            "sampler_weights": "sampler",
            "external_weights": "external",
        }
        listed = [
            types.Checkpoint(
                checkpoint_id=e.path.split("/", 3)[3],
                tinker_path=e.path,
                checkpoint_type=kinds[e.kind],
                time=e.created,
                user_metadata=self._checkpoint_meta(e.path).get("user_metadata") or None,
            )  # type: ignore[arg-type]
            for e in self.checkpoints.values()
            if e.path.startswith(f"tinker://{training_run_id}/")
        ]
        return types.CheckpointsListResponse(checkpoints=listed)

    def _checkpoint_meta(self, path: str) -> dict[str, Any]:
        folder = checkpoints.resolve(self.checkpoint_dir, self.local_path(path))
        return json.loads((folder / "meta.json").read_text())

    def weights_info(self, tinker_path: str) -> types.WeightsInfoResponse:
        meta = self._checkpoint_meta(tinker_path)
        kinds = set(meta.get("lora_kinds") or ())
        return types.WeightsInfoResponse(
            base_model=self.served.hub(meta["base_model"]),
            is_lora=True,
            lora_rank=meta.get("lora_rank"),
            train_unembed="unembed" in kinds,
            train_mlp="mlp" in kinds,
            train_attn="attn" in kinds,
        )

    def training_run(self, training_run_id: str) -> types.TrainingRun:
        model = self.models.get(training_run_id)
        if model is None:
            raise ServiceError(404, f"no training run {training_run_id}")
        info = model.client.get_info()
        listed = self.list_checkpoints(training_run_id).checkpoints
        last = {
            kind: max(
                (c for c in listed if c.checkpoint_type == kind), key=lambda c: c.time, default=None
            )
            for kind in ("training", "sampler")
        }
        return types.TrainingRun(
            training_run_id=training_run_id,
            base_model=self.served.hub(info.model_data.model_name),
            model_owner="double",
            is_lora=True,
            lora_rank=info.lora_rank,
            last_request_time=datetime.now(UTC),
            last_checkpoint=last["training"],
            last_sampler_checkpoint=last["sampler"],
        )

    def delete_checkpoint(self, training_run_id: str, checkpoint_id: str) -> None:
        path = f"tinker://{training_run_id}/{checkpoint_id}"
        entry = self.checkpoints.pop(path, None)
        if entry is None:
            raise ServiceError(404, f"no checkpoint {path}")
        shutil.rmtree(checkpoints.resolve(self.checkpoint_dir, entry.local_path))
        self.deleted.append(path)

    # ------------------------------------------------------------------ sampling
    def create_sampling_session(
        self, request: types.CreateSamplingSessionRequest
    ) -> types.CreateSamplingSessionResponse:
        self.session(request.session_id)
        sampler_id = f"{request.session_id}:sample:{request.sampling_session_seq_id}"
        if request.model_path is not None:
            entry = self.checkpoints.get(request.model_path)
            if entry is not None and entry.kind != "sampler_weights":
                # as the service documents it: sampler weights sample, a full state resumes
                raise ServiceError(
                    400,
                    f"{request.model_path} is a training checkpoint; sample from sampler "
                    "weights (save_weights_for_sampler), or load it in a training client",
                )
            client = self.local.create_sampling_client(
                model_path=self.local_path(request.model_path)
            ).future()
            base_model = request.base_model or ""
        elif request.base_model is not None:
            client = self.local.create_sampling_client(
                base_model=self.served.local(request.base_model)
            ).future()
            base_model = request.base_model
        else:
            raise ServiceError(400, "create_sampling_session needs model_path or base_model")
        self.samplers[sampler_id] = Sampler(sampler_id, base_model, request.model_path, client)
        return types.CreateSamplingSessionResponse(sampling_session_id=sampler_id)

    async def sampler(self, sampler_id: str) -> tuple[Sampler, Any]:
        sampler = self.samplers.get(sampler_id)
        if sampler is None:
            raise ServiceError(404, f"no sampler {sampler_id}")
        try:
            client = await asyncio.wrap_future(sampler.client)
        except Exception as exc:
            raise ServiceError(400, f"sampler {sampler_id} could not be created: {exc}") from None
        if not sampler.base_model:
            sampler.base_model = self.served.hub(client.get_base_model())
        return sampler, client

    async def get_sampler(self, sampler_id: str) -> types.GetSamplerResponse:
        sampler, _ = await self.sampler(sampler_id)
        return types.GetSamplerResponse(
            sampler_id=sampler_id, base_model=sampler.base_model, model_path=sampler.model_path
        )

    async def asample(self, request: types.SampleRequest) -> dict[str, Any]:
        if request.sampling_session_id is None:
            raise ServiceError(400, "asample needs a sampling_session_id")
        sampler, client = await self.sampler(request.sampling_session_id)
        future = client.sample(
            request.prompt,
            request.num_samples,
            request.sampling_params,
            include_prompt_logprobs=bool(request.prompt_logprobs),
            topk_prompt_logprobs=request.topk_prompt_logprobs,
            topk_sample_logprobs=request.topk_sample_logprobs,
        ).future()
        ids = [
            f"{request.sampling_session_id}:{request.seq_id}:{i}"
            for i in range(request.num_samples)
        ]
        self._meter_sample(request, sampler.base_model, future)
        if sampler.inflight_publish:
            future.add_done_callback(lambda done: self._inflight_sampled(sampler, done))
        if request.record_stability_info:
            self._record(request.sampling_session_id.split(":sample:")[0], ids, future)
        return self._future("sample", future, sample_sequence_ids=ids)

    def _inflight_sampled(self, sampler: Sampler, done: Future) -> None:
        if done.exception() is None and done.result().sequences:
            used = min(s.weights_publish for s in done.result().sequences)
            self.inflight_samples.append(
                InflightSample(sampler.sampler_id, sampler.inflight_publish, used)
            )

    def _record(self, session_id: str, ids: list[str], future: Future) -> None:
        """Record the sequences a `record_stability_info` request samples: in the local
        backend's records (what its stable_reinforce reads) and here under the ids the SDK
        sees, for the session that sampled them."""
        for sequence_id in ids:
            self.recorded[sequence_id] = RecordedSequence(session_id, None, time.time())

        def sampled(done: Future) -> None:
            if done.exception() is not None:
                return
            sequences = done.result().sequences
            self.local.stability.record(sequences)
            for sequence_id, sequence in zip(ids, sequences, strict=True):
                self.recorded[sequence_id].local_id = sequence.sequence_id
                self.recorded[sequence_id].last_used = time.time()

        future.add_done_callback(sampled)

    def _meter_sample(self, request: types.SampleRequest, base_model: str, future: Future) -> None:
        """Bill a sampling request as the service does: its prompt's prefill once, the
        other samples' prefill as cached, and the sampled tokens once they are known."""
        session_id = (request.sampling_session_id or "").split(":sample:")[0]
        length, k = request.prompt.length, request.num_samples
        now = time.time()
        self.usage.append(UsageRecord(now, session_id, base_model, "sampling_prefill", length))
        if k > 1:
            self.usage.append(
                UsageRecord(
                    now, session_id, base_model, "sampling_prefill", length * (k - 1), cached=True
                )
            )

        def sampled(done: Future) -> None:
            if done.exception() is None:
                tokens = sum(len(s.tokens) for s in done.result().sequences)
                self.usage.append(
                    UsageRecord(time.time(), session_id, base_model, "sampling_sample", tokens)
                )

        future.add_done_callback(sampled)

    def billing_usage(
        self, starting_on: datetime, ending_before: datetime
    ) -> types.BillingUsageResponse:
        """Hourly buckets of the usage in [starting_on, ending_before), as far as the
        (lagging) billing data reaches."""
        if (
            starting_on.minute
            or starting_on.second
            or starting_on.microsecond
            or ending_before.minute
            or ending_before.second
            or ending_before.microsecond
        ):
            raise ServiceError(400, "starting_on and ending_before must be on UTC hours")
        if starting_on > datetime.now(UTC):
            raise ServiceError(400, "starting_on is in the future")
        if ending_before - starting_on > timedelta(days=14):
            raise ServiceError(400, "the window is at most 14 days")
        reported_until = time.time() - self.faults.billing_lag
        buckets: dict[tuple[Any, ...], int] = {}
        for u in self.usage:
            at = datetime.fromtimestamp(u.time, UTC)
            if u.time > reported_until or not starting_on <= at < ending_before:
                continue
            start = at.replace(minute=0, second=0, microsecond=0)
            key = (start, u.session_id, u.base_model, u.kind, u.cached)
            buckets[key] = buckets.get(key, 0) + u.tokens
        data = []
        for (start, session_id, base_model, kind, cached), tokens in sorted(
            buckets.items(), key=lambda item: (item[0][0], -item[1])
        ):
            rate = RATES[kind + ("_cached" if cached else "")]
            info: dict[str, Any] = {"type": kind, "token_count": tokens}
            if kind == "sampling_prefill":
                info["cached"] = cached
            data.append(
                types.BillingUsageEvent.model_validate(
                    {
                        "bucket_start": start,
                        "bucket_end": start + timedelta(hours=1),
                        "base_model": base_model,
                        "session_id": session_id,
                        "estimated_cost_usd": rate * tokens / 1e6,
                        "effective_rate_usd_per_million_tokens": rate,
                        "event_info": info,
                    }
                )
            )
        return types.BillingUsageResponse(
            data=data,
            sessions={e.session_id: types.BillingUsageSession() for e in data if e.session_id},
        )

    def capabilities(self) -> types.GetServerCapabilitiesResponse:
        listed = self.local.get_server_capabilities().supported_models
        served = [
            types.SupportedModel(
                model_name=name,
                max_context_length=max_context_of(folder),
                trainable=True,
                sampleable=True,
            )
            for name, folder in self.served.folders.items()
        ]
        if self.only_served:
            return types.GetServerCapabilitiesResponse(supported_models=served)
        hidden = set(self.served.folders.values())  # known by their hub names
        return types.GetServerCapabilitiesResponse(
            supported_models=served + [m for m in listed if m.model_name not in hidden]
        )
