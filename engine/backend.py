"""The training backend: drives any object with the Tinker client interface.

`Policy` is the code above the seam. It is identical for the embedded local backend
(`engine.local.LocalServiceClient`) and for the real `tinker.ServiceClient`; only the
service client object handed to it differs. It owns the training client, the current
sampling client and its policy version, turns trajectory groups into Datums, trains, and
publishes the next sampling client.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tinker

from engine.trajectory import TrajectoryGroup, turn_to_datum_arrays


class BackendError(RuntimeError):
    """A backend cannot be used as asked; the message tells the user what to do."""


def tinker_credentials_present() -> bool:
    """Local-only check (never contacts the service): is a Tinker credential configured?"""
    if os.environ.get("TINKER_API_KEY") or os.environ.get("TINKER_CREDENTIAL_CMD"):
        return True
    from tinker.auth import tinker_has_credentials

    return tinker_has_credentials()


def choose_backend(requested: str | None) -> str:
    """Decide up front between the real service and the local one, from credentials only.

    Trying the network instead would hang for minutes while the SDK retries.
    """
    if requested == "tinker":
        if not tinker_credentials_present():
            raise BackendError(
                "--backend tinker needs a Tinker API key: set TINKER_API_KEY (or "
                "TINKER_CREDENTIAL_CMD, or run `tinker auth login`), or use --backend local."
            )
        return "tinker"
    if requested == "local":
        return "local"
    if requested is None:
        return "tinker" if tinker_credentials_present() else "local"
    raise BackendError(f"unknown backend {requested!r}: use 'local' or 'tinker'")


def make_service_client(backend: str, checkpoint_dir: Path) -> Any:
    if backend == "tinker":
        return tinker.ServiceClient()
    from engine.local import LocalServiceClient

    return LocalServiceClient(checkpoint_dir=checkpoint_dir)


def renderer_name_for(base_model: str) -> str:
    """The tinker-cookbook renderer that fits a base model."""
    from engine.local import DEFAULT_BASE_MODEL

    if base_model == DEFAULT_BASE_MODEL:
        return "role_colon"
    from tinker_cookbook.model_info import get_recommended_renderer_names

    try:
        return get_recommended_renderer_names(base_model)[0]
    except Exception:
        return "role_colon"


@dataclass(frozen=True, slots=True)
class TrainResult:
    policy_version: int
    metrics: dict[str, float]
    num_datums: int
    num_tokens: int


class Policy:
    """The policy being trained: training client, versioned sampling client, renderer."""

    def __init__(
        self,
        service_client: Any,
        *,
        base_model: str,
        lora_rank: int = 32,
        seed: int = 0,
        renderer_name: str | None = None,
    ) -> None:
        self.service_client = service_client
        self.base_model = base_model
        self.lora_rank = lora_rank
        self.seed = seed
        self.renderer_name = renderer_name or renderer_name_for(base_model)
        self.version = 0
        self.training_client: Any = None
        self.sampling_client: Any = None
        self.renderer: Any = None
        self.tokenizer: Any = None

    async def start(self, *, from_state: str | None = None, version: int = 0) -> None:
        """Create the training client (fresh, or from a saved state) and sampler version 0."""
        from tinker_cookbook.renderers import get_renderer

        if from_state is None:
            self.training_client = await self.service_client.create_lora_training_client(
                base_model=self.base_model, rank=self.lora_rank, seed=self.seed
            )
        else:
            self.training_client = (
                await self.service_client.create_training_client_from_state_with_optimizer(
                    from_state
                )
            )
        self.tokenizer = self.training_client.get_tokenizer()
        self.renderer = get_renderer(self.renderer_name, self.tokenizer)
        self.version = version
        self.sampling_client = await self.training_client.save_weights_and_get_sampling_client(
            name=f"policy-v{version:06d}"
        )

    def build_datums(self, groups: Sequence[TrajectoryGroup]) -> list[tinker.Datum]:
        """One Datum per sampled assistant turn, weighted by its group-relative advantage."""
        datums: list[tinker.Datum] = []
        for group in groups:
            for trajectory, advantage in zip(group.trajectories, group.advantages(), strict=True):
                for turn in trajectory.turns:
                    if not turn.tokens:
                        continue
                    arrays = turn_to_datum_arrays(turn, advantage)
                    datums.append(
                        tinker.Datum(
                            model_input=tinker.ModelInput.from_ints(arrays["model_input"]),
                            loss_fn_inputs={
                                "target_tokens": list(arrays["target_tokens"]),
                                "logprobs": list(arrays["logprobs"]),
                                "advantages": list(arrays["advantages"]),
                            },
                        )
                    )
        return datums

    async def train(
        self,
        datums: list[tinker.Datum],
        *,
        loss_fn: str = "importance_sampling",
        learning_rate: float,
    ) -> TrainResult:
        """One optimizer step, then publish the next sampling client (version + 1)."""
        # Submit both before awaiting either, so the service can pipeline them.
        started = time.perf_counter()
        fb_future = self.training_client.forward_backward(datums, loss_fn)
        optim_future = self.training_client.optim_step(
            tinker.AdamParams(learning_rate=learning_rate)
        )
        fb = await fb_future
        fb_done = time.perf_counter()
        await optim_future
        optim_done = time.perf_counter()
        self.version += 1
        self.sampling_client = await self.training_client.save_weights_and_get_sampling_client(
            name=f"policy-v{self.version:06d}"
        )
        published = time.perf_counter()
        num_tokens = sum(d.model_input.length for d in datums)
        metrics = {"train/loss_sum": float(fb.metrics.get("loss:sum", 0.0)),
                   "time/forward_backward": fb_done - started,
                   "time/optim_step": optim_done - fb_done,
                   "time/publish_weights": published - optim_done}
        return TrainResult(self.version, metrics, len(datums), num_tokens)

    async def train_supervised(
        self, conversations: Sequence[list[dict[str, str]]], *, learning_rate: float
    ) -> float:
        """One cross-entropy step on whole conversations (last assistant turn trained)."""
        datums = []
        for messages in conversations:
            model_input, weights = self.renderer.build_supervised_example(messages)
            tokens = model_input.to_ints()
            weight_list = [float(w) for w in weights.tolist()]
            datums.append(
                tinker.Datum(
                    model_input=tinker.ModelInput.from_ints(tokens[:-1]),
                    loss_fn_inputs={
                        "target_tokens": tokens[1:],
                        "weights": weight_list[1:],
                    },
                )
            )
        fb_future = self.training_client.forward_backward(datums, "cross_entropy")
        optim_future = self.training_client.optim_step(
            tinker.AdamParams(learning_rate=learning_rate)
        )
        fb = await fb_future
        await optim_future
        return float(fb.metrics.get("loss:sum", 0.0))

    async def publish(self) -> None:
        """Publish the current weights as the sampling client (after supervised steps)."""
        self.sampling_client = await self.training_client.save_weights_and_get_sampling_client(
            name=f"policy-v{self.version:06d}-warm"
        )

    async def save_state(self, name: str) -> str:
        """Full checkpoint with optimizer state; returns its tinker:// path."""
        response = await self.training_client.save_state(name)
        return response.path
