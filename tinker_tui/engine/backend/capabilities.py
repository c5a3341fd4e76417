"""What the engine asks of a backend client, typed.

The backend seam is the Tinker SDK's client interface: `tinker.ServiceClient` and the
training and sampling clients it makes, or the local backend's `Local*Client`s, which are
unrelated classes with the same methods. `ServiceClient`, `TrainingClient` and
`SamplingClient` below are the part of that interface the engine uses (structural
protocols: neither side derives from them), so the code above the seam
(`engine.backend.session`) is type-checked against them instead of `Any`.

Beyond that common surface, each capability a backend may have is a protocol of its own:
a client has it when it has the method (checked with `isinstance`), and the engine calls it
as typed here instead of probing with `getattr`. The local backend implements every one;
the SDK's `ServiceClient` closes its session; a test double may have none.

mypy checks, at the end of this module, that the local backend's clients and the SDK's
satisfy the protocols they are used as.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    import tinker


class SamplingClient(Protocol):
    """What the engine needs of a sampling client (`tinker.SamplingClient`): samples, and
    the base model's logprobs for the KL penalty."""

    def sample(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        *,
        topk_sample_logprobs: int = 0,
    ) -> Awaitable[tinker.SampleResponse]: ...

    def compute_logprobs(
        self, prompt: tinker.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> Awaitable[list[float | None]]: ...


class TrainingClient(Protocol):
    """What the engine needs of a training client (`tinker.TrainingClient`). Every call
    returns a future at once: a step is submitted whole before any of it is awaited."""

    @property
    def model_id(self) -> str: ...

    def forward_backward(
        self,
        data: list[tinker.Datum],
        loss_fn: tinker.types.LossFnType,
        loss_fn_config: Mapping[str, float] | None = None,
    ) -> Awaitable[tinker.types.ForwardBackwardOutput]: ...

    def optim_step(
        self, optim_params: tinker.AdamParams
    ) -> Awaitable[tinker.types.OptimStepResponse]: ...

    def save_weights_and_get_sampling_client(
        self,
        *,
        kind: Literal["snapshot", "inflight"] = "snapshot",
        record_stability_info: bool = ...,
    ) -> Awaitable[SamplingClient]: ...

    def save_weights_for_sampler(
        self, name: str, *, user_metadata: dict[str, str] | None = None
    ) -> Awaitable[tinker.types.SaveWeightsForSamplerResponse]: ...

    def save_state(
        self, name: str, *, overwrite: bool = False, user_metadata: dict[str, str] | None = None
    ) -> Awaitable[tinker.types.SaveWeightsResponse]: ...

    def load_state_with_optimizer(
        self, path: str
    ) -> Awaitable[tinker.types.LoadWeightsResponse]: ...

    def get_info(self) -> tinker.types.GetInfoResponse:
        """The model's name and tokenizer id (the SDK's tokenizer is found from them)."""
        ...

    def get_tokenizer(self) -> Any:
        """A Hugging Face tokenizer (or the embedded model's, which has its methods)."""
        ...


class ServiceClient(Protocol):
    """What the engine needs of a service client (`tinker.ServiceClient`): it makes the
    training client and sampling clients. The SDK's calls may block on first use (they
    build its session), so the engine makes them off the loop (`engine.backend.blocking`)."""

    def create_lora_training_client(
        self, base_model: str, rank: int = 32, seed: int | None = None
    ) -> Awaitable[TrainingClient]: ...

    def create_training_client_from_state_with_optimizer(
        self, path: str
    ) -> Awaitable[TrainingClient]: ...

    def create_training_client_from_state(self, path: str) -> Awaitable[TrainingClient]: ...

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> Awaitable[SamplingClient]: ...


class RemovesCheckpoints(Protocol):
    """What deletes a checkpoint by its tinker:// path (`tinker.RestClient`, or the local
    backend's folders, `engine.backend.session`)."""

    def delete_checkpoint_from_tinker_path(self, tinker_path: str, /) -> Awaitable[None]: ...


@runtime_checkable
class ClosesSession(Protocol):
    """A service client whose session is finished explicitly (the SDK's `close`)."""

    def close(
        self, status: Literal["success", "errored", "interrupted"], detail: str | None = None
    ) -> object: ...


@runtime_checkable
class SamplesConstrained(Protocol):
    """A sampling client that samples in this process, so it can keep each sample's text
    within a constraint (the local backend's)."""

    def sample_constrained(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        constraint: Any,
        constraint_prefix: str = "",
        topk_sample_logprobs: int = 0,
    ) -> Awaitable[tinker.SampleResponse]: ...


@runtime_checkable
class KeepsCheckpointsHere(Protocol):
    """A service client that keeps its checkpoints in a folder of this machine (the local
    backend: old ones are deleted by path, and the warm-up cache lives beside them)."""

    @property
    def checkpoint_dir(self) -> Path: ...


@runtime_checkable
class KnowsTrainingIdentity(Protocol):
    """A training client that can say what decides its training's result besides the data
    (the local backend's: the key of its warm-up cache)."""

    def training_identity(self) -> Awaitable[str | None]: ...


if TYPE_CHECKING:  # checked by mypy, never run
    from tinker_tui.engine.local.sampling_client import LocalSamplingClient
    from tinker_tui.engine.local.service_client import LocalServiceClient
    from tinker_tui.engine.local.training_client import LocalTrainingClient

    def _local_backend_has_them(
        service: LocalServiceClient, sampler: LocalSamplingClient, trainer: LocalTrainingClient
    ) -> None:
        """The local backend is a backend client, with every capability."""
        services: ServiceClient = service
        trains: TrainingClient = trainer
        samples: SamplingClient = sampler
        closes: ClosesSession = service
        keeps: KeepsCheckpointsHere = service
        constrains: SamplesConstrained = sampler
        knows: KnowsTrainingIdentity = trainer
        del services, trains, samples, closes, keeps, constrains, knows

    def _tinker_sdk_has_them(
        service: tinker.ServiceClient,
        sampler: tinker.SamplingClient,
        trainer: tinker.TrainingClient,
        rest: tinker.RestClient,
    ) -> None:
        """The SDK's clients are backend clients; its service client closes its session."""
        services: ServiceClient = service
        trains: TrainingClient = trainer
        samples: SamplingClient = sampler
        removes: RemovesCheckpoints = rest
        closes: ClosesSession = service
        del services, trains, samples, removes, closes
