"""Batched autoregressive sampling with a KV cache, for the local sampling client.

All rows of a batch (every sample of every merged request) go through the model together:
each distinct prompt is prefilled once (left-padded, position ids from the attention mask) and
its cache is then copied to every row that continues it; each decoding step is one forward
pass for all live rows, and rows that finish are dropped from the batch and its cache. Per-row
temperature, top-k, top-p, length and stop conditions, so requests with different parameters
share one batch. Reported logprobs are ``log_softmax(logits / temperature)`` of the chosen
token (plain model logprobs at temperature 1 and for greedy decoding), before any top-k/top-p
filtering; top-k logprobs (``topk_sample_logprobs``) come from the same distribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tinker
import torch
from tinker.types.topk_logprobs import MASK_LOGPROB, TopkLogprobs

from tinker_tui.engine.local.errors import bad_request
from tinker_tui.engine.local.token_masks import advance
from tinker_tui.engine.local.unembed import Head, scored

DEFAULT_MAX_TOKENS = 64
MAX_TOPK = 1000


@dataclass(frozen=True)
class ModelFacts:
    """What request validation and decoding need to know about a model."""

    tokenizer: Any
    vocab_size: int
    max_context: int
    pad_token_id: int
    eos_ids: frozenset[int]
    device: torch.device
    #: The model's `token_masks.TokenMasks`: constrained rows draw within a grammar mask.
    masks: Any = None


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
    topk_prompt: int = 0
    topk_sample: int = 0
    #: Optional: keeps the sampled text within a shape (`check(text)` -> "reject",
    #: "continue", "done", or "end": whole, and only a stop token may follow; see
    #: engine.server.tool_call_constraint and engine.server.native_calls). `text` is
    #: `constraint_prefix` plus the decoded sample so far.
    constraint: Any = None
    constraint_prefix: str = ""


@dataclass
class GenResult:
    tokens: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)
    stop_reasons: list[str] = field(default_factory=list)
    topk: list[TopkLogprobs | None] = field(default_factory=list)
    prompt_logprobs: np.ndarray | None = None
    topk_prompt: TopkLogprobs | None = None


def _check_k(name: str, value: int, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise bad_request(f"{name} must be a non-negative integer, got {value!r}")
    if value > limit:
        raise bad_request(f"{name} must be at most {limit}, got {value}")
    return value


def make_request(
    prompt: tinker.ModelInput,
    num_samples: int,
    params: tinker.SamplingParams,
    facts: ModelFacts,
    *,
    include_prompt_logprobs: bool = False,
    prompt_logprobs_last_n: int | None = None,
    topk_prompt_logprobs: int = 0,
    topk_sample_logprobs: int = 0,
) -> GenRequest:
    """Validate a sample call against Tinker's rules, with messages that say what is wrong."""
    if not isinstance(prompt, tinker.ModelInput):
        raise bad_request(f"prompt must be a tinker.ModelInput, got {type(prompt).__name__}")
    try:
        ids = prompt.to_ints()
    except ValueError as exc:
        raise bad_request(f"prompt: {exc} (the local backend takes token chunks only)") from None
    vocab = facts.vocab_size
    if not ids:
        raise bad_request("prompt is empty: the local model needs at least one token")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise bad_request(f"prompt has token id(s) outside the vocabulary [0, {vocab}): {bad[:5]}")
    if len(ids) >= facts.max_context:
        raise bad_request(
            f"prompt has {len(ids)} tokens; the model's context is {facts.max_context} tokens"
        )
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise bad_request(f"num_samples must be a positive integer, got {num_samples!r}")
    if not isinstance(params, tinker.SamplingParams):
        raise bad_request(
            f"sampling_params must be a tinker.SamplingParams, got {type(params).__name__}"
        )
    max_tokens = DEFAULT_MAX_TOKENS if params.max_tokens is None else int(params.max_tokens)
    if max_tokens < 1:
        raise bad_request(f"sampling_params.max_tokens must be >= 1, got {params.max_tokens}")
    max_tokens = min(max_tokens, facts.max_context - len(ids))
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
        stop_ids |= facts.eos_ids
    elif isinstance(stop, str):
        stop_strings.append(stop)
        stop_ids |= facts.eos_ids
    else:
        for item in list(stop):
            if isinstance(item, str):
                stop_strings.append(item)
            elif isinstance(item, int) and not isinstance(item, bool):
                if not 0 <= item < vocab:
                    raise bad_request(f"stop token id {item} is outside the vocabulary")
                stop_ids.add(item)
            else:
                raise bad_request(f"stop entries must be str or int, got {item!r}")
        if stop_strings:
            stop_ids |= facts.eos_ids  # strings stop at EOS too; ids replace it
    if any(s == "" for s in stop_strings):
        raise bad_request("stop strings must be non-empty")

    if prompt_logprobs_last_n is not None:
        if not (include_prompt_logprobs or topk_prompt_logprobs):
            raise bad_request("prompt_logprobs_last_n requires include_prompt_logprobs=True")
        if not 1 <= prompt_logprobs_last_n <= len(ids) - 1:
            raise bad_request(
                f"prompt_logprobs_last_n must be between 1 and len(prompt) - 1 = {len(ids) - 1}"
            )
    limit = min(MAX_TOPK, vocab)
    topk_prompt = _check_k("topk_prompt_logprobs", topk_prompt_logprobs, limit)
    topk_sample = _check_k("topk_sample_logprobs", topk_sample_logprobs, limit)
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
        topk_prompt=topk_prompt,
        topk_sample=topk_sample,
    )


