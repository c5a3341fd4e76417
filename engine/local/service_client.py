"""`LocalServiceClient`: the entry point of the local backend, shaped like `tinker.ServiceClient`.

It needs no network and no credentials: it creates training and sampling clients on the
embedded models and keeps checkpoints under `checkpoint_dir`. Creation calls return awaitable
futures (model building runs on the torch thread), like the SDK's.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from tinker import types

from engine.local import checkpoints, runtime
from engine.local.errors import bad_request
from engine.local.model import _ensure_offline, build_model, get_spec, list_base_models
from engine.local.sampling_client import LocalSamplingClient
from engine.local.training_client import LocalTrainingClient, load_sampling_client

if TYPE_CHECKING:
    from tinker.lib.public_interfaces.api_future import APIFuture


class LocalServiceClient:
    """In-process stand-in for `tinker.ServiceClient` (see `engine.local`).

    `checkpoint_dir` defaults to $TINKER_TUI_CHECKPOINT_DIR, else
    $XDG_DATA_HOME/tinker-tui/checkpoints; it is created on the first save. Other SDK keyword
    arguments (api_key, base_url, ...) are accepted and ignored.
    """

    def __init__(
        self,
        user_metadata: dict[str, str] | None = None,
        project_id: str | None = None,
        *,
        checkpoint_dir: str | Path | None = None,
        **kwargs: Any,
    ) -> None:
        _ensure_offline()
        self._user_metadata = user_metadata
        self._project_id = project_id
        self._checkpoint_dir = (
            Path(checkpoint_dir).expanduser()
            if checkpoint_dir is not None
            else checkpoints.default_checkpoint_dir()
        )
        self._closed = False

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
        status: Literal["success", "errored", "interrupted"] = "success",
        detail: str | None = None,
    ) -> APIFuture[None]:
        """Mark the session finished; later client creation fails. Clients already made keep
        working (they hold their own weights)."""
        self._closed = True
        return runtime.completed(None)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("LocalServiceClient is closed")

    # -- capabilities -----------------------------------------------------------------------
    def get_server_capabilities(self) -> types.GetServerCapabilitiesResponse:
        """The embedded models (answered at once, no future, like the SDK's method)."""
        return types.GetServerCapabilitiesResponse(
            supported_models=[
                types.SupportedModel(
                    model_name=name,
                    max_context_length=get_spec(name).max_context_length,
                    trainable=True,
                    sampleable=True,
                )
                for name in list_base_models()
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
        """A training client on a fresh copy of `base_model`.

        Full fine-tuning, not LoRA: `rank` is recorded only (see `LocalTrainingClient`). `seed`
        is recorded; the base weights are the same in every process anyway.
        """
        self._check_open()
        assert any([train_mlp, train_attn, train_unembed]), (
            "At least one of train_mlp, train_attn, or train_unembed must be True"
        )
        checkpoint_dir = self._checkpoint_dir

        def create() -> LocalTrainingClient:
            if optimizer is not None and getattr(optimizer, "type", "adamw") != "adamw":
                raise bad_request(
                    f"optimizer {optimizer!r} is not supported by the local backend (AdamW only)"
                )
            if not isinstance(rank, int) or rank < 1:
                raise bad_request(f"rank must be a positive integer, got {rank!r}")
            model, tokenizer = build_model(base_model)
            return LocalTrainingClient(
                model_id=_new_model_id(),
                base_model=base_model,
                model=model,
                tokenizer=tokenizer,
                checkpoint_dir=checkpoint_dir,
                lora_rank=rank,
                train_mlp=train_mlp,
                train_attn=train_attn,
                train_unembed=train_unembed,
                seed=seed,
            )

        return runtime.submit(create)

    async def create_lora_training_client_async(
        self, base_model: str, rank: int = 32, **kwargs: Any
    ) -> LocalTrainingClient:
        """Deprecated SDK alias: ``await create_lora_training_client(...)``."""
        return await self.create_lora_training_client(base_model, rank, **kwargs)

    def _from_state(
        self, path: str, with_optimizer: bool, base_model: str | None
    ) -> APIFuture[LocalTrainingClient]:
        self._check_open()
        checkpoint_dir = self._checkpoint_dir

        def create() -> LocalTrainingClient:
            folder = checkpoints.resolve(checkpoint_dir, path)
            meta, model_state, optimizer_state = checkpoints.load(
                folder, with_optimizer=with_optimizer, path=path
            )
            name = meta["base_model"]
            if base_model is not None and base_model != name:
                raise bad_request(
                    f"Checkpoint {path!r} is of base model {name!r}, not {base_model!r}"
                )
            model, tokenizer = build_model(name)
            try:
                model.load_state_dict(model_state)
            except Exception as exc:
                raise bad_request(
                    f"Checkpoint {path!r} does not fit base model {name!r}: {exc}"
                ) from exc
            return LocalTrainingClient(
                model_id=_new_model_id(),
                base_model=name,
                model=model,
                tokenizer=tokenizer,
                checkpoint_dir=checkpoint_dir,
                lora_rank=meta.get("lora_rank"),
                train_mlp=meta.get("train_mlp", True),
                train_attn=meta.get("train_attn", True),
                train_unembed=meta.get("train_unembed", True),
                optimizer_state=optimizer_state,
            )

        return runtime.submit(create)

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
        self, path: str, **kwargs: Any
    ) -> LocalTrainingClient:
        return await self.create_training_client_from_state(path, **kwargs)

    async def create_training_client_from_state_with_optimizer_async(
        self, path: str, **kwargs: Any
    ) -> LocalTrainingClient:
        return await self.create_training_client_from_state_with_optimizer(path, **kwargs)

    # -- sampling clients -------------------------------------------------------------------
    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
    ) -> APIFuture[LocalSamplingClient]:
        """A sampling client on saved weights (`model_path`) or on a base model's weights."""
        self._check_open()
        if model_path is None and base_model is None:
            raise ValueError("Either model_path or base_model must be provided")
        checkpoint_dir = self._checkpoint_dir
        if model_path is not None:
            return runtime.submit(load_sampling_client, checkpoint_dir, model_path)

        def create() -> LocalSamplingClient:
            assert base_model is not None
            model, tokenizer = build_model(base_model)
            return LocalSamplingClient(base_model, model, tokenizer)

        return runtime.submit(create)

    async def create_sampling_client_async(
        self, model_path: str | None = None, base_model: str | None = None, **_: Any
    ) -> LocalSamplingClient:
        return await self.create_sampling_client(model_path, base_model)


def _new_model_id() -> str:
    return f"local-{uuid.uuid4().hex[:16]}"
