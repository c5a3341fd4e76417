"""`LocalServiceClient`: the entry point of the local backend, shaped like `tinker.ServiceClient`.

It needs no network and no credentials: it creates LoRA training clients and sampling clients
on the local base models (the embedded `tinker-tui/tiny-chat`, or a Hugging Face model folder
given by its path; see `tinker_tui.engine.local.model`) and keeps checkpoints under `checkpoint_dir`.
Creation calls return awaitable futures (model loading runs on the torch thread), like the
SDK's.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from tinker import types

import tinker_tui.engine.local.checkpoints as checkpoints
import tinker_tui.engine.local.lora as lora
import tinker_tui.engine.local.runtime as runtime
from tinker_tui.engine.local.errors import bad_request
from tinker_tui.engine.local.model import (
    canonical_name,
    ensure_offline,
    load_base,
    local_models,
    max_context_of,
)
from tinker_tui.engine.local.sampling_client import LocalSamplingClient
from tinker_tui.engine.local.stability import StabilityRecords
from tinker_tui.engine.local.training_client import LocalTrainingClient, load_sampling_client

if TYPE_CHECKING:
    from tinker.lib.public_interfaces.api_future import APIFuture


class LocalServiceClient:
    """In-process stand-in for `tinker.ServiceClient` (see `engine.local`).

    `checkpoint_dir` defaults to $TINKER_TUI_CHECKPOINT_DIR, else
    $XDG_DATA_HOME/tinker-tui/checkpoints; it is created on the first save. The SDK's other
    arguments (display_name, base_url, api_key, ...) are accepted and ignored.
    """

    def __init__(
        self,
        user_metadata: dict[str, str] | None = None,
        project_id: str | None = None,
        *,
        display_name: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        default_headers_overrides: Mapping[str, str] | None = None,
        checkpoint_dir: str | Path | None = None,
        **kwargs: Any,
    ) -> None:
        ensure_offline()
        self._user_metadata = user_metadata
        self._project_id = project_id
        self._checkpoint_dir = (
            Path(checkpoint_dir).expanduser()
            if checkpoint_dir is not None
            else checkpoints.default_checkpoint_dir()
        )
        self._closed = False
        #: This session's recorded sequences (``record_stability_info``), shared by its
        #: training and sampling clients: StableReinforce trains only within its session.
        self.stability = StabilityRecords()

    @property
    def checkpoint_dir(self) -> Path:
        return self._checkpoint_dir

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> LocalServiceClient:
        if self._closed:
            raise RuntimeError("LocalServiceClient is closed")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        status: Literal["success", "errored", "interrupted"]
        if exc_type is None:
            status = "success"
        elif issubclass(exc_type, Exception):
            status = "errored"
        else:
            status = "interrupted"
        self.close(status).result()

    def close(
        self,
        status: Literal["success", "errored", "interrupted"],
        detail: str | None = None,
    ) -> APIFuture[None]:
        """Mark the session finished; later client creation fails. Clients already made keep
        working (they hold their own weights)."""
        self._closed = True
        return runtime.completed(None)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("LocalServiceClient is closed")

    def get_telemetry(self) -> None:
        """No telemetry locally (the SDK returns None when it is off)."""
        return None

    # -- capabilities -----------------------------------------------------------------------
    def get_server_capabilities(self) -> types.GetServerCapabilitiesResponse:
        """The local models: the embedded ones, model folders loaded in this process, and
        those under $TINKER_TUI_LOCAL_MODELS (answered at once, like the SDK's method)."""
        return types.GetServerCapabilitiesResponse(
            supported_models=[
                types.SupportedModel(
                    model_name=name,
                    max_context_length=max_context_of(name),
                    trainable=True,
                    sampleable=True,
                )
                for name in local_models()
            ]
        )

    async def get_server_capabilities_async(self) -> types.GetServerCapabilitiesResponse:
        return self.get_server_capabilities()

    # -- training clients -------------------------------------------------------------------
    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> APIFuture[LocalTrainingClient]:
        """A training client with a fresh rank-`rank` LoRA adapter on `base_model`.

        `base_model` is an embedded name or a Hugging Face model folder path. `seed` seeds the
        adapter's initialisation (None: random). The flags choose the adapted layers.
        """
        self._check_open()
        assert any([train_mlp, train_attn, train_unembed]), (
            "At least one of train_mlp, train_attn, or train_unembed must be True"
        )
        checkpoint_dir, stability = self._checkpoint_dir, self.stability
        kinds = tuple(
            kind
            for kind, on in (("attn", train_attn), ("mlp", train_mlp), ("unembed", train_unembed))
            if on
        )

        def create() -> LocalTrainingClient:
            if optimizer is not None and getattr(optimizer, "type", "adamw") != "adamw":
                raise bad_request(
                    f"optimizer {optimizer!r} is not supported by the local backend (AdamW only)"
                )
            if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
                raise bad_request(f"rank must be a positive integer, got {rank!r}")
            base = load_base(base_model)
            if not any(layer.kind in kinds for layer in base.layers.values()):
                raise bad_request(
                    f"{base.name!r} has no {'/'.join(kinds)} layers the local backend can adapt"
                )
            init_seed = seed if seed is not None else secrets.randbits(63)
            adapter = lora.Adapter.create(
                base.layers, rank, kinds, seed=init_seed, device=base.device
            )
            return LocalTrainingClient(
                model_id=_new_model_id(),
                base=base,
                adapter=adapter,
                checkpoint_dir=checkpoint_dir,
                seed=seed,
                stability=stability,
            )

        return runtime.submit_client(create)

    async def create_lora_training_client_async(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> LocalTrainingClient:
        """Deprecated SDK alias: ``await create_lora_training_client(...)``."""
        return await self.create_lora_training_client(
            base_model, rank, seed, train_mlp, train_attn, train_unembed, user_metadata, optimizer
        ).result_async()

    def _from_state(
        self, path: str, with_optimizer: bool, base_model: str | None
    ) -> APIFuture[LocalTrainingClient]:
        self._check_open()
        checkpoint_dir, stability = self._checkpoint_dir, self.stability

        def create() -> LocalTrainingClient:
            folder = checkpoints.resolve(checkpoint_dir, path)
            meta, state, optimizer_state = checkpoints.load(
                folder, with_optimizer=with_optimizer, path=path
            )
            name = meta["base_model"]
            if base_model is not None and canonical_name(base_model) != name:
                raise bad_request(
                    f"Checkpoint {path!r} is of base model {name!r}, not {base_model!r}"
                )
            base = load_base(name)
            adapter = checkpoints.restore_adapter(meta, state, base, path)
            return LocalTrainingClient(
                model_id=_new_model_id(),
                base=base,
                adapter=adapter,
                checkpoint_dir=checkpoint_dir,
                optimizer_state=optimizer_state,
                stability=stability,
            )

        return runtime.submit_client(create)

    def create_training_client_from_state(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> APIFuture[LocalTrainingClient]:
        """A new training client (new model id) with saved weights and a fresh optimizer."""
        return self._from_state(path, False, base_model)

    def create_training_client_from_state_with_optimizer(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> APIFuture[LocalTrainingClient]:
        """A new training client with saved weights AND optimizer state (exact resume)."""
        return self._from_state(path, True, base_model)

    async def create_training_client_from_state_async(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> LocalTrainingClient:
        """Deprecated SDK alias: ``await create_training_client_from_state(...)``."""
        return await self.create_training_client_from_state(
            path, base_model, user_metadata, weights_access_token, optimizer
        ).result_async()

    async def create_training_client_from_state_with_optimizer_async(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> LocalTrainingClient:
        """Deprecated SDK alias: ``await create_training_client_from_state_with_optimizer(...)``."""
        return await self.create_training_client_from_state_with_optimizer(
            path, base_model, user_metadata, weights_access_token
        ).result_async()

    # -- sampling clients -------------------------------------------------------------------
    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
    ) -> APIFuture[LocalSamplingClient]:
        """A sampling client on saved weights (`model_path`) or on a base model as is."""
        self._check_open()
        if model_path is None and base_model is None:
            raise ValueError("Either model_path or base_model must be provided")
        checkpoint_dir = self._checkpoint_dir
        records = self.stability if record_stability_info else None
        if model_path is not None:
            return runtime.submit_client(load_sampling_client, checkpoint_dir, model_path, records)
        assert base_model is not None
        return runtime.submit_client(
            lambda: LocalSamplingClient(load_base(base_model), None, stability=records)
        )

    async def create_sampling_client_async(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
    ) -> LocalSamplingClient:
        """Deprecated SDK alias: ``await create_sampling_client(...)``."""
        return await self.create_sampling_client(
            model_path, base_model, retry_config, record_stability_info
        ).result_async()


def _new_model_id() -> str:
    return f"local-{uuid.uuid4().hex[:16]}"