@torch.inference_mode()
def prompt_logprobs(
    model: torch.nn.Module, ids: Sequence[int], device: torch.device, topk: int = 0
) -> tuple[np.ndarray, TopkLogprobs | None]:
    """``[nan, log p(ids[1] | ids[:1]), ...]`` as float32, and optionally the top-k
    ``(length, k)`` matrices (row 0 is the sentinel: nothing predicts the first token).
    The vocabulary projection runs in chunks of positions (`unembed`): a long prompt on a
    large vocabulary never holds its ``[length, vocab]`` logits."""

    x = torch.tensor([list(ids)], dtype=torch.long, device=device)
    backbone: Any = model.base_model
    hidden = backbone(input_ids=x).last_hidden_state[0, :-1]
    lp, values, indices = scored(Head.of(model), hidden, x[0, 1:], topk)
    out = np.full(len(ids), np.nan, dtype=np.float32)
    out[1:] = lp.cpu().numpy()
    if values is None or indices is None:
        return out, None
    token_ids = np.zeros((len(ids), topk), dtype=np.int32)
    lps = np.full((len(ids), topk), MASK_LOGPROB, dtype=np.float32)
    token_ids[1:] = indices.cpu().numpy()
    lps[1:] = values.cpu().numpy()
    return out, TopkLogprobs(token_ids=token_ids, logprobs=lps)


