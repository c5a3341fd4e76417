"""Low-rank adapters (LoRA) over a frozen, shared base model.

Every `nn.Linear` of the base that LoRA may adapt is replaced once, when the base is loaded, by a
`LoRALinear` that still computes the frozen base projection and adds ``scale * B(A(x))`` when
an adapter is active. The adapter tensors themselves live outside the model, in an `Adapter`
(``A`` is ``[rank, in]``, ``B`` is ``[out, rank]``, ``scale = alpha / rank``), so one base in
memory serves any number of training clients and sampling snapshots: `activate` points the
layers at one adapter for the duration of a forward pass. All torch work runs on the one torch
thread (`runtime`), so two adapters are never active at once.

Which layers are adapted follows Tinker's flags: ``attn`` (attention projections), ``mlp``
(feed-forward projections) and ``unembed`` (the output projection, `lm_head`). Embeddings and
norms are never adapted. Initialisation is the usual one: ``A`` uniform in
``±1/sqrt(in_features)`` (PyTorch's `nn.Linear` default), ``B`` zero, so a new adapter starts
exactly at the base model. ``alpha`` is fixed at 32 (``scale = 32 / rank``), which keeps the
best learning rate roughly independent of the rank.

A sampling snapshot of a small model may instead carry *merged* weights (``W + scale * B A``
per adapted layer), which makes sampling as fast as the plain model; see `merge`. Training on a
small layer fuses the same way on each call (``x @ (W + scale * B A)^T``, differentiable in
``A`` and ``B``) when the batch is large enough for that to be cheaper.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from tinker_tui.engine.local.causal_lm import CausalLM

LORA_ALPHA = 32.0
#: Largest layer (in * out weights) whose adapter may be fused into a temporary weight.
FUSE_MAX_ELEMENTS = 1 << 20
KINDS = ("attn", "mlp", "unembed")
_ATTN_MARKERS = ("attn", "attention")
_MLP_MARKERS = ("mlp", "feed_forward", "ffn")


class LoRALinear(nn.Module):
    """A frozen `nn.Linear` plus, while an adapter is active, its low-rank update."""

    def __init__(self, base: nn.Linear, kind: str) -> None:
        super().__init__()
        self.base = base
        self.kind = kind
        self.in_features = base.in_features
        self.out_features = base.out_features
        # Set by `activate`: (A, B, scale), or a merged weight that replaces the base weight.
        self.lora: tuple[torch.Tensor, torch.Tensor, float] | None = None
        self.merged: torch.Tensor | None = None
        # Rows of input from which the fused form (see `forward`) is faster: about twice
        # in*out/(in+out) on CPU; below that the two thin matmuls cost less than building
        # W + scale * B A. 0: never fused (a layer too big to hold a second copy of W, which
        # autograd keeps until the backward pass).
        size = self.in_features * self.out_features
        self.fuse_rows = (
            max(1, 2 * size // (self.in_features + self.out_features))
            if size <= FUSE_MAX_ELEMENTS
            else 0
        )

    # Hugging Face code reads (and, when tying embeddings, writes) `.weight` / `.bias`.
    @property
    def weight(self) -> torch.Tensor:
        return self.base.weight

    @weight.setter
    def weight(self, value: torch.Tensor) -> None:
        self.base.weight = value

    @property
    def bias(self) -> torch.Tensor | None:
        return self.base.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.merged is not None:
            return F.linear(x, self.merged, self.base.bias)
        if self.lora is None:
            plain: torch.Tensor = self.base(x)
            return plain
        a, b, scale = self.lora
        weight = self.base.weight
        if (
            self.fuse_rows
            and weight.dtype == a.dtype
            and x.numel() >= self.fuse_rows * self.in_features
        ):
            # Fused: one projection with W + scale * B A, built on each call and
            # differentiable in A and B: fewer, larger matmuls than W x + scale * B (A x).
            return F.linear(x, torch.addmm(weight, b, a, alpha=scale), self.base.bias)
        y: torch.Tensor = self.base(x)
        low = F.linear(x.to(a.dtype), a)
        if y.dtype == b.dtype:  # one fused y + scale * low @ B^T
            flat = torch.addmm(
                y.reshape(-1, y.shape[-1]), low.reshape(-1, low.shape[-1]), b.t(), alpha=scale
            )
            return flat.view(y.shape)
        return y + (F.linear(low, b) * scale).to(y.dtype)

    def extra_repr(self) -> str:
        return f"kind={self.kind}, in={self.in_features}, out={self.out_features}"


def _kind_of(name: str) -> str | None:
    parts = name.lower().split(".")
    if any(any(m in p for m in _ATTN_MARKERS) for p in parts):
        return "attn"
    if any(any(m in p for m in _MLP_MARKERS) for p in parts):
        return "mlp"
    return None


def install(model: CausalLM) -> dict[str, LoRALinear]:
    """Wrap every adaptable `nn.Linear` of `model` in place; returns them by qualified name.

    Attention and MLP projections are found by module name (``self_attn``, ``attention``,
    ``mlp``, ``feed_forward``...); the unembedding is `model.get_output_embeddings()`.
    """
    output = model.get_output_embeddings()
    targets: list[tuple[str, nn.Linear, str]] = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        kind = "unembed" if module is output else _kind_of(name)
        if kind is not None:
            targets.append((name, module, kind))
    layers: dict[str, LoRALinear] = {}
    for name, module, kind in targets:
        wrapper = LoRALinear(module, kind)
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, wrapper)
        layers[name] = wrapper
    return layers


@dataclass
class Adapter:
    """The trainable low-rank matrices of one model: ``{layer: (A [r, in], B [out, r])}``."""

    rank: int
    kinds: tuple[str, ...]
    weights: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    alpha: float = LORA_ALPHA

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    @classmethod
    def create(
        cls,
        layers: Mapping[str, LoRALinear],
        rank: int,
        kinds: tuple[str, ...],
        *,
        seed: int,
        device: torch.device | str = "cpu",
    ) -> Adapter:
        """Fresh adapters on every layer of the given kinds (``B = 0``: output = base model)."""
        generator = torch.Generator().manual_seed(seed)
        weights: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for name, layer in layers.items():
            if layer.kind not in kinds:
                continue
            bound = 1.0 / math.sqrt(layer.in_features)
            a = (torch.rand((rank, layer.in_features), generator=generator) * 2 - 1) * bound
            b = torch.zeros((layer.out_features, rank))
            weights[name] = (
                nn.Parameter(a.to(device)),
                nn.Parameter(b.to(device)),
            )
        return cls(rank=rank, kinds=tuple(k for k in KINDS if k in kinds), weights=weights)

    def parameters(self) -> list[torch.Tensor]:
        return [t for pair in self.weights.values() for t in pair]

    def num_parameters(self) -> int:
        return sum(t.numel() for t in self.parameters())

    def snapshot(self) -> Adapter:
        """A detached copy (what a sampling client freezes)."""
        return Adapter(
            rank=self.rank,
            kinds=self.kinds,
            alpha=self.alpha,
            weights={
                n: (a.detach().clone(), b.detach().clone()) for n, (a, b) in self.weights.items()
            },
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        """``{"<layer>.lora_A": A, "<layer>.lora_B": B}`` as detached CPU tensors."""
        out: dict[str, torch.Tensor] = {}
        for name, (a, b) in self.weights.items():
            out[f"{name}.lora_A"] = a.detach().to("cpu", copy=True)
            out[f"{name}.lora_B"] = b.detach().to("cpu", copy=True)
        return out

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Copy saved matrices into these (same layers and shapes, or ValueError)."""
        expected = {f"{n}.lora_{x}" for n in self.weights for x in "AB"}
        if set(state) != expected:
            missing = sorted(expected - set(state))[:3]
            extra = sorted(set(state) - expected)[:3]
            raise ValueError(f"adapter layers differ (missing {missing}, unexpected {extra})")
        with torch.no_grad():
            for name, (a, b) in self.weights.items():
                for dst, key in ((a, f"{name}.lora_A"), (b, f"{name}.lora_B")):
                    src = state[key]
                    if tuple(src.shape) != tuple(dst.shape):
                        raise ValueError(
                            f"{key} has shape {list(src.shape)}, expected {list(dst.shape)}"
                        )
                    dst.copy_(src.to(dst.device, dst.dtype))

    def merge(self, layers: Mapping[str, LoRALinear]) -> dict[str, torch.Tensor]:
        """``{layer: W + scale * B @ A}`` for every adapted layer (for fast sampling)."""
        merged: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for name, (a, b) in self.weights.items():
                w = layers[name].base.weight
                delta = (b.float() @ a.float()) * self.scale
                merged[name] = (w.float() + delta.to(w.device)).to(w.dtype)
        return merged


@contextlib.contextmanager
def activate(
    layers: Mapping[str, LoRALinear],
    adapter: Adapter | None = None,
    merged: Mapping[str, torch.Tensor] | None = None,
) -> Iterator[None]:
    """Run the base with `adapter` (or `merged` weights, or neither: the plain base)."""
    try:
        for name, layer in layers.items():
            if merged is not None and name in merged:
                layer.merged = merged[name]
            elif adapter is not None and name in adapter.weights:
                a, b = adapter.weights[name]
                layer.lora = (a, b, adapter.scale)
        yield
    finally:
        for layer in layers.values():
            layer.lora = None
            layer.merged = None
