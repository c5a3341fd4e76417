"""Token masks for a forced tool call: every token that keeps the reply within the call's
grammar, for the whole vocabulary at once.

Why: the scanner (`engine.server.tool_call_constraint`) says of one candidate token at a
time whether the reply can still become a call. An untrained model mostly draws tokens that
cannot, and on a 151,936-token vocabulary finding one that can meant trying thousands of
tokens in Python per step (the real-format Qwen3 fixture sampled 4.9 tokens/s named against
230 free). llguidance, a token-level grammar engine written in Rust, computes the bitmask
of every token whose bytes the grammar allows next in microseconds to a millisecond;
applying it is one tensor operation per step, so the drawn token already fits and the
scanner only confirms it (and keeps the `max_tokens` budget, `engine.local.generation`).
Measured in bench/bench_tool_calls.py.

The grammar (lark, with `%json` for a tool's parameters): the frame's opening, then
``{"name": "<tool>", "arguments": <parameters>}`` for one of the allowed tools (so
"required" among several tools constrains the name choice), with ", " and ": " as separators
and no other whitespace, then the frame's closing. Text that a tokenizer holds as a special
token (Qwen3's ``<tool_call>``) is written as that token. The grammar is a subset of what the
scanner allows, so a token the mask lets through nearly always passes it; where they
disagree (a number longer than the scanner's limit), the scanner's own redraw decides. A
schema llguidance cannot compile, or a tokenizer it cannot view, leaves the row to the
scanner alone: slower, never wrong.

The tokenizer's view (every token's bytes: 1–7 s for Qwen3's vocabulary on a loaded 2-core
machine) is built once per model, on the sampling thread that first needs it, never on the
event loop, and kept by the model (`TokenMasks`).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: llguidance's options for a tool's parameters: JSON as the scanner wants it (no
#: whitespace but single spaces after "," and ":"); keywords it does not implement are
#: ignored rather than refused.
_JSON_OPTIONS = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
    "lenient": True,
}
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class TokenMasks:
    """The token masks of one model's tokenizer: its llguidance view, built on first use."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self._lock = threading.Lock()
        self._view: Any = None
        self._unavailable = False

    def view(self) -> Any | None:
        """The tokenizer as llguidance sees it, or None if it cannot (built once)."""
        with self._lock:
            if self._view is None and not self._unavailable:
                try:
                    self._view = _build_view(self.tokenizer, self.vocab_size)
                except Exception:
                    self._unavailable = True
            return self._view

    def matcher(self, constraint: Any, prefix: str) -> Any | None:
        """A matcher for a reply held to `constraint` (a `ToolCallConstraint` or a
        `FramedCallConstraint`) that has `prefix` (its prefill) written, or None where
        there is no grammar for it."""
        view = self.view()
        if view is None:
            return None
        try:
            from llguidance import LLMatcher

            grammar = call_grammar(constraint, prefix, self.tokenizer, view)
            if grammar is None:
                return None
            matcher = LLMatcher(view, grammar, log_level=0)
            if matcher.is_error():
                return None
            if prefix and not matcher.consume_tokens(
                list(self.tokenizer.encode(prefix, add_special_tokens=False))
            ):
                return None
        except Exception:
            return None
        return None if matcher.is_error() else matcher

    def allowed(self, matchers: Sequence[Any | None], vocab: int) -> torch.Tensor | None:
        """A [rows, vocab] boolean mask, one row per matcher (None: every token), or None
        if no row has a matcher. A row whose grammar allows nothing allows everything
        (the scanner then decides)."""
        if all(m is None for m in matchers):
            return None
        import numpy as np
        import torch

        width = (vocab + 7) // 8
        packed = np.full((len(matchers), width), 0xFF, dtype=np.uint8)
        for i, m in enumerate(matchers):
            if m is None or m.is_stopped():
                continue
            bits = np.frombuffer(m.compute_bitmask(), dtype=np.uint8)[:width]
            if bits.any():
                packed[i] = 0
                packed[i, : len(bits)] = bits
        mask = np.unpackbits(packed, axis=1, bitorder="little")[:, :vocab]
        return torch.from_numpy(mask.astype(bool))