def _filter_top_k_top_p(
    scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """Mask logits outside each row's top-k, then outside its top-p nucleus."""
    sorted_logits, sorted_idx = torch.sort(scaled, dim=-1, descending=True)
    vocab = scaled.shape[-1]
    ranks = torch.arange(vocab, device=scaled.device).unsqueeze(0)
    remove = ranks >= top_k.unsqueeze(1)
    sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
    probs = torch.softmax(sorted_logits, dim=-1)
    before = torch.cumsum(probs, dim=-1) - probs  # mass strictly before each token
    remove = before > top_p.unsqueeze(1)  # always keeps the first token
    sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
    return torch.full_like(scaled, float("-inf")).scatter(1, sorted_idx, sorted_logits)


def _draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row by inverse CDF: one uniform per row from the (CPU) generator, so the
    same seed draws the same numbers on any device (torch.multinomial is ~20x slower here).
    Zero-probability tokens are never drawn (first index whose CDF exceeds u)."""
    cdf = probs.cumsum(dim=-1)
    u = torch.rand((probs.shape[0], 1), generator=generator).to(probs.device) * cdf[:, -1:]
    chosen = torch.searchsorted(cdf, u, right=True).squeeze(1)
    overflow = chosen >= probs.shape[1]  # u rounded up to the total: take the last live token
    if bool(overflow.any()):
        chosen = torch.where(overflow, cdf.argmax(dim=-1), chosen)
    return chosen


#: Draws a constrained row makes before it tries tokens in order of probability instead.
CONSTRAINED_DRAWS = 16


def _constrained_choice(
    r: GenRequest,
    tokens: list[int],
    tok: int,
    weights: torch.Tensor,
    greedy: bool,
    tokenizer: Any,
    token_text: dict[int, str],
    generator: torch.Generator,
) -> tuple[int | None, bool]:
    """A token for a row with a constraint: `tok` if it keeps the text within the shape,
    else another drawn from the row's sampling weights without the rejected ones (the
    most likely allowed one for greedy rows), then the most likely allowed one. Returns
    (the token, or None if no token with any weight is allowed; whether the text is then
    complete). `token_text` caches each token's own text."""
    state = r.constraint.start(r.constraint_prefix + tokenizer.decode(tokens))
    if state.verdict == "end" and r.stop_ids:
        # whole, and only the end of the turn may follow (even where sampling's filters
        # left an end token no weight): the drawn one, else the constraint's own
        end = getattr(r.constraint, "end_token", None)
        return (tok if tok in r.stop_ids else end if end in r.stop_ids else min(r.stop_ids)), True
    first_ok: dict[str, bool] = {}  # a text can only pass if its first character does
    # The budget: the fewest tokens that close the call (and end the turn, where the
    # constraint wants an end token) must still fit after this one.
    left = r.max_tokens - len(tokens)
    end = 1 if getattr(r.constraint, "end_token", None) is not None else 0
    closing = _closing_tokens(r.constraint, state, tokenizer)
    if closing is not None and closing and left <= len(closing) + end:
        forced = closing[0]
        text = tokenizer.decode([forced])
        return forced, state.copy().feed(text) == "done"
    near = closing is not None and left <= len(closing) + end + BUDGET_WATCH

    def verdict(candidate: int) -> str:
        result = shape_verdict(candidate)
        if near and result == "continue":
            after = state.copy()
            after.feed(token_text[candidate])
            need = _closing_tokens(r.constraint, after, tokenizer)
            if need is not None and len(need) + end > left - 1:
                return "reject"  # it would leave too few tokens to close the call
        return result

    def shape_verdict(candidate: int) -> str:
        if candidate in r.stop_ids:  # ending is allowed only once the text is complete
            return "done" if state.verdict in ("done", "end") else "reject"
        text = token_text.get(candidate)
        if text is None:
            text = token_text[candidate] = tokenizer.decode([candidate])
        if not text:  # no text (a padding row of the vocabulary): it never advances a shape
            return "reject"
        if text:
            ok = first_ok.get(text[0])
            if ok is None:
                ok = first_ok[text[0]] = state.copy().feed(text[0]) != "reject"
            if not ok:
                return "reject"
        result: str = state.copy().feed(text)  # the constraint is duck-typed (see GenRequest)
        return result

    cloned = False
    for _ in range(CONSTRAINED_DRAWS):
        v = verdict(tok)
        if v != "reject":
            return tok, v == "done"
        if not cloned:  # the batch's weights are shared: redraw from this row's own copy
            weights, cloned = weights.clone(), True
        weights[tok] = 0.0
        if not bool((weights > 0).any()):
            return None, False
        tok = int(weights.argmax()) if greedy else int(_draw(weights.unsqueeze(0), generator))
    if near and closing:
        # near the budget's end, where most tokens would leave the call too little room:
        # the first token of the shortest closing (trying every allowed token in turn cost
        # thousands of checks per step on a large vocabulary)
        forced = closing[0]
        return forced, state.copy().feed(tokenizer.decode([forced])) == "done"
    order = torch.argsort(weights, descending=True)
    live = int((weights > 0).sum())
    for candidate in order[:live].tolist():
        v = verdict(candidate)
        if v != "reject":
            return candidate, v == "done"
    return None, False


#: How near the budget's end (in tokens beyond the fewest that close a forced call) the
#: sampler checks that a token leaves the call room to close.
BUDGET_WATCH = 12


