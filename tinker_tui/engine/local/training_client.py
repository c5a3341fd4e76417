"""`LocalTrainingClient`: Tinker's TrainingClient, in-process on torch.

It trains a LoRA adapter (`tinker_tui.engine.local.lora`) of the requested rank on the requested layers of
a frozen base model; the base weights never change. Every call returns an awaitable future at
once and runs on the shared torch thread in submission order, so `forward_backward` then
`optim_step` can be submitted before awaiting either, exactly as with Tinker. Gradients
accumulate over `forward_backward` calls until the next `optim_step` (AdamW with Tinker's
defaults, optional gradient clipping). As with Tinker, one failed request poisons the client:
every later request fails with the SDK's "poisoned" message, chained to the cause.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import tinker
import torch
from tinker import types
from tinker.types.optimizer import OptimParamsBase

import tinker_tui.engine.local.checkpoints as checkpoints
import tinker_tui.engine.local.lora as lora
import tinker_tui.engine.local.losses as losses
import tinker_tui.engine.local.packing as packing
import tinker_tui.engine.local.runtime as runtime
import tinker_tui.engine.local.unembed as unembed
from tinker_tui.engine.local.adamw import AdamW
from tinker_tui.engine.local.errors import POISONED_MESSAGE, bad_request
from tinker_tui.engine.local.model import BaseModel, load_base
from tinker_tui.engine.local.sampling_client import InflightWeights, LocalSamplingClient
from tinker_tui.engine.local.stability import StabilityRecords

if TYPE_CHECKING:
    from tinker.lib.public_interfaces.api_future import APIFuture

# Tokens (batch rows x padded length) per forward/backward micro-batch; bounds the memory of
# the backbone's activations (the logits are never held whole: `unembed`). Gradients of
# micro-batches add up, so results are the same.
MAX_TOKENS_PER_MICROBATCH = 8192


def _loss_grad(
    loss_fn: str,
    inputs: Mapping[str, torch.Tensor],
    config: Mapping[str, float],
    logprobs: torch.Tensor,
    at: torch.Tensor,
) -> torch.Tensor:
    """d loss / d logprob at positions `at`, given their logprobs (a built-in loss is a sum
    of per-position terms, so this needs nothing of the other positions)."""
    with torch.enable_grad():
        logprobs = logprobs.detach().requires_grad_()
        part = {key: value[at] for key, value in inputs.items()}
        term = losses.elementwise_loss(loss_fn, logprobs, part, config).sum()
        if not term.requires_grad:
            return torch.zeros_like(logprobs)
        (grad,) = torch.autograd.grad(term, logprobs)
    return grad


class LocalTrainingClient:
    """Trains a LoRA adapter on a frozen base. Same surface as `tinker.TrainingClient`.

    `get_info()` reports ``is_lora=True`` and the rank. `train_attn`, `train_mlp` and
    `train_unembed` choose which layers carry adapters (attention projections, MLP
    projections, the output projection); embeddings and norms are never trained.

    Create it with `LocalServiceClient.create_lora_training_client(...)`, not directly.
    """

    def __init__(
        self,
        *,
        model_id: str,
        base: BaseModel,
        adapter: lora.Adapter,
        checkpoint_dir: Path,
        seed: int | None = None,
        optimizer_state: Mapping[str, Any] | None = None,
        stability: StabilityRecords | None = None,
    ) -> None:
        self._model_id = model_id
        #: The session's recorded sequences (stable_reinforce reads them; samplers made with
        #: ``record_stability_info=True`` write them).
        self._stability = stability if stability is not None else StabilityRecords()
        self._base = base
        self._adapter = adapter
        self._checkpoint_dir = Path(checkpoint_dir)
        self._seed = seed
        self._error: BaseException | None = None
        self._optimizer = self._new_optimizer(optimizer_state)
        #: What this model's in-flight sampling clients share (Tinker's kind="inflight").
        self.inflight_weights = InflightWeights()
        self._info = types.GetInfoResponse(
            model_data=types.ModelData(
                arch=base.arch, model_name=base.name, tokenizer_id=base.name
            ),
            model_id=model_id,
            is_lora=True,
            lora_rank=adapter.rank,
            model_name=base.name,
        )

    def _new_optimizer(self, state: Mapping[str, Any] | None) -> AdamW:
        """AdamW with Tinker's defaults; each `optim_step` sets its own hyperparameters."""
        optimizer = AdamW(
            self._adapter.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0
        )
        if state is not None:
            try:
                optimizer.load_state_dict(state)
            except Exception as exc:
                raise bad_request(f"Optimizer state does not fit this adapter: {exc}") from exc
        return optimizer

    # -- plumbing ---------------------------------------------------------------------------
    def _submit(self, fn: Callable[..., Any], *args: Any) -> APIFuture[Any]:
        def task() -> Any:
            if self._error is not None:
                raise RuntimeError(POISONED_MESSAGE) from self._error
            try:
                return fn(*args)
            except BaseException as exc:
                self._error = exc
                raise

        return runtime.submit(task)

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def checkpoint_dir(self) -> Path:
        return self._checkpoint_dir

    @property
    def base(self) -> BaseModel:
        return self._base

    @property
    def adapter(self) -> lora.Adapter:
        """The trained LoRA matrices (live: they change with every `optim_step`)."""
        return self._adapter

    def get_info(self) -> types.GetInfoResponse:
        return self._info

    async def get_info_async(self) -> types.GetInfoResponse:
        return self._info

    def get_tokenizer(self) -> Any:
        return self._base.tokenizer

    def get_telemetry(self) -> None:
        """No telemetry locally (the SDK returns None when it is off)."""
        return None

    def __repr__(self) -> str:
        return (
            f"LocalTrainingClient(model_id={self._model_id!r}, base_model={self._base.name!r}, "
            f"rank={self._adapter.rank})"
        )

    def training_identity(self) -> APIFuture[str | None]:
        """A digest of everything, besides the data and the hyperparameters, that decides
        what training from this client's current state gives: the base weights, the adapter
        and optimizer state, the backend's code, torch's version and the thread count. Equal
        digests, data and hyperparameters give bit-identical results on CPU (training here is
        deterministic there); None on other devices, where that is not guaranteed. (What a
        cache of training results needs as part of its key; not a Tinker SDK method.)"""
        return self._submit(self._identity)

    def _identity(self) -> str | None:
        if self._base.device.type != "cpu":
            return None
        digest = hashlib.sha256()
        digest.update(_backend_code_digest().encode())
        digest.update(f"{torch.__version__};{torch.get_num_threads()};".encode())
        digest.update(f"{self._base.name};{self._base.fingerprint};".encode())
        digest.update(json.dumps(checkpoints.adapter_meta(self._adapter), sort_keys=True).encode())
        for key, tensor in sorted(self._adapter.state_dict().items()):
            digest.update(key.encode())
            digest.update(tensor.numpy().tobytes())
        state = self._optimizer.state_dict()
        for index, values in sorted(state["state"].items()):
            for key, tensor in sorted(values.items()):
                digest.update(f"{index}.{key}".encode())
                digest.update(tensor.detach().cpu().numpy().tobytes())
        return digest.hexdigest()

    # -- forward / backward -----------------------------------------------------------------
    def forward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        """Loss and per-token logprobs without gradients."""
        if not data:
            raise ValueError("No data provided")
        return self._submit(self._forward_backward, list(data), loss_fn, loss_fn_config, False)

    def forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        """Loss, per-token logprobs, and gradients (accumulated until `optim_step`).

        Losses (Tinker's, as sums over tokens): ``cross_entropy`` (target_tokens, weights);
        ``importance_sampling``, ``ppo`` (config clip_low_threshold 0.8 / clip_high_threshold
        1.2), ``cispo`` (0.0 / 4.0) and ``dro`` (beta 0.05), each on target_tokens, logprobs,
        advantages. Per datum the output has ``logprobs`` and ``elementwise_loss`` (as the
        service's), and ``entropy``: the whole distribution's at each position the loss
        trains, NaN elsewhere (this backend has it; the service does not answer it); metrics
        have ``loss:sum``.
        """
        if not data:
            raise ValueError("No data provided")
        return self._submit(self._forward_backward, list(data), loss_fn, loss_fn_config, True)

    async def forward_async(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        """Deprecated SDK alias: returns the future of `forward`."""
        return self.forward(data, loss_fn, loss_fn_config)

    async def forward_backward_async(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        """Deprecated SDK alias: returns the future of `forward_backward`."""
        return self.forward_backward(data, loss_fn, loss_fn_config)

    def forward_backward_custom(
        self,
        data: list[types.Datum],
        loss_fn: Callable[..., Any],
        *,
        loss_type_input: Literal["logprobs"] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        """Custom loss: ``loss_fn(data, logprobs_list) -> (loss, metrics)``; each logprobs
        tensor is per token of its datum (``target_tokens`` must be 1-D here). The loss is
        differentiated straight through the model (the SDK does the same in two passes)."""
        if not data:
            raise ValueError("No data provided")
        if loss_type_input not in (None, "logprobs"):
            raise ValueError(f"loss_type_input must be 'logprobs' or None, got {loss_type_input!r}")
        if not callable(loss_fn):
            raise TypeError(
                "the local backend takes a callable custom loss (server-side LossHandles need "
                "the Tinker service)"
            )
        return self._submit(self._forward_backward_custom, list(data), loss_fn)

    async def forward_backward_custom_async(
        self,
        data: list[types.Datum],
        loss_fn: Callable[..., Any],
        *,
        loss_type_input: Literal["logprobs"] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        """Deprecated SDK alias: returns the future of `forward_backward_custom`."""
        return self.forward_backward_custom(data, loss_fn, loss_type_input=loss_type_input)

    def _tokens(self, index: int, datum: types.Datum) -> list[int]:
        if not isinstance(datum, types.Datum):
            raise bad_request(f"Datum {index}: expected tinker.Datum, got {type(datum).__name__}")
        try:
            tokens = datum.model_input.to_ints()
        except ValueError as exc:
            raise bad_request(f"Datum {index}: model_input: {exc}") from None
        n = len(tokens)
        if n == 0:
            raise bad_request(f"Datum {index}: model_input is empty")
        if n > self._base.max_context:
            raise bad_request(
                f"Datum {index}: model_input has {n} tokens; the model's context is "
                f"{self._base.max_context}"
            )
        return tokens

    def _check_ids(self, index: int, name: str, ids: np.ndarray) -> None:
        vocab = self._base.vocab_size
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            raise bad_request(
                f"Datum {index}: {name} has token ids outside the vocabulary [0, {vocab})"
            )

    def _datum_arrays(
        self, index: int, datum: types.Datum, loss_fn: str
    ) -> tuple[list[int], dict[str, np.ndarray]]:
        tokens = self._tokens(index, datum)
        n = len(tokens)
        arrays: dict[str, np.ndarray] = {}
        for key, value in datum.loss_fn_inputs.items():
            arr = np.asarray(value.to_numpy())
            if arr.ndim != 1:
                raise bad_request(
                    f"Datum {index}: loss_fn_inputs[{key!r}] has shape {list(arr.shape)}; "
                    f"{loss_fn!r} takes 1-D per-token arrays of length len(model_input) = {n}"
                )
            arrays[key] = arr
        losses.check_datum_inputs(
            loss_fn, index, set(arrays), {k: len(v) for k, v in arrays.items()}, n
        )
        self._check_ids(index, "model_input", np.asarray(tokens))
        self._check_ids(index, "target_tokens", arrays["target_tokens"])
        return tokens, arrays

    def _microbatches(self, lengths: Sequence[int]) -> list[list[int]]:
        batches: list[list[int]] = []
        current: list[int] = []
        width = 0
        for i, n in enumerate(lengths):
            if current and max(width, n) * (len(current) + 1) > MAX_TOKENS_PER_MICROBATCH:
                batches.append(current)
                current, width = [], 0
            current.append(i)
            width = max(width, n)
        if current:
            batches.append(current)
        return batches

    def _hidden_states(self, tokens: Sequence[list[int]]) -> tuple[torch.Tensor, np.ndarray]:
        """The backbone's final hidden states of a batch, flattened to ``[rows * width,
        hidden]``, and per datum position (datums concatenated) the row that predicts its
        target. Call with the adapter active.

        The batch runs in one forward pass, packed by shared prefixes when the model allows
        it and that saves enough (`packing`)."""
        base = self._base
        device = base.device
        layout = None
        if getattr(base.module, "supports_tree_attention", False):
            layout = packing.shared_prefix(tokens, base.pad_token_id)
        if layout is None:
            layout = packing.padded(tokens, base.pad_token_id)
        rows, width = layout.shape
        kwargs: dict[str, torch.Tensor] = {}
        if layout.attention is not None:
            assert layout.position_ids is not None
            kwargs["attention_mask"] = torch.from_numpy(layout.attention).unsqueeze(1).to(device)
            kwargs["position_ids"] = torch.from_numpy(layout.position_ids).to(device)
        input_ids = torch.from_numpy(layout.input_ids).to(device)
        # Right padding needs no attention mask: causal attention never looks ahead.
        hidden = base.backbone(input_ids=input_ids, **kwargs).last_hidden_state
        return hidden.reshape(rows * width, -1), layout.node

    def _target_logprobs(
        self,
        tokens: Sequence[list[int]],
        targets: Sequence[np.ndarray],
        loss_grad: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
        active: Sequence[np.ndarray] | None = None,
        entropy: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logprobs of the targets at every datum position, datums concatenated (float32, on
        the model's device). Call with the adapter active. The projection to the vocabulary
        runs in chunks (`unembed`): no ``[positions, vocab]`` tensor is held.

        Without gradient (`torch.no_grad`), or with gradient for an arbitrary loss of the
        result (`loss_grad` None: custom losses). With `loss_grad` (a built-in, elementwise
        loss: ``loss_grad(logprobs, positions)`` gives d loss / d logprob there) the loss's
        gradient is back-propagated here, in the same pass, and the result is detached.
        Then only hidden states that some position flagged in `active` reads (per datum,
        e.g. nonzero advantage or weight) get gradient; the others are scored without it.
        Their loss coefficient is zero, so the gradient is unchanged, but the backward
        shrinks to the positions that matter (an RL prompt is most of a datum).
        With `entropy` (a tensor of the positions' count), the entropy of the whole
        distribution is written into it at the positions the loss trains (`active`; its
        cost is a third of the normalisation there); the others are left as they are.
        """
        device = self._base.device
        hidden, node = self._hidden_states(tokens)
        head = unembed.Head.of(self._base.module)
        target = torch.from_numpy(
            np.concatenate([np.asarray(t, dtype=np.int64) for t in targets])
        ).to(device)
        # Each hidden state read once (positions sharing one read it together); padding
        # is never projected.
        used, rows = np.unique(node, return_inverse=True)
        if not torch.is_grad_enabled() or loss_grad is None:
            picked = hidden.index_select(0, torch.from_numpy(used).to(device))
            score = (
                unembed.target_logprobs
                if not torch.is_grad_enabled()
                else unembed.differentiable_target_logprobs
            )
            return score(head, picked, torch.from_numpy(rows).to(device), target)
        flags = (
            np.ones(len(node), dtype=bool)
            if active is None
            else np.concatenate([np.asarray(a, dtype=bool) for a in active])
        )
        trained = np.zeros(len(used), dtype=bool)
        trained[rows[flags]] = True
        out = torch.empty(len(node), dtype=torch.float32, device=device)
        graded = trained[rows]  # positions that read a hidden state with gradient
        if (~graded).any():
            scored = np.flatnonzero(~trained)
            remap = np.full(len(used), -1, dtype=np.int64)
            remap[scored] = np.arange(len(scored))
            at = np.flatnonzero(~graded)
            with torch.no_grad():
                out[torch.from_numpy(at).to(device)] = unembed.target_logprobs(
                    head,
                    hidden.index_select(0, torch.from_numpy(used[scored]).to(device)),
                    torch.from_numpy(remap[rows[at]]).to(device),
                    target[at],
                )
        if graded.any():
            kept = np.flatnonzero(trained)
            remap = np.full(len(used), -1, dtype=np.int64)
            remap[kept] = np.arange(len(kept))
            trained_at = np.flatnonzero(graded)
            positions = torch.from_numpy(trained_at).to(device)
            picked = hidden.index_select(0, torch.from_numpy(used[kept]).to(device))
            part = None if entropy is None else torch.empty(len(trained_at), device=device)
            logprobs, grad = unembed.fused_loss_backward(
                head,
                picked,
                torch.from_numpy(remap[rows[trained_at]]).to(device),
                target[positions],
                lambda lp, where: loss_grad(lp, positions[where]),
                part,
            )
            out[positions] = logprobs
            if entropy is not None and part is not None:
                entropy[positions] = part
            if picked.requires_grad:  # through the backbone (unless only the head trains)
                torch.autograd.backward(picked, grad)
        return out

    def _forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, float | str] | None,
        backward: bool,
    ) -> types.ForwardBackwardOutput:
        config = losses.resolve_config(loss_fn, loss_fn_config)
        spec = losses.LOSSES[loss_fn]
        parsed = [self._datum_arrays(i, d, loss_fn) for i, d in enumerate(data)]
        if spec.provenance:  # the sampler's logprobs, as recorded when it sampled
            for i, (datum, (_, given)) in enumerate(zip(data, parsed, strict=True)):
                given["logprobs"] = self._stability.sampler_logprobs(
                    i, datum.loss_fn_input_spans, given["target_tokens"]
                )
        if loss_fn == "gspo":
            self._sequence_log_ratios(parsed)
        keys = [k for k in losses.loss_input_keys(loss_fn) if k != "target_tokens"]
        outputs: list[dict[str, tinker.TensorData]] = [{} for _ in data]
        total = 0.0
        coefficient = spec.coefficient
        device = self._base.device
        with lora.activate(self._base.layers, self._adapter):
            for idx in self._microbatches([len(t) for t, _ in parsed]):
                tokens = [parsed[i][0] for i in idx]
                arrays = [parsed[i][1] for i in idx]
                # dro's quadratic term has gradient wherever the policy moved, not only where
                # the advantage is nonzero.
                active = None if coefficient is None else [a[coefficient] != 0 for a in arrays]
                inputs = {
                    key: torch.from_numpy(
                        np.concatenate([a[key] for a in arrays]).astype(np.float32)
                    ).to(device)
                    for key in keys
                }
                targets = [a["target_tokens"] for a in arrays]
                # NaN where not measured: positions the loss does not train, a forward
                entropy = torch.full((sum(len(t) for t in tokens),), float("nan"), device=device)
                if backward:
                    logprobs = self._target_logprobs(
                        tokens,
                        targets,
                        functools.partial(_loss_grad, loss_fn, inputs, config),
                        active,
                        entropy,
                    )
                else:
                    with torch.no_grad():
                        logprobs = self._target_logprobs(tokens, targets)
                with torch.no_grad():
                    elementwise = losses.elementwise_loss(loss_fn, logprobs, inputs, config)
                total += float(elementwise.sum())
                bounds = np.cumsum([len(t) for t in tokens])[:-1]
                lp = np.split(logprobs.detach().float().cpu().numpy(), bounds)
                el = np.split(elementwise.detach().float().cpu().numpy(), bounds)
                en = np.split(entropy.float().cpu().numpy(), bounds)
                for row, i in enumerate(idx):
                    # `entropy` is this backend's own: it has the whole distribution (the
                    # service answers logprobs only).
                    outputs[i] = {
                        "logprobs": tinker.TensorData.from_numpy(lp[row]),
                        "elementwise_loss": tinker.TensorData.from_numpy(el[row]),
                        "entropy": tinker.TensorData.from_numpy(en[row]),
                    }
        return types.ForwardBackwardOutput(
            loss_fn_output_type="TensorData",
            loss_fn_outputs=outputs,
            metrics={"loss:sum": total},
        )

    def _sequence_log_ratios(self, parsed: list[tuple[list[int], dict[str, np.ndarray]]]) -> None:
        """GSPO's sequence log-ratio per datum (mean of trainer - sampler logprob over the
        tokens `sequence_ratio_mask` marks; without it, those with a nonzero advantage),
        from a pass without gradient before the step: the loss's gradient at a token needs
        this value of its whole sequence, which the fused pass never holds at once. Stored
        per position as ``sequence_log_ratio``, so the loss stays a sum of per-position terms."""
        with lora.activate(self._base.layers, self._adapter), torch.no_grad():
            for idx in self._microbatches([len(t) for t, _ in parsed]):
                tokens = [parsed[i][0] for i in idx]
                arrays = [parsed[i][1] for i in idx]
                logprobs = self._target_logprobs(tokens, [a["target_tokens"] for a in arrays])
                bounds = np.cumsum([len(t) for t in tokens])[:-1]
                for a, lp in zip(
                    arrays, np.split(logprobs.float().cpu().numpy(), bounds), strict=True
                ):
                    mask = a.get("sequence_ratio_mask", a["advantages"]) != 0
                    diff = (lp - a["logprobs"])[mask]
                    value = float(diff.mean()) if diff.size else 0.0
                    a["sequence_log_ratio"] = np.full(len(lp), value, dtype=np.float32)

    def _forward_backward_custom(
        self, data: list[types.Datum], loss_fn: Callable[..., Any]
    ) -> types.ForwardBackwardOutput:
        tokens: list[list[int]] = []
        targets: list[np.ndarray] = []
        for i, datum in enumerate(data):
            toks = self._tokens(i, datum)
            if "target_tokens" not in datum.loss_fn_inputs:
                raise bad_request(f"Datum {i}: custom losses need loss_fn_inputs['target_tokens']")
            tgt = np.asarray(datum.loss_fn_inputs["target_tokens"].to_numpy())
            if tgt.ndim != 1 or len(tgt) != len(toks):
                raise bad_request(
                    f"Datum {i}: the local backend takes 1-D target_tokens of length "
                    f"len(model_input) = {len(toks)} for custom losses, got shape {list(tgt.shape)}"
                )
            self._check_ids(i, "model_input", np.asarray(toks))
            self._check_ids(i, "target_tokens", tgt)
            tokens.append(toks)
            targets.append(tgt)
        with lora.activate(self._base.layers, self._adapter):
            logprobs = self._target_logprobs(tokens, targets)
            bounds = np.cumsum([len(t) for t in tokens])[:-1].tolist()
            per_datum = [lp.cpu() for lp in torch.tensor_split(logprobs, bounds)]
            result = loss_fn(data, per_datum)
            if not (isinstance(result, tuple) and len(result) == 2):
                raise bad_request("custom loss_fn must return (loss, metrics)")
            loss, metrics = result
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise bad_request("custom loss_fn must return a scalar torch.Tensor loss")
            torch.autograd.backward(loss)  # loss.backward(), typed
        outputs = [
            {"logprobs": tinker.TensorData.from_numpy(lp.detach().numpy().astype(np.float32))}
            for lp in per_datum
        ]
        merged = {str(k): float(v) for k, v in dict(metrics or {}).items()}
        merged.setdefault("loss:sum", float(loss.detach()))
        return types.ForwardBackwardOutput(
            loss_fn_output_type="TensorData", loss_fn_outputs=outputs, metrics=merged
        )

    # -- optimizer --------------------------------------------------------------------------
    def optim_step(
        self,
        optim_params: types.OptimParams | None = None,
        *,
        adam_params: types.AdamParams | None = None,
    ) -> APIFuture[types.OptimStepResponse]:
        """One AdamW step on the accumulated gradients, then clear them. ``grad_clip_norm`` > 0
        clips the global gradient norm first; metrics report the norm before clipping."""
        if optim_params is not None and adam_params is not None:
            raise ValueError("Specify optim_params or legacy adam_params, not both")
        params = optim_params if optim_params is not None else adam_params
        if not isinstance(params, (types.AdamParams, OptimParamsBase)):
            raise TypeError("Expected AdamParams or OptimParamsBase")
        return self._submit(self._optim_step, params)

    async def optim_step_async(
        self,
        optim_params: types.OptimParams | None = None,
        *,
        adam_params: types.AdamParams | None = None,
    ) -> APIFuture[types.OptimStepResponse]:
        """Deprecated SDK alias: returns the future of `optim_step`."""
        return self.optim_step(optim_params, adam_params=adam_params)

    def _optim_step(self, params: Any) -> types.OptimStepResponse:
        if not isinstance(params, types.AdamParams):
            raise bad_request(
                f"optim_step: {type(params).__name__} is not supported by the local backend "
                "(it trains with AdamW: pass tinker.AdamParams)"
            )
        if params.learning_rate < 0 or not math.isfinite(params.learning_rate):
            raise bad_request(f"learning_rate must be finite and >= 0, got {params.learning_rate}")
        for group in self._optimizer.param_groups:
            group["lr"] = params.learning_rate
            group["betas"] = (params.beta1, params.beta2)
            group["eps"] = params.eps
            group["weight_decay"] = params.weight_decay
        trainable = self._adapter.parameters()
        max_norm = params.grad_clip_norm if params.grad_clip_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(trainable, max_norm))
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        return types.OptimStepResponse(
            metrics={"grad_norm:mean": grad_norm, "learning_rate:mean": params.learning_rate}
        )

    # -- checkpoints ------------------------------------------------------------------------
    def _meta(self, kind: str, name: str) -> dict[str, Any]:
        return {
            "base_model": self._base.name,
            "model_id": self._model_id,
            "kind": kind,
            "name": name,
            "path": checkpoints.tinker_path(self._model_id, kind, name),
            "vocab_size": self._base.vocab_size,
            "base_fingerprint": self._base.fingerprint,
            **checkpoints.adapter_meta(self._adapter),
        }

    def save_state(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> APIFuture[types.SaveWeightsResponse]:
        """Adapter + optimizer state to ``<checkpoint_dir>/<model_id>/weights/<name>/``;
        returns ``tinker://<model_id>/weights/<name>``."""
        return self._submit(self._save, "weights", name, overwrite, user_metadata)

    async def save_state_async(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> APIFuture[types.SaveWeightsResponse]:
        """Deprecated SDK alias: returns the future of `save_state`."""
        return self.save_state(name, ttl_seconds, overwrite, user_metadata)

    def save_weights_for_sampler(
        self,
        name: str,
        ttl_seconds: int | None = None,
        user_metadata: dict[str, str] | None = None,
    ) -> APIFuture[types.SaveWeightsForSamplerResponse]:
        """Adapter only, to ``<checkpoint_dir>/<model_id>/sampler_weights/<name>/``."""
        return self._submit(self._save, "sampler_weights", name, False, user_metadata)

    async def save_weights_for_sampler_async(
        self,
        name: str,
        ttl_seconds: int | None = None,
        user_metadata: dict[str, str] | None = None,
    ) -> APIFuture[types.SaveWeightsForSamplerResponse]:
        """Deprecated SDK alias: returns the future of `save_weights_for_sampler`."""
        return self.save_weights_for_sampler(name, ttl_seconds, user_metadata)

    def _save(
        self, kind: str, name: str, overwrite: bool, user_metadata: dict[str, str] | None
    ) -> types.SaveWeightsResponse | types.SaveWeightsForSamplerResponse:
        checkpoints.check_name(name)
        meta = self._meta(kind, name)
        if user_metadata:
            meta["user_metadata"] = dict(user_metadata)
        folder = self._checkpoint_dir / self._model_id / kind / name
        checkpoints.save(
            folder,
            meta=meta,
            model_state=self._adapter.state_dict(),
            optimizer_state=self._optimizer.state_dict() if kind == "weights" else None,
            overwrite=overwrite,
        )
        if kind == "weights":
            return types.SaveWeightsResponse(path=meta["path"])
        return types.SaveWeightsForSamplerResponse(path=meta["path"])

    def load_state(
        self, path: str, weights_access_token: str | None = None
    ) -> APIFuture[types.LoadWeightsResponse]:
        """Replace the adapter with a saved one (the optimizer state is reset)."""
        return self._submit(self._load, path, False)

    def load_state_with_optimizer(
        self, path: str, weights_access_token: str | None = None
    ) -> APIFuture[types.LoadWeightsResponse]:
        """Replace adapter and optimizer state with a state saved by `save_state`."""
        return self._submit(self._load, path, True)

    async def load_state_async(
        self, path: str, weights_access_token: str | None = None
    ) -> APIFuture[types.LoadWeightsResponse]:
        """Deprecated SDK alias: returns the future of `load_state`."""
        return self.load_state(path, weights_access_token)

    async def load_state_with_optimizer_async(
        self, path: str, weights_access_token: str | None = None
    ) -> APIFuture[types.LoadWeightsResponse]:
        """Deprecated SDK alias: returns the future of `load_state_with_optimizer`."""
        return self.load_state_with_optimizer(path, weights_access_token)

    def _load(self, path: str, with_optimizer: bool) -> types.LoadWeightsResponse:
        folder = checkpoints.resolve(self._checkpoint_dir, path)
        meta, state, optimizer_state = checkpoints.load(
            folder, with_optimizer=with_optimizer, path=path
        )
        if meta.get("base_model") != self._base.name:
            raise bad_request(
                f"Checkpoint {path!r} is of base model {meta.get('base_model')!r}, "
                f"this client trains {self._base.name!r}"
            )
        checkpoints.check_fingerprint(meta, self._base, path)
        mine = checkpoints.adapter_meta(self._adapter)
        if (meta["lora_rank"], list(meta["lora_kinds"])) != (mine["lora_rank"], mine["lora_kinds"]):
            raise bad_request(
                f"Checkpoint {path!r} has a rank-{meta['lora_rank']} adapter on "
                f"{meta['lora_kinds']}; this client trains rank {mine['lora_rank']} on "
                f"{mine['lora_kinds']}. Use create_training_client_from_state instead."
            )
        try:
            self._adapter.load_state_dict(state)
        except Exception as exc:
            raise bad_request(f"Checkpoint {path!r} does not fit this adapter: {exc}") from exc
        self._optimizer = self._new_optimizer(optimizer_state)
        self._optimizer.zero_grad(set_to_none=True)
        return types.LoadWeightsResponse(path=path, model_id=self._model_id)

    # -- sampling clients -------------------------------------------------------------------
    def save_weights_and_get_sampling_client(
        self,
        name: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
        kind: types.SamplingClientKind = "snapshot",
    ) -> APIFuture[LocalSamplingClient]:
        """A sampling client on a snapshot of the current adapter (taken in submission order:
        after every step submitted before it, before any submitted after it).

        `kind="inflight"`: the snapshot is published to this model's one shared in-flight
        target instead, and the client follows that target: every later in-flight save
        moves it (and every earlier in-flight client) to the newer weights between requests
        (`sampling_client.InflightWeights`).

        `name` has no effect (as in the SDK, where it is deprecated): snapshots are ephemeral.
        Use `save_weights_for_sampler` for a persistent copy.
        """
        if kind == "inflight":
            return self._submit(self._inflight_sampler, record_stability_info)
        if kind != "snapshot":
            return runtime.failed(bad_request(f"unknown sampling client kind {kind!r}"))
        return self._submit(self._snapshot_sampler, record_stability_info)

    async def save_weights_and_get_sampling_client_async(
        self,
        name: str | None = None,
        retry_config: Any = None,
        record_stability_info: bool = False,
        kind: types.SamplingClientKind = "snapshot",
    ) -> LocalSamplingClient:
        """Deprecated SDK alias: ``await save_weights_and_get_sampling_client(...)``."""
        return await self.save_weights_and_get_sampling_client(
            name, retry_config, record_stability_info, kind
        ).result_async()

    def _snapshot_sampler(self, record_stability_info: bool = False) -> LocalSamplingClient:
        return LocalSamplingClient(
            self._base,
            self._adapter.snapshot(),
            stability=self._stability if record_stability_info else None,
        )

    def _inflight_sampler(self, record_stability_info: bool = False) -> LocalSamplingClient:
        target = self.inflight_weights
        target.publish(self._adapter.snapshot())
        return LocalSamplingClient(
            self._base,
            target.adapter,
            inflight=target,
            stability=self._stability if record_stability_info else None,
        )

    def create_sampling_client(
        self, model_path: str, retry_config: Any = None, record_stability_info: bool = False
    ) -> APIFuture[LocalSamplingClient]:
        """A sampling client on saved weights (``tinker://...``)."""
        return runtime.submit(
            load_sampling_client,
            self._checkpoint_dir,
            model_path,
            self._stability if record_stability_info else None,
        )

    async def create_sampling_client_async(
        self, model_path: str, retry_config: Any = None, record_stability_info: bool = False
    ) -> LocalSamplingClient:
        """Deprecated SDK alias: ``await create_sampling_client(...)``."""
        return await self.create_sampling_client(
            model_path, retry_config, record_stability_info
        ).result_async()


@functools.cache
def _backend_code_digest() -> str:
    """The source of this package (the local backend's arithmetic lives in it)."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def load_sampling_client(
    checkpoint_dir: Path, model_path: str, stability: StabilityRecords | None = None
) -> LocalSamplingClient:
    """Build a sampling client from a saved checkpoint (runs on the torch thread)."""
    folder = checkpoints.resolve(checkpoint_dir, model_path)
    meta, state, _ = checkpoints.load(folder, with_optimizer=False, path=model_path)
    base = load_base(meta["base_model"])
    adapter = checkpoints.restore_adapter(meta, state, base, model_path)
    return LocalSamplingClient(base, adapter.snapshot(), model_path=model_path, stability=stability)
