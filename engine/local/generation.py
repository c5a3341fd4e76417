"""Batched autoregressive sampling with a KV cache, for the local sampling client.

All rows of a batch (every sample of every merged request) go through the model together:
prompts are left-padded, position ids come from the attention mask, the cache is reused each
step, and rows that finish are dropped from the batch (and its cache). Per-row temperature,
top-k, top-p, length and stop conditions, so requests with different parameters can share one
batch. Reported logprobs are ``log_softmax(logits / temperature)`` of the chosen token (plain
model logprobs at temperature 1 and for greedy decoding), before any top-k/top-p filtering.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import tinker
import torch

from engine.local.errors import bad_request
from engine.local.tokenizer import WordTokenizer

DEFAULT_MAX_TOKENS = 64


@dataclass
class GenRequest:
    """One `sample` call, normalised and validated."""

    prompt: list[int]
    num_samples: int
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    seed: int | None
    stop_ids: frozenset[int]
    stop_strings: tuple[str, ...]
    include_prompt_logprobs: bool = False
    prompt_logprobs_last_n: int | None = None


@dataclass
class GenResult:
    tokens: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)
    stop_reasons: list[str] = field(default_factory=list)
    prompt_logprobs: np.ndarray | None = None


def make_request(
    prompt: tinker.ModelInput,
    num_samples: int,
    params: tinker.SamplingParams,
    tokenizer: WordTokenizer,
    max_context: int,
    *,
    include_prompt_logprobs: bool = False,
    prompt_logprobs_last_n: int | None = None,
) -> GenRequest:
    """Validate a sample call against Tinker's rules, with messages that say what is wrong."""
    if not isinstance(prompt, tinker.ModelInput):
        raise bad_request(f"prompt must be a tinker.ModelInput, got {type(prompt).__name__}")
    try:
        ids = prompt.to_ints()
    except ValueError as exc:
        raise bad_request(f"prompt: {exc} (the local backend takes token chunks only)") from None
    vocab = len(tokenizer)
    if not ids:
        raise bad_request("prompt is empty: the local model needs at least one token")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise bad_request(f"prompt has token id(s) outside the vocabulary [0, {vocab}): {bad[:5]}")
    if len(ids) >= max_context:
        raise bad_request(
            f"prompt has {len(ids)} tokens; the model's context is {max_context} tokens"
        )
    if not isinstance(num_samples, int) or num_samples < 1:
        raise bad_request(f"num_samples must be a positive integer, got {num_samples!r}")
    if not isinstance(params, tinker.SamplingParams):
        raise bad_request(
            f"sampling_params must be a tinker.SamplingParams, got {type(params).__name__}"
        )
    max_tokens = DEFAULT_MAX_TOKENS if params.max_tokens is None else int(params.max_tokens)
    if max_tokens < 1:
        raise bad_request(f"sampling_params.max_tokens must be >= 1, got {params.max_tokens}")
    max_tokens = min(max_tokens, max_context - len(ids))
    temperature = float(params.temperature)
    if not temperature >= 0.0:
        raise bad_request(f"sampling_params.temperature must be >= 0, got {params.temperature}")
    top_k = int(params.top_k)
    if top_k < -1:
        raise bad_request(f"sampling_params.top_k must be -1 (off) or >= 0, got {top_k}")
    top_p = float(params.top_p)
    if not 0.0 < top_p <= 1.0:
        raise bad_request(f"sampling_params.top_p must be in (0, 1], got {top_p}")

    stop = params.stop
    stop_ids: set[int] = set()
    stop_strings: list[str] = []
    if stop is None:
        stop_ids.add(tokenizer.eos_token_id)
    elif isinstance(stop, str):
        stop_strings.append(stop)
        stop_ids.add(tokenizer.eos_token_id)
    else:
        items = list(stop)
        for item in items:
            if isinstance(item, str):
                stop_strings.append(item)
            elif isinstance(item, int) and not isinstance(item, bool):
                if not 0 <= item < vocab:
                    raise bad_request(f"stop token id {item} is outside the vocabulary")
                stop_ids.add(item)
            else:
                raise bad_request(f"stop entries must be str or int, got {item!r}")
        if stop_strings:
            stop_ids.add(tokenizer.eos_token_id)  # strings stop at EOS too; ids replace it
    if any(s == "" for s in stop_strings):
        raise bad_request("stop strings must be non-empty")

    if prompt_logprobs_last_n is not None:
        if not include_prompt_logprobs:
            raise bad_request("prompt_logprobs_last_n requires include_prompt_logprobs=True")
        if not 1 <= prompt_logprobs_last_n <= len(ids) - 1:
            raise bad_request(
                f"prompt_logprobs_last_n must be between 1 and len(prompt) - 1 = {len(ids) - 1}"
            )
    return GenRequest(
        prompt=ids,
        num_samples=num_samples,
        max_tokens=max_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=None if params.seed is None else int(params.seed),
        stop_ids=frozenset(stop_ids),
        stop_strings=tuple(stop_strings),
        include_prompt_logprobs=include_prompt_logprobs,
        prompt_logprobs_last_n=prompt_logprobs_last_n,
    )


