"""`LocalSamplingClient`: Tinker's SamplingClient, in-process, on a snapshot or in-flight weights.

A sampling client holds the shared frozen base model and its own detached copy of a LoRA
adapter (or none: the plain base), taken when it was created, so training that happens
afterwards never changes what it samples (Tinker's contract). The copy is small (the adapter,
not the model), and a client no longer referenced is freed with it. For a small base (the
embedded model) the adapter is merged into a private copy of the adapted weights on first use,
so sampling costs exactly what the plain model costs; bigger bases apply the adapter on the
fly (`MERGE_MAX_BYTES`).

Sampling runs on the shared torch thread (`runtime`); `sample` calls that are waiting there
together are merged into one batched generation (`generation.generate`), which is what makes
many concurrent rollout workers cheap. Requests that carry a seed run in a batch of their own,
so the same seed always gives the same samples. The client pickles (base name + adapter); the
torch thread is recreated lazily on load.

An in-flight client (`save_weights_and_get_sampling_client(kind="inflight")`) follows the
training model's `InflightWeights` instead: it reads the newest published adapter before each
batch of requests, so the weights change between requests, never during one (all torch work
runs on one thread: a save cannot land while a generation runs). Every sequence it returns
records which publish made all of its tokens (`InflightSequence.weights_publish`), so the
local backend knows each token's weights exactly, where Tinker's responses do not say.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import tinker
import torch
from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture

import tinker_tui.engine.local.lora as lora
import tinker_tui.engine.local.runtime as runtime
from tinker_tui.engine.local.errors import bad_request
from tinker_tui.engine.local.generation import GenRequest, generate, make_request, prompt_logprobs
from tinker_tui.engine.local.model import BaseModel, load_base

if TYPE_CHECKING:
    from tinker.lib.public_interfaces.api_future import APIFuture

    from tinker_tui.engine.local.stability import StabilityRecords

# Rows (prompt copies) merged into one generation at most; more wait for the next batch.
MAX_BATCH_ROWS = 256
# Merge the adapter into a private copy of the adapted weights when the base is at most this
# big (the copy is about the size of the base); otherwise apply it on the fly.
MERGE_MAX_BYTES = 64 << 20


class InflightWeights:
    """The one mutable weights target of a training model's in-flight sampling clients.

    Each in-flight save replaces its adapter (a detached snapshot) on the torch thread, in
    submission order; `publishes` counts them (1 for the first), which is how a sequence
    names the weights that made it."""

    def __init__(self) -> None:
        self.adapter: lora.Adapter | None = None
        self.publishes = 0

    def publish(self, adapter: lora.Adapter) -> int:
        self.adapter = adapter
        self.publishes += 1
        return self.publishes


@dataclass(frozen=True)
class InflightSequence(tinker.SampledSequence):
    """A sequence of an in-flight client: `weights_publish` is the `InflightWeights`
    publish whose weights made every one of its tokens (not in Tinker's responses)."""

    weights_publish: int = 0


class LocalSamplingClient:
    """Samples from a frozen snapshot of a model. Same surface as `tinker.SamplingClient`.

    Create it with `LocalTrainingClient.save_weights_and_get_sampling_client()` or
    `LocalServiceClient.create_sampling_client(...)`, not directly.
    """

    def __init__(
        self,
        base: BaseModel,
        adapter: lora.Adapter | None,
        *,
        model_path: str | None = None,
        sampler_id: str | None = None,
        inflight: InflightWeights | None = None,
        stability: StabilityRecords | None = None,
    ) -> None:
        self._base = base
        self._adapter = adapter
        #: The shared target an in-flight client follows (None: a fixed snapshot).
        self._inflight = inflight
        self._publish = inflight.publishes if inflight is not None else 0
        self._model_path = model_path
        self._sampler_id = sampler_id or f"local-sampler-{uuid.uuid4().hex[:12]}"
        #: Where every sample is recorded (``record_stability_info=True``); None: not kept.
        self._stability = stability
        self._init_runtime_state()

    def _init_runtime_state(self) -> None:
        self._facts = self._base.facts
        self._merged: dict[str, torch.Tensor] | None = None
        self._pending: list[tuple[GenRequest, Future[tinker.SampleResponse]]] = []
        self._pending_lock = threading.Lock()
        self._seq_counter = itertools.count()

    # -- pickling: base name and adapter travel, locks and queues are rebuilt ---------------
    def __getstate__(self) -> dict[str, Any]:
        adapter = self._adapter
        return {
            "base_model": self._base.name,
            "adapter": None
            if adapter is None
            else {
                "rank": adapter.rank,
                "alpha": adapter.alpha,
                "kinds": list(adapter.kinds),
                "state": adapter.state_dict(),
            },
            "model_path": self._model_path,
            "sampler_id": self._sampler_id,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        base = load_base(state["base_model"])
        adapter = None
        self._inflight = None  # a copy sent elsewhere keeps the weights it had
        self._publish = 0
        saved = state["adapter"]
        if saved is not None:
            adapter = lora.Adapter.create(
                base.layers, saved["rank"], tuple(saved["kinds"]), seed=0, device=base.device
            )
            adapter.alpha = saved["alpha"]
            adapter.load_state_dict(saved["state"])
            adapter = adapter.snapshot()
        self._base = base
        self._adapter = adapter
        self._model_path = state["model_path"]
        self._sampler_id = state["sampler_id"]
        self._stability = None  # records are the session's: a copy elsewhere keeps none
        self._init_runtime_state()

    # -- info -------------------------------------------------------------------------------
    @property
    def model_path(self) -> str | None:
        """The checkpoint path it was loaded from; None for a snapshot or a base model."""
        return self._model_path

    @property
    def weights_publish(self) -> int:
        """The in-flight publish whose weights it samples with now (0: not in flight)."""
        return self._publish if self._inflight is not None else 0

    def get_tokenizer(self) -> Any:
        return self._base.tokenizer

    def get_base_model(self) -> str:
        return self._base.name

    async def get_base_model_async(self) -> str:
        return self._base.name

    def get_telemetry(self) -> None:
        """No telemetry locally (the SDK returns None when it is off)."""
        return None

    def __repr__(self) -> str:
        src = self._model_path or (
            "inflight"
            if self._inflight is not None
            else "snapshot"
            if self._adapter is not None
            else "base"
        )
        return f"LocalSamplingClient({self._base.name!r}, {src}, id={self._sampler_id})"

    def _follow(self) -> None:
        """An in-flight client takes the newest published weights (between requests)."""
        target = self._inflight
        if target is not None and target.adapter is not self._adapter:
            self._adapter, self._merged = target.adapter, None
            self._publish = target.publishes

    @contextlib.contextmanager
    def _weights(self) -> Iterator[None]:
        """Run the base with this client's adapter (merged when the base is small)."""
        self._follow()
        layers, adapter = self._base.layers, self._adapter
        if adapter is None:
            with lora.activate(layers):
                yield
        elif self._base.weight_bytes() <= MERGE_MAX_BYTES:
            if self._merged is None:
                self._merged = adapter.merge(layers)
            with lora.activate(layers, merged=self._merged):
                yield
        else:
            with lora.activate(layers, adapter):
                yield

    # -- sampling ---------------------------------------------------------------------------
    def sample(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: tinker.TensorData | None = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
    ) -> APIFuture[tinker.SampleResponse]:
        """Generate `num_samples` continuations of `prompt`; returns an awaitable future.

        `sampling_params`: ``max_tokens`` None means 64 (and never past the context);
        ``temperature`` 0 is greedy; ``top_k`` -1 and ``top_p`` 1 are off; ``seed`` makes the
        request reproducible. ``stop``: None stops at end of sequence; a string or list of
        strings stops once the generated text contains one (the completing token is included)
        and at end of sequence; a list of token ids stops at any of them (included; end of
        sequence only if listed); ``[]`` never stops early. ``stop_reason`` is "stop" for
        those, "length" at ``max_tokens``. Every sequence carries ``logprobs``
        (``log_softmax(logits / temperature)`` of each chosen token) and a ``sequence_id``.
        ``topk_sample_logprobs=k`` adds each position's k most likely tokens from the same
        distribution (``SampledSequence.topk_logprobs``); ``include_prompt_logprobs`` and
        ``topk_prompt_logprobs`` score the prompt. ``target_prompt_logprobs`` and
        ``prompt_alt_tokens_k`` are not supported locally (BadRequestError).
        """
        try:
            unsupported = [
                name
                for name, value in (
                    ("target_prompt_logprobs", target_prompt_logprobs),
                    ("prompt_alt_tokens_k", prompt_alt_tokens_k),
                )
                if value
            ]
            if unsupported:
                raise bad_request(
                    f"sample(): {', '.join(unsupported)} not supported by the local backend"
                )
            request = make_request(
                prompt,
                num_samples,
                sampling_params,
                self._facts,
                include_prompt_logprobs=include_prompt_logprobs,
                prompt_logprobs_last_n=prompt_logprobs_last_n,
                topk_prompt_logprobs=topk_prompt_logprobs,
                topk_sample_logprobs=topk_sample_logprobs,
            )
        except Exception as exc:
            return runtime.failed(exc)
        future: Future[tinker.SampleResponse] = Future()
        with self._pending_lock:
            self._pending.append((request, future))
        runtime.torch_executor().submit(self._drain)
        return AwaitableConcurrentFuture(future)

    def sample_constrained(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        constraint: Any,
        constraint_prefix: str = "",
        topk_sample_logprobs: int = 0,
    ) -> APIFuture[tinker.SampleResponse]:
        """`sample`, keeping each sample's text within `constraint` (not in the SDK: the
        local backend samples here, so it can; see engine.server.tool_call_constraint).
        `constraint.check(constraint_prefix + text so far)` decides every token; a sample
        ends ("stop") once it says "done". Logprobs stay the model's own."""
        try:
            request = make_request(
                prompt,
                num_samples,
                sampling_params,
                self._facts,
                topk_sample_logprobs=topk_sample_logprobs,
            )
        except Exception as exc:
            return runtime.failed(exc)
        request.constraint = constraint
        request.constraint_prefix = constraint_prefix
        future: Future[tinker.SampleResponse] = Future()
        with self._pending_lock:
            self._pending.append((request, future))
        runtime.torch_executor().submit(self._drain)
        return AwaitableConcurrentFuture(future)

    async def sample_async(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: tinker.TensorData | None = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
    ) -> tinker.SampleResponse:
        """Deprecated alias kept from the SDK: ``await sample(...)``."""
        return await self.sample(
            prompt,
            num_samples,
            sampling_params,
            include_prompt_logprobs,
            topk_prompt_logprobs,
            topk_sample_logprobs,
            target_prompt_logprobs,
            prompt_alt_tokens_k,
            prompt_logprobs_last_n,
        ).result_async()

    def compute_logprobs(
        self, prompt: tinker.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> APIFuture[list[float | None]]:
        """Per-token logprobs of `prompt`: ``[None, logp(t1 | t0), logp(t2 | t0 t1), ...]``."""
        try:
            request = make_request(
                prompt,
                1,
                tinker.SamplingParams(max_tokens=1),
                self._facts,
                include_prompt_logprobs=True,
                prompt_logprobs_last_n=prompt_logprobs_last_n,
            )
        except Exception as exc:
            return runtime.failed(exc)

        def run() -> list[float | None]:
            with self._weights():
                values, _ = prompt_logprobs(self._base.module, request.prompt, self._base.device)
            if request.prompt_logprobs_last_n is not None:
                values[: len(request.prompt) - request.prompt_logprobs_last_n] = np.nan
            return [None if np.isnan(v) else float(v) for v in values]

        return runtime.submit(run)

    async def compute_logprobs_async(
        self, prompt: tinker.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> list[float | None]:
        """Deprecated alias kept from the SDK: ``await compute_logprobs(...)``."""
        return await self.compute_logprobs(prompt, prompt_logprobs_last_n).result_async()

    # -- torch thread -----------------------------------------------------------------------
    def _drain(self) -> None:
        """Run every sample request waiting for this client (on the torch thread)."""
        while True:
            with self._pending_lock:
                if not self._pending:
                    return
                batch: list[tuple[GenRequest, Future[tinker.SampleResponse]]] = []
                rows = 0
                rest: list[tuple[GenRequest, Future[tinker.SampleResponse]]] = []
                seeded: tuple[GenRequest, Future[tinker.SampleResponse]] | None = None
                for item in self._pending:
                    req = item[0]
                    if seeded is None and not batch and req.seed is not None:
                        seeded = item  # a seeded request always runs alone
                    elif (
                        seeded is None
                        and req.seed is None
                        and (not batch or rows + req.num_samples <= MAX_BATCH_ROWS)
                    ):
                        batch.append(item)
                        rows += req.num_samples
                    else:
                        rest.append(item)
                self._pending = rest
            if seeded is not None:
                self._run([seeded], seeded[0].seed)
            else:
                self._run(batch, secrets.randbits(63))

    def _run(
        self, items: list[tuple[GenRequest, Future[tinker.SampleResponse]]], seed: int | None
    ) -> None:
        live = [(req, fut) for req, fut in items if fut.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            generator = torch.Generator().manual_seed(seed % (1 << 64) if seed is not None else 0)
            with self._weights():
                results = generate(
                    self._base.module, self._facts, [req for req, _ in live], generator
                )
        except Exception as exc:
            for _, fut in live:
                fut.set_exception(exc)
            return
        publish = self._publish if self._inflight is not None else 0
        for (_, fut), res in zip(live, results, strict=True):
            sequences = [
                _sequence(
                    reason,
                    f"{self._sampler_id}-{next(self._seq_counter)}",
                    np.asarray(tokens, dtype=np.int32),
                    np.asarray(logprobs, dtype=np.float32),
                    topk,
                    publish,
                )
                for tokens, logprobs, reason, topk in zip(
                    res.tokens, res.logprobs, res.stop_reasons, res.topk, strict=True
                )
            ]
            if self._stability is not None:
                self._stability.record(sequences)
            fut.set_result(
                tinker.SampleResponse(
                    sequences=sequences,
                    prompt_logprobs_np=res.prompt_logprobs,
                    topk_prompt_logprobs_np=res.topk_prompt,
                )
            )


def _sequence(
    reason: Any,
    sequence_id: str,
    tokens: np.ndarray,
    logprobs: np.ndarray,
    topk: Any,
    publish: int,
) -> tinker.SampledSequence:
    """A sampled sequence; an in-flight client's names the publish that made it."""
    if publish:
        return InflightSequence(
            stop_reason=reason,
            sequence_id=sequence_id,
            tokens_np=tokens,
            logprobs_np=logprobs,
            topk_logprobs_np=topk,
            weights_publish=publish,
        )
    return tinker.SampledSequence(
        stop_reason=reason,
        sequence_id=sequence_id,
        tokens_np=tokens,
        logprobs_np=logprobs,
        topk_logprobs_np=topk,
    )
