"""The output projection (hidden states -> vocabulary logits) applied in chunks of rows, so no
``[tokens x vocab]`` tensor is ever held.

Why: a real vocabulary is large (Qwen3: 151,936 rows). The logits of a training batch of a few
thousand positions are gigabytes, and autograd keeps several tensors of that size (the logits,
the softmax of the log-normaliser's backward, the gather's scattered gradient). Everything the
backend needs from the logits is small per position — the target's logprob, and for sampling
or prompt scoring the top-k — so each chunk of rows is projected, reduced and dropped.

Four ways to use it:

* `target_logprobs`: the targets' logprobs without gradient (forward).
* `scored`: a sequence's logprobs and top-k without gradient (a sampler's prompt logprobs).
* `fused_loss_backward`: a built-in loss's value and gradient in one pass. Tinker's losses are
  elementwise in the target logprobs, so a chunk's loss gradient ``g`` is known as soon as the
  chunk's logprobs are: ``dL/dlogits = sum_p g_p (onehot(target_p) - softmax)`` is formed and
  pushed through the projection at once, never recomputed. The gradient reaches the LoRA
  matrices of the projection directly (their ``.grad``) and the hidden states as a returned
  tensor, which the caller back-propagates through the backbone.
* `TargetLogprobs` (an autograd Function): differentiable target logprobs for losses that are
  not elementwise (custom losses); its backward recomputes each chunk's logits.

`Head` holds what a projection needs: the weight (or a sampler's merged weight), the bias, the
active LoRA pair and its scale, and the model's logit post-processing (``logit_scale``,
``final_logit_softcapping``), read from the model as it is activated (`lora.activate`).
Results equal the unchunked computation up to float rounding (tests compare both).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

#: Logit elements (rows x vocabulary) per chunk: 8M floats, 32 MB, one buffer reused chunk
#: after chunk. On a 151,936-row vocabulary on CPU, 13-row chunks (2M) were half as fast and
#: 27-row chunks (4M) a quarter slower, both re-reading the weight too often; 4x larger
#: chunks gained nothing.
CHUNK_ELEMENTS = 1 << 23
#: A LoRA pair on the projection may be folded into one weight (W + scale * B A) only when the
#: weight has at most this many elements (it, and in training its float32 gradient, are held
#: whole); whether that pays is decided by counting the work (`_fold_pays`).
FOLD_MAX_ELEMENTS = 1 << 24


@dataclass(frozen=True)
class Head:
    weight: torch.Tensor  # [vocab, hidden]
    bias: torch.Tensor | None
    lora: tuple[torch.Tensor, torch.Tensor, float] | None  # A [r, hidden], B [vocab, r], scale
    logit_scale: float | None = None
    softcap: float | None = None

    @classmethod
    def of(cls, module: Any) -> Head:
        """The projection of a causal LM as it runs now (its LoRA layer's active state)."""
        layer = module.get_output_embeddings()
        merged = getattr(layer, "merged", None)
        lora = getattr(layer, "lora", None) if merged is None else None
        config = getattr(module, "config", None)
        scale = getattr(config, "logit_scale", None)
        cap = getattr(config, "final_logit_softcapping", None)
        return cls(
            weight=merged if merged is not None else layer.weight,
            bias=layer.bias,
            lora=lora,
            logit_scale=None if scale is None else float(scale),
            softcap=None if cap is None else float(cap),
        )

    @property
    def vocab_size(self) -> int:
        return int(self.weight.shape[0])

    def chunk_rows(self) -> int:
        return max(1, CHUNK_ELEMENTS // self.vocab_size)

    @torch.no_grad()
    def folded(self, rows: int, backward: bool = False) -> Head:
        """The same projection, its LoRA pair folded into the weight when that is less work
        for `rows` rows (`_fold_pays`); detached (gradients are formed by hand here)."""
        if self.lora is None:
            return Head(self.weight.detach(), self.bias, None, self.logit_scale, self.softcap)
        a, b, scale = (self.lora[0].detach(), self.lora[1].detach(), self.lora[2])
        if not _fold_pays(self.weight, a, rows, backward):
            return Head(
                self.weight.detach(), self.bias, (a, b, scale), self.logit_scale, self.softcap
            )
        weight = torch.addmm(
            self.weight, b.to(self.weight.dtype), a.to(self.weight.dtype), alpha=scale
        )
        return Head(weight, self.bias, None, self.logit_scale, self.softcap)

    @torch.no_grad()
    def logits(self, hidden: torch.Tensor, buffer: torch.Tensor | None = None) -> torch.Tensor:
        """Float32 logits, as the model's own forward computes them (no gradient: the
        gradients are formed by hand, `_Backward`). Written into `buffer` (a `Chunks`
        buffer) when the weights are float32: a fresh tensor of this size per chunk costs
        the kernel's page zeroing each time (a third of the time on CPU)."""
        rows = hidden.shape[0]
        if buffer is not None and self.weight.dtype == hidden.dtype == buffer.dtype:
            z = torch.mm(hidden, self.weight.t(), out=buffer[:rows])
            if self.bias is not None:
                z.add_(self.bias)
        else:
            z = F.linear(hidden, self.weight, self.bias)
        if self.lora is not None:
            a, b, scale = self.lora
            low = F.linear(hidden.to(a.dtype), a)
            if z.dtype == b.dtype:
                z.addmm_(low, b.t(), alpha=scale)
            else:
                z += (F.linear(low, b) * scale).to(z.dtype)
        z = z.float()
        if self.logit_scale is not None:
            z.mul_(self.logit_scale)
        if self.softcap is not None:
            z.div_(self.softcap).tanh_().mul_(self.softcap)
        return z


def _fold_pays(weight: torch.Tensor, a: torch.Tensor, rows: int, backward: bool) -> bool:
    """Whether ``W + scale * B A`` (built once, and in training its gradient turned into A's
    and B's once) is less arithmetic for `rows` rows than two thin products per row (three
    with the backward): per row, thin costs ``r (H + V)`` more multiply-adds forward and ``2 r
    V`` backward; folding costs ``V H r`` once, ``V H`` per row backward (the weight's
    gradient) and ``2 V H r`` after."""
    vocab, hidden = weight.shape
    r = a.shape[0]
    if weight.numel() > FOLD_MAX_ELEMENTS:
        return False
    thin = rows * r * (hidden + vocab) + (2 * rows * r * vocab if backward else 0)
    fold = vocab * hidden * r + ((rows + 2 * r) * vocab * hidden if backward else 0)
    return fold < thin


def _chunks(rows: int, size: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + size, rows)) for lo in range(0, rows, size)]