@torch.inference_mode()
def prompt_logprobs(model: torch.nn.Module, ids: Sequence[int]) -> np.ndarray:
    """``[nan, log p(ids[1] | ids[:1]), ...]`` as float32."""
    x = torch.tensor([list(ids)], dtype=torch.long)
    logits = model(input_ids=x).logits[0, :-1].float()
    lp = torch.log_softmax(logits, dim=-1).gather(1, x[0, 1:, None]).squeeze(1)
    out = np.full(len(ids), np.nan, dtype=np.float32)
    out[1:] = lp.numpy()
    return out


def _filter_top_k_top_p(
    scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """Mask logits outside each row's top-k, then outside its top-p nucleus."""
    sorted_logits, sorted_idx = torch.sort(scaled, dim=-1, descending=True)
    vocab = scaled.shape[-1]
    ranks = torch.arange(vocab).unsqueeze(0)
    remove = ranks >= top_k.unsqueeze(1)
    sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
    probs = torch.softmax(sorted_logits, dim=-1)
    before = torch.cumsum(probs, dim=-1) - probs  # mass strictly before each token
    remove = before > top_p.unsqueeze(1)  # always keeps the first token
    sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
    return torch.full_like(scaled, float("-inf")).scatter(1, sorted_idx, sorted_logits)


def _draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row by inverse CDF: one uniform per row (torch.multinomial is ~20x slower
    here). Zero-probability tokens are never drawn (first index whose CDF exceeds u)."""
    cdf = probs.cumsum(dim=-1)
    u = torch.rand((probs.shape[0], 1), generator=generator) * cdf[:, -1:]
    chosen = torch.searchsorted(cdf, u, right=True).squeeze(1)
    overflow = chosen >= probs.shape[1]  # u rounded up to the total: take the last live token
    if bool(overflow.any()):
        chosen = torch.where(overflow, cdf.argmax(dim=-1), chosen)
    return chosen


def _hits_stop_string(
    tokenizer: WordTokenizer, tokens: list[int], stops: tuple[str, ...], window: int
) -> bool:
    text = tokenizer.decode(tokens[-window:])
    return any(s in text for s in stops)


@torch.inference_mode()
def generate(
    model: torch.nn.Module,
    tokenizer: WordTokenizer,
    requests: Sequence[GenRequest],
    generator: torch.Generator,
) -> list[GenResult]:
    """Sample every row of every request in one batched, cached decoding loop."""
    from transformers import DynamicCache

    rows: list[GenRequest] = [r for r in requests for _ in range(r.num_samples)]
    num_rows = len(rows)
    pad = tokenizer.pad_token_id
    width = max(len(r.prompt) for r in rows)
    input_ids = torch.full((num_rows, width), pad, dtype=torch.long)
    attention = torch.zeros((num_rows, width), dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(r.prompt)
        input_ids[i, width - n :] = torch.tensor(r.prompt, dtype=torch.long)
        attention[i, width - n :] = 1
    positions = (attention.cumsum(-1) - 1).clamp(min=0)

    temperature = torch.tensor([r.temperature for r in rows], dtype=torch.float32)
    greedy = temperature == 0.0
    safe_temperature = torch.where(greedy, torch.ones_like(temperature), temperature)
    vocab = len(tokenizer)
    top_k = torch.tensor([r.top_k if r.top_k > 0 else vocab for r in rows], dtype=torch.long)
    top_p = torch.tensor([r.top_p for r in rows], dtype=torch.float32)
    filtering = bool((top_k < vocab).any() or (top_p < 1.0).any())
    all_greedy = bool(greedy.all())

    # Enough trailing tokens to contain any stop string (a byte token is 1/4 of a character).
    windows = [4 * max((len(s) for s in r.stop_strings), default=0) + 8 for r in rows]
    out_tokens: list[list[int]] = [[] for _ in rows]
    out_logprobs: list[list[float]] = [[] for _ in rows]
    reasons: list[str | None] = [None] * num_rows
    live = list(range(num_rows))  # batch position -> row

    cache = DynamicCache()
    out = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    last_pos = positions[:, -1]
    while True:
        logits = out.logits[:, -1, :].float()
        scaled = logits / safe_temperature.unsqueeze(1)
        logp_all = torch.log_softmax(scaled, dim=-1)
        if all_greedy:
            chosen = logits.argmax(dim=-1)
        else:
            sample_from = _filter_top_k_top_p(scaled, top_k, top_p) if filtering else scaled
            chosen = _draw(torch.softmax(sample_from, dim=-1), generator)
            if bool(greedy.any()):
                chosen = torch.where(greedy, logits.argmax(dim=-1), chosen)
        chosen_lp = logp_all.gather(1, chosen.unsqueeze(1)).squeeze(1)

        keep: list[int] = []
        for b, (tok, lp) in enumerate(zip(chosen.tolist(), chosen_lp.tolist(), strict=True)):
            row = live[b]
            r = rows[row]
            out_tokens[row].append(tok)
            out_logprobs[row].append(lp)
            if tok in r.stop_ids or (
                r.stop_strings
                and _hits_stop_string(tokenizer, out_tokens[row], r.stop_strings, windows[row])
            ):
                reasons[row] = "stop"
            elif len(out_tokens[row]) >= r.max_tokens:
                reasons[row] = "length"
            else:
                keep.append(b)
        if not keep:
            break
        if len(keep) < len(live):
            index = torch.tensor(keep, dtype=torch.long)
            cache.batch_select_indices(index)
            attention = attention.index_select(0, index)
            last_pos = last_pos.index_select(0, index)
            chosen = chosen.index_select(0, index)
            safe_temperature = safe_temperature.index_select(0, index)
            greedy = greedy.index_select(0, index)
            top_k = top_k.index_select(0, index)
            top_p = top_p.index_select(0, index)
            live = [live[b] for b in keep]
        attention = torch.cat([attention, attention.new_ones((len(live), 1))], dim=1)
        last_pos = last_pos + 1
        out = model(
            input_ids=chosen.unsqueeze(1),
            attention_mask=attention,
            position_ids=last_pos.unsqueeze(1),
            past_key_values=cache,
            use_cache=True,
        )

    results: list[GenResult] = []
    row = 0
    for r in requests:
        res = GenResult()
        for _ in range(r.num_samples):
            res.tokens.append(out_tokens[row])
            res.logprobs.append(out_logprobs[row])
            res.stop_reasons.append(reasons[row] or "length")
            row += 1
        if r.include_prompt_logprobs:
            plp = prompt_logprobs(model, r.prompt)
            if r.prompt_logprobs_last_n is not None:
                plp[: len(r.prompt) - r.prompt_logprobs_last_n] = np.nan
            res.prompt_logprobs = plp
        results.append(res)
    return results