def advance(matcher: Any, token: int) -> Any | None:
    """The matcher after `token`, or None once it cannot follow the reply any more."""
    if matcher is None or matcher.is_stopped():
        return None
    return matcher if matcher.consume_token(token) and not matcher.is_error() else None


def call_grammar(constraint: Any, prefix: str, tokenizer: Any, view: Any) -> str | None:
    """The lark grammar of a reply held to `constraint`, from its first character."""
    inner = getattr(constraint, "inner", None)
    if inner is not None:
        opening, closing = constraint.opening, constraint.closing
    else:
        inner = constraint
        brace = prefix.find("{")
        opening, closing = (prefix[:brace] if brace >= 0 else prefix), ""
    schemas = getattr(inner, "schemas", None)
    if not inner.tool_names or schemas is None:
        return None
    calls = []
    rules = []
    for i, name in enumerate(inner.tool_names):
        schema = schemas.get(name)
        schema = dict(schema) if isinstance(schema, dict) else {"type": "object"}
        if isinstance(schema.get("properties"), dict) and schema["properties"]:
            schema.setdefault("additionalProperties", False)
        schema["x-guidance"] = _JSON_OPTIONS
        head = '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": '
        rules.append(f'call_{i}: {json.dumps(head)} args_{i} "}}"')
        rules.append(f"args_{i}: %json {json.dumps(schema)}")
        calls.append(f"call_{i}")
    start = " ".join(
        p
        for p in (
            _literal(opening, tokenizer, view),
            "(" + " | ".join(calls) + ")",
            _literal(closing, tokenizer, view),
        )
        if p
    )
    return "\n".join([f"start: {start}", *rules])


def _literal(text: str, tokenizer: Any, view: Any) -> str:
    """`text` as lark, with the parts a tokenizer holds as special tokens written as those
    tokens (llguidance matches a special token only by its id)."""
    if not text:
        return ""
    parts: list[str] = []
    plain: list[int] = []
    for token in tokenizer.encode(text, add_special_tokens=False):
        if view.is_special_token(token):
            if plain:
                parts.append(json.dumps(tokenizer.decode(plain)))
                plain = []
            parts.append(f"<[{token}]>")
        else:
            plain.append(token)
    if plain:
        parts.append(json.dumps(tokenizer.decode(plain)))
    return " ".join(parts)


def _build_view(tokenizer: Any, vocab_size: int) -> Any:
    """llguidance's view of a tokenizer: a Hugging Face fast tokenizer directly, any other
    (the embedded word-level one) from each token's bytes."""
    import llguidance

    if getattr(tokenizer, "is_fast", False):
        backend = tokenizer.backend_tokenizer
        if backend.padding is None and backend.truncation is None:
            # what `from_tokenizer` does, without its copy of the tokenizer (seconds for
            # a 151,643-rank BPE), which only serves to drop padding and truncation
            return llguidance.LLTokenizer(
                backend.to_str(), n_vocab=vocab_size, eos_token=tokenizer.eos_token_id
            )
        import llguidance.hf  # imports transformers: only for its tokenizers

        return llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)
    return llguidance.LLTokenizer(
        llguidance.TokenizerWrapper(_TokenBytes(tokenizer)), n_vocab=vocab_size
    )


class _TokenBytes:
    """A tokenizer as llguidance's `TokenizerWrapper` reads it: each token's bytes (a
    "<0xNN>" byte token as that byte), its special ids, and `encode` as a call."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.eos_token_id = tokenizer.eos_token_id
        self.bos_token_id = getattr(tokenizer, "bos_token_id", None)
        self.special_token_ids = list(getattr(tokenizer, "all_special_ids", []))
        tokens: list[bytes] = []
        for i in range(len(tokenizer)):
            byte = _BYTE_TOKEN.fullmatch(str(tokenizer.convert_ids_to_tokens(i)))
            tokens.append(
                bytes([int(byte.group(1), 16)]) if byte else tokenizer.decode([i]).encode()
            )
        self.tokens = tokens

    def __call__(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))