def _buffer(head: Head, hidden: torch.Tensor) -> torch.Tensor:
    """One chunk's logits, reused chunk after chunk."""
    rows = min(head.chunk_rows(), hidden.shape[0])
    return torch.empty((rows, head.vocab_size), dtype=torch.float32, device=hidden.device)


def _normalise(
    logits: torch.Tensor, local: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The target logprobs of positions (`local`: their rows), and, in place of `logits`,
    ``exp(logits - max)`` with its row sums: one exp pass gives the log-normaliser and the
    softmax (``probs / total``). Returns (logprobs, probs, total [rows, 1])."""
    picked = logits[local, targets]
    top = logits.amax(dim=-1, keepdim=True)
    probs = logits.sub_(top).exp_()
    total = probs.sum(dim=-1, keepdim=True)
    return picked - (top + total.log())[local, 0], probs, total


def _normalise_entropy(
    logits: torch.Tensor, local: torch.Tensor, targets: torch.Tensor, spare: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`_normalise`, and the entropy of each position's distribution: the softmax goes into
    `spare` (a buffer of the logits' size) so the shifted logits stay, and ``H = log total -
    sum(exp(z) z) / total`` (z the shifted logits) is one batched dot product per row. (An
    in-place ``p log p`` pass doubled the chunk's time on a 151,936-row vocabulary; this
    adds about a third of `_normalise`'s.) Returns (logprobs, probs, total, entropy)."""
    picked = logits[local, targets]
    top = logits.amax(dim=-1, keepdim=True)
    shifted = logits.sub_(top)
    probs = torch.exp(shifted, out=spare[: logits.shape[0]])
    total = probs.sum(dim=-1, keepdim=True)
    dot = torch.bmm(probs.unsqueeze(1), shifted.unsqueeze(2))[:, 0, 0]
    sums = total[:, 0]
    entropy = (sums.log() - dot / sums)[local]
    return picked - (top + total.log())[local, 0], probs, total, entropy


def _grouped(rows: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions sorted by the hidden-state row they read, and where each row's run starts
    (`starts[r]`..`starts[r + 1]`), so a chunk of rows finds its positions by slicing."""
    order = torch.argsort(rows, stable=True)
    starts = torch.searchsorted(rows[order], torch.arange(count + 1, device=rows.device))
    return order, starts


@torch.no_grad()
def target_logprobs(
    head: Head, hidden: torch.Tensor, rows: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """``log softmax(logits(hidden[rows[p]]))[targets[p]]`` for every position p (float32)."""
    head = head.folded(hidden.shape[0])
    out = torch.empty(len(rows), dtype=torch.float32, device=hidden.device)
    if not len(rows):
        return out
    order, starts = _grouped(rows, hidden.shape[0])
    buffer = _buffer(head, hidden)
    for lo, hi in _chunks(hidden.shape[0], head.chunk_rows()):
        at = order[int(starts[lo]) : int(starts[hi])]
        if len(at):
            logits = head.logits(hidden[lo:hi], buffer)
            out[at] = _normalise(logits, rows[at] - lo, targets[at])[0]
    return out


@torch.no_grad()
def scored(
    head: Head, hidden: torch.Tensor, targets: torch.Tensor, topk: int = 0
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Row i's target logprob (``targets[i]``) and, with `topk`, its k most likely tokens'
    logprobs and ids: (logprobs [n], values [n, k] or None, ids [n, k] or None)."""
    head = head.folded(hidden.shape[0])
    n = hidden.shape[0]
    out = torch.empty(n, dtype=torch.float32, device=hidden.device)
    values = torch.empty((n, topk), dtype=torch.float32, device=hidden.device) if topk else None
    ids = torch.empty((n, topk), dtype=torch.long, device=hidden.device) if topk else None
    buffer = _buffer(head, hidden)
    for lo, hi in _chunks(n, head.chunk_rows()):
        logits = head.logits(hidden[lo:hi], buffer)
        if values is not None and ids is not None:
            top, where = torch.topk(logits, topk, dim=-1)
            ids[lo:hi] = where
        norm = torch.logsumexp(logits, dim=-1, keepdim=True)
        out[lo:hi] = logits.gather(1, targets[lo:hi, None]).squeeze(1) - norm[:, 0]
        if values is not None:
            values[lo:hi] = top - norm
    return out, values, ids


class _Backward:
    """The projection's gradients, accumulated chunk by chunk: of the hidden states, and of
    the LoRA pair (through one folded weight's gradient when folding pays)."""

    def __init__(
        self, head: Head, hidden: torch.Tensor, entropy: torch.Tensor | None = None
    ) -> None:
        self.hidden = hidden.detach()
        #: Where `run` writes each position's entropy, when asked (`_normalise_entropy`).
        self.entropy = entropy
        self.spare: torch.Tensor | None = None
        device = hidden.device
        self.original = head.lora
        self.head = head.folded(hidden.shape[0], backward=True)
        self.grad_hidden = torch.zeros(hidden.shape, dtype=torch.float32, device=device)
        self.grad_weight = self.grad_a = self.grad_b = None
        self.buffer: torch.Tensor | None = None
        if head.lora is not None and self.head.lora is None:  # folded
            self.grad_weight = torch.zeros(
                self.head.weight.shape, dtype=torch.float32, device=device
            )
        elif self.head.lora is not None:
            a, b, _ = self.head.lora
            self.grad_a = torch.zeros(a.shape, dtype=torch.float32, device=device)
            self.grad_b = torch.zeros(b.shape, dtype=torch.float32, device=device)

    @torch.no_grad()
    def step(
        self,
        lo: int,
        hi: int,
        local: torch.Tensor,
        targets: torch.Tensor,
        upstream: Callable[[torch.Tensor], torch.Tensor],
        at: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """A chunk of rows: the target logprobs of its positions (`local`: their rows within
        the chunk), and the gradient of ``sum_p g_p * logprob_p`` added, where
        ``g = upstream(logprobs)``. Returns the logprobs."""
        head = self.head
        if self.buffer is None:
            self.buffer = _buffer(head, self.hidden)
        logits = head.logits(self.hidden[lo:hi], self.buffer)
        factor = 1 - (logits / head.softcap) ** 2 if head.softcap is not None else None
        if self.entropy is not None and at is not None:
            if self.spare is None:
                self.spare = torch.empty_like(self.buffer)
            lp, probs, total, entropy = _normalise_entropy(logits, local, targets, self.spare)
            self.entropy[at] = entropy
        else:
            lp, probs, total = _normalise(logits, local, targets)
        with torch.enable_grad():  # the loss's own derivative may use autograd
            g = upstream(lp).detach().float()
        per_row = torch.zeros(hi - lo, dtype=torch.float32, device=logits.device)
        per_row.index_add_(0, local, g)
        # d/dlogits: g at each target, minus each row's total g times its softmax
        grad = probs.mul_(per_row.neg_().unsqueeze(1).div_(total))
        grad.index_put_((local, targets), g, accumulate=True)
        if factor is not None:
            grad.mul_(factor)
        if head.logit_scale is not None:
            grad.mul_(head.logit_scale)
        h = self.hidden[lo:hi].float()
        weight = head.weight
        self.grad_hidden[lo:hi] = (grad.to(weight.dtype) @ weight).float()
        if self.grad_weight is not None:
            self.grad_weight.addmm_(grad.t(), h)
        elif head.lora is not None and self.grad_a is not None and self.grad_b is not None:
            a, b, scale = head.lora
            low = F.linear(h.to(a.dtype), a).float()  # [c, r]
            through_b = grad @ b.float()  # [c, r]
            self.grad_b.addmm_(grad.t(), low, alpha=scale)
            self.grad_a.addmm_(through_b.t(), h, alpha=scale)
            self.grad_hidden[lo:hi].addmm_(through_b, a.float(), alpha=scale)
        return lp

    def lora_grads(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(grad of A, grad of B), float32, or Nones without a LoRA pair."""
        if self.original is None:
            return None, None
        if self.grad_weight is not None:  # W' = W + s B A: dA = s B^T dW', dB = s dW' A^T
            a, b, scale = self.original
            return (
                scale * (b.detach().float().t() @ self.grad_weight),
                scale * (self.grad_weight @ a.detach().float().t()),
            )
        return self.grad_a, self.grad_b

    def run(
        self,
        rows: torch.Tensor,
        targets: torch.Tensor,
        upstream: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """Every chunk (`upstream(logprobs, positions)` gives their g); the logprobs."""
        out = torch.empty(len(rows), dtype=torch.float32, device=self.hidden.device)
        order, starts = _grouped(rows, self.hidden.shape[0])
        for lo, hi in _chunks(self.hidden.shape[0], self.head.chunk_rows()):
            at = order[int(starts[lo]) : int(starts[hi])]
            if len(at):
                out[at] = self.step(
                    lo, hi, rows[at] - lo, targets[at], functools.partial(_at, upstream, at), at
                )
        return out


def _at(
    upstream: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    at: torch.Tensor,
    logprobs: torch.Tensor,
) -> torch.Tensor:
    return upstream(logprobs, at)


def fused_loss_backward(
    head: Head,
    hidden: torch.Tensor,
    rows: torch.Tensor,
    targets: torch.Tensor,
    loss_grad: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Target logprobs at every position and the gradient of the loss w.r.t. `hidden`.

    `loss_grad(logprobs, positions)` returns ``d loss / d logprob`` at those positions (the
    loss being a sum of per-position terms). The LoRA pair of `head`, if any, gets its
    gradient added to ``.grad``. `hidden` is ``[n, hidden]`` (read detached); returns
    (logprobs [positions], gradient of `hidden` [n, hidden]). With `entropy` (len(rows)),
    each position's entropy is written into it.
    """
    backward = _Backward(head, hidden, entropy)
    out = backward.run(rows, targets, loss_grad)
    if head.lora is not None:
        for param, value in zip(head.lora[:2], backward.lora_grads(), strict=True):
            if param.requires_grad and value is not None:
                value = value.to(param.dtype)
                if param.grad is None:
                    param.grad = value
                else:
                    param.grad.add_(value)
    return out, backward.grad_hidden.to(hidden.dtype)


class TargetLogprobs(torch.autograd.Function):
    """Differentiable target logprobs (w.r.t. the hidden states and the projection's LoRA
    pair), chunked both ways; the backward recomputes each chunk's logits."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        a: torch.Tensor | None,
        b: torch.Tensor | None,
        head: Head,
        rows: torch.Tensor,
        targets: torch.Tensor,
    ) -> torch.Tensor:
        ctx.head = head
        ctx.save_for_backward(hidden, rows, targets)
        return target_logprobs(head, hidden, rows, targets)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        hidden, rows, targets = ctx.saved_tensors
        backward = _Backward(ctx.head, hidden)
        backward.run(rows, targets, lambda _, at: grad_out[at])
        grad_a, grad_b = backward.lora_grads()
        return (backward.grad_hidden.to(hidden.dtype), grad_a, grad_b, None, None, None)


def differentiable_target_logprobs(
    head: Head, hidden: torch.Tensor, rows: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """`target_logprobs` with autograd (see `TargetLogprobs`)."""
    a, b = (head.lora[0], head.lora[1]) if head.lora is not None else (None, None)
    result: torch.Tensor = TargetLogprobs.apply(  # type: ignore[no-untyped-call]
        hidden, a, b, head, rows, targets
    )
    return result
