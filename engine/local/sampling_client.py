"""`LocalSamplingClient`: Tinker's SamplingClient, in-process, frozen to one weight snapshot.

A sampling client owns a private copy of the weights taken when it was created, so training
that happens afterwards never changes what it samples (Tinker's contract). Sampling runs on the
shared torch thread (`runtime`); `sample` calls that are waiting there together are merged into
one batched generation, which is what makes many concurrent rollout workers cheap on a CPU.
Requests that carry a seed run in a batch of their own, so the same seed always gives the same
samples. The client pickles (weights + names); the torch thread is recreated lazily on load.
"""

from __future__ import annotations

import itertools
import secrets
import threading
import uuid
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np
import tinker
import torch
from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture

from engine.local import runtime
from engine.local.errors import bad_request
from engine.local.generation import GenRequest, generate, make_request, prompt_logprobs
from engine.local.model import build_model, get_spec, state_dict_copy
from engine.local.tokenizer import WordTokenizer

if TYPE_CHECKING:
    from tinker.lib.public_interfaces.api_future import APIFuture

# Rows (prompt copies) merged into one generation at most; more wait for the next batch.
MAX_BATCH_ROWS = 256


class LocalSamplingClient:
    """Samples from a frozen copy of a model's weights. Same surface as `tinker.SamplingClient`.

    Create it with `LocalTrainingClient.save_weights_and_get_sampling_client()` or
    `LocalServiceClient.create_sampling_client(...)`, not directly.
    """

    def __init__(
        self,
        base_model: str,
        model: torch.nn.Module,
        tokenizer: WordTokenizer,
        *,
        model_path: str | None = None,
    ) -> None:
        model.eval()
        model.requires_grad_(False)
        self._base_model = base_model
        self._model = model
        self._tokenizer = tokenizer
        self._model_path = model_path
        self._max_context = get_spec(base_model).max_context_length
        self._sampler_id = f"local-sampler-{uuid.uuid4().hex[:12]}"
        self._init_runtime_state()

    def _init_runtime_state(self) -> None:
        self._pending: list[tuple[GenRequest, Future[tinker.SampleResponse]]] = []
        self._pending_lock = threading.Lock()
        self._seq_counter = itertools.count()

    # -- pickling: weights travel, locks and queues are rebuilt ---------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {
            "base_model": self._base_model,
            "state_dict": state_dict_copy(self._model),
            "model_path": self._model_path,
            "sampler_id": self._sampler_id,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        model, tokenizer = build_model(state["base_model"])
        model.load_state_dict(state["state_dict"])
        model.eval()
        model.requires_grad_(False)
        self._base_model = state["base_model"]
        self._model = model
        self._tokenizer = tokenizer
        self._model_path = state["model_path"]
        self._max_context = get_spec(self._base_model).max_context_length
        self._sampler_id = state["sampler_id"]
        self._init_runtime_state()

    # -- info -------------------------------------------------------------------------------
    @property
    def model_path(self) -> str | None:
        """The checkpoint path it was loaded from; None for a snapshot or a base model."""
        return self._model_path

    def get_tokenizer(self) -> WordTokenizer:
        return self._tokenizer

    def get_base_model(self) -> str:
        return self._base_model

    async def get_base_model_async(self) -> str:
        return self._base_model

    def __repr__(self) -> str:
        src = self._model_path or "snapshot"
        return f"LocalSamplingClient({self._base_model!r}, {src}, id={self._sampler_id})"

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
        request reproducible. ``stop``: None stops at EOS; a string or list of strings stops
        once the generated text contains one (the completing token is included) and at EOS;
        a list of token ids stops at any of them (included; EOS only if listed); ``[]`` never
        stops early. ``stop_reason`` is "stop" for those, "length" at ``max_tokens``.
        Sequence logprobs are ``log_softmax(logits / temperature)`` of each chosen token.
        Top-k logprob outputs, target/alt prompt tokens are not supported locally.
        """
        try:
            unsupported = [
                name
                for name, value in (
                    ("topk_prompt_logprobs", topk_prompt_logprobs),
                    ("topk_sample_logprobs", topk_sample_logprobs),
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
                self._tokenizer,
                self._max_context,
                include_prompt_logprobs=include_prompt_logprobs,
                prompt_logprobs_last_n=prompt_logprobs_last_n,
            )
        except Exception as exc:
            return runtime.failed(exc)
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
        )

    def compute_logprobs(
        self, prompt: tinker.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> APIFuture[list[float | None]]:
        """Per-token logprobs of `prompt`: ``[None, logp(t1 | t0), logp(t2 | t0 t1), ...]``."""
        try:
            request = make_request(
                prompt,
                1,
                tinker.SamplingParams(max_tokens=1),
                self._tokenizer,
                self._max_context,
                include_prompt_logprobs=True,
                prompt_logprobs_last_n=prompt_logprobs_last_n,
            )
        except Exception as exc:
            return runtime.failed(exc)

        def run() -> list[float | None]:
            values = prompt_logprobs(self._model, request.prompt)
            if request.prompt_logprobs_last_n is not None:
                values[: len(request.prompt) - request.prompt_logprobs_last_n] = np.nan
            return [None if np.isnan(v) else float(v) for v in values]

        return runtime.submit(run)

    async def compute_logprobs_async(
        self, prompt: tinker.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> list[float | None]:
        """Deprecated alias kept from the SDK: ``await compute_logprobs(...)``."""
        return await self.compute_logprobs(prompt, prompt_logprobs_last_n)

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
            results = generate(self._model, self._tokenizer, [req for req, _ in live], generator)
        except Exception as exc:
            for _, fut in live:
                fut.set_exception(exc)
            return
        for (_, fut), res in zip(live, results, strict=True):
            sequences = [
                tinker.SampledSequence(
                    stop_reason=reason,  # type: ignore[arg-type]
                    sequence_id=f"{self._sampler_id}-{next(self._seq_counter)}",
                    tokens_np=np.asarray(tokens, dtype=np.int32),
                    logprobs_np=np.asarray(logprobs, dtype=np.float32),
                )
                for tokens, logprobs, reason in zip(
                    res.tokens, res.logprobs, res.stop_reasons, strict=True
                )
            ]
            fut.set_result(
                tinker.SampleResponse(sequences=sequences, prompt_logprobs_np=res.prompt_logprobs)
            )