def _closing_tokens(constraint: Any, state: Any, tokenizer: Any) -> list[int] | None:
    """The tokens of the shortest text that makes a constrained reply whole, or None where
    the constraint cannot say (`completion` is optional, duck-typed)."""
    complete = getattr(constraint, "completion", None)
    text = complete(state) if complete is not None else None
    if text is None:
        return None
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def _matchers(facts: ModelFacts, rows: Sequence[GenRequest]) -> list[Any]:
    """Per row, the grammar matcher of its constraint (`token_masks`), or None: one built
    per distinct constraint and prefill, copied for each of its rows."""
    out: list[Any] = [None] * len(rows)
    if facts.masks is None or all(r.constraint is None for r in rows):
        return out
    built: dict[tuple[int, str], Any] = {}
    for i, r in enumerate(rows):
        if r.constraint is None:
            continue
        key = (id(r.constraint), r.constraint_prefix)
        if key not in built:
            built[key] = facts.masks.matcher(r.constraint, r.constraint_prefix)
        out[i] = built[key].deep_copy() if built[key] is not None else None
    return out


def _hits_stop_string(
    tokenizer: Any, tokens: list[int], stops: tuple[str, ...], window: int
) -> bool:
    text = tokenizer.decode(tokens[-window:])
    return any(s in text for s in stops)


def new_cache(model: torch.nn.Module) -> Any:
    """An empty KV cache for `model`: its own (the embedded models), or transformers'."""
    make = getattr(model, "new_cache", None)
    if make is not None:
        return make()
    from transformers import DynamicCache

    return DynamicCache()


