"""What the engine may ask of a backend client beyond the Tinker SDK's common surface,
each as a typed capability: a client has it when it has the method (checked with
`isinstance`, as the SDK's clients and the local backend's are unrelated classes), and
the engine calls it as typed here instead of probing with `getattr`.

The local backend implements every one (mypy checks that below); the SDK's
`ServiceClient` closes its session; a test double may have none.
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    import tinker


@runtime_checkable
class ClosesSession(Protocol):
    """A service client whose session is finished explicitly (the SDK's `close`)."""

    def close(self, status: Literal["success", "errored", "interrupted"],
              detail: str | None = None) -> object: ...


@runtime_checkable
class SamplesConstrained(Protocol):
    """A sampling client that samples in this process, so it can keep each sample's text
    within a constraint (the local backend's)."""

    def sample_constrained(self, prompt: tinker.ModelInput, num_samples: int,
                           sampling_params: tinker.SamplingParams, constraint: Any,
                           constraint_prefix: str = "", topk_sample_logprobs: int = 0
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


if TYPE_CHECKING:  # the local backend has every capability (checked by mypy, never run)
    from tinker_tui.engine.local.sampling_client import LocalSamplingClient
    from tinker_tui.engine.local.service_client import LocalServiceClient
    from tinker_tui.engine.local.training_client import LocalTrainingClient

    def _local_backend_has_them(service: LocalServiceClient, sampler: LocalSamplingClient,
                                trainer: LocalTrainingClient) -> None:
        closes: ClosesSession = service
        keeps: KeepsCheckpointsHere = service
        constrains: SamplesConstrained = sampler
        knows: KnowsTrainingIdentity = trainer
        del closes, keeps, constrains, knows