@torch.inference_mode()
def generate(
    model: torch.nn.Module,
    facts: ModelFacts,
    requests: Sequence[GenRequest],
    generator: torch.Generator,
) -> list[GenResult]:
    """Sample every row of every request in one batched, cached decoding loop."""
    device = facts.device
    rows: list[GenRequest] = [r for r in requests for _ in range(r.num_samples)]
    num_rows = len(rows)

    # Prefill each distinct prompt once, then give every row its prompt's cache.
    unique: dict[tuple[int, ...], int] = {}
    row_prompt = [unique.setdefault(tuple(r.prompt), len(unique)) for r in rows]
    prompts = list(unique)
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), facts.pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        attention[i, width - len(p) :] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    cache = new_cache(model)
    out = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    logits = out.logits[:, -1, :].float()
    if len(prompts) != num_rows:
        expand = torch.tensor(row_prompt, dtype=torch.long, device=device)
        cache.batch_select_indices(expand)
        logits = logits.index_select(0, expand)
        attention = attention.index_select(0, expand)
        positions = positions.index_select(0, expand)
    last_pos = positions[:, -1]

    def per_row(values: list[Any], dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=device)

    temperature = per_row([r.temperature for r in rows], torch.float32)
    greedy = temperature == 0.0
    safe_temperature = torch.where(greedy, torch.ones_like(temperature), temperature)
    vocab = logits.shape[-1]
    top_k = per_row([r.top_k if r.top_k > 0 else vocab for r in rows], torch.long)
    top_p = per_row([r.top_p for r in rows], torch.float32)
    filtering = bool((top_k < vocab).any() or (top_p < 1.0).any())
    all_greedy = bool(greedy.all())
    any_greedy = bool(greedy.any())
    topk_rows = [r.topk_sample for r in rows]

    # Enough trailing tokens to contain any stop string (a byte token is 1/4 of a character).
    windows = [4 * max((len(s) for s in r.stop_strings), default=0) + 8 for r in rows]
    out_tokens: list[list[int]] = [[] for _ in rows]
    out_logprobs: list[list[float]] = [[] for _ in rows]
    out_topk: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in rows]
    reasons: list[str | None] = [None] * num_rows
    live = list(range(num_rows))  # batch position -> row
    token_text: dict[int, str] = {}  # for constrained rows: each token's own text
    matchers = _matchers(facts, rows)  # per row: its grammar's state, or None

    while True:
        scaled = logits / safe_temperature.unsqueeze(1)
        logp_all = torch.log_softmax(scaled, dim=-1)
        if any(matchers[row] is not None for row in live):
            # constrained rows draw among the tokens their grammar allows: one mask for
            # the batch (the logprobs above stay the model's own)
            allowed = facts.masks.allowed([matchers[row] for row in live], logits.shape[-1])
            if allowed is not None:
                # greedy rows have temperature 1 here: their argmax of `scaled` is the
                # logits' own
                scaled = scaled.masked_fill(~allowed.to(device), float("-inf"))
        probs = None
        if all_greedy:
            chosen = scaled.argmax(dim=-1)
        else:
            sample_from = _filter_top_k_top_p(scaled, top_k, top_p) if filtering else scaled
            probs = torch.softmax(sample_from, dim=-1)
            chosen = _draw(probs, generator)
            if any_greedy:
                chosen = torch.where(greedy, scaled.argmax(dim=-1), chosen)
        complete: set[int] = set()  # rows whose constraint says the text is whole
        if any(rows[row].constraint is not None for row in live):
            weights = probs if probs is not None else torch.softmax(scaled, dim=-1)
            picks = chosen.tolist()
            for b, row in enumerate(live):
                r = rows[row]
                if r.constraint is None:
                    continue
                tok, done = _constrained_choice(
                    r,
                    out_tokens[row],
                    picks[b],
                    weights[b],
                    bool(greedy[b]),
                    facts.tokenizer,
                    token_text,
                    generator,
                )
                if tok is None:  # nothing keeps the shape: end the row as it is
                    tok, done = picks[b], True
                picks[b] = tok
                matchers[row] = advance(matchers[row], tok)
                if done:
                    complete.add(row)
            chosen = torch.tensor(picks, dtype=chosen.dtype, device=chosen.device)
        # The model's own logprob of the token (before any constraint), as the trainer
        # computes it.
        chosen_lp = logp_all.gather(1, chosen.unsqueeze(1)).squeeze(1)
        k_max = max(topk_rows[row] for row in live)
        if k_max:
            values, indices = torch.topk(logp_all, k_max, dim=-1)
            top_values, top_indices = values.cpu().numpy(), indices.cpu().numpy()

        keep: list[int] = []
        for b, (tok, lp) in enumerate(zip(chosen.tolist(), chosen_lp.tolist(), strict=True)):
            row = live[b]
            r = rows[row]
            out_tokens[row].append(tok)
            out_logprobs[row].append(lp)
            if r.topk_sample:
                out_topk[row].append(
                    (top_indices[b, : r.topk_sample], top_values[b, : r.topk_sample])
                )
            if (
                tok in r.stop_ids
                or row in complete
                or (
                    r.stop_strings
                    and _hits_stop_string(
                        facts.tokenizer, out_tokens[row], r.stop_strings, windows[row]
                    )
                )
            ):
                reasons[row] = "stop"
            elif len(out_tokens[row]) >= r.max_tokens:
                reasons[row] = "length"
            else:
                keep.append(b)
        if not keep:
            break
        if len(keep) < len(live):
            index = torch.tensor(keep, dtype=torch.long, device=device)
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
        logits = out.logits[:, -1, :].float()

    results: list[GenResult] = []
    row = 0
    for r in requests:
        res = GenResult()
        for _ in range(r.num_samples):
            res.tokens.append(out_tokens[row])
            res.logprobs.append(out_logprobs[row])
            res.stop_reasons.append(reasons[row] or "length")
            if r.topk_sample:
                ids = np.stack([i for i, _ in out_topk[row]]).astype(np.int32)
                lps = np.stack([v for _, v in out_topk[row]]).astype(np.float32)
                res.topk.append(TopkLogprobs(token_ids=ids, logprobs=lps))
            else:
                res.topk.append(None)
            row += 1
        if r.include_prompt_logprobs or r.topk_prompt:
            plp, topk = prompt_logprobs(model, r.prompt, device, r.topk_prompt)
            if r.prompt_logprobs_last_n is not None:
                first = len(r.prompt) - r.prompt_logprobs_last_n
                plp[:first] = np.nan
                if topk is not None:
                    topk.token_ids[:first] = 0
                    topk.logprobs[:first] = MASK_LOGPROB
            res.prompt_logprobs = plp if r.include_prompt_logprobs else None
            res.topk_prompt = topk
        results.append(res)
    return results
